"""Report directories: README.md, the result as JSON and the PNG plots, written atomically.

The directory is checked (creatable and writable) before any work; every file is rendered in
memory first and then written file by file with ``carb_nas._io``, so a failure leaves no
partial file, and other files in the directory are left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from carb_nas._io import atomic_write, atomic_write_json, atomic_write_text, check_writable_dir
from carb_nas.errors import InputFileError
from carb_nas.reports._characterize import characterize_frames
from carb_nas.reports._markdown import characterization_markdown, transfer_markdown
from carb_nas.reports._plots import plot_characterization, plot_transfer
from carb_nas.reports._transfer import transfer_frames

__all__ = ["write_characterization_report", "write_transfer_report"]


def _bytes_writer(data: bytes) -> Callable[[Path], int]:
    """A writer for ``atomic_write`` that fills its temporary file with ``data``."""
    return lambda tmp: tmp.write_bytes(data)


def _write(d: Path, markdown: str, pngs: dict[str, bytes], json_name: str, result: Any) -> None:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputFileError(
            f"cannot create report directory {str(d)!r}: expected a writable location, got "
            f"{type(e).__name__}: {e.strerror or e}. Choose another --report path."
        ) from None
    for name, data in pngs.items():
        atomic_write(d / name, _bytes_writer(data))
    atomic_write_text(d / "README.md", markdown)
    atomic_write_json(d / json_name, result)


def _with_plots(markdown: str, files: Sequence[str]) -> str:
    return markdown + "\n## Plots\n\n" + "\n".join(f"![{f}]({f})" for f in files) + "\n"


def write_characterization_report(
    datasets: Sequence[str | Path | pd.DataFrame] | str | Path | pd.DataFrame,
    report_dir: str | Path,
) -> dict[str, Any]:
    """Run ``characterize`` and write ``characterization.json``, ``README.md`` and PNGs."""
    d = check_writable_dir(report_dir)
    result, frame = characterize_frames(datasets)
    pngs = plot_characterization(result, frame)
    md = _with_plots(characterization_markdown(result), list(pngs))
    result = dict(result) | {"files": ["README.md", "characterization.json", *pngs]}
    _write(d, md, pngs, "characterization.json", result)
    return result


def write_transfer_report(
    dataset_a: str | Path | pd.DataFrame,
    dataset_b: str | Path | pd.DataFrame,
    report_dir: str | Path,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run ``transfer`` and write ``transfer.json``, ``README.md`` and PNGs to ``report_dir``."""
    d = check_writable_dir(report_dir)
    result, a, b = transfer_frames(dataset_a, dataset_b, **kwargs)
    pngs = plot_transfer(result, a, b)
    md = _with_plots(transfer_markdown(result), list(pngs))
    result = dict(result)
    result["meta"] = dict(result["meta"]) | {"files": ["README.md", "transfer.json", *pngs]}
    _write(d, md, pngs, "transfer.json", result)
    return result
