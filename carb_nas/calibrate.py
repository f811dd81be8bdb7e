"""Calibrate on arrival: the default models adapted to *this* machine with a minute of measuring.

The default models describe the machine their data was measured on. On another machine (another
CPU, another day of the same cloud VM) latency is off by a factor that the conformal intervals do
not cover. :func:`calibrate_on_arrival` measures a small, informative set of configs here within
a time budget, fits the few-shot calibration of :func:`carb_nas.costmodel.calibrate` and caches
the result keyed by this machine's platform fingerprint; :func:`carb_nas.load_predictor` applies
it by default on later runs.

Which configs: the shipped dataset's configs of the platform (the ones the model was trained
on), ordered so that every prefix is representative -- greedy weighted facility location in the
standardized knob space (log batch, log resolution, log width, log depth, family;
:func:`carb_nas.costmodel.calibration.facility_location_order`): each next config is the one
that stands for the most candidates not yet near a chosen one, each candidate weighted by its
relative conformal interval width (where the model is least sure counts more) -- keeping only
configs that are cheap to measure (predicted under ``MAX_PREDICTED_MS``, and not in the largest
5 % by parameters, whose models take many seconds to build or export). Each config is measured
in ``passes`` interleaved rounds and its fastest row kept
(:func:`carb_nas.measure.profile_passes`: on a shared VM, contention only adds time and comes
and goes); the first round stops when one more config, with its later rounds, would overrun the
budget. The first two rounds of a config say how far this machine's timings move on their own
(``Calibration.repeatability``): on a shared or throttled machine that spread bounds how closely
a single measurement can check any prediction (docs/measurement.md).

Where a calibration is cached and how it is matched to this machine: ``carb_nas.predictors``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.costmodel import CalibratedModel, calibrate, model_inputs
from carb_nas.costmodel.calibration import (
    ModuleRatio,
    facility_location_order,
    fit_module_ratio,
    node_ratio,
)
from carb_nas.costmodel.registry import load_default_node_model
from carb_nas.datasets import SCHEMA, load_dataset
from carb_nas.errors import ConfigError, ModelError, removed_name
from carb_nas.predictors import load_predictor
from carb_nas.predictors.calibrations import (
    REMEASURED,
    Calibration,
    calibration_dir,
    calibration_profiler,
    check_runnable,
    load_calibration,
    machine_fingerprint,
    machine_key,
    module_factors_of,
    previous_calibration,
    save_calibration,
    split_platform,
)
from carb_nas.space import (
    CONFIG_COLUMNS,
    RESNET_FAMILIES,
    frame_to_configs,
    normalize_config_frame,
)

__all__ = [
    "MIN_CALIBRATION_ROWS",
    "MIN_TIME_BUDGET_S",
    "PASSES",
    "Calibration",
    "calibrate_on_arrival",
    "check_time_budget_s",
    "choose_configs",
    "ensure_calibrated",
    "module_ratio",
    "recalibrate",
]

MIN_TIME_BUDGET_S = 5.0  # profiler set-up plus one config: less measures nothing
MIN_CALIBRATION_ROWS = 3  # the smallest map with a leave-one-out error
MAX_PREDICTED_MS = 60.0  # configs predicted slower than this cost seconds each to measure
# the largest models take many seconds to build and export; a lower quantile would leave the
# wide networks unmeasured
MAX_PARAMS_QUANTILE = 0.95
# candidates the representative order scores (bounds its pair matrix)
MAX_FACILITY_POOL = 1024
# configs of the other built-in families featurized to choose from: each traces its network on
# the meta device, so a whole multi-family pool would take the time budget before one config
# was measured; a seeded sample of the pool instead
MAX_TRACED_POOL = 240
# configs of the shipped dataset a calibration's module ratio is fitted on (:func:`module_ratio`;
# the module model's traces are taken out of the budget; benchmarks/calibration_orders.py
# replays the choice)
MODULE_RATIO_CONFIGS = 300
NODE_PLATFORMS = ("cpu/onnxruntime/fp32", "cpu/torch/fp32")  # those a node model can describe
# a budget (seconds, per platform) from which it is fitted: a shorter one measures too few
# configs for its column (costmodel MANY_ROWS)
MODULE_RATIO_MIN_BUDGET_S = 20.0
# rounds per config, the fastest kept (see profile_passes). 1: within a short budget, more
# configs beat fewer cleaner ones; --passes 3 also reports the repeatability
PASSES = 1
# with one pass, the share of the budget kept to measure again the configs the fitted map
# fits worst (the faster of the two kept): one slow single measurement bends the map
REMEASURE_SHARE = 0.2
NOISY_REPEATABILITY_PCT = 10.0  # above this, a note says single measurements cannot check closer
# above this median CV of a config's timed runs, a note says the machine was noisy: the only
# noise figure of a one-pass calibration (no config is measured twice in whole passes)
NOISY_RUN_CV_PCT = 10.0
INTERVAL_ALPHA = 0.1


def choose_configs(
    source_model: Any,
    platform: str,
    n: int = 200,
    exclude: pd.DataFrame | None = None,
    max_predicted_ms: float = MAX_PREDICTED_MS,
    candidates: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Up to ``n`` configs of the platform's shipped dataset in measuring order (see module doc).

    ``exclude``: configs (CONFIG_COLUMNS) never chosen, e.g. a held-out validation set.
    ``candidates``: the configs to choose among instead (a frame with the config columns;
    runtime and precision default to the platform's; InputFileError naming what is wrong).
    The frame has the config columns plus ``predicted_latency_ms`` and ``interval_width``.
    """
    if candidates is None:
        rows = load_dataset(platform, ok_only=True)
    else:  # validated like any configs table; the platform's runtime and precision where absent
        _, runtime, precision = split_platform(platform)
        fill = {"runtime": runtime, "precision": precision}
        if isinstance(candidates, pd.DataFrame):  # anything else: refused just below
            candidates = candidates.assign(**{c: v for c, v in fill.items() if c not in candidates})
        rows = normalize_config_frame(candidates, source="candidate configs")
    frame = rows[list(CONFIG_COLUMNS)].drop_duplicates().reset_index(drop=True)
    if exclude is not None and len(exclude):
        keys = set(exclude[list(CONFIG_COLUMNS)].astype(str).itertuples(index=False))
        keep = [tuple(r) not in keys for r in frame.astype(str).itertuples(index=False)]
        frame = frame[keep].reset_index(drop=True)
    traced = ~frame["family"].isin(RESNET_FAMILIES)
    if traced.sum() > MAX_TRACED_POOL:
        sample = frame[traced].sample(n=MAX_TRACED_POOL, random_state=0)
        frame = pd.concat([frame[~traced], sample]).sort_index().reset_index(drop=True)
    X = model_inputs(frame)
    pred = source_model.predict(X, alpha=INTERVAL_ALPHA)
    lat = pred["latency_ms"].to_numpy(float)
    width = np.log(
        np.maximum(pred["latency_ms_upper"].to_numpy(float), 1e-12)
        / np.maximum(pred["latency_ms_lower"].to_numpy(float), 1e-12)
    )
    width = np.where(np.isfinite(width), width, np.nanmax(width[np.isfinite(width)], initial=1.0))
    # cheap to measure: a short run, and a model that builds (exports, for ONNX Runtime) fast;
    # the widest, deepest models took 17 s to export here for one 46 ms run
    params = pd.to_numeric(X["params"], errors="coerce").to_numpy(float) if "params" in X else None
    cheap = lat <= max_predicted_ms
    if params is not None and np.isfinite(params).any():
        cheap &= params <= np.nanquantile(params, MAX_PARAMS_QUANTILE)
    frame = frame.assign(predicted_latency_ms=lat, interval_width=width)[cheap]
    frame = frame.reset_index(drop=True)
    if len(frame) == 0:
        return frame
    # one column per family but the first (for the ResNet datasets: bottleneck or not)
    families = pd.get_dummies(frame["family"].astype(str), drop_first=True, dtype=float)
    knobs = np.column_stack(
        [np.log(frame[k].to_numpy(float)) for k in ("batch_size", "resolution", "width", "depth")]
        + [families.to_numpy()]
    )
    std = knobs.std(axis=0)
    knobs = (knobs - knobs.mean(axis=0)) / np.where(std > 0, std, 1.0)
    weight = 1.0 + frame["interval_width"].to_numpy(float) / max(
        float(np.median(frame["interval_width"])), 1e-12
    )
    # representative, not extreme: each next config stands for the most candidates (weighted)
    # not yet near a chosen one, so every prefix follows the space as a search or validation
    # draws from it; a farthest-point order measures the corners first, and a map fitted on
    # corners misses the interior
    order = facility_location_order(
        knobs, weight, n, rng=np.random.default_rng(0), max_points=MAX_FACILITY_POOL
    )
    return frame.iloc[order].reset_index(drop=True)


