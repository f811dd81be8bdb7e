"""`carb-nas search` over the built-in families' spaces: the module model behind the search."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from carb_nas.costmodel import ConfigModuleModel, model_inputs
from carb_nas.costmodel.registry import load_default_module_model
from carb_nas.errors import ModelError
from carb_nas.models import ModelSpec
from carb_nas.space import CONFIG_COLUMNS, Config, frame_to_configs

CONFIGS = pd.DataFrame(
    {
        "family": ["mobilenet_v3_small", "vgg", "basic"],
        "depth": [6, 11, 10],
        "width": [0.25, 0.25, 0.5],
        "resolution": [32, 32, 64],
        "batch_size": [2, 1, 4],
        "precision": ["fp32"] * 3,
        "runtime": ["torch"] * 3,
    }
)
SPACE = (
    '[knobs]\nfamily = ["mobilenet_v3_small", "vgg"]\nwidth = [0.25]\nresolution = [32]\n'
    "batch_size = [1, 2]\n[family.mobilenet_v3_small]\ndepth = [6, 11]\n[family.vgg]\n"
    "depth = [11]\n"
)
KEY = ["family", "depth", "width", "resolution", "batch_size"]


@pytest.fixture(scope="module")
def module_model():
    return load_default_module_model(verbose=False)  # shipped: loaded, not trained


def test_config_module_model_predicts_each_config_as_its_spec_times_the_factors(module_model):
    model = ConfigModuleModel(module_model, {"latency_ms": 0.5}, name="m")
    got = model.predict(model_inputs(CONFIGS), alpha=0.1)
    assert list(got.columns) == [
        "peak_mem_mb", "peak_mem_mb_lower", "peak_mem_mb_upper",
        "latency_ms", "latency_ms_lower", "latency_ms_upper",
    ]  # fmt: skip
    for i, config in enumerate(frame_to_configs(CONFIGS[list(CONFIG_COLUMNS)])):
        own, _ = module_model.predict_spec(ModelSpec.from_config(config), 0.1)
        assert got["latency_ms"][i] == pytest.approx(0.5 * own["latency_ms"][0])
        assert got["latency_ms_upper"][i] == pytest.approx(0.5 * own["latency_ms_upper"][0])
        assert got["peak_mem_mb"][i] == pytest.approx(own["peak_mem_mb"][0])  # no factor
    assert (got["latency_ms_lower"] < got["latency_ms"]).all()
    plain = ConfigModuleModel(module_model).predict(model_inputs(CONFIGS))
    assert list(plain.columns) == ["peak_mem_mb", "latency_ms"]
    assert np.allclose(plain["latency_ms"], 2 * got["latency_ms"])
    assert model.default_name_ == "m" and model.platform_["platform"] == "cpu/torch/fp32"


def test_config_module_model_bad_input(module_model):
    with pytest.raises(ModelError, match="expected a fitted carb_nas.costmodel.ModuleCostModel"):
        ConfigModuleModel(object())
    with pytest.raises(ModelError, match="invalid machine factors.*latency_ms"):
        ConfigModuleModel(module_model, {"latency_ms": float("nan")})
    with pytest.raises(ModelError, match=r"without \['batch_size'\]"):
        ConfigModuleModel(module_model).predict(CONFIGS.drop(columns="batch_size"))


def test_cli_search_of_a_family_space_uses_the_module_model(module_model, tmp_path):
    space = tmp_path / "fam.toml"
    space.write_text(SPACE)
    args = ["search", str(space), "--trials", "6", "--budget", "latency_ms=1000", "--json"]
    res = CliRunner().invoke(cli, [*args, "--no-validate"])
    assert res.exit_code == 0, res.output
    assert "kernel-level module model" in res.stderr and "not calibrated" in res.stderr
    assert "never saw family" not in res.stderr
    pareto = pd.DataFrame(json.loads(res.stdout)["pareto"])
    assert set(pareto["family"]) <= {"mobilenet_v3_small", "vgg"} and len(pareto)
    frame = pareto[KEY].assign(precision="fp32", runtime="torch")
    want = ConfigModuleModel(module_model).predict(model_inputs(frame))
    assert np.allclose(pareto["latency_ms"], want["latency_ms"])


def test_cli_search_of_a_family_space_scales_by_this_machines_factors(
    module_model, tmp_path, monkeypatch
):
    """The embedded default calibrates first (ensure_calibrated, within --time-budget-s), then
    searches with the calibrated predictor: the module model's answers times its factor."""
    import carb_nas.calibrate as cal_mod
    import carb_nas.predictors as predictors
    from carb_nas.predictors import PlatformPredictor, Provenance

    space = tmp_path / "fam.toml"
    space.write_text(SPACE)
    asked = []
    monkeypatch.setattr(cal_mod, "ensure_calibrated", lambda p, s, *a, **k: asked.append(s) or {})
    plain = predictors.load_predictor("cpu/torch/fp32", calibrated=False)
    factors = {"latency_ms": 2.0}
    here = PlatformPredictor(
        plain.config_model,
        module_model,
        module_factors=factors,
        provenance=Provenance(
            "cpu/torch/fp32",
            "carb cascade + kernel-level module model",
            calibrated=True,
            calibration="latency_ms x2.00",
            module_factors=factors,
        ),  # fmt: skip
    )
    real = predictors.load_predictor
    monkeypatch.setattr(
        predictors,
        "load_predictor",
        lambda spec, calibrated=True, **k: here if calibrated else real(spec, calibrated=False),
    )
    monkeypatch.setenv("CARB_NAS_CALIBRATE", "1")
    args = ["search", str(space), "--trials", "6", "--budget", "latency_ms=1000", "--json",
            "--no-validate", "--time-budget-s", "30"]  # fmt: skip
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert asked == [30.0] and "calibrated to this machine (latency_ms x2.00)" in res.stderr
    pareto = pd.DataFrame(json.loads(res.stdout)["pareto"])
    frame = pareto[KEY].assign(precision="fp32", runtime="torch")
    want = ConfigModuleModel(module_model).predict(model_inputs(frame))
    assert np.allclose(pareto["latency_ms"], 2.0 * want["latency_ms"])


