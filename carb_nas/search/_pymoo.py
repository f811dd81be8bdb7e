"""The pymoo backend: NSGA-II over the integer encoding of a space.

:class:`EvaluatorProblem` is a plain pymoo ``Problem`` around a :class:`SurrogateEvaluator`
(built once, by the caller); ``carb_nas.integrations.SpaceProblem`` is the same Problem built
from a space and a model for users' own pymoo loops.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pymoo.core.problem import Problem

from carb_nas.errors import ConfigError
from carb_nas.search._evaluator import SurrogateEvaluator


class EvaluatorProblem(Problem):
    """A pymoo ``Problem`` whose objectives and constraints come from ``evaluator``.

    Variables: integer indices (see :class:`SpaceEncoding`), bounds ``[0, n_values - 1]``.
    ``F``: the objectives, minimized (``quality`` enters negated). ``G``: one relative budget
    excess per budget (<= 0 feasible), plus the space's ``[limits]`` cap when it has one.
    ``problem.decode(X)`` gives the configs of a result, ``problem.evaluator.archive()``
    everything evaluated.
    """

    def __init__(self, evaluator: SurrogateEvaluator) -> None:
        self.evaluator = evaluator
        self.encoding = evaluator.encoding
        if self.encoding.n_var == 0:
            raise ConfigError(
                f"nothing to search: every knob of space {evaluator.space.name!r} has a single "
                "value, got a one-config space. Give some knob more than one value."
            )
        super().__init__(
            n_var=self.encoding.n_var,
            n_obj=len(evaluator.objectives),
            n_ieq_constr=len(evaluator.constraint_names),
            xl=np.zeros(self.encoding.n_var),
            xu=self.encoding.upper,
            vtype=int,
        )

    def decode(self, X: Any) -> pd.DataFrame:
        return self.encoding.decode(X)

    def _evaluate(self, X: np.ndarray, out: dict, *args: Any, **kwargs: Any) -> None:
        ev = self.evaluator.evaluate(self.encoding.decode(X))
        out["F"] = self.evaluator.F(ev)
        if self.n_ieq_constr:
            out["G"] = self.evaluator.G(ev)


def check_pop_size(pop_size: Any, backend: str, sampler: str = "nsga2") -> int:
    """``pop_size`` as an int the backend can use (NSGA-II, pymoo's or Optuna's, needs >= 2)."""
    low = 2 if backend == "pymoo" or sampler == "nsga2" else 1
    if isinstance(pop_size, bool) or not isinstance(pop_size, (int, np.integer)) or pop_size < low:
        why = " (NSGA-II breeds from pairs)" if low == 2 else ""
        raise ConfigError(
            f"invalid --pop-size for {backend}"
            + (f"/{sampler}" if backend == "optuna" else "")
            + f": expected a whole number >= {low}{why}, got {pop_size!r}. Use e.g. --pop-size 64."
        )
    return int(pop_size)


def run_pymoo(evaluator: SurrogateEvaluator, n_evals: int, pop_size: int, seed: int) -> None:
    """NSGA-II (SBX + polynomial mutation with rounding repair) for ``n_evals`` evaluations."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.repair.rounding import RoundingRepair
    from pymoo.operators.sampling.rnd import IntegerRandomSampling
    from pymoo.optimize import minimize

    algorithm = NSGA2(
        pop_size=pop_size,
        sampling=IntegerRandomSampling(),
        crossover=SBX(prob=0.9, eta=3.0, vtype=float, repair=RoundingRepair()),
        mutation=PM(prob=1.0, eta=3.0, vtype=float, repair=RoundingRepair()),
        eliminate_duplicates=True,
    )
    minimize(EvaluatorProblem(evaluator), algorithm, ("n_evals", n_evals), seed=seed, verbose=False)
