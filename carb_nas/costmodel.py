"""The CARB cost model: a cascade of blended tree ensembles with low-batch correctors.

Method (seed 001, "CARB Prediction Framework"; the ``carb`` preset reproduces it):

* **Features.** Numeric columns of ``X`` are used as they are, except heavy-tailed ones, which
  are replaced by ``log1p`` (see :data:`HEAVY_TAILED`, plus any non-negative column whose
  training skewness exceeds 2). Categorical columns (object, string or category dtype, e.g.
  ``family``, ``precision``, ``runtime``) are one-hot encoded with the levels seen in training.
  When ``sm_util`` and ``mem_util`` telemetry exist, CARB's interaction features are added:
  ``batch_x_sm = batch_size * sm_util``, ``flops_x_sm = log1p(flops) * sm_util``,
  ``act_x_mem = log1p(act_mb_total) * mem_util`` and ``util_product = sm_util * mem_util``.
  ``architecture_only=True`` drops every telemetry column (:data:`TELEMETRY_COLUMNS`).
* **Targets.** Strictly positive targets are modelled in log space (``log_targets="auto"``)
  and back-transformed with ``exp``; the others in their own units.
* **Specialists.** Per target, XGBoost (800 trees, depth 9), LightGBM (800 trees, 127 leaves)
  and ExtraTrees (400 trees); other hyperparameters are the libraries' defaults. Blend
  weights are chosen by grid search over the simplex (step ``blend_step``) to minimise the
  squared error in the target's own units on a validation split.
* **Cascade.** Targets are fitted in the order peak memory -> energy -> latency (targets the
  data lacks are skipped); each later target sees the earlier targets' *predictions* as
  features (``pred_<target>``, in model space). At training time the training rows carry
  ``cascade_folds``-fold **out-of-fold** predictions of a LightGBM cascade learner (never the
  measured values, which would leak and make the downstream learners over-trust the feature);
  validation and calibration rows, and ``predict``, carry the specialist's own (blended,
  corrected) predictions.
* **Low-batch corrector.** When ``X`` has ``batch_size``, a LightGBM model per target is fitted
  on the specialist's validation residuals of the low-batch rows
  (``batch_size <= low_batch_threshold``); predictions there become
  ``specialist + corrector_damping * correction`` (0.9 in CARB).
* **Intervals.** Split-conformal per target on a held-out calibration split, Mondrian by batch
  regime (low batch vs the rest): the scores are absolute residuals in model space (relative
  errors for log-space targets), so ``predict(X, alpha)`` gives ``[pred * e^-q, pred * e^q]``
  with coverage >= 1 - alpha per regime under exchangeability. A regime with fewer than
  ``_MIN_CONFORMAL`` calibration rows uses the pooled scores.

Extension (off by default, not part of CARB): ``target_offsets`` makes the learners fit the
log-ratio of a target to a positive feature column (peak memory to ``tensor_peak_mb``) or to
a fitted non-negative sum of resource columns (latency and energy to :data:`PHYSICAL_OFFSETS`:
FLOPs, native-kernel FLOPs, weight MB, activation MB, MB faulted in per call, layer count), so
the trees predict a bounded ratio and extrapolate beyond the largest training values. On the
shipped cpu/torch/fp32 rows (held-out 20 %, seed 0, carb preset) it lifts R2 from 0.9995 to
1.0000 for memory and from 0.943 to 0.993 for latency (MAPE 5.3 % to 3.3 %).

Rows are split once (seeded, stratified by batch regime) into training
(1 - ``validation_fraction`` - ``calibration_fraction``), validation and calibration parts.

Persistence never uses pickle: :meth:`CostModel.save` writes XGBoost UBJSON, LightGBM text,
skops for ExtraTrees (loaded with an explicit trusted-type list) and a JSON manifest with the
schema, blend weights, conformal scores, versions, training-data hash, platform fingerprint and
a SHA-256 of every file; :meth:`CostModel.load` checks all of it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform as _platform
import shutil
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin

from carb_nas._json import jsonable as _jsonable
from carb_nas.datasets import SCHEMA, TARGETS
from carb_nas.errors import ModelError

__all__ = [
    "CostModel",
    "model_inputs",
    "load_default_model",
    "default_model_dir",
    "PRESETS",
    "TELEMETRY_COLUMNS",
    "HEAVY_TAILED",
    "FORMAT_VERSION",
]

FORMAT_NAME = "carb_nas.costmodel"
FORMAT_VERSION = 2  # 2: offsets may be fitted sums of columns (``offset_coefs``)
TELEMETRY_COLUMNS = (
    "sm_util",
    "mem_util",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "power_limit_w",
)
# Columns log1p-transformed whenever present and non-negative (others only when skewed).
HEAVY_TAILED = (
    "flops",
    "macs",
    "params",
    "param_mb",
    "act_mb_total",
    "act_mb_max",
    "tensor_peak_mb",
    "weight_mb_max",
    "input_mb",
    "compute_intensity",
    "batch_size",
)
_SKEW_LOG = 2.0
_MIN_SPLIT = 10  # rows in the validation and calibration parts
_MIN_TRAIN = 20
MIN_TRAIN_ROWS = _MIN_TRAIN
_MIN_CORRECTOR = 20  # low-batch validation rows needed to fit a corrector
_MIN_CONFORMAL = 20  # calibration rows needed for a regime of its own
_LEARNERS = ("xgb", "lgbm", "et")

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # seed 001: XGBoost 800 trees depth 9, LightGBM 800 trees 127 leaves, ExtraTrees 400 trees.
    "carb": {
        "xgb": {"n_estimators": 800, "max_depth": 9},
        "lgbm": {"n_estimators": 800, "num_leaves": 127},
        "et": {"n_estimators": 400},
        "corrector": {"n_estimators": 200, "num_leaves": 15, "learning_rate": 0.05},
        "cascade": {"n_estimators": 200, "num_leaves": 31},
    },
    # Same structure, about 6x less work: for interactive use and tests.
    "fast": {
        "xgb": {"n_estimators": 150, "max_depth": 6},
        "lgbm": {"n_estimators": 150, "num_leaves": 31},
        "et": {"n_estimators": 100, "min_samples_leaf": 2},
        "corrector": {"n_estimators": 100, "num_leaves": 7, "learning_rate": 0.05},
        "cascade": {"n_estimators": 100, "num_leaves": 15},
    },
}

# skops: the only non-default types an ExtraTrees file may hold (checked on load).
_SKOPS_TRUSTED = [
    "sklearn.ensemble._forest.ExtraTreesRegressor",
    "sklearn.tree._classes.ExtraTreeRegressor",
    "sklearn.tree._tree.Tree",
]


def _err(what: str, expected: str, got: Any, fix: str) -> ModelError:
    return ModelError(f"{what}: expected {expected}, got {got}. {fix}")


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("carb-nas")
    except Exception:  # noqa: BLE001 - source tree without install metadata
        return "0.0.0"


class _Threads(NamedTuple):
    forest: int  # ExtraTrees (joblib threads)
    omp: int  # XGBoost and LightGBM (OpenMP)


def _idle_cores(samples: int = 5) -> int:
    """Cores not taken by other runnable tasks (Linux /proc/loadavg; else all cores)."""
    cpu = os.cpu_count() or 1
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)  # minus this reader
        except (OSError, ValueError, IndexError):
            return cpu
        if i + 1 < samples:
            time.sleep(0.005)
    return max(1, min(cpu, cpu - int(np.median(counts))))


def _threads(n_jobs: int | None) -> _Threads:
    """Threads for the learners. ``-1`` means every core for ExtraTrees and every *idle* core
    for the OpenMP learners: XGBoost and LightGBM synchronise their threads many times per
    tree, and when other processes hold the cores every synchronisation waits for a time
    slice (measured on a busy 2-core machine: CARB preset fit 685 s with 2 OpenMP threads,
    184 s with 1)."""
    cpu = os.cpu_count() or 1
    if n_jobs is None:
        return _Threads(1, 1)
    if n_jobs == -1:
        return _Threads(cpu, _idle_cores())
    n = cpu + 1 + n_jobs if n_jobs < 0 else int(n_jobs)
    n = max(1, n)
    return _Threads(n, n)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def frame_sha256(*frames: pd.DataFrame) -> str:
    """SHA-256 of tables' column names and cell values (row order matters, index does not)."""
    h = hashlib.sha256()
    for frame in frames:
        h.update(json.dumps([str(c) for c in frame.columns]).encode())
        h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return h.hexdigest()


