"""The one loader: a platform name or a model directory -> one predictor, everywhere."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from carb_nas.costmodel import (
    CalibratedModel,
    ConfigModuleModel,
    CostModel,
    ModuleCostModel,
    load_default_model,
)
from carb_nas.costmodel.registry import (
    check_model,
    is_module_model_dir,
    load_default_module_model,
    zoo_dataset_paths,
)
from carb_nas.errors import MissingFileError, ModelError
from carb_nas.predictors._predictor import PlatformPredictor, Provenance
from carb_nas.predictors._store import (
    calibration_stamp,
    has_calibration,
    load_calibration,
    module_factors_of,
)

__all__ = ["load_predictor", "check_predictor", "is_platform_name", "platform_table"]

_CACHE: dict[tuple[str, float, bool, float, str | None], PlatformPredictor] = {}
_CACHE_MAX = 16


def is_platform_name(text: Any) -> bool:
    """Whether ``text`` names a shipped platform (``device/runtime/precision`` or a qualified
    dataset ``device/runtime/precision/dataset``) rather than a path that exists."""
    if not isinstance(text, (str, Path)):
        return False
    s = str(text)
    return s.count("/") in (2, 3) and not Path(s).exists() and not s.startswith("published/")


def check_predictor(name_or_path: Any, role: str = "model") -> None:
    """What :func:`load_predictor` refuses, refused without loading or training anything:
    commands that load several predictors check them all first."""
    if isinstance(name_or_path, (str, Path)):
        check_model(name_or_path, role)


def _wrap(model: Any, origin: str) -> PlatformPredictor:
    """A fitted model object as a predictor (nothing is loaded)."""
    from carb_nas.budgets import platform_name

    if isinstance(model, ModuleCostModel):
        kind = "kernel-level module model"
        return PlatformPredictor(
            None, model, provenance=Provenance(platform_name(model), kind, origin=origin)
        )
    if isinstance(model, ConfigModuleModel):
        return PlatformPredictor(
            None,
            model.module_model,
            module_factors=model.factors,
            provenance=Provenance(
                platform_name(model),
                "kernel-level module model",
                origin=origin,
                calibrated=bool(model.factors),
                calibration="machine factors" if model.factors else "",
                module_factors=model.factors,
            ),
        )
    if not callable(getattr(model, "predict", None)) or getattr(model, "targets_", None) is None:
        raise ModelError(
            f"unusable cost model: expected a fitted carb_nas.costmodel.CostModel (with "
            f"predict and targets_) or a platform name, got {type(model).__name__}. Fit it "
            "first or load one with carb_nas.load_predictor('cpu/torch/fp32')."
        )
    calibrated = isinstance(model, CalibratedModel)
    return PlatformPredictor(
        model,
        None,
        provenance=Provenance(
            platform_name(model),
            "carb cascade",
            origin=origin or str(getattr(model, "default_origin_", "") or ""),
            calibrated=calibrated,
            calibration="a calibration map" if calibrated else "",
        ),
    )


def load_predictor(
    name_or_path: Any,
    *,
    calibrated: bool = True,
    role: str = "model",
    verbose: bool = True,
    cpu_kind: str | None = None,
) -> PlatformPredictor:
    """The predictor of a platform name, a saved model directory or a fitted model.

    A shipped platform name (``cpu/torch/fp32``; ``carb-nas dataset list``) gives its CARB
    cascade for configs of its dataset's families and, where the platform has one, the
    kernel-level module model for every other network. With ``calibrated`` (the default),
    this machine's calibration of the platform (``carb-nas calibrate PLATFORM``) is applied
    when it exists: the calibration map to the cascade, its factors to the module model;
    ``predictor.provenance`` says which. A directory written by ``carb-nas model train``
    (``CostModel.save``) or a ``ModuleCostModel`` directory is loaded as it is. A
    ``PlatformPredictor`` is returned unchanged; another fitted model is wrapped.
    Loaded predictors are kept for the process (a directory is loaded again when it
    changes). ``role`` names the option in errors (e.g. ``"--source"``). ``cpu_kind``: whose
    kernel-level module model (a machine kind of ``carb-nas dataset list``; default this
    machine's).
    """
    if isinstance(name_or_path, PlatformPredictor):
        return name_or_path
    if not isinstance(name_or_path, (str, Path)):
        return _wrap(name_or_path, "a model object")
    p = Path(name_or_path)
    stamp = p.stat().st_mtime if p.exists() else 0.0
    # a calibration made (or replaced) since is seen by the next load
    cal_stamp = calibration_stamp(str(name_or_path)) if calibrated and not p.exists() else 0.0
    key = (str(name_or_path), stamp, bool(calibrated), cal_stamp, cpu_kind)
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = _load(name_or_path, calibrated, role, verbose, cpu_kind)
    return _CACHE[key]


def _load(
    spec: str | Path, calibrated: bool, role: str, verbose: bool, cpu_kind: str | None
) -> PlatformPredictor:
    p = Path(spec)
    if p.is_dir():
        if is_module_model_dir(p):
            return _wrap(ModuleCostModel.load(p), f"loaded from {p}")
        return _wrap(CostModel.load(p), f"loaded from {p}")
    if str(spec).startswith("published/"):
        raise ModelError(
            f"unusable {role}: expected a platform this machine's predictors serve, got the "
            f"published benchmark {str(spec)!r} (others' measurements of timm's models). Use "
            "`carb-nas published evaluate|screen`, or a platform of `carb-nas dataset list`."
        )
    if not is_platform_name(spec):
        raise MissingFileError(
            f"{role} not found: expected a directory written by `carb-nas model train` (or "
            f"CostModel.save) or a shipped platform name such as cpu/torch/fp32, got "
            f"{str(spec)!r}. Check the path, or list the platforms with `carb-nas dataset list`."
        )
    name = str(spec)
    check_model(name, role)
    config_model = load_default_model(name, verbose=verbose)
    module_model = None
    zoo = zoo_dataset_paths(name, cpu_kind) if name.count("/") == 2 else None
    if zoo is not None:
        module_model = load_default_module_model(name, verbose=verbose, cpu_kind=cpu_kind)
    kind = "carb cascade" + (" + kernel-level module model" if module_model is not None else "")
    data = f"shipped dataset {name}" + (f" + {zoo[0].stem}" if zoo is not None else "")
    origin = str(getattr(config_model, "default_origin_", "") or "")
    if module_model is not None:  # two models, each shipped, trained here or loaded
        module_origin = getattr(module_model, "default_origin_", "") or ""
        origin = f"cascade {origin}; module model {module_origin}"
    cal = None
    if calibrated and has_calibration(name):
        try:
            cal = load_calibration(name, source_model=config_model)
        except ModelError as e:  # another default model or a damaged file: never applied
            warnings.warn(f"{e} Predicting uncalibrated.", UserWarning, stacklevel=3)
    if cal is None:
        return PlatformPredictor(
            config_model, module_model, provenance=Provenance(name, kind, data, origin)
        )
    factors = dict(cal.module_factors)
    if module_model is not None and not factors:  # a format-1 calibration stored none
        factors = module_factors_of(cal.rows, module_model)
    what = f"{cal.n_rows} configs measured here, {cal.created or 'undated'}"
    if factors:
        what += "; modules " + ", ".join(f"{t} x{f:.2f}" for t, f in factors.items())
    return PlatformPredictor(
        cal.model,
        module_model,
        module_factors=factors,
        provenance=Provenance(name, kind, data, origin, True, what, factors),
    )


def platform_table() -> list[dict[str, str]]:
    """One row per shipped platform name: the data its predictor is trained on, the model
    kind and the intervals it gives (what ``docs/concepts.md`` tabulates)."""
    from carb_nas.datasets import shipped_names

    rows = []
    for name in shipped_names():
        if name.startswith("published/"):
            continue
        module = name.count("/") == 2 and zoo_dataset_paths(name) is not None
        rows.append(
            {
                "platform": name,
                "data": f"shipped dataset {name}"
                + (" + the multi-family zoo of this CPU kind" if module else ""),
                "model": "carb cascade" + (" + kernel-level module model" if module else ""),
                "intervals": "split-conformal per batch regime"
                + ("; held-out-family intervals for other networks" if module else ""),
            }
        )
    return rows
