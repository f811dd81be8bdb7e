"""carb_nas.integrations (the Optuna plugin): costs, budget constraints and pruning inside a
user's Optuna study."""

from __future__ import annotations

import copy
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from carb_nas.errors import BudgetError, ConfigError, ModelError
from carb_nas.integrations import (
    CostConstraints,
    config_params,
    param_names,
    stored_constraints,
    suggest_config,
    trial_config,
)
from carb_nas.space import Config, Space, configs_to_frame, load_space

ROOT = Path(__file__).resolve().parents[1]
optuna.logging.set_verbosity(optuna.logging.WARNING)


# -- a real CostModel ("fast" preset) fitted to SYNTHETIC costs --------------------------------
def synthetic_costs(frame: pd.DataFrame) -> pd.DataFrame:
    """SYNTHETIC per-batch costs of configs (a closed-form formula, not measurements)."""
    d = frame["depth"].to_numpy(float)
    w = frame["width"].to_numpy(float)
    r = frame["resolution"].to_numpy(float) / 32
    b = frame["batch_size"].to_numpy(float)
    return pd.DataFrame(
        {
            "peak_mem_mb": 4 + 0.4 * d * w**2 + 0.3 * w * r**2 * b,
            "latency_ms": 0.3 + 0.01 * d * w**2 * r**2 * b,
        },
        index=frame.index,
    )


@pytest.fixture(scope="module")
def fitted_model():
    from carb_nas.costmodel import CostModel, model_inputs

    rows = load_space("carb_screening").grid().sample(300, random_state=0)
    # n_jobs=1: one-row predictions per trial are fastest without a thread pool
    return CostModel(preset="fast", n_jobs=1).fit(model_inputs(rows), synthetic_costs(rows))


@pytest.fixture
def model(fitted_model):
    return copy.copy(fitted_model)  # tests may set attributes (space_fingerprint_)


@pytest.fixture(scope="module")
def space() -> Space:
    return load_space("carb_screening")


def _predict(model, config: Config, alpha: float | None = None) -> pd.Series:
    from carb_nas.costmodel import model_inputs

    X = model_inputs(configs_to_frame([config]))
    frame = model.predict(X) if alpha is None else model.predict(X, alpha=alpha)
    return frame.iloc[0]


# -- parameter names --------------------------------------------------------------------------
GOLDEN_NAMES = [
    "carb_nas.family",
    "carb_nas.depth.basic",
    "carb_nas.depth.bottleneck",
    "carb_nas.width",
    "carb_nas.resolution",
    "carb_nas.batch_size",
    "carb_nas.precision",
    "carb_nas.runtime",
]


@pytest.mark.parametrize("name", ["resnet", "carb_screening", "cpu"])
def test_param_names_are_stable(name):
    assert param_names(name) == GOLDEN_NAMES


def test_knob_with_per_family_values_gets_per_family_names():
    doc = {
        "knobs": {"family": ["basic", "bottleneck"], "resolution": [32], "batch_size": [1, 8]},
        "family": {
            "basic": {"depth": [10, 18], "width": [0.25, 0.5]},
            "bottleneck": {"depth": [50], "width": [0.25]},
        },
    }
    names = param_names(Space.from_dict(doc))
    assert "carb_nas.width.basic" in names and "carb_nas.width.bottleneck" in names
    assert "carb_nas.width" not in names and "carb_nas.batch_size" in names
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    study.optimize(lambda t: suggest_config(t, Space.from_dict(doc)).width, n_trials=20)
    assert {t.params["carb_nas.family"] for t in study.trials} == {"basic", "bottleneck"}
    for t in study.trials:
        fam = t.params["carb_nas.family"]
        assert set(t.params) == {
            "carb_nas.family",
            f"carb_nas.depth.{fam}",
            f"carb_nas.width.{fam}",
            "carb_nas.resolution",
            "carb_nas.batch_size",
            "carb_nas.precision",
            "carb_nas.runtime",
        }


