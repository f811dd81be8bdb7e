"""How close does the search get to the exhaustive Pareto front, and how much does it evaluate?

A CPU space small enough to enumerate (104,832 configs: 16 depths x 24 widths x 13 resolutions
x 21 batch sizes) is scored exhaustively with the cost model; its budget-feasible Pareto front
is the reference. ``carb_nas.search`` (pymoo NSGA-II, then ``screened_refine``'s local search
of the front, default settings) then searches the same
space with an evaluation budget of 5% of it. Quality = hypervolume of the search's front over
the exhaustive front's hypervolume, both in objectives normalized to the exhaustive front's
[ideal, nadir] box, reference point 1.1 per objective (pymoo's HV indicator).

Objectives: per-image latency (throughput), peak memory per batch, and the built-in quality
proxy (a capacity proxy, not accuracy); budgets: latency_ms=25 per batch (a response-time
limit) and peak_mem_mb=150. The model is the FAST preset (same cascade, about 6x cheaper than
CARB) so that scoring all 104,832 configs exhaustively takes seconds; the search itself does not
depend on the preset.

    nice python benchmarks/search_quality.py [--seed S] [--fraction 0.05]

Last line: ``hv_ratio=<n> eval_fraction=<n>``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from carb_nas.costmodel import load_default_model

SPACE = {
    "name": "search_quality",
    "carb_ranges": True,
    "knobs": {
        "family": ["basic", "bottleneck"],
        "width": [
            0.1,
            0.125,
            0.15,
            0.2,
            0.25,
            0.3,
            0.375,
            0.45,
            0.5,
            0.55,
            0.625,
            0.7,
            0.75,
            0.8,
            0.875,
            0.95,
            1.0,
            1.1,
            1.25,
            1.4,
            1.5,
            1.65,
            1.8,
            2.0,
        ],
        "resolution": {"start": 32, "stop": 128, "step": 8},
        "batch_size": [
            1,
            2,
            3,
            4,
            5,
            6,
            8,
            10,
            12,
            16,
            20,
            24,
            32,
            40,
            48,
            64,
            96,
            128,
            160,
            192,
            256,
        ],
    },
    "family": {
        "basic": {"depth": [8, 10, 12, 14, 16, 18, 20, 26, 34, 50, 74, 98]},
        "bottleneck": {"depth": [50, 65, 80, 101]},
    },
}
OBJECTIVES = ["latency_ms_per_image", "peak_mem_mb", "quality"]
BUDGETS = {"latency_ms": 25.0, "peak_mem_mb": 150.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fraction", type=float, default=0.05, help="evaluation budget / space")
    ap.add_argument("--backend", default="pymoo", choices=["pymoo", "optuna"])
    args = ap.parse_args()
    os.nice(10)  # the machine is shared with profiling campaigns
    from pymoo.indicators.hv import HV

    from carb_nas.search import SurrogateEvaluator, search
    from carb_nas.space import Space

    space = Space.from_dict(SPACE)
    n = len(space)
    print(f"space: {n:,} configs; objectives {OBJECTIVES}; budgets {BUDGETS}")
    model = load_default_model("cpu/torch/fp32", params={"preset": "fast", "target_offsets": None})
    source = "shipped dataset cpu/torch/fp32"
    model.set_params(n_jobs=-1)

    t0 = time.perf_counter()
    exhaustive = SurrogateEvaluator(space, model, OBJECTIVES, BUDGETS)
    ev = exhaustive.evaluate(space.grid())
    ref_front = exhaustive.pareto(ev)
    t_exh = time.perf_counter() - t0
    F_ref = exhaustive.F(ref_front)
    print(
        f"exhaustive: {n:,} configs scored in {t_exh:.1f} s; {int(ev['feasible'].sum()):,} "
        f"feasible; Pareto front {len(ref_front)} configs"
    )

    budget = int(args.fraction * n)
    t1 = time.perf_counter()
    res = search(
        space,
        model,
        budgets=BUDGETS,
        objectives=OBJECTIVES,
        trials=budget,
        seed=args.seed,
        backend=args.backend,
    )
    t_search = time.perf_counter() - t1
    F_s = exhaustive.F(res.pareto) if len(res.pareto) else np.empty((0, len(OBJECTIVES)))

    ideal, nadir = F_ref.min(axis=0), F_ref.max(axis=0)
    scale = np.where(nadir > ideal, nadir - ideal, 1.0)
    hv = HV(ref_point=np.full(len(OBJECTIVES), 1.1))
    hv_ref = hv((F_ref - ideal) / scale)
    hv_s = hv((F_s - ideal) / scale) if len(F_s) else 0.0
    ratio = hv_s / hv_ref
    frac = res.n_evaluated / n
    # how many exhaustive-front configs the search found exactly
    ref_keys = set(
        ref_front[["family", "depth", "width", "resolution", "batch_size"]].itertuples(index=False)
    )
    got_keys = set(
        res.pareto[["family", "depth", "width", "resolution", "batch_size"]].itertuples(index=False)
    )
    print(f"model: fast preset on {source}")
    print(
        f"search ({res.backend}): {res.n_evaluated:,} distinct configs evaluated "
        f"({100 * frac:.2f}% of the space, budget {budget:,} evaluations) in {t_search:.1f} s; "
        f"front {len(res.pareto)} configs, {len(ref_keys & got_keys)} of the exhaustive "
        f"front's {len(ref_keys)} found exactly"
    )
    print(f"hypervolume (normalized, ref 1.1): search {hv_s:.4f} / exhaustive {hv_ref:.4f}")
    print(f"hv_ratio={ratio:.4f} eval_fraction={frac:.4f}")


if __name__ == "__main__":
    main()
