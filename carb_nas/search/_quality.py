"""Quality: the objective that says how good a network is (maximized).

Minimizing costs alone makes the smallest network win. The built-in default,
:func:`capacity_proxy`, is ``log10(params) + log10(FLOPs per image)``: it grows with depth,
width and input resolution, the axes along which ResNet accuracy grows in published scaling
studies, with diminishing returns. It is a *proxy for model capacity, not accuracy*: it knows
nothing of the data set, the training recipe or overfitting, and it ignores batch size,
precision and runtime. Give your own with ``quality="module:function"`` (maximized), called as
``function(config)`` or ``function(config, features)`` (``config`` a
:class:`carb_nas.space.Config`, ``features`` a dict of its architecture features), returning a
finite number; or mark a function ``vectorized = True`` to receive one DataFrame (config columns
+ features) and return one value per row.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from carb_nas.errors import ConfigError
from carb_nas.space import CONFIG_COLUMNS, frame_to_configs

QUALITY = "quality"


class QualityError(ConfigError):
    """The quality callable cannot be imported, or raised, or returned something unusable."""


# -- quality ---------------------------------------------------------------------------------
def capacity_proxy(frame: pd.DataFrame) -> np.ndarray:
    """Built-in quality: ``log10(params) + log10(FLOPs per image)`` (higher = more capacity).

    ``frame`` holds the config columns and the features ``params`` and ``flops`` (per batch).
    A proxy of capacity, NOT accuracy (see the module docstring).
    """
    params = frame["params"].to_numpy(dtype=float)
    flops_per_image = frame["flops"].to_numpy(dtype=float) / frame["batch_size"].to_numpy(float)
    return np.log10(params) + np.log10(flops_per_image)


capacity_proxy.vectorized = True  # type: ignore[attr-defined]


def load_quality(spec: str | Callable | None) -> Callable:
    """The quality function for ``spec``: None -> :func:`capacity_proxy`; a callable as is;
    ``"module:function"`` imported (``module`` may also be a path to a ``.py`` file)."""
    if spec is None:
        return capacity_proxy
    if callable(spec):
        return spec
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise QualityError(
            f"malformed quality callable: expected 'module:function' (e.g. "
            f"'mypkg.scores:accuracy'), got {spec!r}. Name an importable module and a function."
        )
    mod_name, fn_name = spec.split(":")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.exists():
                raise FileNotFoundError(f"no such file {mod_name}")
            mod_spec = importlib.util.spec_from_file_location(path.stem, path)
            if mod_spec is None or mod_spec.loader is None:
                raise ImportError(f"{mod_name} cannot be loaded as a Python module")
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's module's
        raise QualityError(
            f"cannot import the quality module {mod_name!r}: expected an importable module "
            f"(on PYTHONPATH or a .py path), got {type(e).__name__}: {e}. Check the name and "
            "that the module imports on its own."
        ) from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        public = sorted(n for n in dir(module) if not n.startswith("_"))
        raise QualityError(
            f"quality callable not found: expected a function {fn_name!r} in module "
            f"{mod_name!r}, got {type(fn).__name__ if fn is not None else 'nothing'}. "
            f"Check the spelling; the module defines {public[:10]}."
        )
    return fn


def call_quality(fn: Callable, frame: pd.DataFrame) -> np.ndarray:
    """Quality per row of ``frame`` (config columns + features), as finite floats."""
    name = getattr(fn, "__qualname__", repr(fn))
    if getattr(fn, "vectorized", False):
        try:
            values = np.asarray(fn(frame), dtype=float).reshape(-1)
        except Exception as e:  # noqa: BLE001 - the user's function raised
            raise QualityError(
                f"the quality function {name} raised {type(e).__name__}: {e} (vectorized call on "
                f"{len(frame)} configs). Fix the function; it must return one number per row."
            ) from e
        if len(values) != len(frame):
            raise QualityError(
                f"the quality function {name} returned {len(values)} values: expected one per "
                f"config ({len(frame)}). Return an array as long as the frame."
            )
    else:
        try:
            n_args = len(
                [
                    p
                    for p in inspect.signature(fn).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                ]
            )
        except (TypeError, ValueError):
            n_args = 1
        feats = [c for c in frame.columns if c not in CONFIG_COLUMNS]
        configs = frame_to_configs(frame)
        records = frame[feats].to_dict(orient="records")
        values = np.empty(len(frame))
        for i, (config, features) in enumerate(zip(configs, records)):
            try:
                out = fn(config, features) if n_args >= 2 else fn(config)
                values[i] = float(out)
            except Exception as e:  # noqa: BLE001 - the user's function raised
                raise QualityError(
                    f"the quality function {name} failed on {config}: {type(e).__name__}: {e}. "
                    "It must return a finite number (higher is better) for every config."
                ) from e
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise QualityError(
            f"the quality function {name} returned {values[i]!r} for "
            f"{frame_to_configs(frame.iloc[[i]])[0]}: expected a finite number. Return a "
            "finite score for every config."
        )
    return values