def test_suggested_configs_lie_in_the_space_and_round_trip(space):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = []

    def objective(trial):
        cfg = suggest_config(trial, space)
        seen.append(cfg)
        return cfg.depth

    study.optimize(objective, n_trials=25)
    assert len({c.key for c in seen}) > 20
    for trial, cfg in zip(study.trials, seen):
        assert cfg in space
        assert trial.params == config_params(cfg, space)
        assert trial.user_attrs["carb_nas.config_key"] == cfg.key
        assert trial_config(trial) == cfg
        assert isinstance(trial.params["carb_nas.width"], float)
        assert isinstance(trial.params["carb_nas.batch_size"], int)

    # enqueueing a known config makes the next trial evaluate exactly it
    baseline = Config("basic", 18, 1.0, 64, 8)
    study.enqueue_trial(config_params(baseline, space))
    study.optimize(lambda t: suggest_config(t, space).depth, n_trials=1)
    assert trial_config(study.trials[-1]) == baseline
    # a fixed trial (deploying a result) gives back the same config
    assert suggest_config(optuna.trial.FixedTrial(study.trials[3].params), space) == seen[3]


def test_config_params_rejects_configs_outside_the_space(space):
    with pytest.raises(ConfigError, match="not in the space"):
        config_params(Config("basic", 152, 1.0, 64, 8), space)


def test_trial_config_without_suggest_says_what_to_do():
    study = optuna.create_study()
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    with pytest.raises(ConfigError, match="CostConstraints.suggest"):
        trial_config(study.trials[0])
    assert stored_constraints(study.trials[0]) == {}


# -- constraints and predicted costs ----------------------------------------------------------
def _run(costs, space, n, sampler=None, directions=None, storage=None, objective=None):
    study = optuna.create_study(
        directions=directions or ["minimize"],
        sampler=sampler or optuna.samplers.RandomSampler(seed=0),
        storage=storage,
    )
    calls = []

    def default_objective(trial):
        cfg = costs.suggest(trial, space)
        calls.append(trial.number)
        return tuple(cfg.depth * k for k in range(1, len(study.directions) + 1))

    study.optimize(objective or default_objective, n_trials=n)
    return study, calls


def test_constraints_equal_prediction_minus_budget(model, space):
    costs = CostConstraints(model, {"latency_ms": 2.0, "peak_mem_mb": 15.0})
    study, _ = _run(costs, space, 30)
    signs = set()
    for t in study.trials:
        cfg = trial_config(t)
        pred = _predict(model, cfg)
        assert t.constraints == pytest.approx(
            {
                "carb_nas.latency_ms": pred["latency_ms"] - 2.0,
                "carb_nas.peak_mem_mb": pred["peak_mem_mb"] - 15.0,
            },
            rel=1e-9,
            abs=1e-12,
        )
        assert stored_constraints(t) == pytest.approx(t.constraints)
        for target in model.targets_:  # every predicted target is attached, budgeted or not
            assert t.user_attrs[f"carb_nas.predicted.{target}"] == pytest.approx(pred[target])
        assert "carb_nas.predicted.latency_ms_upper" not in t.user_attrs
        assert t.user_attrs["carb_nas.budgets"] == {"latency_ms": 2.0, "peak_mem_mb": 15.0}
        signs.add(t.constraints["carb_nas.latency_ms"] > 0)
    assert signs == {True, False}  # the budget splits the sample, so the check has teeth


def test_confidence_judges_the_upper_bound_and_stores_intervals(model, space):
    costs = CostConstraints(model, {"latency_ms": 2.0}, confidence=0.9, normalize=True)
    study, _ = _run(costs, space, 20)
    for t in study.trials:
        pred = _predict(model, trial_config(t), alpha=0.1)
        upper = pred["latency_ms_upper"]
        assert upper > pred["latency_ms"]
        assert t.constraints["carb_nas.latency_ms"] == pytest.approx((upper - 2.0) / 2.0)
        for suffix in ("", "_lower", "_upper"):
            key = f"carb_nas.predicted.latency_ms{suffix}"
            assert t.user_attrs[key] == pytest.approx(pred[f"latency_ms{suffix}"])
        assert t.user_attrs["carb_nas.confidence"] == 0.9