def test_cli_validate_of_family_configs_scores_the_module_models_predictions(
    module_model, tmp_path, monkeypatch
):
    import carb_nas.measure
    from tests.test_calibrate import FakeProfiler

    # the machine runs 1.3x the module model's latency (a FAKE profiler says so)
    fake = FakeProfiler(ConfigModuleModel(module_model), 1.3)
    monkeypatch.setattr(carb_nas.measure, "Profiler", lambda *a, **k: fake)
    pareto = tmp_path / "p.csv"
    CONFIGS.iloc[:2].to_csv(pareto, index=False)
    before = pareto.read_bytes()
    res = CliRunner().invoke(cli, ["validate", str(pareto), "--model", "cpu/torch/fp32", "--json"])
    assert res.exit_code == 0, res.output
    assert "kernel-level module model" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["ratios"]["latency_ms"]["median"] == pytest.approx(1.3, rel=1e-6)
    assert doc["ratios"]["peak_mem_mb"]["median"] == pytest.approx(1.0, rel=1e-6)
    # its rows are not a ResNet config model's calibration: one line, nothing measured
    n = len(fake.profiled)
    res = CliRunner().invoke(
        cli, ["validate", str(pareto), "--model", "cpu/torch/fp32", "--recalibrate"]
    )
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 1 and len(lines) == 1 and "Drop --recalibrate" in lines[0]
    assert len(fake.profiled) == n and pareto.read_bytes() == before


