"""Shared fixtures. Helpers that a test needs at import time (``tiny`` for parametrize) live
in tests/synthetic.py and import as ``tests.synthetic`` (as tests.measure.fakes does)."""

from __future__ import annotations

import pytest

from tests.synthetic import TINY_PARAMS, fit_fast, synthetic_dataset, tiny


@pytest.fixture(autouse=True)
def _no_calibration_on_arrival(monkeypatch):
    """`carb-nas search` with no arguments would first spend a minute calibrating the default
    models on this machine; tests opt in (tests/test_calibrate.py) with fakes instead."""
    monkeypatch.setenv("CARB_NAS_CALIBRATE", "0")


@pytest.fixture(scope="session", autouse=True)
def _cheap_default_models(tmp_path_factory):
    """Default models trained on first use get the TINY recipe and a cache of this run's own.

    The real recipe (the CARB preset: ~20 s per platform) was most of a fresh clone's test
    run, and the suite wrote it into the user's ~/.cache. The registry, cache and messages are
    the same at any recipe; the real recipes' accuracy is checked by benchmarks/ (train.py,
    any_cnn.py, openvino_models.py). The default *module* model keeps its real recipe: it is
    shipped (carb_nas/data/models, ~1 s to load; a tiny one trained per worker took ~12 s),
    and tests/test_costmodel_module_default.py fails while the shipped one is stale. A
    calibration's module ratio is fitted on 40 configs instead of 600, and the ONNX Runtime node
    model trained on first use takes 60 rounds instead of 800."""
    from types import MappingProxyType

    from carb_nas import calibrate
    from carb_nas.costmodel import _defaults, _nodes

    mp = pytest.MonkeyPatch()
    mp.setenv("CARB_NAS_CACHE", str(tmp_path_factory.mktemp("carb_nas_cache")))
    # a calibration's module ratio traces its configs (~25 ms each): 40, not 600
    mp.setattr(calibrate, "MODULE_RATIO_CONFIGS", 40)
    mp.setattr(_nodes, "NODE_ROUNDS", 60)  # the ONNX Runtime node model: 800 rounds, ~5 s
    mp.setattr(
        _defaults,
        "DEFAULT_MODEL_PARAMS",
        MappingProxyType({**_defaults.DEFAULT_MODEL_PARAMS, **TINY_PARAMS}),
    )
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _fresh_predictors(monkeypatch):
    """Each test resolves platform names afresh: tests patch the registry under the loader."""
    from carb_nas.predictors import _load

    monkeypatch.setattr(_load, "_CACHE", {})


@pytest.fixture(scope="session")
def make_rows():
    """``make_rows(n, seed=0, space="resnet", energy=True, telemetry=False)``: SYNTHETIC rows."""
    return synthetic_dataset


@pytest.fixture(scope="session")
def tiny_model():
    """``tiny_model(**params)``: a CostModel with a few dozen trees per learner."""
    return tiny


@pytest.fixture
def model_cache(monkeypatch, tmp_path):
    """An empty default-model cache (``CARB_NAS_CACHE``) for this test only."""
    monkeypatch.setenv("CARB_NAS_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def tiny_default_params():
    """A cheap recipe for ``load_default_model(params=...)`` (the real default, the CARB
    preset, takes about a minute; the registry logic is the same)."""
    return dict(TINY_PARAMS)


# fast-preset models on SYNTHETIC CPU-like rows (screen, search, validate tests)
@pytest.fixture(scope="session")
def torch_model():
    return fit_fast("torch", 0)


@pytest.fixture(scope="session")
def ort_model():
    return fit_fast("onnxruntime", 1)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, torch_model, ort_model):
    root = tmp_path_factory.mktemp("models")
    torch_model.save(root / "torch")
    ort_model.save(root / "ort")
    return root / "torch", root / "ort"


@pytest.fixture
def tiny_module_defaults(monkeypatch, model_cache):
    """The default module model (``costmodel.load_default_module_model``) on 9 zoo networks
    per family group, in an empty cache for this test (the real one trains on all 340)."""
    from carb_nas.costmodel import _defaults

    monkeypatch.setattr(
        _defaults,
        "DEFAULT_MODULE_PARAMS",
        {**_defaults.DEFAULT_MODULE_PARAMS, "rows_per_family": 9},
    )
    return model_cache
