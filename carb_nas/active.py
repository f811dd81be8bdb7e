"""Profile actively: choose the next configs to measure where they teach the cost model most.

A campaign that measures configs at random spends most of its time where the model already
predicts well. :func:`choose_active` picks the next ``n`` configs of a candidate set from

- **coverage**: the distance to everything measured (or already chosen) in a standardized
  space of the knobs (log batch, log resolution, log width, log depth, family) and of the
  model's predictions (log latency, log memory: configs that *cost* alike are alike), so the
  measured set spreads over the space and over the range of costs;
- **uncertainty**: that distance weighted by ``1 + w / median(w)``, with ``w`` the relative
  width of the model's conformal latency interval (``log(upper / lower)``), so configs the
  model is least sure of count more;

greedily (farthest-point order, each pick updating the distances). Before there is a model
(fewer than ``n_seed`` measured rows), the picks are seeded random ones. Each chosen config
carries why it was chosen: ``active_reason`` (``seed``, ``coverage`` or ``uncertainty``: the
latter when its interval is wider than the median, so the weight changed its rank) and
``active_interval_width`` (``w``; NaN for a seed).

``benchmarks/active.py`` replays this on the shipped datasets (pool-based: choosing among rows
already measured) against random and stratified selection; ``carb-nas profile SPACE --active
N`` runs it in a campaign, retraining between rounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb_nas.costmodel import model_inputs
from carb_nas.errors import ConfigError
from carb_nas.space import CONFIG_COLUMNS

__all__ = [
    "ACTIVE_REASONS",
    "N_SEED",
    "choose_active",
    "coverage_matrix",
    "config_keys",
]

ACTIVE_REASONS = ("seed", "coverage", "uncertainty")
N_SEED = 8  # random picks before the first model: a model needs a few rows of every kind
INTERVAL_ALPHA = 0.1
_KNOBS = ("batch_size", "resolution", "width", "depth")


def config_keys(frame: pd.DataFrame) -> list[tuple]:
    """Hashable config identities (CONFIG_COLUMNS as strings) of the rows of ``frame``."""
    return [tuple(r) for r in frame[list(CONFIG_COLUMNS)].astype(str).itertuples(index=False)]


def coverage_matrix(frame: pd.DataFrame, pred: pd.DataFrame | None = None) -> np.ndarray:
    """The coordinates coverage is measured in, one row per config (not yet standardized):
    log knobs, ``is_bottleneck`` and, with ``pred``, the log of each predicted target."""
    cols = [np.log(frame[k].to_numpy(float)) for k in _KNOBS]
    cols.append((frame["family"].astype(str) == "bottleneck").to_numpy(float))
    if pred is not None:
        for t in ("latency_ms", "peak_mem_mb"):
            if t in pred:
                cols.append(np.log(np.maximum(pred[t].to_numpy(float), 1e-9)))
    return np.column_stack(cols)


def _predict(model: Any, frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Predictions and the relative latency interval width (``log(upper / lower)``)."""
    pred = model.predict(model_inputs(frame), alpha=INTERVAL_ALPHA)
    if "latency_ms_upper" in pred:
        up = np.maximum(pred["latency_ms_upper"].to_numpy(float), 1e-12)
        lo = np.maximum(pred["latency_ms_lower"].to_numpy(float), 1e-12)
        width = np.log(up / lo)
        finite = np.isfinite(width)
        width = np.where(finite, width, np.max(width[finite], initial=1.0))
    else:
        width = np.ones(len(frame))
    return pred, width


def choose_active(
    candidates: pd.DataFrame,
    measured: pd.DataFrame | None = None,
    model: Any | None = None,
    n: int = 8,
    seed: int = 0,
    n_seed: int = N_SEED,
) -> pd.DataFrame:
    """The next ``n`` configs of ``candidates`` to measure, in measuring order.

    Args:
        candidates: configs (CONFIG_COLUMNS) to choose from; those already in ``measured``
            are never chosen.
        measured: configs measured so far (CONFIG_COLUMNS), or None.
        model: a fitted CostModel trained on the measured rows (None: seeded random picks).
        n: how many to choose (at most what is left).
        seed: the random picks' seed.
        n_seed: below this many measured rows (or with no model) the picks are random.

    Returns ``candidates``' chosen rows (index reset) with ``active_reason`` and
    ``active_interval_width`` (see the module docstring).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ConfigError(
            f"invalid active count: expected a whole number >= 1, got {n!r}. Use e.g. 16."
        )
    cand = candidates[list(CONFIG_COLUMNS)].drop_duplicates().reset_index(drop=True)
    measured = (
        measured[list(CONFIG_COLUMNS)].reset_index(drop=True)
        if measured is not None and len(measured)
        else cand.iloc[:0]
    )
    done = set(config_keys(measured))
    cand = cand[[k not in done for k in config_keys(cand)]].reset_index(drop=True)
    n = min(int(n), len(cand))
    if n == 0:
        return cand.assign(active_reason=pd.Series(dtype=str), active_interval_width=np.nan)
    rng = np.random.default_rng(seed)
    if model is None or len(measured) < n_seed:
        idx = rng.choice(len(cand), n, replace=False)
        return cand.iloc[idx].reset_index(drop=True).assign(
            active_reason="seed", active_interval_width=np.nan
        )
    pred_c, width = _predict(model, cand)
    pred_m, _ = _predict(model, measured)
    Xc, Xm = coverage_matrix(cand, pred_c), coverage_matrix(measured, pred_m)
    both = np.vstack([Xc, Xm])
    mean, std = both.mean(axis=0), both.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    Xc, Xm = (Xc - mean) / std, (Xm - mean) / std
    # distance of every candidate to its nearest measured config (chunked: pools are large)
    dist = np.full(len(Xc), np.inf)
    for start in range(0, len(Xm), 512):
        block = Xm[start : start + 512]
        d = np.sqrt(((Xc[:, None, :] - block[None, :, :]) ** 2).sum(axis=2)).min(axis=1)
        dist = np.minimum(dist, d)
    med = float(np.median(width)) or 1.0
    weight = 1.0 + width / med
    order: list[int] = []
    for _ in range(n):
        i = int(np.argmax(dist * weight))
        if not np.isfinite(dist[i]) or dist[i] <= 0:
            break
        order.append(i)
        dist = np.minimum(dist, np.linalg.norm(Xc - Xc[i], axis=1))
    if len(order) < n:  # the rest coincide with measured configs in these coordinates
        left = np.setdiff1d(np.arange(len(cand)), order)
        order += list(rng.choice(left, n - len(order), replace=False))
    chosen = cand.iloc[order].reset_index(drop=True)
    w = width[order]
    return chosen.assign(
        active_reason=np.where(w > med, "uncertainty", "coverage"), active_interval_width=w
    )
