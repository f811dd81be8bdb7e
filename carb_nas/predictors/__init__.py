"""One predictor contract, one loader, one place where calibrations are applied.

Every predictor answers to :class:`Predictor`; every platform name or model directory
becomes one through :func:`load_predictor` -- the same object in every command and in
Python. A platform name gives a :class:`PlatformPredictor`: the CARB cascade for configs of
the families its shipped data holds and, where the platform has one, the kernel-level module
model for every other network. When this machine has a calibration of the platform
(``carb-nas calibrate PLATFORM``) it is applied by default (``calibrated=False`` opts out):
its map to the cascade, its factors to the module model, and ``provenance`` says so.

Layout: ``_predictor`` (the contract, :class:`Provenance`, :class:`PlatformPredictor`),
``_load`` (the loader and the platform table), ``_store`` (this machine's calibration files:
read, written, matched to this machine), ``_costs`` (:func:`predict_costs`).
"""

from carb_nas.predictors._costs import predict_costs
from carb_nas.predictors._load import (
    check_predictor,
    is_platform_name,
    load_predictor,
    platform_table,
)
from carb_nas.predictors._predictor import PlatformPredictor, Predictor, Provenance
from carb_nas.predictors._store import (
    CALIBRATION_FORMAT,
    REMEASURED,
    Calibration,
    calibration_dir,
    calibration_profiler,
    check_runnable,
    has_calibration,
    load_calibration,
    machine_fingerprint,
    machine_key,
    module_factors_of,
    previous_calibration,
    save_calibration,
    split_platform,
)

__all__ = [
    "Predictor",
    "PlatformPredictor",
    "Provenance",
    "load_predictor",
    "check_predictor",
    "is_platform_name",
    "platform_table",
    "predict_costs",
    "CALIBRATION_FORMAT",
    "REMEASURED",
    "Calibration",
    "calibration_dir",
    "calibration_profiler",
    "check_runnable",
    "has_calibration",
    "load_calibration",
    "machine_fingerprint",
    "machine_key",
    "module_factors_of",
    "previous_calibration",
    "save_calibration",
    "split_platform",
]
