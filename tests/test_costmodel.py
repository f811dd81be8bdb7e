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
    CostModel,
    load_default_model,
    model_inputs,
)
from carb_nas.costmodel._common import FORMAT_VERSION
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
    from carb_nas.costmodel._evaluation import flops_linear_baseline, score

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
    with pytest.raises(ModelError, match="carb-nas model train"):
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


# -- nothing pickled, presets, handle_unknown, messages (issues 13 and 19) -----------------
_PICKLE_HEADERS = tuple(bytes([0x80, proto]) for proto in (2, 3, 4, 5))


def _pickled_members(path):
    """Names of the parts of a saved file that start with a pickle header (protocols 2-5);
    a skops file is a zip archive, so each of its members is checked too."""
    import zipfile

    found = []
    if path.read_bytes()[:2] in _PICKLE_HEADERS:
        found.append(path.name)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if z.read(name)[:2] in _PICKLE_HEADERS:
                    found.append(f"{path.name}:{name}")
    return found


def test_pickle_header_check_can_fail(tmp_path):
    import pickle

    for proto in (2, 3, 4, 5):
        p = tmp_path / f"p{proto}.bin"
        p.write_bytes(pickle.dumps({"a": 1}, protocol=proto))
        assert _pickled_members(p) == [p.name]


def test_nothing_is_pickled_and_loading_never_unpickles(fitted, data, tmp_path, monkeypatch):
    import pickle

    import joblib

    _, _, Xte, _ = data
    d = fitted.save(tmp_path / "m")
    for p in d.iterdir():
        assert _pickled_members(p) == [], p

    def refuse(*args, **kwargs):
        raise AssertionError("a saved model must load without unpickling anything")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(joblib, "load", refuse)
    m = CostModel.load(d)
    pd.testing.assert_frame_equal(m.predict(Xte), fitted.predict(Xte), rtol=1e-6)


def test_presets_are_read_only_and_learner_params_are_explicit(small, tmp_path):
    from carb_nas.costmodel._learners import PRESETS, resolve_preset

    with pytest.raises(TypeError):
        PRESETS["carb"]["xgb"]["n_estimators"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        PRESETS["tiny"] = {}  # type: ignore[index]
    a = resolve_preset("fast", {"et": {"n_estimators": 7}})
    assert a["et"] == {"n_estimators": 7, "min_samples_leaf": 2}
    assert resolve_preset("fast")["et"]["n_estimators"] == 100  # the override did not stick
    X, Y = small
    m = tiny(learner_params={**TINY_LEARNERS, "et": {"n_estimators": 7}}).fit(X, Y[["latency_ms"]])
    assert m.learners_["latency_ms"]["et"].n_estimators == 7
    assert m.learner_params_["et"] == {"n_estimators": 7, "min_samples_leaf": 2}
    loaded = CostModel.load(m.save(tmp_path / "m"))
    assert loaded.get_params() == m.get_params()
    assert loaded.learner_params_ == m.learner_params_
    with pytest.raises(ModelError, match="invalid learner_params entry"):
        tiny(learner_params={"forest": {"n_estimators": 3}}).fit(X, Y)


def test_unseen_labels_answer_in_one_short_line_and_ignore_treats_them_as_missing():
    rng = np.random.default_rng(0)
    n = 200
    X = pd.DataFrame({"x": rng.random(n), "kernel": rng.choice([f"k{i}" for i in range(5)], n)})
    y = pd.DataFrame({"latency_ms": 1 + X["x"] + (X["kernel"] == "k0")})
    m = tiny().fit(X, y)
    new = X.head(150).assign(kernel=[f"new{i:03d}" for i in range(150)])
    with pytest.raises(ModelError) as e:
        m.predict(new)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 400, msg
    assert "unseen label" in msg and "and 147 more" in msg and "handle_unknown='ignore'" in msg
    assert sum(f"new{i:03d}" in msg for i in range(150)) == 3
    known = m.predict(X.head(150))
    m.set_params(handle_unknown="ignore")  # a fitted model: only how predict treats labels
    as_missing = m.predict(new)
    pd.testing.assert_frame_equal(as_missing, m.predict(new.assign(kernel=np.nan)))
    assert not np.allclose(as_missing["latency_ms"], known["latency_ms"])
    pd.testing.assert_frame_equal(m.predict(X.head(150)), known)  # seen labels: unchanged
    with pytest.raises(ModelError, match="handle_unknown"):
        m.set_params(handle_unknown="drop").predict(X)


def test_n_jobs_zero_is_refused(small):
    X, Y = small
    with pytest.raises(ModelError, match="invalid n_jobs"):
        tiny(n_jobs=0).fit(X, Y)


def test_alpha_message_speaks_of_confidence_with_plain_numbers(fitted, data):
    _, _, Xte, _ = data
    with pytest.raises(ModelError) as e:
        fitted.predict(Xte, alpha=np.float64(-4.0))
    msg = str(e.value)
    assert "confidence 5" in msg and "alpha -4.0" in msg and "np.float64" not in msg


# -- the manifest is covered by the integrity check (issue 19, items 6 and 15) -------------
def _edit_manifest(d, edit, rehash=False):
    from carb_nas.costmodel._persist import manifest_sha256

    path = d / "manifest.json"
    man = json.loads(path.read_text())
    edit(man)
    if rehash:
        man["manifest_sha256"] = manifest_sha256(man)
    path.write_text(json.dumps(man))


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["blend_weights"]["latency_ms"].update(xgb=5.0),
        lambda m: m["platform"].update(platform="cuda/torch/fp16"),
        lambda m: m["transforms"].update(latency_ms="identity"),
        lambda m: m["conformal"]["latency_ms"]["all"].append(1e9),
    ],
    ids=["blend_weight", "platform", "transform", "conformal_score"],
)
def test_an_edited_manifest_is_refused(fitted, tmp_path, edit):
    d = fitted.save(tmp_path / "m")
    _edit_manifest(d, edit)
    with pytest.raises(ModelError, match="manifest.*was edited") as e:
        CostModel.load(d)
    assert "\n" not in str(e.value)


