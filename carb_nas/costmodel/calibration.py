"""Few-shot calibration to a new platform or machine: the one implementation of the maps
(scale, log-linear, features) that calibration on arrival, platform transfer and published-GPU
transfer share, the columns they may use, and how the rows to measure are chosen."""

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
from carb_nas.costmodel._nodes import node_ratio

__all__ = [
    "CALIBRATION_METHODS",
    "MAX_FACILITY_POINTS",
    "CalibratedModel",
    "ModuleRatio",
    "TransferPrior",
    "calibrate",
    "calibration_features",
    "facility_location_order",
    "fit_module_ratio",
    "fit_transfer_prior",
    "informative_rows",
    "log_map_correction",
    "log_maps",
    "nearest_distance",
    "node_ratio",
    "penalized_fit",
]
