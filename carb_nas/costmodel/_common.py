"""Pieces every part of the cost-model stage shares: errors, hashes, versions, constants."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.errors import ModelError
from carb_nas.space import CONFIG_COLUMNS

FORMAT_NAME = "carb_nas.costmodel"
# 2: offsets may be fitted sums of columns (``offset_coefs``); 3: the manifest carries the
# SHA-256 of its own canonical content (``manifest_sha256``) and the resolved learner params
FORMAT_VERSION = 3
TELEMETRY_COLUMNS = (
    "sm_util",
    "mem_util",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "power_limit_w",
)
MIN_TRAIN_ROWS = 20  # rows the training part of a fit needs at least


def plain(value: Any) -> Any:
    """``value`` with numpy scalars (also inside lists, tuples and dicts) as Python numbers, so
    a message shows ``-4.0`` rather than ``np.float64(-4.0)``."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def show(value: Any) -> str:
    """``repr`` of ``value`` with numpy scalars as plain numbers."""
    return repr(plain(value))


def err(what: str, expected: str, got: Any, fix: str) -> ModelError:
    """A one-line ModelError: what was wrong, what was expected, what came, how to fix it."""
    return ModelError(f"{what}: expected {expected}, got {plain(got)}. {fix}")


def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("carb-nas")
    except Exception:  # noqa: BLE001 - source tree without install metadata
        return "0.0.0"


def library_versions() -> dict[str, str]:
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


def booster_from_text(text: str, what: str, fix: str) -> Any:
    """A LightGBM booster from its saved text; a damaged text is a one-line ``ModelError``
    naming ``what`` it was and how to ``fix`` it, not LightGBM's traceback."""
    import lightgbm as lgb

    try:
        return lgb.Booster(model_str=text)
    except lgb.basic.LightGBMError as e:
        raise ModelError(
            f"damaged {what}: expected a LightGBM booster's text, got {text[:40]!r}... ({e}). {fix}"
        ) from e


def check_config_columns(X: pd.DataFrame, who: str) -> None:
    """Refuse, in one line, a frame without the config columns a model of configs reads."""
    missing = [c for c in CONFIG_COLUMNS if c not in X.columns]
    if missing:
        raise ModelError(
            f"the {who} predicts configs: expected the config columns {list(CONFIG_COLUMNS)}, "
            f"got a frame without {missing}. Pass costmodel.model_inputs(configs)."
        )


def sha256_file(path: Path) -> str:
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


def relative_nnls(M: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative costs ``c`` (one per column of ``M``) minimizing the relative error of
    ``M @ c`` against ``y > 0``: ``target_offsets``' physical sums and the active committee's
    prior. Columns are scaled to their maximum first so the solver sees comparable columns."""
    from scipy.optimize import nnls

    scale = M.max(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    c, _ = nnls(M / scale / y[:, None], np.ones(len(y)))
    return c / scale
