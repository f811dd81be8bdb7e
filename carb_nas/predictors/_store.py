"""This machine's calibrations: where they live, how they are read and written.

A calibration of a platform is cached under ``$CARB_NAS_CACHE/calibrations/<platform>-<machine
key>/`` as ``calibration.json`` (fingerprint, source-model identity, the fitted maps, the
factors applied to the kernel-level module model) and ``rows.csv`` (the measured rows), both
plain text, written atomically. A calibration whose fingerprint is another machine's, or whose
source model is not today's default, is refused. :mod:`carb_nas.calibrate` measures and fits
them; :func:`carb_nas.predictors.load_predictor` applies them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._io import atomic_directory
from carb_nas.costmodel import CalibratedModel, ConfigModuleModel, load_default_model, model_inputs
from carb_nas.costmodel.registry import default_model_cache_dir
from carb_nas.datasets import read_table, write_table
from carb_nas.errors import ConfigError, ModelError
from carb_nas.space import CONFIG_COLUMNS

#: 2: ``module_factors`` (the factors applied to the kernel-level module model) are stored;
#: a format-1 file has none and gets them computed from its rows when it is loaded
CALIBRATION_FORMAT = 2
READABLE_FORMATS = (1, 2)
REMEASURED = "worst fitted"  # protocol_params["remeasured"] of a config measured again
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


def has_calibration(platform: str) -> bool:
    """Whether any machine's calibration of ``platform`` is cached here (this machine's is
    one of them, named by its fingerprint's key)."""
    root = calibration_dir(platform, {}).parent
    stem = platform.replace("/", "_")
    return root.is_dir() and any(
        re.fullmatch(re.escape(stem) + r"-[0-9a-f]{16}", d.name)
        and (d / "calibration.json").is_file()
        for d in root.iterdir()
    )


def calibration_stamp(platform: str) -> float:
    """The newest modification time of any cached calibration of ``platform`` (0.0: none):
    a loaded predictor is reused only while this is unchanged."""
    root = calibration_dir(platform, {}).parent
    stem = platform.replace("/", "_")
    if not root.is_dir():
        return 0.0
    stamps = [
        (d / "calibration.json").stat().st_mtime
        for d in root.iterdir()
        if re.fullmatch(re.escape(stem) + r"-[0-9a-f]{16}", d.name)
        and (d / "calibration.json").is_file()
    ]
    return max(stamps, default=0.0)


def split_platform(platform: str) -> tuple[str, str, str]:
    """(device, runtime, precision) of ``DEVICE/RUNTIME/PRECISION[/DATASET]``: a qualified
    name (``cpu/torch/fp32/zoo@amd-zen5``) is the default model of that shipped dataset."""
    parts = str(platform).split("/")
    if len(parts) not in (3, 4) or not all(parts):
        raise ConfigError(
            f"invalid platform: expected DEVICE/RUNTIME/PRECISION such as cpu/torch/fp32 (or "
            f"a dataset name such as cpu/torch/fp32/zoo@amd-zen5), got {platform!r}. "
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
    #: per target, this machine's measured / predicted ratio of the platform's kernel-level
    #: module model: the one factor applied to modules and to configs of families the config
    #: model never saw (empty where the platform has no module model)
    module_factors: dict[str, float] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return int((self.rows["status"] == "ok").sum())

    def factors(self) -> dict[str, float]:
        """Per calibrated target, how far the uncalibrated config model was off here: the
        median measured / predicted ratio (a diagnostic; the fitted map is what is applied)."""
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
            "module_factors": self.module_factors,
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
                f"(log RMSE); uncalibrated it was off by x{factors[t]:.2f}"
                + (f", with this CPU kind's {ratio.what}" if module and ratio else "")
            )
        if self.module_factors:
            lines.append(
                "  modules and other families (kernel-level model): "
                + ", ".join(f"{t} x{f:.2f}" for t, f in self.module_factors.items())
                + " applied"
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


def previous_calibration(directory: Path) -> str | None:
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


def save_calibration(cal: Calibration, source: Any, kept_rows: bool = False) -> None:
    """Write ``cal`` (fitted on ``source``) to its directory atomically; ``kept_rows``: its
    rows include an earlier calibration's."""
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
        "module_factors": cal.module_factors,
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
    if directory is None and not has_calibration(platform):
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
    if doc.get("format") not in READABLE_FORMATS or doc.get("platform") != platform:
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
        module_factors={str(t): float(f) for t, f in (doc.get("module_factors") or {}).items()},
    )


def module_factors_of(rows: pd.DataFrame, module_model: Any) -> dict[str, float]:
    """Per target, the median measured / predicted ratio of ``module_model`` (a fitted
    ``ModuleCostModel``) over the ok ``rows`` of a calibration: how much slower (or larger)
    this machine runs than the machine the module model's per-op data came from. A
    calibration map is fitted to one model's errors; another model shares only the machine's
    speed with it, hence one factor per target."""
    ok = rows[rows["status"] == "ok"].reset_index(drop=True)
    if len(ok) == 0:
        return {}
    X = model_inputs(ok[list(CONFIG_COLUMNS)])
    pred = ConfigModuleModel(module_model).predict(X)
    factors = {}
    for target in ("latency_ms", "peak_mem_mb", "energy_j"):
        if target not in ok or target not in pred:
            continue
        measured = pd.to_numeric(ok[target], errors="coerce").to_numpy(float)
        ratio = measured / pred[target].to_numpy(float)
        ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
        if len(ratio):
            factors[target] = float(np.median(ratio))
    return factors
