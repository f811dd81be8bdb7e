"""``predict_costs``: any network's predicted costs on a platform, from one predictor."""

from __future__ import annotations

import warnings
from typing import Any

from carb_nas.errors import ConfigError
from carb_nas.predictors._load import load_predictor
from carb_nas.scoring import (
    PredictedCosts,
    deployed_level,
    spec_inputs,
    trained_levels,
)

__all__ = ["predict_costs"]

_UNSEEN_NOTE = (
    "expect poor accuracy on it; a platform with a kernel-level module model "
    "(cpu/torch/fp32) predicts any network"
)


def predict_costs(
    model: Any,
    input_shape: Any = None,
    platform: Any = "cpu/torch/fp32",
    *,
    precision: str | None = None,
    alpha: float = 0.1,
    kwargs: Any = None,
    calibrated: bool = True,
) -> PredictedCosts:
    """Predicted costs, with ``1 - alpha`` intervals, of any model on ``platform``.

    ``model``: an ``nn.Module`` (with ``input_shape``, batch first, e.g. ``(1, 3, 224,
    224)``), a :class:`carb_nas.Config` of a built-in family, a
    :class:`carb_nas.models.ModelSpec`, or a factory name ``"package.module:function"``
    (with ``kwargs`` and ``input_shape``). ``platform``: a shipped platform name
    (``cpu/torch/fp32``), a saved model directory or a loaded predictor
    (:func:`carb_nas.load_predictor`). ``precision``: default the platform's. The module is
    traced on the meta device (nothing is allocated or run); its weights are untouched.

    With ``calibrated`` (the default) this machine's calibration of the platform is applied
    when it exists (``carb-nas calibrate PLATFORM``); ``PredictedCosts.model`` says whether
    it was. A config of a family the platform's data holds is predicted by its CARB cascade,
    any other network by its kernel-level module model; ops the module model never measured
    are listed in ``unmodelled_ops`` and a warning; a predictor without a module model given
    another architecture says ``unseen=True`` and warns.
    """
    from carb_nas.budgets import model_targets
    from carb_nas.features import FEATURE_COLUMNS
    from carb_nas.models import ModelSpec
    from carb_nas.space import Config

    predictor = load_predictor(platform, calibrated=calibrated, role="platform")
    if precision is None:
        precision = deployed_level(predictor, "precision", "fp32")
    if isinstance(model, ModelSpec):
        spec = model
    elif isinstance(model, Config):
        spec = ModelSpec.from_config(model)
    else:
        if input_shape is None:
            what = f"factory {model!r}" if isinstance(model, str) else type(model).__name__
            raise ConfigError(
                f"missing input shape: expected input_shape for the {what}, got none. Pass "
                "e.g. input_shape=(1, 3, 224, 224)."
            )
        spec = (
            ModelSpec.from_factory(model, input_shape, kwargs, precision)
            if isinstance(model, str)
            else ModelSpec.from_module(model, input_shape, precision)
        )
    pred, unseen = predictor.predict_spec(spec, alpha)
    unmodelled: tuple[str, ...] = ()
    if "unmodelled_ops" in pred:
        unmodelled = tuple(pred["unmodelled_ops"].iloc[0]) if unseen else ()
        if unmodelled:
            warnings.warn(
                f"the module cost model ({predictor.platform}) never measured ops "
                f"{list(unmodelled)} of {spec.name}: their estimate (from the measured ops of "
                "their kind, or the roofline for a kind never measured) is added and "
                "widens the latency interval by as much.",
                UserWarning,
                stacklevel=2,
            )
    elif unseen:
        what = spec.config.family if spec.config is not None else "architecture"
        levels = trained_levels(predictor.config_model, "family") or []
        # a multi-family model (the GPU platforms have no kernel-level model) generalizes
        # as to a held-out family; a ResNet-only one hardly at all
        note = (
            f"it predicts from the traced features alone, as for a family held out in "
            f"`carb-nas model evaluate --leave-one-family-out` ({len(levels)} families seen)"
            if len(levels) > 2
            else _UNSEEN_NOTE
        )
        warnings.warn(
            f"the cost model ({predictor.platform}) never saw this {what} ({spec.name}): {note}.",
            UserWarning,
            stacklevel=2,
        )
    row = pred.iloc[0]
    values = {}
    for target in model_targets(predictor):
        v = float(row[target])
        lo, hi = row.get(f"{target}_lower", v), row.get(f"{target}_upper", v)
        values[target] = (v, float(lo), float(hi))
    X = spec_inputs(spec).iloc[0]
    features = {c: float(X[c]) for c in FEATURE_COLUMNS}
    return PredictedCosts(
        spec.key,
        spec.name,
        predictor.platform,
        alpha,
        values,
        features,
        unseen,
        unmodelled,
        predictor.provenance.describe(),
    )
