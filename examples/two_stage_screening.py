"""The paper's worked example of two-stage deployment screening, on this machine's platforms.

The CARB paper's "Two-Stage Deployment Screening": 3,072 candidates are scored
with the source platform's CARB model and ranked by predicted energy; the top 100 are re-scored with
the target platform's model, checked against the deployment budget (75 J, 500 MB) and reduced to a
Pareto set of seven configurations -- a 99.8% cut in profiling load.

Here the source platform is PyTorch eager fp32 on this CPU and the target ONNX Runtime fp32 on
the same CPU ("prototype in PyTorch, deploy on ONNX Runtime"), over
search_spaces/carb_screening.toml (the same 3,072-config layout at CPU scale). This CPU has no
energy meter, so latency takes energy's place as the ranking target; the budget is 50 ms per
batch and the paper's 500 MB.

Models, first that exists: each platform's predictor (``load_predictor(platform)``, with this
machine's calibration when ``carb-nas calibrate`` made one); else fast-preset models trained
here on the shipped datasets (real measurements); else on SYNTHETIC rows (a formula, labelled
as such), so the example always runs.

    python examples/two_stage_screening.py [--top-k 100] [--validate N]

``--validate N`` profiles up to N Pareto configs with ONNX Runtime on this machine and prints
predicted vs measured.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from carb_nas import load_predictor
from carb_nas.costmodel import CostModel, model_inputs
from carb_nas.errors import CarbNasError
from carb_nas.screen import screen
from carb_nas.space import load_space

SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "carb_screening.toml"
BUDGETS = {"latency_ms": 50.0, "peak_mem_mb": 500.0}
OBJECTIVES = ("latency_ms_per_image", "peak_mem_mb")
PLATFORMS = {"source": "cpu/torch/fp32", "target": "cpu/onnxruntime/fp32"}


def get_model(platform: str) -> tuple[Any, str]:
    try:
        predictor = load_predictor(platform)
        return predictor, predictor.provenance.describe()
    except CarbNasError:
        pass
    try:
        from carb_nas.datasets import load_dataset

        rows = load_dataset(platform, ok_only=True)
        label = f"fast preset trained here on the shipped dataset ({len(rows)} measured rows)"
    except CarbNasError:
        rows, label = synthetic_rows(platform), "fast preset trained here on SYNTHETIC rows"
    model = CostModel(preset="fast", n_jobs=1).fit(
        model_inputs(rows), rows[["peak_mem_mb", "latency_ms"]], platform=platform
    )
    return model, label


def synthetic_rows(platform: str):
    """SYNTHETIC rows (not measurements): a CPU-like latency/memory formula."""
    from carb_nas.features import compute_features

    runtime = platform.split("/")[1]
    grid = load_space("cpu").grid()
    rows = grid.sample(600, random_state=0).reset_index(drop=True).assign(runtime=runtime)
    f = compute_features(rows)
    b = rows["batch_size"].to_numpy(dtype=float)
    speed = 25e9 * (1 - 0.6 * np.exp(-b / 8)) * (1.6 if runtime == "onnxruntime" else 1.0)
    rows["latency_ms"] = 0.1 + 1e3 * f["flops"] / speed
    rows["peak_mem_mb"] = 2 + f["tensor_peak_mb"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top-k", type=int, default=100)
    ap.add_argument(
        "--validate",
        type=int,
        default=0,
        metavar="N",
        help="profile up to N Pareto configs with ONNX Runtime on this machine",
    )
    args = ap.parse_args()

    source, s_label = get_model(PLATFORMS["source"])
    target, t_label = get_model(PLATFORMS["target"])
    print(f"source {PLATFORMS['source']}: {s_label}")
    print(f"target {PLATFORMS['target']}: {t_label}")

    t0 = time.perf_counter()
    # Per-batch latency and memory are both smallest at batch 1, so a Pareto set over them alone
    # collapses to one config; per-image latency against memory is the deployment trade-off.
    r = screen(
        SPACE,
        source,
        target,
        rank_by="latency_ms",
        top_k=args.top_k,
        budgets=BUDGETS,
        objectives=OBJECTIVES,
    )
    n = r.counts["candidates"]
    lat = r.shortlist["source_latency_ms"]

    def line(stage: str, count: int, note: str) -> None:
        print(f"{stage:<44} {count:>6,}   {100 * (1 - count / n):5.1f}% fewer   {note}")

    print(f"\nworked example on {SPACE.name} ({time.perf_counter() - t0:.1f} s)")
    line("candidates (2 x 4 x 8 x 4 x 12)", n, "")
    line(
        f"stage 1: top {args.top_k} by PyTorch-predicted latency",
        len(r.shortlist),
        f"shortlist latency {lat.min():.2f}-{lat.max():.2f} ms on {PLATFORMS['source']}",
    )
    budget = ", ".join(f"{k} <= {v:g}" for k, v in BUDGETS.items())
    line(
        "stage 2: ONNX Runtime re-score within budget",
        len(r.within_budget),
        f"{budget}; {100 * len(r.within_budget) / max(len(r.shortlist), 1):.0f}% of the "
        "shortlist passes",
    )
    line("Pareto set (latency per image, peak mem)", len(r.pareto), "the configs left to profile")
    print(f"Spearman rank correlation, source vs target latency on the shortlist: {r.spearman:.3f}")
    if not r.feasible:
        print("no shortlisted config meets the budget; closest:")
        print(r.least_violating.head(5).to_string(index=False))
        return
    cols = [
        "family",
        "depth",
        "width",
        "resolution",
        "batch_size",
        "source_latency_ms",
        "latency_ms",
        "peak_mem_mb",
    ]
    print(r.pareto[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))

    if args.validate:
        from carb_nas.validate import validate

        print(
            f"\nprofiling {min(args.validate, len(r.pareto))} Pareto configs with ONNX Runtime "
            "on this machine ..."
        )
        v = validate(
            r.pareto.head(args.validate),
            device="cpu",
            runtime="onnxruntime",
            precision="fp32",
            model=target,
            budgets=BUDGETS,
        )
        print(v.summary())


if __name__ == "__main__":
    main()
