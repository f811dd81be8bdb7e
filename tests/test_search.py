"""Search: encoding, the pymoo Problem, both backends, quality callables, `carb-nas search`.

Models are fast-preset fits on SYNTHETIC rows (see tests/synthetic.py); nothing is measured here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.budgets import metric_values, pareto_mask
from carb_nas.cli import cli
from carb_nas.errors import BudgetError, ConfigError, ModelError, StorageError
from carb_nas.integrations import SpaceProblem
from carb_nas.search import (
    QualityError,
    SpaceEncoding,
    SurrogateEvaluator,
    capacity_proxy,
    default_objectives,
    load_quality,
    refine_front,
    screened_refine,
    search,
)
from carb_nas.space import CONFIG_COLUMNS, Space, load_space

ROOT = Path(__file__).resolve().parents[1]


def small_space() -> Space:
    return Space.from_dict(
        {
            "name": "small",
            "knobs": {
                "family": ["basic", "bottleneck"],
                "width": [0.1, 0.25, 0.5],
                "resolution": [32, 48, 64],
                "batch_size": [1, 2, 4, 8],
            },
            "family": {"basic": {"depth": [8, 10, 18]}, "bottleneck": {"depth": [50]}},
        }
    )


# -- encoding --------------------------------------------------------------------------------
def test_encoding_round_trips_the_whole_grid():
    space = load_space("cpu")
    enc = SpaceEncoding(space)
    grid = space.grid()
    back = enc.decode(enc.encode(grid))
    pd.testing.assert_frame_equal(
        back.reset_index(drop=True), grid.reset_index(drop=True), check_dtype=False
    )


def test_any_integer_row_decodes_to_a_config_of_the_space():
    space = small_space()
    enc = SpaceEncoding(space)
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, enc.upper + 1, size=(500, enc.n_var))  # even out of bounds
    decoded = enc.decode(X)
    grid_keys = set(space.grid().itertuples(index=False))
    assert set(decoded.itertuples(index=False)) <= grid_keys
    # both families and their own depths are reachable
    assert set(decoded["family"]) == {"basic", "bottleneck"}
    assert set(decoded.loc[decoded["family"] == "bottleneck", "depth"]) == {50}


# -- pymoo Problem ---------------------------------------------------------------------------
def test_space_problem_works_with_plain_pymoo(torch_model):
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.repair.rounding import RoundingRepair
    from pymoo.operators.sampling.rnd import IntegerRandomSampling
    from pymoo.optimize import minimize

    problem = SpaceProblem(small_space(), torch_model, budgets={"latency_ms": 5})
    assert problem.n_obj == 3 and problem.n_ieq_constr == 1
    algo = NSGA2(
        pop_size=16,
        sampling=IntegerRandomSampling(),
        crossover=SBX(vtype=float, repair=RoundingRepair()),
        mutation=PM(vtype=float, repair=RoundingRepair()),
    )
    res = minimize(problem, algo, ("n_gen", 4), seed=1)
    configs = problem.decode(res.X)
    ev = problem.evaluator.evaluate(configs)
    np.testing.assert_allclose(problem.evaluator.F(ev), res.F)
    assert (ev["latency_ms"] <= 5).all()  # res holds feasible solutions only
    assert problem.evaluator.n_evaluated <= len(small_space())


def test_constraints_are_relative_excess(torch_model):
    problem = SpaceProblem(small_space(), torch_model, budgets={"latency_ms": 2, "peak_mem_mb": 30})
    ev = problem.evaluator.evaluate(small_space().grid())
    np.testing.assert_allclose(ev["g_latency_ms"], ev["latency_ms"] / 2 - 1)
    np.testing.assert_allclose(ev["g_peak_mem_mb"], ev["peak_mem_mb"] / 30 - 1)
    assert (ev["feasible"] == ((ev["latency_ms"] <= 2) & (ev["peak_mem_mb"] <= 30))).all()


# -- search ----------------------------------------------------------------------------------
def _check_front(res, budgets):
    p = res.pareto
    assert len(p) > 0 and p["feasible"].all()
    for name, limit in budgets.items():
        assert (p[name] <= limit).all()
    F = _objective_matrix(p, res.objectives)
    assert pareto_mask(F).all()
    # nothing evaluated and feasible dominates a front member
    ev = res.evaluated[res.evaluated["feasible"]]
    E = _objective_matrix(ev, res.objectives)
    assert pareto_mask(np.vstack([F, E]))[: len(F)].all()


def _objective_matrix(frame, objectives):
    cols = [
        -frame["quality"] if o == "quality" else metric_values(frame, o, frame["batch_size"])
        for o in objectives
    ]
    return np.column_stack(cols)


def test_pymoo_search_finds_a_feasible_front_with_quality(torch_model, ort_model):
    budgets = {"latency_ms": 6.0, "peak_mem_mb": 60.0}
    res = search(
        "cpu", torch_model, budgets=budgets, trials=600, pop_size=40, seed=3, rescore=ort_model
    )
    _check_front(res, budgets)
    # the cpu space varies batch size: throughput (latency per image) is the default objective
    assert res.objectives == ["latency_ms_per_image", "peak_mem_mb", "quality"]
    assert res.n_evaluated == 600 and res.eval_fraction < 0.1  # exactly the budget
    # quality keeps more than the cheapest network on the front
    assert res.pareto["quality"].max() > res.pareto["quality"].min() + 0.5
    assert {"target_latency_ms", "target_within_budget"} <= set(res.pareto.columns)
    assert res.to_dict()["pareto"] and "Pareto set" in res.summary()


def test_optuna_search_records_constraints_in_storage(torch_model, tmp_path):
    import optuna

    url = f"sqlite:///{tmp_path / 'search.db'}"  # every trial commits ~25 times: keep it short
    budgets = {"latency_ms": 6.0}
    res = search(
        small_space(),
        torch_model,
        budgets=budgets,
        backend="optuna",
        trials=12,
        pop_size=6,
        storage=url,
        study_name="s1",
        seed=0,
    )
    assert res.backend == "optuna-nsga2" and len(res.pareto) > 0
    study = optuna.load_study(study_name="s1", storage=url)
    assert len(study.trials) == 12
    assert all("carb_nas.latency_ms" in t.constraints for t in study.trials)
    for t in study.trials:  # constraint = relative excess of the predicted latency
        pred = t.user_attrs["carb_nas.predicted.latency_ms"]
        assert t.constraints["carb_nas.latency_ms"] == pytest.approx(pred / 6.0 - 1)
    # the same study resumes; other objectives are refused clearly
    search(
        small_space(),
        torch_model,
        budgets=budgets,
        backend="optuna",
        trials=6,
        pop_size=6,
        storage=url,
        study_name="s1",
    )
    assert len(optuna.load_study(study_name="s1", storage=url).trials) == 18
    # the Optuna plugin may join the study on the same (relative) scale only
    from carb_nas.integrations import CostConstraints

    study = optuna.load_study(study_name="s1", storage=url)
    assert study.user_attrs["carb_nas.constraint_scale"] == "relative"
    joins = CostConstraints(torch_model, budgets, normalize=True)
    study.optimize(lambda t: (joins.suggest(t, small_space()).depth, 1.0, 1.0), n_trials=1)
    absolute = CostConstraints(torch_model, budgets, normalize=False)
    with pytest.raises(BudgetError, match="relative scale.*normalize=True"):
        study.optimize(lambda t: (absolute.suggest(t, small_space()).depth, 1.0, 1.0), n_trials=1)
    assert len(study.trials) == 20 and "carb_nas.latency_ms" in study.trials[18].constraints
    with pytest.raises(StorageError, match="already exists with directions"):
        search(
            small_space(),
            torch_model,
            objectives=["latency_ms"],
            backend="optuna",
            trials=4,
            storage=url,
            study_name="s1",
        )


def test_tpe_sampler_runs_on_a_journal_file(torch_model, tmp_path):
    res = search(
        small_space(),
        torch_model,
        budgets={"latency_ms": 6.0},
        backend="optuna",
        sampler="tpe",
        trials=24,
        pop_size=8,
        storage=f"journal:{tmp_path}/j.log",
        study_name="tpe",
    )
    assert res.backend == "optuna-tpe" and res.n_evaluated <= 24
    assert (tmp_path / "j.log").stat().st_size > 0


def test_storage_that_does_not_open(torch_model, tmp_path, monkeypatch):
    import carb_nas.storage

    monkeypatch.setattr(carb_nas.storage.time, "sleep", lambda s: None)  # no retry back-off
    for url, words in (
        ("nosuchdb://x/y", "unsupported storage URL"),
        (f"sqlite:///{tmp_path}/no/dir/x.db", "SQLite database directory does not exist"),
        (f"journal:{tmp_path}/missing/dir/j.log", "journal directory does not exist"),
    ):
        with pytest.raises(StorageError, match=words):
            search(
                small_space(), torch_model, backend="optuna", trials=2, storage=url, study_name="x"
            )
    with pytest.raises(StorageError, match="needs the optuna backend"):
        search(small_space(), torch_model, trials=2, storage="sqlite:///x.db")


def test_empty_feasible_set_gives_least_violating(torch_model):
    res = search(small_space(), torch_model, budgets={"latency_ms": 1e-4}, trials=64, pop_size=16)
    assert not res.feasible and len(res.least_violating) > 0
    assert res.least_violating["violation"].is_monotonic_increasing
    assert "no evaluated config meets every budget" in res.summary()


def test_objectives_and_budgets_are_checked(torch_model):
    with pytest.raises(BudgetError, match="does not predict"):
        search(small_space(), torch_model, objectives=["energy_j"], trials=2)
    with pytest.raises(BudgetError, match="unknown objective"):
        search(small_space(), torch_model, objectives=["accuracy"], trials=2)
    with pytest.raises(BudgetError, match="does not predict"):
        search(small_space(), torch_model, budgets=["energy_j=5"], trials=2)
    fp16 = Space.from_dict(
        {
            "knobs": {
                "family": ["basic"],
                "depth": [8],
                "width": [0.1],
                "resolution": [32],
                "batch_size": [1, 2],
                "precision": ["fp32", "fp16"],
            }
        }
    )
    with pytest.raises(ModelError, match="another space"):
        search(fp16, torch_model, trials=4)


def test_per_image_objective(torch_model):
    res = search(
        small_space(),
        torch_model,
        objectives=["latency_ms_per_image", "quality"],
        trials=64,
        pop_size=16,
    )
    per_image = res.pareto["latency_ms"] / res.pareto["batch_size"]
    assert per_image.is_monotonic_increasing  # sorted by the first objective


# -- quality ---------------------------------------------------------------------------------
def test_capacity_proxy_grows_with_size_not_batch():
    from carb_nas.features import compute_features

    grid = small_space().grid()
    q = capacity_proxy(pd.concat([grid, compute_features(grid)], axis=1))
    by = (
        pd.Series(q)
        .groupby([grid["family"], grid["depth"], grid["width"], grid["resolution"]])
        .nunique()
    )
    assert (by == 1).all()  # independent of batch size
    basic = grid["family"] == "basic"
    wide = q[(basic & (grid["width"] == 0.5)).to_numpy()].mean()
    narrow = q[(basic & (grid["width"] == 0.1)).to_numpy()].mean()
    assert wide > narrow


@pytest.fixture()
def quality_module(tmp_path, monkeypatch):
    (tmp_path / "myquality.py").write_text(
        textwrap.dedent("""
        import math
        def one_arg(config):
            return config.width * config.resolution
        def two_args(config, features):
            return math.log10(features["params"]) + config.depth / 100
        def broken(config):
            raise RuntimeError("no scores for " + config.family)
        def nan(config):
            return float("nan")
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "myquality"