def test_edited_offset_coefs_are_refused(tmp_path):
    df = synthetic_dataset(200, seed=4, space="cpu")
    X, Y = model_inputs(df), df[["latency_ms"]]
    d = tiny(target_offsets={"latency_ms": ["flops", "n_conv"]}).fit(X, Y).save(tmp_path / "m")
    _edit_manifest(d, lambda m: m["offset_coefs"]["latency_ms"].update(flops=1e3))
    with pytest.raises(ModelError, match="edited"):
        CostModel.load(d)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["targets"].append("power_w"), "target 'power_w' has no transforms"),
        (lambda m: m["learners"].pop("energy_j"), "target 'energy_j' has no learners"),
        (lambda m: m.update(conformal={}), "has no conformal"),
        (lambda m: m["conformal"].update(latency_ms={}), "conformal scores"),
    ],
    ids=["target_without_stage", "energy_without_learners", "empty_conformal", "empty_scores"],
)
def test_an_inconsistent_manifest_is_one_clear_error(fitted, tmp_path, edit, message):
    # even with a matching checksum (rewritten by hand), a manifest missing a target's parts
    # is refused at load, not with a KeyError at predict
    d = fitted.save(tmp_path / "m")
    _edit_manifest(d, edit, rehash=True)
    with pytest.raises(ModelError, match="incomplete model manifest") as e:
        CostModel.load(d)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_format_2_manifests_without_their_own_checksum_still_load(fitted, data, tmp_path):
    _, _, Xte, _ = data
    d = fitted.save(tmp_path / "m")

    def as_v2(m):
        m["format_version"] = 2
        del m["manifest_sha256"]

    _edit_manifest(d, as_v2)
    pd.testing.assert_frame_equal(CostModel.load(d).predict(Xte), fitted.predict(Xte))


# -- saving is atomic and never sweeps away other files (issue 19, item 2) -----------------
def test_save_replaces_a_model_only_when_complete(fitted, tmp_path, monkeypatch):
    import skops.io as sio

    d = fitted.save(tmp_path / "m")
    (d / "evaluation.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in d.iterdir()}

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sio, "dump", broken)
    with pytest.raises(OSError):
        fitted.save(d)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no temporary left behind


def test_save_refuses_a_directory_of_other_files(fitted, tmp_path):
    other = tmp_path / "docs"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ModelError, match="holds other files"):
        fitted.save(other)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