def _worst_fitted(
    source: Any, rows: list[dict[str, Any]], ratio: ModuleRatio | None = None
) -> list[int]:
    """Positions of the ok rows, the latency the calibration map fits worst first (the
    largest |log measured - log fitted|); none when there are too few rows to fit a map."""
    frame = pd.DataFrame(rows, columns=list(SCHEMA))
    ok = (frame["status"] == "ok").to_numpy()
    if ok.sum() < MIN_CALIBRATION_ROWS + 1:  # a map with one row to spare
        return []
    sub = frame[ok]
    try:
        cal = calibrate(source, sub, keep_uncalibrated=True, module_ratio=ratio)
        fitted = cal.predict(model_inputs(sub))
    except (ConfigError, ModelError):
        return []
    measured = pd.to_numeric(sub["latency_ms"], errors="coerce").to_numpy(float)
    miss = np.abs(np.log(measured) - np.log(fitted["latency_ms"].to_numpy(float)))
    order = np.argsort(-np.where(np.isfinite(miss), miss, -1.0), kind="stable")
    return np.flatnonzero(ok)[order].tolist()


def _fit(
    platform: str,
    source: Any,
    rows: pd.DataFrame,
    fingerprint: dict[str, Any],
    ratio: ModuleRatio | None = None,
) -> CalibratedModel:
    ok = rows[rows["status"] == "ok"]
    if len(ok) < MIN_CALIBRATION_ROWS:
        raise ConfigError(
            f"too few measurements to calibrate {platform}: expected at least "
            f"{MIN_CALIBRATION_ROWS} configs measured ok, got {len(ok)} of {len(rows)}. Give a "
            "longer --time-budget-s (e.g. 60)."
        )
    model = calibrate(source, ok, keep_uncalibrated=True, module_ratio=ratio)
    plat = dict(getattr(source, "platform_", None) or {})
    for k in ("device_name", "cpu_model", "threads", "device", "runtime", "precision"):
        if k in fingerprint:
            plat[k] = fingerprint[k]
    plat["platform"] = platform
    plat["calibrated"] = f"{len(ok)} rows, machine {machine_key(fingerprint)}"
    probe = pd.to_numeric(ok.get("reference_ms", pd.Series(dtype=float)), errors="coerce")
    if (probe > 0).any():
        # the machine's speed while it was calibrated: validate compares its own probe times
        plat["reference_ms"] = float(probe[probe > 0].median())
    model.platform_ = plat  # type: ignore[attr-defined]
    return model


