"""Shipped measurement datasets and the one loader of rows tables.

Datasets live in ``carb_nas/data/datasets/`` (the ResNet-space rows) and ``carb_nas/data/zoo/``
(the multi-family rows of the built-in families; ``*_ops`` and ``*_kernels`` tables beside them
are per-operator tables, not datasets), rows following ``SCHEMA``. Each shipped file has a
name ``<device>/<runtime>/<precision>/<configs>@<machine kind>`` (``cpu/torch/fp32/zoo@amd-zen4``;
the grammar, the kinds and the name -> file table: ``carb_nas.datasets._kinds``). A bare
platform name (``cpu/torch/fp32``) means its ``DEFAULT_DATASETS`` entry, or the platform's
only dataset. The spelling of a file name with ``/`` for ``_`` (``cpu/torch/fp32/zoo-zen4``)
is accepted too, so names written before the kinds keep loading the same rows; a file that is
not in the table (one added by hand) is named that way. ``load_dataset`` is the one way to read
measured rows -- a shipped name, a path or a DataFrame -- and validates every table it returns
with ``validate_rows`` (see ``carb_nas.datasets._validate`` for the strictness rule).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from carb_nas.datasets._kinds import DEFAULT_DATASETS, SHIPPED_FILES
from carb_nas.datasets._published import refuse_published
from carb_nas.datasets._schema import REQUIRED_COLUMNS
from carb_nas.datasets._tables import TABLE_SUFFIXES, read_table
from carb_nas.datasets._validate import validate_rows
from carb_nas.errors import CarbNasError, InputFileError, MissingFileError

__all__ = [
    "DatasetWarning",
    "datasets_dir",
    "dataset_path",
    "list_datasets",
    "load_dataset",
    "shipped_names",
    "zoo_dir",
]

#: file stem -> dataset name, for the shipped files (stems are unique across both folders)
_NAME_OF_STEM = {file.rsplit("/", 1)[1]: name for name, file in SHIPPED_FILES.items()}


class DatasetWarning(UserWarning):
    """A file in the shipped-data folder that is not a dataset (skipped by ``list_datasets``)."""


def datasets_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "datasets"


def zoo_dir() -> Path:
    """The multi-family datasets of the built-in families (``carb_nas/data/zoo``)."""
    return Path(__file__).resolve().parent.parent / "data" / "zoo"


def _files() -> list[Path]:
    """Every shipped dataset file: ``data/datasets/`` first, then ``data/zoo/`` (its per-op
    ``*_ops`` and ``*_kernels`` tables are not datasets)."""
    out: list[Path] = []
    for d in (datasets_dir(), zoo_dir()):
        if d.is_dir():
            out += sorted(
                p
                for p in d.iterdir()
                if p.suffix in TABLE_SUFFIXES and not p.stem.endswith(("_ops", "_kernels"))
            )
    return out


def _file_spelling(path: Path) -> str:
    return path.stem.replace("_", "/")


def _name(path: Path) -> str:
    return _NAME_OF_STEM.get(path.stem, _file_spelling(path))


def _platform(name: str) -> str:
    return "/".join(name.split("/")[:3])


def _resolve(name: str) -> Path | None:
    """The file of a dataset name (see the module docstring): its own name, its file's
    spelling, or a bare platform's default or only dataset."""
    files = _files()
    for spelling in (_name, _file_spelling):
        found = [f for f in files if spelling(f) == name]
        if found:
            return found[0]
    if name.count("/") == 2:
        default = [f for f in files if _name(f) == DEFAULT_DATASETS.get(name)]
        qualified = [f for f in files if _platform(_name(f)) == name]
        if default:
            return default[0]
        if len(qualified) == 1:
            return qualified[0]
    return None


def shipped_names(other_spellings: bool = False) -> list[str]:
    """The names of the shipped datasets and each bare platform name that picks one (what
    ``carb-nas dataset list`` shows); ``other_spellings`` adds the file spellings that
    :func:`load_dataset` accepts too (``cpu/torch/fp32/zoo-zen4``)."""
    files = _files()
    names = [_name(f) for f in files]
    bare = sorted({_platform(n) for n in names if n.count("/") == 3} - set(names))
    out = names + [b for b in bare if _resolve(b) is not None]
    if other_spellings:
        out += [s for s in (_file_spelling(f) for f in files) if s not in out]
    return out


