"""The default-model registry: a model per shipped platform, trained on first use and cached,
and :func:`load_model`, the one way every command turns a ``--model`` value into a model."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from carb_nas.costmodel._common import FORMAT_VERSION, err, frame_sha256
from carb_nas.costmodel._estimator import CostModel
from carb_nas.costmodel._learners import resolve_preset
from carb_nas.costmodel._prepare import physical_offsets, prepare_table
from carb_nas.errors import MissingFileError, ModelError

CACHE_ENV = "CARB_NAS_CACHE"
# The default recipe: the CARB preset with physical offsets (added per platform from the
# columns present), every ok row, seed 0, one thread per learner.
DEFAULT_MODEL_PARAMS: Mapping[str, Any] = MappingProxyType(
    {"preset": "carb", "random_state": 0, "n_jobs": 1}
)


def default_model_dir(platform: str = "cpu/torch/fp32") -> Path:
    """Where the model shipped for ``platform`` lives (carb_nas/data/models/<platform>)."""
    return Path(__file__).resolve().parents[1] / "data" / "models" / platform.replace("/", "_")


def default_model_cache_dir() -> Path:
    """Where default models trained on first use are cached: ``$CARB_NAS_CACHE/models`` or
    ``~/.cache/carb_nas/models``."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "carb_nas"
    return Path(root) / "models"


