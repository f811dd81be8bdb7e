"""The CARB cost model: predicted latency (ms), peak memory (MB) and energy (J) of CNN configs.

:class:`CostModel` is the cascade ensemble of the CARB paper ("CARB: A Characterization-Guided
Framework for CNN Inference Cost Prediction and Deployment Screening", arXiv:2608.10506; the
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

from carb_nas.costmodel._calibration import (
    CALIBRATION_METHODS,
    MAX_FACILITY_POINTS,
    CalibratedModel,
    ModuleRatio,
    TransferPrior,
    calibrate,
    calibration_features,
    facility_location_order,
    fit_module_ratio,
    fit_transfer_prior,
    informative_rows,
    log_map_correction,
    log_maps,
    nearest_distance,
    penalized_fit,
)
from carb_nas.costmodel._common import (
    MIN_TRAIN_ROWS,
    TELEMETRY_COLUMNS,
    frame_sha256,
    relative_nnls,
)
from carb_nas.costmodel._configs import ConfigModuleModel
from carb_nas.costmodel._defaults import (
    CACHE_ENV,
    DEFAULT_MODEL_PARAMS,
    DEFAULT_MODULE_DATASET,
    DEFAULT_MODULE_PARAMS,
    MODULE_CPU_KINDS,
    check_model,
    default_model_cache_dir,
    default_model_dir,
    is_module_model_dir,
    load_default_model,
    load_default_module_model,
    module_cpu_kind,
    ship_default_module_model,
    shipped_module_model_dir,
    zoo_dataset_paths,
    zoo_kernel_samples_path,
)
from carb_nas.costmodel._estimator import CostModel
from carb_nas.costmodel._evaluation import (
    evaluate,
    leave_one_batch_tier_out,
    regression_metrics,
    telemetry_ablation,
)
from carb_nas.costmodel._kernels import (
    MODES,
    KernelCostModel,
    ModuleCostModel,
    lofo_report,
    network_lofo_report,
)
from carb_nas.costmodel._nodes import NodeCostModel, load_default_node_model, node_ratio
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
    "KernelCostModel",
    "ModuleCostModel",
    "NodeCostModel",
    "CalibratedModel",
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
    # evaluation
    "evaluate",
    "regression_metrics",
    "leave_one_batch_tier_out",
    "telemetry_ablation",
    "lofo_report",
    "network_lofo_report",
    "MODES",
    # few-shot calibration to a new platform
    "calibrate",
    "CALIBRATION_METHODS",
    "log_maps",
    "log_map_correction",
    "penalized_fit",
    "calibration_features",
    "informative_rows",
    "facility_location_order",
    "nearest_distance",
    "MAX_FACILITY_POINTS",
    "TransferPrior",
    "fit_transfer_prior",
    "ModuleRatio",
    "fit_module_ratio",
    "node_ratio",
    "load_default_node_model",
    # the default models (carb_nas.costmodel._defaults, _configs)
    "CACHE_ENV",
    "DEFAULT_MODEL_PARAMS",
    "DEFAULT_MODULE_DATASET",
    "DEFAULT_MODULE_PARAMS",
    "MODULE_CPU_KINDS",
    "ConfigModuleModel",
    "check_model",
    "default_model_cache_dir",
    "default_model_dir",
    "is_module_model_dir",
    "load_default_model",
    "load_default_module_model",
    "module_cpu_kind",
    "ship_default_module_model",
    "shipped_module_model_dir",
    "zoo_dataset_paths",
    "zoo_kernel_samples_path",
]


#: names of earlier versions, and what to use instead
_RENAMED = {
    "load_model": "carb_nas.load_predictor(name_or_path).config_model",
    "load_config_model": "carb_nas.load_predictor(platform): it routes each family",
    "families_for_module_model": "carb_nas.load_predictor(platform): it routes each family",
    "load_predictor": "carb_nas.load_predictor(name_or_path)",
}


def __getattr__(name: str) -> Any:
    raise removed_name(__name__, name, _RENAMED)
