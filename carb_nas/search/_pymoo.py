"""The pymoo backend: NSGA-II over the integer encoding of a space.

:class:`EvaluatorProblem` is a plain pymoo ``Problem`` around a :class:`SurrogateEvaluator`
(built once, by the caller); ``carb_nas.integrations.SpaceProblem`` is the same Problem built
from a space and a model for users' own pymoo loops.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
from pymoo.core.duplicate import DuplicateElimination
from pymoo.core.problem import Problem

from carb_nas.errors import ConfigError
from carb_nas.search._evaluator import SurrogateEvaluator
from carb_nas.space import NUMERIC_KNOBS

# Generations in a row without a config not evaluated before: the operators have run dry.
STALL_GENERATIONS = 5
# Share of the evaluation budget NSGA-II spends before the screened local search of the front
# (screened_refine) takes the rest: NSGA-II finds the front's region, the local search fills it.
# benchmarks/search_quality.py re-runs this choice and the ones below.
GLOBAL_SHARE = 0.3
# refine_front's knob steps: one and two grid positions each way, enough to bridge a knob value
# the space skips for some families.
STEPS = (-2, -1, 1, 2)
# screened_refine: configs evaluated per round (the screen is refitted between rounds, so
# smaller batches learn more per evaluation) ...
SCREEN_BATCH = 64
# ... and random configs of the space screened beside the front's neighbours each round, so
# the search can still jump to a region the front has not reached.
SCREEN_RANDOM = 5000
# screened_refine's rounds at most: a larger budget takes larger batches instead of more rounds,
# which bounds the time spent refitting and screening.
SCREEN_ROUNDS = 24
# screened_refine picks by estimated hypervolume gain (_greedy_beyond_front): Monte Carlo on
# this many uniform points of the normalized objective box ...
HV_SAMPLES = 30_000
# ... among this many candidates of the largest epsilon shifts beyond the front (the gain is
# estimated only where it can be large, which keeps the estimate cheap) ...
HV_CANDIDATES = 4096
# ... with the reference point at this multiple of the normalized box's upper corner, so the
# front's extreme points still add volume.
HV_REFERENCE = 1.1
# Archive rows per term of the screen below which the hypervolume estimate is too noisy to
# trust: fewer rows pick by the largest epsilon shift instead.
HV_MIN_ROWS_PER_TERM = 10


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
    ``n_evals`` distinct configs, then :func:`screened_refine` for the rest (then
    :func:`refine_front` and NSGA-II again if the screen runs dry), until ``n_evals`` configs
    have been evaluated, the whole space included, or until neither finds configs not yet
    evaluated; returns the number of generations.

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
    n_space = len(evaluator.space)
    if n_evals >= n_space:
        # the budget covers the space: score its grid, exactly the configs inside its limits
        # (the encoding also reaches configs beyond a [limits] cap, which would count as
        # evaluations and leave configs of the space unscored)
        evaluator.evaluate(evaluator.space.grid())
        return 0
    algorithm = NSGA2(
        pop_size=pop_size,
        sampling=IntegerRandomSampling(),
        crossover=SBX(prob=0.9, eta=3.0, vtype=float, repair=RoundingRepair()),
        mutation=PM(prob=1.0, eta=3.0, vtype=float, repair=RoundingRepair()),
        eliminate_duplicates=ArchiveDuplicates(evaluator),
    )
    algorithm.setup(problem, termination=MaximumGenerationTermination(10**9), seed=seed)
    pymoo_eval = Evaluator()
    n_global = max(pop_size, int(round(global_share * n_evals)))
    generations = stalled = 0
    refined = False
    while evaluator.n_evaluated < min(n_evals, n_space) and stalled < STALL_GENERATIONS:
        if not refined and evaluator.n_evaluated >= n_global:
            refined = True
            screened_refine(evaluator, n_evals, seed)
            refine_front(evaluator, n_evals)  # what the screen left: the plain neighbourhood
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
    recombination reaches them only by chance. When the neighbours are more
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


def screened_refine(
    evaluator: SurrogateEvaluator,
    n_evals: int,
    seed: int = 0,
    batch: int = SCREEN_BATCH,
    n_random: int = SCREEN_RANDOM,
    rounds: int = SCREEN_ROUNDS,
) -> int:
    """Local search of the front screened by a model of the archive; returns the evaluations
    it made.

    Each round fits, by least squares on every config evaluated so far, a cubic polynomial of
    the log numeric knob values (with the categorical knobs one-hot, each also times the log
    values) to every objective (in logs where positive) and every constraint (``log(1 + g)``).
    It predicts the never-evaluated configs one or two knob steps (or one step of two knobs)
    from the feasible front and ``n_random`` random configs of the space, each prediction
    corrected by the residual of its nearest evaluated config (the costs are smooth along the
    ordered knobs, so a neighbour's error is the best guess of a config's). Of the configs
    predicted feasible and beyond the front, it evaluates the ``batch`` that add the most
    hypervolume (:func:`_greedy_beyond_front`, in objectives normalized to the front's range;
    on a screen of under ``HV_MIN_ROWS_PER_TERM`` rows per term, those the front would need
    the largest shift to dominate), chosen greedily, each pick counted as a front member for
    the next (so a round spreads along the front instead of piling into one gap), then
    refits; ``batch`` grows so that the budget takes at most ``rounds`` rounds. It stops at
    ``n_evals`` evaluations, when nothing unseen is predicted beyond the front, or when the
    archive is too small to fit the screen (twice its terms).

    Why: the plain neighbourhood search (:func:`refine_front`) spends most evaluations on
    configs that turn out dominated; the screen ranks the unseen neighbours well enough to skip
    most of those (benchmarks/search_quality.py measures the hypervolume ratio either way).
    """
    from scipy.spatial import cKDTree

    enc = evaluator.encoding
    upper = enc.upper.astype(np.int64)
    n_f, n_g = len(evaluator.objectives), len(evaluator.constraint_names)
    moves = _moves(enc.n_var)
    rng = np.random.default_rng(seed)
    batch = max(batch, -(-(n_evals - evaluator.n_evaluated) // rounds))
    made = 0
    while evaluator.n_evaluated < n_evals:
        archive = evaluator.archive()
        front = evaluator.pareto()
        D = _screen_design(enc, archive)
        if len(front) == 0 or len(archive) < 2 * D.shape[1]:
            break  # nothing feasible to refine yet, or too few configs to fit the screen
        T = np.column_stack([evaluator.F(archive), evaluator.G(archive)])
        logged = np.array([bool((T[:, c] > 0).all()) for c in range(n_f)] + [False] * n_g)
        Tt = _to_screen(T, logged, n_f)
        W = np.linalg.solve(D.T @ D + 1e-6 * np.eye(D.shape[1]), D.T @ Tt)
        resid = Tt - D @ W
        X_front = enc.encode(front).astype(np.int64)
        cand = (X_front[:, None, :] + moves[None]).reshape(-1, enc.n_var)
        cand = np.vstack([cand, rng.integers(0, upper + 1, size=(n_random, enc.n_var))])
        cand = cand[((cand >= 0) & (cand <= upper)).all(axis=1)]
        configs = enc.decode(cand)
        codes = enc.config_codes(configs)
        _, first = np.unique(codes, return_index=True)
        keep = np.sort(first)
        keep = keep[~evaluator.seen(codes[keep])]
        if len(keep) == 0:
            break
        configs = configs.iloc[keep].reset_index(drop=True)
        pred = _screen_design(enc, configs) @ W
        scale = np.maximum(upper, 1)
        _, nearest = cKDTree(enc.encode(archive) / scale).query(enc.encode(configs) / scale)
        F_hat, G_hat = _from_screen(pred + resid[nearest], logged, n_f)
        feasible: np.ndarray = np.all(G_hat <= 0, axis=1)  # True everywhere without budgets
        # by volume only once the screen is well determined: on a few rows per term its
        # errors put large volumes on configs that are not beyond the front at all
        rng_or_none = rng if len(archive) >= HV_MIN_ROWS_PER_TERM * D.shape[1] else None
        take = _greedy_beyond_front(F_hat, feasible, evaluator.F(front), batch, rng_or_none)
        take = take[: n_evals - evaluator.n_evaluated]
        if len(take) == 0:
            break
        before = evaluator.n_evaluated
        evaluator.evaluate(configs.iloc[take].reset_index(drop=True))
        made += evaluator.n_evaluated - before
    return made


def _moves(n_var: int) -> np.ndarray:
    """Index moves of the screened search: each knob by -2..2, each pair of knobs by +-1."""
    out = []
    for j in range(n_var):
        for d in (-2, -1, 1, 2):
            v = np.zeros(n_var, dtype=np.int64)
            v[j] = d
            out.append(v)
    for i, j in itertools.combinations(range(n_var), 2):
        for di in (-1, 1):
            for dj in (-1, 1):
                v = np.zeros(n_var, dtype=np.int64)
                v[i], v[j] = di, dj
                out.append(v)
    return np.array(out, dtype=np.int64).reshape(-1, n_var)


def _screen_design(enc: Any, configs: pd.DataFrame) -> np.ndarray:
    """The screen's inputs: intercept, log numeric knob values up to degree 3, and per value
    of each categorical knob (but its first) a one-hot column and its products with the logs."""
    numeric = [k for k in enc.var_knobs if k in NUMERIC_KNOBS]
    logs = [np.log(configs[k].to_numpy(dtype=float)) for k in numeric]
    cols = [np.ones(len(configs))]
    for degree in (1, 2, 3):
        for combo in itertools.combinations_with_replacement(logs, degree):
            cols.append(np.prod(combo, axis=0))
    for knob in enc.var_knobs:
        if knob in NUMERIC_KNOBS:
            continue
        for value in enc.values[knob][1:]:
            hot = (configs[knob].to_numpy() == value).astype(float)
            cols += [hot, *(hot * z for z in logs)]
    return np.column_stack(cols)


def _to_screen(T: np.ndarray, logged: np.ndarray, n_f: int) -> np.ndarray:
    out = T.copy()
    out[:, logged] = np.log(T[:, logged])
    out[:, n_f:] = np.log1p(np.maximum(T[:, n_f:], -1 + 1e-9))  # g = value / limit - 1 > -1
    return out


def _from_screen(P: np.ndarray, logged: np.ndarray, n_f: int) -> tuple[np.ndarray, np.ndarray]:
    F = P[:, :n_f].copy()
    F[:, logged[:n_f]] = np.exp(F[:, logged[:n_f]])
    return F, np.expm1(P[:, n_f:])


def _greedy_beyond_front(
    F_hat: np.ndarray,
    feasible: np.ndarray,
    F_front: np.ndarray,
    k: int,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Up to ``k`` indices of ``F_hat`` (feasible ones, minimized objectives) in the order a
    greedy pick takes them: each time the one that adds the most hypervolume to the front grown
    by the picks so far (with ``rng``, which draws the points that estimate it; without, the
    one the grown front would need the largest shift to dominate); only predictions beyond the
    front.

    In objectives normalized to the front's range (reference point 1.1, as
    benchmarks/search_quality.py scores), the volume is estimated on ``HV_SAMPLES`` uniform
    points of the box that the front does not dominate: a candidate's gain is the count of
    those it dominates and no pick has taken yet. Candidates are those the front would need a
    positive shift to dominate (additive epsilon), the ``HV_CANDIDATES`` largest shifts; when
    no sampled volume is left, the rest follow by that shift (:func:`_epsilon_greedy`)."""
    lo, hi = F_front.min(axis=0), F_front.max(axis=0)
    scale = np.where(hi > lo, hi - lo, 1.0)
    idx = np.flatnonzero(feasible)
    Z = ((F_hat[idx] - lo) / scale).astype(np.float32)
    Zf = ((F_front - lo) / scale).astype(np.float32)
    shift = _epsilon_shift(Z, Zf)
    keep = np.flatnonzero(shift > 0)  # only these can add volume: the front dominates the rest
    if rng is not None:
        keep = keep[np.argsort(-shift[keep], kind="stable")[:HV_CANDIDATES]]
    idx, Z, shift = idx[keep], Z[keep], shift[keep]
    if len(idx) == 0 or k < 1:
        return np.zeros(0, dtype=np.int64)
    if rng is None:
        return idx[np.asarray(_epsilon_greedy(Z, shift, k), dtype=np.int64)]
    low = np.minimum(Z.min(axis=0), 0.0)
    S = (low + rng.random((HV_SAMPLES, Z.shape[1])) * (HV_REFERENCE - low)).astype(np.float32)
    free = np.ones(len(S), dtype=bool)
    for start in range(0, len(Zf), 1024):  # blocks of the front: bounded memory on any front
        free &= ~_weakly_dominates(Zf[start : start + 1024], S).any(axis=0)
    S = S[free]
    D = _weakly_dominates(Z, S)  # candidate x sample: the volume each would take
    gain = D.sum(axis=1)
    picks: list[int] = []
    taken = np.zeros(len(S), dtype=bool)
    while len(picks) < min(k, len(idx)):
        i = int(np.argmax(gain))
        if gain[i] <= 0:
            break
        picks.append(i)
        newly = np.flatnonzero(D[i] & ~taken)
        taken[newly] = True
        gain -= D[:, newly].sum(axis=1)
        gain[i] = -1
    if len(picks) < k:  # no sampled volume left: the largest shifts, the picks counted in
        for i in picks:
            _count_in(shift, Z, i)
        picks += _epsilon_greedy(Z, shift, k - len(picks))
    return idx[np.asarray(picks, dtype=np.int64)]