def _check_writable(cache: Path) -> None:
    """Fail before training, not after: the cache must take a new entry."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=cache):
            pass
    except OSError as e:
        raise ModelError(
            f"default-model cache {str(cache)!r} is not writable: expected a directory a model "
            f"can be cached in, got {type(e).__name__}: {e.strerror or e}. Set {CACHE_ENV} to "
            "a writable directory (or fix its permissions)."
        ) from e


def load_default_model(
    platform: str = "cpu/torch/fp32",
    verbose: bool = True,
    *,
    params: Mapping[str, Any] | None = None,
) -> CostModel:
    """The default cost model for ``platform``: a shipped dataset name (``"cpu/torch/fp32"``,
    ``"cpu/torch/fp32/zoo"``, ``"cpu/openvino/int8"``; ``carb_nas.datasets.shipped_names``).

    A model shipped in ``carb_nas/data/models/<platform>`` wins. Otherwise the model is
    trained on first use from the dataset shipped for that platform with
    :data:`DEFAULT_MODEL_PARAMS` (updated by ``params``, e.g. ``{"preset": "fast"}`` for a
    cheaper one) and cached under :func:`default_model_cache_dir`, keyed by a hash of the
    dataset and of the recipe (feature columns, offsets, format, every resolved parameter): a
    change to either retrains, later calls only load. (A CARB-preset model is 30-80 MB, mostly
    ExtraTrees: too large for git.) An unwritable cache is refused before training.
    """
    d = default_model_dir(platform)
    if (d / "manifest.json").is_file():
        return _with_origin(CostModel.load(d), "shipped")
    from carb_nas.datasets import load_dataset

    name = _shipped_dataset(platform).stem  # a bare name and its qualified one share a model
    data = prepare_table(load_dataset(platform, ok_only=True), f"shipped dataset {platform}")
    X = data["X"]
    offsets = physical_offsets(X, data["targets"])
    recipe_params = {**DEFAULT_MODEL_PARAMS, "target_offsets": offsets or None, **(params or {})}
    model = CostModel(**recipe_params)
    resolved = resolve_preset(model.preset, model.learner_params)
    # the key covers the data and the recipe (features, offsets, format, parameters), so an
    # upgrade that changes any of them retrains instead of loading a stale model
    recipe = json.dumps(
        [list(X.columns), offsets, FORMAT_VERSION, resolved, model.get_params()],
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha256((frame_sha256(data["frame"]) + recipe).encode()).hexdigest()[:16]
    name = f"{name}-{model.preset}-{digest}"
    cache = default_model_cache_dir()
    cached = cache / name
    if (cached / "manifest.json").is_file():
        try:
            return _with_origin(CostModel.load(cached), "loaded")
        except ModelError:
            shutil.rmtree(cached, ignore_errors=True)  # damaged cache entry: retrain it
    _check_writable(cache)
    if verbose:
        print(
            f"carb_nas: training the default {platform} model on {len(X)} shipped rows "
            f"(first use only; cached in {cache})",
            file=sys.stderr,
            flush=True,
        )
    t0 = time.perf_counter()
    model.fit(X, data["Y"], platform=data["platform"])
    try:
        model.save(cached)  # atomic; a concurrent first run that won is replaced by an equal one
    except (OSError, ModelError) as e:
        if verbose:
            print(f"carb_nas: could not cache the model ({e})", file=sys.stderr)
    if verbose:
        print(f"carb_nas: trained in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return _with_origin(model, "trained")


def _shipped_dataset(platform: str) -> Path:
    """The shipped dataset a default model of ``platform`` is trained on; ModelError naming
    the shipped names otherwise."""
    from carb_nas.datasets import dataset_path, shipped_names

    shipped = shipped_names()
    if platform not in shipped:
        raise err(
            f"no shipped dataset or model for platform {platform!r}",
            f"one of {shipped or '(none shipped)'}",
            repr(platform),
            "Train one: `carb-nas train DATASET -o MODEL_DIR`, then load it with "
            "CostModel.load(MODEL_DIR).",
        )
    return dataset_path(platform)


#: how :func:`load_default_model` got its model, for messages (``model.default_origin_``)
DEFAULT_ORIGINS = {
    "shipped": "a model file shipped with carb_nas",
    "loaded": "loaded: trained on first use from its shipped dataset, cached",
    "trained": "trained on first use from its shipped dataset, now cached",
}


def _with_origin(model: CostModel, origin: str) -> CostModel:
    model.default_origin_ = DEFAULT_ORIGINS[origin]
    return model


def check_model(spec: str | Path, role: str = "model") -> None:
    """What :func:`load_model` refuses, refused without loading or training anything: a
    ``spec`` that is neither a directory nor a shipped platform name (``MissingFileError``),
    or a platform name with no shipped model or dataset (``ModelError``). Commands that load
    several models check them all first, so a bad second one costs no training of the
    first."""
    p = Path(spec)
    if p.is_dir():
        return
    text = str(spec)
    if text.count("/") in (2, 3) and not p.exists():  # device/runtime/precision[/qualifier]
        if not (default_model_dir(text) / "manifest.json").is_file():
            _shipped_dataset(text)
        return
    raise MissingFileError(
        f"{role} not found: expected a directory written by `carb-nas train` (or "
        f"CostModel.save) or a shipped platform name such as cpu/torch/fp32 or "
        f"cpu/torch/fp32/zoo, got {text!r}. Check the path."
    )


def load_model(spec: str | Path, role: str = "model") -> CostModel:
    """A CostModel from a saved model directory or a shipped platform name such as
    ``cpu/torch/fp32``, ``cpu/torch/fp32/zoo`` or ``cpu/openvino/int8`` (see
    :func:`load_default_model`). ``role`` names the option in the
    error, e.g. ``"--source-model"``."""
    p = Path(spec)
    if p.is_dir():
        from carb_nas.costmodel._kernels import is_module_model_dir

        if is_module_model_dir(p):  # predicts traced modules (rows + ops), not config frames
            raise ModelError(
                f"unusable {role}: expected a CostModel directory (written by `carb-nas "
                f"train`), got the kernel-level ModuleCostModel in {str(p)!r}, which predicts "
                "model specs only. Use it with `carb-nas predict --model-spec` or "
                "carb_nas.predict_costs, or pass a CostModel here."
            )
        return CostModel.load(p)
    check_model(spec, role)
    return load_default_model(str(spec))


def load_predictor(spec: str | Path, role: str = "model") -> Any:
    """:func:`load_model`, or the kernel-level ``ModuleCostModel`` a directory holds: for the
    callers that predict model specs (``predict_costs``, ``predict --model-spec``)."""
    from carb_nas.costmodel._kernels import ModuleCostModel, is_module_model_dir

    p = Path(spec)
    if p.is_dir() and is_module_model_dir(p):
        return ModuleCostModel.load(p)
    return load_model(spec, role)
