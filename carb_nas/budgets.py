"""Budgets and Pareto sets, shared by screen, search, validate and the Optuna plugin.

A budget is an upper limit on a predicted (or measured) cost, written ``TARGET=LIMIT`` in the
target's unit, per batch: ``latency_ms=50``, ``peak_mem_mb=200``, ``energy_j=75``;
``<target>_per_image`` divides the batch's cost by the batch size. A config is *accepted* when
every budget holds; with a ``confidence`` c, on the upper end of the conformal interval at
``alpha = 1 - c`` (see :func:`confidence_alpha`), so the decision is conservative.

Scenario budgets are checked on measurements under an MLPerf LoadGen scenario (``carb-nas
loadgen``), never on predictions: ``latency_p90_ms=`` (SingleStream's
90th-percentile latency of one sample, ms: an upper limit), ``latency_p99_ms=`` (MultiStream's
99th-percentile latency of one query of 8 samples, ms: an upper limit) and ``throughput_sps=``
(Offline samples per second: a LOWER limit, the throughput must reach it). Their violations
are ``value / limit - 1`` for the latencies and ``limit / value - 1`` for throughput, so <= 0
is within budget for all (:func:`measured_violations`, :func:`accept_measured`). Each belongs
to one scenario (:data:`SCENARIO_BUDGETS`, checked by :func:`check_scenario_budgets`).

Violations are relative excesses ``value / limit - 1`` (<= 0 within budget), so budgets in
different units weigh alike. Pareto sets minimize every column, with pymoo's non-dominated
sorting (exact duplicates of a non-dominated row are all kept; rows holding NaN never are).

Layer 5: imports only the space, the datasets' target names and the errors. The model helpers
here (:func:`model_targets`, :func:`platform_name`) read a fitted model's attributes and need no
cost-model import.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.datasets import TARGETS
from carb_nas.errors import BudgetError, ModelError

__all__ = [
    "Budgets",
    "PER_IMAGE",
    "KNOWN_METRICS",
    "base_target",
    "parse_budget",
    "parse_budgets",
    "check_confidence",
    "confidence_alpha",
    "model_targets",
    "platform_name",
    "check_budgets",
    "budget_column",
    "metric_values",
    "violation_frame",
    "accept_mask",
    "pareto_mask",
    "pareto_front",
    "SCENARIO_METRICS",
    "BUDGET_METRICS",
    "measured_violations",
    "accept_measured",
    "SCENARIO_BUDGETS",
    "check_scenario_budgets",
]

PER_IMAGE = "_per_image"
#: every name a budget or objective may use: the targets and their per-image variants
KNOWN_METRICS = tuple(TARGETS) + tuple(f"{t}{PER_IMAGE}" for t in TARGETS)
#: measured under a LoadGen scenario only: name -> "max" (an upper limit) or "min" (a lower one)
SCENARIO_METRICS = {"latency_p90_ms": "max", "latency_p99_ms": "max", "throughput_sps": "min"}
#: every name a budget may use
BUDGET_METRICS = KNOWN_METRICS + tuple(SCENARIO_METRICS)
#: the one budget each MLPerf LoadGen scenario measures (its headline figure)
SCENARIO_BUDGETS = {
    "single-stream": "latency_p90_ms",
    "multi-stream": "latency_p99_ms",
    "offline": "throughput_sps",
}
_SCENARIO_OF = {metric: scenario for scenario, metric in SCENARIO_BUDGETS.items()}
_SCENARIO_WHAT = {
    "latency_p90_ms": "LoadGen's 90th-percentile latency of one sample, ms",
    "latency_p99_ms": "LoadGen's 99th-percentile latency of one query, ms",
    "throughput_sps": "samples per second, a lower limit",
}


# -- budgets ---------------------------------------------------------------------------------
def base_target(name: str) -> str:
    """The target a metric is computed from (``latency_ms_per_image`` -> ``latency_ms``)."""
    return name[: -len(PER_IMAGE)] if name.endswith(PER_IMAGE) else name


def parse_budget(text: str) -> tuple[str, float]:
    """Parse ``"TARGET=LIMIT"`` (e.g. ``"latency_ms=50"``) into ``(target, limit)``.

    Raises BudgetError for a missing ``=``, an unknown target, or a limit that is not a finite
    number > 0.
    """
    if not isinstance(text, str) or "=" not in text:
        raise BudgetError(
            f"malformed budget: expected TARGET=LIMIT such as latency_ms=50, got {text!r}. "
            f"Write the target, '=', then the limit; targets: {', '.join(BUDGET_METRICS)}."
        )
    name, _, raw = text.partition("=")
    return _check_budget(name.strip(), raw.strip())


def _check_budget(name: str, raw: Any) -> tuple[str, float]:
    if name not in BUDGET_METRICS:
        raise BudgetError(
            f"unknown budget target: expected one of {', '.join(BUDGET_METRICS)}, got {name!r}. "
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


class Budgets(dict):
    """Parsed budgets ``{target: limit}`` (a plain dict to every reader). Handing one to
    :func:`parse_budgets` again returns it as is: a budget list is parsed once per command, at
    its entry point, however many stages it passes through."""


def parse_budgets(budgets: Iterable[str] | Mapping[str, Any] | None) -> Budgets:
    """Budgets from ``["latency_ms=50", ...]`` or ``{"latency_ms": 50}``; None -> empty.

    A target given twice is an error (which limit would apply would be ambiguous). Already
    parsed :class:`Budgets` are returned unchanged.
    """
    if isinstance(budgets, Budgets):
        return budgets
    if budgets is None:
        return Budgets()
    if isinstance(budgets, str):
        budgets = [budgets]
    pairs = (
        [_check_budget(str(k), v) for k, v in budgets.items()]
        if isinstance(budgets, Mapping)
        else [parse_budget(b) for b in budgets]
    )
    out = Budgets()
    for name, limit in pairs:
        if name in out:
            raise BudgetError(
                f"duplicate budget for {name}: expected each target at most once, got limits "
                f"{out[name]:g} and {limit:g}. Keep one of them."
            )
        out[name] = limit
    return out


def check_confidence(confidence: Any) -> float | None:
    """``confidence`` as a float in (0, 1), or None; BudgetError otherwise."""
    if confidence is None:
        return None
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, (int, float, np.integer, np.floating))
        or not 0.0 < float(confidence) < 1.0
    ):
        raise BudgetError(
            f"invalid confidence: expected None or a probability strictly between 0 and 1, got "
            f"{confidence!r}. Use e.g. 0.9 or 0.99 (None for point predictions)."
        )
    return float(confidence)


def confidence_alpha(confidence: float | None) -> float | None:
    """The interval level ``alpha = 1 - confidence`` to predict at (None: point predictions).

    Rounded to 12 digits so that ``0.95`` asks for ``alpha = 0.05``, not 0.050000000000000044.
    """
    c = check_confidence(confidence)
    return None if c is None else round(1.0 - c, 12)


def model_targets(model: Any) -> list[str]:
    """The targets a fitted cost model predicts (its ``targets_``); ModelError if unfitted."""
    targets = getattr(model, "targets_", None)
    if targets is None:
        raise ModelError(
            "unfitted cost model: expected a fitted CostModel (with targets_), got "
            f"{type(model).__name__} without targets_. Train it (carb-nas model train) or load "
            "a saved one."
        )
    return [str(t) for t in targets]


def platform_name(model: Any) -> str:
    """``device/runtime/precision`` a model was trained for (from its ``platform_``)."""
    plat = getattr(model, "platform_", None) or {}
    if isinstance(plat, Mapping):
        if plat.get("platform"):
            return str(plat["platform"])
        parts = [plat.get(k) for k in ("device", "runtime", "precision")]
        if all(parts):
            return "/".join(map(str, parts))
    return "this model's platform"


#: runtimes whose measured ``peak_mem_mb`` is what one inference adds to the process's resident
#: memory (RSS high-water mark; weights and the compiled model already resident), not the
#: tensor peak (parameters + activations) of torch and ONNX Runtime (measure._openvino)
RSS_PEAK_RUNTIMES = ("openvino", "litert")
_WARNED_RSS_PEAK: set[str] = set()


def check_budgets(budgets: Mapping[str, float], model: Any, role: str = "model") -> None:
    """Raise BudgetError when a budget names a target ``model`` does not predict; warn (once
    per platform and process) when a memory budget meets a model of :data:`RSS_PEAK_RUNTIMES`,
    whose peak memory means something else."""
    targets = model_targets(model)
    for name in budgets:
        if name in SCENARIO_METRICS:
            raise BudgetError(
                f"budget on a scenario metric the {role} cannot predict: {name!r} is measured "
                f"under an MLPerf LoadGen scenario, got it with the {role} for "
                f"{platform_name(model)} (predicting {targets}). Check it on measurements: "
                f"carb-nas loadgen PARETO --scenario {_SCENARIO_OF[name]} --model MODEL."
            )
        if base_target(name) not in targets:
            why = " (that platform had no energy meter)" if name.startswith("energy") else ""
            raise BudgetError(
                f"budget on a target the {role} does not predict: the {role} for "
                f"{platform_name(model)} predicts {targets}{why}, got a budget on {name!r}. "
                "Drop that budget or use a model trained with that target."
            )
    plat = getattr(model, "platform_", None)
    runtime = plat.get("runtime") if isinstance(plat, Mapping) else None
    name = platform_name(model)
    memory = any(base_target(n) == "peak_mem_mb" for n in budgets)
    if memory and runtime in RSS_PEAK_RUNTIMES and name not in _WARNED_RSS_PEAK:
        import warnings

        _WARNED_RSS_PEAK.add(name)
        warnings.warn(
            f"peak_mem_mb of the {role} for {name} is what {runtime} adds to the process's "
            "resident memory during one inference (its weights and compiled model excluded; "
            "RSS high-water mark, coarse), not the tensor peak torch and ONNX Runtime report: "
            "a peak_mem_mb budget on it is not comparable with one on those runtimes.",
            UserWarning,
            stacklevel=2,
        )


def check_scenario_budgets(budgets: Mapping[str, float], scenario: str) -> None:
    """BudgetError unless every budget is the one ``scenario`` measures
    (:data:`SCENARIO_BUDGETS`): single-stream ``latency_p90_ms``, multi-stream
    ``latency_p99_ms``, offline ``throughput_sps``."""
    if scenario not in SCENARIO_BUDGETS:
        raise BudgetError(
            f"unknown scenario: expected one of {list(SCENARIO_BUDGETS)}, got {scenario!r}. "
            "Use --scenario single-stream, multi-stream or offline."
        )
    own = SCENARIO_BUDGETS[scenario]
    for name in budgets:
        if name == own:
            continue
        if name in _SCENARIO_OF:
            fix = f"use --scenario {_SCENARIO_OF[name]} for {name}"
        else:
            fix = f"drop --scenario to check {name} with the profiler"
        raise BudgetError(
            f"budget {name} does not belong to scenario {scenario}: expected {own} "
            f"({_SCENARIO_WHAT[own]}), got {name}. Budget {own}=LIMIT, or {fix}."
        )


def budget_column(name: str, upper: bool) -> str:
    """Prediction column a budget on ``name`` is checked against (upper bound or point)."""
    base = base_target(name)
    return f"{base}_upper" if upper else base


def metric_values(
    pred: pd.DataFrame, name: str, batch_size: Any, upper: bool = False
) -> np.ndarray:
    """Values of a metric (a target or ``<target>_per_image``) from a prediction frame."""
    col = budget_column(name, upper)
    if col not in pred:
        raise ModelError(
            f"missing prediction column {col!r}: expected the model's output to hold it, got "
            f"columns {list(pred.columns)}. Ask for intervals (alpha) when using confidence."
        )
    values = pred[col].to_numpy(dtype=float)
    if name.endswith(PER_IMAGE):
        values = values / np.asarray(batch_size, dtype=float)
    return values


def violation_frame(
    pred: pd.DataFrame, batch_size: Any, budgets: Mapping[str, float], upper: bool
) -> pd.DataFrame:
    """Relative excess ``value / limit - 1`` per budget (<= 0 within budget)."""
    out = pd.DataFrame(index=pred.index)
    for name, limit in budgets.items():
        out[name] = metric_values(pred, name, batch_size, upper=upper) / limit - 1.0
    return out


def accept_mask(
    pred: pd.DataFrame, batch_size: Any, budgets: Mapping[str, float], upper: bool
) -> np.ndarray:
    """True where every budget holds (on the upper bounds when ``upper``); all True without
    budgets. The one accept/reject rule of screen, search, validate and the plugin."""
    viol = violation_frame(pred, batch_size, budgets, upper)
    return (viol.to_numpy(dtype=float) <= 0).all(axis=1)


def measured_violations(values: Mapping[str, Any], budgets: Mapping[str, float]) -> dict:
    """Relative violation per budget of one measured row (<= 0 within budget; NaN: not
    measured). Scenario metrics follow their direction (throughput is a lower limit)."""
    out: dict[str, float] = {}
    for name, limit in budgets.items():
        v = values.get(name)
        v = float("nan") if v is None else float(v)
        if SCENARIO_METRICS.get(name) == "min":
            out[name] = limit / v - 1.0 if v > 0 else (math.inf if v == 0 else float("nan"))
        else:
            out[name] = v / limit - 1.0
    return out


def accept_measured(values: Mapping[str, Any], budgets: Mapping[str, float]) -> bool:
    """True when every budget holds on a measured row (a metric not measured fails)."""
    return all(v <= 0 for v in measured_violations(values, budgets).values())


# -- Pareto ----------------------------------------------------------------------------------
def pareto_mask(values: Any) -> np.ndarray:
    """Boolean mask of the non-dominated rows of ``values`` (n x m), every column minimized.

    A row is dominated when another row is <= in every column and < in at least one. Exact
    duplicates of a non-dominated row are all kept. Rows holding NaN are never in the front.
    pymoo's non-dominated sorting (``find_non_dominated``, moocore underneath) does the work.
    """
    from pymoo.util.nds.non_dominated_sorting import find_non_dominated

    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError(f"pareto_mask expects a 2-D array (rows x objectives), got {v.shape}")
    n, m = v.shape
    mask = np.zeros(n, dtype=bool)
    ok = ~np.isnan(v).any(axis=1)
    if n == 0 or m == 0 or not ok.any():
        return mask
    idx = np.flatnonzero(ok)
    mask[idx[find_non_dominated(np.ascontiguousarray(v[idx]))]] = True
    return mask


def pareto_front(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Rows of ``frame`` that are non-dominated over ``columns`` (all minimized)."""
    if len(frame) == 0:
        return frame.copy()
    return frame[pareto_mask(frame[list(columns)].to_numpy(dtype=float))].copy()
