"""The default-model registry: a model per shipped platform, trained on first use and cached.

``carb_nas.predictors.load_predictor`` is the one place that turns a platform name into a
predictor; it builds it from the models of this registry."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from carb_nas.costmodel._common import FORMAT_VERSION, TELEMETRY_COLUMNS, err, frame_sha256
from carb_nas.costmodel._estimator import CostModel
from carb_nas.costmodel._kernels import is_module_model_dir  # noqa: F401 - re-exported
from carb_nas.costmodel._learners import resolve_preset
from carb_nas.costmodel._prepare import physical_offsets, prepare_table, schema_rows
from carb_nas.errors import MissingFileError, ModelError

CACHE_ENV = "CARB_NAS_CACHE"
# The default recipe: the CARB preset with physical offsets (added per platform from the
# columns present), every ok row, seed 0, one thread per learner.
DEFAULT_MODEL_PARAMS: Mapping[str, Any] = MappingProxyType(
    {"preset": "carb", "random_state": 0, "n_jobs": 1}
)


_SHIPPED_MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def default_model_dir(platform: str = "cpu/torch/fp32") -> Path:
    """Where the model shipped for ``platform`` lives (carb_nas/data/models/<platform>)."""
    return _SHIPPED_MODELS / platform.replace("/", "_")


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
    ``"cpu/torch/fp32/zoo@intel-avx512"``, ``"cpu/openvino/int8"``;
    ``carb_nas.datasets.shipped_names``).

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
    from carb_nas.datasets import TARGETS, load_dataset

    name = _shipped_dataset(platform).stem  # a bare name and its qualified one share a model
    source = f"shipped dataset {platform}"
    rows = load_dataset(platform, ok_only=True)  # the rows prepare_table keeps, index 0..n-1
    targets = [t for t in TARGETS if t in rows and rows[t].notna().any()]
    # the feature columns from a few rows: featurizing every row only to name the cache entry
    # cost ~4 min on each load of a multi-family dataset's model
    sample_X = prepare_table(schema_rows(rows), source, targets)["X"]
    columns = list(sample_X.columns)
    offsets = physical_offsets(sample_X, targets)
    recipe_params = {**DEFAULT_MODEL_PARAMS, "target_offsets": offsets or None, **(params or {})}
    if set(TELEMETRY_COLUMNS) & set(columns):
        # a GPU dataset's rows carry the clocks and temperature seen while measuring; a default
        # model predicts configs nobody has run, so it cannot read them (the CPU datasets have
        # none: their recipe, and so their cache keys, stay as they were)
        recipe_params.setdefault("architecture_only", True)
    model = CostModel(**recipe_params)
    resolved = resolve_preset(model.preset, model.learner_params)
    # the key covers the data and the recipe (features, offsets, format, parameters), so an
    # upgrade that changes any of them retrains instead of loading a stale model
    recipe = json.dumps(
        [columns, offsets, FORMAT_VERSION, resolved, model.get_params()],
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha256((frame_sha256(rows) + recipe).encode()).hexdigest()[:16]
    name = f"{name}-{model.preset}-{digest}"
    cache = default_model_cache_dir()
    cached = cache / name
    loaded = _load_cached(cached, CostModel.load)
    if loaded is not None:
        loaded.default_name_ = platform  # what `carb-nas calibrate` takes to calibrate it
        return loaded
    _check_writable(cache)
    data = prepare_table(rows, source, targets)
    X = data["X"]
    if list(X.columns) != columns:  # schema_rows missed a row that decides a column
        raise ModelError(
            f"{source}: the feature columns of a sample of its rows {columns} differ from those "
            f"of all its rows {list(X.columns)}: expected the same. Report this bug."
        )
    if verbose:
        print(
            f"carb_nas: training the default {platform} model on {len(X)} shipped rows "
            f"(first use only; cached in {cache})",
            file=sys.stderr,
            flush=True,
        )
    t0 = time.perf_counter()
    model.fit(X, data["Y"], platform=data["platform"])
    model.default_name_ = platform
    return _cache_trained(model, cached, t0, verbose, "model")


def _shipped_dataset(platform: str) -> Path:
    """The shipped dataset a default model of ``platform`` is trained on; ModelError naming
    the shipped names otherwise."""
    from carb_nas.datasets import dataset_path, shipped_names

    shipped = shipped_names()
    if platform not in shipped_names(other_spellings=True):
        raise err(
            f"no shipped dataset or model for platform {platform!r}",
            f"one of {shipped or '(none shipped)'}",
            repr(platform),
            "Train one: `carb-nas model train DATASET -o MODEL_DIR`, then load it with "
            "carb_nas.load_predictor(MODEL_DIR).",
        )
    return dataset_path(platform)


#: how :func:`load_default_model` got its model, for messages (``model.default_origin_``)
DEFAULT_ORIGINS = {
    "shipped": "a model file shipped with carb_nas",
    "loaded": "loaded: trained on first use from its shipped dataset, cached",
    "trained": "trained on first use from its shipped dataset, now cached",
}


def _load_cached(cached: Path, loader: Any) -> Any:
    """The default model cached at ``cached``, or None: absent, or damaged (then removed, so
    the caller retrains it)."""
    if (cached / "manifest.json").is_file():
        try:
            return _with_origin(loader(cached), "loaded")
        except ModelError:
            shutil.rmtree(cached, ignore_errors=True)
    return None


def _cache_trained(model: Any, cached: Path, t0: float, verbose: bool, what: str) -> Any:
    """Save a just-trained default model to ``cached`` (a failure only warns: the model is
    still usable) and mark it trained."""
    try:
        model.save(cached)  # atomic; a concurrent first run that won is replaced by an equal one
    except (OSError, ModelError) as e:
        if verbose:
            print(f"carb_nas: could not cache the {what} ({e})", file=sys.stderr)
    if verbose:
        print(f"carb_nas: trained in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return _with_origin(model, "trained")


def _with_origin(model: Any, origin: str) -> Any:
    model.default_origin_ = DEFAULT_ORIGINS[origin]
    return model


# -- the default model for any module: ModuleCostModel on the shipped zoo dataset -------------
#: the default recipe of :func:`load_default_module_model` (``ModuleCostModel`` parameters,
#: plus ``rows_per_family``: None = every measured row, N = the first N per family group by
#: key, a cheaper model for tests)
# bumped when the module model's features or fitting change within one carb_nas version
_MODULE_RECIPE_REVISION = 5
DEFAULT_MODULE_PARAMS: Mapping[str, Any] = MappingProxyType(
    {
        "mode": "kernel",
        "preset": "fast",
        "random_state": 0,
        # enough networks per family group to score as every row does, at a fraction of the fit
        "rows_per_family": 110,
        "kernel_prior": "linear",
        "kernel_geometry": True,
        "kernel_shared_conv": True,
        # a network's latency (the median of passes) is a better total than one run's op
        # profile (costmodel.anchored_ops)
        "kernel_anchor": True,
        # the kernel samples shipped beside the dataset (<stem>_kernels.csv.gz, single ops of
        # the same machine kind that the families leave empty: wide convs, odd-batch GEMVs,
        # narrow groups), each timed to the networks' typical speed by its probe
        "kernel_samples": True,
        # a network of no trained family (a user's module) gets the interval of the training
        # families each held out in turn: an unseen architecture's honest error
        "interval": "family",
    }
)


#: per platform and CPU kind (:func:`module_cpu_kind`), the shipped multi-family dataset (its
#: qualifier) the default module model trains on: each kind's own, because per-op costs differ
#: by CPU kind more than one machine factor can correct (docs/accuracy.md)
DEFAULT_MODULE_DATASET: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "cpu/torch/fp32": MappingProxyType(
            {"amd-zen4": "zoo-zen4", "amd-zen3": "zoo-zen3", "intel-avx512": "zoo"}
        )
    }
)
MODULE_CPU_KINDS = ("amd-zen4", "amd-zen3", "intel-avx512")  # ids of datasets.MACHINE_KINDS


def module_cpu_kind(isa: Sequence[str] | None = None, vendor: str | None = None) -> str:
    """Which machine kind's module model serves this CPU (an id of
    ``carb_nas.datasets.MACHINE_KINDS``): ``"intel-avx512"`` where an Intel CPU (``vendor``
    ``GenuineIntel``) has AVX-512, ``"amd-zen4"`` where another has it, otherwise
    ``"amd-zen3"`` (AVX2 only; also where /proc/cpuinfo cannot be read). ``isa`` and
    ``vendor``: :func:`carb_nas.measure.cpu_identity`'s, default this machine's (``isa`` given
    alone: vendor unknown). Each kind's per-op costs differ (dense, depthwise and grouped
    convolutions by different ratios), so no one machine factor turns one kind's model into
    another's (docs/accuracy.md)."""
    if isa is None:
        return _this_cpu_kind()
    if not any(str(f).startswith("avx512") for f in isa):
        return "amd-zen3"
    return "intel-avx512" if vendor == "GenuineIntel" else "amd-zen4"


