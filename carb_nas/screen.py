"""Two-stage deployment screening (seed 001, "Two-Stage Deployment Screening").

Stage 1 scores every candidate with the *source* platform's cost model and keeps the top K by
one target (smallest first). Stage 2 re-scores only that shortlist with the *target* platform's
model, applies the deployment budgets and extracts the Pareto set over the targets (all
minimized). Counts are reported at every stage::

    result = screen("search_spaces/carb_screening.toml", source, target,
                    rank_by="latency_ms", top_k=100, budgets={"latency_ms": 50})
    result.counts   # {"candidates": 3072, "shortlisted": 100, "within_budget": ..., ...}

Budgets are ``TARGET=LIMIT`` pairs in the target's unit (``latency_ms=50``, ``peak_mem_mb=200``,
``energy_j=75``, all per batch); ``<target>_per_image`` divides by the batch size.

Confidence. ``CostModel.predict(X, alpha=a)`` returns a two-sided split-conformal interval
``[lower, upper]`` that holds the true value with probability at least ``1 - a``. Screening
with ``confidence=c`` asks for the interval at ``alpha = 1 - c`` and accepts a config only if
the interval's *upper* bound is within budget. Only one side is used, so the chance that the true
cost exceeds ``upper`` is at most ``1 - c`` (about half that when errors are symmetric): the
decision is conservative, never optimistic.

An empty feasible set is an answer, not an error: ``result.feasible`` is False and
``result.least_violating`` holds the shortlisted configs that miss the budgets by the least
(sum of relative excesses over every budget).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.datasets import TARGETS
from carb_nas.errors import BudgetError, ConfigError, ModelError
from carb_nas.space import CONFIG_COLUMNS, Space, load_space, normalize_config_frame

__all__ = [
    "ScreenResult",
    "screen",
    "parse_budget",
    "parse_budgets",
    "check_budgets",
    "budget_columns",
    "metric_values",
    "pareto_mask",
    "pareto_front",
    "predict_frame",
    "candidate_frame",
    "align_to_platform",
    "violation_frame",
    "KNOWN_METRICS",
]

PER_IMAGE = "_per_image"
#: every name a budget or objective may use: the targets and their per-image variants
KNOWN_METRICS = tuple(TARGETS) + tuple(f"{t}{PER_IMAGE}" for t in TARGETS)


# -- budgets ---------------------------------------------------------------------------------
def _base_target(name: str) -> str:
    return name[: -len(PER_IMAGE)] if name.endswith(PER_IMAGE) else name


def parse_budget(text: str) -> tuple[str, float]:
    """Parse ``"TARGET=LIMIT"`` (e.g. ``"latency_ms=50"``) into ``(target, limit)``.

    Raises BudgetError for a missing ``=``, an unknown target, or a limit that is not a finite
    number > 0.
    """
    if not isinstance(text, str) or "=" not in text:
        raise BudgetError(
            f"malformed budget: expected TARGET=LIMIT such as latency_ms=50, got {text!r}. "
            f"Write the target, '=', then the limit; targets: {', '.join(KNOWN_METRICS)}."
        )
    name, _, raw = text.partition("=")
    return _check_budget(name.strip(), raw.strip())


def _check_budget(name: str, raw: Any) -> tuple[str, float]:
    if name not in KNOWN_METRICS:
        raise BudgetError(
            f"unknown budget target: expected one of {', '.join(KNOWN_METRICS)}, got {name!r}. "
            "Use a target name with its unit suffix, e.g. latency_ms=50."
        )
    try:
        if isinstance(raw, bool):
            raise TypeError
        limit = float(raw)
    except (TypeError, ValueError):
        raise BudgetError(
            f"non-numeric budget limit for {name}: expected a number > 0 in the target's unit, "
            f"got {raw!r}. Write e.g. {name}=50."
        ) from None
    if not math.isfinite(limit) or limit <= 0:
        raise BudgetError(
            f"invalid budget limit for {name}: expected a finite number > 0, got {raw!r}. "
            f"A budget is an upper limit on a cost; give a positive value such as {name}=50."
        )
    return name, limit


def parse_budgets(budgets: Iterable[str] | Mapping[str, Any] | None) -> dict[str, float]:
    """Budgets from ``["latency_ms=50", ...]`` or ``{"latency_ms": 50}``; None -> ``{}``.

    A target given twice is an error (which limit would apply would be ambiguous).
    """
    if budgets is None:
        return {}
    if isinstance(budgets, str):
        budgets = [budgets]
    pairs = (
        [_check_budget(str(k), v) for k, v in budgets.items()]
        if isinstance(budgets, Mapping)
        else [parse_budget(b) for b in budgets]
    )
    out: dict[str, float] = {}
    for name, limit in pairs:
        if name in out:
            raise BudgetError(
                f"duplicate budget for {name}: expected each target at most once, got limits "
                f"{out[name]:g} and {limit:g}. Keep one of them."
            )
        out[name] = limit
    return out


def _model_targets(model: Any) -> list[str]:
    targets = getattr(model, "targets_", None)
    if targets is None:
        raise ModelError(
            "unfitted cost model: expected a fitted CostModel (with targets_), got "
            f"{type(model).__name__} without targets_. Train it (carb-nas model train) or load "
            "a saved one."
        )
    return list(targets)


def _platform_name(model: Any) -> str:
    plat = getattr(model, "platform_", None) or {}
    if isinstance(plat, Mapping):
        if plat.get("platform"):
            return str(plat["platform"])
        parts = [plat.get(k) for k in ("device", "runtime", "precision")]
        if all(parts):
            return "/".join(map(str, parts))
    return "this model's platform"


def check_budgets(budgets: Mapping[str, float], model: Any, role: str = "model") -> None:
    """Raise BudgetError when a budget names a target ``model`` does not predict."""
    targets = _model_targets(model)
    for name in budgets:
        if _base_target(name) not in targets:
            why = " (that platform had no energy meter)" if name.startswith("energy") else ""
            raise BudgetError(
                f"budget on a target the {role} does not predict: the {role} for "
                f"{_platform_name(model)} predicts {targets}{why}, got a budget on {name!r}. "
                "Drop that budget or use a model trained with that target."
            )


def budget_columns(name: str, bound: bool) -> str:
    """Prediction column a budget on ``name`` is checked against (upper bound or point)."""
    base = _base_target(name)
    return f"{base}_upper" if bound else base


def metric_values(
    pred: pd.DataFrame, name: str, batch_size: Any, upper: bool = False
) -> np.ndarray:
    """Values of a metric (a target or ``<target>_per_image``) from a prediction frame."""
    col = budget_columns(name, upper)
    if col not in pred:
        raise ModelError(
            f"missing prediction column {col!r}: expected the model's output to hold it, got "
            f"columns {list(pred.columns)}. Ask for intervals (alpha) when using confidence."
        )
    values = pred[col].to_numpy(dtype=float)
    if name.endswith(PER_IMAGE):
        values = values / np.asarray(batch_size, dtype=float)
    return values


# -- Pareto ----------------------------------------------------------------------------------
def pareto_mask(values: Any) -> np.ndarray:
    """Boolean mask of the non-dominated rows of ``values`` (n x m), every column minimized.

    A row is dominated when another row is <= in every column and < in at least one. Exact
    duplicates of a non-dominated row are all kept. Rows holding NaN are never in the front.
    Sort-based: O(n log n) vectorized for m <= 2, a sorted-staircase sweep for m == 3, and a
    vectorized elimination for m >= 4.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError(f"pareto_mask expects a 2-D array (rows x objectives), got {v.shape}")
    n, m = v.shape
    mask = np.zeros(n, dtype=bool)
    ok = ~np.isnan(v).any(axis=1)
    if n == 0 or m == 0 or not ok.any():
        return mask
    idx = np.flatnonzero(ok)
    w = v[idx]
    # sort lexicographically (first column primary); duplicates become adjacent
    order = np.lexsort(w.T[::-1])
    s = w[order]
    first = np.ones(len(s), dtype=bool)
    first[1:] = (s[1:] != s[:-1]).any(axis=1)
    group = np.cumsum(first) - 1
    u = s[first]  # distinct rows in sorted order
    if m == 1:
        keep_u = u[:, 0] == u[0, 0]
    elif m == 2:
        before = np.empty(len(u))
        before[0] = np.inf
        before[1:] = np.minimum.accumulate(u[:-1, 1])
        keep_u = u[:, 1] < before
    elif m == 3:
        keep_u = _staircase_3d(u)
    else:
        keep_u = _eliminate(u)
    mask[idx[order]] = keep_u[group]
    return mask