# -- input handling -------------------------------------------------------------------------
def _as_frame(X: Any, what: str = "X") -> pd.DataFrame:
    if X is None:
        if what == "Y":
            raise _err(
                "no targets",
                "measured targets Y (this estimator requires y to be "
                "passed, but the target y is None)",
                None,
                "Call fit(X, Y).",
            )
        raise _err("no features", "a DataFrame X", None, "Pass X.")
    if isinstance(X, pd.Series):
        X = X.to_frame(name=X.name if X.name is not None else ("y" if what == "Y" else "x0"))
    if isinstance(X, pd.DataFrame):
        if all(isinstance(c, str) for c in X.columns):
            return X
        return X.rename(columns=str)
    if hasattr(X, "tocsr") or hasattr(X, "sparse"):
        raise _err(
            f"unusable {what}",
            "a dense table (sparse input is not supported)",
            type(X).__name__,
            "Convert it with .toarray() or pass a DataFrame.",
        )
    try:
        arr = np.asarray(X)
    except Exception as e:  # noqa: BLE001 - anything not array-like
        raise _err(
            f"unusable {what}",
            "a pandas DataFrame or a 2-D array",
            type(X).__name__,
            "Pass a DataFrame of feature columns.",
        ) from e
    if arr.ndim == 1 and what == "Y":
        return pd.DataFrame({"y": arr})
    if arr.ndim != 2:
        raise _err(
            f"unusable {what}",
            "a 2-D table (rows x columns)",
            f"an array of shape {arr.shape}",
            "Pass a DataFrame, or Reshape your data with array.reshape(-1, 1) for a "
            "single feature or array.reshape(1, -1) for a single row.",
        )
    prefix = "x" if what == "X" else "y"
    return pd.DataFrame(arr, columns=[f"{prefix}{i}" for i in range(arr.shape[1])])


def _is_categorical(s: pd.Series) -> bool:
    return (
        isinstance(s.dtype, pd.CategoricalDtype)
        or pd.api.types.is_object_dtype(s.dtype)
        or pd.api.types.is_string_dtype(s.dtype)
    )


def _cat_values(s: pd.Series) -> np.ndarray:
    return s.astype(object).where(s.notna(), "<missing>").astype(str).to_numpy()


