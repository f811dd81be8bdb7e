"""The input schema: what ``fit`` learned about ``X``'s columns, and ``X`` -> feature matrix.

Numeric columns are used as they are, heavy-tailed ones through ``log1p``; categorical columns
(object, string or category dtype) are one-hot encoded with the levels seen in training; CARB's
telemetry interactions are added when ``sm_util`` and ``mem_util`` exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.costmodel._common import TELEMETRY_COLUMNS, err, show
from carb_nas.errors import ModelError

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
MISSING_LABEL = "<missing>"
_SHOW_LABELS = 3  # labels an unseen-label message names before counting the rest


def _as_frame(X: Any, what: str = "X") -> pd.DataFrame:
    if X is None:
        if what == "Y":
            raise err(
                "no targets",
                "measured targets Y (this estimator requires y to be "
                "passed, but the target y is None)",
                None,
                "Call fit(X, Y).",
            )
        raise err("no features", "a DataFrame X", None, "Pass X.")
    if isinstance(X, pd.Series):
        X = X.to_frame(name=X.name if X.name is not None else ("y" if what == "Y" else "x0"))
    if isinstance(X, pd.DataFrame):
        if all(isinstance(c, str) for c in X.columns):
            return X
        return X.rename(columns=str)
    if hasattr(X, "tocsr") or hasattr(X, "sparse"):
        raise err(
            f"unusable {what}",
            "a dense table (sparse input is not supported)",
            type(X).__name__,
            "Convert it with .toarray() or pass a DataFrame.",
        )
    try:
        arr = np.asarray(X)
    except Exception as e:  # noqa: BLE001 - anything not array-like
        raise err(
            f"unusable {what}",
            "a pandas DataFrame or a 2-D array",
            type(X).__name__,
            "Pass a DataFrame of feature columns.",
        ) from e
    if arr.ndim == 1 and what == "Y":
        return pd.DataFrame({"y": arr})
    if arr.ndim != 2:
        raise err(
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
    return s.astype(object).where(s.notna(), MISSING_LABEL).astype(str).to_numpy()


def _some(labels: list[str], n: int = _SHOW_LABELS) -> str:
    """At most ``n`` labels, then how many more: ``'a', 'b', 'c' and 147 more``."""
    shown = ", ".join(repr(v) for v in labels[:n])
    return f"{shown} and {len(labels) - n} more" if len(labels) > n else shown


class InputSchema:
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
    def learn(cls, X: pd.DataFrame, architecture_only: bool, max_categories: int) -> InputSchema:
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
                    raise err(
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
                raise err(
                    f"complex feature column {name!r}",
                    "real numbers (Complex data not supported)",
                    f"dtype {s.dtype}",
                    "Pass real numbers.",
                )
            if not _is_categorical(s):
                raise err(
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
                raise err(
                    f"non-numeric value in numeric feature column {name!r}",
                    "a number in every cell (the column is mostly numeric)",
                    show(present.iloc[i]),
                    "Fix that cell (use an empty cell for a missing value).",
                )
            if len(present) and nums.notna().all() and not isinstance(s.dtype, pd.CategoricalDtype):
                raise err(
                    f"numeric feature column {name!r} stored as text",
                    "a numeric dtype",
                    f"dtype {s.dtype}",
                    f"Convert it first, e.g. X[{name!r}] = pd.to_numeric(X[{name!r}]).",
                )
            levels = sorted(set(_cat_values(s)))
            if len(levels) > max_categories:
                raise err(
                    f"non-numeric feature column {name!r} with too many distinct labels",
                    f"numbers, or a categorical column with at most {max_categories} labels",
                    f"{len(levels)} labels such as {levels[:3]}",
                    "Drop identifier/text columns (keys, timestamps) from X, or raise "
                    "max_categories.",
                )
            categorical[name] = levels
        if not numeric and not categorical:
            raise err(
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
            raise err(
                "feature schema mismatch: X lacks column(s) the model was trained on",
                f"the columns {self.input_columns}",
                f"missing {missing}",
                fix,
            )

    def transform(self, X: pd.DataFrame, handle_unknown: str = "error") -> np.ndarray:
        """The float32 feature matrix of ``X``; ``handle_unknown='ignore'`` encodes a label
        unseen in training as missing instead of refusing it."""
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
                    raise err(
                        f"feature schema mismatch: non-numeric value in column {col!r} "
                        f"at row {i + 1}",
                        "a number (the model was trained on a numeric column)",
                        show(s.iloc[i]),
                        "Fix that cell.",
                    )
                s = num
            try:
                v = s.to_numpy(dtype=float, na_value=np.nan)
            except (TypeError, ValueError) as e:
                raise err(
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
            if unseen and handle_unknown == "ignore":
                # as scikit-learn's encoders do: an unseen label counts as missing
                vals = np.where(np.isin(vals, levels), vals, MISSING_LABEL)
            elif unseen:
                raise ModelError(
                    f"feature schema mismatch: unseen label(s) in column {col!r}: expected one "
                    f"of the {len(levels)} labels seen in training ({_some(levels)}), got "
                    f"{len(unseen)} unseen ({_some(unseen)}). Train on data that has them, or "
                    "pass handle_unknown='ignore' to treat them as missing."
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
    from scipy.stats import skew

    return float(skew(v)) if v.std() > 0 else 0.0