def _staircase_3d(u: np.ndarray) -> np.ndarray:
    """Rows sorted by column 0 (distinct): keep a row unless an earlier one beats it on 1 and 2."""
    keep = np.zeros(len(u), dtype=bool)
    # cheap vectorized prefilter: points dominated by one of a few strong rows drop out first
    strong = np.argsort(((u - u.min(0)) / (np.ptp(u, axis=0) + 1e-300)).sum(1))[:16]
    alive = np.ones(len(u), dtype=bool)
    for j in strong:
        dom = (u >= u[j]).all(axis=1) & (u > u[j]).any(axis=1)
        alive &= ~dom
    ys: list[float] = []  # staircase: column 1 ascending, column 2 strictly descending
    zs: list[float] = []
    for i in np.flatnonzero(alive):
        y, z = u[i, 1], u[i, 2]
        k = bisect_right(ys, y) - 1
        if k >= 0 and zs[k] <= z:
            continue  # an earlier (<= on column 0) row is <= on 1 and 2, and rows are distinct
        keep[i] = True
        lo = bisect_left(ys, y)
        hi = lo
        while hi < len(ys) and zs[hi] >= z:
            hi += 1
        ys[lo:hi] = [y]
        zs[lo:hi] = [z]
    return keep


def _eliminate(u: np.ndarray) -> np.ndarray:
    """Distinct rows, any m: repeatedly take the best remaining row and drop what it dominates."""
    n = len(u)
    alive = np.ones(n, dtype=bool)
    keep = np.zeros(n, dtype=bool)
    score = ((u - u.min(0)) / (np.ptp(u, axis=0) + 1e-300)).sum(1)
    for i in np.argsort(score, kind="stable"):
        if not alive[i]:
            continue
        rest = np.flatnonzero(alive)
        dominated_by = (u[rest] <= u[i]).all(axis=1) & (u[rest] < u[i]).any(axis=1)
        if dominated_by.any():
            alive[i] = False
            continue
        keep[i] = True
        dom = (u[rest] >= u[i]).all(axis=1) & (u[rest] > u[i]).any(axis=1)
        alive[rest[dom]] = False
    return keep


