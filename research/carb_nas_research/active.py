"""Profile actively: choose the next configs to measure where they teach the cost model most.

Research code, outside the shipped package: on the shipped datasets this choice needs as much of
the pool as random sampling to match the all-rows model (``research/benchmarks/active.py``), so
the product profiles plainly and calibrates on a representative order
(``carb_nas.costmodel.facility_location_order``) instead.

A campaign that measures configs at random spends most of its time where the model already
predicts well. :func:`choose_active` picks the next ``n`` configs of a candidate set from

- **coverage**: the distance to everything measured (or already chosen) in a standardized
  space of the knobs (log batch, log resolution, log width, log depth, family) and of the
  model's predictions (log latency, log memory: configs that *cost* alike are alike), so the
  measured set spreads over the space and over the range of costs;
- **uncertainty** (default, ``uncertainty="committee"``): query by committee. Eight small
  LightGBM models, each fitted on a bootstrap resample of the measured rows
  (:func:`committee_disagreement`), disagree most where the measured rows teach them least.
  They fit, as the product's cost model does, the log-ratio of the latency to its physical
  prior (non-negative costs per FLOP, MB and layer fitted on the measured rows), so their
  spread (the std of ``log(latency)``, the relative scale MAPE counts) is large where the
  physics leaves something to learn. The batch is then chosen by disagreement-weighted
  facility location in the standardized knob space: each pick most reduces ``sum_j u_j *
  d_j`` over the candidates (``u`` the spread, ``d`` the distance to the nearest measured or
  chosen config), so the picks follow the candidates' density, go where the committee is
  unsure, and a pick lowers the value of its neighbours. (The first committee version scored
  ``u * density * (1 - exp(-(d / h)^2))`` on plain log latency; see docs/benchmarks.md for
  both.)
- ``uncertainty="interval"`` (the first version): the coverage distance weighted by
  ``1 + w / median(w)``, ``w`` the relative width of the model's conformal latency interval
  (``log(upper / lower)``). Those intervals vary only by batch regime, so it chose about like
  random;

greedily (each pick updating the distances; the committee's facility location measures
distance in the knobs alone). Before there is a model (fewer than ``n_seed`` measured rows),
the picks are seeded random ones. Each chosen config carries why it was
chosen: ``active_reason`` (``seed``, ``coverage`` or ``uncertainty``: the latter when its
disagreement, or interval width, is above the median), ``active_interval_width`` (``w``; NaN
for a seed) and, for the committee, ``active_disagreement``.

``research/benchmarks/active.py`` replays this on the shipped datasets (pool-based: choosing
among rows already measured) against random and stratified selection;
:func:`run_active_campaign` runs it in a campaign (``carb_nas.measure.run_campaign`` with a
queue), retraining between rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.costmodel import PHYSICAL_OFFSETS, model_inputs, physical_offsets, relative_nnls
from carb_nas.costmodel.calibration import (
    MAX_FACILITY_POINTS,
    facility_location_order,
    nearest_distance,
)
from carb_nas.errors import ConfigError
from carb_nas.space import CONFIG_COLUMNS, RESNET_FAMILIES

__all__ = [
    "ACTIVE_REASONS",
    "MIN_FIT_ROWS",
    "N_SEED",
    "ROUND_SIZE",
    "check_active_count",
    "choose_active",
    "config_keys",
    "committee_disagreement",
    "coverage_matrix",
    "fit_round_model",
    "run_active_campaign",
]

ACTIVE_REASONS = ("seed", "coverage", "uncertainty")
UNCERTAINTIES = ("committee", "interval")
N_MEMBERS = 8  # committee size: the spread of 8 bootstrap fits is stable to ~20 %
N_SEED = 8  # random picks before the first model: a model needs a few rows of every kind
INTERVAL_ALPHA = 0.1
MAX_FACILITY = MAX_FACILITY_POINTS  # candidates the committee's facility location scores
_KNOBS = ("batch_size", "resolution", "width", "depth")


def config_keys(frame: pd.DataFrame) -> list[tuple]:
    """Hashable config identities (CONFIG_COLUMNS as strings) of the rows of ``frame``."""
    return [tuple(r) for r in frame[list(CONFIG_COLUMNS)].astype(str).itertuples(index=False)]


def coverage_matrix(
    frame: pd.DataFrame,
    pred: pd.DataFrame | None = None,
    families: Sequence[str] = RESNET_FAMILIES,
) -> np.ndarray:
    """The coordinates coverage is measured in, one row per config (not yet standardized):
    log knobs, one 0/1 column per family of ``families`` but the first (the ResNet space's:
    ``is_bottleneck``; pass every family of the candidates and measured configs, the same
    for both) and, with ``pred``, the log of each predicted target."""
    cols = [np.log(frame[k].to_numpy(float)) for k in _KNOBS]
    cols += _family_columns(frame["family"], families)
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


def _family_columns(family: pd.Series, families: Sequence[str]) -> list[np.ndarray]:
    """One 0/1 column per family of ``families`` but the first (none for one family)."""
    values = family.astype(str).to_numpy()
    return [(values == name).astype(float) for name in list(families)[1:]]


def _families_of(*frames: pd.DataFrame) -> list[str]:
    """The ResNet space's two families, then the other families of ``frames`` sorted: a
    ResNet space's columns stay ``is_bottleneck`` alone, as before other families."""
    seen = set().union(*(set(f["family"].astype(str)) for f in frames))
    return list(RESNET_FAMILIES) + sorted(seen - set(RESNET_FAMILIES))


