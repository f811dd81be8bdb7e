"""The default-model registry: a model per shipped platform, trained on first use and cached.

``carb_nas.load_predictor`` builds every platform's predictor from these; use it rather than
the registry unless you need a raw, uncalibrated model of a particular recipe.
"""

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
from carb_nas.costmodel._nodes import load_default_node_model

__all__ = [
    "CACHE_ENV",
    "DEFAULT_MODEL_PARAMS",
    "DEFAULT_MODULE_DATASET",
    "DEFAULT_MODULE_PARAMS",
    "MODULE_CPU_KINDS",
    "check_model",
    "default_model_cache_dir",
    "default_model_dir",
    "is_module_model_dir",
    "load_default_model",
    "load_default_module_model",
    "load_default_node_model",
    "module_cpu_kind",
    "ship_default_module_model",
    "shipped_module_model_dir",
    "zoo_dataset_paths",
    "zoo_kernel_samples_path",
]
