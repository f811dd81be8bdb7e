"""The one predictor contract: a config gets one answer whichever way it is asked."""

from __future__ import annotations

import numpy as np
import pytest

from carb_nas.costmodel import ConfigModuleModel, model_inputs
from carb_nas.costmodel.registry import load_default_module_model
from carb_nas.errors import ModelError
from carb_nas.models import ModelSpec
from carb_nas.predictors import PlatformPredictor, Predictor, Provenance
from carb_nas.space import Config, configs_to_frame

CONFIGS = [
    Config("mobilenet_v2", 9, 0.5, 32, 2),
    Config("basic", 10, 0.5, 64, 4),
    Config("vgg", 11, 0.25, 32, 1),
    Config("bottleneck", 26, 1.0, 64, 2),
]


@pytest.fixture(scope="module")
def predictor(torch_model):
    module = load_default_module_model(verbose=False)  # shipped: loaded, not trained
    factors = {"latency_ms": 1.5}
    return PlatformPredictor(
        torch_model,
        module,
        module_factors=factors,
        provenance=Provenance("cpu/torch/fp32", "carb cascade + kernel-level module model",
                              calibrated=True, calibration="FAKE", module_factors=factors),
    )  # fmt: skip


def test_configs_are_routed_by_family_in_their_own_order(predictor, torch_model):
    X = model_inputs(configs_to_frame(CONFIGS))
    X.index = [7, 3, 3, 1]  # any index: the answer follows the rows' order
    got = predictor.predict(X, alpha=0.1)
    assert isinstance(predictor, Predictor) and list(got.index) == [0, 1, 2, 3]
    cascade = torch_model.predict(model_inputs(configs_to_frame(CONFIGS[1::2])), alpha=0.1)
    module = ConfigModuleModel(predictor.module_model, {"latency_ms": 1.5}).predict(
        model_inputs(configs_to_frame(CONFIGS[0::2])), alpha=0.1
    )
    for target in ("latency_ms", "latency_ms_upper", "peak_mem_mb"):
        assert np.allclose(got[target].iloc[1::2], cascade[target])
        assert np.allclose(got[target].iloc[0::2], module[target])


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.family)
def test_a_spec_of_a_config_gets_the_frames_answer(predictor, config):
    frame = predictor.predict(model_inputs(configs_to_frame([config])), alpha=0.1)
    spec, _ = predictor.predict_spec(ModelSpec.from_config(config), 0.1)
    for target in ("latency_ms", "latency_ms_lower", "peak_mem_mb"):
        assert spec[target].iloc[0] == pytest.approx(frame[target].iloc[0], rel=1e-6)


def test_a_users_module_goes_to_the_module_model_times_its_factor(predictor):
    from user_nets import make_cnn

    spec = ModelSpec.from_module(make_cnn(), (2, 3, 32, 32), "fp32")
    got, _ = predictor.predict_spec(spec, 0.1)
    own, _ = predictor.module_model.predict_spec(spec, 0.1)
    assert got["latency_ms"].iloc[0] == pytest.approx(1.5 * own["latency_ms"].iloc[0])
    assert got["peak_mem_mb"].iloc[0] == pytest.approx(own["peak_mem_mb"].iloc[0])


def test_provenance_says_what_and_whether_calibrated(predictor):
    line = predictor.provenance.describe()
    assert line.startswith("cpu/torch/fp32 (") and "calibrated to this machine (FAKE)" in line
    doc = predictor.provenance.as_dict()
    assert doc["calibrated"] is True and doc["module_factors"] == {"latency_ms": 1.5}
    assert predictor.targets == tuple(predictor.config_model.targets_)
    with pytest.raises(ModelError, match="neither"):
        PlatformPredictor(None, None, provenance=Provenance("x", "none"))