def test_per_image_budget_divides_by_the_batch_size(model, space):
    costs = CostConstraints(model, ["latency_ms_per_image=0.2"])  # CLI-style strings work too
    study, _ = _run(costs, space, 15)
    for t in study.trials:
        cfg = trial_config(t)
        per_image = _predict(model, cfg)["latency_ms"] / cfg.batch_size
        assert t.constraints["carb_nas.latency_ms_per_image"] == pytest.approx(per_image - 0.2)


def test_prune_removes_exactly_the_predicted_infeasible_before_training(model, space):
    costs = CostConstraints(model, {"latency_ms": 2.0, "peak_mem_mb": 15.0}, prune=True)
    study, trained = _run(costs, space, 40)
    states = {t.number: t.state for t in study.trials}
    infeasible = set()
    for t in study.trials:
        pred = _predict(model, trial_config(t))
        if pred["latency_ms"] > 2.0 or pred["peak_mem_mb"] > 15.0:
            infeasible.add(t.number)
            assert "carb_nas.pruned_reason" in t.user_attrs
        assert t.constraints  # pruned trials keep their constraints (TPE learns from them)
    pruned = {n for n, s in states.items() if s == optuna.trial.TrialState.PRUNED}
    assert pruned == infeasible and 0 < len(pruned) < len(states)
    assert set(trained) == set(states) - pruned  # the objective never ran for pruned trials


def test_directions_are_never_changed(model, space):
    costs = CostConstraints(model, {"latency_ms": 2.0}, prune=True)
    study, _ = _run(costs, space, 12, directions=["maximize", "minimize"])
    assert study.directions == [
        optuna.study.StudyDirection.MAXIMIZE,
        optuna.study.StudyDirection.MINIMIZE,
    ]
    assert {t.state for t in study.trials} >= {optuna.trial.TrialState.PRUNED}


def _latency_objective(costs, space):
    def objective(trial):
        costs.suggest(trial, space)
        return trial.user_attrs["carb_nas.predicted.latency_ms"]

    return objective


def test_tpe_best_trial_is_feasible(model, space):
    # Maximizing latency makes the unconstrained best infeasible by construction.
    costs = CostConstraints(model, {"latency_ms": 2.0})
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=8)
    )
    study.optimize(_latency_objective(costs, space), n_trials=30)
    best = study.best_trial
    assert all(v <= 0 for v in best.constraints.values())
    assert max(t.value for t in study.trials) > best.value  # an infeasible trial scored higher
    late = study.trials[15:]  # after startup TPE prefers feasible configs
    early = study.trials[:8]
    frac = [
        np.mean([t.constraints["carb_nas.latency_ms"] <= 0 for t in ts]) for ts in (early, late)
    ]
    assert frac[1] >= frac[0]


def test_nsga2_best_trials_hold_only_feasible_trials(model, space):
    costs = CostConstraints(model, {"latency_ms": 2.0})

    def objective(trial):
        costs.suggest(trial, space)
        a = trial.user_attrs
        return a["carb_nas.predicted.latency_ms"], a["carb_nas.predicted.peak_mem_mb"]

    study = optuna.create_study(
        directions=["maximize", "minimize"],
        sampler=optuna.samplers.NSGAIISampler(seed=0, population_size=10),
    )
    study.optimize(objective, n_trials=40)
    best = study.best_trials
    assert best and all(t.constraints["carb_nas.latency_ms"] <= 0 for t in best)

    def dominated(t):
        return any(
            o.values[0] >= t.values[0] and o.values[1] <= t.values[1] and o.values != t.values
            for o in study.trials
        )

    # without the constraint the front would hold an infeasible (high-latency) trial
    unconstrained_front = [t for t in study.trials if not dominated(t)]
    assert any(t.constraints["carb_nas.latency_ms"] > 0 for t in unconstrained_front)


