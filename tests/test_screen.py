"""Two-stage screening: budgets, Pareto filter, the screen itself and `carb-nas screen`.

The cost models here are real ``CostModel(preset="fast")`` fits on SYNTHETIC rows (a closed-form
formula over the real architecture features plus seeded noise, labelled ``meter="synthetic"``);
nothing here is a measurement. ``synthetic_rows`` and the model fixtures are shared with
test_search.py and test_validate.py.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from carb_nas.costmodel import model_inputs
from carb_nas.errors import BudgetError, ModelError
from carb_nas.screen import (
    align_to_platform,
    candidate_frame,
    check_budgets,
    pareto_mask,
    parse_budget,
    parse_budgets,
    predict_frame,
    screen,
)
from carb_nas.space import CONFIG_COLUMNS, load_space

SYNTHETIC = "synthetic"


# -- shared fixtures -------------------------------------------------------------------------
def synthetic_rows(
    n: int, runtime: str = "torch", seed: int = 0, space: str = "cpu", energy: bool = False
) -> pd.DataFrame:
    """SYNTHETIC dataset rows (not measurements): a CPU-like formula over real features."""
    from carb_nas.features import compute_features

    rng = np.random.default_rng(seed)
    grid = load_space(space).grid()
    cfg = grid.iloc[np.sort(rng.choice(len(grid), size=min(n, len(grid)), replace=False))]
    cfg = cfg.reset_index(drop=True)
    cfg["runtime"] = runtime
    f = compute_features(cfg)
    b = cfg["batch_size"].to_numpy(dtype=float)
    speed = 25e9 * (1 - 0.6 * np.exp(-b / 8)) * (1.7 if runtime == "onnxruntime" else 1.0)
    lat = 0.1 + 1e3 * f["flops"].to_numpy() / speed + f["act_mb_total"].to_numpy() / 40
    out = cfg.copy()
    out["latency_ms"] = lat * np.exp(rng.normal(0, 0.03, len(cfg)))
    out["peak_mem_mb"] = (2 + f["tensor_peak_mb"].to_numpy()) * np.exp(
        rng.normal(0, 0.01, len(cfg))
    )
    if energy:
        out["energy_j"] = 30 * out["latency_ms"] / 1e3
    out["status"] = "ok"
    out["meter"] = SYNTHETIC
    out["platform"] = f"cpu/{runtime}/fp32"
    return out


def fit_fast(runtime: str, seed: int, n: int = 500):
    from carb_nas.costmodel import CostModel

    rows = synthetic_rows(n, runtime=runtime, seed=seed)
    return CostModel(preset="fast", n_jobs=1, random_state=seed).fit(
        model_inputs(rows), rows[["peak_mem_mb", "latency_ms"]], platform=f"cpu/{runtime}/fp32"
    )


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


# -- budgets ---------------------------------------------------------------------------------
def test_parse_budget_accepts_target_equals_limit():
    assert parse_budget("latency_ms=50") == ("latency_ms", 50.0)
    assert parse_budget(" peak_mem_mb = 2e2 ") == ("peak_mem_mb", 200.0)
    assert parse_budgets(["energy_j=75", "latency_ms_per_image=1.5"]) == {
        "energy_j": 75.0,
        "latency_ms_per_image": 1.5,
    }
    assert parse_budgets({"latency_ms": 10}) == {"latency_ms": 10.0}
    assert parse_budgets(None) == {}


@pytest.mark.parametrize(
    "text, words",
    [
        ("latency_ms", "TARGET=LIMIT"),
        ("latency=50", "unknown budget target"),
        ("flops=5", "unknown budget target"),
        ("latency_ms=fast", "non-numeric"),
        ("latency_ms=", "non-numeric"),
        ("latency_ms=0", "finite number > 0"),
        ("latency_ms=-3", "finite number > 0"),
        ("latency_ms=nan", "finite number > 0"),
        ("latency_ms=inf", "finite number > 0"),
    ],
)
def test_bad_budgets_are_clear_errors(text, words):
    with pytest.raises(BudgetError, match=words):
        parse_budget(text)


def test_duplicate_budget_is_an_error():
    with pytest.raises(BudgetError, match="duplicate budget for latency_ms"):
        parse_budgets(["latency_ms=5", "latency_ms=6"])


def test_budget_on_a_target_the_model_lacks(torch_model):
    with pytest.raises(BudgetError, match="does not predict.*energy_j"):
        check_budgets({"energy_j": 75}, torch_model)
    check_budgets({"latency_ms_per_image": 2}, torch_model)  # derived from latency_ms: fine


# -- Pareto ----------------------------------------------------------------------------------
def _brute_force(v: np.ndarray) -> np.ndarray:
    keep = np.ones(len(v), dtype=bool)
    for i in range(len(v)):
        if np.isnan(v[i]).any():
            keep[i] = False
            continue
        dominates_i = (v <= v[i]).all(axis=1) & (v < v[i]).any(axis=1)
        keep[i] = not dominates_i.any()
    return keep


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
def test_pareto_mask_matches_brute_force(m):
    rng = np.random.default_rng(m)
    for _ in range(40):
        n = int(rng.integers(0, 80))
        v = rng.integers(0, 6, size=(n, m)).astype(float)  # many ties and duplicates
        if n > 3:
            v[rng.integers(n), rng.integers(m)] = np.nan
        np.testing.assert_array_equal(pareto_mask(v), _brute_force(v))


def test_pareto_mask_continuous_3d_large():
    rng = np.random.default_rng(0)
    v = rng.random((3000, 3))
    np.testing.assert_array_equal(pareto_mask(v), _brute_force(v))


# -- screening -------------------------------------------------------------------------------
def test_screen_worked_example_counts_and_invariants(torch_model, ort_model):
    budgets = {"latency_ms": 8.0, "peak_mem_mb": 80.0}
    r = screen(
        "search_spaces/carb_screening.toml",
        torch_model,
        ort_model,
        rank_by="latency_ms",
        top_k=100,
        budgets=budgets,
    )
    c = r.counts
    assert c["candidates"] == 3072
    assert c["shortlisted"] == 100
    assert c["pareto"] <= c["within_budget"] <= 100
    assert -1 <= c["spearman"] <= 1 and c["seconds"] > 0
    # the shortlist is exactly the K smallest source predictions (ties broken by position)
    src = predict_frame(torch_model, candidate_frame("search_spaces/carb_screening.toml"))
    kth = np.sort(src["latency_ms"].to_numpy())[99]
    assert (r.shortlist["source_latency_ms"] <= kth + 1e-12).all()
    # stage 2 uses the target model, aligned to its runtime
    aligned = align_to_platform(ort_model, r.shortlist[list(CONFIG_COLUMNS)])
    assert (aligned["runtime"] == "onnxruntime").all()
    direct = ort_model.predict(model_inputs(aligned))
    np.testing.assert_allclose(r.shortlist["latency_ms"], direct["latency_ms"], rtol=1e-9)
    # budgets hold and the Pareto rows are mutually non-dominated
    assert (r.within_budget["latency_ms"] <= 8.0).all()
    assert (r.within_budget["peak_mem_mb"] <= 80.0).all()
    assert pareto_mask(r.pareto[["peak_mem_mb", "latency_ms"]].to_numpy()).all()
    assert r.feasible and len(r.least_violating) == 0
    assert "candidates" in r.summary()


def test_confidence_is_stricter_than_point_predictions(torch_model, ort_model):
    kw = dict(rank_by="latency_ms", top_k=300, budgets=["latency_ms=3"])
    point = screen("search_spaces/carb_screening.toml", torch_model, ort_model, **kw)
    sure = screen(
        "search_spaces/carb_screening.toml", torch_model, ort_model, confidence=0.95, **kw
    )
    assert "latency_ms_upper" in sure.shortlist
    assert (sure.within_budget["latency_ms_upper"] <= 3).all()
    assert len(sure.within_budget) < len(point.within_budget)
    keys = set(point.within_budget[list(CONFIG_COLUMNS)].itertuples(index=False))
    assert set(sure.within_budget[list(CONFIG_COLUMNS)].itertuples(index=False)) <= keys


def test_empty_feasible_set_is_an_answer(torch_model, ort_model):
    r = screen(
        "search_spaces/carb_screening.toml",
        torch_model,
        ort_model,
        rank_by="peak_mem_mb",
        top_k=20,
        budgets=["latency_ms=0.001"],
    )
    assert not r.feasible and r.counts["within_budget"] == 0 and r.counts["pareto"] == 0
    assert len(r.least_violating) == 10
    assert r.least_violating["budget_excess"].is_monotonic_increasing
    assert "no shortlisted config meets every budget" in r.summary()


def test_screen_rejects_what_the_models_cannot_answer(torch_model, ort_model):
    with pytest.raises(BudgetError, match="ranking target not predicted"):
        screen("search_spaces/carb_screening.toml", torch_model, ort_model, "energy_j", 10)
    with pytest.raises(BudgetError, match="does not predict"):
        screen(
            "search_spaces/carb_screening.toml",
            torch_model,
            ort_model,
            "latency_ms",
            10,
            budgets=["energy_j=75"],
        )
    with pytest.raises(BudgetError, match="confidence"):
        screen(
            "search_spaces/carb_screening.toml",
            torch_model,
            ort_model,
            "latency_ms",
            10,
            confidence=1.5,
        )
    frame = load_space("search_spaces/carb_screening.toml").grid().head(8).copy()
    frame.loc[:3, "precision"] = "fp16"  # the models only know fp32: another space
    with pytest.raises(ModelError, match="trained on another space.*fp16"):
        screen(frame, torch_model, ort_model, "latency_ms", 4)


def test_predict_frame_chunks_and_reuse_are_exact(torch_model):

    frame = load_space("search_spaces/carb_screening.toml").grid().iloc[:300]
    doubled = pd.concat([frame, frame], ignore_index=True)  # every row twice
    got = predict_frame(torch_model, doubled, chunk_rows=70)
    want = torch_model.predict(model_inputs(doubled))
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-12)


# -- CLI -------------------------------------------------------------------------------------
def test_cli_screen_json_and_outputs(model_dirs, tmp_path):
    src, tgt = model_dirs
    out, pareto = tmp_path / "shortlist.csv", tmp_path / "pareto.csv"
    res = CliRunner().invoke(
        cli,
        [
            "screen",
            "search_spaces/carb_screening.toml",
            "--source",
            str(src),
            "--target",
            str(tgt),
            "--rank-by",
            "latency_ms",
            "--top-k",
            "50",
            "--budget",
            "latency_ms=8",
            "--budget",
            "peak_mem_mb=80",
            "-o",
            str(out),
            "--pareto-out",
            str(pareto),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    for key in ("candidates", "shortlisted", "within_budget", "pareto", "spearman", "seconds"):
        assert key in doc
    assert doc["candidates"] == 3072 and doc["shortlisted"] == 50
    short = pd.read_csv(out)
    assert len(short) == 50 and short["pareto"].sum() == doc["pareto"]
    assert len(pd.read_csv(pareto)) == doc["pareto"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--budget", "latency=5"], "unknown budget target"),
        (["--budget", "latency_ms=-1"], "finite number > 0"),
        (["--budget", "latency_ms=abc"], "non-numeric"),
        (["--budget", "energy_j=75"], "does not predict"),
        (["--rank-by", "speed"], "unknown ranking target"),
    ],
)
def test_cli_screen_bad_input(model_dirs, args, words):
    src, tgt = model_dirs
    base = [
        "screen",
        "search_spaces/carb_screening.toml",
        "--source",
        str(src),
        "--target",
        str(tgt),
        "--rank-by",
        "latency_ms",
        "--top-k",
        "10",
    ]
    res = CliRunner().invoke(cli, base + args)
    assert res.exit_code == 1
    assert res.output.startswith("error: ") and words in res.output


def test_cli_screen_missing_model_dir(tmp_path):
    res = CliRunner().invoke(
        cli,
        [
            "screen",
            "search_spaces/carb_screening.toml",
            "--source",
            str(tmp_path / "nope"),
            "--target",
            str(tmp_path / "nope"),
            "--rank-by",
            "latency_ms",
        ],
    )
    assert res.exit_code == 1 and "model not found" in res.output


def test_distilled_stage1_gives_the_exact_shortlist(torch_model, ort_model):
    grid = load_space("cpu").grid()
    exact = screen(grid, torch_model, ort_model, "latency_ms", 150, stage1="exact")
    dist = screen(grid, torch_model, ort_model, "latency_ms", 150, stage1="distilled", seed=3)
    cols = list(CONFIG_COLUMNS)
    assert set(dist.shortlist[cols].itertuples(index=False)) == set(
        exact.shortlist[cols].itertuples(index=False)
    )
    np.testing.assert_allclose(
        np.sort(dist.shortlist["source_latency_ms"]), np.sort(exact.shortlist["source_latency_ms"])
    )
    info = dist.ranking
    assert info["stage1"] == "distilled" and info["margin_log"] > info["holdout_max_abs_log_error"]
    assert info["source_scored"] < len(grid)  # the point: not every candidate was scored
    assert dist.candidates["source_latency_ms"].isna().sum() == len(grid) - info["source_scored"]
    with pytest.raises(Exception, match="unknown stage1 mode"):
        screen(grid.head(10), torch_model, ort_model, "latency_ms", 5, stage1="fast")
