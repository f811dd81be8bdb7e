"""Score configs with cost models: candidate frames, platform alignment, predictions.

Shared by screen, search, validate and the Optuna plugin. A cost model is per platform
(device/runtime/precision), so a config is scored *as deployed there*
(:func:`align_to_platform`); :func:`score_configs` featurizes the aligned configs once and keeps
the model inputs (``X``: config columns + architecture features) so that a later step on the
same platform (the quality score, a re-score, validation) reuses them instead of featurizing
again.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.budgets import model_targets, platform_name
from carb_nas.datasets import read_configs
from carb_nas.errors import ConfigError, ModelError
from carb_nas.space import (
    CONFIG_COLUMNS,
    NUMERIC_KNOBS,
    Space,
    load_space,
    normalize_config_frame,
)

__all__ = [
    "Scored",
    "resolve_model",
    "candidate_frame",
    "align_to_platform",
    "trained_levels",
    "predict_frame",
    "score_configs",
    "same_configs",
    "model_targets",
    "platform_name",
]


def resolve_model(model: Any, role: str = "cost model") -> Any:
    """A fitted cost model from a CostModel, a saved model directory or a shipped platform name
    (``cpu/torch/fp32``); MissingFileError / ModelError naming ``role`` otherwise."""
    if isinstance(model, (str, Path)):
        from carb_nas.costmodel import load_model

        return load_model(model, role)
    if not callable(getattr(model, "predict", None)) or getattr(model, "targets_", None) is None:
        raise ModelError(
            f"unusable {role}: expected a fitted carb_nas.costmodel.CostModel (with predict "
            f"and targets_), got {type(model).__name__}. Fit it first or load one with "
            "CostModel.load(dir) / load_default_model(platform)."
        )
    return model


def candidate_frame(space_or_frame: Space | pd.DataFrame | str | Path) -> pd.DataFrame:
    """The candidates as a frame of CONFIG_COLUMNS (a Space, a space file, or a configs table),
    exact duplicates removed, index 0..n-1."""
    if isinstance(space_or_frame, (str, Path)):
        p = Path(space_or_frame)
        frame = read_configs(p) if p.suffix in (".csv", ".parquet") else load_space(p).grid()
    elif isinstance(space_or_frame, Space):
        frame = space_or_frame.grid()
    elif isinstance(space_or_frame, pd.DataFrame):
        frame = normalize_config_frame(space_or_frame, source="candidate frame")
    else:
        raise ConfigError(
            "unsupported candidates: expected a Space, a space TOML path, a configs table path or"
            f" a DataFrame of configs, got {type(space_or_frame).__name__}. Pass one of those."
        )
    frame = frame[list(CONFIG_COLUMNS)]
    if frame.duplicated().any():
        frame = frame.drop_duplicates()
    return frame.reset_index(drop=True)


def trained_levels(model: Any, knob: str) -> list[str] | None:
    """Labels of a categorical config column the model was trained on (None: unknown)."""
    schema = getattr(model, "schema_", None)
    cats = getattr(schema, "categorical", None)
    if isinstance(cats, Mapping) and knob in cats:
        return [str(v) for v in cats[knob]]
    plat = getattr(model, "platform_", None)
    if knob in ("precision", "runtime") and isinstance(plat, Mapping) and plat.get(knob):
        return [str(plat[knob])]
    return None


def align_to_platform(model: Any, frame: pd.DataFrame, role: str = "model") -> pd.DataFrame:
    """``frame`` as ``model``'s platform runs it, checked against what the model was trained on.

    When the model knows a single runtime (or precision) and every candidate holds one other
    value, the column is set to the model's value (a PyTorch candidate list scored by an ONNX
    Runtime model is scored as ONNX Runtime configs). Candidates that vary a knob over values
    the model never saw, or a family it never saw, are another space: ModelError naming the
    unknown values, how many candidates hold them, and the fix.
    """
    out = frame
    for knob in ("family", "precision", "runtime"):
        levels = trained_levels(model, knob)
        if levels is None or knob not in frame:
            continue
        column = frame[knob].astype(str)
        values = sorted(set(column.unique()))
        unseen = [v for v in values if v not in levels]
        if not unseen:
            continue
        if knob != "family" and len(levels) == 1 and len(values) == 1:
            if out is frame:
                out = frame.copy()
            out[knob] = levels[0]
            continue
        n_unseen = int(column.isin(unseen).sum())
        cpu_hint = " (e.g. the bundled 'cpu' space)" if knob == "precision" else ""
        raise ModelError(
            f"the {role} ({platform_name(model)}) was trained on another space: it knows "
            f"{knob} {levels}, got {n_unseen:,} of {len(frame):,} candidates with {knob} "
            f"{unseen}. Restrict the space to {knob} = {levels}{cpu_hint} or use a model "
            f"trained on data that has {unseen}."
        )
    return out


@contextmanager
def _threads_for(model: Any, n_rows: int, small: int = 20_000):
    """One thread for small batches: thread start-up costs more than it saves there (a
    64-row batch predicts ~4x faster on one thread than on two); the model's own setting
    for large ones. The model's ``n_jobs`` is restored afterwards."""
    n_jobs = getattr(model, "n_jobs", None)
    if n_rows >= small or n_jobs in (None, 1) or not hasattr(model, "set_params"):
        yield
        return
    model.set_params(n_jobs=1)
    try:
        yield
    finally:
        model.set_params(n_jobs=n_jobs)