def pareto_front(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Rows of ``frame`` that are non-dominated over ``columns`` (all minimized)."""
    if len(frame) == 0:
        return frame.copy()
    return frame[pareto_mask(frame[list(columns)].to_numpy(dtype=float))].copy()


# -- candidates and predictions --------------------------------------------------------------
def candidate_frame(space_or_frame: Space | pd.DataFrame | str | Path) -> pd.DataFrame:
    """The candidates as a frame of CONFIG_COLUMNS (a Space, a space file, or a configs table),
    exact duplicates removed, index 0..n-1."""
    if isinstance(space_or_frame, (str, Path)):
        p = Path(space_or_frame)
        if p.suffix in (".csv", ".parquet"):
            from carb_nas.datasets import read_configs

            frame = read_configs(p)
        else:
            frame = load_space(p).grid()
    elif isinstance(space_or_frame, Space):
        frame = space_or_frame.grid()
    elif isinstance(space_or_frame, pd.DataFrame):
        frame = normalize_config_frame(space_or_frame, source="candidate frame")
    else:
        raise ConfigError(
            "unsupported candidates: expected a Space, a space TOML path, a configs table path or"
            f" a DataFrame of configs, got {type(space_or_frame).__name__}. Pass one of those."
        )
    frame = frame[list(CONFIG_COLUMNS)]
    if frame.duplicated().any():
        frame = frame.drop_duplicates()
    return frame.reset_index(drop=True)


def _trained_levels(model: Any, knob: str) -> list[str] | None:
    """Labels of a categorical config column the model was trained on (None: unknown)."""
    schema = getattr(model, "schema_", None)
    cats = getattr(schema, "categorical", None)
    if isinstance(cats, Mapping) and knob in cats:
        return [str(v) for v in cats[knob]]
    plat = getattr(model, "platform_", None)
    if knob in ("precision", "runtime") and isinstance(plat, Mapping) and plat.get(knob):
        return [str(plat[knob])]
    return None


def align_to_platform(model: Any, frame: pd.DataFrame, role: str = "model") -> pd.DataFrame:
    """``frame`` as ``model``'s platform runs it, checked against what the model was trained on.

    A cost model is per platform (device/runtime/precision), so a config is scored *as deployed
    there*: when the model knows a single runtime (or precision) and every candidate holds one
    other value, the column is set to the model's value (a PyTorch candidate list scored by an
    ONNX Runtime model is scored as ONNX Runtime configs). Candidates that vary a knob over
    values the model never saw, or a family it never saw, are another space: ModelError.
    """
    out = frame
    for knob in ("family", "precision", "runtime"):
        levels = _trained_levels(model, knob)
        if levels is None or knob not in frame:
            continue
        values = sorted(set(map(str, frame[knob].unique())))
        unseen = [v for v in values if v not in levels]
        if not unseen:
            continue
        if knob != "family" and len(levels) == 1 and len(values) == 1:
            if out is frame:
                out = frame.copy()
            out[knob] = levels[0]
            continue
        raise ModelError(
            f"the {role} ({_platform_name(model)}) was trained on another space: it knows "
            f"{knob} {levels}, got candidates with {knob} {unseen}. Restrict the space to "
            f"{knob} = {levels} or use a model trained on data that has {unseen}."
        )
    return out


@contextmanager
def _threads_for(model: Any, n_rows: int, small: int = 20_000):
    """One thread for small batches: thread start-up costs more than it saves there (a
    64-row batch predicts ~4x faster on one thread than on two); the model's own setting
    for large ones. The model's ``n_jobs`` is restored afterwards."""
    n_jobs = getattr(model, "n_jobs", None)
    if n_rows >= small or n_jobs in (None, 1) or not hasattr(model, "set_params"):
        yield
        return
    model.set_params(n_jobs=1)
    try:
        yield
    finally:
        model.set_params(n_jobs=n_jobs)