def module_ratio(platform: str, source: Any, cpu_kind: str | None = None) -> ModuleRatio | None:
    """How this machine kind's per-op knowledge differs from ``source`` over ``platform``'s shipped
    configs (:class:`carb_nas.costmodel.calibration.ModuleRatio`, on ``MODULE_RATIO_CONFIGS``
    of them), one more column for the calibration map; None where the platform has none for
    this CPU kind. PyTorch: the module model (per-op costs measured on this CPU's kind; the
    config model's rows come from another machine). Where the kind has shipped per-node rows of
    the platform (``costmodel.calibration.node_ratio``), the node model's exact node sum
    instead (its effect on accuracy: docs/accuracy.md). ``cpu_kind``: the model's
    (``costmodel.registry.MODULE_CPU_KINDS``), default this machine's."""
    device, runtime, precision = split_platform(platform)
    if platform != f"{device}/{runtime}/{precision}":
        return None  # a qualified dataset's model: its own machine, not the default's
    exact = node_ratio(cpu_kind, platform) if platform in NODE_PLATFORMS else None
    if exact is not None or platform == "cpu/onnxruntime/fp32":
        return exact  # exact: a ResNet's node table is closed-form
    module = load_predictor(platform, calibrated=False, cpu_kind=cpu_kind).module_model
    if module is None:  # no multi-family dataset for this platform
        return None
    frame = load_dataset(platform, ok_only=True)[list(CONFIG_COLUMNS)].drop_duplicates()
    frame = frame[frame["family"].isin(RESNET_FAMILIES)]
    if len(frame) > MODULE_RATIO_CONFIGS:
        frame = frame.sample(n=MODULE_RATIO_CONFIGS, random_state=0)
    return fit_module_ratio(source, module, frame, {"runtime": runtime, "precision": precision})


