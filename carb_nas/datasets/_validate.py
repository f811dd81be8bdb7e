"""Validation of measured rows against ``SCHEMA``: the one strictness rule every loader uses.

The rule: every column of ``SCHEMA`` that a table holds is checked the same way wherever the
table is read -- its type, its range, the status values, ``latency_ms`` and ``peak_mem_mb``
above zero on ok rows, energy never estimated, ``platform == device/runtime/precision``, keys
computed from the config columns. What a caller chooses is only how complete the table must
be:

- a *dataset* (``partial=False``: shipped, merged, appended to, trained on) holds every
  required column, one row per (platform, key), and only rows of real devices and meters
  (the provenance checks: ``device``, ``meter``, ``device_name``, JSON ``fingerprint``);
- an *analysis input* (``partial=True``: characterize, transfer, calibrate) needs only the
  config columns (precision and runtime default to fp32/torch) and the columns it analyses,
  so users' own or synthetic tables can be studied; the provenance checks do not apply.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.datasets._schema import DEVICES, REAL_METERS, REQUIRED_COLUMNS, SCHEMA, STATUSES
from carb_nas.errors import ConfigError, InputFileError
from carb_nas.space import CONFIG_COLUMNS, Config, normalize_config_frame

__all__ = ["validate_rows", "plain"]


def plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (messages show 18.5, not np.float64(18.5))."""
    return value.item() if isinstance(value, np.generic) else value


def _fail(source: str, what: str, expected: str, got: Any, fix: str) -> InputFileError:
    return InputFileError(f"{source}: {what}: expected {expected}, got {plain(got)!r}. {fix}")


def validate_rows(
    frame: pd.DataFrame, source: str = "<rows>", *, partial: bool = False
) -> pd.DataFrame:
    """Check a table of measured rows against SCHEMA; return it with typed columns.

    ``partial=False`` (a dataset): every required column, unique keys, real devices only.
    ``partial=True`` (an analysis input): the config columns and whatever else is present,
    checked by the same rules (see the module docstring); absent SCHEMA columns stay absent.
    Raises InputFileError naming the column, the first offending data row and the fix.
    """
    if partial:
        frame = normalize_config_frame(frame, source=source)
    else:
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            raise _fail(
                source,
                f"missing column(s) {missing}",
                "every required column of carb_nas.datasets.SCHEMA",
                list(frame.columns)[:12],
                "Export rows with `carb-nas dataset export`.",
            )
    given = set(frame.columns)
    out = frame.copy()
    for col in SCHEMA:
        if col not in out.columns:
            out[col] = np.nan
    for col, (kind, required, _) in SCHEMA.items():
        s = out[col]
        if kind in ("int", "float"):
            num = pd.to_numeric(s, errors="coerce")
            bad = num.isna() & s.notna()
            if required and col in given:
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
                frac = (num != num.round()) & num.notna()
                if frac.any():
                    i = int(np.flatnonzero(frac.to_numpy())[0])
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
        elif required and col in given:
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

    def check(mask: pd.Series, col: str, expected: str, fix: str = "Fix or drop that row."):
        if col not in given:
            return
        mask = mask.fillna(False).to_numpy(bool)
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            raise _fail(
                source,
                f"bad value in column '{col}' at data row {i + 1}",
                expected,
                frame[col].iloc[i],
                fix,
            )

    check(~out["status"].isin(STATUSES), "status", f"one of {list(STATUSES)}")
    if not partial:  # provenance: rows of test doubles are never data
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
    ok = out["status"] == "ok" if "status" in given else pd.Series(True, index=out.index)
    check(ok & ~(out["latency_ms"] > 0), "latency_ms", "> 0 ms on ok rows")
    check(ok & ~(out["peak_mem_mb"] > 0), "peak_mem_mb", "> 0 MB on ok rows")
    check(ok & ~(out["n_runs"] >= 1), "n_runs", ">= 1 on ok rows")
    check(out["latency_cv"] < 0, "latency_cv", ">= 0")
    check(out["energy_j"] < 0, "energy_j", ">= 0 J")
    if "meter" in given:
        check(
            out["energy_j"].notna() & (out["meter"] == "none"),
            "energy_j",
            "empty when meter is none (energy is never estimated)",
        )
    if "device" in given:
        expected_platform = (
            out["device"].astype(str)
            + "/"
            + out["runtime"].astype(str)
            + "/"
            + out["precision"].astype(str)
        )
        check(out["platform"] != expected_platform, "platform", "device/runtime/precision")
    if not partial:
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
    if "key" in given:
        _check_keys(out, source)
    if len(out) and ok.any():
        lat = out.loc[ok, "latency_ms"]
        if lat.notna().any() and not math.isfinite(float(lat.sum())):
            raise _fail(source, "non-finite latency", "finite values", "inf/nan", "Fix the rows.")
    if partial:  # absent columns stay absent; config columns keep their normalized dtypes
        out = out[[c for c in out.columns if c in given]]
        out[list(CONFIG_COLUMNS)] = frame[list(CONFIG_COLUMNS)]
    return out


def _check_keys(out: pd.DataFrame, source: str) -> None:
    for i, row in enumerate(out[list(CONFIG_COLUMNS) + ["key"]].itertuples(index=False)):
        try:
            key = Config(*row[:-1]).key
        except (ConfigError, TypeError, ValueError) as e:
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