@functools.cache
def _this_cpu_kind() -> str:
    from carb_nas.measure import cpu_identity

    identity = cpu_identity()
    return module_cpu_kind(identity.get("isa", []), identity.get("vendor"))


def _module_dataset(platform: str, cpu_kind: str | None) -> str:
    kind = module_cpu_kind() if cpu_kind is None else cpu_kind
    if kind not in MODULE_CPU_KINDS:
        raise err(
            "unknown CPU kind of a module model",
            f"one of {list(MODULE_CPU_KINDS)}",
            repr(cpu_kind),
            "Leave it out (this machine's kind) or pick one of those.",
        )
    return DEFAULT_MODULE_DATASET.get(platform, {}).get(kind, "zoo")


def zoo_dataset_paths(
    platform: str = "cpu/torch/fp32", cpu_kind: str | None = None
) -> tuple[Path, Path] | None:
    """``(rows, ops)`` of the multi-family dataset shipped for ``platform`` that its default
    module model trains on for ``cpu_kind`` (default this machine's, :func:`module_cpu_kind`;
    carb_nas/data/zoo/, :data:`DEFAULT_MODULE_DATASET`), or None where none is shipped."""
    d = Path(__file__).resolve().parents[1] / "data" / "zoo"
    stem = platform.replace("/", "_") + "_" + _module_dataset(platform, cpu_kind)
    rows, ops = d / f"{stem}.csv", d / f"{stem}_ops.csv.gz"
    return (rows, ops) if rows.is_file() and ops.is_file() else None


