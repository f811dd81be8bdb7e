"""Table I/O: CSV or Parquet in, CSV or Parquet out (atomically), with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from carb_nas._io import atomic_write
from carb_nas.errors import InputFileError, MissingFileError

__all__ = ["read_table", "write_table", "TABLE_SUFFIXES"]

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