def test_constraints_func_for_samplers_that_still_take_one(model, space):
    costs = CostConstraints(model, {"latency_ms": 2.0, "peak_mem_mb": 15.0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # Optuna 5 deprecates the argument
        sampler = optuna.samplers.TPESampler(seed=0, constraints_func=costs.constraints_func)
    study, _ = _run(costs, space, 10, sampler=sampler)
    for t in study.trials:
        values = costs.constraints_func(t)
        assert values == [
            t.constraints["carb_nas.latency_ms"],
            t.constraints["carb_nas.peak_mem_mb"],
        ]
        assert list(t.system_attrs["constraints"]) == values  # what the sampler stored

    bare = optuna.create_study()
    bare.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    with pytest.raises(BudgetError, match="Call suggest first"):
        costs.constraints_func(bare.trials[0])


def _storage(kind: str, tmp_path: Path):
    if kind == "memory":
        return optuna.storages.InMemoryStorage()
    if kind == "journal":
        backend = optuna.storages.journal.JournalFileBackend(str(tmp_path / "journal.log"))
        return optuna.storages.JournalStorage(backend)
    return f"sqlite:///{tmp_path / 'study.db'}"


@pytest.mark.parametrize("kind", ["memory", "journal", "sqlite"])
def test_any_storage_keeps_costs_and_constraints(model, space, tmp_path, kind):
    storage = _storage(kind, tmp_path)
    costs = CostConstraints(model, {"latency_ms": 2.0}, confidence=0.95, prune=True)
    study = optuna.create_study(
        study_name="s", storage=storage, sampler=optuna.samplers.RandomSampler(seed=2)
    )
    study.optimize(_latency_objective(costs, space), n_trials=6)
    if kind == "journal":  # a fresh reader of the file sees the same
        backend = optuna.storages.journal.JournalFileBackend(str(tmp_path / "journal.log"))
        storage = optuna.storages.JournalStorage(backend)
    reloaded = optuna.load_study(study_name="s", storage=storage)
    assert len(reloaded.trials) == 6
    for t in reloaded.trials:
        pred = _predict(model, trial_config(t), alpha=0.05)
        assert t.constraints["carb_nas.latency_ms"] == pytest.approx(pred["latency_ms_upper"] - 2)
        pruned = t.state == optuna.trial.TrialState.PRUNED
        assert pruned == (pred["latency_ms_upper"] > 2.0)
        assert t.params == config_params(trial_config(t), space)


def test_space_limit_becomes_a_constraint():
    pytest.importorskip("carb_nas.features")
    from carb_nas.features import compute_features

    cpu = load_space("cpu")
    inside = set(cpu.grid().apply(lambda r: Config(*r).key, axis=1))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    study.optimize(lambda t: suggest_config(t, cpu).depth, n_trials=60)
    outcomes = set()
    for t in study.trials:
        cfg = trial_config(t)
        gflops = compute_features(configs_to_frame([cfg]))["flops"].iloc[0] / 1e9
        value = t.constraints["carb_nas.space.max_gflops_per_batch"]
        assert value == pytest.approx(gflops - 2.0)
        assert (value <= 0) == (cfg.key in inside)
        outcomes.add(value <= 0)
    assert outcomes == {True, False}


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "budgets, match",
    [
        ({"latency": 5}, "unknown budget target"),
        ({"flops": 5}, "unknown budget target"),
        ({"latency_ms": 0}, "finite number > 0"),
        ({"latency_ms": -3}, "finite number > 0"),
        ({"latency_ms": "fifty"}, "non-numeric"),
        ({"latency_ms": True}, "non-numeric"),
        ({"latency_ms": math.nan}, "finite number > 0"),
        ({"latency_ms": math.inf}, "finite number > 0"),
        ({"energy_j": 1.0}, "does not predict"),
        ({"energy_j_per_image": 1.0}, "does not predict"),
        (["latency_ms=5", "latency_ms=6"], "duplicate budget"),
        (["latency_ms<5"], "malformed budget"),
    ],
)
def test_bad_budgets_fail_up_front(model, budgets, match):
    with pytest.raises(BudgetError, match=match):
        CostConstraints(model, budgets)


@pytest.mark.parametrize("kwargs", [{"confidence": 1.0}, {"confidence": 0}, {"prune": "yes"}])
def test_bad_options_fail_up_front(model, kwargs):
    with pytest.raises(BudgetError):
        CostConstraints(model, {"latency_ms": 5}, **kwargs)


def test_unfitted_model_and_missing_model_dir(tmp_path):
    with pytest.raises(ModelError, match="fitted"):
        CostConstraints(object(), {"latency_ms": 5})
    with pytest.raises(FileNotFoundError, match="cost model not found"):
        CostConstraints(str(tmp_path / "nope"), {"latency_ms": 5})


def test_model_from_a_directory_and_the_users_model_is_left_alone(fitted_model, space, tmp_path):
    fitted_model.save(tmp_path / "model")
    threaded = copy.copy(fitted_model).set_params(n_jobs=-1)
    from_dir = CostConstraints(str(tmp_path / "model"), {"latency_ms": 2.0})
    from_obj = CostConstraints(threaded, {"latency_ms": 2.0})
    assert threaded.get_params()["n_jobs"] == -1  # one-row predictions use a private copy
    cfg = Config("bottleneck", 50, 0.5, 64, 8)
    assert from_dir.predict(cfg) == pytest.approx(from_obj.predict(cfg))
    assert from_obj.predict(cfg)["latency_ms"] == pytest.approx(
        _predict(threaded, cfg)["latency_ms"]
    )


def test_model_from_another_space_warns_once(model, space):
    model.space_fingerprint_ = "0123456789abcdef"
    costs = CostConstraints(model, {"latency_ms": 2.0})
    with pytest.warns(UserWarning, match="another space") as record:
        _run(costs, space, 3)
    assert len([w for w in record if "another space" in str(w.message)]) == 1


# -- import and example -----------------------------------------------------------------------
def test_module_name_does_not_shadow_optuna(tmp_path):
    code = (
        "import optuna, carb_nas.integrations._optuna_plugin as m; "
        "assert m.optuna is optuna and hasattr(optuna, 'create_study'); "
        "import carb_nas, os; assert not any(n in ('optuna.py', 'pymoo.py') "
        "for n in os.listdir(os.path.dirname(carb_nas.__file__))); "
        "from carb_nas.integrations import CostConstraints, SpaceProblem; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def _counts(stdout: str) -> tuple[int, ...]:
    last = stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"trials=(\d+) constrained=(\d+) pruned=(\d+) feasible=(\d+)", last)
    assert m, last
    return tuple(map(int, m.groups()))


def _run_example(tmp_path, *args: str) -> tuple[int, ...]:
    """The example as a script, in a process of its own."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "optuna_existing_study.py"), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,  # the default module model's first use trains it (minutes, once)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return _counts(out.stdout)


def _run_example_here(tmp_path, monkeypatch, capsys, *args: str) -> tuple[int, ...]:
    """The example's ``main`` in this process (no interpreter and torch start-up)."""
    import runpy

    import torch

    threads = torch.get_num_threads()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["optuna_existing_study.py", *args])
    try:
        runpy.run_path(str(ROOT / "examples" / "optuna_existing_study.py"), run_name="__main__")
    finally:
        torch.set_num_threads(threads)  # the example sets 2
    return _counts(capsys.readouterr().out)


