"""carb_nas.costmodel's evaluation functions on SYNTHETIC data (tests/synthetic.py) and
hand-made tables whose answers are known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb_nas.costmodel import _evaluation as ev
from carb_nas.costmodel import model_inputs
from carb_nas.errors import ModelError
from tests.synthetic import synthetic_dataset, tiny

T3 = ["peak_mem_mb", "energy_j", "latency_ms"]


@pytest.fixture(scope="module")
def split():
    df = synthetic_dataset(800, seed=11, space="cpu", telemetry=True)
    X, Y = model_inputs(df), df[T3]
    tr = np.arange(len(df)) < 600
    model = tiny().fit(X[tr], Y[tr])
    return model, X[tr], Y[tr], X[~tr], Y[~tr]


def _research():
    """The research helpers (research/carb_nas_research), outside the shipped package."""
    import sys
    from pathlib import Path

    path = str(Path(__file__).resolve().parents[1] / "research")
    if path not in sys.path:
        sys.path.insert(0, path)
    from carb_nas_research import costmodel_extras

    return costmodel_extras


def test_regression_metrics_known_values():
    m = ev.regression_metrics([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 5.0])
    assert m["mae"] == pytest.approx(0.25)
    assert m["mape"] == pytest.approx(0.25 / 4)
    assert m["r2"] == pytest.approx(1 - 1 / 5)
    assert m["n"] == 4
    with pytest.raises(ModelError):
        ev.regression_metrics([1, 2], [1])


def test_flops_baseline_is_exact_on_linear_data_and_skips_without_flops():
    X = pd.DataFrame({"flops": np.arange(1, 21, dtype=float)})
    Y = pd.DataFrame({"latency_ms": 3 * X["flops"] + 1})
    b = ev.flops_linear_baseline(X[:10], Y[:10], X[10:], Y[10:])
    assert b["latency_ms"]["r2"] == pytest.approx(1.0)
    assert b["latency_ms"]["mae"] == pytest.approx(0.0, abs=1e-9)
    cv = ev.flops_linear_baseline_cv(X, Y)
    assert cv["latency_ms"]["r2"] == pytest.approx(1.0)
    assert "skipped" in ev.flops_linear_baseline(X.rename(columns={"flops": "f"}), Y, X, Y)


def test_latency_energy_proxy():
    rng = np.random.default_rng(0)
    lat = rng.uniform(1, 100, 50)
    Y = pd.DataFrame({"latency_ms": lat, "energy_j": 0.5 * lat + 2})
    p = ev.latency_energy_proxy(Y[:30], Y[30:])
    assert p["slope_j_per_ms"] == pytest.approx(0.5)
    assert p["intercept_j"] == pytest.approx(2.0)
    assert p["r2"] == pytest.approx(1.0)
    assert ev.latency_energy_proxy(Y[["latency_ms"]], Y[["latency_ms"]]) is None


def test_budget_classification_counts():
    Y = pd.DataFrame({"latency_ms": [1.0, 2.0, 3.0, 4.0], "peak_mem_mb": [10.0, 10, 10, 10]})
    pred = pd.DataFrame(
        {
            "latency_ms": [1.0, 3.5, 2.5, 4.0],
            "latency_ms_upper": [1.5, 4.0, 3.5, 5.0],
            "peak_mem_mb": [10.0, 10, 10, 10],
            "peak_mem_mb_upper": [11.0, 11, 11, 11],
        }
    )
    r = ev.budget_classification(Y, pred, {"latency_ms": 3.0, "peak_mem_mb": 20})
    # truth: ok ok ok no; decided: ok no ok no -> one false reject
    assert r["false_rejects"] == 1 and r["false_accepts"] == 0
    assert r["accuracy"] == pytest.approx(0.75)
    r = ev.budget_classification(Y, pred, {"latency_ms": 2.0})
    # truth: ok ok no no; decided: ok no no no
    assert (r["false_accepts"], r["false_rejects"]) == (0, 1)
    r = ev.budget_classification(Y, pred, {"latency_ms": 3.6}, bound="point")
    # truth: ok ok ok no; decided: ok ok ok no
    assert r["accuracy"] == 1.0
    up = ev.budget_classification(Y, pred, {"latency_ms": 3.6}, bound="upper")
    # upper bounds 1.5 4.0 3.5 5.0: the conservative decision rejects row 2 as well
    assert (up["false_accepts"], up["false_rejects"], up["predicted_within_budget"]) == (0, 1, 2)
    with pytest.raises(ModelError, match="budget"):
        ev.budget_classification(Y, pred, {"energy_j": 1.0})
    with pytest.raises(ModelError):
        ev.budget_classification(Y, pred, {})


def test_interval_coverage_and_corrector_effect(split):
    model, _, _, Xte, Yte = split
    cov = ev.interval_coverage(model, Xte, Yte, alpha=0.1)
    for t in T3:
        assert 0.7 < cov[t]["coverage"] <= 1.0
        assert cov[t]["coverage_low_batch"] is not None
        assert cov[t]["median_rel_halfwidth"] > 0
    eff = _research().corrector_effect(model, Xte, Yte)
    assert set(eff) == set(T3)
    assert eff["latency_ms"]["with_corrector"]["n"] == int((Xte["batch_size"] <= 8).sum())


def test_feature_importance_ranks_cascade_and_architecture(split):
    model = split[0]
    imp = ev.feature_importance(model, top=5)
    assert set(imp) == set(T3)
    assert len(imp["latency_ms"]) == 5
    full = model.feature_importance()
    assert full.sum().to_numpy() == pytest.approx(np.ones(3))
    # memory has no upstream prediction; latency sees both
    assert full.loc["pred_peak_mem_mb", "peak_mem_mb"] == 0
    assert full.loc[["pred_peak_mem_mb", "pred_energy_j"], "latency_ms"].sum() > 0


def test_leave_one_batch_tier_out_and_ablation(split):
    model, Xtr, Ytr, Xte, Yte = split
    X = pd.concat([Xtr, Xte])
    Y = pd.concat([Ytr, Yte])
    lobto = ev.leave_one_batch_tier_out(model, X, Y)
    assert lobto["n_test"] == int((X["batch_size"] <= 8).sum())
    assert lobto["n_train"] + lobto["n_test"] == len(X)
    assert set(T3) <= set(lobto)
    assert "skipped" in ev.leave_one_batch_tier_out(model, X.drop(columns=["batch_size"]), Y)
    abl = ev.telemetry_ablation(model, Xtr, Ytr, Xte, Yte)
    assert abl["telemetry_columns"] == ["sm_util", "mem_util"]
    assert set(abl["delta_r2"]) == set(T3)


def test_evaluate_is_strict_json_and_writes_plots(split, tmp_path):
    model, Xtr, Ytr, Xte, Yte = split
    rep = ev.evaluate(model, Xte, Yte, report_dir=tmp_path, baseline_train=(Xtr, Ytr))
    json.dumps(rep, allow_nan=False)
    for key in (
        "test",
        "test_low_batch",
        "baselines",
        "intervals",
        "budget",
        "feature_importance",
    ):
        assert key in rep
    assert "corrector_effect" not in rep  # a research study, not the default evaluation
    assert set(rep["baselines"]["flops_linear"]) == set(T3)
    assert "latency_as_energy" in rep["baselines"]
    assert rep["budget"]["upper"]["false_accepts"] <= rep["budget"]["point"]["false_accepts"]
    for p in rep["plots"]:
        assert Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(rep["plots"]) == 3
    with pytest.raises(ModelError, match="nothing to evaluate"):
        ev.evaluate(model, Xte, Yte.rename(columns=lambda c: c + "_x"))
