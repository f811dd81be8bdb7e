"""Small statistics of the reports: R2 (sklearn.metrics), fits, rank correlation, ratios."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.metrics import r2_score

__all__ = ["r2", "linear_fit", "spearman", "ratio_stats", "mean_stats", "mdape", "json_key"]


def r2(y: np.ndarray, pred: np.ndarray) -> float:
    """Coefficient of determination; NaN when undefined (under 2 values, constant ``y``, or
    non-finite predictions)."""
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    if len(y) < 2 or np.ptp(y) == 0.0 or not np.isfinite(pred).all():
        return math.nan
    return float(r2_score(y, pred))


def mdape(y: np.ndarray, pred: np.ndarray) -> float:
    """Median absolute percentage error, %."""
    return float(100 * np.median(np.abs(pred - y) / np.abs(y)))


def linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least-squares ``y = slope * x + intercept``; returns (slope, intercept, R2)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.ptp(x) == 0.0:
        return math.nan, math.nan, math.nan
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept), r2(y, slope * x + intercept)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(spearmanr(x, y).statistic)


def ratio_stats(r: np.ndarray) -> dict[str, float]:
    r = np.asarray(r, float)
    r = r[np.isfinite(r) & (r > 0)]
    if len(r) == 0:
        return {"n": 0}
    return {
        "n": int(len(r)),
        "geomean": float(np.exp(np.mean(np.log(r)))),
        "median": float(np.median(r)),
        "p10": float(np.quantile(r, 0.10)),
        "p90": float(np.quantile(r, 0.90)),
        "frac_below_1": float(np.mean(r < 1.0)),
    }


def mean_stats(v: np.ndarray) -> dict[str, float]:
    v = np.asarray(v, float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return {"n": 0}
    return {"n": int(len(v)), "mean": float(v.mean()), "median": float(np.median(v))}


def json_key(value: Any) -> str:
    """JSON key for a knob value: 0.5 -> "0.5", 64 -> "64"."""
    if isinstance(value, (float, np.floating)):
        return format(float(value), "g")
    return str(value)