def predict_frame(
    model: Any,
    frame: pd.DataFrame,
    alpha: float | None = None,
    X: pd.DataFrame | None = None,
    chunk_rows: int = 200_000,
) -> pd.DataFrame:
    """``model.predict`` on the model inputs of ``frame`` (configs), index aligned with it.

    Predicts in chunks to bound memory, and once per distinct model-input row: rows that agree
    on every column the model reads get the same prediction by construction, so computing it
    once and reusing it is exact.
    """
    from carb_nas.costmodel import model_inputs

    if X is None:
        X = model_inputs(frame)
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        missing = [c for c in names if c not in X.columns]
        if missing:
            raise ModelError(
                f"model/schema mismatch: the model reads columns {missing[:5]} that "
                f"carb_nas.costmodel.model_inputs does not produce (got {list(X.columns)[:8]}...)"
                ". The model was trained with another feature schema; retrain it with this "
                "carb_nas version."
            )
        X = X[list(names)]
    codes = pd.util.hash_pandas_object(X, index=False).to_numpy()
    uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    Xu = X.iloc[first] if len(uniq) < len(X) else X
    parts = []
    with _threads_for(model, len(Xu)):
        for start in range(0, len(Xu), chunk_rows):
            part = Xu.iloc[start : start + chunk_rows]
            out = model.predict(part) if alpha is None else model.predict(part, alpha=alpha)
            parts.append(pd.DataFrame(out).reset_index(drop=True))
    pred = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if len(uniq) < len(X):
        pred = pred.iloc[inverse.ravel()].reset_index(drop=True)
    pred.index = frame.index
    return pred


