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
    "MIN_FIT_ROWS",
    "N_SEED",
    "ROUND_SIZE",
    "check_active_count",
    "choose_active",
    "config_keys",
    "coverage_matrix",
    "fit_round_model",
    "run_active_campaign",
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
        return (
            cand.iloc[idx]
            .reset_index(drop=True)
            .assign(active_reason="seed", active_interval_width=np.nan)
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


# -- an active campaign: rounds of choices, each after refitting on the rows measured so far --
#: rows a round's model needs: >= 20 to train and >= 10 to calibrate its intervals
MIN_FIT_ROWS = 30
ROUND_SIZE = 8


def fit_round_model(rows: pd.DataFrame, seed: int = 0) -> Any | None:
    """A fast-preset CostModel of latency (and memory) on a campaign's ok rows, or None when
    there are fewer than :data:`MIN_FIT_ROWS` of them.

    The model only ranks the next configs to measure and is never saved; it is refitted every
    round. No validation split (no blend search); a calibration split of at least 10 rows
    gives the conformal intervals whose width weighs the choice.
    """
    from carb_nas.costmodel import CostModel

    ok = rows[rows["status"].astype(str) == "ok"].reset_index(drop=True)
    targets = [
        t
        for t in ("peak_mem_mb", "latency_ms")
        if t in ok and len(ok) and pd.to_numeric(ok[t], errors="coerce").gt(0).all()
    ]
    if "latency_ms" not in targets or len(ok) < MIN_FIT_ROWS:
        return None
    model = CostModel(
        preset="fast",
        targets=targets,
        validation_fraction=0.0,
        calibration_fraction=max(0.2, 10.5 / len(ok)),
        random_state=seed,
    )
    return model.fit(model_inputs(ok), ok[targets].astype(float))


def _candidates(configs: pd.DataFrame, runtime: str, precision: str) -> pd.DataFrame:
    """The distinct configs of a source, with the campaign's runtime and precision."""
    arch = [c for c in CONFIG_COLUMNS if c not in ("runtime", "precision")]
    out = configs[arch].drop_duplicates().reset_index(drop=True)
    return out.assign(precision=precision, runtime=runtime)[list(CONFIG_COLUMNS)]


def check_active_count(n: Any, round_size: Any, n_configs: int) -> None:
    """Refuse an ``--active`` count or round size out of range with one line."""
    for name, v, fix in (
        ("--active", n, "Use e.g. --active 64."),
        ("--active-round", round_size, "Use e.g. --active-round 8."),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"invalid {name}: expected a whole number >= 1, got {v!r}. {fix}")
    if n > n_configs:
        raise ConfigError(
            f"invalid --active: expected at most the {n_configs} configs of the space, got "
            f"{n}. Use --active {n_configs} or fewer (or profile them all without --active)."
        )


def _round_of(rows: pd.DataFrame) -> int:
    if "active_round" not in rows or rows["active_round"].isna().all():
        return 0
    return int(pd.to_numeric(rows["active_round"], errors="coerce").max())


def run_active_campaign(
    configs: pd.DataFrame,
    out_dir: Any,
    n: int,
    *,
    round_size: int = ROUND_SIZE,
    runtime: str = "torch",
    precision: str = "fp32",
    seed: int = 0,
    storage: str | None = None,
    max_configs: int | None = None,
    fit: Any = None,
    seed_rows: int = MIN_FIT_ROWS,
    on_round: Any = None,
    **campaign: Any,
) -> dict[str, Any]:
    """Profile ``n`` configs of ``configs`` chosen actively into the campaign ``out_dir``.

    Rounds: each round fits a model on every row measured so far (``fit(rows, seed)``,
    default :func:`fit_round_model`). While it gives none (too few ok rows), a seed round picks
    random configs, enough to reach ``seed_rows`` ok rows (at least ``round_size``); then each
    round measures the next ``round_size`` configs :func:`choose_active` picks. Each row
    records ``active_round``, ``active_reason`` and ``active_interval_width``.

    Resumable like every campaign (``measure.run_campaign``): a call first measures what is
    queued (a killed round), then continues from the rows already measured, also those of a
    campaign started without ``--active``; ``n`` counts every config of the campaign, so a
    finished one measures nothing more. ``max_configs`` stops this call after that many
    measurements. ``campaign``: the other ``run_campaign`` arguments. ``on_round(info)`` is
    told each round before it is measured.

    Returns ``{"summary": CampaignSummary (counts summed over this call's rounds), "rounds":
    [{"round", "configs", "model_rows", "reasons"}]}``.
    """
    import dataclasses
    import time

    from carb_nas.measure import campaign_rows, run_campaign

    t_start = time.perf_counter()
    cand = _candidates(configs, runtime, precision)
    check_active_count(n, round_size, len(cand))
    fit = fit or fit_round_model
    kw = dict(runtime=runtime, precision=precision, seed=seed, storage=storage, **campaign)
    empty = cand.iloc[:0]
    summaries = [run_campaign(configs, out_dir, queue=empty, max_configs=max_configs, **kw)]
    rounds: list[dict[str, Any]] = []

    def left_to_measure() -> int | None:
        if max_configs is None:
            return None
        return max_configs - sum(s.measured_now for s in summaries)

    while True:
        last = summaries[-1]
        budget = left_to_measure()
        if last.done < last.total or (budget is not None and budget <= 0):
            break  # stopped by --max-configs: the queue waits for the next call
        left = n - last.total
        if left <= 0:
            break
        rows = campaign_rows(out_dir, storage)
        model = fit(rows, seed)
        n_ok = int((rows["status"].astype(str) == "ok").sum())
        k = round_size if model is not None else max(round_size, seed_rows - n_ok)
        number = _round_of(rows) + 1
        picks = choose_active(
            cand,
            rows,
            model,
            n=min(k, left),
            seed=seed + number,
            n_seed=0 if model is not None else len(rows) + 1,
        )
        if not len(picks):
            break
        info = {
            "round": number,
            "configs": len(picks),
            "model_rows": n_ok if model is not None else 0,
            "reasons": {str(r): int(c) for r, c in picks["active_reason"].value_counts().items()},
        }
        rounds.append(info)
        if on_round is not None:
            on_round(info)
        queue = picks.assign(active_round=number)
        summaries.append(run_campaign(configs, out_dir, queue=queue, max_configs=budget, **kw))
    total = dataclasses.replace(
        summaries[-1],
        **{
            f: sum(getattr(s, f) for s in summaries)
            for f in ("measured_now", "ok", "failed", "recovered", "requeued", "added")
        },
        torn_bytes_cut=summaries[0].torn_bytes_cut,
        wall_s=time.perf_counter() - t_start,
    )
    measured_s = [
        s.mean_s_per_config * s.measured_now
        for s in summaries
        if s.measured_now and s.mean_s_per_config is not None
    ]
    total.mean_s_per_config = sum(measured_s) / total.measured_now if total.measured_now else None
    return {"summary": total, "rounds": rounds}
