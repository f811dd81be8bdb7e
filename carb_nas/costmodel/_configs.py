"""The kernel-level module model asked what a search asks a :class:`CostModel`.

A search, a screen and a validation score *configs* (frames of ``model_inputs``) through
``model.predict(X, alpha=...)``. A :class:`ModuleCostModel` predicts *networks* (a traced
module, a :class:`~carb_nas.models.ModelSpec`). :class:`ConfigModuleModel` puts the second
behind the first's interface: every row of ``X`` is a built-in family's config, built on the
meta device and predicted by the per-operator models and their network correction, then
multiplied by this machine's factors (a calibration's ``module_factors``) when given.

Why: a config of a family the platform's config model never saw is predicted more closely by
summing its operators than by the config model's features alone (docs/accuracy.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.costmodel._common import check_config_columns
from carb_nas.errors import ModelError
from carb_nas.space import CONFIG_COLUMNS, frame_to_configs

__all__ = ["ConfigModuleModel"]


class ConfigModuleModel:
    """``module_model`` (a fitted ModuleCostModel) predicting config frames.

    ``factors``: per target, this machine's measured / predicted ratio (default none: the
    machine the model was trained on); predictions and their intervals are multiplied by it.
    ``name``: what summaries call it (``default_name_``).
    """

    def __init__(
        self,
        module_model: Any,
        factors: Mapping[str, float] | None = None,
        name: str | None = None,
    ) -> None:
        targets = getattr(module_model, "targets_", None)
        if not callable(getattr(module_model, "predict_spec", None)) or not targets:
            raise ModelError(
                f"unusable module model: expected a fitted carb_nas.costmodel.ModuleCostModel, "
                f"got {type(module_model).__name__}. Load one with "
                "carb_nas.load_predictor(platform).module_model."
            )
        bad = {t: f for t, f in (factors or {}).items() if not (np.isfinite(f) and f > 0)}
        if bad:
            raise ModelError(
                f"invalid machine factors: expected positive finite ratios, got {bad}. "
                "Calibrate again (carb-nas calibrate PLATFORM)."
            )
        self.module_model = module_model
        self.factors = {t: float(f) for t, f in (factors or {}).items() if t in targets}
        self.targets_ = list(targets)
        self.feature_names_in_ = list(CONFIG_COLUMNS)  # what predict reads of model_inputs
        self.platform_ = dict(getattr(module_model, "platform_", None) or {})
        self.default_origin_ = getattr(module_model, "default_origin_", None)
        self.default_name_ = name

    def scaled(self, factors: Mapping[str, float]) -> ConfigModuleModel:
        """The same module model times ``factors`` (e.g. a calibration's ``module_factors``),
        nothing loaded again."""
        return ConfigModuleModel(self.module_model, factors, self.default_name_)

    def predict(self, X: pd.DataFrame, alpha: float | None = None) -> pd.DataFrame:
        """Per row of ``X`` (config columns, e.g. ``model_inputs(frame)``): ``<target>`` and,
        with ``alpha``, ``<target>_lower`` / ``_upper``, in ``X``'s order."""
        from carb_nas.models import ModelSpec, meta_model

        check_config_columns(X, "module model")
        columns = [
            c for t in self.targets_ for c in ((t, f"{t}_lower", f"{t}_upper") if alpha else (t,))
        ]
        rows = []
        for config in frame_to_configs(X[list(CONFIG_COLUMNS)]):
            spec = ModelSpec.from_config(config)
            rows.append(
                self.module_model.predict_module(  # one build for all its batch sizes
                    meta_model(config),
                    spec.input_shape,
                    spec.precision,
                    alpha=alpha,
                    family=config.family,
                )
            )
        out = pd.DataFrame(rows, columns=columns).reset_index(drop=True).astype(float)
        for target, factor in self.factors.items():
            for c in (target, f"{target}_lower", f"{target}_upper"):
                if c in out:
                    out[c] *= factor
        return out
