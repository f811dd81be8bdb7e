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
read, written, matched to this machine; public as ``predictors.calibrations``), ``_costs``
(:func:`predict_costs`).
"""

from carb_nas.predictors._costs import predict_costs
from carb_nas.predictors._load import (
    check_predictor,
    is_platform_name,
    load_predictor,
    platform_table,
)
from carb_nas.predictors._predictor import PlatformPredictor, Predictor, Provenance

__all__ = [
    "Predictor",
    "PlatformPredictor",
    "Provenance",
    "load_predictor",
    "check_predictor",
    "is_platform_name",
    "platform_table",
    "predict_costs",
]