class _Schema:
    """What fit learned about X's columns; turns any X into the numeric feature matrix."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.numeric: list[str] = list(doc["numeric"])
        self.categorical: dict[str, list[str]] = {k: list(v) for k, v in doc["categorical"].items()}
        self.log_columns: list[str] = list(doc["log_columns"])
        self.interactions: list[str] = list(doc["interactions"])
        self.dropped: dict[str, str] = dict(doc.get("dropped", {}))
        self.batch_column: str | None = doc.get("batch_column")

    def to_dict(self) -> dict[str, Any]:
        return {
            "numeric": self.numeric,
            "categorical": self.categorical,
            "log_columns": self.log_columns,
            "interactions": self.interactions,
            "dropped": self.dropped,
            "batch_column": self.batch_column,
        }

    @property
    def input_columns(self) -> list[str]:
        return self.numeric + list(self.categorical)

    @property
    def feature_names(self) -> list[str]:
        names = [f"log1p_{c}" if c in self.log_columns else c for c in self.numeric]
        for col, levels in self.categorical.items():
            names += [f"{col}={v}" for v in levels]
        return names + self.interactions

    @classmethod
    def learn(cls, X: pd.DataFrame, architecture_only: bool, max_categories: int) -> _Schema:
        numeric: list[str] = []
        categorical: dict[str, list[str]] = {}
        dropped: dict[str, str] = {}
        log_columns: list[str] = []
        for col in X.columns:
            name = str(col)
            s = X[col]
            if architecture_only and name in TELEMETRY_COLUMNS:
                dropped[name] = "telemetry (architecture_only=True)"
                continue
            if pd.api.types.is_bool_dtype(s.dtype):
                numeric.append(name)
                continue
            if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_complex_dtype(
                s.dtype
            ):
                v = s.to_numpy(dtype=float, na_value=np.nan)
                if np.isinf(v).any():
                    i = int(np.flatnonzero(np.isinf(v))[0])
                    raise _err(
                        f"infinite value in feature column {name!r} at row {i + 1}",
                        "finite numbers (NaN is allowed and means missing)",
                        v[i],
                        "Replace the infinite values or drop the column.",
                    )
                if np.isnan(v).all():
                    dropped[name] = "all values missing"
                    continue
                numeric.append(name)
                finite = v[~np.isnan(v)]
                if finite.min() >= 0 and (
                    name in HEAVY_TAILED or (finite.std() > 0 and _skew(finite) > _SKEW_LOG)
                ):
                    log_columns.append(name)
                continue
            if pd.api.types.is_complex_dtype(s.dtype):
                raise _err(
                    f"complex feature column {name!r}",
                    "real numbers (Complex data not supported)",
                    f"dtype {s.dtype}",
                    "Pass real numbers.",
                )
            if not _is_categorical(s):
                raise _err(
                    f"non-numeric feature column {name!r}",
                    "numbers, booleans or categorical labels (object/string/category)",
                    f"dtype {s.dtype}",
                    "Convert the column to numbers or labels, or drop it from X.",
                )
            present = s.dropna()
            if (
                len(present)
                and present.map(
                    lambda v: isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                ).all()
            ):
                numeric.append(name)  # numbers held in an object column
                continue
            nums = pd.to_numeric(present, errors="coerce")
            if len(present) and nums.notna().mean() >= 0.9 and nums.isna().any():
                i = int(np.flatnonzero(nums.isna().to_numpy())[0])
                raise _err(
                    f"non-numeric value in numeric feature column {name!r}",
                    "a number in every cell (the column is mostly numeric)",
                    repr(present.iloc[i]),
                    "Fix that cell (use an empty cell for a missing value).",
                )
            if len(present) and nums.notna().all() and not isinstance(s.dtype, pd.CategoricalDtype):
                raise _err(
                    f"numeric feature column {name!r} stored as text",
                    "a numeric dtype",
                    f"dtype {s.dtype}",
                    f"Convert it first, e.g. X[{name!r}] = pd.to_numeric(X[{name!r}]).",
                )
            levels = sorted(set(_cat_values(s)))
            if len(levels) > max_categories:
                raise _err(
                    f"non-numeric feature column {name!r} with too many distinct labels",
                    f"numbers, or a categorical column with at most {max_categories} labels",
                    f"{len(levels)} labels such as {levels[:3]}",
                    "Drop identifier/text columns (keys, timestamps) from X, or raise "
                    "max_categories.",
                )
            categorical[name] = levels
        if not numeric and not categorical:
            raise _err(
                "no usable feature column in X",
                "at least one numeric or categorical "
                f"column; got 0 feature(s) (shape=({len(X)}, 0)) while a minimum of 1 is "
                "required",
                list(map(str, X.columns)),
                "Pass the feature columns.",
            )
        interactions = []
        if "sm_util" in numeric and "mem_util" in numeric:
            if "batch_size" in numeric:
                interactions.append("batch_x_sm")
            if "flops" in numeric:
                interactions.append("flops_x_sm")
            if "act_mb_total" in numeric:
                interactions.append("act_x_mem")
            interactions.append("util_product")
        return cls(
            {
                "numeric": numeric,
                "categorical": categorical,
                "log_columns": log_columns,
                "interactions": interactions,
                "dropped": dropped,
                "batch_column": "batch_size" if "batch_size" in numeric else None,
            }
        )

    def check(self, X: pd.DataFrame) -> None:
        cols = set(map(str, X.columns))
        missing = [c for c in self.input_columns if c not in cols]
        if missing:
            telemetry = [c for c in missing if c in TELEMETRY_COLUMNS]
            fix = (
                "The model was trained with telemetry columns; pass them, or use a model "
                "trained with architecture_only=True to predict unmeasured configs."
                if telemetry
                else "Build X the same way as for training (carb_nas.costmodel.model_inputs for "
                "configs)."
            )
            raise _err(
                "feature schema mismatch: X lacks column(s) the model was trained on",
                f"the columns {self.input_columns}",
                f"missing {missing}",
                fix,
            )

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        self.check(X)
        Xs = X.rename(columns=str)
        n = len(Xs)
        blocks: list[np.ndarray] = []
        for col in self.numeric:
            s = Xs[col]
            if _is_categorical(s) and not isinstance(s.dtype, pd.CategoricalDtype):
                num = pd.to_numeric(s, errors="coerce")
                bad = num.isna() & s.notna()
                if bad.any():
                    i = int(np.flatnonzero(bad.to_numpy())[0])
                    raise _err(
                        f"feature schema mismatch: non-numeric value in column {col!r} "
                        f"at row {i + 1}",
                        "a number (the model was trained on a numeric column)",
                        repr(s.iloc[i]),
                        "Fix that cell.",
                    )
                s = num
            try:
                v = s.to_numpy(dtype=float, na_value=np.nan)
            except (TypeError, ValueError) as e:
                raise _err(
                    f"feature schema mismatch: column {col!r} is not numeric",
                    "numbers",
                    f"dtype {s.dtype}",
                    "Pass numbers in that column.",
                ) from e
            if col in self.log_columns:
                with np.errstate(invalid="ignore"):
                    v = np.log1p(np.where(v < 0, np.nan, v))
            blocks.append(v)
        for col, levels in self.categorical.items():
            vals = _cat_values(Xs[col])
            unseen = sorted(set(vals) - set(levels))
            if unseen:
                raise _err(
                    f"feature schema mismatch: unseen label(s) in column {col!r}",
                    f"labels seen in training {levels}",
                    unseen,
                    "The model cannot predict for them; train it on data that has them.",
                )
            for level in levels:
                blocks.append((vals == level).astype(float))
        if self.interactions:
            sm = Xs["sm_util"].to_numpy(dtype=float, na_value=np.nan)
            mem = Xs["mem_util"].to_numpy(dtype=float, na_value=np.nan)
            for name in self.interactions:
                if name == "batch_x_sm":
                    blocks.append(Xs["batch_size"].to_numpy(dtype=float) * sm)
                elif name == "flops_x_sm":
                    blocks.append(np.log1p(Xs["flops"].to_numpy(dtype=float)) * sm)
                elif name == "act_x_mem":
                    blocks.append(np.log1p(Xs["act_mb_total"].to_numpy(dtype=float)) * mem)
                else:
                    blocks.append(sm * mem)
        out = np.column_stack(blocks) if blocks else np.empty((n, 0))
        return np.ascontiguousarray(out, dtype=np.float32)

    def batch(self, X: pd.DataFrame) -> np.ndarray | None:
        if self.batch_column is None:
            return None
        return X.rename(columns=str)[self.batch_column].to_numpy(dtype=float)


def _skew(v: np.ndarray) -> float:
    d = v - v.mean()
    sd = d.std()
    return float((d**3).mean() / sd**3) if sd > 0 else 0.0


# -- learners -------------------------------------------------------------------------------
def _make(kind: str, params: Mapping[str, Any], seed: int, threads: _Threads):
    if kind == "xgb":
        import xgboost as xgb

        return xgb.XGBRegressor(tree_method="hist", random_state=seed, n_jobs=threads.omp, **params)
    if kind in ("lgbm", "corrector", "cascade"):
        import lightgbm as lgb

        return lgb.LGBMRegressor(random_state=seed, n_jobs=threads.omp, verbose=-1, **params)
    if kind == "et":
        from sklearn.ensemble import ExtraTreesRegressor

        return ExtraTreesRegressor(random_state=seed, n_jobs=threads.forest, **params)
    raise ValueError(kind)


def _predict(kind: str, model: Any, F: np.ndarray, threads: _Threads) -> np.ndarray:
    """Predict with a fitted learner (XGBoost Booster, LightGBM Booster or ExtraTrees)."""
    if len(F) == 0:
        return np.zeros(0)
    if kind == "xgb":
        model.set_param({"nthread": threads.omp})
        return np.asarray(model.inplace_predict(F), dtype=float)
    if kind in ("lgbm", "corrector"):
        return np.asarray(model.predict(F, num_threads=threads.omp), dtype=float)
    model.n_jobs = threads.forest
    return np.asarray(model.predict(F), dtype=float)


def _fit_learner(
    kind: str,
    params: Mapping[str, Any],
    F: np.ndarray,
    y: np.ndarray,
    seed: int,
    threads: _Threads,
) -> Any:
    est = _make(kind, params, seed, threads)
    est.fit(F, y)
    if kind == "xgb":
        return est.get_booster()
    if kind in ("lgbm", "corrector", "cascade"):
        return est.booster_
    return est


def _blend_grid(step: float) -> list[tuple[float, float, float]]:
    k = int(round(1 / step))
    if k < 1 or abs(k * step - 1) > 1e-9:
        raise _err(
            "invalid blend_step",
            "a step that divides 1 (e.g. 0.1, 0.05, 0.25)",
            step,
            "Choose such a step.",
        )
    return [(i / k, j / k, (k - i - j) / k) for i in range(k + 1) for j in range(k + 1 - i)]


def _conformal_q(scores: Sequence[float], alpha: float) -> float:
    n = len(scores)
    if n == 0:
        return math.inf
    k = math.ceil((n + 1) * (1 - alpha))
    if k > n:
        return math.inf
    return float(np.sort(np.asarray(scores, dtype=float))[k - 1])


# -- the estimator --------------------------------------------------------------------------
class CostModel(RegressorMixin, BaseEstimator):
    """CARB cascade cost model (see the module docstring for the method).

    Args:
        preset: ``"carb"`` (the paper's ensemble sizes) or ``"fast"`` (about 6x cheaper).
        targets: target columns of ``Y`` to model, in any order (they are fitted in cascade
            order: ``peak_mem_mb``, ``energy_j``, ``latency_ms``, then any others). ``None``
            uses every column of ``Y``.
        architecture_only: drop telemetry columns (:data:`TELEMETRY_COLUMNS`) from ``X``.
        log_targets: ``"auto"`` (log space for strictly positive targets), ``True`` or
            ``False``.
        validation_fraction: share of rows for blend weights and the low-batch correctors.
            0 gives equal weights and no corrector.
        calibration_fraction: share of rows for the conformal intervals. 0 disables
            ``predict(X, alpha=...)``.
        low_batch_threshold: batches up to this size form the low-batch regime.
        corrector_damping: the corrector's weight lambda (0.9 in CARB; 0 disables it).
        blend_step: grid step of the blend-weight search over the simplex.
        cascade_folds: folds for the out-of-fold cascade features of the training rows.
        target_offsets: optional ``{target: feature column}``, e.g. ``{"peak_mem_mb":
            "tensor_peak_mb", "latency_ms": "flops"}``: the learners then fit the log-ratio
            of the target to that (positive) column instead of the target itself, which lets
            trees extrapolate beyond the training range (not part of CARB; default None).
            A list of (non-negative) columns instead of one makes the offset their sum
            weighted by non-negative costs, fitted on the training rows by non-negative
            least squares of the relative error (``offset_coefs_``), e.g. seconds per FLOP
            and per MB moved. :data:`PHYSICAL_OFFSETS` holds the physical choice.
        max_categories: most distinct labels a categorical feature column may have.
        random_state: seed of the split and every learner.
        n_jobs: threads per learner. -1 (default): all cores for ExtraTrees and the idle
            cores (at fit/predict time) for XGBoost and LightGBM, whose OpenMP threads slow
            down by an order of magnitude when other processes hold the cores; None: 1.

    Fitted attributes: ``targets_``, ``feature_names_in_`` (input columns used),
    ``n_features_in_``, ``platform_`` (fingerprint dict or None), ``space_fingerprint_``,
    ``blend_weights_``, ``fit_info_`` (split sizes, timings, validation scores).
    """

    def __init__(
        self,
        preset: str = "carb",
        targets: Sequence[str] | None = None,
        architecture_only: bool = False,
        log_targets: bool | str = "auto",
        validation_fraction: float = 0.15,
        calibration_fraction: float = 0.15,
        low_batch_threshold: int = 8,
        corrector_damping: float = 0.9,
        blend_step: float = 0.1,
        cascade_folds: int = 5,
        target_offsets: Mapping[str, str] | None = None,
        max_categories: int = 64,
        random_state: int = 0,
        n_jobs: int | None = -1,
    ) -> None:
        self.preset = preset
        self.targets = targets
        self.architecture_only = architecture_only
        self.log_targets = log_targets
        self.validation_fraction = validation_fraction
        self.calibration_fraction = calibration_fraction
        self.low_batch_threshold = low_batch_threshold
        self.corrector_damping = corrector_damping
        self.blend_step = blend_step
        self.cascade_folds = cascade_folds
        self.target_offsets = target_offsets
        self.max_categories = max_categories
        self.random_state = random_state
        self.n_jobs = n_jobs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    # -- validation -------------------------------------------------------------------------
    def _check_params(self) -> dict[str, dict[str, Any]]:
        if self.preset not in PRESETS:
            raise _err(
                "unknown preset",
                f"one of {list(PRESETS)}",
                repr(self.preset),
                "Use preset='carb' (the paper's sizes) or 'fast'.",
            )
        for name in ("validation_fraction", "calibration_fraction"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v < 0.5):
                raise _err(f"invalid {name}", "a number in [0, 0.5)", repr(v), "Use e.g. 0.15.")
        if not 0 <= self.corrector_damping <= 1:
            raise _err(
                "invalid corrector_damping",
                "a number in [0, 1]",
                repr(self.corrector_damping),
                "CARB uses 0.9.",
            )
        if self.log_targets not in ("auto", True, False):
            raise _err(
                "invalid log_targets",
                "'auto', True or False",
                repr(self.log_targets),
                "Use 'auto'.",
            )
        if not (isinstance(self.cascade_folds, int) and self.cascade_folds >= 2):
            raise _err(
                "invalid cascade_folds", "an integer >= 2", repr(self.cascade_folds), "Use 5."
            )
        _blend_grid(self.blend_step)
        return PRESETS[self.preset]

    def _check_targets(self, Y: pd.DataFrame) -> list[str]:
        cols = [str(c) for c in Y.columns]
        if self.targets is not None:
            wanted = [self.targets] if isinstance(self.targets, str) else list(self.targets)
            missing = [t for t in wanted if t not in cols]
            if missing or not wanted:
                raise _err(
                    "target column(s) missing from Y",
                    f"columns {wanted}",
                    f"columns {cols}",
                    "Pass Y with those columns or change targets=.",
                )
        else:
            wanted = cols
        if not wanted:
            raise _err(
                "no target column",
                "Y with at least one of the target columns "
                f"{list(TARGETS)} (or any numeric column to predict)",
                "an empty Y",
                "Pass the measured targets as Y.",
            )
        if len(set(wanted)) != len(wanted):
            raise _err("duplicate target columns", "distinct names", wanted, "Rename them.")
        known = [t for t in TARGETS if t in wanted]
        return known + [t for t in wanted if t not in TARGETS]

    # -- fitting ----------------------------------------------------------------------------
    def fit(
        self,
        X: Any,
        Y: Any,
        *,
        platform: Mapping[str, Any] | str | None = None,
        space_fingerprint: str | None = None,
    ) -> CostModel:
        """Fit the cascade on features ``X`` and measured targets ``Y`` (same rows).

        Args:
            X: DataFrame of feature columns (numeric and categorical), e.g.
                ``model_inputs(frame)``; a 2-D array also works (columns ``x0, x1, ...``).
            Y: DataFrame of targets (units as named: ``peak_mem_mb``, ``energy_j``,
                ``latency_ms``); a 1-D array becomes the single target ``y``.
            platform: the platform fingerprint the rows were measured on (dict, or a platform
                string such as ``"cpu/torch/fp32"``); stored as ``platform_``.
            space_fingerprint: ``Space.fingerprint`` of the space the rows sample, if any.
        """
        t_start, c_start = time.perf_counter(), time.process_time()
        preset = self._check_params()
        X = _as_frame(X, "X")
        Y = _as_frame(Y, "Y")
        targets = self._check_targets(Y)
        if len(X) != len(Y):
            raise _err(
                "X and Y differ in length",
                "one row of Y per row of X",
                f"{len(X)} rows of X and {len(Y)} of Y",
                "Pass matching tables.",
            )
        Yv = {}
        for t in targets:
            s = Y[t]
            if pd.api.types.is_object_dtype(s.dtype):
                num = pd.to_numeric(s, errors="coerce")
                s = num if not (num.isna() & s.notna()).any() else s
            if not pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype):
                raise _err(
                    f"non-numeric target column {t!r}",
                    "numbers",
                    f"dtype {s.dtype}",
                    "Convert the target to numbers.",
                )
            v = s.to_numpy(dtype=float, na_value=np.nan)
            bad = ~np.isfinite(v)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise _err(
                    f"missing or non-finite target values in {t!r}",
                    "a finite measured value on every row",
                    f"{int(bad.sum())} bad value(s), first at row {i + 1} ({v[i]})",
                    "Drop the rows without a measurement (e.g. keep status == 'ok') or "
                    "leave that target out.",
                )
            if self.log_targets is True and (v <= 0).any():
                raise _err(
                    f"non-positive values in target {t!r}",
                    "values > 0 for log-space fitting",
                    f"min {v.min()}",
                    "Use log_targets='auto' or False.",
                )
            Yv[t] = v
        n = len(X)
        threads = _threads(self.n_jobs)
        schema = _Schema.learn(X, self.architecture_only, self.max_categories)
        F = schema.transform(X)
        batch = schema.batch(X)
        low = batch <= self.low_batch_threshold if batch is not None else np.zeros(n, bool)
        tr, va, ca = self._split(n, low)
        self.schema_ = schema
        self.targets_ = targets
        self.feature_names_in_ = np.asarray(schema.input_columns, dtype=object)
        self.n_features_in_ = len(schema.input_columns)
        self.transforms_ = {
            t: "log"
            if (self.log_targets is True or (self.log_targets == "auto" and (Yv[t] > 0).all()))
            else "identity"
            for t in targets
        }
        self.learners_: dict[str, dict[str, Any]] = {}
        self.blend_weights_: dict[str, dict[str, float]] = {}
        self.correctors_: dict[str, Any] = {}
        self.conformal_: dict[str, dict[str, list[float]]] = {}
        info: dict[str, Any] = {
            "n_rows": n,
            "n_train": len(tr),
            "n_validation": len(va),
            "n_calibration": len(ca),
            "n_features": F.shape[1],
            "seconds": {},
            "validation": {},
            "corrector": {},
        }
        # cascade feature columns: training rows get out-of-fold predictions, the other rows
        # the specialist's own predictions
        casc_tr: list[np.ndarray] = []
        casc_rest: list[np.ndarray] = []
        rest = np.concatenate([va, ca])
        nva = len(va)
        self.offsets_ = self._check_offsets(X, targets)
        self.offset_coefs_ = {
            t: self._fit_offset_coefs(X.iloc[tr], t, Yv[t][tr])
            for t, spec in self.offsets_.items()
            if not isinstance(spec, str)
        }
        for k, t in enumerate(targets):
            z = self._to_model(t, Yv[t])
            off = self._offset(X, t)
            u = z - off  # what the learners fit (z itself without an offset)
            Ftr = np.column_stack([F[tr], *casc_tr]) if casc_tr else F[tr]
            Frest = np.column_stack([F[rest], *casc_rest]) if casc_rest else F[rest]
            secs: dict[str, float] = {}
            models = {}
            for kind in _LEARNERS:
                t0 = time.perf_counter()
                models[kind] = _fit_learner(
                    kind, preset[kind], Ftr, u[tr], self.random_state, threads
                )
                secs[kind] = time.perf_counter() - t0
            self.learners_[t] = models
            preds = {
                kind: _predict(kind, models[kind], Frest, threads) + off[rest] for kind in _LEARNERS
            }
            # blend weights on the validation part (in the target's own units)
            if nva:
                w = self._search_weights(t, {k_: p[:nva] for k_, p in preds.items()}, Yv[t][va])
            else:
                w = dict.fromkeys(_LEARNERS, 1 / 3)
            self.blend_weights_[t] = w
            blend = sum(w[k_] * preds[k_] for k_ in _LEARNERS)
            # low-batch corrector on validation residuals
            t0 = time.perf_counter()
            corr, why = None, "no batch_size column"
            if batch is not None and self.corrector_damping > 0:
                lo_va = low[va]
                if lo_va.sum() >= _MIN_CORRECTOR:
                    Fc = np.column_stack([Frest[:nva][lo_va], blend[:nva][lo_va]])
                    resid = z[va][lo_va] - blend[:nva][lo_va]
                    corr = _fit_learner(
                        "corrector", preset["corrector"], Fc, resid, self.random_state, threads
                    )
                    why = f"fitted on {int(lo_va.sum())} low-batch validation rows"
                else:
                    why = f"only {int(lo_va.sum())} low-batch validation rows (< {_MIN_CORRECTOR})"
            elif batch is not None:
                why = "corrector_damping = 0"
            self.correctors_[t] = corr
            info["corrector"][t] = why
            if corr is not None:
                lo_rest = low[rest]
                if lo_rest.any():
                    Fc = np.column_stack([Frest[lo_rest], blend[lo_rest]])
                    blend = blend.copy()
                    blend[lo_rest] += self.corrector_damping * _predict(
                        "corrector", corr, Fc, threads
                    )
            secs["corrector"] = time.perf_counter() - t0
            if nva:
                info["validation"][t] = _metrics(Yv[t][va], self._from_model(t, blend[:nva]))
            # conformal scores on the calibration part
            scores = np.abs(z[ca] - blend[nva:])
            lo_ca = low[ca]
            self.conformal_[t] = {
                "all": scores.tolist(),
                "low": scores[lo_ca].tolist(),
                "high": scores[~lo_ca].tolist(),
            }
            # cascade feature for the next targets
            if k < len(targets) - 1:
                t0 = time.perf_counter()
                casc_tr.append(self._oof(preset["cascade"], Ftr, u[tr], threads) + off[tr])
                casc_rest.append(blend)
                secs["cascade_oof"] = time.perf_counter() - t0
            info["seconds"][t] = secs
        self.platform_ = _platform_dict(platform)
        self.space_fingerprint_ = space_fingerprint
        self.training_sha256_ = frame_sha256(X, Y[targets])
        info["train_seconds"] = time.perf_counter() - t_start
        info["cpu_seconds"] = time.process_time() - c_start  # all threads of this process
        info["threads"] = threads._asdict()
        self.fit_info_ = info
        return self

    def _split(self, n: int, low: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n_va = int(round(n * self.validation_fraction))
        n_ca = int(round(n * self.calibration_fraction))
        need = (
            _MIN_TRAIN
            + (_MIN_SPLIT if self.validation_fraction else 0)
            + (_MIN_SPLIT if self.calibration_fraction else 0)
        )
        if (
            n - n_va - n_ca < _MIN_TRAIN
            or (self.validation_fraction and n_va < _MIN_SPLIT)
            or (self.calibration_fraction and n_ca < _MIN_SPLIT)
        ):
            least = max(
                need,
                math.ceil(_MIN_SPLIT / max(self.validation_fraction, 1e-9))
                if self.validation_fraction
                else 0,
                math.ceil(_MIN_SPLIT / max(self.calibration_fraction, 1e-9))
                if self.calibration_fraction
                else 0,
            )
            raise _err(
                "too few rows for the training/validation/calibration split",
                f"at least {least} rows (>= {_MIN_TRAIN} to train and >= {_MIN_SPLIT} in "
                f"each held-out part; validation_fraction={self.validation_fraction}, "
                f"calibration_fraction={self.calibration_fraction})",
                f"{n} rows (n_samples={n})",
                "Measure more configs, or lower/zero validation_fraction and "
                "calibration_fraction (zero disables blend search and intervals).",
            )
        rng = np.random.default_rng(self.random_state)
        va, ca, tr = [], [], []
        # stratified by batch regime so both regimes reach every part
        for mask in (low, ~low):
            idx = np.flatnonzero(mask)
            if not len(idx):
                continue
            idx = rng.permutation(idx)
            a = int(round(len(idx) * self.validation_fraction))
            b = int(round(len(idx) * self.calibration_fraction))
            va.append(idx[:a])
            ca.append(idx[a : a + b])
            tr.append(idx[a + b :])
        return (
            np.sort(np.concatenate(tr)),
            np.sort(np.concatenate(va)),
            np.sort(np.concatenate(ca)),
        )

    def _oof(
        self, params: Mapping[str, Any], F: np.ndarray, z: np.ndarray, threads: _Threads
    ) -> np.ndarray:
        n = len(z)
        k = min(self.cascade_folds, n)
        folds = np.random.default_rng(self.random_state + 1).permutation(n) % k
        out = np.empty(n)
        for f in range(k):
            test = folds == f
            m = _fit_learner("cascade", params, F[~test], z[~test], self.random_state, threads)
            out[test] = _predict("lgbm", m, F[test], threads)
        return out

    def _search_weights(
        self, t: str, preds: Mapping[str, np.ndarray], y: np.ndarray
    ) -> dict[str, float]:
        P = np.column_stack([self._from_model(t, preds[k]) for k in _LEARNERS])
        grid = np.asarray(_blend_grid(self.blend_step))
        # error in the target's own units (what R2 and MAE measure); ties -> first grid point
        err = ((P @ grid.T - y[:, None]) ** 2).mean(axis=0)
        best = grid[int(np.argmin(err))]
        return {k: round(float(w), 10) for k, w in zip(_LEARNERS, best)}

    def _check_offsets(self, X: pd.DataFrame, targets: list[str]) -> dict[str, str | list[str]]:
        offsets: dict[str, str | list[str]] = {}
        for t, spec in dict(self.target_offsets or {}).items():
            if t not in targets:
                raise _err(
                    "target_offsets names a target that is not fitted",
                    f"targets among {targets}",
                    repr(t),
                    "Drop it from target_offsets.",
                )
            cols = [spec] if isinstance(spec, str) else list(spec)
            if not cols or not all(isinstance(c, str) for c in cols):
                raise _err(
                    f"invalid target_offsets entry for {t!r}",
                    "a column name or a non-empty list of column names",
                    repr(spec),
                    'Use e.g. {"latency_ms": "flops"} or {"latency_ms": ["flops", "param_mb"]}.',
                )
            for col in cols:
                if col not in self.schema_.numeric or col in self.schema_.dropped:
                    raise _err(
                        f"target_offsets column for {t!r} is not a numeric feature of X",
                        f"one of {self.schema_.numeric}",
                        repr(col),
                        "Name a positive numeric column of X.",
                    )
                v = X[col].to_numpy(dtype=float, na_value=np.nan)
                ok = (v > 0) if isinstance(spec, str) else (v >= 0)
                if not ok.all():
                    raise _err(
                        f"target_offsets column {col!r} has "
                        f"{'non-positive' if isinstance(spec, str) else 'negative'} or missing "
                        "values",
                        "values > 0 on every row" if isinstance(spec, str) else "values >= 0",
                        f"min {np.nanmin(v)}",
                        "Use a strictly positive column."
                        if isinstance(spec, str)
                        else "Use non-negative resource columns.",
                    )
            if self.transforms_[t] != "log":
                raise _err(
                    f"target_offsets for {t!r} needs a log-space target",
                    "a strictly positive target",
                    "non-positive values",
                    "Drop the offset for that target.",
                )
            offsets[t] = spec if isinstance(spec, str) else cols
        return offsets

    def _fit_offset_coefs(self, X: pd.DataFrame, t: str, y: np.ndarray) -> dict[str, float]:
        """Non-negative costs c of a list offset, minimizing the relative error of X @ c."""
        from scipy.optimize import nnls

        cols = self.offsets_[t]
        M = X[cols].to_numpy(dtype=float)
        scale = M.max(axis=0)
        scale[scale == 0] = 1.0
        c, _ = nnls(M / scale / y[:, None], np.ones(len(y)))
        coefs = {col: float(v) for col, v in zip(cols, c / scale)}
        if not (M @ (c / scale) > 0).all():
            raise _err(
                f"target_offsets columns for {t!r} cannot form a positive offset",
                "non-negative costs that make the offset > 0 on every training row",
                f"costs {coefs}",
                "Add a column that is positive on every row (e.g. flops).",
            )
        return coefs

    def _offset(self, X: pd.DataFrame, t: str) -> np.ndarray:
        spec = getattr(self, "offsets_", {}).get(t)
        if spec is None:
            return np.zeros(len(X))
        if isinstance(spec, str):
            raw = X[spec].to_numpy(dtype=float, na_value=np.nan)
            what = f"offset column {spec!r}"
        else:
            coefs = self.offset_coefs_[t]
            raw = X[list(coefs)].to_numpy(dtype=float, na_value=np.nan) @ np.array(
                list(coefs.values())
            )
            what = f"offset {' + '.join(f'{v:.3g}*{c}' for c, v in coefs.items())}"
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.log(raw)
        if not np.isfinite(v).all():
            i = int(np.flatnonzero(~np.isfinite(v))[0])
            raise _err(
                f"{what} needs positive values",
                "values > 0",
                f"{raw[i]!r} at row {i + 1}",
                "Fix that row.",
            )
        return v

    def _to_model(self, t: str, y: np.ndarray) -> np.ndarray:
        return np.log(y) if self.transforms_[t] == "log" else np.asarray(y, dtype=float)

    def _from_model(self, t: str, z: np.ndarray) -> np.ndarray:
        if self.transforms_[t] == "log":
            with np.errstate(over="ignore"):
                return np.exp(z)  # +-inf bounds stay inf / 0
        return np.asarray(z, dtype=float)

    # -- prediction -------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "learners_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(
                "this CostModel is not fitted: expected fit(X, Y) or CostModel.load(dir) "
                "before predict, got an unfitted model. Fit or load it first."
            )

    def _predict_model_space(self, X: Any, correct: bool = True) -> tuple[dict, np.ndarray]:
        self._check_fitted()
        X = _as_frame(X, "X")
        F = self.schema_.transform(X)
        batch = self.schema_.batch(X)
        low = (batch <= self.low_batch_threshold) if batch is not None else np.zeros(len(X), bool)
        threads = _threads(self.n_jobs)
        cascade: list[np.ndarray] = []
        out: dict[str, np.ndarray] = {}
        for t in self.targets_:
            Ft = np.column_stack([F, *cascade]) if cascade else F
            w = self.blend_weights_[t]
            blend = self._offset(X, t).copy()
            for kind in _LEARNERS:
                if w[kind]:
                    blend += w[kind] * _predict(kind, self.learners_[t][kind], Ft, threads)
            corr = self.correctors_.get(t)
            if correct and corr is not None and low.any():
                Fc = np.column_stack([Ft[low], blend[low]])
                blend[low] += self.corrector_damping * _predict("corrector", corr, Fc, threads)
            out[t] = blend
            cascade.append(blend)
        return out, low

    def predict(
        self, X: Any, alpha: float | None = None, *, low_batch_correction: bool = True
    ) -> pd.DataFrame:
        """Predicted targets for the rows of ``X`` (units as the column names say).

        With ``alpha`` (e.g. 0.05), each target ``t`` also gets ``t_lower`` and ``t_upper``:
        a split-conformal interval meant to hold the measured value with probability
        >= 1 - alpha within each batch regime (infinite when the calibration part is too
        small for that alpha). ``low_batch_correction=False`` skips the low-batch correctors
        (for ablations; the intervals are calibrated for the corrected model).
        """
        if alpha is not None and not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
            raise _err(
                "invalid alpha",
                "a miscoverage level in (0, 1), e.g. 0.05",
                repr(alpha),
                "Pass alpha=0.05 for 95% intervals.",
            )
        z, low = self._predict_model_space(X, correct=low_batch_correction)
        index = X.index if isinstance(X, pd.DataFrame) else None
        cols: dict[str, np.ndarray] = {}
        for t in self.targets_:
            cols[t] = self._from_model(t, z[t])
            if alpha is not None:
                lo_q, hi_q = self._quantiles(t, alpha)
                if math.isnan(lo_q):
                    raise _err(
                        "no calibrated intervals",
                        "a model fitted with calibration_fraction > 0",
                        "calibration_fraction=0",
                        "Refit with calibration_fraction=0.15 or predict without alpha.",
                    )
                q = np.where(low, lo_q, hi_q)
                with np.errstate(over="ignore"):
                    cols[f"{t}_lower"] = self._from_model(t, z[t] - q)
                    cols[f"{t}_upper"] = self._from_model(t, z[t] + q)
        return pd.DataFrame(cols, index=index)

    def _quantiles(self, t: str, alpha: float) -> tuple[float, float]:
        c = self.conformal_[t]
        if not c["all"]:
            return math.nan, math.nan

        def q(group: str) -> float:
            scores = c[group] if len(c[group]) >= _MIN_CONFORMAL else c["all"]
            return _conformal_q(scores, alpha)

        return q("low"), q("high")

    def interval_quantiles(self, alpha: float = 0.05) -> dict[str, dict[str, float]]:
        """Conformal half-widths (model space) per target and regime for ``alpha``."""
        self._check_fitted()
        return {
            t: dict(zip(("low_batch", "high_batch"), self._quantiles(t, alpha)))
            for t in self.targets_
        }

    def feature_importance(self) -> pd.DataFrame:
        """Blend-weighted, normalised gain/impurity importances: rows features, cols targets."""
        self._check_fitted()
        cols = {}
        base = self.schema_.feature_names
        for k, t in enumerate(self.targets_):
            names = base + [f"pred_{u}" for u in self.targets_[:k]]
            total = np.zeros(len(names))
            for kind in _LEARNERS:
                m = self.learners_[t][kind]
                if kind == "xgb":
                    score = m.get_score(importance_type="gain")
                    imp = np.array([score.get(f"f{i}", 0.0) for i in range(len(names))])
                elif kind == "lgbm":
                    imp = np.asarray(m.feature_importance("gain"), dtype=float)
                else:
                    imp = np.asarray(m.feature_importances_, dtype=float)
                if imp.sum() > 0:
                    total += self.blend_weights_[t][kind] * imp / imp.sum()
            cols[t] = pd.Series(total, index=names)
        return pd.DataFrame(cols).fillna(0.0)

    # -- persistence ------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write the model to ``directory`` (created if needed) without pickle."""
        self._check_fitted()
        import skops.io as sio

        d = Path(directory)
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _err(
                "cannot create the model directory",
                "a writable path",
                str(d),
                f"Choose another directory ({e.strerror}).",
            ) from e
        files: dict[str, str] = {}
        learners: dict[str, dict[str, str]] = {}
        for t in self.targets_:
            names = {"xgb": f"{t}.xgb.ubj", "lgbm": f"{t}.lgbm.txt", "et": f"{t}.et.skops"}
            self.learners_[t]["xgb"].save_model(str(d / names["xgb"]))
            self.learners_[t]["lgbm"].save_model(str(d / names["lgbm"]))
            sio.dump(self.learners_[t]["et"], d / names["et"], compression=8)
            if self.correctors_.get(t) is not None:
                names["corrector"] = f"{t}.corrector.lgbm.txt"
                self.correctors_[t].save_model(str(d / names["corrector"]))
            learners[t] = names
            for name in names.values():
                files[name] = _sha256_file(d / name)
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "package_version": _package_version(),
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": _platform.python_version(),
            "library_versions": _library_versions(),
            "params": self.get_params(),
            "targets": list(self.targets_),
            "transforms": self.transforms_,
            "offsets": self.offsets_,
            "offset_coefs": self.offset_coefs_,
            "schema": self.schema_.to_dict(),
            "feature_names": self.schema_.feature_names,
            "blend_weights": self.blend_weights_,
            "learners": learners,
            "correctors": {t: self.correctors_.get(t) is not None for t in self.targets_},
            "conformal": self.conformal_,
            "platform": self.platform_,
            "space_fingerprint": self.space_fingerprint_,
            "training_sha256": self.training_sha256_,
            "fit_info": self.fit_info_,
            "files": files,
        }
        tmp = d / ".manifest.json.tmp"
        tmp.write_text(json.dumps(_jsonable(manifest), indent=1, allow_nan=False))
        tmp.replace(d / "manifest.json")
        return d

    @classmethod
    def load(cls, directory: str | Path) -> CostModel:
        """Load a model saved by :meth:`save`, verifying versions and file checksums."""
        d = Path(directory)
        mpath = d / "manifest.json"
        if not mpath.is_file():
            raise _err(
                "not a saved cost model",
                f"a directory with manifest.json ({d})",
                "no manifest.json" if d.is_dir() else "no such directory",
                "Pass a directory written by CostModel.save or `carb-nas train`.",
            )
        try:
            m = json.loads(mpath.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _err(
                "corrupted model manifest",
                "valid JSON in manifest.json",
                str(e),
                "Re-save or retrain the model.",
            ) from e
        if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
            raise _err(
                "not a carb_nas cost model",
                f"manifest format {FORMAT_NAME!r}",
                repr(m.get("format") if isinstance(m, dict) else type(m).__name__),
                "Pass a directory written by CostModel.save.",
            )
        fv = m.get("format_version")
        if not isinstance(fv, int) or fv > FORMAT_VERSION or fv < 1:
            raise _err(
                "unsupported model format version",
                f"a version between 1 and {FORMAT_VERSION} (this carb_nas {_package_version()})",
                f"{fv!r} (written by carb_nas {m.get('package_version')})",
                "Upgrade carb_nas to read it, or retrain the model with this version.",
            )
        files = m.get("files", {})
        for name, digest in files.items():
            p = d / name
            if Path(name).name != name:
                raise _err(
                    "unsafe file name in the model manifest",
                    "plain file names",
                    repr(name),
                    "The manifest was tampered with; retrain the model.",
                )
            if not p.is_file():
                raise _err(
                    "model file missing",
                    f"{name} listed in the manifest",
                    "no file",
                    "Copy the whole model directory, or retrain the model.",
                )
            got = _sha256_file(p)
            if got != digest:
                raise _err(
                    f"model file {name} was modified (checksum mismatch)",
                    f"sha256 {digest[:16]}...",
                    f"sha256 {got[:16]}...",
                    "Restore the original file or retrain; never load edited files.",
                )
        try:
            params = dict(m["params"])
            model = cls(**params)
            model.targets_ = list(m["targets"])
            model.transforms_ = dict(m["transforms"])
            model.offsets_ = dict(m.get("offsets", {}))
            model.offset_coefs_ = {
                t: {c: float(v) for c, v in cs.items()}
                for t, cs in m.get("offset_coefs", {}).items()
            }
            model.schema_ = _Schema(m["schema"])
            model.blend_weights_ = {
                t: {k: float(v) for k, v in w.items()} for t, w in m["blend_weights"].items()
            }
            model.conformal_ = m["conformal"]
            model.platform_ = m.get("platform")
            model.space_fingerprint_ = m.get("space_fingerprint")
            model.training_sha256_ = m.get("training_sha256")
            model.fit_info_ = m.get("fit_info", {})
            learners_doc = m["learners"]
        except (KeyError, TypeError, ValueError) as e:
            raise _err(
                "incomplete model manifest",
                "every field CostModel.save writes",
                f"an error reading it ({e!r})",
                "Retrain and re-save the model.",
            ) from e
        if model.schema_.feature_names != m.get("feature_names"):
            raise _err(
                "inconsistent model manifest",
                "feature_names matching the schema",
                "a mismatch",
                "Retrain and re-save the model.",
            )
        import lightgbm as lgb
        import skops.io as sio
        import xgboost as xgb

        model.learners_, model.correctors_ = {}, {}
        for t in model.targets_:
            names = learners_doc[t]
            unlisted = [n for n in names.values() if n not in files]
            if unlisted:
                raise _err(
                    "model file without checksum",
                    "every model file listed in manifest files",
                    unlisted,
                    "Retrain and re-save the model.",
                )
            try:
                booster = xgb.Booster()
                booster.load_model(str(d / names["xgb"]))
                lgbm = lgb.Booster(model_file=str(d / names["lgbm"]))
                et = sio.load(d / names["et"], trusted=_SKOPS_TRUSTED)
                corr = (
                    lgb.Booster(model_file=str(d / names["corrector"]))
                    if "corrector" in names
                    else None
                )
            except Exception as e:  # noqa: BLE001 - library-specific load errors
                raise _err(
                    f"unreadable model file for target {t!r}",
                    "files CostModel.save wrote",
                    f"{type(e).__name__}: {e}",
                    "Retrain the model with this carb_nas version.",
                ) from e
            from sklearn.ensemble import ExtraTreesRegressor

            if not isinstance(et, ExtraTreesRegressor):
                raise _err(
                    "unexpected object in the ExtraTrees file",
                    "an ExtraTreesRegressor",
                    type(et).__name__,
                    "Retrain the model.",
                )
            model.learners_[t] = {"xgb": booster, "lgbm": lgbm, "et": et}
            model.correctors_[t] = corr
        model.feature_names_in_ = np.asarray(model.schema_.input_columns, dtype=object)
        model.n_features_in_ = len(model.schema_.input_columns)
        return model


def _metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    resid = y - p
    ss = float(((y - y.mean()) ** 2).sum())
    return {
        "r2": 1 - float((resid**2).sum()) / ss if ss > 0 else float("nan"),
        "mae": float(np.abs(resid).mean()),
        "mape": float(np.mean(np.abs(resid) / np.maximum(np.abs(y), 1e-12))),
    }


def _library_versions() -> dict[str, str]:
    import lightgbm
    import sklearn
    import skops
    import xgboost

    return {
        "xgboost": xgboost.__version__,
        "lightgbm": lightgbm.__version__,
        "scikit-learn": sklearn.__version__,
        "skops": skops.__version__,
        "numpy": np.__version__,
    }


def _platform_dict(platform: Mapping[str, Any] | str | None) -> dict[str, Any] | None:
    if platform is None:
        return None
    if isinstance(platform, str):
        parts = platform.split("/")
        out: dict[str, Any] = {"platform": platform}
        if len(parts) == 3:
            out.update(zip(("device", "runtime", "precision"), parts))
        return out
    if not isinstance(platform, Mapping):
        raise _err(
            "invalid platform",
            "a fingerprint dict or a platform string such as 'cpu/torch/fp32'",
            type(platform).__name__,
            "Pass one of those.",
        )
    return json.loads(json.dumps(_jsonable(dict(platform)), allow_nan=False))


# -- configs -> X ---------------------------------------------------------------------------
def model_inputs(frame: pd.DataFrame) -> pd.DataFrame:
    """The model's ``X`` for a frame of configs (``CONFIG_COLUMNS``, e.g. a dataset or
    ``Space.grid()``): the config columns (``family``, ``precision`` and ``runtime`` as
    categorical labels), the architecture features of ``carb_nas.features.compute_features``
    and any telemetry columns of ``frame`` that hold values. Index preserved."""
    from carb_nas.features import compute_features
    from carb_nas.space import CONFIG_COLUMNS, normalize_config_frame

    if not isinstance(frame, pd.DataFrame):
        raise _err(
            "unusable configs",
            f"a DataFrame with the config columns {list(CONFIG_COLUMNS)}",
            type(frame).__name__,
            "Pass a DataFrame.",
        )
    cfg = frame
    missing = [c for c in CONFIG_COLUMNS if c not in frame.columns]
    if missing:
        try:
            cfg = normalize_config_frame(frame)
        except Exception as e:  # noqa: BLE001 - InputFileError etc.
            raise _err(
                "not a configs frame",
                f"the config columns {list(CONFIG_COLUMNS)}",
                f"columns {list(map(str, frame.columns))[:12]}",
                "Pass configs (e.g. Space.grid() or a dataset), or build X yourself "
                "for a generic table.",
            ) from e
    cfg = cfg[list(CONFIG_COLUMNS)]
    feats = compute_features(cfg)
    X = pd.concat([cfg, feats.drop(columns=[c for c in feats.columns if c in cfg.columns])], axis=1)
    for col in ("family", "precision", "runtime"):
        X[col] = X[col].astype(str).astype(object)
    for col in TELEMETRY_COLUMNS:
        if col in frame.columns:
            v = pd.to_numeric(frame[col], errors="coerce")
            if v.notna().any():
                X[col] = v.to_numpy(dtype=float)
    return X


# Per-batch resources whose fitted non-negative costs sum to a latency (or energy) prior:
# arithmetic (with the slower native-kernel FLOPs counted again), weights read, activations
# written, pages faulted in for buffers of >= 32 MiB, and a per-layer overhead. On the shipped
# torch rows the fit prices ``mmap_mb`` at 0.37 ms/MB; benchmarks/page_faults.py measures 0.36-0.39.
# Left out, though the trees use them: ``onednn_weight_mb`` (fitted at zero cost) and
# ``pool_in_mb`` (its cost per MB is not stable across batch sizes: on ONNX Runtime INT8 it
# fits at 3.4 ms/MB on batch > 8 and 1.0 on batch <= 8, and leave-one-batch-tier-out latency
# R2 fell from 0.77 to 0.15 with it).
_RESOURCE_COLUMNS = [
    "flops",
    "native_conv_flops",
    "param_mb",
    "act_mb_total",
    "mmap_mb",
    "n_conv",
]
PHYSICAL_OFFSETS: dict[str, str | list[str]] = {
    "peak_mem_mb": "tensor_peak_mb",
    "latency_ms": _RESOURCE_COLUMNS,
    "energy_j": _RESOURCE_COLUMNS,
}


def physical_offsets(X: pd.DataFrame, targets: Sequence[str]) -> dict[str, str | list[str]]:
    """The :data:`PHYSICAL_OFFSETS` entries usable for ``targets`` with the columns of ``X``."""
    out: dict[str, str | list[str]] = {}
    for t, spec in PHYSICAL_OFFSETS.items():
        cols = [spec] if isinstance(spec, str) else spec
        if t in targets and all(c in X.columns for c in cols):
            out[t] = spec
    return out


# Measurement-side columns that are never features (they describe or derive from the result).
_NOT_FEATURES = {
    c
    for c in SCHEMA
    if c not in ("family", "depth", "width", "resolution", "batch_size", "precision", "runtime")
} - {"sm_util", "mem_util", "sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_limit_w"}


def _fake_rows(frame: pd.DataFrame) -> tuple[str, int] | None:
    for col in ("meter", "device", "device_name", "peak_mem_method"):
        if col in frame:
            bad = frame[col].astype(str).str.lower().str.contains("fake", regex=False)
            if bad.any():
                return col, int(np.flatnonzero(bad.to_numpy())[0])
    return None


def _rows_platform(frame: pd.DataFrame) -> dict[str, Any] | None:
    """The most common fingerprint of the rows, with the platform string added."""
    plat: dict[str, Any] | None = None
    if "fingerprint" in frame and frame["fingerprint"].notna().any():
        text, _ = Counter(frame["fingerprint"].dropna().astype(str)).most_common(1)[0]
        try:
            doc = json.loads(text)
            plat = doc if isinstance(doc, dict) else {"fingerprint": doc}
        except json.JSONDecodeError:
            plat = {"fingerprint": text}
    for col in ("platform", "device", "device_name", "runtime", "precision", "threads"):
        if col in frame and frame[col].notna().any() and frame[col].nunique() == 1:
            plat = plat or {}
            value = frame[col].dropna().iloc[0]
            plat.setdefault(col, value.item() if isinstance(value, np.generic) else value)
    return plat


def prepare_table(
    frame: pd.DataFrame, source: str, targets: tuple[str, ...] | list[str] = ()
) -> dict[str, Any]:
    """Rows -> ``{"X", "Y", "targets", "platform", "notes"}`` for training or evaluation."""
    from carb_nas.space import CONFIG_COLUMNS

    notes: list[str] = []
    fake = _fake_rows(frame)
    if fake:
        col, i = fake
        raise ModelError(
            f"{source}: rows from a test double at data row {i + 1} (column {col!r} = "
            f"{frame[col].iloc[i]!r}): expected real measurements only, got fake ones. Remove "
            "those rows; fake meters and devices exist only for tests."
        )
    if "status" in frame:
        ok = frame["status"].astype(str) == "ok"
        if (~ok).any():
            notes.append(f"dropped {int((~ok).sum())} rows with status != ok")
        frame = frame[ok].reset_index(drop=True)
    if targets:
        missing = [t for t in targets if t not in frame]
        if missing:
            raise ModelError(
                f"{source}: target column(s) {missing} missing: expected them among "
                f"the columns {list(frame.columns)[:20]}. Check --target."
            )
        found = list(targets)
    else:
        found = [t for t in TARGETS if t in frame and frame[t].notna().any()]
        empty = [t for t in TARGETS if t in frame and t not in found]
        if empty:
            notes.append(f"no values for {empty} (e.g. no energy meter): not modelled")
    if not found:
        raise ModelError(
            f"{source}: no target column: expected at least one of {list(TARGETS)} with values "
            f"(or --target NAME for a generic table), got columns {list(frame.columns)[:20]}. "
            "Pass a table of measurements."
        )
    if not len(frame):
        raise ModelError(
            f"{source}: no usable rows: expected rows with status == ok, got none. "
            "Measure some configs first."
        )
    if all(c in frame for c in CONFIG_COLUMNS):
        X = model_inputs(frame)
    else:
        drop = [c for c in frame.columns if c in found or c in _NOT_FEATURES or c == "key"]
        X = frame.drop(columns=drop)
        notes.append(f"generic table: features {list(X.columns)[:12]}")
    return {
        "X": X,
        "Y": frame[found],
        "targets": found,
        "platform": _rows_platform(frame),
        "notes": notes,
        "frame": frame,
    }


def default_model_dir(platform: str = "cpu/torch/fp32") -> Path:
    """Where the model shipped for ``platform`` lives (carb_nas/data/models/<platform>)."""
    return Path(__file__).resolve().parent / "data" / "models" / platform.replace("/", "_")


DEFAULT_MODEL_PRESET = "carb"


def default_model_cache_dir() -> Path:
    """Where default models trained on first use are cached: ``$CARB_NAS_CACHE/models`` or
    ``~/.cache/carb_nas/models``."""
    root = os.environ.get("CARB_NAS_CACHE") or Path.home() / ".cache" / "carb_nas"
    return Path(root) / "models"


def load_default_model(platform: str = "cpu/torch/fp32", verbose: bool = True) -> CostModel:
    """The default cost model for ``platform`` (e.g. ``"cpu/torch/fp32"``).

    A model shipped in ``carb_nas/data/models/<platform>`` wins. Otherwise the model is
    trained on first use from the dataset shipped for that platform (the CARB preset with
    physical offsets, every ok row, seed 0, one thread per learner) and cached under
    :func:`default_model_cache_dir`, keyed by a hash of the dataset and of the recipe
    (feature columns, offsets, format, preset): a change to either retrains, later calls only
    load. (A CARB-preset model is 30-80 MB, mostly ExtraTrees: too large for
    git.)
    """
    d = default_model_dir(platform)
    if (d / "manifest.json").is_file():
        return CostModel.load(d)
    from carb_nas.datasets import list_datasets, load_dataset

    shipped = [info["platform"] for info in list_datasets()]
    if platform not in shipped:
        raise _err(
            f"no shipped dataset or model for platform {platform!r}",
            f"one of {shipped or '(none shipped)'}",
            repr(platform),
            "Train one: `carb-nas train DATASET -o MODEL_DIR`, then load it with "
            "CostModel.load(MODEL_DIR).",
        )
    data = prepare_table(load_dataset(platform, ok_only=True), f"shipped dataset {platform}")
    X = data["X"]
    offsets = physical_offsets(X, data["targets"])
    # the key covers the data and the recipe (features, offsets, format, preset sizes), so an
    # upgrade that changes any of them retrains instead of loading a stale model
    recipe = json.dumps(
        [list(X.columns), offsets, FORMAT_VERSION, PRESETS[DEFAULT_MODEL_PRESET]], sort_keys=True
    )
    digest = hashlib.sha256((frame_sha256(data["frame"]) + recipe).encode()).hexdigest()[:16]
    name = f"{platform.replace('/', '_')}-{DEFAULT_MODEL_PRESET}-{digest}"
    cached = default_model_cache_dir() / name
    if (cached / "manifest.json").is_file():
        try:
            return CostModel.load(cached)
        except ModelError:
            shutil.rmtree(cached, ignore_errors=True)  # damaged cache entry: retrain it
    if verbose:
        print(
            f"carb_nas: training the default {platform} model on {len(X)} shipped rows "
            f"(first use only; cached in {cached.parent})",
            file=sys.stderr,
            flush=True,
        )
    t0 = time.perf_counter()
    model = CostModel(
        preset=DEFAULT_MODEL_PRESET, target_offsets=offsets or None, random_state=0, n_jobs=1
    )
    model.fit(X, data["Y"], platform=data["platform"])
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f".{name}.{os.getpid()}.tmp")
    model.save(tmp)
    try:
        tmp.replace(cached)  # atomic; a concurrent first run that won leaves ours unused
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    if verbose:
        print(f"carb_nas: trained in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return model
