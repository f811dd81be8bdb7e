"""Evaluate cost models the way the CARB paper does (see docs/concepts.md).

Everything here works on any ``X``/``Y`` the cost model accepts:

* :func:`regression_metrics` -- R2, MAE and MAPE (MAPE as a fraction, 0.05 = 5 %), by
  ``sklearn.metrics``.
* :func:`flops_linear_baseline` -- least squares on the ``flops`` column alone.
* :func:`latency_energy_proxy` -- energy as a linear map of *measured* latency.
* :func:`leave_one_batch_tier_out` -- train on ``batch_size > 8``, test on ``<= 8`` (retrains).
* :func:`telemetry_ablation` -- the same model without telemetry columns (retrains).
* :func:`feature_importance` -- blend-weighted importances of the three learners, per target.
* :func:`interval_coverage` -- how often the measured value falls in the conformal interval.
* :func:`budget_classification` -- accept/reject decisions against a budget: accuracy, false
  accepts (predicted within budget, measured over it) and false rejects, as shares of all rows.
* :func:`parity_plots` -- predicted vs measured PNGs (matplotlib, Agg backend).
* :func:`evaluate` -- all of the above that need no retraining, as one JSON-able dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.costmodel._common import TELEMETRY_COLUMNS
from carb_nas.costmodel._metrics import regression_metrics
from carb_nas.errors import ModelError

__all__ = [
    "regression_metrics",
    "score",
    "flops_linear_baseline",
    "flops_linear_baseline_cv",
    "latency_energy_proxy",
    "leave_one_batch_tier_out",
    "telemetry_ablation",
    "feature_importance",
    "interval_coverage",
    "budget_classification",
    "default_budgets",
    "parity_plots",
    "evaluate",
]


def score(
    model: Any, X: pd.DataFrame, Y: pd.DataFrame, pred: pd.DataFrame | None = None
) -> dict[str, dict[str, float]]:
    """:func:`regression_metrics` per target the model predicts and ``Y`` holds."""
    pred = model.predict(X) if pred is None else pred
    return {t: regression_metrics(Y[t], pred[t]) for t in model.targets_ if t in Y}


def _flops(X: pd.DataFrame) -> np.ndarray | None:
    return X["flops"].to_numpy(dtype=float).reshape(-1, 1) if "flops" in X else None


def flops_linear_baseline(
    X_train: pd.DataFrame, Y_train: pd.DataFrame, X_test: pd.DataFrame, Y_test: pd.DataFrame
) -> dict[str, Any]:
    """Per target: ``LinearRegression`` on FLOPs alone (raw units), fitted on the training rows,
    scored on the test rows. ``{"skipped": reason}`` without a ``flops`` column."""
    from sklearn.linear_model import LinearRegression

    ftr, fte = _flops(X_train), _flops(X_test)
    if ftr is None or fte is None:
        return {"skipped": "no flops column in X"}
    out = {}
    for t in Y_test.columns:
        if t not in Y_train:
            continue
        y = Y_train[t].to_numpy(dtype=float)
        ok = ~np.isnan(y)
        lr = LinearRegression().fit(ftr[ok], y[ok])
        out[t] = regression_metrics(Y_test[t], lr.predict(fte))
    return out


def flops_linear_baseline_cv(
    X: pd.DataFrame, Y: pd.DataFrame, folds: int = 5, seed: int = 0
) -> dict[str, Any]:
    """The FLOPs-only baseline scored on ``folds``-fold out-of-fold predictions of one table
    (for evaluating a saved model on a dataset without a training split)."""

    f = _flops(X)
    if f is None:
        return {"skipped": "no flops column in X"}
    n = len(X)
    if n < 2 * folds:
        return {"skipped": f"only {n} rows (< {2 * folds}) for {folds}-fold cross-validation"}
    out = {}
    for t in Y.columns:
        y = Y[t].to_numpy(dtype=float)
        measured = ~np.isnan(y)
        pred = _cross_val_linear(f, y, measured, folds, seed)
        out[t] = regression_metrics(y, pred)
    return out


def _cross_val_linear(
    x: np.ndarray, y: np.ndarray, fit_mask: np.ndarray, folds: int, seed: int
) -> np.ndarray:
    """Out-of-fold predictions of ``LinearRegression`` (shuffled KFold), fitted on the rows
    of each training fold that ``fit_mask`` keeps."""
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import KFold

    pred = np.empty(len(y))
    for train, test in KFold(folds, shuffle=True, random_state=seed).split(x):
        keep = train[fit_mask[train]]
        pred[test] = LinearRegression().fit(x[keep], y[keep]).predict(x[test])
    return pred


def latency_energy_proxy(Y_train: pd.DataFrame, Y_test: pd.DataFrame) -> dict[str, Any] | None:
    """Energy predicted as ``a * latency_ms + b`` (fitted on the training rows' *measured*
    latency and energy) and scored on the test rows; None without both columns."""
    from sklearn.linear_model import LinearRegression

    need = ("latency_ms", "energy_j")
    if not all(c in Y_train and c in Y_test for c in need):
        return None
    lr = LinearRegression().fit(
        Y_train[["latency_ms"]].to_numpy(float), Y_train["energy_j"].to_numpy(float)
    )
    out = regression_metrics(Y_test["energy_j"], lr.predict(Y_test[["latency_ms"]].to_numpy(float)))
    out["slope_j_per_ms"] = float(lr.coef_[0])
    out["intercept_j"] = float(lr.intercept_)
    return out


def _regime(X: pd.DataFrame, threshold: int) -> np.ndarray | None:
    if "batch_size" not in X:
        return None
    return X["batch_size"].to_numpy(dtype=float) <= threshold


def leave_one_batch_tier_out(
    model: Any, X: pd.DataFrame, Y: pd.DataFrame, threshold: int = 8
) -> dict[str, Any]:
    """Fit a fresh copy of ``model`` (same parameters) on rows with ``batch_size > threshold``
    and score it on rows with ``batch_size <= threshold`` (the CARB paper's extrapolation
    test)."""
    from sklearn.base import clone

    low = _regime(X, threshold)
    if low is None:
        return {"skipped": "no batch_size column in X"}
    if low.all() or not low.any():
        return {"skipped": f"all rows are on one side of batch_size {threshold}"}
    m = clone(model)
    try:
        m.fit(X[~low], Y[~low])
    except ModelError as e:
        return {"skipped": f"could not train on batch_size > {threshold}: {e}"}
    out: dict[str, Any] = score(m, X[low], Y[low])
    out["n_train"] = int((~low).sum())
    out["n_test"] = int(low.sum())
    return out


def telemetry_ablation(
    model: Any,
    X_train: pd.DataFrame,
    Y_train: pd.DataFrame,
    X_test: pd.DataFrame,
    Y_test: pd.DataFrame,
) -> dict[str, Any]:
    """R2 of ``model`` (fitted, with telemetry) vs a fresh architecture-only copy fitted on the
    same rows (CARB: at most 0.0012 R2 lost)."""
    from sklearn.base import clone

    used = [c for c in TELEMETRY_COLUMNS if c in list(model.feature_names_in_)]
    if not used:
        return {"skipped": "the model uses no telemetry columns"}
    arch = clone(model).set_params(architecture_only=True).fit(X_train, Y_train)
    full = score(model, X_test, Y_test)
    ablated = score(arch, X_test, Y_test)
    return {
        "telemetry_columns": used,
        "full": full,
        "architecture_only": ablated,
        "delta_r2": {t: full[t]["r2"] - ablated[t]["r2"] for t in full},
    }


def feature_importance(model: Any, top: int = 10) -> dict[str, list[list[Any]]]:
    """Per target, the ``top`` features by blend-weighted normalised importance."""
    imp = model.feature_importance()
    return {
        t: [
            [name, round(float(v), 6)]
            for name, v in imp[t].sort_values(ascending=False).head(top).items()
        ]
        for t in imp.columns
    }


def interval_coverage(
    model: Any,
    X: pd.DataFrame,
    Y: pd.DataFrame,
    alpha: float = 0.05,
    pred: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Share of measured values inside ``predict(X, alpha)``'s interval, overall and per batch
    regime, and the median relative half-width ``(upper - lower) / (2 * prediction)``."""
    pred = model.predict(X, alpha=alpha) if pred is None else pred
    low = _regime(X, getattr(model, "low_batch_threshold", 8))
    out: dict[str, Any] = {"alpha": alpha, "nominal": 1 - alpha}
    for t in model.targets_:
        if t not in Y:
            continue
        y = Y[t].to_numpy(dtype=float)
        lo, hi, p = (
            pred[f"{t}_lower"].to_numpy(),
            pred[f"{t}_upper"].to_numpy(),
            pred[t].to_numpy(),
        )
        inside = (y >= lo) & (y <= hi)
        with np.errstate(invalid="ignore", divide="ignore"):
            width = (hi - lo) / (2 * np.abs(p))
        res: dict[str, float | None] = {
            "coverage": float(inside.mean()) if len(y) else float("nan"),
            "median_rel_halfwidth": float(np.median(width)) if len(y) else float("nan"),
            "n": int(len(y)),
        }
        if low is not None:
            for name, m in (("low_batch", low), ("high_batch", ~low)):
                res[f"coverage_{name}"] = float(inside[m].mean()) if m.any() else None
        out[t] = res
    return out


