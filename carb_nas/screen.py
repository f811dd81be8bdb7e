"""Two-stage deployment screening, as in the CARB paper (see docs/concepts.md).

Stage 1 scores every candidate with the *source* platform's cost model and keeps the top K by
one target (smallest first). Stage 2 re-scores only that shortlist with the *target* platform's
model, applies the deployment budgets and extracts the Pareto set over the targets (all
minimized). Counts are reported at every stage::

    result = screen("search_spaces/carb_screening.toml", source, target,
                    rank_by="latency_ms", top_k=100, budgets={"latency_ms": 50})
    result.counts   # {"candidates": 3072, "shortlisted": 100, "within_budget": ..., ...}

Budgets are ``TARGET=LIMIT`` pairs in the target's unit (``latency_ms=50``, ``peak_mem_mb=200``,
``energy_j=75``, all per batch); ``<target>_per_image`` divides by the batch size. The budget
rules, the accept/reject decision and the Pareto extraction live in :mod:`carb_nas.budgets`, the
prediction helpers in :mod:`carb_nas.scoring`.

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

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.budgets import (
    KNOWN_METRICS,
    base_target,
    check_budgets,
    check_confidence,
    confidence_alpha,
    metric_values,
    model_targets,
    pareto_mask,
    parse_budgets,
    platform_name,
    violation_frame,
)
from carb_nas.errors import BudgetError, ConfigError
from carb_nas.scoring import align_to_platform, candidate_frame, predict_frame
from carb_nas.space import Space

__all__ = ["ScreenResult", "screen", "check_rank", "percent_fewer", "DISTILL_MIN_CANDIDATES"]


def percent_fewer(kept: int, total: int) -> str:
    """``100 * (1 - kept / total)`` with as many decimals as it takes to stay true: 1 of 3,072
    kept is "99.97", never "100.0" (and 3,071 of 3,072 is "0.03", never "0.0")."""
    total = max(int(total), 1)
    p = 100.0 * (1.0 - kept / total)
    for digits in range(1, 7):
        text = f"{p:.{digits}f}"
        if not ((kept > 0 and float(text) >= 100.0) or (kept < total and float(text) <= 0.0)):
            return text
    return f"{p:.6g}"


# -- screening -------------------------------------------------------------------------------
@dataclass
class ScreenResult:
    """Frames at every stage of a two-stage screen, plus the counts.

    ``candidates``: every candidate with the source model's ranking prediction (``source_<t>``)
    and its rank; ``shortlist``: the top K with source and target predictions (``<t>`` columns
    are the target model's, and ``precision``/``runtime`` the target's deployment, the source's
    in ``source_precision``/``source_runtime`` where they differ); ``within_budget``: the
    shortlisted configs that meet every budget;
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
        n = len(self.candidates)
        conf = f" at confidence {self.confidence:g} (upper bounds)" if self.confidence else ""
        budgets = ", ".join(f"{k} <= {v:g}" for k, v in self.budgets.items()) or "none"
        lines = [
            f"candidates     {len(self.candidates):>9,}",
            f"shortlisted    {len(self.shortlist):>9,}   top {self.top_k} by source "
            f"{self.rank_by} (Spearman source vs target on the shortlist: "
            f"{self.spearman:.3f})",
            f"within budget  {len(self.within_budget):>9,}   budgets: {budgets}{conf}",
            f"Pareto         {len(self.pareto):>9,}   over {', '.join(self.objectives)} "
            f"({percent_fewer(len(self.pareto), n)}% fewer configs to profile)",
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


def check_rank(rank_by: str, top_k: Any = 1, source: Any = None, target: Any = None) -> None:
    """BudgetError / ConfigError for a ranking target or shortlist size screen cannot use
    (the models, when given, must both predict ``rank_by``)."""
    if rank_by not in KNOWN_METRICS:
        raise BudgetError(
            f"unknown ranking target: expected one of {', '.join(KNOWN_METRICS)}, got "
            f"{rank_by!r}. Rank by a target name such as latency_ms."
        )
    for role, model in (("source model", source), ("target model", target)):
        if model is not None and base_target(rank_by) not in model_targets(model):
            raise BudgetError(
                f"ranking target not predicted by the {role}: it predicts "
                f"{model_targets(model)} ({platform_name(model)}), got rank_by={rank_by!r}. "
                "Rank by a target both models predict."
            )
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ConfigError(
            f"invalid top_k: expected a whole number >= 1, got {top_k!r}. Keep at least one "
            "candidate, e.g. top_k=100."
        )


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
    check_rank(rank_by, top_k, source_model, target_model)
    confidence = check_confidence(confidence)
    check_budgets(budgets, target_model, role="target model")
    target_targets = model_targets(target_model)
    objectives = list(objectives) if objectives else list(target_targets)
    for name in objectives:
        if name not in KNOWN_METRICS or base_target(name) not in target_targets:
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
    for knob in ("precision", "runtime"):
        # the shortlist holds the target's predictions: its configs as deployed there
        # (ranked as deployed on the source: source_precision/source_runtime)
        deployed = tgt_frame[knob].iloc[top].to_numpy()
        if (shortlist[knob].to_numpy() != deployed).any():
            shortlist.insert(shortlist.columns.get_loc(knob) + 1, f"source_{knob}",
                             shortlist[knob].to_numpy())  # fmt: skip
            shortlist[knob] = deployed
    alpha = confidence_alpha(confidence)
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
