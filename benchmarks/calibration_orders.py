"""Which configs to calibrate on, replayed on a pool measured on one machine (no measurement).

``research/runs/passes/calibration_pool_zen3/`` holds 300 shipped ResNet configs (a seeded draw
of the
ONNX Runtime fp32 configs under 40 M parameters) measured twice on a quiet AMD Zen 3 VM with
the calibration profiler (torch and ONNX Runtime fp32 alternating config by config, one row a
pass, each with its profile time ``profile_s``). Per seed, 40 configs are held out as the
validation set (reference: the mean of their two passes), and each way orders the rest:

- ``representative``: the product's :func:`carb_nas.calibrate.choose_configs` over the pool
  (greedy weighted facility location, the largest 5 % by parameters left out);
- ``farthest``: the former order (farthest-point from the config nearest the centre,
  distances weighted by the relative interval width, the largest quarter by parameters out);
- ``random``: a seeded shuffle;
- ``all``: every candidate row, no budget: the map's own limit on this pool.

The product's budget is simulated with each config's measured profile time: configs in order
until 80 % of ``--time-budget-s`` (per platform, default 30 s), then the configs the fitted
map fits worst measured again (their second pass; the faster kept) with the rest. The
calibration (:func:`carb_nas.costmodel.calibrate`) is scored on the held-out configs. As in
the product, each map has the column of the pool's CPU kind (read from its rows'
fingerprint; :func:`carb_nas.calibrate.module_ratio`): the exact node column where the kind
has node rows, else torch's module-model surrogate, whose traces are timed here and taken out
of torch's budget; ``--module-ratio 0`` leaves them out. Held-out configs are drawn only among
those the module model of that kind never trained on.

Last line: ``representative_mape=<..> farthest_mape=<..> random_mape=<..> all_mape=<..>``
(latency MAPE in %, mean over seeds and the two platforms). Measured (10 seeds, 30 s):
representative 5.68 (torch 6.24, ORT 5.12), farthest 6.62 (6.34 / 6.90), random 6.61 (7.15 /
6.07), every row 5.25 (5.69 / 4.81). With the batch-1 column (and held out only among configs
the module model never saw; with / without the module ratio): representative 5.50 / 5.64
(torch 5.87 / 6.15, ORT 5.12), farthest 6.39 / 6.39, random 6.39 / 6.54, every row 4.74 /
5.08.

``--pool research/runs/passes/calibration_pool_intel``: the same 300 configs measured the same
way on an Intel Xeon VM with AVX-512 and AMX, with / without the module ratio:
representative 8.18 / 9.34 (torch 6.59 / 8.91, ORT 9.77), farthest 8.79 / 10.26, random 8.33 /
9.51, every row 7.49 / 8.99 (torch 6.07 / 9.07). With the Intel kind's node models giving
both maps an exact column (``calibrate.module_ratio``; the node model loaded before the
budget, as in the product): representative 6.05 (torch 5.49, ORT 6.61), farthest 6.52, random
5.86, every row 5.22 (torch 5.13, ORT 5.32). With node rows of 1,500 configs: representative
5.61 (torch 5.31, ORT 5.91), farthest 6.18, random 5.52, every row 4.81.

    PYTHONPATH=. python benchmarks/calibration_orders.py [--seeds 10] [--time-budget-s 30]
        [--pool DIR] [--module-ratio 0|1]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import mean_absolute_percentage_error

from carb_nas.calibrate import INTERVAL_ALPHA, REMEASURE_SHARE, choose_configs, module_ratio
from carb_nas.costmodel import calibrate, load_default_model, model_inputs
from carb_nas.costmodel.registry import load_default_node_model, module_cpu_kind, zoo_dataset_paths
from carb_nas.space import CONFIG_COLUMNS

POOL = Path(__file__).resolve().parents[1] / "research/runs/passes/calibration_pool_zen3"
PLATFORMS = ("cpu/torch/fp32", "cpu/onnxruntime/fp32")
WAYS = ("representative", "farthest", "random", "all")
N_VALIDATE = 40


def pool_cpu_kind(rows: pd.DataFrame) -> str:
    """The module-model kind of the CPU that measured ``rows`` (its fingerprint's record)."""
    cpu = json.loads(rows["fingerprint"].iloc[0]).get("cpu", {})
    return module_cpu_kind(cpu.get("isa", []), cpu.get("vendor"))


def farthest_order(model, cand: pd.DataFrame) -> np.ndarray:
    """The former order of ``choose_configs`` (farthest point), over ``cand``."""
    X = model_inputs(cand[list(CONFIG_COLUMNS)])
    pred = model.predict(X, alpha=INTERVAL_ALPHA)
    width = np.log(
        pred["latency_ms_upper"].to_numpy(float) / pred["latency_ms_lower"].to_numpy(float)
    )
    weight = 1 + width / np.median(width)
    params = X["params"].astype(float).to_numpy()
    keep = np.flatnonzero(params <= np.quantile(params, 0.75))
    fam = (cand["family"].astype(str) == "bottleneck").to_numpy(float)
    knobs = np.column_stack(
        [np.log(cand[k].to_numpy(float)) for k in ("batch_size", "resolution", "width", "depth")]
        + [fam]
    )[keep]
    std = knobs.std(axis=0)
    knobs = (knobs - knobs.mean(axis=0)) / np.where(std > 0, std, 1.0)
    order = [int(np.argmin((knobs**2).sum(axis=1)))]
    dist = np.linalg.norm(knobs - knobs[order[0]], axis=1)
    for _ in range(len(keep) - 1):
        nxt = int(np.argmax(dist * weight[keep]))
        if dist[nxt] <= 0:
            break
        order.append(nxt)
        dist = np.minimum(dist, np.linalg.norm(knobs - knobs[nxt], axis=1))
    return keep[order]


def representative_order(model, platform: str, cand: pd.DataFrame) -> np.ndarray:
    chosen = choose_configs(model, platform, n=len(cand), max_predicted_ms=np.inf, candidates=cand)
    pos = {
        k: i for i, k in enumerate(cand[list(CONFIG_COLUMNS)].astype(str).itertuples(index=False))
    }
    return np.array(
        [pos[k] for k in chosen[list(CONFIG_COLUMNS)].astype(str).itertuples(index=False)]
    )


def budgeted_rows(model, order, first, second, cost, budget_s: float, ratio=None) -> pd.DataFrame:
    """The product's budget: the order's configs until 80 %, then the worst fitted again."""
    spent, chosen = 0.0, []
    for i in order:
        if chosen and spent + cost[i] > (1 - REMEASURE_SHARE) * budget_s:
            break
        chosen.append(int(i))
        spent += cost[i]
    rows = first.iloc[chosen].reset_index(drop=True).copy()
    cal = calibrate(model, rows, keep_uncalibrated=True, module_ratio=ratio)
    fitted = cal.predict(model_inputs(rows))
    miss = np.abs(np.log(rows["latency_ms"].to_numpy(float) / fitted["latency_ms"].to_numpy(float)))
    for j in np.argsort(-miss, kind="stable"):
        i = chosen[j]
        if spent + cost[i] > budget_s:
            continue  # a shorter one may still fit
        spent += cost[i]
        rows.loc[j, "latency_ms"] = min(rows.loc[j, "latency_ms"], second["latency_ms"].iloc[i])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--time-budget-s", type=float, default=30.0, help="per platform")
    ap.add_argument(
        "--pool", type=Path, default=POOL, help="a pool directory (default: the Zen 3's)"
    )
    ap.add_argument(
        "--module-ratio",
        type=int,
        choices=(0, 1),
        default=1,
        help="1 (the product): torch's map has the pool CPU kind's module ratio; 0: without",
    )
    args = ap.parse_args()
    scores: dict[str, list[float]] = {w: [] for w in WAYS}
    for platform in PLATFORMS:
        stem = platform.replace("/", "_")
        first = pd.read_parquet(args.pool / f"{stem}_pass1.parquet")
        second = pd.read_parquet(args.pool / f"{stem}_pass2.parquet")
        ok = ((first["status"] == "ok") & (second["status"] == "ok")).to_numpy()
        first, second = first[ok].reset_index(drop=True), second[ok].reset_index(drop=True)
        cost = first["profile_s"].to_numpy(float).copy()
        cost[0] = np.median(cost)  # the first call's one-off set-up (imports, first session)
        reference = (first["latency_ms"].to_numpy(float) + second["latency_ms"].to_numpy(float)) / 2
        model = load_default_model(platform, verbose=False)
        kind = pool_cpu_kind(first)
        load_default_node_model(kind, platform=platform)  # as the product: before the budget
        started = time.perf_counter()
        ratio = module_ratio(platform, model, kind) if args.module_ratio else None
        # as in the product, the ratio's traces come out of the platform's budget
        budget_s = args.time_budget_s - (time.perf_counter() - started if ratio else 0.0)
        # a held-out config the module model trained on would flatter its column
        paths = zoo_dataset_paths("cpu/torch/fp32", kind)
        trained = set(pd.read_csv(paths[0], usecols=["key"])["key"]) if paths else set()
        eligible = np.flatnonzero(~first["key"].isin(trained).to_numpy())
        per_way: dict[str, list[float]] = {w: [] for w in WAYS}
        for seed in range(args.seeds):
            held = np.random.default_rng(100 + seed).choice(eligible, N_VALIDATE, replace=False)
            rest = np.setdiff1d(np.arange(len(first)), held)
            cand = first.iloc[rest].reset_index(drop=True)
            X_held = model_inputs(first.iloc[held][list(CONFIG_COLUMNS)])
            orders = {
                "representative": representative_order(model, platform, cand),
                "farthest": farthest_order(model, cand),
                "random": np.random.default_rng(seed).permutation(len(cand)),
            }
            orders["all"] = np.arange(len(cand))
            for way, order in orders.items():
                rows = (
                    cand
                    if way == "all"
                    else budgeted_rows(model, rest[order], first, second, cost, budget_s, ratio)
                )
                cal = calibrate(model, rows, keep_uncalibrated=True, module_ratio=ratio)
                pred = cal.predict(X_held)
                mape = 100 * mean_absolute_percentage_error(
                    reference[held], pred["latency_ms"].to_numpy(float)
                )
                per_way[way].append(mape)
                scores[way].append(mape)
        print(
            f"{platform}: latency MAPE on {N_VALIDATE} held-out configs, mean of {args.seeds} "
            "seeds: " + ", ".join(f"{w} {np.mean(v):.2f} %" for w, v in per_way.items())
        )
    print(" ".join(f"{w}_mape={np.mean(v):.2f}" for w, v in scores.items()))


if __name__ == "__main__":
    main()
