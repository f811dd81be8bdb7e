"""Two-stage screening: budgets, Pareto filter, the screen itself and `carb-nas screen`.

The cost models here are real ``CostModel(preset="fast")`` fits on SYNTHETIC rows (a closed-form
formula over the real architecture features plus seeded noise, labelled ``meter="synthetic"``);
nothing here is a measurement. ``synthetic_rows`` and the model fixtures (``torch_model``,
``ort_model``, ``model_dirs``) live in tests/synthetic.py and tests/conftest.py.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.budgets import (
    Budgets,
    accept_mask,
    check_budgets,
    check_confidence,
    pareto_mask,
    parse_budget,
    parse_budgets,
)
from carb_nas.cli import cli
from carb_nas.costmodel import model_inputs
from carb_nas.errors import BudgetError, ModelError
from carb_nas.scoring import align_to_platform, candidate_frame, predict_frame
from carb_nas.screen import percent_fewer, screen
from carb_nas.space import CONFIG_COLUMNS, load_space


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


def _old_pareto_mask(values):
    """The hand-written sort/staircase/elimination implementation pymoo's sorting replaced
    (kept here as the reference the new one must match exactly)."""
    from bisect import bisect_left, bisect_right

    v = np.asarray(values, dtype=float)
    n, m = v.shape
    mask = np.zeros(n, dtype=bool)
    ok = ~np.isnan(v).any(axis=1)
    if n == 0 or m == 0 or not ok.any():
        return mask
    idx = np.flatnonzero(ok)
    w = v[idx]
    order = np.lexsort(w.T[::-1])
    s = w[order]
    first = np.ones(len(s), dtype=bool)
    first[1:] = (s[1:] != s[:-1]).any(axis=1)
    group = np.cumsum(first) - 1
    u = s[first]
    if m == 1:
        keep_u = u[:, 0] == u[0, 0]
    elif m == 2:
        before = np.empty(len(u))
        before[0] = np.inf
        before[1:] = np.minimum.accumulate(u[:-1, 1])
        keep_u = u[:, 1] < before
    elif m == 3:
        keep_u = np.zeros(len(u), dtype=bool)
        ys, zs = [], []
        for i in range(len(u)):
            y, z = u[i, 1], u[i, 2]
            k = bisect_right(ys, y) - 1
            if k >= 0 and zs[k] <= z:
                continue
            keep_u[i] = True
            lo = bisect_left(ys, y)
            hi = lo
            while hi < len(ys) and zs[hi] >= z:
                hi += 1
            ys[lo:hi] = [y]
            zs[lo:hi] = [z]
    else:
        keep_u = np.array(
            [not ((u <= r).all(axis=1) & (u < r).any(axis=1)).any() for r in u], dtype=bool
        )
    mask[idx[order]] = keep_u[group]
    return mask


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_pareto_mask_equals_the_old_implementation_with_ties(m):
    rng = np.random.default_rng(100 + m)
    for trial in range(60):
        n = int(rng.integers(0, 300))
        levels = int(rng.integers(2, 12))  # few levels: many ties and exact duplicates
        v = rng.integers(0, levels, size=(n, m)).astype(float)
        if trial % 3 == 0 and n:
            v[rng.integers(n, size=3), rng.integers(m, size=3)] = np.nan
        if trial % 5 == 0 and n:
            v[rng.integers(n), rng.integers(m)] = np.inf
        np.testing.assert_array_equal(pareto_mask(v), _old_pareto_mask(v))


def test_accept_mask_is_the_one_budget_rule():
    pred = pd.DataFrame({"latency_ms": [5.0, 10.0, 10.000001], "latency_ms_upper": [11, 9, 9]})
    budgets = parse_budgets(["latency_ms=10"])
    np.testing.assert_array_equal(accept_mask(pred, 1, budgets, upper=False), [1, 1, 0])
    np.testing.assert_array_equal(accept_mask(pred, 1, budgets, upper=True), [0, 1, 1])
    per_image = parse_budgets(["latency_ms_per_image=2.5"])
    np.testing.assert_array_equal(accept_mask(pred, [2, 4, 4], per_image, False), [1, 1, 0])
    assert accept_mask(pred, 1, {}, upper=False).all()


def test_budgets_are_parsed_once(monkeypatch):
    import carb_nas.budgets as b

    parsed = parse_budgets(["latency_ms=5", "peak_mem_mb=20"])
    assert isinstance(parsed, Budgets) and parsed == {"latency_ms": 5.0, "peak_mem_mb": 20.0}
    calls = []
    monkeypatch.setattr(b, "_check_budget", lambda *a: calls.append(a))
    assert b.parse_budgets(parsed) is parsed and calls == []  # already parsed: returned as is


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, True, "0.9", float("nan")])
def test_one_confidence_check(bad):
    with pytest.raises(BudgetError, match="invalid confidence"):
        check_confidence(bad)
    assert check_confidence(np.float64(0.9)) == 0.9 and check_confidence(None) is None


@pytest.mark.parametrize(
    "kept, total, text",
    [(1, 3072, "99.97"), (3071, 3072, "0.03"), (0, 10, "100.0"), (10, 10, "0.0"), (1, 4, "75.0")],
)
def test_percent_fewer_is_never_rounded_to_a_false_value(kept, total, text):
    assert percent_fewer(kept, total) == text


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
    assert "wrote the shortlist" in res.stderr and "wrote" not in res.stdout


def test_cli_screen_short_option_names_and_help_example(model_dirs):
    src, tgt = model_dirs
    args = ["screen", "carb_screening", "--source", str(src), "--target", str(tgt)]
    res = CliRunner().invoke(cli, args + ["--rank-by", "latency_ms", "--top-k", "5", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["shortlisted"] == 5
    help_text = CliRunner().invoke(cli, ["screen", "--help"]).output
    assert "--source" in help_text and "Example:" in help_text


def test_cli_screen_space_with_precisions_the_models_do_not_know(model_dirs):
    """The README's `screen search_spaces/resnet.toml` with CPU (fp32-only) models."""
    src, tgt = model_dirs
    res = CliRunner().invoke(
        cli,
        ["screen", "search_spaces/resnet.toml", "--source", str(src), "--target", str(tgt),
         "--rank-by", "latency_ms"],
    )  # fmt: skip
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output
    assert "['fp16']" in lines[0] and "7,344 of 14,688 candidates" in lines[0]
    assert "'cpu' space" in lines[0]


def test_summary_percentage_stays_true_for_one_pareto_config(torch_model, ort_model):
    r = screen("search_spaces/carb_screening.toml", torch_model, ort_model, "latency_ms", top_k=1)
    assert len(r.pareto) == 1
    assert "(99.97% fewer configs to profile)" in r.summary() and "100.0%" not in r.summary()


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
    assert res.exit_code == 1 and "--source not found" in res.output


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
