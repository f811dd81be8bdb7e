"""Atomic file writes shared by every stage (manifests, reports, tables, model directories).

A reader never sees a half-written file: content goes to a hidden temporary sibling that is
renamed over the target only when complete. A failure removes the temporary and leaves the
previous file (or directory) exactly as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from carb_nas._json import jsonable
from carb_nas.errors import InputFileError

__all__ = [
    "atomic_write",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_directory",
    "check_writable_dir",
]


def _tmp_sibling(path: Path) -> Path:
    # unique per process and thread: concurrent writers of one path must not share a temporary
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def _unwritable(path: Path, e: OSError) -> InputFileError:
    return InputFileError(
        f"cannot write {str(path)!r}: expected a writable location, got {type(e).__name__}: "
        f"{e.strerror or e}. Choose another path or fix its permissions."
    )


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp)`` to fill a temporary sibling of ``path``, then rename it into place."""
    p = Path(path)
    tmp = _tmp_sibling(p)
    try:
        write(tmp)
        tmp.replace(p)
    except OSError as e:  # permission denied, disk full, a directory in the way, ...
        tmp.unlink(missing_ok=True)
        raise _unwritable(p, e) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write_json(path: str | Path, doc: Any, *, indent: int | None = 1, **kw: Any) -> Path:
    """Write ``doc`` as strict JSON (numpy scalars plain, NaN/inf as null) atomically."""
    text = json.dumps(jsonable(doc), indent=indent, allow_nan=False, **kw) + "\n"
    return atomic_write_text(path, text)


@contextmanager
def atomic_directory(path: str | Path, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield an empty temporary directory that replaces ``path`` only if the block succeeds.

    On an exception the temporary is removed and ``path`` (if it existed) is untouched. An
    existing ``path`` is swapped out only after the new directory is complete, so a reader sees
    the old directory or the new one, never a mixture.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputFileError(
            f"output directory is a file: expected a directory path, got {str(p)!r}. "
            "Choose another output path."
        )
    if p.exists() and not overwrite:
        raise InputFileError(
            f"output directory exists: expected a new path, got {str(p)!r}. "
            "Remove it or choose another path."
        )
    created = [d for d in p.parents if not d.exists()]  # innermost first: removed on failure
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent))
    except OSError as e:
        _remove_empty(created)
        raise _unwritable(p, e) from e
    try:
        yield tmp
        old = None
        if p.exists():
            old = p.with_name(f".{p.name}.{os.getpid()}.old")
            p.replace(old)
        tmp.replace(p)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(created)
        raise


def _remove_empty(directories: list[Path]) -> None:
    for d in directories:
        try:
            d.rmdir()
        except OSError:  # not empty (someone else wrote there) or already gone
            pass


def check_writable_dir(
    path: str | Path,
    what: str = "report directory",
    option: str = "--report",
    *,
    replaced: bool = False,
) -> Path:
    """``path`` once it is known that it can be created and written as a directory.

    Creates nothing: the directory (or its nearest existing ancestor) is probed with a
    temporary directory removed at once, so an unwritable place (``/proc/x``, a read-only
    mount, a file in the way) is refused before any work. ``what`` names the directory,
    ``option`` the flag to fix.
    """
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise InputFileError(
            f"{what} is a file: expected a directory path, got {str(d)!r}. Choose another "
            f"{option} path."
        )
    anchor = d.parent if replaced else d
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    if not anchor.is_dir():
        raise InputFileError(
            f"cannot create {what} {str(d)!r}: expected a path under a directory, "
            f"got the file {str(anchor)!r} in the way. Choose another {option} path."
        )
    try:
        Path(tempfile.mkdtemp(prefix=".carb_nas_probe.", dir=anchor)).rmdir()
    except OSError as e:
        raise InputFileError(
            f"cannot write {what} {str(d)!r}: expected a creatable, writable "
            f"directory, got {type(e).__name__}: {e.strerror or e} in {str(anchor)!r}. Choose "
            f"another {option} path or fix its permissions."
        ) from None
    return d
