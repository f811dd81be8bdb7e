"""Split-conformal intervals, Mondrian by batch regime (low batch vs the rest)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

MIN_CONFORMAL = 20  # calibration rows needed for a regime of its own


def _conformal_q(scores: Sequence[float], alpha: float) -> float:
    n = len(scores)
    if n == 0:
        return math.inf
    k = math.ceil((n + 1) * (1 - alpha))
    if k > n:
        return math.inf
    return float(np.sort(np.asarray(scores, dtype=float))[k - 1])


def regime_quantiles(scores: Mapping[str, Sequence[float]], alpha: float) -> tuple[float, float]:
    """Half-widths (low batch, high batch) for ``alpha`` from a target's calibration scores
    ``{"all", "low", "high"}``; a regime with fewer than MIN_CONFORMAL scores uses the pooled
    ones; NaN when there are none (no calibration part)."""
    if not scores["all"]:
        return math.nan, math.nan

    def q(group: str) -> float:
        return _conformal_q(
            scores[group] if len(scores[group]) >= MIN_CONFORMAL else scores["all"], alpha
        )

    return q("low"), q("high")


def conformal_scores(residuals: np.ndarray, low: np.ndarray) -> dict[str, list[float]]:
    """The absolute model-space residuals of the calibration rows, pooled and per regime."""
    scores = np.abs(residuals)
    return {"all": scores.tolist(), "low": scores[low].tolist(), "high": scores[~low].tolist()}
