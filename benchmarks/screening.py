"""Screening throughput: 1,000,000 configs end to end through `carb_nas.screen.screen`.

End to end = config frame -> architecture features -> stage 1 with the source platform's
CARB-preset model (cpu/torch/fp32) -> top K -> stage 2 with the target platform's CARB-preset
model (cpu/onnxruntime/fp32) -> budgets -> Pareto set. The models come from the default-model
registry (``carb_nas.costmodel.load_default_model``: trained on the shipped real datasets on
first use, cached), CARB preset without offsets.

What makes it fast, all of it inside ``screen`` (nothing benchmark-specific):

- features are closed form and vectorized (carb_nas.features, millions of configs/s);
- the target model only sees the K shortlisted configs (the two-stage design itself);
- model inputs are predicted once per distinct row (exact reuse);
- stage 1 is *distilled* above 200,000 candidates: the source model scores a random sample,
  a fast XGBoost surrogate of the ranking target is fitted to it, and the source model then
  re-scores every candidate the surrogate cannot rule out with a margin of 1.5x its worst
  hold-out error. The shortlist is the top K by *source-model* predictions; a candidate is
  left unscored only when the surrogate ranks it clearly out. The benchmark checks the
  shortlist against exhaustive scoring on a 100,000-config subset.

Naive path (the ratio's denominator): per config, build the nn.Module, trace its features on
the meta device (``trace_features``), and predict it alone with the source model; timed on a
small sample and extrapolated.

    nice python benchmarks/screening.py [--n 1000000] [--top-k 1000] [--naive-sample 20]

Last line: ``configs_per_s=<n> ratio_vs_naive=<n>``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd

from carb_nas.costmodel import load_default_model

BUDGETS = {"latency_ms": 50.0, "peak_mem_mb": 200.0}


def million_configs(n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` distinct configs drawn from a fine CPU grid (CARB's knob ranges, fp32)."""
    from carb_nas.space import Space

    space = Space.from_dict(
        {
            "name": "screening_benchmark",
            "carb_ranges": True,
            "knobs": {
                "family": ["basic", "bottleneck"],
                "width": {"start": 0.1, "stop": 2.0, "step": 0.025},
                "resolution": {"start": 32, "stop": 128, "step": 2},
                "batch_size": [
                    1,
                    2,
                    3,
                    4,
                    5,
                    6,
                    7,
                    8,
                    10,
                    12,
                    14,
                    16,
                    20,
                    24,
                    28,
                    32,
                    40,
                    48,
                    56,
                    64,
                    80,
                    96,
                    112,
                    128,
                    160,
                    192,
                    224,
                    256,
                ],
            },
            "family": {
                "basic": {"depth": [8, 10, 12, 14, 16, 18, 20, 26, 34, 50, 74, 98, 152]},
                "bottleneck": {"depth": [50, 65, 80, 101, 152]},
            },
        }
    )
    grid = space.grid()
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(grid), size=min(n, len(grid)), replace=False))
    return grid.iloc[idx].reset_index(drop=True), len(grid)


def naive_seconds_per_config(frame: pd.DataFrame, model, n: int) -> float:
    """Build, trace and predict one config at a time (the path without carb_nas.screen)."""
    from carb_nas.features import trace_features
    from carb_nas.models import build_model
    from carb_nas.space import CONFIG_COLUMNS, frame_to_configs

    sample = frame.sample(n, random_state=1)
    names = list(model.feature_names_in_)
    t0 = time.perf_counter()
    for config in frame_to_configs(sample):
        module = build_model(config, device="meta")
        feats = trace_features(
            module, (config.batch_size, 3, config.resolution, config.resolution), config.precision
        )
        row = {**{c: getattr(config, c) for c in CONFIG_COLUMNS}, **feats}
        row["runtime"] = model.platform_["runtime"]
        X = pd.DataFrame([{k: row[k] for k in names}])
        model.predict(X)
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--top-k", type=int, default=1000)
    ap.add_argument("--naive-sample", type=int, default=20)
    ap.add_argument(
        "--check",
        type=int,
        default=100_000,
        help="subset size for the exact-vs-distilled shortlist check (0: skip)",
    )
    args = ap.parse_args()
    os.nice(10)  # the machine is shared with profiling campaigns
    from carb_nas.screen import screen

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    recipe = {"preset": "carb", "target_offsets": None}
    source = load_default_model("cpu/torch/fp32", params=recipe)
    target = load_default_model("cpu/onnxruntime/fp32", params=recipe)
    s_src = s_tgt = "trained on the shipped dataset"
    for m in (source, target):
        m.set_params(n_jobs=1)  # OpenMP threads spin when the cores are shared
    frame, grid_size = million_configs(args.n)
    print(f"candidates: {len(frame):,} distinct configs drawn from a {grid_size:,}-config grid")
    print(f"source model: CARB preset, {s_src}; target model: CARB preset, {s_tgt}")

    t0 = time.perf_counter()
    r = screen(frame, source, target, rank_by="latency_ms", top_k=args.top_k, budgets=BUDGETS)
    total = time.perf_counter() - t0
    rate = len(frame) / total
    c = r.counts
    print(
        f"screen: {c['candidates']:,} -> top {c['shortlisted']:,} by source latency_ms -> "
        f"{c['within_budget']:,} within {BUDGETS} -> Pareto {c['pareto']} "
        f"(Spearman {c['spearman']:.3f}) in {total:.1f} s"
    )
    print("stages: " + ", ".join(f"{k} {v:.1f}" for k, v in r.stage_seconds.items()))
    print(f"stage 1: {r.ranking}")

    if args.check:
        sub = frame.sample(min(args.check, len(frame)), random_state=2).reset_index(drop=True)
        t1 = time.perf_counter()
        exact = screen(sub, source, target, "latency_ms", args.top_k, BUDGETS, stage1="exact")
        t_exact = time.perf_counter() - t1
        dist = screen(sub, source, target, "latency_ms", args.top_k, BUDGETS, stage1="distilled")
        cols = ["family", "depth", "width", "resolution", "batch_size"]
        same = set(exact.shortlist[cols].itertuples(index=False)) == set(
            dist.shortlist[cols].itertuples(index=False)
        )
        print(
            f"check on {len(sub):,} configs: distilled shortlist "
            f"{'identical to' if same else 'DIFFERS from'} exhaustive scoring "
            f"(exhaustive stage 1 ran at {len(sub) / t_exact:,.0f} configs/s; distilled "
            f"scored {dist.ranking.get('source_scored', 0):,} with the source model)"
        )

    per = naive_seconds_per_config(frame, source, args.naive_sample)
    print(
        f"naive: {per * 1e3:.0f} ms per config (build + meta trace + single-row CARB "
        f"predict, {args.naive_sample} configs) = {1 / per:.2f} configs/s"
    )
    print(f"configs_per_s={rate:.0f} ratio_vs_naive={rate * per:.0f}")


if __name__ == "__main__":
    main()
