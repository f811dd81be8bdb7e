"""Loading measured rows for the reports, and the shared grouping constants."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.datasets import TARGETS, dataset_path, load_dataset
from carb_nas.errors import InputFileError
from carb_nas.space import CONFIG_COLUMNS

__all__ = [
    "BATCH_TIERS",
    "JOIN_COLUMNS",
    "KNOBS",
    "SM_TIERS",
    "batch_tier",
    "load_measurements",
    "same_dataset",
]

JOIN_COLUMNS = tuple(c for c in CONFIG_COLUMNS if c not in ("precision", "runtime"))
"""Config columns that identify "the same network and batch" across platforms."""
KNOBS = ("depth", "width", "batch_size", "resolution", "precision", "runtime")
BATCH_TIERS = ((1, 4, "1-4"), (5, 16, "5-16"), (17, 64, "17-64"), (65, 256, "65-256"))
"""(low, high, label), inclusive; batches above 256 fall in a ">256" tier."""
SM_TIERS = ((0.0, 35.0, "low"), (35.0, 65.0, "mid"), (65.0, math.inf, "high"))
"""SM utilization tiers in %, [low, high); CARB calls > 65 % the high-stress regime."""


def load_measurements(source: str | Path | pd.DataFrame, name: str | None = None) -> pd.DataFrame:
    """Measured rows with ``status == "ok"``, validated, with a ``variant`` column added.

    ``source`` is a shipped platform name (``cpu/torch/fp32``), a CSV/Parquet path or a
    DataFrame following ``carb_nas.datasets.SCHEMA``, read by ``carb_nas.datasets.load_dataset``
    as an analysis input (``partial=True``: at least the config columns family, depth, width,
    resolution, batch_size and one target; precision/runtime default to fp32/torch, a missing
    ``status`` means every row is ok). ``variant`` is ``device/runtime/precision`` (the
    platform string), the unit that precision/runtime ratios compare. ``frame.attrs`` holds
    ``source``, ``rows`` (all rows), ``ok_rows``, ``targets`` (those with at least one finite
    value) and ``notes``.
    """
    raw = load_dataset(source, partial=True, name=name)
    label = raw.attrs["source"]
    notes: list[str] = []
    if len(raw) == 0:
        raise InputFileError(
            f"{label}: empty dataset: expected measured rows, got 0 rows. Point to a dataset "
            "written by `carb-nas dataset export`."
        )
    if "status" in raw.columns:
        ok = raw[raw["status"] == "ok"]
        if len(ok) == 0:
            counts = raw["status"].value_counts().to_dict()
            raise InputFileError(
                f"{label}: no usable rows: expected rows with status == 'ok', got status counts "
                f"{counts}. Re-run the failed measurements or pick another dataset."
            )
    else:
        ok = raw
        notes.append(f"{label}: no 'status' column; every row taken as a successful measurement")
    frame = ok.reset_index(drop=True)
    targets = []
    for t in TARGETS:
        if t in frame.columns:
            frame.loc[~np.isfinite(frame[t]), t] = np.nan
            if frame[t].notna().any():
                targets.append(t)
    if not targets:
        raise InputFileError(
            f"{label}: no target column with values: expected at least one of {list(TARGETS)} "
            f"holding numbers, got columns {list(raw.columns)}. Export the dataset with "
            "`carb-nas dataset export` or add the measured target columns."
        )
    if "energy_j" not in targets:
        notes.append(f"{label}: no energy_j values (no energy meter on this platform)")
    if "device" in frame.columns:
        device = frame["device"].fillna("unknown").astype(str)
    elif "platform" in frame.columns:
        device = frame["platform"].fillna("unknown").astype(str).str.split("/").str[0]
    else:
        device = pd.Series("unknown", index=frame.index)
    frame["variant"] = device + "/" + frame["runtime"] + "/" + frame["precision"]
    methods = []
    if "peak_mem_method" in frame.columns:
        methods = sorted(frame["peak_mem_method"].dropna().astype(str).unique())
    cv = math.nan
    if "latency_cv" in frame.columns:
        cv = float(pd.to_numeric(frame["latency_cv"], errors="coerce").median())
    frame.attrs = {
        "source": label,
        "rows": int(len(raw)),
        "ok_rows": int(len(frame)),
        "targets": targets,
        "peak_mem_methods": methods,
        "latency_cv_median": cv,
        "notes": notes,
    }
    return frame


def with_gflops(frame: pd.DataFrame) -> pd.DataFrame:
    from carb_nas.features import compute_features  # lazy: features import the space stack

    feats = compute_features(frame[list(CONFIG_COLUMNS)].reset_index(drop=True))
    out = frame.copy()
    out["gflops"] = feats["flops"].to_numpy(dtype=float) / 1e9
    return out


def batch_tier(batch_size: Any) -> np.ndarray:
    """Tier label of each batch size (see ``BATCH_TIERS``)."""
    b = np.asarray(batch_size, dtype=float)
    conds = [(b >= lo) & (b <= hi) for lo, hi, _ in BATCH_TIERS]
    return np.select(conds, [lab for *_, lab in BATCH_TIERS], default=">256")


def tier_order(labels: Iterable[str]) -> list[str]:
    known = [lab for *_, lab in BATCH_TIERS] + [">256"]
    present = set(labels)
    return [lab for lab in known if lab in present]


def same_dataset(a: str | Path | pd.DataFrame, b: str | Path | pd.DataFrame) -> bool:
    """True when ``a`` and ``b`` name the same file (or are the same DataFrame object)."""
    if isinstance(a, pd.DataFrame) or isinstance(b, pd.DataFrame):
        return a is b
    try:
        return dataset_path(a).resolve() == dataset_path(b).resolve()
    except (OSError, ValueError):  # unresolvable names: load_dataset reports them
        return False
