"""carb_nas's pymoo ``Problem`` for users' own pymoo loops (any algorithm, any termination)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from carb_nas.search import EvaluatorProblem, SurrogateEvaluator
from carb_nas.space import Space, load_space


class SpaceProblem(EvaluatorProblem):
    """A pymoo ``Problem`` over a carb_nas space, with a cost model as surrogate objectives.

    Variables: integer indices (see :class:`carb_nas.search.SpaceEncoding`), bounds
    ``[0, n_values - 1]``. ``F``: the objectives, minimized (``quality`` enters negated).
    ``G``: one relative budget excess per budget (<= 0 feasible), plus the space's ``[limits]``
    cap when it has one. Use ``problem.decode(X)`` for the configs of a result and
    ``problem.evaluator.archive()`` for everything evaluated. Works with any pymoo algorithm
    that handles integer variables::

        problem = SpaceProblem("cpu", model, budgets={"latency_ms": 50})
        res = minimize(problem, NSGA2(pop_size=40, sampling=IntegerRandomSampling(),
                       crossover=SBX(vtype=float, repair=RoundingRepair()),
                       mutation=PM(vtype=float, repair=RoundingRepair())), ("n_gen", 20))

    ``carb_nas.search.search(backend="pymoo")`` runs the same Problem around its evaluator.
    """

    def __init__(
        self,
        space: Space | str | Path,
        model: Any,
        objectives: Sequence[str] | None = None,
        budgets: Mapping[str, float] | Iterable[str] | None = None,
        quality: str | Callable | None = None,
        confidence: float | None = None,
    ) -> None:
        space = space if isinstance(space, Space) else load_space(space)
        super().__init__(SurrogateEvaluator(space, model, objectives, budgets, quality, confidence))
