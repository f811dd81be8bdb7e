"""The pymoo backend: NSGA-II over the integer encoding of a space.

:class:`EvaluatorProblem` is a plain pymoo ``Problem`` around a :class:`SurrogateEvaluator`
(built once, by the caller); ``carb_nas.integrations.SpaceProblem`` is the same Problem built
from a space and a model for users' own pymoo loops.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pymoo.core.duplicate import DuplicateElimination
from pymoo.core.problem import Problem

from carb_nas.errors import ConfigError
from carb_nas.search._evaluator import SurrogateEvaluator

# generations in a row without a config not evaluated before: the operators have run dry
STALL_GENERATIONS = 5
# the share of the evaluation budget NSGA-II spends before the local search of the front
# takes the rest, and the local search's knob steps (benchmarks/search_quality.py, seeds 0-2:
# shares 0.2 / 0.35 / 0.5 / 0.7 / 0.8 / 0.9 at a 2 % budget 0.984 / 0.986 / 0.988 / 0.989 /
# 0.989 / 0.988; steps +-1 0.989, +-2 0.990, +-1 and +-2 0.990, +-3 0.989)
GLOBAL_SHARE = 0.7
STEPS = (-2, -1, 1, 2)


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


class ArchiveDuplicates(DuplicateElimination):
    """pymoo duplicate elimination on *configs*, not on encoded vectors.

    Two integer rows that decode to the same config (a family that lacks a knob value maps the
    index to its nearest allowed one) are duplicates, and so is a row whose config the
    evaluator has already scored: offspring are always configs never evaluated, so every
    evaluation the search spends explores something new (the result is the Pareto set of the
    whole archive, not of the last population).
    """

    def __init__(self, evaluator: SurrogateEvaluator) -> None:
        super().__init__()
        self.evaluator = evaluator

    def _codes(self, pop: Any) -> np.ndarray:
        return self.evaluator.encoding.config_codes(self.evaluator.encoding.decode(pop.get("X")))

    def _do(self, pop: Any, other: Any, is_duplicate: np.ndarray) -> np.ndarray:
        codes = self._codes(pop)
        if other is None:
            _, first = np.unique(codes, return_index=True)
            repeat = np.ones(len(codes), dtype=bool)
            repeat[first] = False
            is_duplicate[repeat | self.evaluator.seen(codes)] = True
        else:
            is_duplicate[np.isin(codes, self._codes(other))] = True
        return is_duplicate


def run_pymoo(
    evaluator: SurrogateEvaluator,
    n_evals: int,
    pop_size: int,
    seed: int,
    global_share: float = GLOBAL_SHARE,
) -> int:
    """NSGA-II (SBX + polynomial mutation with rounding repair) for ``global_share`` of
    ``n_evals`` distinct configs, then :func:`refine_front` for the rest (and NSGA-II again
    if the front's neighbourhood runs dry), until ``n_evals`` configs have been evaluated, the
    whole space included, or until neither finds configs not yet evaluated; returns the
    number of generations.

    Duplicates are eliminated on configs against the whole archive (:class:`ArchiveDuplicates`),
    and the last generation is cut to what the budget has left, so ``evaluator.n_evaluated``
    ends at exactly ``n_evals`` unless the space (or the reach of the operators) is smaller.
    """
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.evaluator import Evaluator
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.repair.rounding import RoundingRepair
    from pymoo.operators.sampling.rnd import IntegerRandomSampling
    from pymoo.termination.max_gen import MaximumGenerationTermination

    problem = EvaluatorProblem(evaluator)
    algorithm = NSGA2(
        pop_size=pop_size,
        sampling=IntegerRandomSampling(),
        crossover=SBX(prob=0.9, eta=3.0, vtype=float, repair=RoundingRepair()),
        mutation=PM(prob=1.0, eta=3.0, vtype=float, repair=RoundingRepair()),
        eliminate_duplicates=ArchiveDuplicates(evaluator),
    )
    algorithm.setup(problem, termination=MaximumGenerationTermination(10**9), seed=seed)
    pymoo_eval = Evaluator()
    n_space = len(evaluator.space)
    n_global = max(pop_size, int(round(global_share * n_evals)))
    generations = stalled = 0
    refined = False
    while evaluator.n_evaluated < min(n_evals, n_space) and stalled < STALL_GENERATIONS:
        if not refined and evaluator.n_evaluated >= n_global:
            refined = True
            refine_front(evaluator, n_evals)
            continue
        pop = algorithm.ask()
        left = n_evals - evaluator.n_evaluated
        if pop is None or len(pop) == 0:
            stalled += 1
            continue
        before = evaluator.n_evaluated
        pop = pop[:left]
        pymoo_eval.eval(problem, pop)
        algorithm.tell(infills=pop)
        generations += 1
        stalled = stalled + 1 if evaluator.n_evaluated == before else 0
    return generations


def refine_front(evaluator: SurrogateEvaluator, n_evals: int) -> int:
    """Pareto local search: evaluate the configs a knob step away from the archive's
    feasible Pareto front (each varying knob's index moved by each of :data:`STEPS`) that were never
    evaluated, then again around the new front, until ``n_evals`` configs have been evaluated
    or the front's neighbourhood holds nothing new; returns the evaluations it made.

    On a grid of ordered knob values the costs move smoothly with each step, so the Pareto
    set's unexplored neighbours are where the front is most likely to improve; NSGA-II's
    recombination reaches them only by chance (on benchmarks/search_quality.py's space it
    found ~6 % of the exhaustive front's configs at a 2 % budget). When the neighbours are more
    than the budget has left, those of the sparsest part of the front come first (the front
    members with the fewest near neighbours in the normalized objectives)."""
    enc = evaluator.encoding
    upper = enc.upper.astype(np.int64)
    made = 0
    while evaluator.n_evaluated < n_evals:
        front = evaluator.pareto()
        if len(front) == 0:
            break
        X = enc.encode(front).astype(np.int64)
        rank = _sparsity_rank(evaluator.F(front))
        steps = []
        for j in range(enc.n_var):
            for d in STEPS:
                Y = X.copy()
                Y[:, j] += d
                ok = (Y[:, j] >= 0) & (Y[:, j] <= upper[j])
                steps.append((Y[ok], rank[ok]))
        cand = np.vstack([s for s, _ in steps])
        prio = np.concatenate([r for _, r in steps])
        configs = enc.decode(cand)
        codes = enc.config_codes(configs)
        order = np.argsort(prio, kind="stable")  # sparsest front members' neighbours first
        codes, configs = codes[order], configs.iloc[order]
        _, first = np.unique(codes, return_index=True)
        first = np.sort(first)
        codes, configs = codes[first], configs.iloc[first]
        new = ~evaluator.seen(codes)
        if not new.any():
            break
        take = configs[new].iloc[: n_evals - evaluator.n_evaluated]
        before = evaluator.n_evaluated
        evaluator.evaluate(take.reset_index(drop=True))
        made += evaluator.n_evaluated - before
    return made


def _sparsity_rank(F: np.ndarray) -> np.ndarray:
    """Rank of each point by its crowding (0 = the most isolated): the mean distance to its
    two nearest others in objectives normalized to the front's range, descending."""
    n = len(F)
    if n <= 2:
        return np.zeros(n, dtype=np.int64)
    from scipy.spatial import cKDTree

    lo, hi = F.min(axis=0), F.max(axis=0)
    Z = (F - lo) / np.where(hi > lo, hi - lo, 1.0)
    dist, _ = cKDTree(Z).query(Z, k=3)  # itself and its two nearest others
    near = dist[:, 1:].mean(axis=1)
    return np.argsort(np.argsort(-near, kind="stable"), kind="stable")
