"""Table I/O: CSV or Parquet in, CSV or Parquet out (atomically), with one-line errors."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from carb_nas._io import atomic_write
from carb_nas.errors import InputFileError, MissingFileError
from carb_nas.space import bundled_space_path, load_space, normalize_config_frame

__all__ = ["read_table", "read_configs", "write_table", "TABLE_SUFFIXES"]

TABLE_SUFFIXES = (".csv", ".parquet")


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet file with clear errors."""
    p = Path(path)
    if not p.exists():
        raise MissingFileError(
            f"file not found: expected an existing .csv or .parquet file, got {str(path)!r}. "
            "Check the path."
        )
    try:
        if p.suffix == ".parquet":
            return pd.read_parquet(p)
        if p.suffix == ".csv":
            _check_last_row(p)
            return pd.read_csv(p)
    except (
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        OSError,
        ValueError,
    ) as e:
        raise InputFileError(
            f"{p}: unreadable table: expected a valid {p.suffix[1:].upper()} file, got an error "
            f"({e}). Check the file's content."
        ) from None
    raise InputFileError(
        f"{p}: unsupported table format: expected a .csv or .parquet file, got {p.suffix!r}. "
        "Convert the file or rename it."
    )


def _fields(line: bytes) -> int:
    return len(next(csv.reader([line.decode("utf-8", errors="replace")]), []))


def _check_last_row(p: Path) -> None:
    """Refuse a CSV whose last line was cut short (no final newline, fewer fields than the
    header): an interrupted write must never be parsed as a row with empty cells."""
    with p.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) in (b"\n", b"\r"):
            return
        f.seek(0)
        header = f.readline().rstrip(b"\r\n")
        f.seek(max(0, size - (1 << 16)))
        last = f.read().rsplit(b"\n", 1)[-1]
    expected, got = _fields(header), _fields(last)
    if got < expected:
        raise InputFileError(
            f"{p}: torn last row: expected every row to have the header's {expected} fields, got "
            f"{got} in the last line, which has no final newline (an interrupted write). Delete "
            "that line or restore the file."
        )


def write_table(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write CSV or Parquet atomically: a failure leaves no partial file behind."""
    p = Path(path)
    if p.suffix not in TABLE_SUFFIXES:
        raise InputFileError(
            f"unsupported output format: expected a path ending in .csv or .parquet, got "
            f"{str(path)!r}. Rename the output."
        )
    if not p.parent.exists():
        raise MissingFileError(
            f"output directory does not exist: expected an existing directory, got "
            f"{str(p.parent)!r}. Create it first."
        )
    if p.suffix == ".parquet":
        return atomic_write(p, lambda tmp: frame.to_parquet(tmp, index=False))
    return atomic_write(p, lambda tmp: frame.to_csv(tmp, index=False))


def read_configs(path: str | Path) -> pd.DataFrame:
    """Configs from a CSV/Parquet table or a space TOML (all its configs), validated."""
    p = Path(path)
    if p.suffix == ".toml" or (not p.exists() and bundled_space_path(str(path)) is not None):
        return load_space(path).grid()
    return normalize_config_frame(read_table(p), source=str(p))