def predict_frame(
    model: Any,
    frame: pd.DataFrame,
    alpha: float | None = None,
    X: pd.DataFrame | None = None,
    chunk_rows: int = 200_000,
) -> pd.DataFrame:
    """``model.predict`` on the model inputs of ``frame`` (configs), index aligned with it.

    ``X``: the model inputs of ``frame`` when already computed (``costmodel.model_inputs``).
    Predicts in chunks to bound memory, and once per distinct model-input row: rows that agree
    on every column the model reads get the same prediction by construction, so computing it
    once and reusing it is exact.
    """
    from carb_nas.costmodel import model_inputs

    if X is None:
        X = model_inputs(frame)
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        missing = [c for c in names if c not in X.columns]
        if missing:
            raise ModelError(
                f"model/schema mismatch: the model reads columns {missing[:5]} that "
                f"carb_nas.costmodel.model_inputs does not produce (got {list(X.columns)[:8]}...)"
                ". The model was trained with another feature schema; retrain it with this "
                "carb_nas version."
            )
        X = X[list(names)]
    codes = pd.util.hash_pandas_object(X, index=False).to_numpy()
    uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    Xu = X.iloc[first] if len(uniq) < len(X) else X
    parts = []
    with _threads_for(model, len(Xu)):
        for start in range(0, len(Xu), chunk_rows):
            part = Xu.iloc[start : start + chunk_rows]
            out = model.predict(part) if alpha is None else model.predict(part, alpha=alpha)
            parts.append(pd.DataFrame(out).reset_index(drop=True))
    pred = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if len(uniq) < len(X):
        pred = pred.iloc[inverse.ravel()].reset_index(drop=True)
    pred.index = frame.index
    return pred


@dataclass
class Scored:
    """Configs scored by one model: ``configs`` as that platform runs them (aligned),
    ``X`` their model inputs (config columns + architecture features, computed once) and
    ``pred`` the predictions (``<target>``, with an alpha also ``_lower``/``_upper``); all
    three share the index of the frame that was scored."""

    configs: pd.DataFrame
    X: pd.DataFrame
    pred: pd.DataFrame
    platform: str

    def take(self, labels: Any) -> Scored:
        """The rows with index ``labels``, in that order."""
        return Scored(
            self.configs.loc[labels], self.X.loc[labels], self.pred.loc[labels], self.platform
        )

    @property
    def features(self) -> pd.DataFrame:
        """The architecture features (``X`` without the config columns)."""
        return self.X.drop(columns=[c for c in CONFIG_COLUMNS if c in self.X.columns])


def same_configs(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """True when ``a`` and ``b`` hold the same configs, row for row (CONFIG_COLUMNS)."""
    cols = list(CONFIG_COLUMNS)
    if len(a) != len(b) or not set(cols) <= set(a.columns) or not set(cols) <= set(b.columns):
        return False
    left = a[cols].reset_index(drop=True).astype(str)
    right = b[cols].reset_index(drop=True).astype(str)
    num = list(NUMERIC_KNOBS)
    same_num = np.allclose(
        a[num].to_numpy(dtype=float), b[num].to_numpy(dtype=float), rtol=0, atol=0
    )
    return bool(same_num and (left.drop(columns=num) == right.drop(columns=num)).all().all())


def score_configs(
    model: Any,
    frame: pd.DataFrame,
    alpha: float | None = None,
    role: str = "model",
    reuse: Scored | None = None,
) -> Scored:
    """Align ``frame`` (configs) to ``model``'s platform, featurize once, predict.

    ``reuse``: an earlier :class:`Scored` of the same rows; its model inputs are reused when
    the aligned configs are the same (same runtime and precision), so a re-score on the same
    platform featurizes nothing. Another runtime has other runtime-specific feature columns
    (e.g. the PyTorch-CPU ``mmap_mb``), so it is featurized anew, once.
    """
    from carb_nas.costmodel import model_inputs

    model_targets(model)  # a clear error for an unfitted model, before any work
    aligned = align_to_platform(model, frame, role)
    if reuse is not None and same_configs(reuse.configs, aligned):
        X = reuse.X.set_axis(aligned.index)
    else:
        X = model_inputs(aligned)
    pred = predict_frame(model, aligned, alpha=alpha, X=X)
    return Scored(aligned, X, pred, platform_name(model))