def dataset_path(platform_or_path: str | Path) -> Path:
    """The file of a shipped platform (``cpu/torch/fp32``), or ``platform_or_path`` as a path.

    An existing file is returned as is; a name without a .csv/.parquet suffix is looked up
    among the shipped datasets; anything else is a ``MissingFileError``.
    """
    text = str(platform_or_path)
    p = Path(text)
    if p.exists():
        return p
    if p.suffix in TABLE_SUFFIXES:
        names = shipped_names()
        raise MissingFileError(
            f"dataset not found: expected an existing .csv or .parquet file of measured rows "
            f"or a shipped platform name ({', '.join(names) or 'none shipped'}), got {text!r}. "
            "Check the path (`carb-nas dataset list` shows the shipped datasets)."
        )
    found = _resolve(text)
    if found is None:
        names = shipped_names()
        raise MissingFileError(
            f"no shipped dataset for platform {text!r}: expected one of {names or '(none)'}"
            ", or a path to a .csv/.parquet rows file. See `carb-nas dataset list`."
        )
    return found


def _describe(path: Path) -> dict[str, Any]:
    frame = read_table(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise InputFileError(
            f"{path}: not a dataset: expected the required columns of SCHEMA, missing "
            f"{missing[:4]}{' ...' if len(missing) > 4 else ''}. Remove or fix the file."
        )
    platforms = sorted(frame["platform"].dropna().astype(str).unique())
    if len(platforms) > 1:
        raise InputFileError(
            f"{path}: mixed platforms: expected one platform per dataset, got {platforms}. "
            "Split the file by its 'platform' column."
        )
    first = frame.iloc[0] if len(frame) else None
    name = _name(path)
    platform = platforms[0] if platforms else "/".join(name.split("/")[:3])
    if platform != "/".join(name.split("/")[:3]):
        raise InputFileError(
            f"{path}: misnamed dataset: expected its rows' platform {platform!r} at the start "
            f"of its name, got the name {name!r}. Rename the file to "
            f"{platform.replace('/', '_')}[_QUALIFIER]{path.suffix}."
        )
    device, runtime, precision = (platform.split("/") + ["", "", ""])[:3]
    return {
        "name": name,
        "machine_kind": name.rsplit("@", 1)[1] if "@" in name else None,
        "platform": platform,
        "device": device,
        "device_name": str(first["device_name"]) if first is not None else None,
        "runtime": runtime,
        "precision": precision,
        "path": str(path.resolve()),
        "rows": int(len(frame)),
        "ok_rows": int((frame["status"] == "ok").sum()),
        "energy_j": bool("energy_j" in frame and frame["energy_j"].notna().any()),
    }


def list_datasets() -> list[dict[str, Any]]:
    """One dict per shipped dataset: name (what :func:`load_dataset` takes), machine_kind
    (an id of ``MACHINE_KINDS``; None for a file not in the shipped table), platform,
    device, device_name, runtime, precision, path (absolute), rows, ok_rows, energy_j (True
    when the dataset has measured energy).

    A file of the data folder that is not a dataset is skipped with a ``DatasetWarning``
    naming it; the others are still listed.
    """
    out = []
    for p in _files():
        try:
            out.append(_describe(p))
        except CarbNasError as e:
            warnings.warn(f"{e} Skipped it.", DatasetWarning, stacklevel=2)
    return out


def load_dataset(
    source: str | Path | pd.DataFrame,
    ok_only: bool = False,
    *,
    partial: bool = False,
    name: str | None = None,
) -> pd.DataFrame:
    """Measured rows, validated: a shipped dataset name (``cpu/torch/fp32``,
    ``cpu/torch/fp32/zoo@amd-zen4``, ``cpu/openvino/int8``; see :func:`list_datasets`), a path
    or a frame.

    ``partial=False``: a complete dataset (every required column, real devices only);
    ``partial=True``: an analysis input (config columns plus what is present; see
    ``validate_rows``). ``ok_only`` keeps the rows with status ok. ``name`` labels the
    source in messages (default: the path). ``frame.attrs["source"]`` holds that label.
    """
    # published tables (others' benchmarks) are never rows of ours: one line, before reading
    refuse_published(source, "this command", "measured rows of carb_nas.datasets.SCHEMA")
    if isinstance(source, pd.DataFrame):
        raw, label = source, name or "<frame>"
    else:
        p = dataset_path(source)
        raw, label = read_table(p), name or str(p)
        refuse_published(
            raw, "this command", "measured rows of carb_nas.datasets.SCHEMA", label=str(p)
        )
    frame = validate_rows(raw, label, partial=partial)
    if ok_only and "status" in frame.columns:
        frame = frame[frame["status"] == "ok"].reset_index(drop=True)
    frame.attrs = {"source": label}
    return frame