def test_example_runs_small_and_reports_consistent_counts(tmp_path, monkeypatch, capsys):
    # the study builds its own CNNs (no carb_nas space); a synthetic cost model keeps it quick
    trials, constrained, pruned, feasible = _run_example_here(
        tmp_path, monkeypatch, capsys, "--trials", "6", "--steps", "1", "--synthetic",
    )  # fmt: skip
    assert trials == 6
    assert trials - pruned <= constrained <= trials
    assert 0 <= pruned <= constrained and feasible <= constrained
    assert feasible + pruned <= trials


@pytest.mark.slow
def test_example_runs_and_reports_consistent_counts(tmp_path):
    trials, constrained, pruned, feasible = _run_example(tmp_path, "--trials", "12")
    assert trials == 12
    assert trials - pruned <= constrained <= trials
    assert 0 <= pruned <= constrained and feasible <= constrained
    assert feasible + pruned <= trials  # with prune on, a pruned trial is never feasible


def test_one_study_keeps_one_constraint_scale(model, space):
    absolute = CostConstraints(model, {"latency_ms": 2.0})
    study, _ = _run(absolute, space, 3)
    assert study.user_attrs["carb_nas.constraint_scale"] == "absolute"
    relative = CostConstraints(model, {"latency_ms": 2.0}, normalize=True)
    with pytest.raises(BudgetError, match="absolute scale.*normalize=False"):
        study.optimize(lambda t: relative.suggest(t, space).depth, n_trials=1)
    assert len(study.trials) == 4 and "carb_nas.latency_ms" not in study.trials[-1].constraints
    # the same scale carries on; costs without budgets write no constraints and claim nothing
    study.optimize(lambda t: absolute.suggest(t, space).depth, n_trials=1)
    bare, _ = _run(CostConstraints(model), space, 2)
    assert "carb_nas.constraint_scale" not in bare.user_attrs