def zoo_kernel_samples_path(
    platform: str = "cpu/torch/fp32", cpu_kind: str | None = None
) -> Path | None:
    """The kernel samples shipped beside the default module model's dataset
    (``<dataset stem>_kernels.csv.gz``; ``cpu_kind`` as :func:`zoo_dataset_paths`), or None."""
    paths = zoo_dataset_paths(platform, cpu_kind)
    if paths is None:
        return None
    p = paths[0].with_name(paths[0].stem + "_kernels.csv.gz")
    return p if p.is_file() else None


def _zoo_training_rows(rows_csv: Path, rows_per_family: int | None) -> Any:
    import pandas as pd

    from carb_nas.costmodel._kernels import family_groups

    rows = pd.read_csv(rows_csv)
    rows = rows[(rows["status"] == "ok") & rows["latency_ms"].notna() & rows["peak_mem_mb"].notna()]
    rows = rows.sort_values("key").reset_index(drop=True)
    if rows_per_family:
        group = family_groups(rows["family"])
        rows = rows.groupby(group, sort=True).head(int(rows_per_family)).reset_index(drop=True)
    return rows


def _module_model_recipe(
    platform: str, params: Mapping[str, Any] | None, cpu_kind: str | None = None
) -> tuple[str, tuple[Path, Path], dict[str, Any]]:
    """(cache name, dataset paths, recipe parameters) of the default module model: the name
    hashes both dataset files, the recipe, the format and carb_nas's version (the features are
    traced by it), so a change to any of them names another model."""
    from carb_nas.costmodel._common import package_version
    from carb_nas.costmodel._kernels import FORMAT_VERSION as MODULE_FORMAT_VERSION

    paths = zoo_dataset_paths(platform, cpu_kind)
    if paths is None:
        raise err(
            f"no shipped multi-family dataset for platform {platform!r}",
            "cpu/torch/fp32 (carb_nas/data/zoo)",
            repr(platform),
            "Fit one on an ops campaign (ModuleCostModel().fit(*network_tables(rows, ops))) "
            "and pass its saved directory instead.",
        )
    recipe_params = {**DEFAULT_MODULE_PARAMS, **(params or {})}
    unknown = set(recipe_params) - set(DEFAULT_MODULE_PARAMS)
    if unknown:
        raise err(
            "unknown default module-model parameters",
            f"some of {sorted(DEFAULT_MODULE_PARAMS)}",
            f"{sorted(unknown)}",
            "Drop them.",
        )
    h = hashlib.sha256()
    samples = (
        zoo_kernel_samples_path(platform, cpu_kind) if recipe_params["kernel_samples"] else None
    )
    for path in (*paths, *([samples] if samples else [])):
        h.update(path.read_bytes())
    h.update(json.dumps([recipe_params, MODULE_FORMAT_VERSION, _MODULE_RECIPE_REVISION,
                         package_version()],
                        sort_keys=True, default=str).encode())  # fmt: skip
    return f"{platform.replace('/', '_')}-module-{h.hexdigest()[:16]}", paths, recipe_params