# -- screening -------------------------------------------------------------------------------
@dataclass
class ScreenResult:
    """Frames at every stage of a two-stage screen, plus the counts.

    ``candidates``: every candidate with the source model's ranking prediction (``source_<t>``)
    and its rank; ``shortlist``: the top K with source and target predictions (``<t>`` columns
    are the target model's); ``within_budget``: the shortlisted configs that meet every budget;
    ``pareto``: the non-dominated configs among those; ``least_violating``: when nothing meets
    the budgets, the shortlisted configs closest to them (else empty).
    """

    candidates: pd.DataFrame
    shortlist: pd.DataFrame
    within_budget: pd.DataFrame
    pareto: pd.DataFrame
    least_violating: pd.DataFrame
    rank_by: str
    top_k: int
    budgets: dict[str, float]
    confidence: float | None
    objectives: list[str]
    spearman: float
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    ranking: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return len(self.within_budget) > 0

    @property
    def counts(self) -> dict[str, Any]:
        return {
            "candidates": len(self.candidates),
            "shortlisted": len(self.shortlist),
            "within_budget": len(self.within_budget),
            "pareto": len(self.pareto),
            "spearman": self.spearman,
            "seconds": self.seconds,
        }

    def to_dict(self, rows: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.counts)
        out.update(
            rank_by=self.rank_by,
            top_k=self.top_k,
            budgets=self.budgets,
            confidence=self.confidence,
            objectives=self.objectives,
            feasible=self.feasible,
            stage_seconds=self.stage_seconds,
            ranking=self.ranking,
        )
        if rows:
            out["pareto_configs"] = self.pareto.to_dict(orient="records")
            if not self.feasible:
                out["least_violating"] = self.least_violating.to_dict(orient="records")
        return out

    def summary(self) -> str:
        n = max(len(self.candidates), 1)
        conf = f" at confidence {self.confidence:g} (upper bounds)" if self.confidence else ""
        budgets = ", ".join(f"{k} <= {v:g}" for k, v in self.budgets.items()) or "none"
        lines = [
            f"candidates     {len(self.candidates):>9,}",
            f"shortlisted    {len(self.shortlist):>9,}   top {self.top_k} by source "
            f"{self.rank_by} (Spearman source vs target on the shortlist: "
            f"{self.spearman:.3f})",
            f"within budget  {len(self.within_budget):>9,}   budgets: {budgets}{conf}",
            f"Pareto         {len(self.pareto):>9,}   over {', '.join(self.objectives)} "
            f"({100 * (1 - len(self.pareto) / n):.1f}% fewer configs to profile)",
            f"time           {self.seconds:>9.2f} s",
        ]
        if str(self.ranking.get("stage1", "")).startswith("distilled"):
            lines.insert(
                2,
                f"               stage 1 distilled: the source model scored "
                f"{self.ranking['source_scored']:,} candidates; the rest were ruled out by a "
                f"surrogate with a margin of {self.ranking['safety']:g}x its worst hold-out error",
            )
        if not self.feasible:
            lines.append(
                "no shortlisted config meets every budget: the closest ones are in "
                "least_violating (relative excess over the budgets, smallest first)"
            )
        return "\n".join(lines)


