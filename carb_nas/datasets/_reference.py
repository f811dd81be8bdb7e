"""Dividing the machine's momentary speed out of measured rows (``reference_ms``).

Each row that timed the machine-speed probe (:class:`carb_nas.measure.ReferenceProbe`) says
how fast the machine ran convolution code while the row was timed. Scaling its latencies by
``typical / reference_ms`` gives the latency at the machine's typical speed: what a cost model
should learn, and what a repeat measurement on a calmer minute would see (the measured
figures are in :mod:`carb_nas.measure._reference` and docs/measurement.md). The raw columns are
kept (``latency_ms_raw``, ``measured_ms_raw``), so nothing measured is lost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from carb_nas.errors import ConfigError

__all__ = ["REFERENCE_SCALED", "reference_normalized"]

#: the latency columns of a row that :func:`reference_normalized` scales
REFERENCE_SCALED = ("latency_ms", "latency_mean_ms", "latency_p90_ms")


def reference_normalized(
    rows: pd.DataFrame,
    ops: pd.DataFrame | None = None,
    typical_ms: float | None = None,
    drop_unprobed: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame | None, float]:
    """``(rows, ops, typical_ms)`` with each row's latencies (and its ops' ``measured_ms``,
    joined on ``key``) times ``typical_ms / reference_ms`` (for the ops ``ops_reference_ms``
    where a row has it: the probe around the profiled runs).

    ``typical_ms`` defaults to the median ``reference_ms`` of ``rows`` (pass the training
    set's to normalize a test set alike). Every ok row needs a ``reference_ms``: a dataset
    measured without the probe cannot be normalized, and a mix would be two scales. With
    ``drop_unprobed`` the rows without one (and their ops) are left out instead, for a dataset
    measured partly with the probe; at least one row must have it.
    """
    probe_hint = "Measure them with it (benchmarks/any_cnn_data.py measure --reference)."
    if "reference_ms" not in rows.columns:
        raise ConfigError(
            "rows without a reference_ms column: expected rows measured with the machine-speed "
            f"probe, got none. {probe_hint}"
        )
    ok = rows["status"] == "ok" if "status" in rows.columns else pd.Series(True, rows.index)
    ref = pd.to_numeric(rows["reference_ms"], errors="coerce")
    missing = ok & ~(ref > 0)
    if drop_unprobed:
        if not (ok & (ref > 0)).any():
            raise ConfigError(
                f"no row timed the machine-speed probe: expected some ok rows with a positive "
                f"reference_ms, got none of {len(rows)}. {probe_hint}"
            )
        rows, ok, ref = rows[~missing], ok[~missing], ref[~missing]
        if ops is not None:
            ops = ops[ops["key"].isin(set(rows["key"]))]
    elif missing.any():
        raise ConfigError(
            f"{int(missing.sum())} ok rows without a positive reference_ms (e.g. key "
            f"{rows.loc[missing, 'key'].iloc[0] if 'key' in rows else '?'}): expected every "
            "ok row to have timed the probe, got some that did not. Normalize only rows "
            "measured with it."
        )
    if typical_ms is None:
        typical_ms = float(ref[ok].median())
    if not (typical_ms > 0 and np.isfinite(typical_ms)):
        raise ConfigError(
            f"invalid typical_ms: expected a positive number of ms, got {typical_ms!r}. Pass "
            "the training rows' typical probe time (the third value this function returns)."
        )
    factor = (typical_ms / ref).where(ok, 1.0)
    out = rows.copy()
    out["reference_factor"] = factor
    for c in REFERENCE_SCALED:
        if c in out.columns:
            out[f"{c}_raw"] = out[c]
            out[c] = pd.to_numeric(out[c], errors="coerce") * factor
    new_ops = None
    if ops is not None:
        # ops campaigns time the probe around the profiled runs too (ops_reference_ms): the
        # op times are of those runs, after the timing window
        ops_ref = pd.to_numeric(rows.get("ops_reference_ms", ref), errors="coerce")
        ops_factor = (typical_ms / ops_ref.where(ops_ref > 0, ref)).where(ok, 1.0)
        by_key = dict(zip(out["key"], ops_factor))
        new_ops = ops.copy()
        new_ops["measured_ms_raw"] = new_ops["measured_ms"]
        new_ops["measured_ms"] = new_ops["measured_ms"] * new_ops["key"].map(by_key).fillna(1.0)
    return out, new_ops, typical_ms
