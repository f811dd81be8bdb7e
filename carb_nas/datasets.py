"""Shipped measurement datasets: listing, loading and schema validation.

Datasets live in ``carb_nas/data/datasets/<platform with / replaced by _>.csv`` (or .parquet),
one per platform, rows following ``carb_nas.dataset.SCHEMA``. ``load_dataset`` validates every
file it returns: types, ranges, unique keys, status values, keys that match their configs, and
no rows from test doubles (fake meters or devices).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.dataset import REQUIRED_COLUMNS, SCHEMA, STATUSES
from carb_nas.errors import InputFileError, MissingFileError
from carb_nas.space import CONFIG_COLUMNS, read_table

__all__ = [
    "list_datasets",
    "load_dataset",
    "validate_rows",
    "median_of_passes",
    "datasets_dir",
    "REAL_METERS",
]

REAL_METERS = ("nvml-counter", "nvml-power", "rapl", "none")
DEVICES = ("cpu", "cuda")


def datasets_dir() -> Path:
    return Path(__file__).resolve().parent / "data" / "datasets"


def _files() -> list[Path]:
    d = datasets_dir()
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.suffix in (".csv", ".parquet"))


def _fail(source: str, what: str, expected: str, got: Any, fix: str) -> InputFileError:
    return InputFileError(f"{source}: {what}: expected {expected}, got {got!r}. {fix}")


def validate_rows(frame: pd.DataFrame, source: str = "<rows>") -> pd.DataFrame:
    """Check a table of measured rows against SCHEMA; return it with typed columns.

    Raises InputFileError naming the column, the first offending data row and the fix.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise _fail(
            source,
            f"missing column(s) {missing}",
            "every required column of carb_nas.dataset.SCHEMA",
            list(frame.columns)[:12],
            "Export rows with `carb-nas dataset export`.",
        )
    out = frame.copy()
    for col in SCHEMA:
        if col not in out.columns:
            out[col] = np.nan
    for col, (kind, required, _) in SCHEMA.items():
        s = out[col]
        if kind in ("int", "float"):
            num = pd.to_numeric(s, errors="coerce")
            bad = num.isna() & s.notna()
            if required:
                bad |= num.isna()
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise _fail(
                    source,
                    f"non-numeric value in column '{col}' at data row {i + 1}",
                    f"a {kind}",
                    s.iloc[i],
                    "Fix or drop that row.",
                )
            if kind == "int":
                whole = num.dropna()
                if (whole != whole.round()).any():
                    i = int(np.flatnonzero(((num != num.round()) & num.notna()).to_numpy())[0])
                    raise _fail(
                        source,
                        f"non-integer value in column '{col}' at data row {i + 1}",
                        "a whole number",
                        s.iloc[i],
                        "Fix that cell.",
                    )
                out[col] = num.astype("Int64")
            else:
                out[col] = num.astype(float)
        elif required:
            empty = s.isna() | (s.astype(str).str.len() == 0)
            if empty.any():
                i = int(np.flatnonzero(empty.to_numpy())[0])
                raise _fail(
                    source,
                    f"empty required column '{col}' at data row {i + 1}",
                    "a value",
                    None,
                    "Fill it or drop the row.",
                )
    n = len(out)

    def check(mask: pd.Series, col: str, expected: str, fix: str = "Fix or drop that row."):
        mask = mask.fillna(False).to_numpy(bool)
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            raise _fail(
                source,
                f"bad value in column '{col}' at data row {i + 1}",
                expected,
                frame[col].iloc[i] if col in frame else None,
                fix,
            )

    check(~out["status"].isin(STATUSES), "status", f"one of {list(STATUSES)}")
    check(~out["device"].isin(DEVICES), "device", f"one of {list(DEVICES)} (no fake devices)")
    check(
        ~out["meter"].isin(REAL_METERS),
        "meter",
        f"a real meter among {list(REAL_METERS)} (rows from test doubles are never data)",
    )
    check(
        out["device_name"].astype(str).str.lower().str.contains("fake"),
        "device_name",
        "a real device model (rows from test doubles are never data)",
    )
    check(out["batch_size"] < 1, "batch_size", ">= 1")
    check(out["threads"] < 1, "threads", ">= 1")
    ok = out["status"] == "ok"
    check(ok & ~(out["latency_ms"] > 0), "latency_ms", "> 0 ms on ok rows")
    check(ok & ~(out["peak_mem_mb"] > 0), "peak_mem_mb", "> 0 MB on ok rows")
    check(ok & ~(out["n_runs"] >= 1), "n_runs", ">= 1 on ok rows")
    check(out["latency_cv"] < 0, "latency_cv", ">= 0")
    check(out["energy_j"] < 0, "energy_j", ">= 0 J")
    check(
        out["energy_j"].notna() & (out["meter"] == "none"),
        "energy_j",
        "empty when meter is none (energy is never estimated)",
    )
    expected_platform = (
        out["device"].astype(str)
        + "/"
        + out["runtime"].astype(str)
        + "/"
        + out["precision"].astype(str)
    )
    check(out["platform"] != expected_platform, "platform", "device/runtime/precision")
    check(
        out.duplicated(["platform", "key"], keep="first"),
        "key",
        "unique keys per platform (one row per config)",
        "Drop the duplicate rows.",
    )
    for col in ("fingerprint", "protocol_params"):
        for i, v in enumerate(out[col].tolist()):
            try:
                json.loads(v)
            except (TypeError, json.JSONDecodeError):
                raise _fail(
                    source,
                    f"invalid JSON in column '{col}' at data row {i + 1}",
                    "a JSON object",
                    v,
                    "Fix that cell.",
                ) from None
    from carb_nas.space import Config

    for i, row in enumerate(out[list(CONFIG_COLUMNS) + ["key"]].itertuples(index=False)):
        try:
            key = Config(*row[:-1]).key
        except Exception as e:  # noqa: BLE001 - ConfigError or bad types
            raise _fail(
                source,
                f"invalid config at data row {i + 1}",
                "a valid config",
                str(e),
                "Fix that row.",
            ) from None
        if key != row[-1]:
            raise _fail(
                source,
                f"key mismatch at data row {i + 1}",
                f"Config(...).key == {key!r}",
                row[-1],
                "The key must be computed from the config columns.",
            )
    if n and not math.isfinite(float(out.loc[ok, "latency_ms"].sum() if ok.any() else 0.0)):
        raise _fail(source, "non-finite latency", "finite values", "inf/nan", "Fix the rows.")
    return out