def _epsilon_shift(Z: np.ndarray, Zf: np.ndarray) -> np.ndarray:
    """Per row of ``Z``, the smallest shift that makes some row of ``Zf`` weakly dominate it
    (additive epsilon; > 0: beyond the front)."""
    # objectives as rows: the shift is built objective by objective on 2-D blocks (front x
    # candidates), which numpy does several times faster than a reduction over a short axis
    ZT, ZfT = Z.T, Zf.T
    shift = np.full(len(Z), np.inf, dtype=np.float32)
    for start in range(0, len(Z), 4096):
        part = slice(start, start + 4096)
        need = ZfT[0][:, None] - ZT[0][None, part]
        for row_f, row in zip(ZfT[1:], ZT[1:]):
            np.maximum(need, row_f[:, None] - row[None, part], out=need)
        shift[part] = need.min(axis=0, initial=np.inf)
    return shift


def _weakly_dominates(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """``[len(P), len(Q)]``: P[i] <= Q[j] in every objective (one 2-D pass per objective)."""
    out = P[:, 0][:, None] <= Q[:, 0][None, :]
    for c in range(1, P.shape[1]):
        out &= P[:, c][:, None] <= Q[:, c][None, :]
    return out


def _count_in(shift: np.ndarray, Z: np.ndarray, i: int) -> None:
    """``shift`` once row ``i`` of ``Z`` counts as a front member (never picked again)."""
    need = Z[i, 0] - Z[:, 0]
    for c in range(1, Z.shape[1]):
        np.maximum(need, Z[i, c] - Z[:, c], out=need)
    np.minimum(shift, need, out=shift)
    shift[i] = -np.inf


def _epsilon_greedy(Z: np.ndarray, shift: np.ndarray, k: int) -> list[int]:
    """Up to ``k`` rows by the largest shift, each pick counted as a front member."""
    picks: list[int] = []
    for _ in range(k):
        i = int(np.argmax(shift))
        if not shift[i] > 0:
            break
        picks.append(i)
        _count_in(shift, Z, i)
    return picks
