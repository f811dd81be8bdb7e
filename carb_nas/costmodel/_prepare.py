"""From rows to the model's inputs: ``model_inputs`` (configs -> ``X``), the physical offsets,
and ``prepare_table`` (a dataset -> ``X``/``Y`` with the checks training and evaluation share).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.costmodel._common import TELEMETRY_COLUMNS, err, show
from carb_nas.datasets import SCHEMA, TARGETS
from carb_nas.errors import ModelError
from carb_nas.space import CONFIG_COLUMNS, normalize_config_frame

# Plausible range of each measured target (in its unit): a value outside is a unit or
# recording error (1e9 ms is 11 days per batch, 1e9 MB a petabyte), never a measurement.
TARGET_LIMITS = {t: 1e9 for t in TARGETS}


def model_inputs(frame: pd.DataFrame) -> pd.DataFrame:
    """The model's ``X`` for a frame of configs (``CONFIG_COLUMNS``, e.g. a dataset or
    ``Space.grid()``): the config columns (``family``, ``precision`` and ``runtime`` as
    categorical labels), the architecture features of ``carb_nas.features.compute_features``
    and any telemetry columns of ``frame`` that hold values. Index preserved."""
    from carb_nas.features import compute_features

    if not isinstance(frame, pd.DataFrame):
        raise err(
            "unusable configs",
            f"a DataFrame with the config columns {list(CONFIG_COLUMNS)}",
            type(frame).__name__,
            "Pass a DataFrame.",
        )
    cfg = frame
    missing = [c for c in CONFIG_COLUMNS if c not in frame.columns]
    if missing:
        try:
            cfg = normalize_config_frame(frame)
        except Exception as e:  # noqa: BLE001 - InputFileError etc.
            raise err(
                "not a configs frame",
                f"the config columns {list(CONFIG_COLUMNS)}",
                f"columns {list(map(str, frame.columns))[:12]}",
                "Pass configs (e.g. Space.grid() or a dataset), or build X yourself "
                "for a generic table.",
            ) from e
    cfg = cfg[list(CONFIG_COLUMNS)]
    feats = compute_features(cfg)
    X = pd.concat([cfg, feats.drop(columns=[c for c in feats.columns if c in cfg.columns])], axis=1)
    for col in ("family", "precision", "runtime"):
        X[col] = X[col].astype(str).astype(object)
    for col in TELEMETRY_COLUMNS:
        if col in frame.columns:
            v = pd.to_numeric(frame[col], errors="coerce")
            if v.notna().any():
                X[col] = v.to_numpy(dtype=float)
    return X


def schema_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The few rows of a configs frame whose :func:`model_inputs` have the columns of
    ``model_inputs(frame)``: the first of each family, precision and runtime, and the first
    holding a value of each telemetry column (nothing else decides the columns). A cache key
    can name the columns without featurizing every row, which for the multi-family datasets
    means tracing thousands of networks on the meta device (~4 min)."""
    knobs = [c for c in ("family", "precision", "runtime") if c in frame.columns]
    pos = (
        {int(i) for i in np.flatnonzero(~frame.duplicated(subset=knobs).to_numpy())}
        if knobs
        else {0}
    )
    for col in TELEMETRY_COLUMNS:
        if col in frame.columns:
            held = pd.to_numeric(frame[col], errors="coerce").notna().to_numpy()
            if held.any():
                pos.add(int(np.argmax(held)))
    return frame.iloc[sorted(pos)]


# Per-batch resources whose fitted non-negative costs sum to a latency (or energy) prior:
# arithmetic (with the slower native-kernel FLOPs counted again), weights read, activations
# written, pages faulted in for buffers of >= 32 MiB, and a per-layer overhead. On the shipped
# torch rows the fit prices ``mmap_mb`` at 0.37 ms/MB; benchmarks/page_faults.py measures 0.36-0.39.
# Left out, though the trees use them: ``onednn_weight_mb`` (fitted at zero cost) and
# ``pool_in_mb`` (its cost per MB is not stable across batch sizes: on ONNX Runtime INT8 it
# fits at 3.4 ms/MB on batch > 8 and 1.0 on batch <= 8, and leave-one-batch-tier-out latency
# R2 fell from 0.77 to 0.15 with it).
_RESOURCE_COLUMNS = [
    "flops",
    "native_conv_flops",
    "param_mb",
    "act_mb_total",
    "mmap_mb",
    "n_conv",
]
PHYSICAL_OFFSETS: dict[str, str | list[str]] = {
    "peak_mem_mb": "tensor_peak_mb",
    "latency_ms": _RESOURCE_COLUMNS,
    "energy_j": _RESOURCE_COLUMNS,
}


def physical_offsets(X: pd.DataFrame, targets: Sequence[str]) -> dict[str, str | list[str]]:
    """The :data:`PHYSICAL_OFFSETS` entries usable for ``targets`` with the columns of ``X``."""
    out: dict[str, str | list[str]] = {}
    for t, spec in PHYSICAL_OFFSETS.items():
        cols = [spec] if isinstance(spec, str) else spec
        if t in targets and all(c in X.columns for c in cols):
            out[t] = spec
    return out


# Measurement-side columns that are never features (they describe or derive from the result).
_NOT_FEATURES = {c for c in SCHEMA if c not in CONFIG_COLUMNS} - {
    "sm_util",
    "mem_util",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "power_limit_w",
}


