"""Budget-constrained search over one built-in family's space (MobileNetV2 by default).

``search_spaces/mobilenet_v2.toml`` declares MobileNetV2's depth (inverted-residual blocks),
width multiplier, resolution and batch size; NSGA-II searches it with the PyTorch-CPU cost
model as the surrogate for the budget-feasible Pareto set of per-image latency, peak memory
and the capacity proxy (log params + log FLOPs per image; not accuracy). The surrogate is what
``load_predictor("cpu/torch/fp32")`` gives for families other than ResNet's: its kernel-level
module model, each config traced on the meta device (each network built once for all its
batch sizes). Once ``carb-nas calibrate cpu/torch/fp32`` has run, the predictor applies this
machine's calibration (``predictor.provenance`` says so; ``calibrated=False`` opts out).

    python examples/family_search.py [--space mobilenet_v2] [--trials 200]

Last line: ``space=<name> evaluated=<n> pareto=<n> feasible=<0|1>``.
"""

from __future__ import annotations

import argparse
import warnings

from carb_nas import load_predictor
from carb_nas.search import search

BUDGETS = {"latency_ms": 30.0, "peak_mem_mb": 200.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="mobilenet_v2", help="a space TOML or a bundled name")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--pop-size", type=int, default=32)
    args = ap.parse_args()

    model = load_predictor("cpu/torch/fp32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = search(
            args.space,
            model,
            budgets=BUDGETS,
            objectives=["latency_ms_per_image", "peak_mem_mb", "quality"],
            trials=args.trials,
            pop_size=args.pop_size,
            seed=0,
        )
    for w in {str(w.message) for w in caught}:
        print(f"warning: {w}")
    print(f"surrogate: {model.provenance.describe()}")
    print(f"space {r.space_name!r}: {r.space_size:,} configs, {r.n_evaluated} evaluated "
          f"in {r.seconds:.1f} s")  # fmt: skip
    print(f"Pareto set within {BUDGETS}: {len(r.pareto)} configs")
    for row in r.pareto.head(10).itertuples(index=False):
        print(f"  depth {row.depth:<3} width {row.width:<5g} res {row.resolution:<4} batch "
              f"{row.batch_size:<3} {row.latency_ms:7.2f} ms {row.peak_mem_mb:7.1f} MB "
              f"quality {row.quality:.2f}")  # fmt: skip
    feasible = int(len(r.pareto) > 0)
    print(f"space={r.space_name} evaluated={r.n_evaluated} pareto={len(r.pareto)} "
          f"feasible={feasible}")  # fmt: skip


if __name__ == "__main__":
    main()
