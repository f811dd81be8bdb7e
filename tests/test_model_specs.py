"""Model specs, predict_costs for any module, the --model-spec CLI and its bad input."""

from __future__ import annotations

import json
import warnings

import pytest
from click.testing import CliRunner
from torch import nn

from carb_nas import ModelSpec, predict_costs
from carb_nas.cli import cli
from carb_nas.errors import ConfigError
from carb_nas.space import Config
from tests.user_nets import make_cnn

PLATFORM = "cpu/torch/fp32"


@pytest.fixture(autouse=True)
def _tests_importable(monkeypatch):
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    sys.modules.pop("user_nets", None)


def test_spec_keys_are_stable_and_distinct() -> None:
    c = Config("mobilenet_v2", 17, 1.0, 64, 2)
    assert ModelSpec.from_config(c).key == c.key
    a = ModelSpec.from_factory("tests.user_nets:make_cnn", "2,3,32,32", '{"channels": 8}')
    b = ModelSpec.from_factory("tests.user_nets:make_cnn", (2, 3, 32, 32), {"channels": 8})
    assert a.key == b.key and len(a.key) == 16
    assert a.key != ModelSpec.from_factory("tests.user_nets:make_cnn", "2,3,32,32").key
    assert a.batch_size == 2 and a.build().training is False
    m = ModelSpec.from_module(make_cnn(8), (1, 3, 32, 32))
    assert m.key == ModelSpec.from_module(make_cnn(8), (1, 3, 32, 32)).key
    assert m.key != ModelSpec.from_module(make_cnn(16), (1, 3, 32, 32)).key


def test_predict_costs_of_a_module_with_intervals() -> None:
    net = make_cnn(16)
    before = [p.clone() for p in net.parameters()]
    # the platform's default predictor of modules is the module model shipped for today's
    # recipe (tests/test_costmodel_module_default.py fails while it is stale): a CNN of
    # common ops has nothing unmodelled, so no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        costs = predict_costs(net, (4, 3, 32, 32), platform=PLATFORM)
    for target in ("latency_ms", "peak_mem_mb"):
        lo, hi = costs.interval(target)
        assert 0 < lo <= costs[target] <= hi
    assert not costs.unseen and costs.unmodelled_ops == () and costs.features["flops"] > 0
    assert "kernel-level module model" in costs.model and "not calibrated" in costs.model
    # the user's weights are untouched (traced on the meta device)
    assert all((p == q).all() for p, q in zip(net.parameters(), before))
    bigger = predict_costs(make_cnn(64, layers=4), (4, 3, 32, 32), platform=PLATFORM)
    assert bigger.features["flops"] > costs.features["flops"]


def test_predict_costs_of_a_resnet_config_is_seen() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        costs = predict_costs(Config("basic", 18, 0.5, 64, 2), platform=PLATFORM)
    assert not costs.unseen and costs["latency_ms"] > 0


def test_predict_a_family_space_uses_the_platforms_module_model(tmp_path) -> None:
    from carb_nas import load_predictor
    from carb_nas.costmodel import model_inputs
    from carb_nas.costmodel.registry import load_default_module_model
    from carb_nas.space import configs_to_frame

    space = tmp_path / "mixed.toml"
    space.write_text('[knobs]\nfamily = ["basic", "mobilenet_v2"]\nwidth = [0.5]\n'
                     "resolution = [32]\nbatch_size = [1, 4]\n[family.basic]\ndepth = [10]\n"
                     "[family.mobilenet_v2]\ndepth = [9]\n")  # fmt: skip
    res = CliRunner().invoke(cli, ["predict", PLATFORM, str(space), "--json"])
    assert res.exit_code == 0, res.output
    # the platform's kernel-level model takes the family its ResNet cascade never saw: no
    # "never saw family ['mobilenet_v2']" warning
    assert "warning" not in res.stderr and "kernel-level module model" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["n_rows"] == 4
    module = load_default_module_model(verbose=False)
    cascade = load_predictor(PLATFORM).config_model
    for r in doc["predictions"]:  # one answer per config: its family says which model
        config = Config(r["family"], r["depth"], r["width"], r["resolution"], r["batch_size"])
        if config.family == "mobilenet_v2":
            own, _ = module.predict_spec(ModelSpec.from_config(config), None)
        else:  # a ResNet: the platform's CARB cascade, as predict_costs(config) says
            own = cascade.predict(model_inputs(configs_to_frame([config])))
            assert r["latency_ms"] == pytest.approx(predict_costs(config, platform=PLATFORM)[
                "latency_ms"])  # fmt: skip
        assert r["latency_ms"] == pytest.approx(own["latency_ms"][0])
    res = CliRunner().invoke(cli, ["predict", "cpu/onnxruntime/fp32", str(space), "--json"])
    assert res.exit_code == 0 and "never saw family ['mobilenet_v2']" in res.stderr  # no module


