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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.budgets import model_targets, platform_name
from carb_nas.datasets import read_configs
from carb_nas.errors import ConfigError, ModelError, removed_name
from carb_nas.space import (
    CONFIG_COLUMNS,
    FAMILIES,
    NUMERIC_KNOBS,
    RESNET_FAMILIES,
    Space,
    load_space,
    normalize_config_frame,
)

__all__ = [
    "Scored",
    "resolve_model",
    "candidate_frame",
    "align_to_platform",
    "deployed_level",
    "trained_families_note",
    "trained_levels",
    "predict_frame",
    "score_configs",
    "same_configs",
    "model_targets",
    "platform_name",
    "PredictedCosts",
    "predict_spec",
    "spec_inputs",
    "unseen_families",
]


def resolve_model(model: Any, role: str = "cost model", specs: bool = False) -> Any:
    """``model`` checked as a fitted predictor (a ``PlatformPredictor``, a ``CostModel`` or,
    with ``specs``, a ``ModuleCostModel``); ModelError naming ``role`` otherwise. Names and
    directories are resolved by ``carb_nas.predictors.load_predictor``, before this."""
    if isinstance(model, (str, Path)):
        raise ModelError(
            f"unresolved {role}: expected a loaded predictor, got the name {str(model)!r}. "
            "Load it first with carb_nas.load_predictor(name)."
        )
    if not callable(getattr(model, "predict", None)) or getattr(model, "targets_", None) is None:
        raise ModelError(
            f"unusable {role}: expected a fitted carb_nas.costmodel.CostModel (with predict "
            f"and targets_), got {type(model).__name__}. Fit it first or load one with "
            "carb_nas.load_predictor(platform)."
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


def deployed_level(model: Any, knob: str, default: str) -> str:
    """The ``precision`` or ``runtime`` a network of its own (a module spec, which has none)
    deploys on under ``model``: the one it was trained on, else ``default``."""
    known = trained_levels(model, knob)
    return known[0] if known and len(known) == 1 else default


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
        if knob == "family" and unseen and not set(unseen) & set(RESNET_FAMILIES):
            if all(v in FAMILIES for v in unseen):
                _warn_unseen(model, unseen, role)
                continue
        if not unseen:
            continue
        if knob != "family" and len(levels) == 1 and len(values) == 1:
            if out is frame:
                out = frame.copy()
            out[knob] = levels[0]
            continue
        n_unseen = int(column.isin(unseen).sum())
        hint = ""
        if knob == "precision":  # e.g. a GPU model of one precision on CARB's fp32+fp16 space
            hint = (
                " (e.g. the bundled 'cpu' space)"
                if list(levels) == ["fp32"]
                else f" (a copy of the space file whose precision line reads {list(levels)})"
            )
        raise ModelError(
            f"the {role} ({platform_name(model)}) was trained on another space: it knows "
            f"{knob} {levels}, got {n_unseen:,} of {len(frame):,} candidates with {knob} "
            f"{unseen}. Restrict the space to {knob} = {levels}{hint} or use a model "
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
    with _threads_for(model, len(Xu)), _unseen_as_missing(model, Xu):
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


# -- families and modules the model never saw -------------------------------------------------
_UNSEEN_NOTE = (
    "expect poor accuracy on them; a platform with a kernel-level module model (cpu/torch/fp32) "
    "predicts every built-in family, and a model of a shipped multi-family dataset has seen "
    "them: the zoo names of `carb-nas dataset list`, e.g. cpu/torch/fp32/zoo@amd-zen4"
)


def trained_families_note(model: Any) -> str:
    """``"trained on families [...]"`` for a warning about an architecture ``model`` never
    saw (``"trained on unrecorded families"`` when it does not say)."""
    levels = trained_levels(model, "family")
    return f"trained on families {levels}" if levels else "trained on unrecorded families"


def unseen_families(model: Any, families: Any) -> list[str]:
    """The built-in families among ``families`` that ``model`` was not trained on."""
    levels = trained_levels(model, "family")
    if levels is None:
        return []
    return sorted({str(f) for f in families} - set(levels))


def _warn_unseen(model: Any, unseen: list[str], role: str) -> None:
    import warnings

    warnings.warn(
        f"the {role} ({platform_name(model)}) never saw family {unseen}: predicting them from "
        f"their architecture features alone ({_UNSEEN_NOTE}).",
        UserWarning,
        stacklevel=3,
    )


@contextmanager
def _unseen_as_missing(model: Any, X: pd.DataFrame):
    """A family label the model never saw counts as missing (scikit-learn's
    ``handle_unknown="ignore"``) for this prediction only; precision and runtime were
    checked by :func:`align_to_platform` before."""
    levels = trained_levels(model, "family")
    inner = model  # a calibrated model predicts through its source model's schema
    while getattr(inner, "handle_unknown", None) is None and hasattr(inner, "source_model"):
        inner = inner.source_model
    unknown = (
        levels is not None
        and "family" in X.columns
        and not X["family"].astype(str).isin(levels).all()
        and getattr(inner, "handle_unknown", None) == "error"
        and hasattr(inner, "set_params")
    )
    if not unknown:
        yield
        return
    inner.set_params(handle_unknown="ignore")
    try:
        yield
    finally:
        inner.set_params(handle_unknown="error")


# -- any model: specs ---------------------------------------------------------------------------
# The family label of a model that is not a built-in family's config.
MODULE_FAMILY = "module"
_SPEC_FEATURES: dict[str, dict[str, Any]] = {}
_SPEC_FEATURES_MAX = 4096


@dataclass(frozen=True)
class PredictedCosts:
    """Predicted costs of one model on one platform: per target (``latency_ms``,
    ``peak_mem_mb``, ...) the prediction and its ``1 - alpha`` interval.

    ``values[target] = (predicted, lower, upper)``; ``unseen`` says that the cost model never
    saw this kind of architecture (its predictions rest on the features alone), or, for the
    kernel-level module model, that some ops were never measured: ``unmodelled_ops`` names
    them (their estimate, by their kind's measured ops or the roofline, widened the latency
    interval); ``features`` are the
    architecture features it was given; ``model`` how the predictor was obtained (the default
    model's origin, e.g. "trained on first use ... cached").
    """

    key: str
    name: str
    platform: str
    alpha: float
    values: Mapping[str, tuple[float, float, float]]
    features: Mapping[str, float]
    unseen: bool
    unmodelled_ops: tuple[str, ...] = ()
    model: str = ""

    def __getitem__(self, target: str) -> float:
        return self.values[target][0]

    def interval(self, target: str) -> tuple[float, float]:
        return self.values[target][1], self.values[target][2]

    def scaled(self, factors: Mapping[str, float], note: str = "") -> PredictedCosts:
        """The same costs, each target's prediction and interval times its factor (1 where
        none), ``note`` appended to ``model``."""
        values = {
            t: (factors.get(t, 1.0) * v, factors.get(t, 1.0) * lo, factors.get(t, 1.0) * hi)
            for t, (v, lo, hi) in self.values.items()
        }
        model = f"{self.model}; {note}" if note else self.model
        return replace(self, values=values, model=model)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "name": self.name, "platform": self.platform,
                               "alpha": self.alpha, "unseen_architecture": self.unseen,
                               "unmodelled_ops": list(self.unmodelled_ops)}  # fmt: skip
        for t, (v, lo, hi) in self.values.items():
            out[t] = v
            out[f"{t}_lower"] = lo
            out[f"{t}_upper"] = hi
        return out


def _traced_spec_features(spec: Any) -> dict[str, Any]:
    """Features of a factory's or module's spec, traced on the meta device, cached by key;
    a module that cannot run there or rejects the input shape is one clear ConfigError."""
    key = spec.key
    if key in _SPEC_FEATURES:
        return _SPEC_FEATURES[key]
    from carb_nas.features import FEATURE_COLUMNS, trace_ops

    module = spec.module if spec.kind == "module" else spec.build("meta")
    try:
        # the op table is cached: the module model's own trace of it is then a lookup
        traced = trace_ops(module, spec.input_shape, spec.precision)[1]
        feats = {c: traced[c] for c in FEATURE_COLUMNS}
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's forward: map to one line
        raise _trace_error(spec, e) from None
    if len(_SPEC_FEATURES) >= _SPEC_FEATURES_MAX:
        _SPEC_FEATURES.clear()
    _SPEC_FEATURES[key] = feats
    return feats


def _trace_error(spec: Any, e: BaseException) -> ConfigError:
    import re
    import traceback

    text = " ".join(str(e).split())
    where = ""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        f = frame.filename.replace("\\", "/")
        if "/torch/" not in f and "/carb_nas/" not in f:
            where = f" at {Path(f).name}:{frame.lineno} ({frame.name})"
            break
    op = None
    for pattern in (r"aten::\w+", r"CustomOpDef\((\S+?)\)", r"torch\.\w+\(\)",
                    r"Tensor\.\w+\(\)", r"'(\w+::\w+)'"):  # fmt: skip
        m = re.search(pattern, text)
        if m:
            op = m.group(m.lastindex or 0)
            break
    meta = (
        isinstance(e, NotImplementedError)
        or "meta" in text.lower()
        or "fake" in text.lower()
        or "numpy" in text.lower()
    )
    shape = ",".join(map(str, spec.input_shape))
    real = (
        f"carb-nas profile --model-spec {spec.factory} --input-shape {shape}"
        if spec.kind == "factory"
        else "carb_nas.measure.Profiler on the real module (or carb-nas profile --model-spec)"
    )
    if meta:
        what = op or type(e).__name__
        kind = "data-dependent control flow" if op and "item" in op else "an op without meta kernel"
        return ConfigError(
            f"cannot featurize {spec.name} on the meta device: expected ops that run without "
            f"data, got {kind} {what}{where} ({text[:160]}). Measure it for real instead: "
            f"{real}."
        )
    return ConfigError(
        f"{spec.name} rejects input shape ({shape}): expected a shape its forward accepts, "
        f"got {type(e).__name__}{where}: {text[:200]}. Pass the input shape the model takes."
    )


def spec_inputs(spec: Any, runtime: str = "torch") -> pd.DataFrame:
    """The cost model's inputs (one row) of a :class:`carb_nas.models.ModelSpec`: a
    config's as for any config; a factory's or module's from its meta-device trace, with
    family ``"module"``, depth = its conv and linear layers, width 1, resolution the input's
    last size, batch size its first and ``runtime`` (the one it deploys on)."""
    from carb_nas.costmodel import model_inputs
    from carb_nas.space import configs_to_frame

    if spec.kind == "config":
        return model_inputs(configs_to_frame([spec.config]))
    feats = _traced_spec_features(spec)
    depth = int(min(max(feats["n_conv"] + feats["n_linear"], 4), 1202))
    row = {
        "family": MODULE_FAMILY,
        "depth": depth,
        "width": 1.0,
        "resolution": int(min(max(spec.input_shape[-1], 32), 1024)),
        "batch_size": spec.batch_size,
        "precision": spec.precision,
        "runtime": runtime,
        **feats,
    }
    X = pd.DataFrame([row])
    for col in ("family", "precision", "runtime"):
        X[col] = X[col].astype(object)
    return X


def predict_spec(model: Any, spec: Any, alpha: float | None = 0.1) -> tuple[pd.DataFrame, bool]:
    """Predictions (one row: ``<target>``, ``_lower``, ``_upper``; point predictions only
    for ``alpha=None``) of ``spec`` by ``model`` and whether the model never saw its family.
    The one place where a spec's costs are predicted (a kernel-level predictor plugs in
    here)."""
    from carb_nas.costmodel import ModuleCostModel

    if isinstance(model, ModuleCostModel):  # per-operator models + network cascade
        if spec.kind != "config":
            spec_inputs(spec)  # traced first: a module meta cannot run is one clear line
        return model.predict_spec(spec, alpha)
    model_targets(model)
    X = spec_inputs(spec, deployed_level(model, "runtime", "torch"))
    family = str(X["family"].iloc[0])
    levels = trained_levels(model, "family")
    unseen = levels is not None and family not in levels
    for knob in ("precision", "runtime"):
        known = trained_levels(model, knob)
        value = str(X[knob].iloc[0])
        if known is not None and value not in known:
            raise ModelError(
                f"the cost model ({platform_name(model)}) was trained on {knob} {known}: "
                f"expected one of those, got {value!r}. Use a model trained on {knob} "
                f"{value!r} or a spec with {knob}={known[0]!r}."
            )
    pred = predict_frame(model, X, alpha=alpha, X=X)
    return pred, unseen


#: names of earlier versions, and what to use instead
_RENAMED = {
    "predict_costs": "carb_nas.predict_costs",
    "RESNET_CONFIGS_BY": "carb_nas.load_predictor(platform): it routes each family",
}


def __getattr__(name: str) -> Any:
    raise removed_name(__name__, name, _RENAMED)