# -- constrain with the kernel-level module model ---------------------------------------------
@pytest.fixture(scope="module")
def module_model():
    """A ModuleCostModel fitted to FAKE per-op times of traced small CNNs (tests.synthetic)."""
    from carb_nas.costmodel import ModuleCostModel
    from tests.synthetic import fake_module_dataset

    return ModuleCostModel().fit(*fake_module_dataset())


def _constrain_study(costs, n_trials: int = 12):
    """A user's study: its own small CNNs (ReLU, or a GELU the fake data never has)."""
    from torch import nn

    from tests.synthetic import small_cnn

    trained = []

    def objective(trial):
        act = nn.GELU if trial.suggest_categorical("act", ["relu", "gelu"]) == "gelu" else None
        net = small_cnn(trial.suggest_categorical("c", [8, 16, 24]), trial.suggest_int("d", 1, 4),
                        act=act)  # fmt: skip
        costs.constrain(trial, net, (2, 3, 16, 16))
        trained.append(trial.number)
        return 0.0

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=n_trials)
    return study, trained


def test_constrain_with_a_module_model_sets_costs_constraints_and_prunes(module_model):
    from tests.synthetic import small_cnn

    nets = [small_cnn(c, d) for c in (8, 16, 24) for d in (1, 4)]
    lat = [module_model.predict_module(n, (2, 3, 16, 16))["latency_ms_upper"] for n in nets]
    budget = float(np.median(lat))
    costs = CostConstraints(module_model, {"latency_ms": budget}, confidence=0.9, prune=True)
    assert costs.kernel_level
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        study, trained = _constrain_study(costs)
    messages = [str(w.message) for w in record]
    assert not any("never saw this architecture" in m for m in messages)  # no ResNet warning
    assert len([m for m in messages if "never measured ops ['gelu']" in m]) == 1  # once
    states = set()
    for t in study.trials:
        a = t.user_attrs
        gelu = t.params["act"] == "gelu"
        assert a["carb_nas.unmodelled_ops"] == (["gelu"] if gelu else [])
        low, mid, up = (a[f"carb_nas.predicted.latency_ms{s}"] for s in ("_lower", "", "_upper"))
        assert 0 < low <= mid < up and a["carb_nas.predicted.peak_mem_mb"] > 0
        assert t.constraints["carb_nas.latency_ms"] == pytest.approx(up - budget)
        pruned = t.state == optuna.trial.TrialState.PRUNED
        assert pruned == (up > budget) == ("carb_nas.pruned_reason" in a)
        assert pruned == (t.number not in trained)  # pruned before the objective's training
        states.add(pruned)
    assert states == {True, False}  # the budget splits the study, so the check has teeth
    # the same numbers as the model's own prediction of such a module
    t = next(t for t in study.trials if t.params["act"] == "relu")
    direct = module_model.predict_module(small_cnn(t.params["c"], t.params["d"]), (2, 3, 16, 16))
    assert t.user_attrs["carb_nas.predicted.latency_ms"] == pytest.approx(direct["latency_ms"])


