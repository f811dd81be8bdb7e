"""CostModel: the CARB cascade, its corrector, intervals, persistence and input errors.

Data: SYNTHETIC tables from tests/synthetic.py (closed-form targets + noise, labelled
synthetic), or generic random tables. Most tests use ``tiny()`` (same structure as ``carb``, a
few dozen trees, as explicit ``learner_params``) so the suite stays fast.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from carb_nas.costmodel import (
    FORMAT_VERSION,
    CostModel,
    load_default_model,
    model_inputs,
)
from carb_nas.errors import ModelError
from tests.synthetic import TINY_LEARNERS, synthetic_dataset, tiny

TARGETS3 = ["peak_mem_mb", "energy_j", "latency_ms"]


@pytest.fixture(scope="module")
def data():
    df = synthetic_dataset(900, seed=3, space="cpu")
    X = model_inputs(df)
    Y = df[TARGETS3]
    tr = np.arange(len(df)) < 700
    return X[tr], Y[tr], X[~tr], Y[~tr]


@pytest.fixture(scope="module")
def fitted(data):
    Xtr, Ytr, _, _ = data
    return tiny().fit(
        Xtr,
        Ytr,
        platform={"platform": "synthetic/torch/fp32", "device": "cpu"},
        space_fingerprint="abc",
    )


# -- the method -----------------------------------------------------------------------------
def test_fit_returns_self_and_predicts_targets_in_cascade_order(data):
    Xtr, Ytr, Xte, _ = data
    m = tiny()
    assert m.fit(Xtr, Ytr[["latency_ms", "peak_mem_mb"]]) is m
    assert m.targets_ == ["peak_mem_mb", "latency_ms"]  # memory first, energy absent: skipped
    pred = m.predict(Xte)
    assert list(pred.columns) == ["peak_mem_mb", "latency_ms"]
    assert pred.index.equals(Xte.index)
    assert (pred > 0).all().all()


def test_accuracy_on_synthetic_data_beats_flops_only(fitted, data):
    from carb_nas.costmodel import flops_linear_baseline, score

    Xtr, Ytr, Xte, Yte = data
    s = score(fitted, Xte, Yte)
    base = flops_linear_baseline(Xtr, Ytr, Xte, Yte)
    for t in TARGETS3:
        # tiny preset, 700 rows: 0.95-0.97 (an extra irrelevant column moves it by 0.01)
        assert s[t]["r2"] > 0.94, (t, s[t])
        assert s[t]["r2"] > base[t]["r2"]
        assert s[t]["mape"] < 0.2 and s[t]["mape"] < 0.5 * base[t]["mape"]


def test_blend_weights_lie_on_the_grid_and_sum_to_one(fitted):
    for w in fitted.blend_weights_.values():
        assert set(w) == {"xgb", "lgbm", "et"}
        assert sum(w.values()) == pytest.approx(1.0)
        assert all(abs(v * 10 - round(v * 10)) < 1e-9 for v in w.values())


def test_downstream_targets_see_out_of_fold_predictions_not_truth(data, monkeypatch):
    import carb_nas.costmodel._estimator as cm

    seen = []
    real = cm._fit_learner

    def spy(kind, params, F, y, seed, threads):
        seen.append((kind, F.copy(), y.copy()))
        return real(kind, params, F, y, seed, threads)

    monkeypatch.setattr(cm, "_fit_learner", spy)
    Xtr, Ytr, _, _ = data
    m = tiny().fit(Xtr, Ytr[["peak_mem_mb", "latency_ms"]])
    n_base = m.fit_info_["n_features"]
    mem_fit = next(F for k, F, _ in seen if k == "xgb")
    lat_xgb = [(F, y) for k, F, y in seen if k == "xgb"][1]
    assert mem_fit.shape[1] == n_base and lat_xgb[0].shape[1] == n_base + 1
    casc = lat_xgb[0][:, -1].astype(float)
    tr_rows = m.fit_info_["n_train"]
    true_log_mem = np.log(Ytr["peak_mem_mb"].to_numpy())
    # the cascade column is a prediction of log memory: close to it, but never the truth
    assert len(casc) == tr_rows
    assert np.corrcoef(casc, np.sort(casc))[0, 1] > 0  # sanity: finite values
    assert not np.isin(np.round(casc, 4), np.round(true_log_mem, 4)).all()
    assert np.abs(casc - np.median(true_log_mem)).max() > 0.5  # spans the target's range
    assert m.feature_importance()["latency_ms"].get("pred_peak_mem_mb", 0) >= 0


def test_low_batch_corrector_only_touches_low_batch_rows(fitted, data):
    _, _, Xte, _ = data
    assert all(fitted.correctors_[t] is not None for t in TARGETS3)
    a = fitted.predict(Xte)
    b = fitted.predict(Xte, low_batch_correction=False)
    low = Xte["batch_size"].to_numpy() <= 8
    assert np.allclose(a[~low], b[~low])
    assert not np.allclose(a[low], b[low])


def test_corrector_is_skipped_without_batch_size_or_with_zero_damping(data):
    Xtr, Ytr, _, _ = data
    m = tiny().fit(Xtr.drop(columns=["batch_size"]), Ytr[["latency_ms"]])
    assert m.correctors_["latency_ms"] is None
    assert "batch_size" in m.fit_info_["corrector"]["latency_ms"]
    m0 = tiny(corrector_damping=0.0).fit(Xtr, Ytr[["latency_ms"]])
    assert m0.correctors_["latency_ms"] is None


def test_intervals_bracket_predictions_and_cover(fitted, data):
    _, _, Xte, Yte = data
    p = fitted.predict(Xte, alpha=0.2)
    assert [c for c in p.columns if c.startswith("latency")] == [
        "latency_ms",
        "latency_ms_lower",
        "latency_ms_upper",
    ]
    for t in TARGETS3:
        assert (p[f"{t}_lower"] <= p[t]).all() and (p[t] <= p[f"{t}_upper"]).all()
        inside = ((Yte[t] >= p[f"{t}_lower"]) & (Yte[t] <= p[f"{t}_upper"])).mean()
        assert inside > 0.65, (t, inside)  # nominal 0.8 on 200 rows
    wide = fitted.predict(Xte, alpha=0.05)
    assert (wide["latency_ms_upper"] >= p["latency_ms_upper"]).all()


def test_intervals_are_batch_regime_aware(fitted):
    # the synthetic latency noise is 3x larger at batch <= 8: its quantile must be larger
    q = fitted.interval_quantiles(0.1)["latency_ms"]
    assert q["low_batch"] > q["high_batch"]


def test_tiny_calibration_gives_infinite_bounds_and_none_is_an_error(data):
    Xtr, Ytr, Xte, _ = data
    m = tiny(calibration_fraction=0.0).fit(Xtr, Ytr[["latency_ms"]])
    with pytest.raises(ModelError, match="calibration_fraction"):
        m.predict(Xte, alpha=0.1)
    p = m.predict(Xte)
    assert list(p.columns) == ["latency_ms"]
    m2 = tiny(calibration_fraction=0.03).fit(Xtr.iloc[:400], Ytr[["latency_ms"]].iloc[:400])
    p2 = m2.predict(Xte, alpha=0.01)  # 12 calibration rows cannot give 99 %
    assert np.isinf(p2["latency_ms_upper"]).all() and (p2["latency_ms_lower"] == 0).all()


def test_log_transforms_and_one_hot_schema(fitted):
    s = fitted.schema_
    for col in ("flops", "params", "act_mb_total", "act_mb_max", "batch_size"):
        assert col in s.log_columns
    assert "depth" not in s.log_columns
    assert set(s.categorical) == {"family", "precision", "runtime"}
    assert s.categorical["family"] == ["basic", "bottleneck"]
    assert "family=basic" in s.feature_names and "log1p_flops" in s.feature_names
    assert fitted.transforms_ == dict.fromkeys(TARGETS3, "log")


def test_non_positive_target_is_fitted_in_its_own_units():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.random(200), "b": rng.random(200)})
    Y = pd.DataFrame({"delta": X["a"] - 0.5 + rng.normal(0, 0.01, 200)})
    m = tiny().fit(X, Y)
    assert m.transforms_ == {"delta": "identity"}
    assert np.corrcoef(m.predict(X)["delta"], Y["delta"])[0, 1] > 0.9
    with pytest.raises(ModelError, match="log"):
        tiny(log_targets=True).fit(X, Y)


def test_telemetry_interactions_and_architecture_only():
    df = synthetic_dataset(400, seed=5, space="cpu", telemetry=True)
    X = model_inputs(df)
    assert {"sm_util", "mem_util"} <= set(X.columns)
    Y = df[["latency_ms"]]
    m = tiny().fit(X, Y)
    assert m.schema_.interactions == ["batch_x_sm", "flops_x_sm", "act_x_mem", "util_product"]
    assert "sm_util" in m.feature_names_in_
    with pytest.raises(ModelError, match="architecture_only"):
        m.predict(X.drop(columns=["sm_util", "mem_util"]))
    a = tiny(architecture_only=True).fit(X, Y)
    assert "sm_util" not in a.feature_names_in_ and not a.schema_.interactions
    assert a.schema_.dropped["sm_util"].startswith("telemetry")
    a.predict(X.drop(columns=["sm_util", "mem_util"]))  # no telemetry needed


def test_interaction_feature_values():
    df = synthetic_dataset(300, seed=6, space="cpu", telemetry=True)
    X = model_inputs(df)
    m = tiny().fit(X, df[["latency_ms"]])
    F = m.schema_.transform(X)
    names = m.schema_.feature_names
    col = F[:, names.index("flops_x_sm")]
    assert np.allclose(col, np.log1p(X["flops"]) * X["sm_util"], rtol=1e-5)
    assert np.allclose(F[:, names.index("batch_x_sm")], X["batch_size"] * X["sm_util"], rtol=1e-5)


def test_generic_table_and_arrays():
    # a "published benchmark"-like table: no carb_nas config columns at all
    rng = np.random.default_rng(1)
    n = 300
    tab = pd.DataFrame(
        {
            "flops": 10 ** rng.uniform(6, 10, n),
            "params": 10 ** rng.uniform(4, 7, n),
            "batch_size": rng.choice([1, 2, 4, 16, 64], n),
            "resolution": rng.choice([32, 64, 128], n),
        }
    )
    lat = 1e-7 * tab["flops"] * (1 + 2 / tab["batch_size"]) * np.exp(rng.normal(0, 0.05, n))
    m = tiny().fit(tab, pd.DataFrame({"latency_ms": lat}))
    assert (
        m.correctors_["latency_ms"] is not None
        or "low-batch" in m.fit_info_["corrector"]["latency_ms"]
    )
    assert m.score(tab, pd.DataFrame({"latency_ms": lat})) > 0.9
    # plain arrays: columns x0.., target y
    a = tiny().fit(tab.to_numpy(), lat.to_numpy())
    assert a.targets_ == ["y"] and list(a.feature_names_in_) == ["x0", "x1", "x2", "x3"]
    assert a.predict(tab.to_numpy()).shape == (n, 1)


# -- bad input ------------------------------------------------------------------------------
@pytest.fixture
def small():
    df = synthetic_dataset(200, seed=9, space="cpu")
    return model_inputs(df), df[TARGETS3]


def test_error_no_target_column(small):
    X, Y = small
    with pytest.raises(ModelError, match="no target column"):
        tiny().fit(X, Y[[]])
    with pytest.raises(ModelError, match="missing from Y"):
        tiny(targets=["energy_j", "power_w"]).fit(X, Y)


def test_error_non_numeric_features(small):
    X, Y = small
    bad = X.assign(when=pd.date_range("2024-01-01", periods=len(X), freq="h"))
    with pytest.raises(ModelError, match="non-numeric feature column 'when'"):
        tiny().fit(bad, Y)
    ids = X.assign(key=[f"k{i}" for i in range(len(X))])
    with pytest.raises(ModelError, match="too many distinct labels"):
        tiny().fit(ids, Y)
    cell = X.assign(flops=X["flops"].astype(object))
    cell.loc[cell.index[3], "flops"] = "n/a"
    with pytest.raises(ModelError, match="row|cell"):
        tiny().fit(cell, Y)


def test_error_nan_in_targets(small):
    X, Y = small
    Y = Y.copy()
    Y.iloc[5, 2] = np.nan
    with pytest.raises(ModelError, match="latency_ms.*row 6"):
        tiny().fit(X, Y)


def test_error_too_few_rows(small):
    X, Y = small
    with pytest.raises(ModelError, match="too few rows.*at least"):
        tiny().fit(X.iloc[:30], Y.iloc[:30])
    tiny(validation_fraction=0, calibration_fraction=0).fit(X.iloc[:30], Y.iloc[:30])


def test_error_mismatched_schema_at_predict(fitted, data):
    _, _, Xte, _ = data
    with pytest.raises(ModelError, match="schema mismatch.*flops"):
        fitted.predict(Xte.drop(columns=["flops"]))
    with pytest.raises(ModelError, match="unseen label"):
        fitted.predict(Xte.assign(precision="int8"))
    with pytest.raises(ModelError, match="not numeric|non-numeric"):
        fitted.predict(Xte.assign(depth="deep"))


def test_error_bad_params_and_unfitted(small):
    X, Y = small
    with pytest.raises(ModelError, match="unknown preset"):
        CostModel(preset="huge").fit(X, Y)
    with pytest.raises(ModelError, match="differ in length"):
        tiny().fit(X, Y.iloc[:-1])
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        CostModel().predict(X)
    with pytest.raises(ModelError, match="alpha"):
        CostModel().predict(X, alpha=1.5)


# -- sklearn contract ----------------------------------------------------------------------
def test_get_set_params_and_clone(fitted):
    p = fitted.get_params()
    assert p["preset"] == "fast" and p["learner_params"] == TINY_LEARNERS
    assert p["corrector_damping"] == 0.9 and p["handle_unknown"] == "error"
    assert p["low_batch_threshold"] == 8
    c = clone(fitted)
    assert not hasattr(c, "targets_") and c.get_params() == p
    c.set_params(architecture_only=True, corrector_damping=0.5)
    assert c.architecture_only and c.corrector_damping == 0.5


def test_init_only_stores_arguments():
    m = CostModel(preset="nonsense", validation_fraction=7)  # validated in fit, not here
    assert m.preset == "nonsense" and m.validation_fraction == 7


# -- persistence ----------------------------------------------------------------------------
def test_save_load_roundtrip(fitted, data, tmp_path):
    _, _, Xte, _ = data
    d = fitted.save(tmp_path / "m")
    names = sorted(p.name for p in d.iterdir())
    assert "manifest.json" in names
    assert any(n.endswith(".xgb.ubj") for n in names)
    assert any(n.endswith(".lgbm.txt") for n in names)
    assert any(n.endswith(".et.skops") for n in names)
    for p in d.iterdir():  # nothing pickled
        assert not p.read_bytes()[:2] == b"\x80\x04"
    m = CostModel.load(d)
    a, b = fitted.predict(Xte, alpha=0.1), m.predict(Xte, alpha=0.1)
    pd.testing.assert_frame_equal(a, b, rtol=1e-6)
    assert m.targets_ == fitted.targets_
    assert m.platform_ == {"platform": "synthetic/torch/fp32", "device": "cpu"}
    assert m.space_fingerprint_ == "abc"
    assert list(m.feature_names_in_) == list(fitted.feature_names_in_)
    man = json.loads((d / "manifest.json").read_text())
    assert man["format_version"] == FORMAT_VERSION and man["package_version"]
    assert len(man["training_sha256"]) == 64
    assert set(man["files"]) == {n for n in names if n != "manifest.json"}


def test_training_hash_tracks_the_data(data):
    Xtr, Ytr, _, _ = data
    a = tiny().fit(Xtr, Ytr[["latency_ms"]])
    b = tiny().fit(Xtr, Ytr[["latency_ms"]] * 1.01)
    assert a.training_sha256_ != b.training_sha256_


def test_load_rejects_tampered_missing_newer_and_foreign(fitted, tmp_path):
    d = fitted.save(tmp_path / "m")
    man = json.loads((d / "manifest.json").read_text())
    lgbm = next(n for n in man["files"] if n.endswith(".lgbm.txt"))
    text = (d / lgbm).read_text()
    (d / lgbm).write_text(text.replace("num_leaves=", "num_leaves= ", 1))
    with pytest.raises(ModelError, match="modified.*checksum"):
        CostModel.load(d)
    (d / lgbm).unlink()
    with pytest.raises(ModelError, match="missing"):
        CostModel.load(d)
    d2 = fitted.save(tmp_path / "m2")
    man["format_version"] = FORMAT_VERSION + 1
    (d2 / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ModelError, match="newer|Upgrade"):
        CostModel.load(d2)
    with pytest.raises(ModelError, match="manifest.json"):
        CostModel.load(tmp_path / "nowhere")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "manifest.json").write_text("{not json")
    with pytest.raises(ModelError, match="corrupted"):
        CostModel.load(tmp_path / "junk")


def test_saved_model_checks_schema_at_predict(fitted, data, tmp_path):
    _, _, Xte, _ = data
    m = CostModel.load(fitted.save(tmp_path / "m"))
    with pytest.raises(ModelError, match="schema mismatch"):
        m.predict(Xte.drop(columns=["family"]))


def test_load_default_model_names_the_fix():
    with pytest.raises(ModelError, match="carb-nas train"):
        load_default_model("tpu/jax/fp8")


# -- model_inputs ---------------------------------------------------------------------------
def test_model_inputs_from_configs():
    from carb_nas.space import load_space

    grid = load_space("resnet").grid().sample(50, random_state=0)
    X = model_inputs(grid)
    assert X.index.equals(grid.index)
    for col in (
        "family",
        "depth",
        "width",
        "resolution",
        "batch_size",
        "precision",
        "flops",
        "params",
        "act_mb_total",
        "act_mb_max",
    ):
        assert col in X.columns
    assert "sm_util" not in X.columns
    with_tel = grid.assign(sm_util=50.0, mem_util=np.nan)
    Xt = model_inputs(with_tel)
    assert "sm_util" in Xt.columns and "mem_util" not in Xt.columns  # empty telemetry dropped
    with pytest.raises(ModelError, match="config columns"):
        model_inputs(pd.DataFrame({"a": [1]}))


# -- target offsets (an extension, off by default) -----------------------------------------
def test_target_offsets_extrapolate_beyond_the_training_range():
    df = synthetic_dataset(900, seed=8, space="cpu")
    X, Y = model_inputs(df), df[["peak_mem_mb"]]
    big = (X["tensor_peak_mb"] > X["tensor_peak_mb"].quantile(0.9)).to_numpy()
    plain = tiny().fit(X[~big], Y[~big])
    off = tiny(target_offsets={"peak_mem_mb": "tensor_peak_mb"}).fit(X[~big], Y[~big])
    assert off.offsets_ == {"peak_mem_mb": "tensor_peak_mb"} and plain.offsets_ == {}
    y = Y[big]["peak_mem_mb"].to_numpy()
    err_plain = np.abs(np.log(plain.predict(X[big])["peak_mem_mb"].to_numpy() / y)).mean()
    err_off = np.abs(np.log(off.predict(X[big])["peak_mem_mb"].to_numpy() / y)).mean()
    # trees alone cannot predict above the largest training value; the ratio model can
    assert err_off < 0.5 * err_plain
    p = off.predict(X[big], alpha=0.1)
    assert (p["peak_mem_mb_lower"] <= p["peak_mem_mb"]).all()


def test_target_offsets_survive_save_load_and_validate(tmp_path):
    df = synthetic_dataset(300, seed=4, space="cpu")
    X, Y = model_inputs(df), df[["latency_ms"]]
    m = tiny(target_offsets={"latency_ms": "flops"}).fit(X, Y)
    m2 = CostModel.load(m.save(tmp_path / "m"))
    pd.testing.assert_frame_equal(m.predict(X), m2.predict(X), rtol=1e-6)
    with pytest.raises(ModelError, match="not a numeric feature"):
        tiny(target_offsets={"latency_ms": "family"}).fit(X, Y)
    with pytest.raises(ModelError, match="not fitted"):
        tiny(target_offsets={"energy_j": "flops"}).fit(X, Y)
    with pytest.raises(ModelError, match="non-positive"):
        tiny(target_offsets={"latency_ms": "depth"}).fit(X.assign(depth=0), Y)


def test_a_list_offset_fits_non_negative_costs_of_resources(tmp_path):
    df = synthetic_dataset(600, seed=5, space="cpu")
    X, Y = model_inputs(df), df[["latency_ms"]]
    # the synthetic latency is 0.2 ms + flops / throughput(batch) + act_mb_total / 8 MB per ms
    m = tiny(target_offsets={"latency_ms": ["flops", "act_mb_total", "n_conv"]}).fit(X, Y)
    coefs = m.offset_coefs_["latency_ms"]
    assert list(coefs) == ["flops", "act_mb_total", "n_conv"]
    assert all(v >= 0 for v in coefs.values()) and coefs["flops"] > 0
    # the fitted sum alone is a sensible prior: within a factor 2 of most rows
    prior = X[list(coefs)].to_numpy() @ np.array(list(coefs.values()))
    ratio = prior / Y["latency_ms"].to_numpy()
    assert np.mean((ratio > 0.5) & (ratio < 2)) > 0.9
    m2 = CostModel.load(m.save(tmp_path / "m"))
    assert m2.offsets_ == {"latency_ms": ["flops", "act_mb_total", "n_conv"]}
    assert m2.offset_coefs_ == {"latency_ms": coefs}
    pd.testing.assert_frame_equal(m.predict(X), m2.predict(X), rtol=1e-6)
    with pytest.raises(ModelError, match="negative"):
        tiny(target_offsets={"latency_ms": ["flops", "depth"]}).fit(X.assign(depth=-1), Y)
    with pytest.raises(ModelError, match="non-empty list"):
        tiny(target_offsets={"latency_ms": []}).fit(X, Y)
    with pytest.raises(ModelError, match="cannot form a positive offset"):
        tiny(target_offsets={"latency_ms": ["depth"]}).fit(X.assign(depth=0), Y)
