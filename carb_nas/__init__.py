"""carb_nas: CARB cost prediction, budget-constrained search and hardware validation for CNNs.

Public surface (heavy parts import lazily so ``import carb_nas`` stays cheap):
``Config``, ``Space``, ``load_space``, ``build_model``, ``compute_features``,
``trace_features``, ``CostModel``, ``CarbNasError``, ``ModelSpec``, ``load_predictor`` (the
one loader: a platform name or model directory -> a ``Predictor``) and ``predict_costs``
(costs with intervals of any ``nn.Module``, factory or config).
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np
import pandas as pd

from carb_nas import space as _space
from carb_nas.errors import CarbNasError
from carb_nas.space import Config, Space, load_space

try:
    __version__ = version("carb-nas")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "Config",
    "Space",
    "load_space",
    "build_model",
    "compute_features",
    "trace_features",
    "CostModel",
    "CarbNasError",
    "ModelSpec",
    "predict_costs",
    "PredictedCosts",
    "load_predictor",
    "Predictor",
    "__version__",
]

_LAZY = {
    "build_model": "carb_nas.models",
    "compute_features": "carb_nas.features",
    "trace_features": "carb_nas.features",
    "CostModel": "carb_nas.costmodel",
    "ModelSpec": "carb_nas.models",
    "predict_costs": "carb_nas.predictors",
    "load_predictor": "carb_nas.predictors",
    "Predictor": "carb_nas.predictors",
    "PredictedCosts": "carb_nas.scoring",
}


def _within_max_gflops(frame: pd.DataFrame, limit: float) -> np.ndarray:
    from carb_nas.features import within_max_gflops  # lazy: features import torch

    return within_max_gflops(frame, limit)


# space sits below features, so it cannot measure its own [limits]; the package root (which
# runs before any carb_nas module) tells it how. A space's grid then leaves out the configs
# above `max_gflops_per_batch` whichever module loaded it.
_space.register_limit("max_gflops_per_batch", _within_max_gflops)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'carb_nas' has no attribute {name!r}")