def check_time_budget_s(time_budget_s: Any, fix: str = "") -> float:
    """A calibration's time budget as seconds: finite and at least ``MIN_TIME_BUDGET_S``
    (profiler set-up plus one config). ConfigError otherwise; ``fix`` adds another way out."""
    number = isinstance(time_budget_s, (int, float)) and not isinstance(time_budget_s, bool)
    if number and math.isfinite(time_budget_s) and time_budget_s >= MIN_TIME_BUDGET_S:
        return float(time_budget_s)
    short = number and time_budget_s < MIN_TIME_BUDGET_S
    what = "time budget too short to measure anything" if short else "invalid --time-budget-s"
    raise ConfigError(
        f"{what}: expected a finite number of seconds >= {MIN_TIME_BUDGET_S:g} (profiler "
        f"set-up plus one config), got {time_budget_s!r}. Use e.g. --time-budget-s 60{fix}."
    )


def calibrate_on_arrival(
    platform: str = "cpu/torch/fp32",
    time_budget_s: float = 60.0,
    profiler: Any = None,
    *,
    source_model: Any = None,
    exclude: pd.DataFrame | None = None,
    progress: Callable[[int, float, float], None] | None = None,
    save: bool = True,
    passes: int = PASSES,
) -> Calibration:
    """Measure informative configs here for up to ``time_budget_s`` seconds, fit the few-shot
    calibration of the default ``platform`` model and cache it for this machine.

    ``profiler``: a :class:`carb_nas.measure.Profiler` of this platform (tests pass a fake);
    default: one built for the platform with the thread count of the default model's data.
    ``source_model``: the model to calibrate (default: the platform's uncalibrated CARB
    cascade, ``load_predictor(platform, calibrated=False).config_model``).
    ``exclude``: configs never measured (held-out validation). ``progress(n_measured,
    elapsed_s, time_budget_s)`` is called after each measurement. ``passes``: rounds per
    config, the fastest kept (1: one measurement each). A calibration that replaces an
    earlier one says so in ``Calibration.replaced``. Nothing is written when it fails.
    """
    from carb_nas.measure import frozen_heap
    from carb_nas.measure.passes import check_passes, fastest_of_passes

    passes = check_passes(passes)
    check_time_budget_s(time_budget_s)
    if profiler is None:
        check_runnable(platform)
    else:
        measured = "/".join(split_platform(platform))  # a qualified dataset's platform
        if getattr(profiler, "platform", measured) != measured:
            raise ConfigError(
                f"profiler/platform mismatch: expected a profiler of {measured}, got one of "
                f"{profiler.platform}. Pass a profiler built for {measured}."
            )
    # the budget is for choosing and measuring: loading the default model (training it on
    # first use) would otherwise eat the measurements
    source = source_model if source_model is not None else _default_source(platform)
    if platform in NODE_PLATFORMS and time_budget_s >= MODULE_RATIO_MIN_BUDGET_S:
        load_default_node_model(platform=platform)  # likewise (trained on first use, then cached)
    t0 = time.perf_counter()
    # the module ratio's surrogate traces 300 configs (~7 s, torch on a CPU kind without node
    # rows) within the budget, so fewer configs are measured; the node column is ready at
    # once. On a short budget, too few rows for the column (MANY_ROWS): neither
    ratio = module_ratio(platform, source) if time_budget_s >= MODULE_RATIO_MIN_BUDGET_S else None
    if ratio is not None and progress is not None:
        progress(0, time.perf_counter() - t0, float(time_budget_s))
    candidates = choose_configs(source, platform, exclude=exclude)
    if len(candidates) == 0:
        raise ConfigError(
            f"nothing to measure for {platform}: expected shipped configs predicted under "
            f"{MAX_PREDICTED_MS:g} ms, got none. Calibrate from your own rows with "
            "carb_nas.costmodel.calibrate."
        )
    own = profiler is None
    prof = profiler if profiler is not None else calibration_profiler(platform, source)
    rounds: list[list[dict[str, Any]]] = [[]]
    again: dict[int, dict[str, Any]] = {}  # one pass: configs measured again (position -> row)
    first_budget_s = time_budget_s * (1 - REMEASURE_SHARE) if passes == 1 else time_budget_s
    configs = frame_to_configs(candidates[list(CONFIG_COLUMNS)])
    done = 0
    # a config's cost: the median time of its profile() calls so far, so neither the set-up
    # nor the first call's one-off costs (imports, the runtime's first session) count
    durations: list[float] = []
    # a profiler made here is closed when measuring ends or fails; the heap is frozen so each
    # config's gc.collect() does not scan the loaded default model
    with contextlib.closing(prof) if own else contextlib.nullcontext(), frozen_heap():
        fingerprint = machine_fingerprint(prof)
        for config in configs:
            elapsed = time.perf_counter() - t0
            n = len(rounds[0])
            per_config = float(np.median(durations)) if durations else 0.0
            # room for this config and for the later rounds of every config so far, once
            # the fit has its fewest rows (a short budget then gets fewer later rounds)
            later = (passes - 1) * (n + 1) if n >= MIN_CALIBRATION_ROWS else 0
            # the fewest rows first, whatever share is kept for measuring again
            budget_s = first_budget_s if n >= MIN_CALIBRATION_ROWS else time_budget_s
            if n and elapsed + per_config * (1 + later) > budget_s:
                break
            if elapsed > budget_s:
                break
            started = time.perf_counter()
            rounds[0].append(prof.profile(config))
            durations.append(time.perf_counter() - started)
            done += 1
            if progress is not None:
                progress(done, time.perf_counter() - t0, float(time_budget_s))
        for _ in range(passes - 1):
            rounds.append([])
            for config, first_s in zip(configs[: len(rounds[0])], durations, strict=True):
                # start a config only when it should end within the budget (its first
                # round's time): the budget is the most a calibration takes
                if time.perf_counter() - t0 + first_s > time_budget_s:
                    break
                rounds[-1].append(prof.profile(config))
                done += 1
                if progress is not None:
                    progress(done, time.perf_counter() - t0, float(time_budget_s))
        if passes == 1:
            for i in _worst_fitted(source, rounds[0], ratio):
                if time.perf_counter() - t0 + durations[i] > time_budget_s:
                    continue  # a shorter one may still fit
                again[i] = prof.profile(configs[i])
                done += 1
                if progress is not None:
                    progress(done, time.perf_counter() - t0, float(time_budget_s))
    kept = fastest_of_passes(rounds)
    for i, row in again.items():
        kept[i] = fastest_of_passes([[rounds[0][i]], [row]])[0]
        doc = json.loads(kept[i]["protocol_params"])
        kept[i]["protocol_params"] = json.dumps({**doc, "remeasured": REMEASURED}, sort_keys=True)
    rows = pd.DataFrame(kept, columns=list(SCHEMA))
    model = _fit(platform, source, rows, fingerprint, ratio)
    directory = calibration_dir(platform, fingerprint)
    cal = Calibration(
        platform=platform,
        model=model,
        rows=rows,
        fingerprint=fingerprint,
        directory=directory,
        seconds=time.perf_counter() - t0,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        replaced=previous_calibration(directory),
    )
    spread = cal.repeatability()["median_pct"]
    if spread > NOISY_REPEATABILITY_PCT:
        cal.notes.append(
            f"this machine's timings moved by a median {spread:.0f}% between two measurements "
            "of the same configs: a single measurement cannot check any prediction closer "
            "than that here (a shared or throttled machine); validate with --passes 3, or "
            "calibrate again when it is quiet"
        )
    elif (run_cv := cal.run_cv_pct()) > NOISY_RUN_CV_PCT:
        cal.notes.append(
            f"this machine was noisy while calibrating: a config's timed runs varied by a "
            f"median CV of {run_cv:.0f}% (quiet machines: under 5%), so the fitted map carries "
            "that noise; calibrate again when it is quiet, or with --passes 3"
        )
    cal.module_factors = _module_factors(platform, rows, source_model is None)
    uncalibrated = [t for t in model.targets_ if t not in model.maps_]
    if uncalibrated:
        cal.notes.append(
            f"{uncalibrated} not measured here (e.g. no energy meter): predicted by the default "
            "model unchanged"
        )
    if save:
        save_calibration(cal, source)
    return cal


