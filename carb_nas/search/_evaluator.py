"""The surrogate evaluator: objectives and constraints of configs from a cost model.

Objectives are predicted costs (minimized) and a quality score (maximized); every budget is a
constraint ``value / limit - 1 <= 0`` (a relative excess, so budgets in different units weigh
alike). Each distinct config is featurized and predicted once; its model inputs are kept so
that a re-score or a validation on the same platform reuses them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.budgets import (
    KNOWN_METRICS,
    PER_IMAGE,
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
from carb_nas.errors import BudgetError
from carb_nas.scoring import Scored, score_configs
from carb_nas.search._encoding import SpaceEncoding
from carb_nas.search._quality import QUALITY, call_quality, load_quality
from carb_nas.space import CONFIG_COLUMNS, Space


def default_objectives(model: Any, space: Space | None = None) -> list[str]:
    """The objectives of a search that names none: every target of ``model`` plus quality,
    with latency *per image* (throughput) instead of per batch when ``space`` varies the
    batch size.

    With per-batch latency, per-batch memory and a quality blind to batch, batch size 1
    dominates every other batch size and the batch knob is dead weight. Per image, a larger
    batch buys throughput with memory (and, per batch, response time: put that in a budget,
    ``latency_ms=LIMIT``), so the Pareto set spans the batch sizes a deployment chooses
    between as well as the architectures.
    """
    targets = model_targets(model)
    varies_batch = space is not None and len(space.values("batch_size")) > 1
    if varies_batch and "latency_ms" in targets:
        return [f"latency_ms{PER_IMAGE}", *(t for t in targets if t != "latency_ms"), QUALITY]
    return [*targets, QUALITY]


def check_objectives(
    objectives: Sequence[str] | None, model: Any, space: Space | None = None
) -> list[str]:
    """The objectives (default: :func:`default_objectives`), checked against what ``model``
    predicts; BudgetError for unknown names, targets it lacks, or duplicates."""
    targets = model_targets(model)
    objectives = list(objectives) if objectives else default_objectives(model, space)
    return _check_objectives(objectives, targets, model)


def _check_objectives(objectives: Sequence[str], targets: Sequence[str], model: Any) -> list:
    out = []
    for name in objectives:
        if name == QUALITY:
            out.append(name)
            continue
        if name not in KNOWN_METRICS:
            raise BudgetError(
                f"unknown objective: expected 'quality' or one of {', '.join(KNOWN_METRICS)}, "
                f"got {name!r}. Use a target name with its unit suffix."
            )
        if base_target(name) not in targets:
            raise BudgetError(
                f"objective on a target the model does not predict: the model for "
                f"{platform_name(model)} predicts {list(targets)}, got {name!r}. Drop it."
            )
        out.append(name)
    if len(set(out)) != len(out):
        raise BudgetError(f"duplicate objectives: expected distinct names, got {list(out)}.")
    if not out:
        raise BudgetError("no objectives: expected at least one, got none. Add e.g. latency_ms.")
    return out


class SurrogateEvaluator:
    """Predicts objectives and constraints of configs with a cost model, caching per config.

    ``evaluate(frame)`` returns, per row: the predictions (``<target>`` and, with a confidence,
    ``<target>_lower``/``_upper``), ``quality``, ``gflops_per_batch``, one ``g_<budget>``
    column per budget (relative excess, <= 0 feasible), ``g_space_limit`` for a space with
    ``[limits]``, ``violation`` (sum of positive parts) and ``feasible``. ``archive()`` is every
    distinct config evaluated so far.
    """

    def __init__(
        self,
        space: Space,
        model: Any,
        objectives: Sequence[str] | None = None,
        budgets: Mapping[str, float] | Iterable[str] | None = None,
        quality: str | Callable | None = None,
        confidence: float | None = None,
    ) -> None:
        self.space = space
        self.model = model
        self.targets = model_targets(model)
        objectives = list(objectives) if objectives else default_objectives(model, space)
        self.objectives = _check_objectives(objectives, self.targets, model)
        self.budgets = parse_budgets(budgets)
        check_budgets(self.budgets, model)
        self.confidence = check_confidence(confidence)
        self.quality_fn = load_quality(quality)
        self.uses_quality = QUALITY in self.objectives
        self.encoding = SpaceEncoding(space)
        self.limit_flops = space.limits.get("max_gflops_per_batch")
        self.constraint_names = [f"g_{b}" for b in self.budgets]
        if self.limit_flops is not None:
            self.constraint_names.append("g_space_limit")
        self._rows: dict[int, int] = {}
        self._frames: list[pd.DataFrame] = []
        self._inputs: list[pd.DataFrame] = []  # model inputs (features), parallel to _frames
        self._archive: pd.DataFrame | None = None
        self._archive_inputs: pd.DataFrame | None = None
        self.n_predicted = 0
        self._warned: set[str] = set()

    # objective matrix, minimization (quality negated)
    def F(self, ev: pd.DataFrame) -> np.ndarray:
        cols = []
        for name in self.objectives:
            if name == QUALITY:
                cols.append(-ev[QUALITY].to_numpy(dtype=float))
            else:
                cols.append(metric_values(ev, name, ev["batch_size"].to_numpy()))
        return np.column_stack(cols)

    def G(self, ev: pd.DataFrame) -> np.ndarray:
        if not self.constraint_names:
            return np.zeros((len(ev), 0))
        return ev[self.constraint_names].to_numpy(dtype=float)

    def _compute(self, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        frame = frame.reset_index(drop=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scored = score_configs(
                self.model, frame, alpha=confidence_alpha(self.confidence), role="search model"
            )
        for w in caught:  # a search scores many batches: each warning once per search
            if str(w.message) not in self._warned:
                self._warned.add(str(w.message))
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        self.n_predicted += len(frame)
        out = frame.copy()
        for c in scored.pred.columns:
            out[c] = scored.pred[c].to_numpy()
        feats = scored.features
        out["gflops_per_batch"] = feats["flops"].to_numpy(dtype=float) / 1e9
        if self.uses_quality:
            qframe = pd.concat([frame, feats.reset_index(drop=True)], axis=1)
            qframe = qframe.loc[:, ~qframe.columns.duplicated()]
            out[QUALITY] = call_quality(self.quality_fn, qframe)
        batch = frame["batch_size"].to_numpy()
        viol = violation_frame(out, batch, self.budgets, upper=self.confidence is not None)
        for name in self.budgets:
            out[f"g_{name}"] = viol[name].to_numpy()
        if self.limit_flops is not None:
            out["g_space_limit"] = out["gflops_per_batch"] / self.limit_flops - 1.0
        g = self.G(out)
        out["violation"] = np.clip(g, 0, None).sum(axis=1) if g.shape[1] else 0.0
        out["feasible"] = (g <= 0).all(axis=1) if g.shape[1] else True
        return out, scored.X.reset_index(drop=True)

    def evaluate(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Evaluate configs (CONFIG_COLUMNS), predicting only those not seen before."""
        frame = frame[list(CONFIG_COLUMNS)].reset_index(drop=True)
        codes = self.encoding.config_codes(frame)
        new_mask = np.array([c not in self._rows for c in codes.tolist()], dtype=bool)
        if new_mask.any():
            _, first = np.unique(codes[new_mask], return_index=True)
            new_idx = np.flatnonzero(new_mask)[np.sort(first)]
            ev, X = self._compute(frame.iloc[new_idx])
            base = sum(len(f) for f in self._frames)
            for i, c in enumerate(codes[new_idx].tolist()):
                self._rows[c] = base + i
            self._frames.append(ev)
            self._inputs.append(X)
            self._archive = self._archive_inputs = None
        arch = self.archive()
        return arch.iloc[[self._rows[c] for c in codes.tolist()]].reset_index(drop=True)

    def archive(self) -> pd.DataFrame:
        if self._archive is None:
            self._archive = (
                pd.concat(self._frames, ignore_index=True) if self._frames else pd.DataFrame()
            )
        return self._archive

    def scored(self, frame: pd.DataFrame) -> Scored:
        """The evaluated configs of ``frame`` as :class:`carb_nas.scoring.Scored` (the model
        inputs computed when they were first evaluated, and their predictions), index of
        ``frame``. KeyError for a config never evaluated."""
        codes = self.encoding.config_codes(frame[list(CONFIG_COLUMNS)])
        rows = [self._rows[c] for c in codes.tolist()]
        if self._archive_inputs is None:
            self._archive_inputs = pd.concat(self._inputs, ignore_index=True)
        X = self._archive_inputs.iloc[rows].set_axis(frame.index)
        arch = self.archive().iloc[rows].set_axis(frame.index)
        pred_cols = [c for t in self.targets for c in (t, f"{t}_lower", f"{t}_upper") if c in arch]
        configs = X[list(CONFIG_COLUMNS)]
        return Scored(configs, X, arch[pred_cols], platform_name(self.model))

    def seen(self, codes: np.ndarray) -> np.ndarray:
        """Mask of the config codes (:meth:`SpaceEncoding.config_codes`) already evaluated."""
        return np.fromiter((c in self._rows for c in codes.tolist()), bool, len(codes))

    @property
    def n_evaluated(self) -> int:
        return len(self._rows)

    def pareto(self, frame: pd.DataFrame | None = None) -> pd.DataFrame:
        """Non-dominated feasible configs of ``frame`` (default: the whole archive)."""
        frame = self.archive() if frame is None else frame
        if len(frame) == 0:
            return frame
        feas = frame[frame["feasible"].to_numpy(dtype=bool)]
        if len(feas) == 0:
            return feas.reset_index(drop=True)
        return feas[pareto_mask(self.F(feas))].reset_index(drop=True)