def _validate_rank(rank_by: str, top_k: int, source: Any, target: Any) -> None:
    if rank_by not in KNOWN_METRICS:
        raise BudgetError(
            f"unknown ranking target: expected one of {', '.join(KNOWN_METRICS)}, got "
            f"{rank_by!r}. Rank by a target name such as latency_ms."
        )
    for role, model in (("source model", source), ("target model", target)):
        if _base_target(rank_by) not in _model_targets(model):
            raise BudgetError(
                f"ranking target not predicted by the {role}: it predicts "
                f"{_model_targets(model)} ({_platform_name(model)}), got rank_by={rank_by!r}. "
                "Rank by a target both models predict."
            )
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ConfigError(
            f"invalid top_k: expected a whole number >= 1, got {top_k!r}. Keep at least one "
            "candidate, e.g. top_k=100."
        )


def _check_confidence(confidence: float | None) -> None:
    if confidence is None:
        return
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, (int, float))
        or not (0 < confidence < 1)
    ):
        raise BudgetError(
            f"invalid confidence: expected a probability strictly between 0 and 1, got "
            f"{confidence!r}. Use e.g. 0.9 or 0.99."
        )


def violation_frame(
    pred: pd.DataFrame, batch_size: Any, budgets: Mapping[str, float], upper: bool
) -> pd.DataFrame:
    """Relative excess ``value / limit - 1`` per budget (<= 0 within budget)."""
    out = pd.DataFrame(index=pred.index)
    for name, limit in budgets.items():
        out[name] = metric_values(pred, name, batch_size, upper=upper) / limit - 1.0
    return out


