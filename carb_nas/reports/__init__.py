"""Characterization and cross-platform transfer reports on measured datasets.

Two questions users ask about their own measurements:

``characterize(datasets)``
    How does cost scale with each knob on this hardware? Per knob and family, the cost range
    (largest over smallest group mean, per target), width asymmetry between targets, per-sample
    efficiency by batch tier (ms and J per GFLOP), energy-latency divergence by SM utilization
    and batch tier (when energy and telemetry exist), precision/runtime ratios (FP16/FP32,
    INT8/FP32, ONNX Runtime/PyTorch) by family and batch tier, and how much FLOPs alone explain.

``transfer(a, b)``
    Does a source platform's cost tell anything about a target platform's? On configs both
    measured: a linear fit ``B = slope * A + intercept`` with R2, Spearman rank correlation and
    the overlap of the two top-100 (cheapest) lists; then few-shot calibration: adapt the
    source platform's cost model with N target measurements (``carb_nas.costmodel.calibrate``) and
    compare with a model trained on the same N target rows alone, over several random draws.

``published_transfer(a, b)``
    The same questions for two published platforms (``published/rtx4090``, ...: timm's
    benchmarks, see ``carb_nas.published``), on latency per image, joined on model names.

Datasets are read by ``carb_nas.datasets.load_dataset`` as analysis inputs (a shipped platform
name, a CSV/Parquet path or a DataFrame); only rows with ``status == "ok"`` count. Every
result is a plain dict (JSON-ready); the ``write_*_report`` functions add a Markdown summary
and PNG plots.
"""

from carb_nas.reports._characterize import (
    MIN_CHARACTERIZE_ROWS,
    characterize,
    characterize_loadgen,
    loadgen_markdown,
    write_loadgen_characterization,
)
from carb_nas.reports._load import (
    BATCH_TIERS,
    JOIN_COLUMNS,
    KNOBS,
    SM_TIERS,
    batch_tier,
    load_measurements,
    same_dataset,
)
from carb_nas.reports._markdown import characterization_markdown, transfer_markdown
from carb_nas.reports._transfer import (
    FEW_SHOT_SIZES,
    MIN_EVALUATION_ROWS,
    PRIOR_PAIRS,
    prior_pairs,
    published_transfer,
    published_transfer_markdown,
    transfer,
    write_published_transfer_report,
)
from carb_nas.reports._write import (
    write_characterization_report,
    write_transfer_report,
)

__all__ = [
    "characterize_loadgen",
    "loadgen_markdown",
    "write_loadgen_characterization",
    "BATCH_TIERS",
    "FEW_SHOT_SIZES",
    "JOIN_COLUMNS",
    "KNOBS",
    "MIN_CHARACTERIZE_ROWS",
    "MIN_EVALUATION_ROWS",
    "PRIOR_PAIRS",
    "SM_TIERS",
    "batch_tier",
    "characterization_markdown",
    "characterize",
    "load_measurements",
    "prior_pairs",
    "published_transfer",
    "published_transfer_markdown",
    "write_published_transfer_report",
    "same_dataset",
    "transfer",
    "transfer_markdown",
    "write_characterization_report",
    "write_transfer_report",
]