def _committee_inputs(X: pd.DataFrame) -> np.ndarray:
    num = X.select_dtypes(include="number").to_numpy(float)
    return np.column_stack([num, *_family_columns(X["family"], _families_of(X))])


def _physical_prior(X: pd.DataFrame, measured: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """log of the physical latency prior on every row of ``X``: the non-negative sum of the
    resource columns of :data:`carb_nas.costmodel.PHYSICAL_OFFSETS` (FLOPs, weights, activations,
    page faults, layers) whose costs minimize the relative error on the ``measured`` rows
    (``y``), as the cost model's ``target_offsets`` fits it; None when ``X`` lacks them."""
    cols = PHYSICAL_OFFSETS["latency_ms"]
    if isinstance(cols, str) or not all(c in X for c in cols):
        return None
    M = X[list(cols)].to_numpy(float)
    prior = M @ relative_nnls(M[measured], y)
    return np.log(prior) if (prior > 0).all() else None


def committee_disagreement(
    measured: pd.DataFrame,
    candidates: pd.DataFrame,
    target: str = "latency_ms",
    n_members: int = N_MEMBERS,
    seed: int = 0,
    physical: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Query by committee: how much ``n_members`` small models disagree on each candidate.

    Each member is a LightGBM regressor (100 trees, 15 leaves, 80 % of the features per tree)
    fitted on a bootstrap resample of the measured rows, on the same architecture features as
    the cost model, in log space of ``target``. With ``physical`` (default; latency only) the
    members fit, as the product's cost model does (``target_offsets``), the log-ratio of the
    latency to its physical prior (:data:`carb_nas.costmodel.PHYSICAL_OFFSETS`, costs fitted on
    the measured rows), so they disagree where the physics leaves something to learn, not
    where latencies are merely large. Returns ``(disagreement, mean)`` per row of
    ``candidates``: the standard deviation of the members' ``log(target)`` predictions (a
    relative spread, the scale MAPE counts: 0.1 is about +-10 %) and their mean (log units).
    Far from the measured rows the members extrapolate differently, so the spread grows
    there; on the measured rows it is small. Needs at least 4 measured rows with a positive
    ``target``.
    """
    ok = measured
    if "status" in ok:
        ok = ok[ok["status"].astype(str) == "ok"]
    y = pd.to_numeric(ok[target], errors="coerce").to_numpy(float) if target in ok else None
    if y is None or int(np.sum(np.isfinite(y) & (y > 0))) < 4:
        raise ConfigError(
            f"cannot fit a committee: expected at least 4 measured rows with a positive "
            f"{target}, got {0 if y is None else int(np.sum(np.isfinite(y) & (y > 0)))}. "
            "Measure a few seed configs first (or use uncertainty='interval')."
        )
    keep = np.isfinite(y) & (y > 0)
    from lightgbm import LGBMRegressor

    both = pd.concat(
        [ok[keep][list(CONFIG_COLUMNS)], candidates[list(CONFIG_COLUMNS)]], ignore_index=True
    )
    X = model_inputs(both)
    F = _committee_inputs(X)
    n = int(keep.sum())
    Xm, Xc = F[:n], F[n:]
    base = None
    if physical and target == "latency_ms":
        base = _physical_prior(X, np.arange(n), y[keep])
    if base is None:
        base = np.zeros(len(F))
    z = np.log(y[keep]) - base[:n]
    rng = np.random.default_rng(seed)
    preds = np.empty((n_members, len(Xc)))
    for k in range(n_members):
        rows = rng.integers(0, n, n)
        member = LGBMRegressor(
            n_estimators=100,
            num_leaves=15,
            learning_rate=0.1,
            min_child_samples=max(2, min(20, n // 20)),
            colsample_bytree=0.8,
            random_state=seed * 1000 + k,
            n_jobs=1,
            verbose=-1,
        )
        member.fit(Xm[rows], z[rows])
        preds[k] = member.predict(Xc)
    return preds.std(axis=0), preds.mean(axis=0) + base[n:]


def _standardized(*mats: np.ndarray) -> list[np.ndarray]:
    both = np.vstack(mats)
    mean, std = both.mean(axis=0), both.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return [(m - mean) / std for m in mats]


def choose_active(
    candidates: pd.DataFrame,
    measured: pd.DataFrame | None = None,
    model: Any | None = None,
    n: int = 8,
    seed: int = 0,
    n_seed: int = N_SEED,
    uncertainty: str = "committee",
) -> pd.DataFrame:
    """The next ``n`` configs of ``candidates`` to measure, in measuring order.

    Args:
        candidates: configs (CONFIG_COLUMNS) to choose from; those already in ``measured``
            are never chosen.
        measured: configs measured so far (CONFIG_COLUMNS; with ``latency_ms`` for the
            committee), or None.
        model: a fitted CostModel trained on the measured rows (None: seeded random picks).
        n: how many to choose (at most what is left).
        seed: the random picks' and the committee's seed.
        n_seed: below this many measured rows (or with no model) the picks are random.
        uncertainty: ``"committee"`` (default): the disagreement of a bootstrap committee
            (:func:`committee_disagreement`) on the measured rows' latency (relative to its
            physical prior), as weights of a greedy facility location over the candidates
            in the knob space (see the module docstring); with no measured latencies
            (configs only) it falls back to ``"interval"``: the coverage distance weighted
            by the model's latency interval width (the first version; its intervals vary
            only by batch regime, so it chose about like random).

    Returns ``candidates``' chosen rows (index reset) with ``active_reason``,
    ``active_interval_width`` and, for the committee, ``active_disagreement`` (see the
    module docstring).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ConfigError(
            f"invalid active count: expected a whole number >= 1, got {n!r}. Use e.g. 16."
        )
    if uncertainty not in UNCERTAINTIES:
        raise ConfigError(
            f"invalid uncertainty: expected one of {list(UNCERTAINTIES)}, got "
            f"{uncertainty!r}. Use 'committee'."
        )
    cand = candidates[list(CONFIG_COLUMNS)].drop_duplicates().reset_index(drop=True)
    measured_rows = measured if measured is not None and len(measured) else None
    measured = (
        measured_rows[list(CONFIG_COLUMNS)].reset_index(drop=True)
        if measured_rows is not None
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
    if uncertainty == "committee" and _committee_ready(measured_rows):
        return _choose_by_committee(cand, measured_rows, measured, width, n, seed, rng)
    pred_m, _ = _predict(model, measured)
    fams = _families_of(cand, measured)
    Xc, Xm = _standardized(
        coverage_matrix(cand, pred_c, fams), coverage_matrix(measured, pred_m, fams)
    )
    dist = nearest_distance(Xc, Xm)
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


def _committee_ready(measured_rows: pd.DataFrame | None) -> bool:
    """Whether the measured rows carry enough latencies for a committee (4 positive)."""
    if measured_rows is None or "latency_ms" not in measured_rows:
        return False
    ok = measured_rows
    if "status" in ok:
        ok = ok[ok["status"].astype(str) == "ok"]
    y = pd.to_numeric(ok["latency_ms"], errors="coerce")
    return int((y > 0).sum()) >= 4


def _choose_by_committee(
    cand: pd.DataFrame,
    measured_rows: pd.DataFrame,
    measured: pd.DataFrame,
    width: np.ndarray,
    n: int,
    seed: int,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """Greedy batch by disagreement-weighted facility location in the knob space: each pick
    is the candidate that most reduces ``sum_j u_j * d_j`` over the candidates ``j`` (``u``
    the committee's disagreement, ``d_j`` the distance from ``j`` to its nearest measured or
    chosen config). A config stands for the candidates near it, so the picks follow the
    candidates' density (the test set is drawn like them) and go where the committee is
    unsure, and a pick lowers the value of its neighbours (a batch does not pile onto one
    corner). Above :data:`MAX_FACILITY` candidates, a seeded sample of them is scored."""
    u, _ = committee_disagreement(measured_rows, cand, seed=seed)
    fams = _families_of(cand, measured)
    Kc, Km = _standardized(
        coverage_matrix(cand, families=fams), coverage_matrix(measured, families=fams)
    )
    order = facility_location_order(Kc, u, n, covered=Km, rng=rng, max_points=MAX_FACILITY)
    if len(order) < n:  # the rest coincide with measured configs in these coordinates
        left = np.setdiff1d(np.arange(len(cand)), order)
        order += list(rng.choice(left, n - len(order), replace=False))
    med = float(np.median(u))
    chosen = cand.iloc[order].reset_index(drop=True)
    return chosen.assign(
        active_reason=np.where(u[order] > med, "uncertainty", "coverage"),
        active_interval_width=width[order],
        active_disagreement=u[order],
    )


# -- an active campaign: rounds of choices, each after refitting on the rows measured so far --
#: rows a round's model needs: >= 20 to train and >= 10 to calibrate its intervals
MIN_FIT_ROWS = 30
ROUND_SIZE = 8


def fit_round_model(rows: pd.DataFrame, seed: int = 0) -> Any | None:
    """A fast-preset CostModel of latency (and memory) on a campaign's ok rows, with the
    physical offsets of the default models (``costmodel.physical_offsets``), or None when
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
    X = model_inputs(ok)
    model = CostModel(
        preset="fast",
        targets=targets,
        validation_fraction=0.0,
        calibration_fraction=max(0.2, 10.5 / len(ok)),
        target_offsets=physical_offsets(X, targets) or None,
        random_state=seed,
        # a candidate of a family no round has measured yet is predicted with its family
        # as missing, not refused as an unseen label
        handle_unknown="ignore",
    )
    return model.fit(X, ok[targets].astype(float))


def _candidates(configs: pd.DataFrame, runtime: str, precision: str) -> pd.DataFrame:
    """The distinct configs of a source, with the campaign's runtime and precision."""
    arch = [c for c in CONFIG_COLUMNS if c not in ("runtime", "precision")]
    out = configs[arch].drop_duplicates().reset_index(drop=True)
    return out.assign(precision=precision, runtime=runtime)[list(CONFIG_COLUMNS)]


def check_active_count(n: Any, round_size: Any, n_configs: int) -> None:
    """Refuse a count ``n`` or a ``round_size`` out of range with one line."""
    for name, v, fix in (
        ("n", n, "Use e.g. n=64."),
        ("round_size", round_size, "Use e.g. round_size=8."),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"invalid {name}: expected a whole number >= 1, got {v!r}. {fix}")
    if n > n_configs:
        raise ConfigError(
            f"invalid n: expected at most the {n_configs} configs of the space, got "
            f"{n}. Use n={n_configs} or fewer (or profile them all with a plain campaign)."
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
    uncertainty: str = "committee",
    on_round: Any = None,
    **campaign: Any,
) -> dict[str, Any]:
    """Profile ``n`` configs of ``configs`` chosen actively into the campaign ``out_dir``.

    Rounds: each round fits a model on every row measured so far (``fit(rows, seed)``,
    default :func:`fit_round_model`). While it gives none (too few ok rows), a seed round picks
    random configs, enough to reach ``seed_rows`` ok rows (at least ``round_size``); then each
    round measures the next ``round_size`` configs :func:`choose_active` picks (with
    ``uncertainty``, fitting its committee on the rows measured so far). Each row records
    ``active_round``, ``active_reason``, ``active_interval_width`` and, for the committee,
    ``active_disagreement``.

    Resumable like every campaign (``measure.run_campaign``): a call first measures what is
    queued (a killed round), then continues from the rows already measured, also those of a
    plain campaign; ``n`` counts every config of the campaign, so a
    finished one measures nothing more. ``max_configs`` stops this call after that many
    measurements. ``campaign``: the other ``run_campaign`` arguments. ``on_round(info)`` is
    told each round before it is measured.

    Returns ``{"summary": CampaignSummary (counts summed over this call's rounds), "rounds":
    [{"round", "configs", "model_rows", "reasons"}]}``.
    """
    import dataclasses
    import time

    from carb_nas.measure.campaign import campaign_rows, run_campaign

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
            uncertainty=uncertainty,
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