def screen(
    space_or_frame: Space | pd.DataFrame | str | Path,
    source_model: Any,
    target_model: Any,
    rank_by: str,
    top_k: int,
    budgets: Iterable[str] | Mapping[str, Any] | None = None,
    confidence: float | None = None,
    objectives: Sequence[str] | None = None,
    stage1: str = "auto",
    seed: int = 0,
) -> ScreenResult:
    """Two-stage screening; see the module docstring.

    Args:
        space_or_frame: the candidates (Space, space TOML, configs table, or DataFrame).
        source_model / target_model: fitted CostModels of the source and target platforms.
        rank_by: the target the shortlist is ranked by (smallest first), e.g. ``latency_ms``.
        top_k: shortlist size K.
        budgets: ``["latency_ms=50", ...]`` or ``{"latency_ms": 50}``; limits in the unit in
            the name, per batch (``<target>_per_image`` per image).
        confidence: None for point predictions; c in (0, 1) to accept only configs whose
            upper bound at ``alpha = 1 - c`` is within every budget.
        objectives: Pareto objectives (minimized); default every target of the target model.
        stage1: how stage 1 finds the top K: ``"exact"`` scores every candidate with the
            source model; ``"distilled"`` scores a sample, fits a fast surrogate of the ranking
            target to it, and re-scores with the source model every candidate the surrogate
            cannot rule out (see :func:`_distilled_stage1`); ``"auto"`` (default) is exact up
            to ``DISTILL_MIN_CANDIDATES`` candidates and distilled beyond.
        seed: seed of the distilled stage's sample.
    """
    t0 = time.perf_counter()
    budgets = parse_budgets(budgets)
    _validate_rank(rank_by, top_k, source_model, target_model)
    _check_confidence(confidence)
    check_budgets(budgets, target_model, role="target model")
    target_targets = _model_targets(target_model)
    objectives = list(objectives) if objectives else list(target_targets)
    for name in objectives:
        if name not in KNOWN_METRICS or _base_target(name) not in target_targets:
            raise BudgetError(
                f"unknown Pareto objective: expected targets of the target model "
                f"{target_targets} (or <target>_per_image), got {name!r}. Pick among those."
            )
    stage: dict[str, float] = {}

    frame = candidate_frame(space_or_frame)
    src_frame = align_to_platform(source_model, frame, "source model")
    tgt_frame = align_to_platform(target_model, frame, "target model")
    stage["candidates_s"] = time.perf_counter() - t0

    # stage 1: the K smallest by rank_by under the source model
    t1 = time.perf_counter()
    k = min(int(top_k), len(frame))
    mode = _stage1_mode(stage1, len(frame))
    if mode == "exact":
        src = predict_frame(source_model, src_frame)
        rank_values = metric_values(src, rank_by, frame["batch_size"].to_numpy())
        ranking = {"stage1": "exact", "source_scored": len(frame)}
    else:
        src, rank_values, ranking = _distilled_stage1(source_model, src_frame, rank_by, k, seed)
    scored = np.flatnonzero(~np.isnan(rank_values))
    if k < len(scored):
        top = scored[np.argpartition(rank_values[scored], k - 1)[:k]]
    else:
        top = scored
    top = top[np.lexsort((top, rank_values[top]))]  # stable ranking order
    stage["source_s"] = time.perf_counter() - t1
    candidates = frame.copy()
    for t in src.columns:
        candidates[f"source_{t}"] = src[t].reindex(frame.index).to_numpy()

    # stage 2: the shortlist through the target model
    t2 = time.perf_counter()
    shortlist = candidates.iloc[top].reset_index(drop=True)
    shortlist.insert(0, "source_rank", np.arange(1, len(shortlist) + 1))
    alpha = None if confidence is None else 1.0 - float(confidence)
    tgt = predict_frame(target_model, tgt_frame.iloc[top], alpha=alpha)
    for col in tgt.columns:
        shortlist[col] = tgt[col].to_numpy()
    batch = shortlist["batch_size"].to_numpy()
    viol = violation_frame(tgt, batch, budgets, upper=confidence is not None)
    shortlist["budget_excess"] = viol.clip(lower=0).sum(axis=1).to_numpy()
    shortlist["within_budget"] = (viol <= 0).all(axis=1).to_numpy()
    spearman = _spearman(rank_values[top], metric_values(tgt, rank_by, batch))
    stage["target_s"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    within = shortlist[shortlist["within_budget"]].reset_index(drop=True)
    if len(within):
        obj = np.column_stack(
            [metric_values(within, o, within["batch_size"].to_numpy()) for o in objectives]
        )
        pareto = within[pareto_mask(obj)].reset_index(drop=True)
        least = shortlist.iloc[:0].copy()
    else:
        pareto = within.copy()
        least = shortlist.sort_values(["budget_excess", "source_rank"]).head(10)
        least = least.reset_index(drop=True)
    stage["pareto_s"] = time.perf_counter() - t3
    return ScreenResult(
        candidates=candidates,
        shortlist=shortlist,
        within_budget=within,
        pareto=pareto,
        least_violating=least,
        rank_by=rank_by,
        top_k=int(top_k),
        budgets=budgets,
        confidence=confidence,
        objectives=objectives,
        spearman=spearman,
        seconds=time.perf_counter() - t0,
        stage_seconds=stage,
        ranking=ranking,
    )


#: candidates above which ``stage1="auto"`` ranks with the distilled surrogate
DISTILL_MIN_CANDIDATES = 200_000
_STAGE1 = ("auto", "exact", "distilled")


def _stage1_mode(stage1: str, n: int) -> str:
    if stage1 not in _STAGE1:
        raise ConfigError(
            f"unknown stage1 mode: expected one of {list(_STAGE1)}, got {stage1!r}. Use 'exact' "
            "to score every candidate with the source model."
        )
    if stage1 == "auto":
        return "distilled" if n >= DISTILL_MIN_CANDIDATES else "exact"
    return stage1


def _design_matrix(X: pd.DataFrame) -> np.ndarray:
    """Numbers for the surrogate: numeric columns as they are, labels as integer codes."""
    cols = []
    for c in X.columns:
        s = X[c]
        if pd.api.types.is_numeric_dtype(s.dtype):
            cols.append(s.to_numpy(dtype=np.float32))
        else:
            cols.append(pd.factorize(s.astype(str), sort=True)[0].astype(np.float32))
    return np.ascontiguousarray(np.column_stack(cols))


def _distilled_stage1(
    model: Any,
    frame: pd.DataFrame,
    rank_by: str,
    k: int,
    seed: int = 0,
    safety: float = 1.5,
) -> tuple[pd.DataFrame, np.ndarray, dict[str, Any]]:
    """The source model's top K without scoring every candidate with it.

    1. Score a random sample with the source model (``fit`` + ``hold-out`` rows).
    2. Fit a fast XGBoost surrogate ``g`` of ``log(rank_by)`` on the fit rows; its largest
       error on the hold-out rows, times ``safety``, is the margin ``delta``.
    3. Score the K candidates ``g`` ranks best; ``tau`` = the K-th smallest source value
       scored so far, an upper bound of the true K-th smallest.
    4. Re-score with the source model every candidate with ``g - delta <= log(tau)``.

    The shortlist is then the K smallest *source-model* values among the scored candidates. A
    candidate left unscored has ``g > log(tau) + delta``; it could only belong to the top K if
    the surrogate erred by more than ``delta`` there, i.e. by more than ``safety`` times its
    worst error on the hold-out sample. When too many candidates survive (the surrogate is
    poor), everything is scored exactly. Returns (source predictions of the scored rows,
    rank values with NaN for unscored rows, statistics).
    """
    import xgboost as xgb

    from carb_nas.costmodel import model_inputs

    n = len(frame)
    batch = frame["batch_size"].to_numpy()
    X = model_inputs(frame)
    values = np.full(n, np.nan)
    preds: list[pd.DataFrame] = []

    def score(idx: np.ndarray) -> None:
        if len(idx):
            p = predict_frame(model, frame.iloc[idx], X=X.iloc[idx])
            values[idx] = metric_values(p, rank_by, batch[idx])
            preds.append(p)

    rng = np.random.default_rng(seed)
    n_fit = int(min(10_000, max(2_000, n // 25)))
    n_hold = int(min(5_000, max(1_000, n // 50)))
    sample = rng.choice(n, size=min(n, n_fit + n_hold), replace=False)
    score(sample)
    stats: dict[str, Any] = {"stage1": "distilled", "sample": len(sample)}
    y = values[sample]
    if (y <= 0).any() or len(sample) >= n:
        score(np.flatnonzero(np.isnan(values)))
        why = "non-positive values" if (y <= 0).any() else "the sample covers every candidate"
        stats.update(stage1=f"exact (fallback: {why})", source_scored=n)
        return pd.concat(preds).sort_index(), values, stats
    Z = _design_matrix(X)
    fit, hold = sample[:n_fit], sample[n_fit:]
    g_model = xgb.XGBRegressor(
        n_estimators=150,
        max_depth=6,
        learning_rate=0.2,
        tree_method="hist",
        random_state=seed,
        n_jobs=1,  # a small fit: one thread, and no OpenMP spinning on a busy machine
    ).fit(Z[fit], np.log(values[fit]))
    g = g_model.predict(Z).astype(float)
    err = float(np.max(np.abs(np.log(values[hold]) - g[hold])))
    delta = safety * err + 1e-9
    best = np.argpartition(g, min(k, n) - 1)[: min(k, n)]
    score(best[np.isnan(values[best])])
    done = ~np.isnan(values)
    tau = np.partition(values[done], min(k, done.sum()) - 1)[min(k, done.sum()) - 1]
    survive = np.flatnonzero(~done & (g - delta <= np.log(tau)))
    if done.sum() + len(survive) > 0.5 * n:
        survive = np.flatnonzero(~done)
        stats["stage1"] = "exact (fallback: the surrogate could not rule out half the space)"
    score(survive)
    stats.update(
        source_scored=int((~np.isnan(values)).sum()),
        holdout_max_abs_log_error=err,
        margin_log=delta,
        safety=safety,
    )
    return pd.concat(preds).sort_index(), values, stats


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho (average ranks for ties); NaN when undefined (< 2 rows or constant)."""
    if len(a) < 2:
        return float("nan")
    ra = pd.Series(a).rank().to_numpy()
    rb = pd.Series(b).rank().to_numpy()
    if np.ptp(ra) == 0 or np.ptp(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
