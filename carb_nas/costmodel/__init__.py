"""The CARB cost model: predicted latency (ms), peak memory (MB) and energy (J) of CNN configs.

:class:`CostModel` is the cascade ensemble of the CARB paper ("CARB: A Characterization-Guided
Framework for CNN Inference Cost Prediction and Deployment Screening"; the
``carb`` preset reproduces it): per target, blended XGBoost / LightGBM / ExtraTrees specialists
in log space, fitted in the order peak memory -> energy -> latency with each later target
reading the earlier ones' out-of-fold predictions, a low-batch corrector, and split-conformal
intervals by batch regime. ``target_offsets`` (off by default, not part of CARB) makes the
learners fit a bounded log-ratio to a physical sum of resource columns, so predictions
extrapolate beyond the largest training values (see docs/accuracy.md).

Beside it: :class:`KernelCostModel` / :class:`ModuleCostModel` (per-operator costs summed for
any ``nn.Module``, corrected by a network cascade), :class:`NodeCostModel` (one CPU kind's
kernel time per ONNX Runtime / PyTorch node), few-shot calibration to a new platform
(:func:`calibrate` -> :class:`CalibratedModel`), evaluation (:func:`evaluate`) and the
default-model registry (``carb_nas.load_predictor`` builds predictors from it). Persistence
never uses pickle: XGBoost UBJSON, LightGBM text, skops with an explicit trusted-type list, and
a checksummed JSON manifest.
"""

from typing import Any

from carb_nas.costmodel._calibration import CalibratedModel, calibrate
from carb_nas.costmodel._common import (
    MIN_TRAIN_ROWS,
    TELEMETRY_COLUMNS,
    frame_sha256,
    relative_nnls,
)
from carb_nas.costmodel._configs import ConfigModuleModel
from carb_nas.costmodel._defaults import load_default_model
from carb_nas.costmodel._estimator import CostModel
from carb_nas.costmodel._evaluation import evaluate
from carb_nas.costmodel._kernels import KernelCostModel, ModuleCostModel
from carb_nas.costmodel._nodes import NodeCostModel
from carb_nas.costmodel._persist import check_output_dir
from carb_nas.costmodel._prepare import (
    PHYSICAL_OFFSETS,
    model_inputs,
    physical_offsets,
    prepare_table,
)
from carb_nas.errors import removed_name

__all__ = [
    # the models
    "CostModel",
    "CalibratedModel",
    "KernelCostModel",
    "ModuleCostModel",
    "NodeCostModel",
    "ConfigModuleModel",
    # their inputs
    "model_inputs",
    "prepare_table",
    "physical_offsets",
    "PHYSICAL_OFFSETS",
    "TELEMETRY_COLUMNS",
    "MIN_TRAIN_ROWS",
    "frame_sha256",
    "relative_nnls",
    "check_output_dir",
    # fitting to a new machine, scoring, the default model of a platform
    "calibrate",
    "evaluate",
    "load_default_model",
]

#: names of earlier versions, and what to use instead
_RENAMED = {
    "CACHE_ENV": "carb_nas.costmodel.registry.CACHE_ENV",
    "CALIBRATION_METHODS": "carb_nas.costmodel.calibration.CALIBRATION_METHODS",
    "DEFAULT_MODEL_PARAMS": "carb_nas.costmodel.registry.DEFAULT_MODEL_PARAMS",
    "DEFAULT_MODULE_DATASET": "carb_nas.costmodel.registry.DEFAULT_MODULE_DATASET",
    "DEFAULT_MODULE_PARAMS": "carb_nas.costmodel.registry.DEFAULT_MODULE_PARAMS",
    "MAX_FACILITY_POINTS": "carb_nas.costmodel.calibration.MAX_FACILITY_POINTS",
    "MODES": "carb_nas.costmodel.evaluation.MODES",
    "MODULE_CPU_KINDS": "carb_nas.costmodel.registry.MODULE_CPU_KINDS",
    "ModuleRatio": "carb_nas.costmodel.calibration.ModuleRatio",
    "TransferPrior": "carb_nas.costmodel.calibration.TransferPrior",
    "calibration_features": "carb_nas.costmodel.calibration.calibration_features",
    "check_model": "carb_nas.costmodel.registry.check_model",
    "default_model_cache_dir": "carb_nas.costmodel.registry.default_model_cache_dir",
    "default_model_dir": "carb_nas.costmodel.registry.default_model_dir",
    "facility_location_order": "carb_nas.costmodel.calibration.facility_location_order",
    "fit_module_ratio": "carb_nas.costmodel.calibration.fit_module_ratio",
    "fit_transfer_prior": "carb_nas.costmodel.calibration.fit_transfer_prior",
    "informative_rows": "carb_nas.costmodel.calibration.informative_rows",
    "is_module_model_dir": "carb_nas.costmodel.registry.is_module_model_dir",
    "leave_one_batch_tier_out": "carb_nas.costmodel.evaluation.leave_one_batch_tier_out",
    "load_default_module_model": "carb_nas.costmodel.registry.load_default_module_model",
    "load_default_node_model": "carb_nas.costmodel.registry.load_default_node_model",
    "lofo_report": "carb_nas.costmodel.evaluation.lofo_report",
    "log_map_correction": "carb_nas.costmodel.calibration.log_map_correction",
    "log_maps": "carb_nas.costmodel.calibration.log_maps",
    "module_cpu_kind": "carb_nas.costmodel.registry.module_cpu_kind",
    "nearest_distance": "carb_nas.costmodel.calibration.nearest_distance",
    "network_lofo_report": "carb_nas.costmodel.evaluation.network_lofo_report",
    "node_ratio": "carb_nas.costmodel.calibration.node_ratio",
    "penalized_fit": "carb_nas.costmodel.calibration.penalized_fit",
    "regression_metrics": "carb_nas.costmodel.evaluation.regression_metrics",
    "ship_default_module_model": "carb_nas.costmodel.registry.ship_default_module_model",
    "shipped_module_model_dir": "carb_nas.costmodel.registry.shipped_module_model_dir",
    "telemetry_ablation": "carb_nas.costmodel.evaluation.telemetry_ablation",
    "zoo_dataset_paths": "carb_nas.costmodel.registry.zoo_dataset_paths",
    "zoo_kernel_samples_path": "carb_nas.costmodel.registry.zoo_kernel_samples_path",
    "load_model": "carb_nas.load_predictor(name_or_path).config_model",
    "load_config_model": "carb_nas.load_predictor(platform): it routes each family",
    "families_for_module_model": "carb_nas.load_predictor(platform): it routes each family",
    "load_predictor": "carb_nas.load_predictor(name_or_path)",
}


def __getattr__(name: str) -> Any:
    raise removed_name(__name__, name, _RENAMED)