def _describe(path: Path) -> dict[str, Any]:
    frame = read_table(path)
    first = frame.iloc[0] if len(frame) else None
    platform = str(first["platform"]) if first is not None else path.stem.replace("_", "/")
    device, runtime, precision = (platform.split("/") + ["", "", ""])[:3]
    return {
        "platform": platform,
        "device": device,
        "device_name": str(first["device_name"]) if first is not None else None,
        "runtime": runtime,
        "precision": precision,
        "path": str(path.resolve()),
        "rows": int(len(frame)),
        "ok_rows": int((frame["status"] == "ok").sum()) if "status" in frame else 0,
        "energy_j": bool("energy_j" in frame and frame["energy_j"].notna().any()),
    }


def list_datasets() -> list[dict[str, Any]]:
    """One dict per shipped dataset: platform, device, device_name, runtime, precision,
    path (absolute), rows, ok_rows, energy_j (True when the dataset has measured energy)."""
    return [_describe(p) for p in _files()]


def load_dataset(platform_or_path: str | Path, ok_only: bool = False) -> pd.DataFrame:
    """A shipped dataset by platform (``cpu/torch/fp32``) or any rows file by path, validated."""
    text = str(platform_or_path)
    p = Path(text)
    if not p.suffix:
        stem = text.replace("/", "_")
        found = [f for f in _files() if f.stem == stem]
        if not found:
            names = [f.stem.replace("_", "/") for f in _files()]
            raise MissingFileError(
                f"no shipped dataset for platform {text!r}: expected one of {names or '(none)'}"
                ", or a path to a .csv/.parquet rows file. See `carb-nas dataset list`."
            )
        p = found[0]
    frame = validate_rows(read_table(p), str(p))
    if ok_only:
        frame = frame[frame["status"] == "ok"].reset_index(drop=True)
    return frame


def median_of_passes(frames: list[pd.DataFrame], sources: list[str] | None = None) -> pd.DataFrame:
    """One row per config from independent measurement passes: the median-latency ok row.

    Each frame holds the rows of one pass (e.g. ``carb-nas dataset export`` of one campaign, or
    a shipped dataset). On a shared machine one pass's latency moves by several % from the
    next; the middle of three passes is a real row (its own fingerprint, timestamp and CV) much
    less likely to be an outlier than any single pass. With an even number of ok rows the
    lower middle one is kept; a config without any ok row keeps its first row. Rows of one
    config must come from one platform. Order: the first frame's keys, then new keys in order.
    """
    sources = sources or [f"pass {i + 1}" for i in range(len(frames))]
    if len(sources) != len(frames):
        raise InputFileError(
            f"one source name per pass: expected {len(frames)} names, got {len(sources)}. "
            "Pass sources=None or one name per frame."
        )
    if len(frames) < 2:
        raise InputFileError(
            f"merging passes needs at least two row tables: expected 2 or more, got "
            f"{len(frames)}. Pass every pass's rows (e.g. three exported campaigns)."
        )
    checked = [validate_rows(f, s) for f, s in zip(frames, sources)]
    rows = pd.concat(
        [f.assign(_pass=i) for i, f in enumerate(checked)], ignore_index=True, sort=False
    )
    mixed = rows.groupby("key")["platform"].nunique()
    if (mixed > 1).any():
        key = mixed[mixed > 1].index[0]
        plats = sorted(rows.loc[rows["key"] == key, "platform"].astype(str).unique())
        raise InputFileError(
            f"passes of different platforms for config {key}: expected one platform per "
            f"config, got {plats}. Merge passes of one platform only."
        )
    ok = rows["status"] == "ok"
    # within each key: ok rows by latency first, failed rows after them
    rows = rows.assign(_failed=~ok, _lat=rows["latency_ms"].where(ok))
    rows = rows.sort_values(["key", "_failed", "_lat", "_pass"], kind="stable")
    n_ok = rows.groupby("key")["_failed"].transform(lambda f: int((~f).sum()))
    rank = rows.groupby("key").cumcount()
    pick = np.where(n_ok > 0, rank == (n_ok - 1) // 2, rank == 0)
    chosen = rows[pick]
    order = pd.unique(pd.concat([f["key"] for f in checked], ignore_index=True))
    chosen = chosen.set_index("key").loc[order].reset_index()
    return chosen.drop(columns=["_pass", "_failed", "_lat"])[list(checked[0].columns)]
