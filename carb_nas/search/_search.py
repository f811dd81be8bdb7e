"""Budget-constrained multi-objective search with a cost model as the surrogate.

The objectives are predicted costs (minimized) and a *quality* score (maximized, see
:mod:`carb_nas.search._quality`); every budget is a constraint ``value / limit - 1 <= 0``.
Two backends explore the same space through one :class:`SurrogateEvaluator` (built once):

- ``pymoo``: NSGA-II over an integer encoding of the space (one variable per knob, an index
  into the knob's sorted values, SBX + polynomial mutation with rounding repair; offspring
  are always configs not yet evaluated, and it stops at exactly ``trials`` distinct configs);
- ``optuna``: NSGA-II or TPE, one trial per config, budgets recorded with
  ``Trial.set_constraint``, on any storage (``storage=URL, study_name=NAME``).

Every config the search evaluates is kept (predictions are cached per config), and the result
is the non-dominated set of *all* feasible evaluated configs, not only the last population.
The result keeps the Pareto set's model inputs and predictions (:attr:`SearchResult.scored`) so
that validation compares against exactly what the search predicted, without featurizing again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.budgets import (
    accept_mask,
    base_target,
    check_budgets,
    confidence_alpha,
    platform_name,
)
from carb_nas.errors import ConfigError, StorageError
from carb_nas.scoring import Scored, score_configs
from carb_nas.search._evaluator import SurrogateEvaluator
from carb_nas.search._optuna import SAMPLERS, run_optuna
from carb_nas.search._pymoo import check_pop_size, run_pymoo
from carb_nas.search._quality import QUALITY
from carb_nas.space import CONFIG_COLUMNS, REQUIRED_COLUMNS, Space, load_space

BACKENDS = ("pymoo", "optuna")
#: the knobs whose distinct values in the Pareto set the summary counts (knob -> plural)
PARETO_KNOBS = {
    "family": "families",
    "depth": "depths",
    "width": "widths",
    "resolution": "resolutions",
    "batch_size": "batch sizes",
}


@dataclass
class SearchResult:
    """Outcome of :func:`search`.

    ``pareto``: non-dominated feasible configs among everything evaluated (config columns,
    predictions, ``quality``, constraint columns; with a rescore model also ``target_<t>``
    predictions and ``target_within_budget``); ``evaluated``: every config evaluated;
    ``least_violating``: when nothing is feasible, the evaluated configs closest to the budgets.
    """

    pareto: pd.DataFrame
    evaluated: pd.DataFrame
    least_violating: pd.DataFrame
    objectives: list[str]
    budgets: dict[str, float]
    confidence: float | None
    backend: str
    space_name: str
    space_size: int
    n_evaluated: int
    seconds: float
    rescored: bool = False
    rescore_platform: str | None = None
    #: evaluations the search was given (``trials``); pymoo evaluates exactly this many
    #: distinct configs (fewer only in a smaller space), Optuna runs this many trials, of
    #: which repeated configs are predicted once
    trials: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the Pareto set as last scored (by the rescore model when rescored): model inputs and
    #: predictions, index of ``pareto``; what validation compares the measurements with
    scored: Scored | None = field(default=None, repr=False)

    @property
    def feasible(self) -> bool:
        return len(self.pareto) > 0

    @property
    def eval_fraction(self) -> float:
        return self.n_evaluated / max(self.space_size, 1)

    def pareto_distinct(self) -> dict[str, int]:
        """How many distinct values of each knob (:data:`PARETO_KNOBS`) the Pareto set holds."""
        return {k: int(self.pareto[k].nunique()) for k in PARETO_KNOBS if k in self.pareto}

    def to_dict(self, rows: bool = True) -> dict[str, Any]:
        out = {
            "backend": self.backend,
            "space": self.space_name,
            "space_size": self.space_size,
            "evaluated": self.n_evaluated,
            "trials": self.trials,
            "eval_fraction": self.eval_fraction,
            "objectives": self.objectives,
            "budgets": self.budgets,
            "confidence": self.confidence,
            "feasible": self.feasible,
            "seconds": self.seconds,
            "rescored": self.rescored,
            "rescore_platform": self.rescore_platform,
            "pareto_distinct": self.pareto_distinct(),
            **self.extra,
        }
        if rows:
            out["pareto"] = self.pareto.to_dict(orient="records")
            if not self.feasible:
                out["least_violating"] = self.least_violating.to_dict(orient="records")
        return out

    def summary(self, max_rows: int = 12) -> str:
        budgets = ", ".join(f"{k} <= {v:g}" for k, v in self.budgets.items()) or "none"
        asked = (
            f"{self.trials:,} trials, "
            if self.trials is not None and self.backend.startswith("optuna")
            else ""
        )
        lines = [
            f"searched {self.space_name!r} ({self.space_size:,} configs) with {self.backend}: "
            f"{asked}{self.n_evaluated:,} distinct configs evaluated "
            f"({100 * self.eval_fraction:.1f}%), {self.seconds:.1f} s",
            f"objectives: {', '.join(self.objectives)} (quality maximized); budgets: {budgets}"
            + (f" at confidence {self.confidence:g}" if self.confidence else ""),
        ]
        if not self.feasible:
            lines.append("no evaluated config meets every budget; the closest ones:")
            lines.append(_table(self.least_violating.head(max_rows), self.objectives, True))
            return "\n".join(lines)
        distinct = ", ".join(
            f"{n} {PARETO_KNOBS[k] if n != 1 else k.replace('_', ' ')}"
            for k, n in self.pareto_distinct().items()
        )
        lines.append(f"Pareto set: {len(self.pareto)} configs over {distinct}")
        if self.rescored:
            ok = int(self.pareto["target_within_budget"].sum())
            lines.append(
                f"rescored with the {self.rescore_platform} model: {ok} of {len(self.pareto)} "
                "still within budget"
            )
        shown = _spread(self.pareto, self.objectives, max_rows)
        if len(self.pareto) > max_rows:
            lines.append(f"{max_rows} of them, spread along the front (all with -o / --json):")
        extra = [c for c in self.pareto.columns if c.startswith("target_")]
        budgeted = [b for b in self.budgets if b not in self.objectives]  # e.g. per batch
        lines.append(_table(shown, [*self.objectives, *budgeted], False, extra))
        return "\n".join(lines)


def _spread(frame: pd.DataFrame, objectives: Sequence[str], n: int) -> pd.DataFrame:
    """``n`` rows evenly spaced along the first objective (quality when searched)."""
    if len(frame) <= n:
        return frame
    key = QUALITY if QUALITY in objectives and QUALITY in frame else objectives[0]
    values = frame[key] if key in frame else frame[base_target(key)] / frame["batch_size"]
    order = frame.assign(_key=values.to_numpy()).sort_values("_key").drop(columns="_key")
    idx = np.unique(np.round(np.linspace(0, len(order) - 1, n)).astype(int))
    return order.iloc[idx]


def _table(
    frame: pd.DataFrame,
    objectives: Sequence[str],
    violation: bool,
    extra: Sequence[str] = (),
) -> str:
    cols = list(REQUIRED_COLUMNS)
    tail = (["violation"] if violation else []) + [
        c for c in extra if not c.endswith(("_lower", "_upper"))
    ]
    rows = [cols + list(objectives) + [c.replace("target_", "target ") for c in tail]]
    for _, r in frame.iterrows():
        vals = [str(r[c]) for c in cols]
        for o in objectives:
            v = r[o] if o in r else r[base_target(o)] / r["batch_size"]
            vals.append(f"{v:.3g}")
        for c in tail:
            v = r[c]
            vals.append(("yes" if v else "NO") if isinstance(v, (bool, np.bool_)) else f"{v:.3g}")
        rows.append(vals)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows)


def search(
    space: Space | str | Path,
    model: Any,
    budgets: Mapping[str, float] | Iterable[str] | None = None,
    objectives: Sequence[str] | None = None,
    quality: str | Callable | None = None,
    backend: str = "pymoo",
    trials: int = 2000,
    pop_size: int = 64,
    sampler: str = "nsga2",
    seed: int = 0,
    confidence: float | None = None,
    rescore: Any | None = None,
    storage: str | None = None,
    study_name: str | None = None,
) -> SearchResult:
    """Search ``space`` for the budget-feasible Pareto set of the objectives.

    Args:
        space: a Space, a space TOML or a bundled name (``cpu``).
        model: the platform being searched for (the surrogate): a shipped platform name
            (``cpu/torch/fp32``), a model directory or a loaded predictor; names and
            directories go through :func:`carb_nas.predictors.load_predictor` (this
            machine's calibration applied when it exists).
        budgets: ``{"latency_ms": 50}`` or ``["latency_ms=50"]`` (per batch; units in names).
        objectives: among the model's targets, ``<target>_per_image`` and ``quality``;
            default (:func:`default_objectives`): every target of the model plus
            ``quality``, latency per image instead of per batch when the space varies the
            batch size (so the Pareto set spans batch sizes, not only batch 1).
        quality: None (built-in :func:`capacity_proxy`), a callable, or ``"module:function"``.
        backend: ``"pymoo"`` (NSGA-II) or ``"optuna"`` (``sampler`` ``"nsga2"`` or ``"tpe"``).
        trials: pymoo: distinct configs to evaluate (exactly, unless the space is smaller or
            the operators stop finding new ones); optuna: trials to run (a repeated config is
            predicted once).
        confidence: budgets checked on the upper bound at ``alpha = 1 - confidence``.
        rescore: optional target platform (as ``model``); the Pareto set is re-predicted
            with it and each config marked ``target_within_budget``.
        storage / study_name: Optuna storage URL and study name (optuna backend only).
    """
    t0 = time.perf_counter()
    check_search_args(backend, trials, pop_size, sampler, storage)
    if isinstance(model, (str, Path)) or isinstance(rescore, (str, Path)):
        from carb_nas.predictors import load_predictor

        model = load_predictor(model, role="model")
        rescore = load_predictor(rescore, role="rescore") if rescore is not None else None
    space = space if isinstance(space, Space) else load_space(space)
    ev = SurrogateEvaluator(space, model, objectives, budgets, quality, confidence)
    if rescore is not None:
        check_budgets(ev.budgets, rescore, role="rescore model")
    extra: dict[str, Any] = {}
    if backend == "pymoo":
        run_pymoo(ev, int(trials), int(pop_size), seed)
    else:
        study = run_optuna(ev, int(trials), sampler, int(pop_size), seed, storage, study_name)
        extra["study_name"] = study.study_name
        extra["sampler"] = sampler
    evaluated = ev.archive()
    pareto = ev.pareto()
    if len(pareto):
        order = np.argsort(ev.F(pareto)[:, 0], kind="stable")
        pareto = pareto.iloc[order].reset_index(drop=True)
        least = evaluated.iloc[:0]
    else:
        least = evaluated.sort_values("violation").head(10).reset_index(drop=True)
    rescore_platform = None
    scored = ev.scored(pareto) if len(pareto) else None
    if rescore is not None and scored is not None:
        rescore_platform = platform_name(rescore)
        scored = score_configs(
            rescore,
            pareto[list(CONFIG_COLUMNS)],
            alpha=confidence_alpha(ev.confidence),
            role="rescore model",
            reuse=scored,
        )
        for c in scored.pred.columns:
            pareto[f"target_{c}"] = scored.pred[c].to_numpy()
        pareto["target_within_budget"] = accept_mask(
            scored.pred, pareto["batch_size"].to_numpy(), ev.budgets, ev.confidence is not None
        )
    return SearchResult(
        pareto=pareto,
        evaluated=evaluated,
        least_violating=least,
        objectives=ev.objectives,
        budgets=ev.budgets,
        confidence=ev.confidence,
        backend=backend if backend == "pymoo" else f"optuna-{sampler}",
        space_name=space.name,
        space_size=len(space),
        n_evaluated=ev.n_evaluated,
        seconds=time.perf_counter() - t0,
        rescored=rescore is not None and len(pareto) > 0,
        rescore_platform=rescore_platform,
        trials=int(trials),
        extra=extra,
        scored=scored,
    )


def check_search_args(
    backend: str, trials: Any, pop_size: Any, sampler: str, storage: str | None
) -> None:
    """ConfigError / StorageError for search arguments no backend can run with."""
    if backend not in BACKENDS:
        raise ConfigError(
            f"unknown search backend: expected one of {list(BACKENDS)}, got {backend!r}. "
            "Use --backend pymoo or --backend optuna."
        )
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ConfigError(
            f"invalid trials: expected a whole number >= 1, got {trials!r}. Use e.g. --trials 2000."
        )
    if backend == "optuna" and sampler not in SAMPLERS:
        raise ConfigError(
            f"unknown Optuna sampler: expected one of {list(SAMPLERS)}, got {sampler!r}. "
            "Use --sampler nsga2 or --sampler tpe."
        )
    check_pop_size(pop_size, backend, sampler)
    if storage is not None and backend != "optuna":
        raise StorageError(
            f"--storage needs the optuna backend: expected --backend optuna, got {backend!r}. "
            "Add --backend optuna or drop --storage."
        )
