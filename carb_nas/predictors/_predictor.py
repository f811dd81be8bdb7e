"""The one predictor contract and the predictor every platform name resolves to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from carb_nas.budgets import model_targets
from carb_nas.costmodel import ConfigModuleModel, ModuleCostModel
from carb_nas.errors import ModelError
from carb_nas.space import CONFIG_COLUMNS, FAMILIES

__all__ = ["Predictor", "Provenance", "PlatformPredictor"]


@dataclass(frozen=True)
class Provenance:
    """Where a predictor's answers come from.

    ``platform``: the name or path it was loaded from. ``model_kind``: ``"carb cascade"``
    (configs of the families its data holds), ``"kernel-level module model"`` (any network)
    or both joined by ``" + "``. ``data``: the dataset(s) it was trained on. ``origin``:
    shipped with carb_nas, trained on first use, loaded from the cache or from a directory.
    ``calibrated``: whether this machine's calibration is applied, described in
    ``calibration``; ``module_factors``: the factors applied to the module model's answers
    (per target; empty when uncalibrated).
    """

    platform: str
    model_kind: str
    data: str = ""
    origin: str = ""
    calibrated: bool = False
    calibration: str = ""
    module_factors: Mapping[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for a summary: ``cpu/torch/fp32 (carb cascade + ...; calibrated ...)``."""
        extra = [self.model_kind]
        if self.origin:
            extra.append(self.origin)
        if self.calibrated:
            extra.append(f"calibrated to this machine ({self.calibration})")
        else:
            extra.append("not calibrated to this machine")
        return f"{self.platform} ({'; '.join(extra)})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "model_kind": self.model_kind,
            "data": self.data,
            "origin": self.origin,
            "calibrated": self.calibrated,
            "calibration": self.calibration,
            "module_factors": dict(self.module_factors),
        }


@runtime_checkable
class Predictor(Protocol):
    """What every predictor of carb_nas answers to.

    ``predict(X, alpha)`` predicts configs: ``X`` is a frame of model inputs
    (``costmodel.model_inputs``: config columns + architecture features), the result has
    ``<target>`` columns and, with ``alpha``, ``<target>_lower`` / ``<target>_upper`` (the
    ``1 - alpha`` interval), in ``X``'s order. ``predict_spec(spec, alpha)`` predicts one
    :class:`carb_nas.models.ModelSpec` (a config, a factory or a user's module) and returns
    ``(one-row frame, unseen)``. ``targets``, ``platform`` and ``provenance`` say what it
    predicts, for which platform, and from which data and machine.
    """

    targets: tuple[str, ...]
    platform: str
    provenance: Provenance

    def predict(self, X: pd.DataFrame, alpha: float | None = None) -> pd.DataFrame: ...

    def predict_spec(self, spec: Any, alpha: float | None = 0.1) -> tuple[pd.DataFrame, bool]: ...


