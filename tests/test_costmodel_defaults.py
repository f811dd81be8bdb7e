"""Default models: trained on first use from the shipped dataset, cached, reloaded."""

from __future__ import annotations

import numpy as np
import pytest

import carb_nas.features as features_module
from carb_nas.costmodel import CostModel, load_default_model
from carb_nas.costmodel._prepare import schema_rows
from carb_nas.errors import ModelError


@pytest.fixture
def tiny_defaults(model_cache, tiny_default_params):
    # The real default is the CARB preset (about a minute); the caching logic is the same.
    return model_cache, tiny_default_params


def test_first_use_trains_caches_and_later_calls_load(tiny_defaults, monkeypatch):
    cache, params = tiny_defaults
    model = load_default_model("cpu/onnxruntime/int8", verbose=False, params=params)
    assert set(model.targets_) == {"peak_mem_mb", "latency_ms"}  # no energy meter on CPU
    assert model.platform_["platform"] == "cpu/onnxruntime/int8"
    assert model.default_origin_.startswith("trained on first use")  # what messages say
    cached = list((cache / "models").iterdir())
    assert len(cached) == 1 and cached[0].name.startswith("cpu_onnxruntime_int8-fast-")

    def no_training(*args, **kwargs):
        raise AssertionError("the cached model should have been loaded, not retrained")

    monkeypatch.setattr(CostModel, "fit", no_training)
    featurized = []
    real = features_module.compute_features
    monkeypatch.setattr(
        features_module, "compute_features", lambda cfg: featurized.append(len(cfg)) or real(cfg)
    )
    again = load_default_model("cpu/onnxruntime/int8", verbose=False, params=params)
    assert list(again.targets_) == list(model.targets_)
    assert again.default_origin_.startswith("loaded") and "shipped" not in again.default_origin_[:8]
    assert model.default_name_ == again.default_name_ == "cpu/onnxruntime/int8"  # to calibrate
    # loading names its cache entry from a few rows' features, not from all 1,050 rows'
    assert sum(featurized) <= 4, featurized


def test_schema_rows_decide_the_columns_of_a_multi_family_dataset():
    from carb_nas.costmodel import model_inputs
    from carb_nas.datasets import load_dataset

    rows = load_dataset("cpu/torch/fp32/zoo", ok_only=True)
    rows = rows.groupby("family").head(2).reset_index(drop=True)
    rows["sm_util"] = np.nan  # a telemetry column held by one row only decides a column too
    rows.loc[len(rows) - 1, "sm_util"] = 50.0
    sample = schema_rows(rows)
    assert len(sample) == rows["family"].nunique() + 1
    assert list(model_inputs(sample).columns) == list(model_inputs(rows).columns)
    assert "sm_util" in model_inputs(sample).columns


def test_damaged_cache_entry_is_retrained(tiny_defaults):
    cache, params = tiny_defaults
    load_default_model("cpu/onnxruntime/int8", verbose=False, params=params)
    (entry,) = (cache / "models").iterdir()
    manifest = entry / "manifest.json"
    manifest.write_text(manifest.read_text()[:-20])  # truncated: no longer valid JSON
    model = load_default_model("cpu/onnxruntime/int8", verbose=False, params=params)
    assert model.targets_ is not None
    assert CostModel.load(entry).targets_ == model.targets_


def test_unknown_platform_is_a_clear_error(tiny_defaults):
    with pytest.raises(ModelError, match="no shipped dataset or model for platform"):
        load_default_model("cuda/torch/bf16", verbose=False)  # none shipped


def test_an_unwritable_cache_is_refused_before_training(tmp_path, monkeypatch, tiny_default_params):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CARB_NAS_CACHE", str(blocker / "cache"))

    def no_training(*args, **kwargs):
        raise AssertionError("training started before the cache was checked")

    monkeypatch.setattr(CostModel, "fit", no_training)
    with pytest.raises(ModelError, match="not writable.*CARB_NAS_CACHE") as e:
        load_default_model("cpu/onnxruntime/int8", verbose=False, params=tiny_default_params)
    assert "\n" not in str(e.value)
    assert blocker.read_text() == "not a directory"


def test_load_predictor_takes_a_directory_or_a_platform_name(tiny_defaults, monkeypatch, tmp_path):
    from carb_nas.errors import MissingFileError
    from carb_nas.predictors import _load, load_predictor

    cache, params = tiny_defaults
    model = load_default_model("cpu/onnxruntime/int8", verbose=False, params=params)
    (entry,) = (cache / "models").iterdir()
    assert load_predictor(entry).targets == tuple(model.targets_)
    asked = []
    monkeypatch.setattr(_load, "load_default_model", lambda p, **k: asked.append(p) or model)
    named = load_predictor("cpu/onnxruntime/int8")
    assert named.config_model is model and asked == ["cpu/onnxruntime/int8"]
    assert named.module_model is None and named.platform == "cpu/onnxruntime/int8"
    assert load_predictor("cpu/onnxruntime/int8") is named  # once per process
    with pytest.raises(MissingFileError, match="carb-nas model train") as e:
        load_predictor(tmp_path / "nowhere", role="--model")
    assert str(e.value).startswith("--model not found") and "\n" not in str(e.value)