def shipped_module_model_dir(platform: str = "cpu/torch/fp32", cpu_kind: str | None = None) -> Path:
    """Where the default module model of ``platform`` and ``cpu_kind`` (today's recipe; default
    this machine's kind) is shipped: ``carb_nas/data/models/<its cache name>``.
    :func:`ship_default_module_model` writes it."""
    return _SHIPPED_MODELS / _module_model_recipe(platform, None, cpu_kind)[0]


def ship_default_module_model(
    platform: str = "cpu/torch/fp32", cpu_kind: str | None = None
) -> Path:
    """Train (or load from the cache) the default module model of ``platform`` and
    ``cpu_kind`` and save it into the package (:func:`shipped_module_model_dir`), so users load
    it instead of training it on first use. Run for each of ``MODULE_CPU_KINDS`` after any
    change to the zoo datasets or the recipe (a shipped model of another recipe is never
    loaded: its name differs; the test suite says when one is stale)."""
    model = load_default_module_model(platform, cpu_kind=cpu_kind)
    d = shipped_module_model_dir(platform, cpu_kind)
    model.save(d)
    return d


def load_default_module_model(
    platform: str = "cpu/torch/fp32",
    verbose: bool = True,
    *,
    params: Mapping[str, Any] | None = None,
    cpu_kind: str | None = None,
) -> Any:
    """The default predictor of any module on ``platform`` for ``cpu_kind`` (default this
    machine's, :func:`module_cpu_kind`: each kind's model trains on its own dataset): a
    :class:`~carb_nas.costmodel.ModuleCostModel` (per-operator models + network cascade,
    :data:`DEFAULT_MODULE_PARAMS` updated by ``params``): the one shipped for this recipe
    (:func:`shipped_module_model_dir`) when there is one; otherwise trained on first use on
    the multi-family dataset shipped for the platform (``carb_nas/data/zoo``: its networks and
    per-op table), cached under :func:`default_model_cache_dir` keyed by a hash of both
    files and of the recipe, loaded afterwards (no pickle). ``model.default_origin_`` says
    which. Raises ``ModelError`` for a platform without such a dataset; an unwritable cache
    is refused before training."""
    import pandas as pd

    from carb_nas.costmodel._kernels import ModuleCostModel, network_tables

    name, paths, recipe_params = _module_model_recipe(platform, params, cpu_kind)
    shipped = _SHIPPED_MODELS / name  # this recipe's model, if shipped
    if (shipped / "manifest.json").is_file():
        return _with_origin(ModuleCostModel.load(shipped), "shipped")
    cache = default_model_cache_dir()
    cached = cache / name
    loaded = _load_cached(cached, ModuleCostModel.load)
    if loaded is not None:
        return loaded
    _check_writable(cache)
    rows = _zoo_training_rows(paths[0], recipe_params.pop("rows_per_family"))
    if verbose:
        print(
            f"carb_nas: training the default {platform} module model on {len(rows)} shipped "
            f"networks of {rows['family'].nunique()} families and their per-op times "
            f"(first use only; cached in {cache})",
            file=sys.stderr,
            flush=True,
        )
    t0 = time.perf_counter()
    ops = pd.read_csv(paths[1])
    net, tab = network_tables(rows, ops[ops["key"].isin(set(rows["key"]))])
    samples = None
    samples_path = (
        zoo_kernel_samples_path(platform, cpu_kind) if recipe_params.pop("kernel_samples") else None
    )
    if samples_path is not None:
        from carb_nas.datasets import load_kernel_samples

        # the networks' latencies stay raw; each sample is timed to their typical probe speed
        # (the samples were measured on another VM of the same kind, at its own speed)
        probe = pd.to_numeric(rows.get("reference_ms", pd.Series(dtype=float)), errors="coerce")
        typical = float(probe[probe > 0].median()) if (probe > 0).any() else None
        samples = load_kernel_samples(samples_path, typical, rows)
    model = ModuleCostModel(**recipe_params).fit(net, tab, kernel_samples=samples)
    return _cache_trained(model, cached, t0, verbose, "module model")


def check_model(spec: str | Path, role: str = "model") -> None:
    """What a platform name's loader refuses, refused without loading or training anything: a
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
        f"{role} not found: expected a directory written by `carb-nas model train` (or "
        f"CostModel.save) or a shipped platform name such as cpu/torch/fp32 or "
        f"cpu/torch/fp32/zoo, got {text!r}. Check the path."
    )