def recalibrate(
    platform: str,
    rows: pd.DataFrame,
    profiler: Any = None,
    *,
    source_model: Any = None,
) -> Calibration:
    """Fold measured ``rows`` of ``platform`` (e.g. ``ValidationResult.measurements``) into
    this machine's calibration and refit it; a config measured again replaces its old row.
    Without an existing calibration the rows alone make a new one."""
    split_platform(platform)
    new = rows[rows["platform"].astype(str) == platform] if "platform" in rows else rows
    if len(new) == 0:
        raise ConfigError(
            f"nothing to fold into the {platform} calibration: expected rows measured on "
            f"{platform}, got {len(rows)} rows of other platforms. Validate on {platform}."
        )
    source = source_model if source_model is not None else _default_source(platform)
    own = profiler is None
    prof = profiler if profiler is not None else calibration_profiler(platform, source)
    try:
        here = machine_fingerprint(prof)
        old = load_calibration(platform, prof, source_model=source)
    finally:
        if own:
            prof.close()
    t0 = time.perf_counter()
    base = old.rows if old is not None else pd.DataFrame(columns=list(SCHEMA))
    if len(base):
        base = base[~base["key"].astype(str).isin(set(new["key"].astype(str)))]
    merged = pd.concat([base, new[list(SCHEMA)]], ignore_index=True) if len(base) else new
    merged = merged[list(SCHEMA)].reset_index(drop=True)
    # the ratio is the two models' over the shipped configs, not the rows': the earlier one holds
    ratio = old.model.module_ratio if old is not None else None
    model = _fit(platform, source, merged, here, ratio or module_ratio(platform, source))
    directory = calibration_dir(platform, here)
    cal = Calibration(
        platform=platform,
        model=model,
        rows=merged,
        fingerprint=here,
        directory=directory,
        seconds=(old.seconds if old is not None else 0.0) + time.perf_counter() - t0,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        replaced=previous_calibration(directory),
    )
    cal.module_factors = _module_factors(platform, merged, source_model is None)
    if old is not None:
        cal.notes.append(f"folded {len(new)} validated rows into {len(old.rows)} earlier rows")
    save_calibration(cal, source, kept_rows=old is not None)
    return cal