def test_cli_screen_of_a_family_space_ranks_with_the_module_model(module_model, tmp_path):
    space = tmp_path / "fam.toml"
    space.write_text(SPACE)
    out = tmp_path / "short.csv"
    models = ["--source", "cpu/torch/fp32", "--target", "cpu/torch/fp32"]
    args = [
        "screen",
        str(space),
        *models,
        "--rank-by",
        "latency_ms",
        "--top-k",
        "3",
        "-o",
        str(out),
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "--source cpu/torch/fp32 (carb cascade + kernel-level module model" in res.stderr
    assert "warning" not in res.stderr
    short = pd.read_csv(out)
    want = ConfigModuleModel(module_model).predict(model_inputs(short[list(CONFIG_COLUMNS)]))
    assert len(short) == 3 and np.allclose(short["latency_ms"], want["latency_ms"])


def test_networks_are_built_once_for_all_their_batch_sizes(module_model, monkeypatch):
    import carb_nas.models as models

    built = []
    real = models.build_model
    monkeypatch.setattr(models, "build_model", lambda c, d="cpu": built.append(d) or real(c, d))
    monkeypatch.setattr(models, "_META_MODELS", {})
    frame = pd.concat([CONFIGS.iloc[:1].assign(batch_size=b) for b in (1, 2, 8)])
    X = model_inputs(frame)  # traced features: one build
    got = ConfigModuleModel(module_model).predict(X)  # the same network again: none
    assert built == ["meta"]
    assert got["latency_ms"].is_monotonic_increasing
    monkeypatch.setattr(models, "META_MODELS_KEPT", 1)
    models.meta_model(Config(*CONFIGS.iloc[1, :5]))  # another network: the first dropped
    ConfigModuleModel(module_model).predict(X.iloc[:1])  # the first again: rebuilt
    assert built == ["meta"] * 3


def test_optuna_plugin_with_the_platform_name_scores_a_family_space_with_the_module_model(
    module_model, tmp_path, monkeypatch
):
    """CostConstraints('cpu/torch/fp32') scores a ResNet space with the ResNet config model and
    a space of other families with the module model, as the CLI does; with a calibrated
    predictor, the module model's answers times its factor."""
    import optuna

    from carb_nas import load_predictor
    from carb_nas.integrations import CostConstraints
    from carb_nas.predictors import PlatformPredictor, Provenance
    from carb_nas.scoring import predict_spec
    from carb_nas.search.trial_params import trial_config

    space = tmp_path / "fam.toml"
    space.write_text(SPACE)
    costs = CostConstraints("cpu/torch/fp32", {"latency_ms": 1e9})
    study = optuna.create_study()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(lambda t: float(bool(costs.suggest(t, space))), n_trials=3)
    for t in study.trials:
        own, _ = predict_spec(module_model, ModelSpec.from_config(trial_config(t)), None)
        assert t.user_attrs["carb_nas.predicted.latency_ms"] == pytest.approx(own["latency_ms"][0])
    resnet = Config("basic", 10, 0.5, 64, 4)
    config_model = load_predictor("cpu/torch/fp32", calibrated=False).config_model
    expected = config_model.predict(model_inputs(pd.DataFrame([asdict(resnet)])))
    assert costs.predict(resnet)["latency_ms"] == pytest.approx(expected["latency_ms"][0])

    # calibrated: the module model's answers times this machine's factor of it
    calibrated = PlatformPredictor(
        config_model,
        module_model,
        module_factors={"latency_ms": 0.5},
        provenance=Provenance("cpu/torch/fp32", "carb cascade + kernel-level", calibrated=True),
    )
    here = CostConstraints(calibrated)
    mobile = Config("mobilenet_v3_small", 6, 0.25, 32, 2)
    own, _ = predict_spec(module_model, ModelSpec.from_config(mobile), None)
    assert here.predict(mobile)["latency_ms"] == pytest.approx(0.5 * own["latency_ms"][0])
    assert here.predict(resnet)["latency_ms"] == pytest.approx(expected["latency_ms"][0])
