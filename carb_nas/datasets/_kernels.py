"""Kernel samples: single operators of no network, measured on one machine.

An export (``benchmarks/any_cnn_data.py export-kernels``) holds one row per sample: its key,
the platform fingerprint, the latency CV, the speed probe (``reference_ms``,
``ops_reference_ms``), the traced op columns (``carb_nas.features.trace_ops``) and the op's
``measured_ms``; an export with a ``latency_ms`` column also keeps the sample's whole-module
latency where it was measured (what anchoring a sample to its latency would need).
``load_kernel_samples`` reads it as the op table ``ModuleCostModel`` takes as
``kernel_samples``: per-op costs are per machine, so samples of another CPU than the networks'
are refused.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from carb_nas.datasets._machine import machines
from carb_nas.datasets._reference import reference_normalized
from carb_nas.errors import ConfigError

__all__ = ["KERNEL_SAMPLE_COLUMNS", "load_kernel_samples"]

#: the per-sample columns of an export beside the traced op columns
KERNEL_SAMPLE_COLUMNS = ("key", "fingerprint", "latency_cv", "reference_ms", "ops_reference_ms")
_OP_COLUMNS = ("index", "kind", "op", "measured_ms", "flops")


def load_kernel_samples(
    path: str | Path,
    typical_ms: float | None = None,
    rows: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The op table of an export of kernel samples (``key``, the traced op columns,
    ``measured_ms``), checked. With ``rows`` (the networks the samples join, with their
    ``fingerprint``) samples of another CPU are refused; with ``typical_ms`` each sample's time
    is scaled by its speed probe to that median (``reference_normalized``, as the networks')."""
    p = Path(path)
    fix = "Pass the CSV that benchmarks/any_cnn_data.py export-kernels wrote."
    if not p.is_file():
        raise ConfigError(f"kernel samples not found: expected a file, got {str(p)!r}. {fix}")
    try:
        table = pd.read_csv(p)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise ConfigError(
            f"unreadable kernel samples {str(p)!r}: expected a CSV (.csv or .csv.gz), got "
            f"{type(e).__name__}: {e}. {fix}"
        ) from e
    missing = sorted({*KERNEL_SAMPLE_COLUMNS, *_OP_COLUMNS} - set(table.columns))
    if missing:
        raise ConfigError(
            f"not kernel samples: expected the columns {sorted(KERNEL_SAMPLE_COLUMNS)} and the "
            f"traced op columns, got {missing} missing in {str(p)!r}. {fix}"
        )
    if rows is not None and "fingerprint" in rows:
        theirs, ours = machines(table), machines(rows)
        if theirs != ours:
            raise ConfigError(
                f"kernel samples of another machine: expected samples measured on the networks' "
                f"CPU {sorted(ours)}, got {sorted(theirs)}. Per-op costs are per machine: "
                "measure the samples where the networks were measured (any_cnn_data.py kernels)."
            )
    samples = table[list(KERNEL_SAMPLE_COLUMNS)].assign(status="ok")
    per_sample = (*KERNEL_SAMPLE_COLUMNS, "latency_ms")  # the op table keeps the op's own
    ops = table.drop(columns=[c for c in per_sample if c != "key" and c in table])
    if typical_ms is not None:
        _, scaled, _ = reference_normalized(samples, ops, typical_ms)
        assert scaled is not None  # ops were given
        ops = scaled
    return ops[ops["measured_ms"].notna()].reset_index(drop=True)