def test_user_quality_callables(torch_model, quality_module):
    for fn in ("one_arg", "two_args"):
        res = search(
            small_space(),
            torch_model,
            quality=f"{quality_module}:{fn}",
            objectives=["latency_ms", "quality"],
            trials=48,
            pop_size=16,
        )
        assert res.evaluated["quality"].notna().all()
    one = search(
        small_space(),
        torch_model,
        quality=f"{quality_module}:one_arg",
        objectives=["latency_ms", "quality"],
        trials=48,
        pop_size=16,
    )
    ev = one.evaluated
    np.testing.assert_allclose(ev["quality"], ev["width"] * ev["resolution"])


@pytest.mark.parametrize(
    "spec, words",
    [
        ("nosuchmodule_xyz:f", "cannot import the quality module"),
        ("myquality:missing", "quality callable not found"),
        ("myquality", "malformed quality callable"),
        ("myquality:broken", "failed on .*RuntimeError: no scores for"),
        ("myquality:nan", "expected a finite number"),
    ],
)
def test_bad_quality_callables(torch_model, quality_module, spec, words):
    with pytest.raises(QualityError, match=words):
        load_quality(spec)
        search(small_space(), torch_model, quality=spec, trials=8, pop_size=8)


# -- CLI -------------------------------------------------------------------------------------
def test_cli_search_json(model_dirs, tmp_path):
    src, tgt = model_dirs
    out = tmp_path / "pareto.csv"
    res = CliRunner().invoke(
        cli,
        [
            "search",
            "cpu",
            "--source",
            str(src),
            "--target",
            str(tgt),
            "--budget",
            "latency_ms=6",
            "--budget",
            "peak_mem_mb=60",
            "--trials",
            "300",
            "--pop-size",
            "32",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["pareto"] and doc["validated"] == []  # validation is off with --model
    assert len(pd.read_csv(out)) == len(doc["pareto"])
    assert set(CONFIG_COLUMNS) <= set(doc["pareto"][0])


@pytest.mark.parametrize(
    "args, words",
    [
        (["--budget", "watts=3"], "unknown budget target"),
        (["--budget", "latency_ms=0"], "finite number > 0"),
        (["--budget", "latency_ms=x"], "non-numeric"),
        (["--budget", "energy_j=75"], "does not predict"),
        (
            ["--backend", "optuna", "--storage", "nosuchdb://a/b", "--study-name", "s"],
            "unsupported storage URL",
        ),
        (
            ["--backend", "optuna", "--storage", "sqlite:////nonexistent/dir/x.db"],
            "SQLite database directory does not exist",
        ),
        (["--pop-size", "0"], "invalid --pop-size for pymoo: expected a whole number >= 2"),
        (["--pop-size", "-3"], "got -3"),
        (["--backend", "optuna", "--pop-size", "1"], "expected a whole number >= 2"),
        (["--seed", "-1"], "Invalid value for '--seed'"),
        (["--report", "/proc/x"], "cannot write report directory"),
        (["--quality", "nosuchmodule_xyz:f"], "cannot import the quality module"),
        (["--objectives", "latency_ms,speed"], "unknown objective"),
    ],
)
def test_cli_search_bad_input(model_dirs, args, words, monkeypatch):
    import carb_nas.search

    def no_search(*a, **k):
        raise AssertionError("searched despite a bad input")

    monkeypatch.setattr(carb_nas.search, "search", no_search)
    monkeypatch.setattr("carb_nas.storage.time.sleep", lambda s: None)  # no retry back-off
    src, _ = model_dirs
    res = CliRunner().invoke(cli, ["search", "cpu", "--source", str(src), "--trials", "8"] + args)
    assert res.exit_code in (1, 2), res.output
    assert words in res.output and "Traceback" not in res.output
    if res.exit_code == 1:  # ours: one line (exit 2: click's usage error for an IntRange)
        assert res.output.startswith("error: ") and len(res.output.strip().splitlines()) == 1


def test_cli_search_model_of_another_space(model_dirs, tmp_path):
    (tmp_path / "fp16.toml").write_text(
        'name = "fp16"\n[knobs]\nfamily = ["basic"]\ndepth = [8]\nwidth = [0.1]\n'
        'resolution = [32]\nbatch_size = [1, 2]\nprecision = ["fp32", "fp16"]\n'
    )
    res = CliRunner().invoke(
        cli,
        ["search", str(tmp_path / "fp16.toml"), "--source", str(model_dirs[0]), "--trials", "4"],
    )
    assert res.exit_code == 1 and "trained on another space" in res.output


@pytest.mark.slow
def test_pymoo_problem_example_runs():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "pymoo_problem.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Pareto" in proc.stdout


def test_pymoo_problem_example_runs_small(monkeypatch, capsys):
    import runpy

    args = ["--pop-size", "8", "--n-gen", "2", "--synthetic"]
    monkeypatch.setattr(sys, "argv", ["pymoo_problem.py", *args])
    runpy.run_path(str(ROOT / "examples" / "pymoo_problem.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "Pareto set of the final population" in out and "SYNTHETIC" in out
    evaluated = int(re.search(r"evaluated (\d+) distinct configs", out).group(1))
    assert 0 < evaluated <= 16  # two generations of 8


def test_cli_search_embedded_default_validates(model_dirs, monkeypatch, tmp_path):
    """No --model: shipped models (here the fixtures, as if shipped), rescore, then a REAL
    measurement of the picked Pareto config on this CPU with ONNX Runtime."""
    import carb_nas.costmodel._defaults as cm

    shipped = {"cpu/torch/fp32": model_dirs[0], "cpu/onnxruntime/fp32": model_dirs[1]}
    monkeypatch.setattr(
        cm,
        "default_model_dir",
        lambda platform="cpu/torch/fp32": shipped.get(platform, tmp_path / "x"),
    )
    res = CliRunner().invoke(cli, ["search", "--trials", "200", "--max-configs", "1", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["rescored"] and doc["budgets"] == {"latency_ms": 20.0, "peak_mem_mb": 100.0}
    assert len(doc["validated"]) == 1
    item = doc["validated"][0]
    assert item["runtime"] == "onnxruntime"
    for t in ("latency_ms", "peak_mem_mb"):
        assert item["measured"][t] > 0 and item["predicted"][t] > 0
    # validation compares with what the search predicted (the rescore model's columns) ...
    (row,) = [
        r for r in doc["pareto"] if all(r[c] == item[c] for c in ("family", "depth", "width",
                                                               "resolution", "batch_size"))
    ]  # fmt: skip
    for t in ("latency_ms", "peak_mem_mb"):
        assert item["predicted"][t] == row[f"target_{t}"]
    assert item["within_budget_predicted"] == row["target_within_budget"]
    # ... and decides from the measurements against the budgets
    measured_ok = all(item["measured"][t] <= doc["budgets"][t] for t in doc["budgets"])
    assert item["within_budget_measured"] == measured_ok
    want = ("true_" if measured_ok == item["within_budget_predicted"] else "false_") + (
        "accept" if item["within_budget_predicted"] else "reject"
    )
    assert item["decision"] == want
    assert item["decision_correct"] is want.startswith("true_")


def test_search_to_validate_featurizes_each_config_once(torch_model, monkeypatch):
    """search -> rescore on the same platform -> validate: compute_features runs once per
    config; validate uses the search's predictions and predicts nothing."""
    import carb_nas.features as features
    from carb_nas.validate import validate

    seen: list[tuple] = []
    real = features.compute_features

    def counting(frame):
        seen.extend(map(tuple, frame[list(CONFIG_COLUMNS)].astype(str).to_numpy().tolist()))
        return real(frame)

    monkeypatch.setattr(features, "compute_features", counting)
    res = search(
        small_space(), torch_model, budgets={"latency_ms": 6.0}, trials=48, pop_size=12,
        rescore=torch_model,
    )  # fmt: skip
    assert len(seen) == res.n_evaluated == len(set(seen))  # once per config, rescore included
    assert res.rescored and res.scored is not None

    class Prof:  # a stand-in profiler: the bookkeeping, not the timing, is under test
        device_name, kind, platform = "test cpu", "cpu", "cpu/torch/fp32"
        runtime = type("R", (), {"name": "torch", "threads": 1})()

        def profile(self, config):
            return {"key": config.key, "status": "ok", "platform": self.platform,
                    "device": "cpu", "latency_ms": 1.0, "peak_mem_mb": 1.0,
                    "minor_faults_per_run": 0.0}  # fmt: skip

    predicted = []
    monkeypatch.setattr(torch_model, "predict", lambda *a, **k: predicted.append(1))
    picked = res.pareto.head(3)
    v = validate(
        picked, model=torch_model, budgets=res.budgets, profiler=Prof(),
        scored=res.scored.take(picked.index),
    )  # fmt: skip
    assert len(seen) == res.n_evaluated and predicted == []  # nothing featurized or predicted
    np.testing.assert_array_equal(v.rows["predicted_latency_ms"], picked["target_latency_ms"])
    np.testing.assert_array_equal(v.rows["accept_predicted"], picked["target_within_budget"])


def test_search_builds_one_evaluator(torch_model, monkeypatch):
    import carb_nas.search._evaluator as e
    import carb_nas.search._search as s

    built = []
    real = e.SurrogateEvaluator

    class Counting(real):
        def __init__(self, *a, **k):
            built.append(1)
            super().__init__(*a, **k)

    monkeypatch.setattr(s, "SurrogateEvaluator", Counting)
    search(small_space(), torch_model, budgets=["latency_ms=6"], trials=16, pop_size=8)
    assert built == [1]


def test_optuna_pop_size_one_is_refused_before_the_study(torch_model, tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(ConfigError, match=">= 2"):
        search(small_space(), torch_model, backend="optuna", pop_size=1, trials=4, storage=url)
    assert not (tmp_path / "s.db").exists()


def test_cli_search_storage_defaults_to_the_environment(model_dirs, tmp_path, monkeypatch):
    import optuna

    journal = tmp_path / "env.log"
    monkeypatch.setenv("CARB_NAS_STORAGE", f"journal:{journal}")
    base = ["search", "cpu", "--source", str(model_dirs[0]), "--trials", "8", "--pop-size", "4"]
    res = CliRunner().invoke(cli, base + ["--json"])  # pymoo: the optuna default is not used
    assert res.exit_code == 0, res.output
    assert not journal.exists()
    res = CliRunner().invoke(cli, base + ["--backend", "optuna", "--study-name", "env", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["study_name"] == "env"
    study = optuna.load_study(study_name="env", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))))  # fmt: skip
    assert len(study.trials) == 8
    assert "searching" in res.stderr and "searching" not in res.stdout


@pytest.mark.parametrize("command", ["screen", "search", "validate"])
def test_cli_help_shows_one_example(command):
    out = CliRunner().invoke(cli, [command, "--help"]).output
    assert out.count("Example:") == 1 and f"carb-nas {command} " in out
    if command != "screen":
        assert "--report" in out and "--json" in out
        assert ("--model" if command == "validate" else "--source") in out


def test_default_search_pareto_set_spans_batch_sizes(torch_model):
    """The main job: with no objectives named, a space that varies batch size is searched for
    latency per image beside memory and quality, so batch 1 no longer dominates everything."""
    res = search("cpu", torch_model, budgets=["latency_ms=20", "peak_mem_mb=100"], trials=400)
    distinct = res.pareto_distinct()
    assert set(distinct) == {"family", "depth", "width", "resolution", "batch_size"}
    assert distinct["batch_size"] >= 4 and distinct["width"] >= 4 and distinct["depth"] >= 3
    assert res.to_dict()["pareto_distinct"] == distinct
    line = next(x for x in res.summary().splitlines() if x.startswith("Pareto set"))
    assert f"{distinct['batch_size']} batch sizes" in line and "resolutions" in line
    # per-batch latency stays a budget and is shown beside the objectives
    assert (res.pareto["latency_ms"] <= 20).all() and "latency_ms" in res.summary()
    # the old objectives (per batch) keep far fewer batch sizes (only batch 1 with the
    # default models; this test model is rougher)
    old = search(
        "cpu",
        torch_model,
        budgets=["latency_ms=20", "peak_mem_mb=100"],
        objectives=["peak_mem_mb", "latency_ms", "quality"],
        trials=400,
    )
    assert old.pareto_distinct()["batch_size"] < distinct["batch_size"]


def test_default_objectives_keep_per_batch_latency_for_a_fixed_batch(torch_model):
    fixed = Space.from_dict(
        {
            "name": "b8",
            "knobs": {"family": ["basic"], "width": [0.1, 0.25], "resolution": [32],
                      "batch_size": [8]},
            "family": {"basic": {"depth": [8, 10]}},
        }
    )  # fmt: skip
    assert default_objectives(torch_model, fixed) == ["peak_mem_mb", "latency_ms", "quality"]
    assert default_objectives(torch_model, load_space("cpu"))[0] == "latency_ms_per_image"
    assert default_objectives(torch_model) == ["peak_mem_mb", "latency_ms", "quality"]


@pytest.mark.slow
def test_pymoo_evaluates_exactly_the_budget_and_never_a_config_twice(torch_model, monkeypatch):
    import carb_nas.search._evaluator as evaluator_module

    seen = []
    real = evaluator_module.score_configs

    def spy(model, frame, **kw):
        seen.extend(map(tuple, frame[list(CONFIG_COLUMNS)].itertuples(index=False)))
        return real(model, frame, **kw)

    monkeypatch.setattr(evaluator_module, "score_configs", spy)
    res = search("cpu", torch_model, budgets=["latency_ms=20"], trials=333, pop_size=32, seed=1)
    assert res.n_evaluated == 333 == len(seen) == len(set(seen))
    # a space smaller than the budget is evaluated whole, then the search stops
    small = search(small_space(), torch_model, trials=10_000, pop_size=8)
    assert small.n_evaluated == len(small_space())


def test_cli_search_embedded_default_says_where_models_come_from(model_dirs, monkeypatch, tmp_path):
    import carb_nas.costmodel._defaults as cm

    shipped = {"cpu/torch/fp32": model_dirs[0], "cpu/onnxruntime/fp32": model_dirs[1]}
    monkeypatch.setattr(
        cm,
        "default_model_dir",
        lambda platform="cpu/torch/fp32": shipped.get(platform, tmp_path / "x"),
    )
    res = CliRunner().invoke(cli, ["search", "--trials", "150", "--no-validate"])
    assert res.exit_code == 0, res.output
    assert "--source cpu/torch/fp32 (carb cascade" in res.stderr
    assert "a model file shipped with carb_nas" in res.stderr
    assert "150 distinct configs to evaluate" in res.stderr  # announced ...
    assert "150 distinct configs evaluated" in res.stdout  # ... and made
    assert "latency_ms_per_image" in res.stdout and "batch sizes" in res.stdout


def test_refine_front_evaluates_unseen_neighbours_of_the_front_within_budget(torch_model):
    from carb_nas.search._pymoo import STEPS

    space = small_space()
    ev = SurrogateEvaluator(space, torch_model, budgets={"latency_ms": 20.0})
    start = space.grid().sample(n=12, random_state=0).reset_index(drop=True)
    ev.evaluate(start)
    enc = ev.encoding
    front = enc.encode(ev.pareto()).astype(int)
    calls = []
    real = ev.evaluate

    def spy(frame):
        calls.append(frame.copy())
        return real(frame)

    ev.evaluate = spy  # type: ignore[method-assign]
    made = refine_front(ev, 30)
    assert made == 18 and ev.n_evaluated == 30  # exactly the budget left
    # the first round: configs one STEPS move of one knob away from a front member (as the
    # encoding decodes it: a family switch maps the other knobs to that family's values)
    moves = []
    for j in range(enc.n_var):
        for d in STEPS:
            Y = front.copy()
            Y[:, j] += d
            moves.append(Y[(Y[:, j] >= 0) & (Y[:, j] <= enc.upper[j])])
    reachable = set(enc.config_codes(enc.decode(np.vstack(moves))).tolist())
    assert set(enc.config_codes(calls[0]).tolist()) <= reachable
    seen = pd.concat(calls)[list(CONFIG_COLUMNS)]
    assert not seen.duplicated().any()
    assert not seen.merge(start[list(CONFIG_COLUMNS)]).shape[0]
    # a space evaluated whole has no unseen neighbour: nothing more to do
    ev.evaluate = real  # type: ignore[method-assign]
    ev.evaluate(space.grid())
    assert refine_front(ev, len(space) + 10) == 0


def test_greedy_pick_takes_only_predictions_beyond_the_front_and_spreads():
    from carb_nas.search._pymoo import _greedy_beyond_front

    front = np.array([[0.0, 1.0], [1.0, 0.0]])
    F_hat = np.array(
        [
            [0.2, 0.2],  # far beyond the front
            [0.21, 0.21],  # beyond it too, but dominated by the first pick
            [0.9, -0.5],  # beyond, in another part of the front
            [2.0, 2.0],  # dominated by the front
            [0.1, 0.1],  # beyond, but predicted infeasible
        ]
    )
    feasible = np.array([True, True, True, True, False])
    for rng in (None, np.random.default_rng(0)):  # by the largest shift, or by volume
        picks = _greedy_beyond_front(F_hat, feasible, front, k=5, rng=rng)
        assert picks.tolist() == [0, 2]  # the near twin of a pick and the dominated one never
        assert _greedy_beyond_front(F_hat, feasible, front, k=1, rng=rng).tolist() == [0]
        assert len(_greedy_beyond_front(F_hat, np.zeros(5, dtype=bool), front, k=5)) == 0


def test_greedy_pick_by_volume_follows_the_exact_hypervolume_gain():
    """With an rng, each pick is a candidate whose exact hypervolume gain (pymoo's HV, in the
    front-normalized objectives, reference 1.1) given the picks before it is the largest, up
    to the estimate's sampling error; the largest epsilon shift would choose otherwise here."""
    from pymoo.indicators.hv import HV

    from carb_nas.search._pymoo import _epsilon_shift, _greedy_beyond_front

    rng = np.random.default_rng(0)
    front = rng.random((40, 3))
    front /= np.linalg.norm(front, axis=1, keepdims=True)  # a convex front on the sphere
    cand = rng.random((60, 3))
    cand /= np.linalg.norm(cand, axis=1, keepdims=True) / rng.uniform(0.85, 1.0, (60, 1))
    hv = HV(ref_point=np.full(3, 1.1))
    lo, scale = front.min(axis=0), front.max(axis=0) - front.min(axis=0)

    def gain(points, c):
        return hv((np.vstack([points, c]) - lo) / scale) - hv((points - lo) / scale)

    picks = _greedy_beyond_front(cand, np.ones(60, bool), front, k=3, rng=np.random.default_rng(0))
    assert len(picks) == 3
    grown = front
    for i in picks:
        gains = np.array([gain(grown, c) for c in cand])
        assert np.median(gains) < 0.5 * gains.max()  # most candidates add far less
        assert gains[i] >= 0.9 * gains.max(), (i, int(np.argmax(gains)))
        grown = np.vstack([grown, cand[i]])
    shift = _epsilon_shift(((cand - lo) / scale).astype(np.float32), (front - lo) / scale)
    assert int(np.argmax(shift)) != picks[0]


def _medium_space() -> Space:
    return Space.from_dict(
        {
            "name": "medium",
            "knobs": {
                "family": ["basic"],
                "width": [0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.625, 0.75, 1.0],
                "resolution": [32, 40, 48, 56, 64, 80, 96],
                "batch_size": [1, 2, 4, 8, 16, 32, 64],
            },
            "family": {"basic": {"depth": [8, 10, 14, 18, 26, 34]}},
        }
    )


def _hv_ratio(ev, ref_ev, front_ref) -> float:
    from pymoo.indicators.hv import HV

    F_ref = ref_ev.F(front_ref)
    lo, hi = F_ref.min(axis=0), F_ref.max(axis=0)
    scale = np.where(hi > lo, hi - lo, 1.0)
    hv = HV(ref_point=np.full(F_ref.shape[1], 1.1))
    return hv((ref_ev.F(ev.pareto()) - lo) / scale) / hv((F_ref - lo) / scale)


def test_screened_refine_beats_the_plain_neighbourhood_at_the_same_budget(torch_model):
    space = _medium_space()  # 2,940 configs
    objectives = ["latency_ms_per_image", "peak_mem_mb", "quality"]
    budgets = {"latency_ms": 40.0, "peak_mem_mb": 200.0}
    exhaustive = SurrogateEvaluator(space, torch_model, objectives, budgets)
    front_ref = exhaustive.pareto(exhaustive.evaluate(space.grid()))
    start = space.grid().sample(n=150, random_state=0).reset_index(drop=True)
    ratios = {}
    for name, refine in (("plain", refine_front), ("screened", screened_refine)):
        ev = SurrogateEvaluator(space, torch_model, objectives, budgets)
        ev.evaluate(start)
        made = refine(ev, 250)
        assert made == 100 and ev.n_evaluated == 250  # exactly the budget left
        assert not ev.archive()[list(CONFIG_COLUMNS)].duplicated().any()
        ratios[name] = _hv_ratio(ev, exhaustive, front_ref)
    assert ratios["screened"] > ratios["plain"], ratios


def test_screened_refine_stops_when_it_cannot_fit_or_nothing_is_left(torch_model):
    space = _medium_space()
    ev = SurrogateEvaluator(space, torch_model, budgets={"latency_ms": 40.0})
    ev.evaluate(space.grid().sample(n=10, random_state=0).reset_index(drop=True))
    assert screened_refine(ev, 100) == 0  # 10 configs cannot fit the screen's ~40 terms
    ev.evaluate(space.grid())
    assert screened_refine(ev, len(space) + 10) == 0  # nothing unseen to screen


def test_a_budget_over_a_capped_space_scores_exactly_its_configs(torch_model):
    capped = Space.from_dict(
        {
            "name": "capped",
            "knobs": {
                "family": ["basic"],
                "width": [0.25, 0.5, 1.0],
                "resolution": [32, 64, 128],
                "batch_size": [1, 4, 16],
            },
            "family": {"basic": {"depth": [10, 18, 34]}},
            "limits": {"max_gflops_per_batch": 1.0},
        }
    )
    assert len(capped) < 81  # the cap leaves configs of the full product out
    res = search(capped, torch_model, trials=len(capped) + 50, seed=0)
    # before: the encoding's configs beyond the cap were evaluated too (112 % of the space)
    assert res.n_evaluated == len(capped)
    assert len(res.pareto) and (res.pareto["gflops_per_batch"] <= 1.0).all()


def test_search_with_a_calibrated_model_scores_families_it_never_saw(torch_model, recwarn):
    from carb_nas.costmodel import CalibratedModel, model_inputs

    rows = small_space().grid().sample(20, random_state=0)
    measured = torch_model.predict(model_inputs(rows))[["peak_mem_mb", "latency_ms"]] * 1.2
    calibrated = CalibratedModel(torch_model, method="scale").fit(model_inputs(rows), measured)
    mixed = Space.from_dict(
        {
            "name": "mixed",
            "knobs": {"family": ["basic", "mobilenet_v2"], "width": [0.5, 1.0],
                      "resolution": [32, 64], "batch_size": [1, 2, 4]},
            "family": {"basic": {"depth": [10, 18]}, "mobilenet_v2": {"depth": [9, 17]}},
        }
    )  # fmt: skip
    # before: "unseen label(s) in column 'family'" (the source model's schema, not ignored)
    res = search(mixed, calibrated, trials=len(mixed), seed=0)
    assert res.n_evaluated == len(mixed) and "mobilenet_v2" in set(res.pareto["family"])
    unseen = [w for w in recwarn if "never saw family" in str(w.message)]
    assert len(unseen) == 1  # once per search, not once per scored batch


def test_cli_search_says_each_warning_once(model_dirs, tmp_path):
    space = tmp_path / "mixed.toml"
    space.write_text('[knobs]\nfamily = ["basic", "mobilenet_v2"]\nwidth = [0.5, 1.0]\n'
                     "resolution = [32, 64]\nbatch_size = [1, 2, 4]\n[family.basic]\n"
                     "depth = [10, 18]\n[family.mobilenet_v2]\ndepth = [9, 17]\n")  # fmt: skip
    args = ["search", str(space), "--source", str(model_dirs[0]), "--trials", "20"]
    res = CliRunner().invoke(cli, [*args, "--no-validate"])
    assert res.exit_code == 0, res.output
    notes = [line for line in res.stderr.splitlines() if "never saw family" in line]
    assert len(notes) == 1 and "zoo" in notes[0], res.stderr  # and names the models that did