class PlatformPredictor:
    """A platform's predictor: the CARB cascade for configs of the families its data holds,
    the kernel-level module model for every other network, behind one :class:`Predictor`.

    ``config_model``: a fitted ``CostModel`` (or ``CalibratedModel``), or None where only a
    module model exists. ``module_model``: a fitted ``ModuleCostModel`` or None.
    ``module_factors``: per target, this machine's factor applied to the module model's
    answers (from its calibration; empty: none). A config is routed by its family, the same
    way whichever entry point asks (a frame of configs or a spec of a config): one answer
    per config. Attributes of the config model that other stages read (``targets_``,
    ``platform_``, ``feature_names_in_``, ...) are read through.
    """

    def __init__(
        self,
        config_model: Any,
        module_model: Any = None,
        *,
        provenance: Provenance,
        module_factors: Mapping[str, float] | None = None,
    ) -> None:
        if config_model is None and module_model is None:
            raise ModelError(
                "empty predictor: expected a config model, a module model or both, got "
                "neither. Load one with carb_nas.load_predictor(platform)."
            )
        if module_model is not None and not isinstance(module_model, ModuleCostModel):
            raise ModelError(
                f"unusable module model: expected a carb_nas.costmodel.ModuleCostModel, got "
                f"{type(module_model).__name__}."
            )
        self.config_model = config_model
        self.module_model = module_model
        self.module_factors = {str(t): float(f) for t, f in (module_factors or {}).items()}
        self.provenance = provenance
        self._configs = (
            ConfigModuleModel(module_model, self.module_factors, name=f"{provenance.platform}")
            if module_model is not None
            else None
        )

    # -- the contract ------------------------------------------------------------------------
    @property
    def platform(self) -> str:
        return self.provenance.platform

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(model_targets(self._base))

    @property
    def calibrated(self) -> bool:
        return self.provenance.calibrated

    def config_families(self) -> list[str] | None:
        """The families the config model was trained on (None: it does not say, or there is
        no config model)."""
        if self.config_model is None:
            return []
        schema = getattr(self.config_model, "schema_", None)
        cats = getattr(schema, "categorical", None)
        if isinstance(cats, Mapping) and "family" in cats:
            return [str(v) for v in cats["family"]]
        return None

    def _module_rows(self, X: pd.DataFrame) -> pd.Series | None:
        """Which rows of ``X`` go to the module model (None: all go to the config model)."""
        if self._configs is None or "family" not in X:
            return None
        known = self.config_families()
        if known is None:
            return None
        return ~X["family"].astype(str).isin(known)

    def predict(self, X: pd.DataFrame, alpha: float | None = None) -> pd.DataFrame:
        """Predictions of configs (see :class:`Predictor`), index 0..n-1 in ``X``'s order."""
        to_module = self._module_rows(X)
        if to_module is None or not to_module.any():
            return self._predict_configs(X, alpha)
        assert self._configs is not None  # _module_rows says None otherwise
        if to_module.all():
            return self._configs.predict(X, alpha=alpha)
        mask = to_module.to_numpy()
        cascade = self._predict_configs(X[~mask], alpha)
        module = self._configs.predict(X[mask], alpha=alpha)
        out = pd.concat([cascade, module], ignore_index=True)
        # back in X's row order, whatever X's index holds
        out.index = np.concatenate([np.flatnonzero(~mask), np.flatnonzero(mask)])
        return out.sort_index()

    def _predict_configs(self, X: pd.DataFrame, alpha: float | None) -> pd.DataFrame:
        model = self.config_model
        names = getattr(model, "feature_names_in_", None)
        if names is not None:
            X = X[list(names)]
        out = model.predict(X) if alpha is None else model.predict(X, alpha=alpha)
        return pd.DataFrame(out).reset_index(drop=True)

    def predict_spec(self, spec: Any, alpha: float | None = 0.1) -> tuple[pd.DataFrame, bool]:
        """One spec's predictions and whether its architecture is unseen (see
        :class:`Predictor`): a config of a family the config model knows goes there, any
        other network to the module model (times ``module_factors``)."""
        from carb_nas.scoring import predict_spec

        config = getattr(spec, "config", None)
        known = self.config_families()
        by_config = self.module_model is None or (
            config is not None and known is not None and str(config.family) in known
        )
        if by_config:
            return predict_spec(self.config_model, spec, alpha)
        pred, unseen = predict_spec(self.module_model, spec, alpha)
        pred = pred.copy()
        for target, factor in self.module_factors.items():
            for c in (target, f"{target}_lower", f"{target}_upper"):
                if c in pred:
                    pred[c] = pred[c].astype(float) * factor
        return pred, unseen

    # -- what other stages read of a cost model ---------------------------------------------
    @property
    def _base(self) -> Any:
        return self.config_model if self.config_model is not None else self._configs

    @property
    def feature_names_in_(self) -> list[str] | None:
        names = getattr(self._base, "feature_names_in_", None)
        if names is None:
            return None
        # the module model reads the config columns of rows routed to it
        return list(names) + [c for c in CONFIG_COLUMNS if c not in names]

    @property
    def schema_(self) -> Any:
        """The config model's schema, where a module model also knows every built-in
        family (so no family of them is 'unseen' to this predictor)."""
        schema = getattr(self.config_model, "schema_", None)
        if self._configs is None or schema is None:
            return schema
        cats = dict(getattr(schema, "categorical", {}) or {})
        cats["family"] = sorted({*map(str, cats.get("family", [])), *FAMILIES})
        return SimpleNamespace(categorical=cats)

    @property
    def default_origin_(self) -> str:
        return self.provenance.describe()

    def __getattr__(self, name: str) -> Any:
        # only called for attributes not found above: read through to the config model
        if name.startswith("__") or name in ("config_model", "module_model", "_configs"):
            raise AttributeError(name)
        base = self.__dict__.get("config_model")  # not `or`: an estimator may define __len__
        if base is None:
            base = self.__dict__.get("_configs")
        if base is None:
            raise AttributeError(name)
        return getattr(base, name)

    def __repr__(self) -> str:
        return f"PlatformPredictor({self.provenance.describe()})"
