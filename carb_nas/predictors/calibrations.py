"""This machine's calibration files: where they live, how they are matched to this machine,
read and written. ``carb_nas.calibrate`` makes them; :func:`carb_nas.load_predictor` applies
them."""

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