def test_cli_predict_model_spec() -> None:
    args = ["predict", PLATFORM, "--model-spec", "tests.user_nets:make_cnn",
            "--kwargs", '{"channels": 32}', "--input-shape", "2,3,64,64", "--alpha", "0.1",
            "--json"]  # fmt: skip
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)["predictions"][0]
    assert row["latency_ms_lower"] <= row["latency_ms"] <= row["latency_ms_upper"]
    assert (
        row["key"]
        == ModelSpec.from_factory("tests.user_nets:make_cnn", "2,3,64,64", {"channels": 32}).key
    )


def test_cli_profile_model_spec_measures_for_real(tmp_path) -> None:
    out = tmp_path / "prof"
    args = ["profile", "--model-spec", "tests.user_nets:make_cnn", "--kwargs", '{"channels": 8}',
            "--input-shape", "1,3,32,32", "--threads", "1", "-o", str(out), "--json"]  # fmt: skip
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)
    assert row["latency_ms"] > 0 and row["peak_mem_mb"] > 0 and row["fingerprint"]
    assert (out / f"model_spec_{row['key']}.json").exists()


BAD = {
    "kwargs not JSON": (["--kwargs", "{channels: 8}"], ["not JSON", "double quotes"]),
    "kwargs not an object": (["--kwargs", "[1, 2]"], ["JSON object"]),
    "factory not importable": (
        ["--model-spec", "no_such_pkg.nets:make"],
        ["cannot import", "no_such_pkg"],
    ),
    "factory missing": (["--model-spec", "tests.user_nets:nope"], ["cannot find", "nope"]),
    "not package:function": (["--model-spec", "tests.user_nets"], ["package.module:function"]),
    "factory raises": (["--model-spec", "tests.user_nets:broken"], ["failed", "even"]),
    "factory returns no module": (["--model-spec", "tests.user_nets:not_a_module"], ["nn.Module"]),
    "data-dependent control flow": (
        ["--model-spec", "tests.user_nets:data_dependent"],
        ["meta device", "item", "carb-nas profile --model-spec"],
    ),
    "custom op": (
        ["--model-spec", "tests.user_nets:custom_op"],
        ["meta device", "carb_nas_tests::scale", "carb-nas profile --model-spec"],
    ),
    "shape rejected": (
        ["--model-spec", "tests.user_nets:flat_linear", "--input-shape", "1,3,16,16"],
        ["rejects input shape (1,3,16,16)"],
    ),
    "bad input shape": (["--input-shape", "1,3,-2"], ["invalid input shape"]),
    # a blank or non-numeric part is a typo, never dropped (it read as (1, 3) before)
    "input shape with a typo": (["--input-shape", "1,3,x"], ["invalid input shape", "'1,3,x'"]),
    "input shape with a blank part": (["--input-shape", "1,,8,8"], ["invalid input shape"]),
    "no input shape": (["--input-shape", None], ["missing --input-shape"]),
}


def _args(extra: list) -> list[str]:
    base = {"--model-spec": "tests.user_nets:make_cnn", "--input-shape": "1,3,8,8"}
    for flag, value in zip(extra[::2], extra[1::2]):
        base[flag] = value
    out = []
    for flag, value in base.items():
        if value is not None:
            out += [flag, value]
    return out


@pytest.mark.parametrize("case", sorted(BAD))
def test_cli_predict_bad_model_spec_is_one_line(case, tmp_path) -> None:
    extra, words = BAD[case]
    out = tmp_path / "pred.csv"
    res = CliRunner().invoke(cli, ["predict", PLATFORM, *_args(extra), "-o", str(out)])
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    errors = [line for line in lines if not line.startswith("warning:")]
    assert len(errors) == 1 and errors[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    for w in words:
        assert w in errors[0], errors[0]
    assert not out.exists()


def test_cli_profile_bad_shape_writes_nothing(tmp_path) -> None:
    out = tmp_path / "prof"
    args = ["profile", "--model-spec", "tests.user_nets:flat_linear", "--input-shape",
            "1,3,16,16", "-o", str(out)]  # fmt: skip
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1 and "rejects input shape" in res.stderr, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and not out.exists()


def test_unknown_family_or_knob_in_a_space_is_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[knobs]\nfamily = ["mobilenet_v9"]\ndepth = [17]\nwidth = [1.0]\n'
                   "resolution = [32]\nbatch_size = [1]\n")  # fmt: skip
    res = CliRunner().invoke(cli, ["predict", PLATFORM, str(bad)])
    assert res.exit_code == 1 and "unknown family 'mobilenet_v9'" in res.stderr
    bad.write_text('[knobs]\nfamily = ["vgg"]\ndepth = [16]\nwidth = [1.0]\ncardinality = [2]\n'
                   "resolution = [32]\nbatch_size = [1]\n")  # fmt: skip
    res = CliRunner().invoke(cli, ["predict", PLATFORM, str(bad)])
    assert res.exit_code == 1 and "unknown knob(s) ['cardinality']" in res.stderr


