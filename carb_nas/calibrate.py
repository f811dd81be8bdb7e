"""Calibrate on arrival: the default models adapted to *this* machine with a minute of measuring.

The default models describe the machine their data was measured on. On another machine (another
CPU, another day of the same cloud VM) latency is off by a factor that the conformal intervals do
not cover. :func:`calibrate_on_arrival` measures a small, informative set of configs here within
a time budget, fits the few-shot calibration of :func:`carb_nas.costmodel.calibrate` and caches
the result keyed by this machine's platform fingerprint; :func:`load_calibrated_model` returns it
on later runs (``None`` when this machine has none yet).

Which configs: the shipped dataset's configs of the platform (the ones the model was trained
on), ordered so that every prefix is representative -- greedy weighted facility location in
the standardized knob space (log batch, log resolution, log width, log depth, family;
:func:`carb_nas.costmodel.facility_location_order`): each next config is the one that stands for
the most candidates not yet near a chosen one, each candidate weighted by its relative conformal
interval width (where the model is least sure counts more) -- keeping only configs that are
cheap to measure (predicted under ``MAX_PREDICTED_MS``, and not in the largest 5 % by
parameters, whose models take many seconds to build or export). Each config is
measured in ``passes`` interleaved rounds and its fastest row kept
(:func:`carb_nas.measure.profile_passes`: on a shared VM, contention only adds time and comes and
goes); the first round stops when one more config, with its later rounds, would overrun the
budget. The first two rounds of a config say how far this machine's timings move on their own
(``Calibration.repeatability``): on a shared or throttled machine that spread bounds how
closely a single measurement can check any prediction (on this project's 2-core VM on one day,
two single passes over 20 configs differed by a MAPE of 13.5 %, the fastest of 3 by 5.9 %).

Cache: ``$CARB_NAS_CACHE/calibrations/<platform>-<machine key>/`` with ``calibration.json``
(fingerprint, source-model identity, the fitted maps) and ``rows.csv`` (the measured rows), both
plain text, written atomically (:func:`carb_nas._io.atomic_directory`). A calibration whose
fingerprint is another machine's, or whose source model is not today's default, is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._io import atomic_directory
from carb_nas.costmodel import (
    CalibratedModel,
    ModuleCostModel,
    ModuleRatio,
    calibrate,
    default_model_cache_dir,
    facility_location_order,
    fit_module_ratio,
    load_default_model,
    load_default_module_model,
    load_default_node_model,
    model_inputs,
    node_ratio,
)
from carb_nas.datasets import SCHEMA, load_dataset, read_table, write_table
from carb_nas.errors import ConfigError, ModelError
from carb_nas.space import (
    CONFIG_COLUMNS,
    RESNET_FAMILIES,
    frame_to_configs,
    normalize_config_frame,
)

__all__ = [
    "CALIBRATION_FORMAT",
    "MIN_CALIBRATION_ROWS",
    "MIN_TIME_BUDGET_S",
    "PASSES",
    "Calibration",
    "calibrate_on_arrival",
    "calibrated_costs",
    "calibration_profiler",
    "calibration_dir",
    "check_runnable",
    "check_time_budget_s",
    "split_platform",
    "choose_configs",
    "load_calibrated_model",
    "load_calibration",
    "machine_factors",
    "machine_fingerprint",
    "machine_key",
    "module_ratio",
    "recalibrate",
    "scaled_to_this_machine",
]

CALIBRATION_FORMAT = 1
MIN_TIME_BUDGET_S = 5.0  # profiler set-up plus one config: less measures nothing
MIN_CALIBRATION_ROWS = 3  # the smallest map with a leave-one-out error
MAX_PREDICTED_MS = 60.0  # configs predicted slower than this cost seconds each to measure
# the largest models take seconds to build (and export: 2.5 s at 18 M parameters, 51 s at 267 M
# for ORT fp32 here); the 0.75 quantile (8.6 M) of before stop 48 left the wide nets unmeasured
MAX_PARAMS_QUANTILE = 0.95
# candidates the representative order scores (a pair matrix of 4 MB; 200 picks in ~0.5 s)
MAX_FACILITY_POOL = 1024
# configs of the other built-in families featurized to choose from: each traces its network on
# the meta device (~50 ms), so the 4,471 configs of cpu/torch/fp32/zoo-zen5 took the whole
# time budget (4 min) before one was measured; a seeded sample of the pool instead
MAX_TRACED_POOL = 240
# configs of the shipped dataset a calibration's module ratio is fitted on (:func:`module_ratio`;
# 4-7 s of the module model's traces, taken out of the budget). Replayed on 300 configs measured
# twice (stop 49; benchmarks/calibration_orders.py), torch with / without it: Intel Xeon 6.59 /
# 8.91 %, AMD Zen 3 5.87 / 6.15 %; 600 configs and 11 s less of measuring: 6.83 / 6.48 %
MODULE_RATIO_CONFIGS = 300
NODE_PLATFORMS = ("cpu/onnxruntime/fp32", "cpu/torch/fp32")  # those a node model can describe
# a budget (seconds, per platform) from which it is fitted: a shorter one measures too few
# configs for its column (costmodel MANY_ROWS)
MODULE_RATIO_MIN_BUDGET_S = 20.0
# rounds per config, the fastest kept (see profile_passes). 1: within 30 s per model, more
# configs beat fewer cleaner ones here (ONNX Runtime 11.1 % after 16 configs of 1 pass, 24.7 %
# after 6 configs of 3; torch 13.8 % / 12.3 %); --passes 3 also reports the repeatability
PASSES = 1
# with one pass, the share of the budget kept to measure again the configs the fitted map
# fits worst (the faster of the two kept): one slow single measurement bends the map. Replayed
# on two Zen 3 runs of the same configs (stop 41), measuring the 5 worst again took ONNX
# Runtime 11.2 -> 6.1 % and torch 7.5 -> 6.9 %, and changed nothing where no row was off
REMEASURE_SHARE = 0.2
REMEASURED = "worst fitted"  # protocol_params["remeasured"] of such a row
NOISY_REPEATABILITY_PCT = 10.0  # above this, a note says single measurements cannot check closer
# above this median CV of a config's timed runs, a note says the machine was noisy: the only
# noise figure of a one-pass calibration (no config is measured twice in whole passes). On a
# quiet Zen 3 the calibrations' medians were 1.2-4.6 %, 7-8 % in noisy patches; on a shared
# Intel VM one conv timed 200 times in a row had a CV of 15-19 %
NOISY_RUN_CV_PCT = 10.0
INTERVAL_ALPHA = 0.1
# fingerprint fields that describe the measuring process, not the machine
_NOT_MACHINE = (
    "protocol",
    "protocol_params",
    "meter",
    "energy_min_window_s",
    "energy_counter_update_period_s",
    "carb_nas",
    "fresh_process",
)


def machine_fingerprint(profiler: Any) -> dict[str, Any]:
    """The parts of ``profiler.fingerprint`` that name the machine and software stack (CPU or
    GPU model, threads, runtime and library versions, allocator), not the timing protocol."""
    fp = getattr(profiler, "fingerprint", None)
    if not isinstance(fp, dict):
        raise ModelError(
            f"unusable profiler: expected one with a platform fingerprint dict (a "
            f"carb_nas.measure.Profiler), got {type(profiler).__name__}. Pass a Profiler."
        )
    return {k: v for k, v in sorted(fp.items()) if k not in _NOT_MACHINE}


def machine_key(fingerprint: dict[str, Any]) -> str:
    """A short stable hash of a machine fingerprint (the cache directory's suffix)."""
    text = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def calibration_dir(platform: str, fingerprint: dict[str, Any]) -> Path:
    """Where this machine's calibration of ``platform`` is cached."""
    root = default_model_cache_dir().parent / "calibrations"
    return root / f"{platform.replace('/', '_')}-{machine_key(fingerprint)}"


def _any_calibration_of(platform: str) -> bool:
    """Whether any machine's calibration of ``platform`` is cached here (this machine's is
    one of them, named by its fingerprint's key)."""
    root = calibration_dir(platform, {}).parent
    stem = platform.replace("/", "_")
    return root.is_dir() and any(
        re.fullmatch(re.escape(stem) + r"-[0-9a-f]{16}", d.name)
        and (d / "calibration.json").is_file()
        for d in root.iterdir()
    )


def split_platform(platform: str) -> tuple[str, str, str]:
    """(device, runtime, precision) of ``DEVICE/RUNTIME/PRECISION[/DATASET]``: a qualified
    name (``cpu/torch/fp32/zoo-zen5``) is the default model of that shipped dataset."""
    parts = str(platform).split("/")
    if len(parts) not in (3, 4) or not all(parts):
        raise ConfigError(
            f"invalid platform: expected DEVICE/RUNTIME/PRECISION such as cpu/torch/fp32 (or "
            f"a qualified dataset name such as cpu/torch/fp32/zoo-zen5), got {platform!r}. "
            "Use one of the shipped platforms (carb-nas dataset list)."
        )
    return parts[0], parts[1], parts[2]


def check_runnable(platform: str) -> tuple[str, str, str]:
    """(device, runtime, precision) of ``platform``; ConfigError / DeviceUnavailableError before
    any work when it has no default model or this machine cannot run it."""
    from carb_nas.datasets import shipped_names
    from carb_nas.measure import check_platform

    device, runtime, precision = split_platform(platform)
    shipped = sorted(n for n in shipped_names() if not n.startswith("published/"))
    if device.split(":")[0] not in ("cpu", "cuda"):  # check_platform's hint names --device
        raise ConfigError(
            f"unknown device in platform {platform!r}: expected cpu or cuda as its first part, "
            f"got {device!r}. Pick a shipped platform: {', '.join(shipped)}."
        )
    if platform not in shipped and not device.startswith("cuda"):
        check_platform(device, runtime, precision)  # says what is wrong with the name first
    if platform not in shipped:  # before the GPU check: a name no GPU could calibrate either
        raise ConfigError(
            f"no default model to calibrate for {platform!r}: expected one of {shipped}, got "
            f"{platform!r}. Pick a shipped platform (carb-nas dataset list)."
        )
    here = ", ".join(n for n in shipped if n.startswith("cpu/") and n.count("/") == 2)
    check_platform(  # calibrate has no --device: its way out is the GPU itself, or a CPU
        device, runtime, precision, no_gpu_fix=f"or calibrate a CPU platform here: {here}"
    )
    if runtime == "onnxruntime":
        try:
            import onnxruntime  # noqa: F401
        except ImportError as e:
            raise ConfigError(
                f"this machine cannot run {platform}: expected the onnxruntime package, got "
                f"ImportError ({e}). Install it: pip install 'carb-nas[onnx]'."
            ) from e
    return device, runtime, precision


def _source_threads(model: Any) -> int | None:
    plat = getattr(model, "platform_", None) or {}
    try:
        value = int(plat["threads"]) if isinstance(plat, dict) and plat.get("threads") else None
    except (TypeError, ValueError):
        return None
    return value if value and value > 0 else None


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
    # draws from it; farthest-point order (before stop 48) measured the corners first, and a
    # map fitted on corners missed the interior (ORT fp32: wide nets at batch 3-8 +10-30 %)
    order = facility_location_order(
        knobs, weight, n, rng=np.random.default_rng(0), max_points=MAX_FACILITY_POOL
    )
    return frame.iloc[order].reset_index(drop=True)


@dataclass
class Calibration:
    """This machine's calibration of one platform's default model.

    ``model``: the :class:`carb_nas.costmodel.CalibratedModel` (predicts every target of the
    source model; the uncalibrated ones, e.g. energy without a meter, pass through).
    ``rows``: the measured rows it was fitted on (each config's fastest of its passes, which
    ``protocol_params`` lists). ``replaced``: a line describing the calibration this one
    replaced (None when it is the first).
    """

    platform: str
    model: CalibratedModel
    rows: pd.DataFrame
    fingerprint: dict[str, Any]
    directory: Path
    seconds: float = 0.0
    created: str = ""
    replaced: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        return int((self.rows["status"] == "ok").sum())

    def factors(self) -> dict[str, float]:
        """Per calibrated target, the median correction factor (measured / default model)."""
        ok = self.rows[self.rows["status"] == "ok"]
        if len(ok) == 0:
            return {}
        base = self.model.source_predict(model_inputs(ok[list(CONFIG_COLUMNS)]))
        out = {}
        for t in self.model.maps_:
            ratio = pd.to_numeric(ok[t], errors="coerce").to_numpy(float) / base[t].to_numpy(float)
            ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
            out[t] = float(np.median(ratio)) if len(ratio) else math.nan
        return out

    def repeatability(self) -> dict[str, float | int]:
        """How far this machine's latency moved between two measurements of the same config:
        ``n`` configs measured in two passes or more, the median and largest ``|second / first
        - 1|`` in % (NaN without passes)."""
        from carb_nas.measure.passes import pass_spread_pct

        # configs measured again because they fitted worst say how far outliers move, not
        # how the machine repeats: only whole passes count
        rows = [r for r in self.rows.to_dict("records") if not _remeasured(r)]
        pct = pass_spread_pct(rows)
        return {
            "n": len(pct),
            "median_pct": float(np.median(pct)) if len(pct) else math.nan,
            "max_pct": float(np.max(pct)) if len(pct) else math.nan,
        }

    def run_cv_pct(self) -> float:
        """The median CV of a config's timed runs over the ok rows, in % (NaN without any):
        how noisy the machine was while each config was timed."""
        ok = self.rows[self.rows["status"] == "ok"]
        cv = pd.to_numeric(ok.get("latency_cv", pd.Series(dtype=float)), errors="coerce")
        cv = cv[np.isfinite(cv)]
        return float(100 * cv.median()) if len(cv) else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "directory": str(self.directory),
            "machine_key": machine_key(self.fingerprint),
            "n_rows": self.n_rows,
            "seconds": self.seconds,
            "created": self.created,
            "replaced": self.replaced,
            "calibrated_targets": list(self.model.maps_),
            "methods": {t: m["method"] for t, m in self.model.maps_.items()},
            "loo_rmse_log": {t: m["loo_rmse_log"] for t, m in self.model.maps_.items()},
            "factors": self.factors(),
            "repeatability": self.repeatability(),
            "run_cv_median_pct": self.run_cv_pct(),
            "notes": self.notes,
        }

    def summary(self) -> str:
        lines = [
            f"calibrated {self.platform} on this machine from {self.n_rows} measured configs "
            f"in {self.seconds:.0f} s; cached in {self.directory}"
        ]
        factors = self.factors()
        names = ["log_source", *getattr(self.model, "feature_names_", [])]
        ratio = getattr(self.model, "module_ratio", None)
        for t, m in self.model.maps_.items():
            # the map's columns (all of them in a map saved before they were named)
            columns = m.get("columns", range(len(names)))
            module = m["method"] in ("features", "prior") and "log_module_ratio" in [
                names[c] for c in columns if c < len(names)
            ]
            lines.append(
                f"  {t:<12} {m['method']:<9} leave-one-out error {100 * m['loo_rmse_log']:.1f}% "
                f"(log RMSE), median measured/default x{factors[t]:.2f}"
                + (f", with this CPU kind's {ratio.what}" if module and ratio else "")
            )
        rep = self.repeatability()
        if rep["n"]:
            lines.append(
                f"  repeatability: {rep['n']} configs measured twice differ by a median "
                f"{rep['median_pct']:.1f}% (largest {rep['max_pct']:.1f}%)"
            )
        run_cv = self.run_cv_pct()
        if np.isfinite(run_cv):
            lines.append(f"  timing noise: a config's runs varied by a median CV of {run_cv:.1f}%")
        if self.replaced:
            lines.append(f"  replaced {self.replaced}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _remeasured(row: dict[str, Any]) -> bool:
    try:
        doc = json.loads(row.get("protocol_params") or "{}")
    except (TypeError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("remeasured") == REMEASURED


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
    """How this machine kind's per-op knowledge differs from ``source`` over ``platform``'s
    shipped configs (:class:`carb_nas.costmodel.ModuleRatio`, on ``MODULE_RATIO_CONFIGS`` of
    them), one more column for the calibration map; None where the platform has none for this
    CPU kind. PyTorch: the module model (per-op costs measured on this CPU's kind; the config
    model's rows come from another machine): on 300 configs measured twice, torch's calibrated
    latency MAPE without / with the column 8.91 -> 6.59 % on an Intel Xeon, 6.15 -> 5.87 % on
    an AMD Zen 3 (30 s replayed, the ratio's traces out of them; stop 49, docs/costmodel.md).
    Where the kind has shipped per-node rows of the platform (``costmodel.node_ratio``; ONNX
    Runtime and PyTorch fp32 on ``intel-avx512``, stops 50-51), the node model's exact node
    sum instead: on the Intel pool ONNX Runtime 9.77 -> 5.91 %, torch 6.59 -> 5.31 %.
    ``cpu_kind``: the model's (``costmodel.MODULE_CPU_KINDS``), default this machine's."""
    device, runtime, precision = split_platform(platform)
    if platform != f"{device}/{runtime}/{precision}":
        return None  # a qualified dataset's model: its own machine, not the default's
    exact = node_ratio(cpu_kind, platform) if platform in NODE_PLATFORMS else None
    if exact is not None or platform == "cpu/onnxruntime/fp32":
        return exact  # exact: a ResNet's node table is closed-form
    try:
        module = load_default_module_model(platform, verbose=False, cpu_kind=cpu_kind)
    except ModelError:  # no multi-family dataset for this platform
        return None
    frame = load_dataset(platform, ok_only=True)[list(CONFIG_COLUMNS)].drop_duplicates()
    frame = frame[frame["family"].isin(RESNET_FAMILIES)]
    if len(frame) > MODULE_RATIO_CONFIGS:
        frame = frame.sample(n=MODULE_RATIO_CONFIGS, random_state=0)
    return fit_module_ratio(source, module, frame, {"runtime": runtime, "precision": precision})


def _previous(directory: Path) -> str | None:
    doc_path = directory / "calibration.json"
    if not doc_path.is_file():
        return None
    try:
        doc = json.loads(doc_path.read_text())
        return (
            f"the calibration of {doc.get('created', '?')} ({doc.get('n_rows', '?')} rows); "
            "its rows are kept in the new one"
            if doc.get("kept_rows")
            else f"the calibration of {doc.get('created', '?')} ({doc.get('n_rows', '?')} rows)"
        )
    except (OSError, ValueError):
        return "an unreadable earlier calibration"


def _save(cal: Calibration, source: Any, kept_rows: bool = False) -> None:
    doc = {
        "format": CALIBRATION_FORMAT,
        "platform": cal.platform,
        "created": cal.created,
        "seconds": cal.seconds,
        "n_rows": cal.n_rows,
        "kept_rows": kept_rows,
        "fingerprint": cal.fingerprint,
        "machine_key": machine_key(cal.fingerprint),
        "source": {
            "platform": cal.platform,
            "training_sha256": getattr(source, "training_sha256_", None),
        },
        "model_platform": getattr(cal.model, "platform_", {}),
        "calibration": cal.model.to_dict(),
        "repeatability": cal.repeatability(),
    }
    with atomic_directory(cal.directory) as tmp:
        write_table(cal.rows, tmp / "rows.csv")
        (tmp / "calibration.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")


def calibration_profiler(platform: str, source: Any, protocol: str = "adaptive") -> Any:
    """The :class:`carb_nas.measure.Profiler` a calibration of ``platform`` measures with: the
    thread count of ``source`` (the default model's rows; capped to this machine's CPUs, unset
    on a GPU), no idle-power wait, no utilization window."""
    from carb_nas.measure import Profiler, usable_cpus

    device, runtime, precision = check_runnable(platform)
    threads = _source_threads(source)
    if device == "cpu" and threads is not None:
        threads = min(threads, usable_cpus())
    elif device != "cpu":  # a GPU model's rows record their host's cores (16 on the H200)
        threads = None
    # no utilization window: CARB's training-mode telemetry (1 s a CUDA row) feeds no calibration
    return Profiler(
        device,
        runtime,
        precision,
        threads,
        protocol,
        meter="auto",
        idle_s=0.0,
        utilization_window_s=0.0,
    )


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
    ``source_model``: the model to calibrate (default :func:`load_default_model`).
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
    # first use: 12 s for ONNX Runtime fp32 here) would otherwise eat the measurements
    source = source_model if source_model is not None else load_default_model(platform)
    if platform in NODE_PLATFORMS and time_budget_s >= MODULE_RATIO_MIN_BUDGET_S:
        load_default_node_model(platform=platform)  # likewise (first use: 5-6 s, then cached)
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
    # a profiler made here is closed when measuring ends or fails; a loaded default model
    # made each config's gc.collect() 0.11-0.17 s until the heap was frozen (stop 43)
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
        replaced=_previous(directory),
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
    uncalibrated = [t for t in model.targets_ if t not in model.maps_]
    if uncalibrated:
        cal.notes.append(
            f"{uncalibrated} not measured here (e.g. no energy meter): predicted by the default "
            "model unchanged"
        )
    if save:
        _save(cal, source)
    return cal


def _refuse_other_machine(doc: dict[str, Any], here: dict[str, Any], where: Path) -> None:
    there = doc.get("fingerprint")
    if not isinstance(there, dict) or machine_key(there) != machine_key(here):
        diff = sorted(
            k
            for k in set(here) | set(there if isinstance(there, dict) else {})
            if not isinstance(there, dict) or there.get(k) != here.get(k)
        )
        raise ModelError(
            f"calibration {str(where)!r} is another machine's: expected this machine's "
            f"fingerprint (key {machine_key(here)}), got one that differs in {diff[:5]}. "
            "It is not used; run carb-nas calibrate on this machine (or delete it)."
        )


def load_calibration(
    platform: str,
    profiler: Any = None,
    *,
    directory: str | Path | None = None,
    source_model: Any = None,
) -> Calibration | None:
    """This machine's cached calibration of ``platform`` (None when there is none).

    ``directory``: read that calibration instead of this machine's cache entry; it is refused
    (ModelError) when its fingerprint is another machine's or its source model is not the
    current default. ``profiler`` gives this machine's fingerprint (default: a Profiler of the
    platform, which measures nothing).
    """
    split_platform(platform)
    if directory is None and not _any_calibration_of(platform):
        return None  # before the default model (trained on first use) and a profiler
    own = profiler is None
    prof = profiler
    source = source_model
    if prof is None:
        source = source if source is not None else load_default_model(platform, verbose=False)
        prof = calibration_profiler(platform, source)
    try:
        here = machine_fingerprint(prof)
    finally:
        if own:
            prof.close()
    d = Path(directory) if directory is not None else calibration_dir(platform, here)
    doc_path = d / "calibration.json"
    if not doc_path.is_file():
        if directory is not None:
            raise ModelError(
                f"no calibration in {str(d)!r}: expected a directory written by carb-nas "
                "calibrate (with calibration.json), got none. Check the path."
            )
        return None
    try:
        doc = json.loads(doc_path.read_text())
        rows = read_table(d / "rows.csv")
    except (OSError, ValueError) as e:
        raise ModelError(
            f"damaged calibration {str(d)!r}: expected readable calibration.json and rows.csv, "
            f"got {type(e).__name__}: {e}. Run carb-nas calibrate {platform} again."
        ) from e
    if doc.get("format") != CALIBRATION_FORMAT or doc.get("platform") != platform:
        raise ModelError(
            f"calibration {str(d)!r} does not fit: expected format {CALIBRATION_FORMAT} for "
            f"{platform}, got format {doc.get('format')!r} for {doc.get('platform')!r}. Run "
            f"carb-nas calibrate {platform} again."
        )
    _refuse_other_machine(doc, here, d)
    if source is None:
        source = load_default_model(platform, verbose=False)
    want = getattr(source, "training_sha256_", None)
    got = (doc.get("source") or {}).get("training_sha256")
    if want != got:
        raise ModelError(
            f"calibration {str(d)!r} was fitted on another default {platform} model: expected "
            f"training data {want}, got {got}. Run carb-nas calibrate {platform} again."
        )
    model = CalibratedModel.from_dict(doc["calibration"], source)
    model.platform_ = dict(doc.get("model_platform") or {})  # type: ignore[attr-defined]
    return Calibration(
        platform=platform,
        model=model,
        rows=rows,
        fingerprint=here,
        directory=d,
        seconds=float(doc.get("seconds", 0.0)),
        created=str(doc.get("created", "")),
    )


def load_calibrated_model(platform: str, profiler: Any = None) -> CalibratedModel | None:
    """This machine's calibrated model of ``platform``, or None when it has none yet."""
    cal = load_calibration(platform, profiler)
    return None if cal is None else cal.model


_MACHINE_FACTORS: dict[str, dict[str, float]] = {}  # platform -> factors of its default


def calibrated_costs(
    model: Any, input_shape: Any = None, platform: str = "cpu/torch/fp32", **kwargs: Any
) -> Any:
    """:func:`carb_nas.predict_costs` of ``model`` on ``platform`` (a shipped platform name),
    scaled by :func:`machine_factors`: its predictor's costs on this machine. ModelError,
    before any prediction, when this machine has no calibration of ``platform`` (run
    ``carb-nas calibrate PLATFORM`` once, about a minute)."""
    from carb_nas.scoring import predict_costs

    if not isinstance(platform, str):
        raise ConfigError(
            f"calibrated costs need a platform name: expected e.g. 'cpu/torch/fp32', got "
            f"{type(platform).__name__}. Pass the name of a shipped platform."
        )
    factors = machine_factors(platform)
    note = (
        "calibrated to this machine ("
        + ", ".join(f"{t} x{f:.2f}" for t, f in factors.items())
        + ")"
    )
    return predict_costs(model, input_shape, platform, **kwargs).scaled(factors, note)


def scaled_to_this_machine(model: Any, platform: str) -> Any:
    """A module model over configs (``costmodel.load_config_model``) times this machine's
    :func:`machine_factors` of it, from this machine's calibration of ``platform``."""
    return model.scaled(machine_factors(platform, predictor=model.module_model))


def machine_factors(platform: str, predictor: Any = None, profiler: Any = None) -> dict[str, float]:
    """Per target, the median measured / predicted ratio of ``predictor`` (default: the
    model ``carb_nas.predict_costs`` uses on ``platform``, the module model on
    ``cpu/torch/fp32``) over the configs of this machine's calibration of ``platform``: how
    much slower (or larger) this machine runs than the machine ``predictor`` was trained on.

    A calibration map is fitted to one model's errors; a model of another dataset (the module
    model of the multi-family zoo) shares only the machine's speed with it, hence one factor.
    On the AMD Zen 4 of 2026-12-03: 0.80 for the module model trained on zoo-epyc (12
    ResNet configs); over 32 networks measured there (22 zoo configs, 10 user CNNs) latency
    MAPE 32.2 % -> 14.3 %, 4 -> 22 within 15 % (user CNNs 41 -> 24 %): a machine's speed,
    not a per-network fix. (The model trained on the Intel zoo rows ran 0.99-2.94x there,
    by network: 39.3 -> 22.4 %, 13 within 15 %.) Since stop 39 the module model trains on
    zoo-zen4 (the Zen 4 kind): on another Zen 4 VM, 32 zoo networks, 16.0 % (the zoo-epyc
    model) -> 8.3 % after a leave-one-out median factor; since stop 47 on a CPU without
    AVX-512 on zoo-zen3: on a Zen 3 VM the same networks 7.9 -> 3.6 % (docs/costmodel.md).
    ModelError when there is no calibration; the default predictor's factors are cached per
    process (a recalibration is seen by the next process).
    """
    from carb_nas.models import ModelSpec
    from carb_nas.scoring import predict_frame, predict_spec, resolve_model

    # the default predictor's once per process: reading the calibration builds a profiler
    # and loads the default model (~5 s)
    if predictor is not None or platform not in _MACHINE_FACTORS:
        cal = load_calibration(platform, profiler)
        if cal is None:
            raise ModelError(
                f"no calibration of {platform} on this machine: expected one made by `carb-nas "
                f"calibrate {platform}`, got none. Run it (about a minute), or predict "
                "uncalibrated."
            )
        predictor_given = predictor is not None
        if predictor is None:
            predictor = resolve_model(platform, "cost model", specs=True)
        rows = cal.rows.reset_index(drop=True)
        factors = {}
        if isinstance(predictor, ModuleCostModel):  # traces each network: one at a time
            pred = pd.DataFrame(
                [
                    predict_spec(predictor, ModelSpec.from_config(c), None)[0].iloc[0]
                    for c in frame_to_configs(rows[list(CONFIG_COLUMNS)])
                ]
            )
        else:  # a CostModel scores the whole frame at once (a row at a time: ~30 ms each)
            X = model_inputs(rows[list(CONFIG_COLUMNS)])
            pred = predict_frame(predictor, X, alpha=None, X=X)
        for target in ("latency_ms", "peak_mem_mb", "energy_j"):
            if target not in rows or target not in pred:
                continue
            ratio = pd.to_numeric(rows[target], errors="coerce").to_numpy(float) / pred[
                target
            ].to_numpy(float)
            ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
            if len(ratio):
                factors[target] = float(np.median(ratio))
        if predictor_given:
            return factors
        _MACHINE_FACTORS[platform] = factors
    return dict(_MACHINE_FACTORS[platform])


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
    source = source_model if source_model is not None else load_default_model(platform)
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
        replaced=_previous(directory),
    )
    if old is not None:
        cal.notes.append(f"folded {len(new)} validated rows into {len(old.rows)} earlier rows")
    _save(cal, source, kept_rows=old is not None)
    return cal