def test_constrain_bad_inputs_fail_before_anything_is_written(module_model):
    from torch import nn

    class DataDependent(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    costs = CostConstraints(module_model, {"latency_ms": 1.0})
    study = optuna.create_study()
    cases = [
        ("resnet18", (1, 3, 32, 32), "expected a torch.nn.Module"),
        (nn.Conv2d(3, 8, 3), (1, 3), "rejects input shape|invalid input shape"),
        (nn.Conv2d(3, 8, 3), (0, 3, 8, 8), "invalid input shape|positive"),
        (nn.Linear(5, 2), (1, 3, 8, 8), "rejects input shape"),
        (DataDependent(), (1, 3, 8, 8), "meta device"),
    ]
    for module, shape, match in cases:
        trial = study.ask()
        with pytest.raises(ConfigError, match=match):
            costs.constrain(trial, module, shape)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert all(t.user_attrs == {} and t.constraints == {} for t in study.trials)
    assert study.user_attrs == {}  # not even the constraint scale


def test_module_model_from_default_or_a_directory(module_model, monkeypatch, tmp_path):
    from carb_nas.predictors import _load

    loads = []
    monkeypatch.setattr(
        _load, "load_default_module_model", lambda *a, **k: loads.append(a) or module_model
    )
    for given in ("default", None):  # the default platform's predictor: modules by its module
        costs = CostConstraints(given, {"latency_ms": 1.0})
        assert costs.predictor.module_model is module_model
        assert costs.predictor.platform == "cpu/torch/fp32"
    assert len(loads) == 1  # loaded once per process
    module_model.save(tmp_path / "km")
    from_dir = CostConstraints(str(tmp_path / "km"), {"latency_ms": 1.0})
    assert from_dir.kernel_level and from_dir.targets == module_model.targets_
    with pytest.raises(BudgetError, match="does not predict"):
        CostConstraints(module_model, {"energy_j": 1.0})
    with pytest.raises(BudgetError, match="invalid prune"):  # options first: no training
        CostConstraints("default", {"latency_ms": 1.0}, prune="yes")
    assert len(loads) == 1


def test_suggest_with_a_module_model_predicts_the_configs_network(module_model):
    from carb_nas.models import build_model

    doc = {
        "knobs": {"family": ["basic"], "resolution": [32], "batch_size": [1, 2]},
        "family": {"basic": {"depth": [10, 18], "width": [0.25]}},
    }
    costs = CostConstraints(module_model, {"latency_ms": 1e9})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: costs.suggest(t, Space.from_dict(doc)).depth, n_trials=4)
    for t in study.trials:
        cfg = trial_config(t)
        shape = (cfg.batch_size, 3, cfg.resolution, cfg.resolution)
        direct = module_model.predict_module(build_model(cfg, "meta"), shape)
        assert t.user_attrs["carb_nas.predicted.latency_ms"] == pytest.approx(direct["latency_ms"])
        assert t.constraints["carb_nas.latency_ms"] < 0
    onnx = Config("basic", 10, 0.25, 32, 1, runtime="onnxruntime")
    with pytest.raises(ModelError, match="runtime 'torch'.*got 'onnxruntime'"):
        costs.predict(onnx)