def _default_source(platform: str) -> Any:
    """The model a calibration of ``platform`` adapts: its uncalibrated CARB cascade."""
    return load_predictor(platform, calibrated=False).config_model


def _module_factors(platform: str, rows: pd.DataFrame, default: bool) -> dict[str, float]:
    """This machine's factors of the platform's kernel-level module model over the measured
    ``rows``: what every command applies to modules (none for a given source model, or a
    platform without a module model)."""
    if not default:
        return {}
    module = load_predictor(platform, calibrated=False).module_model
    return module_factors_of(rows, module) if module is not None else {}


def ensure_calibrated(
    platforms: list[str], time_budget_s: float, progress_for: Callable[[str], Any] | None = None
) -> dict[str, Calibration]:
    """This machine's calibration of each of ``platforms``: cached ones loaded, missing (or
    stale: fitted on another default model) ones measured now, within ``time_budget_s``
    together. The policy of ``carb-nas search`` and :func:`carb_nas.search.search` with
    ``calibrate=True``. ``progress_for(platform)`` gives a ``progress`` callback."""
    import warnings

    check_time_budget_s(time_budget_s)
    cals: dict[str, Calibration | None] = {}
    for p in platforms:
        try:
            cals[p] = load_calibration(p, source_model=_default_source(p))
        except ModelError as e:  # stale or damaged: never used
            warnings.warn(f"{e} Calibrating again.", stacklevel=2)
            cals[p] = None
    missing = [p for p, c in cals.items() if c is None]
    for p in missing:
        cals[p] = calibrate_on_arrival(
            p,
            time_budget_s / len(missing),
            progress=progress_for(p) if progress_for is not None else None,
        )
    return {p: c for p, c in cals.items() if c is not None}


#: names of earlier versions, and what to use instead
_RENAMED = {
    "load_calibrated_model": "carb_nas.load_predictor(platform) (calibrated by default)",
    "calibrated_costs": "carb_nas.predict_costs(model, shape, platform) (calibrated by default)",
    "machine_factors": "carb_nas.load_predictor(platform).module_factors",
    "scaled_to_this_machine": "carb_nas.load_predictor(platform) (calibrated by default)",
    "CALIBRATION_FORMAT": "carb_nas.predictors.calibrations.CALIBRATION_FORMAT",
}


def __getattr__(name: str) -> Any:
    raise removed_name(__name__, name, _RENAMED)