def default_budgets(Y: pd.DataFrame, targets: Sequence[str]) -> dict[str, float]:
    """A budget at the median of every target (half the rows pass each limit)."""
    return {t: float(Y[t].median()) for t in targets if t in Y}


def budget_classification(
    Y_true: pd.DataFrame, pred: pd.DataFrame, budgets: Mapping[str, float], bound: str = "point"
) -> dict[str, Any]:
    """Accept/reject decisions: a row is within budget when every budgeted target is at most its
    limit. ``bound="upper"`` decides on the interval's upper bound (``t_upper``) instead of the
    point prediction. Rates are shares of all rows."""
    if not budgets:
        raise ModelError(
            "budget classification: expected at least one budget {target: limit}, "
            "got none. Pass e.g. {'latency_ms': 50}."
        )
    n = len(Y_true)
    truth = np.ones(n, bool)
    decided = np.ones(n, bool)
    for t, limit in budgets.items():
        col = f"{t}_upper" if bound == "upper" else t
        if t not in Y_true or col not in pred:
            raise ModelError(
                f"budget classification: expected measured and predicted {t!r} "
                f"(column {col!r}), got measured={t in Y_true}, predicted="
                f"{col in pred}. Budget only targets the model predicts."
            )
        truth &= Y_true[t].to_numpy(dtype=float) <= limit
        decided &= pred[col].to_numpy(dtype=float) <= limit
    fa = int((decided & ~truth).sum())
    fr = int((~decided & truth).sum())
    return {
        "budgets": {k: float(v) for k, v in budgets.items()},
        "decision": bound,
        "n": n,
        "accuracy": float((decided == truth).mean()) if n else float("nan"),
        "false_accepts": fa,
        "false_rejects": fr,
        "false_accept_rate": fa / n if n else float("nan"),
        "false_reject_rate": fr / n if n else float("nan"),
        "measured_within_budget": int(truth.sum()),
        "predicted_within_budget": int(decided.sum()),
    }