def _fake_rows(frame: pd.DataFrame) -> tuple[str, int] | None:
    for col in ("meter", "device", "device_name", "peak_mem_method"):
        if col in frame:
            bad = frame[col].astype(str).str.lower().str.contains("fake", regex=False)
            if bad.any():
                return col, int(np.flatnonzero(bad.to_numpy())[0])
    return None


def _rows_platform(frame: pd.DataFrame) -> dict[str, Any] | None:
    """The most common fingerprint of the rows, with the platform string added."""
    plat: dict[str, Any] | None = None
    if "fingerprint" in frame and frame["fingerprint"].notna().any():
        text, _ = Counter(frame["fingerprint"].dropna().astype(str)).most_common(1)[0]
        try:
            doc = json.loads(text)
            plat = doc if isinstance(doc, dict) else {"fingerprint": doc}
        except json.JSONDecodeError:
            plat = {"fingerprint": text}
    for col in ("platform", "device", "device_name", "runtime", "precision", "threads"):
        if col in frame and frame[col].notna().any() and frame[col].nunique() == 1:
            plat = plat or {}
            value = frame[col].dropna().iloc[0]
            plat.setdefault(col, value.item() if isinstance(value, np.generic) else value)
    return plat


def _check_one_platform(frame: pd.DataFrame, source: str) -> None:
    """One model is one platform: rows recorded on several are refused, not silently merged."""
    for col in ("platform", "device_name"):
        if col in frame:
            values = sorted(frame[col].dropna().astype(str).unique())
            if len(values) > 1:
                counts = frame[col].astype(str).value_counts()
                shown = ", ".join(f"{v!r} ({counts[v]} rows)" for v in values[:3])
                more = f" and {len(values) - 3} more" if len(values) > 3 else ""
                raise ModelError(
                    f"{source}: rows from {len(values)} {col}s ({shown}{more}): expected the "
                    f"rows of one {col} (a cost model is trained for one platform). Keep one "
                    f"{col}'s rows, e.g. filter on the {col} column, and train one model each."
                )


def _check_target_values(Y: pd.DataFrame, source: str) -> None:
    """Measured targets are positive and within a plausible range of their unit."""
    for t in Y.columns:
        if t not in TARGET_LIMITS:
            continue  # a generic table's own target: any finite number
        v = pd.to_numeric(Y[t], errors="coerce").to_numpy(dtype=float)
        present = ~np.isnan(v)
        bad = present & ~((v > 0) & (v < TARGET_LIMITS[t]))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ModelError(
                f"{source}: implausible {t} value(s) in {int(bad.sum())} row(s), first at data "
                f"row {i + 1} ({float(v[i])!r}): expected measurements with 0 < {t} < "
                f"{TARGET_LIMITS[t]:.0e}. Fix or drop those rows (a zero, negative or huge value "
                "is a recording or unit error)."
            )


def prepare_table(
    frame: pd.DataFrame, source: str, targets: tuple[str, ...] | list[str] = ()
) -> dict[str, Any]:
    """Rows -> ``{"X", "Y", "targets", "platform", "notes", "frame"}`` for training or
    evaluation. Refused: rows of a test double, rows of several platforms, and dataset targets
    outside ``0 < value <`` :data:`TARGET_LIMITS` (a zero, negative or 1e30 latency is an error,
    not a measurement)."""
    from carb_nas.space import CONFIG_COLUMNS

    notes: list[str] = []
    fake = _fake_rows(frame)
    if fake:
        col, i = fake
        raise ModelError(
            f"{source}: rows from a test double at data row {i + 1} (column {col!r} = "
            f"{show(frame[col].iloc[i])}): expected real measurements only, got fake ones. Remove "
            "those rows; fake meters and devices exist only for tests."
        )
    if "status" in frame:
        ok = frame["status"].astype(str) == "ok"
        if (~ok).any():
            notes.append(f"dropped {int((~ok).sum())} rows with status != ok")
        frame = frame[ok].reset_index(drop=True)
    if targets:
        missing = [t for t in targets if t not in frame]
        if missing:
            raise ModelError(
                f"{source}: target column(s) {missing} missing: expected them among "
                f"the columns {list(frame.columns)[:20]}. Check --target."
            )
        found = list(targets)
    else:
        found = [t for t in TARGETS if t in frame and frame[t].notna().any()]
        empty = [t for t in TARGETS if t in frame and t not in found]
        if empty:
            notes.append(f"no values for {empty} (e.g. no energy meter): not modelled")
    if not found:
        raise ModelError(
            f"{source}: no target column: expected at least one of {list(TARGETS)} with values "
            f"(or --target NAME for a generic table), got columns {list(frame.columns)[:20]}. "
            "Pass a table of measurements."
        )
    if not len(frame):
        raise ModelError(
            f"{source}: no usable rows: expected rows with status == ok, got none. "
            "Measure some configs first."
        )
    _check_one_platform(frame, source)
    _check_target_values(frame[found], source)
    if all(c in frame for c in CONFIG_COLUMNS):
        X = model_inputs(frame)
    else:
        drop = [c for c in frame.columns if c in found or c in _NOT_FEATURES or c == "key"]
        X = frame.drop(columns=drop)
        notes.append(f"generic table: features {list(X.columns)[:12]}")
    return {
        "X": X,
        "Y": frame[found],
        "targets": found,
        "platform": _rows_platform(frame),
        "notes": notes,
        "frame": frame,
    }
