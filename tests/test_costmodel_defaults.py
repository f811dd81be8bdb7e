"""Default models: trained on first use from the shipped dataset, cached, reloaded."""

from __future__ import annotations

import pytest

from carb_nas.costmodel import CostModel, load_default_model
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
    cached = list((cache / "models").iterdir())
    assert len(cached) == 1 and cached[0].name.startswith("cpu_onnxruntime_int8-fast-")

    def no_training(*args, **kwargs):
        raise AssertionError("the cached model should have been loaded, not retrained")

    monkeypatch.setattr(CostModel, "fit", no_training)
    again = load_default_model("cpu/onnxruntime/int8", verbose=False, params=params)
    assert list(again.targets_) == list(model.targets_)


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
        load_default_model("cuda/torch/fp16", verbose=False)