def test_module_spec_refuses_non_modules() -> None:
    with pytest.raises(ConfigError, match="torch.nn.Module"):
        ModelSpec.from_module("resnet", (1, 3, 32, 32))
    with pytest.raises(ConfigError, match="missing input shape"):
        predict_costs(nn.Linear(3, 3), platform=PLATFORM)


def test_optuna_constrain_a_users_module() -> None:
    import optuna

    from carb_nas.integrations import CostConstraints

    costs = CostConstraints(PLATFORM, budgets={"latency_ms": 1e-6}, prune=True)
    study = optuna.create_study()

    def objective(trial):
        net = make_cnn(trial.suggest_categorical("channels", [8, 16]))
        costs.constrain(trial, net, (2, 3, 32, 32))
        return 0.0

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        # the platform's module model predicts the module, as predict_costs does: its ops are
        # common ones, so no "never saw this architecture" warning of the ResNet config model
        warnings.simplefilter("error")
        study.optimize(objective, n_trials=2)
    t = study.trials[0]
    assert t.state == optuna.trial.TrialState.PRUNED
    assert t.user_attrs["carb_nas.unmodelled_ops"] == []  # only the module model records it
    own = predict_costs(make_cnn(t.params["channels"]), (2, 3, 32, 32), platform=PLATFORM)
    assert t.user_attrs["carb_nas.predicted.latency_ms"] == pytest.approx(own["latency_ms"])
    assert t.constraints["carb_nas.latency_ms"] > 0


def test_small_batch_forest_predict_is_exact() -> None:
    # predict_costs' speed rests on predicting a few rows without joblib: the same numbers
    import numpy as np
    from sklearn.ensemble import ExtraTreesRegressor

    from carb_nas.costmodel._learners import _forest_predict_small, _predict

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    y = X[:, 0] * 3 + rng.normal(size=300)
    forest = ExtraTreesRegressor(40, random_state=0, n_jobs=1).fit(X, y)
    F = rng.normal(size=(7, 6))
    assert np.array_equal(forest.predict(F), _forest_predict_small(forest, F))

    class Threads:
        forest = 1

    assert np.array_equal(_predict("et", forest, F, Threads()), forest.predict(F))


def test_cli_search_over_a_family_space(tmp_path) -> None:
    space = tmp_path / "fam.toml"
    space.write_text('[knobs]\nfamily = ["mobilenet_v3_small", "vgg"]\nwidth = [0.25]\n'
                     "resolution = [32]\nbatch_size = [1, 2]\n[family.mobilenet_v3_small]\n"
                     "depth = [6, 11]\n[family.vgg]\ndepth = [11]\n")  # fmt: skip
    res = CliRunner().invoke(cli, ["search", str(space), "--source", PLATFORM, "--trials", "6",
                                   "--budget", "latency_ms=1000", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    # the platform name's module model scores them (its ResNet model would warn)
    assert "kernel-level module model" in res.stderr and "warning" not in res.stderr
    doc = json.loads(res.stdout)
    assert doc["pareto"] and {r["family"] for r in doc["pareto"]} <= {"mobilenet_v3_small", "vgg"}


def test_cli_predict_model_spec_on_a_one_runtime_int8_model(tmp_path) -> None:
    """A spec deploys on the model's one runtime and precision (an ORT int8 model here):
    the spec had been fixed to torch fp32 and refused."""
    from carb_nas.costmodel import CostModel, model_inputs
    from tests.synthetic import synthetic_rows

    rows = synthetic_rows(300, runtime="onnxruntime", seed=3)
    rows["precision"] = "int8"
    model = CostModel(preset="fast", n_jobs=1, random_state=0).fit(
        model_inputs(rows), rows[["peak_mem_mb", "latency_ms"]], platform="cpu/onnxruntime/int8"
    )
    model.save(tmp_path / "ort_int8")
    args = ["predict", str(tmp_path / "ort_int8"), "--model-spec", "tests.user_nets:make_cnn",
            "--input-shape", "2,3,32,32", "--json"]  # fmt: skip
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)["predictions"][0]
    assert row["latency_ms"] > 0
    assert row["key"] == ModelSpec.from_factory("tests.user_nets:make_cnn", "2,3,32,32",
                                                precision="int8").key  # fmt: skip
    assert "never saw this architecture (trained on families ['" in res.stderr


def test_factory_next_to_the_user_imports_from_the_current_directory(tmp_path, monkeypatch):
    """`carb-nas predict --model-spec mynet:make` run beside mynet.py: a console script has
    no current directory on sys.path, and the factory was 'not importable'."""
    import sys

    from carb_nas.models import load_factory

    (tmp_path / "cwd_net_for_test.py").write_text(
        "from torch import nn\ndef make():\n    return nn.Conv2d(3, 4, 3)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_net_for_test", raising=False)
    assert isinstance(load_factory("cwd_net_for_test:make")(), nn.Conv2d)
    with pytest.raises(ConfigError, match="no_such_net_here"):
        load_factory("no_such_net_here:make")
