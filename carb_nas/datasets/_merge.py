"""Merging independent measurement passes, and appending rows to a dataset file."""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from carb_nas.datasets._published import refuse_published
from carb_nas.datasets._tables import TABLE_SUFFIXES, read_table, write_table
from carb_nas.datasets._validate import validate_rows
from carb_nas.errors import InputFileError

__all__ = ["median_of_passes", "check_appendable", "append_rows"]


def _platforms(frame: pd.DataFrame) -> list[str]:
    return sorted(frame["platform"].dropna().astype(str).unique())


def median_of_passes(frames: list[pd.DataFrame], sources: list[str] | None = None) -> pd.DataFrame:
    """One row per config from independent measurement passes: the median-latency ok row.

    Each frame holds the rows of one pass (e.g. ``carb-nas dataset export`` of one campaign, or
    a shipped dataset). On a shared machine one pass's latency moves by several % from the
    next; the middle of three passes is a real row (its own fingerprint, timestamp and CV) much
    less likely to be an outlier than any single pass. With an even number of ok rows the
    lower middle one is kept; a config without any ok row keeps its first row. Every pass must
    be of one and the same platform (a dataset holds one platform). Order: the first frame's
    keys, then new keys in order.
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
    seen = {s: _platforms(f) for f, s in zip(checked, sources)}
    every = sorted({p for plats in seen.values() for p in plats})
    if len(every) > 1:
        got = "; ".join(f"{s}: {', '.join(p)}" for s, p in seen.items())
        raise InputFileError(
            f"passes of different platforms: expected every pass of one platform, got {got}. "
            "Merge the passes of one platform only."
        )
    rows = pd.concat(
        [f.assign(_pass=i) for i, f in enumerate(checked)], ignore_index=True, sort=False
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


def _torn_csv_tail(p: Path) -> str | None:
    """Why the last line of CSV ``p`` is not a complete row (None when it is)."""
    data = p.read_bytes()
    if not data:
        return None
    lines = data.decode("utf-8", errors="replace").splitlines()
    if not data.endswith(b"\n"):
        return f"the file does not end with a newline (last line {len(lines)} is cut off)"
    rows = list(csv.reader(lines))
    if len(rows) > 1 and len(rows[-1]) != len(rows[0]):
        return f"its last line {len(lines)} has {len(rows[-1])} fields, the header {len(rows[0])}"
    return None


def _probe_writable(directory: Path, what: str) -> None:
    # a probe, not os.access: root passes every permission bit, yet /proc refuses anyway
    try:
        fd, probe = tempfile.mkstemp(prefix=".carb_nas_probe.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputFileError(
            f"{what} not writable: expected a directory this user can write in, got "
            f"{str(directory)!r} ({e.strerror or e}). Fix the permissions or append to "
            "another file."
        ) from None


def check_appendable(path: str | Path, platform: str) -> pd.DataFrame | None:
    """The rows of dataset ``path`` (validated, as read) if rows of ``platform`` may join it.

    None when ``path`` does not exist yet (its directory must, and be writable). Call it before
    measuring: a file that is unreadable, unwritable, torn (a cut-off last row), not a dataset
    or of another platform is refused up front, so no measurement is thrown away.
    """
    refuse_published(path, "--append", "a dataset of measured rows to add ours to")
    p = Path(path)
    if p.suffix not in TABLE_SUFFIXES:
        raise InputFileError(
            f"unsupported dataset format for {str(p)!r}: expected a .csv or .parquet path, got "
            f"the suffix {p.suffix!r}. Append to a .csv or .parquet file."
        )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputFileError(
            f"dataset directory does not exist: expected an existing directory for {str(p)!r}. "
            f"Create {str(parent)!r} first or choose another --append path."
        )
    _probe_writable(parent, "dataset directory")
    if not p.exists():
        return None
    for mode, what in (("rb", "read"), ("ab", "write")):
        try:
            with open(p, mode):
                pass
        except OSError as e:
            raise InputFileError(
                f"dataset not {what}able: expected a file this user can {what}, got "
                f"{str(p)!r} ({e.strerror or e}). Fix the permissions or append to another file."
            ) from None
    if p.suffix == ".csv" and (torn := _torn_csv_tail(p)):
        raise InputFileError(
            f"{p}: torn last row: expected complete CSV rows, got a row cut short ({torn}). "
            "Remove that incomplete line (an interrupted write) or append to a new file."
        )
    old = read_table(p)
    refuse_published(old, "--append", "a dataset of measured rows to add ours to", label=str(p))
    others = [x for x in _platforms(validate_rows(old, str(p))) if x != platform]
    if others:
        raise InputFileError(
            f"{p}: dataset of another platform: expected rows of {platform}, got {others}. A "
            "dataset holds one platform; append to that platform's file."
        )
    return old


def append_rows(
    rows: pd.DataFrame, path: str | Path, old: pd.DataFrame | None = None
) -> tuple[Path, list[str]]:
    """Append measured rows to dataset ``path`` (created if absent), atomically.

    Rows whose key is already in the file replace the old rows (one row per config); returns
    the path and the replaced keys. ``old``: the dataset as :func:`check_appendable` read it
    before measuring (read and checked again here when None).
    """
    platforms = _platforms(validate_rows(rows, "appended rows"))
    if len(platforms) != 1:
        raise InputFileError(
            f"appended rows: expected rows of one platform, got {platforms}. Append one "
            "platform's rows at a time."
        )
    if old is None:
        old = check_appendable(path, platforms[0])
    if old is None:
        return write_table(rows, path), []
    dup = old["key"].astype(str).isin(set(rows["key"].astype(str))).to_numpy()
    replaced = sorted(set(old.loc[dup, "key"].astype(str)))
    cols = list(old.columns) + [c for c in rows.columns if c not in old.columns]
    new = pd.concat([old[~dup], rows.reindex(columns=cols)], ignore_index=True)
    return write_table(new, path), replaced