def parity_plots(
    Y_true: pd.DataFrame,
    pred: pd.DataFrame,
    out_dir: str | Path,
    title: str = "",
    low_batch: np.ndarray | None = None,
) -> list[str]:
    """One ``parity_<target>.png`` per target in ``out_dir``: predicted vs measured, log axes
    when every value is positive, the y = x line, R2 and MAE in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in [c for c in Y_true.columns if c in pred]:
        y = Y_true[t].to_numpy(dtype=float)
        p = pred[t].to_numpy(dtype=float)
        m = regression_metrics(y, p)
        fig, ax = plt.subplots(figsize=(4.8, 4.4), dpi=110)
        if low_batch is not None:
            ax.scatter(y[~low_batch], p[~low_batch], s=5, alpha=0.5, label="batch > 8")
            ax.scatter(y[low_batch], p[low_batch], s=5, alpha=0.5, label="batch <= 8")
            ax.legend(loc="upper left", fontsize=8)
        else:
            ax.scatter(y, p, s=5, alpha=0.5)
        both = np.concatenate([y, p])
        both = both[np.isfinite(both)]
        lo, hi = (both.min(), both.max()) if len(both) else (0, 1)
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        if lo > 0:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"measured {t}")
        ax.set_ylabel(f"predicted {t}")
        ax.set_title(
            f"{title}{' ' if title else ''}{t}: R2 {m['r2']:.4f}, MAE {m['mae']:.3g}", fontsize=9
        )
        fig.tight_layout()
        path = d / f"parity_{t}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(str(path))
    return paths


def evaluate(
    model: Any,
    X: pd.DataFrame,
    Y: pd.DataFrame,
    *,
    alpha: float = 0.05,
    budgets: Mapping[str, float] | None = None,
    report_dir: str | Path | None = None,
    baseline_train: tuple[pd.DataFrame, pd.DataFrame] | None = None,
    top_features: int = 10,
) -> dict[str, Any]:
    """Score a fitted model on ``X``/``Y``: metrics (overall and per batch regime), the FLOPs
    and latency-as-energy baselines (fitted on ``baseline_train`` when given, else
    cross-validated on ``X``/``Y``), interval coverage, budget decisions
    (default budgets: the targets' medians), feature importance, and parity plots in
    ``report_dir`` (with ``evaluation.json``) when given. JSON-able."""
    targets = [t for t in model.targets_ if t in Y]
    if not targets:
        raise ModelError(
            f"nothing to evaluate: expected measured columns among the model's "
            f"targets {list(model.targets_)}, got {list(Y.columns)}. Evaluate on "
            "rows that measure them."
        )
    Y = Y[targets]
    has_intervals = bool(model.conformal_[targets[0]]["all"])
    pred = model.predict(X, alpha=alpha if has_intervals else None)
    low = _regime(X, getattr(model, "low_batch_threshold", 8))
    out: dict[str, Any] = {
        "n_rows": int(len(X)),
        "targets": targets,
        "test": score(model, X, Y, pred),
    }
    if low is not None:
        out["test_low_batch"] = score(model, X[low], Y[low], pred[low])
        out["test_high_batch"] = score(model, X[~low], Y[~low], pred[~low])
    if baseline_train is not None:
        Xb, Yb = baseline_train
        out["baselines"] = {"flops_linear": flops_linear_baseline(Xb, Yb[targets], X, Y)}
        proxy = latency_energy_proxy(Yb, Y)
        proxy_how = "fitted on the training split"
    else:
        out["baselines"] = {"flops_linear": flops_linear_baseline_cv(X, Y)}
        out["baselines"]["flops_linear_how"] = "5-fold cross-validated on the evaluated rows"
        proxy = _proxy_cv(Y)
        proxy_how = "5-fold cross-validated on the evaluated rows"
    if proxy is not None:
        out["baselines"]["latency_as_energy"] = proxy
        out["baselines"]["latency_as_energy_how"] = proxy_how
    if has_intervals:
        out["intervals"] = interval_coverage(model, X, Y, alpha, pred)
    budgets = dict(budgets) if budgets else default_budgets(Y, targets)
    out["budget"] = {"point": budget_classification(Y, pred, budgets, "point")}
    if has_intervals:
        out["budget"]["upper"] = budget_classification(Y, pred, budgets, "upper")
    out["feature_importance"] = feature_importance(model, top_features)
    if report_dir is not None:
        out["plots"] = parity_plots(Y, pred, report_dir, low_batch=low)
    return out


def _proxy_cv(Y: pd.DataFrame, folds: int = 5) -> dict[str, Any] | None:
    if not ("latency_ms" in Y and "energy_j" in Y) or len(Y) < 2 * folds:
        return None
    lat = Y[["latency_ms"]].to_numpy(float)
    e = Y["energy_j"].to_numpy(float)
    return regression_metrics(e, _cross_val_linear(lat, e, np.ones(len(e), bool), folds, 0))
