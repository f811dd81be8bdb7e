"""Regression metrics (scikit-learn's), the one implementation every stage scores with."""

from __future__ import annotations

from typing import Any

import numpy as np

from carb_nas.errors import ModelError


def regression_metrics(y_true: Any, y_pred: Any) -> dict[str, float]:
    """R2, MAE (target units) and MAPE (a fraction, 0.05 = 5 %) of predictions on the ``n``
    rows that have a measurement (NaN in ``y_true`` is skipped). R2 is NaN when fewer than two
    rows or a constant ``y_true`` leave it undefined; a non-finite prediction scores R2 -inf and
    MAE/MAPE inf."""
    from sklearn.metrics import mean_absolute_error, mean_absolute_percentage_error, r2_score

    y = np.asarray(y_true, dtype=float)
    p = np.asarray(y_pred, dtype=float)
    if y.shape != p.shape:
        raise ModelError(
            f"metrics: expected equally long arrays, got shapes {y.shape} and {p.shape}. "
            "Pass one prediction per measurement."
        )
    keep = ~np.isnan(y)  # rows without a measurement of this target are not scored
    y, p = y[keep], p[keep]
    n = len(y)
    if n == 0:
        return {"r2": float("nan"), "mae": float("nan"), "mape": float("nan"), "n": 0}
    if not np.isfinite(p).all():  # an overflowed prediction: infinitely wrong, not an error
        return {"r2": -float("inf"), "mae": float("inf"), "mape": float("inf"), "n": int(n)}
    defined = n >= 2 and float(np.ptp(y)) > 0
    return {
        "r2": float(r2_score(y, p)) if defined else float("nan"),
        "mae": float(mean_absolute_error(y, p)),
        "mape": float(mean_absolute_percentage_error(y, p)),
        "n": int(n),
    }
