"""What the closed form and the tracer share: the column list, element sizes, derived columns,
and the vectorized table lookups."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FEATURE_COLUMNS = (
    "flops",
    "native_conv_flops",
    "onednn_weight_mb",
    "mmap_mb",
    "params",
    "param_mb",
    "weight_mb_max",
    "input_mb",
    "act_mb_total",
    "act_mb_max",
    "pool_in_mb",
    "compute_intensity",
    "log_flops_per_param",
    "n_conv",
    "n_bn",
    "n_linear",
    "n_blocks",
    "n_stages",
    "tensor_peak_mb",
)
# int8-dynamic (torch ``quantize_dynamic``, ONNX Runtime dynamic QDQ) quantizes weights only and
# keeps every activation fp32 (torch even keeps the conv weights fp32): fp32's element size
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int8-dynamic": 4}
E_LEVELS = (4, 2, 1)  # distinct element sizes; per-architecture tables hold one row each
MB = 1e6
INT64_BYTES = 8  # BN's num_batches_tracked buffer, max-pool indices


def derive(
    flops: np.ndarray,
    params: np.ndarray,
    e: np.ndarray,
    weight_max: np.ndarray,
    input_bytes: np.ndarray,
    act_total_bytes: np.ndarray,
    act_max_bytes: np.ndarray,
    peak_bytes: np.ndarray,
) -> dict[str, np.ndarray]:
    """Derived float columns from exact integers (shared by both paths, so they agree)."""
    param_bytes = params * e
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = flops / (param_bytes + input_bytes + act_total_bytes)
        log_fpp = np.log(flops / params)
    return {
        "param_mb": param_bytes / MB,
        "weight_mb_max": weight_max * e / MB,
        "input_mb": input_bytes / MB,
        "act_mb_total": act_total_bytes / MB,
        "act_mb_max": act_max_bytes / MB,
        "compute_intensity": intensity,
        "log_flops_per_param": log_fpp,
        "tensor_peak_mb": peak_bytes / MB,
    }


def suffix_tables(sizes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per column of ``sizes`` (n_items, m): its distinct positive sizes ascending, and for
    each the sum of all sizes at least as large (one trailing 0): what
    :func:`sum_at_least` looks up."""
    v = np.sort(sizes, axis=0)
    suffix = np.cumsum(v[::-1], axis=0)[::-1]
    keep = v > 0
    keep[1:] &= v[1:] != v[:-1]  # the first of equal sizes carries the sum of all of them
    return [(v[keep[:, i], i], np.append(suffix[keep[:, i], i], 0)) for i in range(sizes.shape[1])]


TABLE_STRIDE = 2**40  # above any per-sample element count; < 2**23 tables fit in int64


def sum_at_least(
    tables: Sequence[tuple[np.ndarray, np.ndarray]], table_id: np.ndarray, min_size: np.ndarray
) -> np.ndarray:
    """Per row, the sum of the sizes in ``tables[table_id]`` that are >= ``min_size``
    (vectorized: one search over all tables laid end to end, offset by table)."""
    if not len(table_id):
        return np.zeros(0, dtype=np.int64)
    lengths = np.array([len(v) for v, _ in tables], dtype=np.int64)
    offsets = np.repeat(np.arange(len(tables), dtype=np.int64) * TABLE_STRIDE, lengths)
    keys = np.concatenate([v for v, _ in tables]) + offsets
    suffix = np.concatenate([sfx for _, sfx in tables])
    limit = np.minimum(min_size, TABLE_STRIDE - 1)
    pos = np.searchsorted(keys, table_id * TABLE_STRIDE + limit, side="left")
    return suffix[pos + table_id]  # each table's suffix has one extra entry
