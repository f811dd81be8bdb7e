"""carb_nas's pymoo Problem on its own: any pymoo algorithm, a carb_nas space, a cost model.

``SpaceProblem`` encodes the space as integer variables (one per knob), predicts the costs with
the cost model (the surrogate objectives), adds the quality objective (here the built-in
capacity proxy -- a proxy of model capacity, NOT accuracy) and turns each budget into a
constraint ``predicted / limit - 1 <= 0``. Everything else is plain pymoo.

Model: ``load_predictor("cpu/torch/fp32")`` when this install has its data; otherwise a fast-preset
model trained here on SYNTHETIC rows (a formula, not measurements) so the example always runs.

    python examples/pymoo_problem.py [--pop-size 40] [--n-gen 10] [--synthetic]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.operators.crossover.sbx import SBX
from pymoo.operators.mutation.pm import PM
from pymoo.operators.repair.rounding import RoundingRepair
from pymoo.operators.sampling.rnd import IntegerRandomSampling
from pymoo.optimize import minimize

from carb_nas import load_predictor
from carb_nas.costmodel import CostModel, model_inputs
from carb_nas.errors import CarbNasError
from carb_nas.features import compute_features
from carb_nas.integrations import SpaceProblem
from carb_nas.space import load_space


def synthetic_model(space) -> CostModel:
    """A fast-preset model on SYNTHETIC rows: latency and memory from a CPU-like formula."""
    rng = np.random.default_rng(0)
    grid = space.grid()
    rows = grid.iloc[rng.choice(len(grid), size=400, replace=False)].reset_index(drop=True)
    f = compute_features(rows)
    b = rows["batch_size"].to_numpy(dtype=float)
    rows["latency_ms"] = 0.1 + 1e3 * f["flops"] / (25e9 * (1 - 0.6 * np.exp(-b / 8)))
    rows["peak_mem_mb"] = 2 + f["tensor_peak_mb"]
    return CostModel(preset="fast", n_jobs=1).fit(
        model_inputs(rows), rows[["peak_mem_mb", "latency_ms"]], platform="cpu/torch/fp32"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pop-size", type=int, default=40)
    ap.add_argument("--n-gen", type=int, default=10)
    ap.add_argument("--synthetic", action="store_true", help="skip the shipped model (a quick run)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    space = load_space("cpu")
    model = None
    if not args.synthetic:
        try:
            model = load_predictor("cpu/torch/fp32")
            source = model.provenance.describe()
        except CarbNasError:
            pass
    if model is None:
        model, source = synthetic_model(space), "fast model on SYNTHETIC rows (not measurements)"

    problem = SpaceProblem(space, model, budgets={"latency_ms": 25, "peak_mem_mb": 150})
    algorithm = NSGA2(
        pop_size=args.pop_size,
        sampling=IntegerRandomSampling(),
        crossover=SBX(prob=0.9, eta=3.0, vtype=float, repair=RoundingRepair()),
        mutation=PM(prob=1.0, eta=3.0, vtype=float, repair=RoundingRepair()),
        eliminate_duplicates=True,
    )
    res = minimize(problem, algorithm, ("n_gen", args.n_gen), seed=1, verbose=False)

    front = problem.decode(res.X)
    front[problem.evaluator.objectives] = res.F * np.where(
        np.array(problem.evaluator.objectives) == "quality", -1, 1
    )
    front = front.sort_values(problem.evaluator.objectives[0])
    print(f"model: {source}")
    print(
        f"space {space.name!r}: {len(space):,} configs, {problem.n_var} integer variables "
        f"({', '.join(problem.encoding.var_knobs)})"
    )
    print(
        f"objectives: {problem.evaluator.objectives} (quality maximized); constraints: "
        f"{problem.evaluator.constraint_names}"
    )
    print(
        f"evaluated {problem.evaluator.n_evaluated} distinct configs in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    cols = ["family", "depth", "width", "resolution", "batch_size", *problem.evaluator.objectives]
    print(f"Pareto set of the final population: {len(front)} configs")
    print(front[cols].head(15).to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
