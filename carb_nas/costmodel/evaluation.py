"""Scoring a cost model the way the CARB paper does: held-out R2/MAE per target, baselines,
leave-one-batch-tier-out, the architecture-only ablation, leave-one-family-out."""

from carb_nas.costmodel._evaluation import (
    evaluate,
    leave_one_batch_tier_out,
    regression_metrics,
    telemetry_ablation,
)
from carb_nas.costmodel._kernels import MODES, lofo_report, network_lofo_report

__all__ = [
    "MODES",
    "evaluate",
    "leave_one_batch_tier_out",
    "lofo_report",
    "network_lofo_report",
    "regression_metrics",
    "telemetry_ablation",
]
