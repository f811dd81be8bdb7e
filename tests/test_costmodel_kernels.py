"""The kernel-level predictor (costmodel._kernels) on traced tiny networks with FAKE per-op
times (a made-up roofline; never a measurement, never shipped)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from carb_nas.costmodel import KernelCostModel, ModuleCostModel
from carb_nas.costmodel._kernels import _TRANSCENDENTAL, anchored_ops, leave_one_family_out
from carb_nas.errors import ModelError
from carb_nas.features import clear_ops_cache, trace_ops
from tests.synthetic import fake_module_dataset, fake_op_ms, small_cnn

_net = small_cnn


def _research():
    """The research helpers (research/carb_nas_research), outside the shipped package."""
    import sys
    from pathlib import Path

    path = str(Path(__file__).resolve().parents[1] / "research")
    if path not in sys.path:
        sys.path.insert(0, path)
    from carb_nas_research import costmodel_extras

    return costmodel_extras


def _fake_dataset(n: int = 105, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    return fake_module_dataset(n, seed)


@pytest.fixture(scope="module")
def fake_data():
    return _fake_dataset()


def test_kernel_model_learns_per_op_times_and_flags_unseen_ops(fake_data, tmp_path):
    rows, ops = fake_data
    km = KernelCostModel().fit(ops)
    pred, seen = km.predict_ops(ops)
    assert seen.all()
    rel = np.abs(pred / ops["measured_ms"].to_numpy() - 1)
    assert np.median(rel) < 0.05
    # an op never measured (GELU): predicted by the roofline, flagged, never dropped
    new, _ = trace_ops(_net(8, 2, act=nn.GELU), (1, 3, 8, 8))
    res = km.predict_network(new)
    assert res["unmodelled"] == ["gelu"]
    assert 0 < res["unmodelled_ms"] < res["kernel_sum_ms"]
    p2, s2 = km.predict_ops(new)
    assert (~s2).sum() == (new["op"] == "gelu").sum() and np.isfinite(p2).all()


def test_module_model_predicts_any_module_and_widens_for_unmodelled_ops(fake_data):
    rows, ops = fake_data
    m = ModuleCostModel(mode="both").fit(rows, ops)
    known = m.predict_module(_net(16, 3), (2, 3, 16, 16))
    unknown = m.predict_module(_net(16, 3, act=nn.GELU), (2, 3, 16, 16))
    assert known["unmodelled_ops"] == [] and known["unmodelled_ms"] == 0
    assert unknown["unmodelled_ops"] == ["gelu"] and unknown["unmodelled_ms"] > 0
    width = lambda p: p["latency_ms_upper"] - p["latency_ms_lower"]  # noqa: E731
    assert width(unknown) > width(known)
    assert known["latency_ms_lower"] <= known["latency_ms"] <= known["latency_ms_upper"]
    assert known["peak_mem_mb"] > 0


def test_save_load_round_trip_without_pickle_and_tampering_is_refused(fake_data, tmp_path):
    rows, ops = fake_data
    m = ModuleCostModel(mode="feature").fit(rows, ops)
    m.save(tmp_path / "m")
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert "manifest.json" in files and "kernel_xgb.json" in files
    assert not any(f.endswith((".pkl", ".pickle", ".joblib")) for f in files)
    back = ModuleCostModel.load(tmp_path / "m")
    a = m.predict(rows.head(5), ops[ops["key"].isin(rows.head(5)["key"])], alpha=None)
    b = back.predict(rows.head(5), ops[ops["key"].isin(rows.head(5)["key"])], alpha=None)
    np.testing.assert_allclose(a["latency_ms"], b["latency_ms"], rtol=1e-6)
    path = tmp_path / "m" / "kernel_xgb.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc) + " ")
    with pytest.raises(ModelError, match="changed or missing"):
        ModuleCostModel.load(tmp_path / "m")


def test_leave_one_family_out_reports_every_family_and_mode(fake_data):
    rows, ops = fake_data
    res = leave_one_family_out(rows, ops, rows["family"], modes=("kernel", "both"))
    assert sorted(set(res["family"])) == ["dw", "plain", "wide"]
    assert set(res["mode"]) == {"kernel", "both"}
    assert res["n"].sum() == 2 * len(rows)
    # the FAKE latency is 1.1 x the kernel sum: the kernel model alone transfers to "wide"
    wide = res[(res["family"] == "wide") & (res["mode"] == "kernel")].iloc[0]
    assert wide["latency_within10"] > 0.8
    # the share of each held-out family inside its 90 % intervals
    assert res[["latency_cover90", "mem_cover90"]].apply(lambda c: c.between(0, 1)).all().all()


def test_unfitted_and_bad_mode_are_refused(fake_data):
    rows, ops = fake_data
    with pytest.raises(ModelError, match="not fitted"):
        KernelCostModel().predict_ops(ops)
    with pytest.raises(ModelError, match="invalid mode"):
        ModuleCostModel(mode="magic").fit(rows, ops)


def test_predict_costs_uses_the_kernel_level_predictor(fake_data, tmp_path):
    import warnings

    import carb_nas

    rows, ops = fake_data
    m = ModuleCostModel(mode="both").fit(rows, ops)
    m.save(tmp_path / "km")
    for platform in (m, str(tmp_path / "km")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every op is modelled: no unseen warning
            costs = carb_nas.predict_costs(_net(16, 2), (2, 3, 16, 16), platform=platform)
        direct = m.predict_module(_net(16, 2), (2, 3, 16, 16))
        lat = costs.values["latency_ms"]
        assert lat[0] == pytest.approx(direct["latency_ms"])
        assert lat[1] <= lat[0] <= lat[2]
    with pytest.warns(UserWarning):  # a GELU was never measured: said, and widened
        carb_nas.predict_costs(_net(16, 2, act=nn.GELU), (2, 3, 16, 16), platform=m)


def test_a_module_model_dir_loads_as_a_module_only_predictor(fake_data, tmp_path):
    from carb_nas.predictors import load_predictor

    rows, ops = fake_data
    ModuleCostModel(mode="kernel").fit(rows, ops).save(tmp_path / "km")
    loaded = load_predictor(tmp_path / "km")
    assert isinstance(loaded.module_model, ModuleCostModel) and loaded.config_model is None
    assert loaded.provenance.model_kind == "kernel-level module model"


def test_ops_beyond_the_measured_range_get_the_prior_times_its_edge_bias(fake_data, tmp_path):
    _, ops = fake_data
    km = KernelCostModel().fit(ops)
    conv = ops[ops["kind"] == "conv"].iloc[[0]].copy()
    big = conv.assign(flops=conv["flops"] * 1000, signature="bigger-than-any")
    assert km._beyond(big).all() and not km._beyond(conv).any()
    ms, seen = km.predict_ops(big)
    # the edge bias: median measured / prior of the largest tenth of the conv signatures
    table = ops.assign(kind=np.where(ops["kind"] == "dwconv", "conv", ops["kind"]))
    table = table[table["kind"] == "conv"].drop_duplicates("signature")
    size = table["read_bytes"] + table["write_bytes"] + table["weight_bytes"]
    top = table[size >= np.quantile(size, 0.9)]
    edge = float(np.median(top["measured_ms"].to_numpy() / km._prior(top)))
    assert km.edge_["conv"] == pytest.approx(edge, rel=1e-6) and edge != pytest.approx(1.0)
    assert seen.all() and ms[0] == pytest.approx(km._prior(big)[0] * edge)
    # the range and the edge bias survive save/load; a model saved before: the prior alone
    d = tmp_path / "k"
    d.mkdir()
    part = km.save_to(d)
    again = KernelCostModel.load_from(d, part)
    assert again.range_ == km.range_ and again._beyond(big).all() and again.edge_ == km.edge_
    old = KernelCostModel.load_from(d, {k: v for k, v in part.items() if k != "edge"})
    assert old.predict_ops(big)[0][0] == pytest.approx(km._prior(big)[0])


def test_physics_memory_and_kernel_intervals_persist(fake_data, tmp_path):
    from carb_nas.costmodel._kernels import MEMORY_TERMS

    rows, ops = fake_data
    m = ModuleCostModel().fit(rows, ops)
    assert m.mode == "kernel" and m.memory == "physics" and len(m.mem_coefs_) == len(MEMORY_TERMS)
    p = m.predict(rows, ops, alpha=0.1)
    mem = rows[list(MEMORY_TERMS)].to_numpy(float) @ np.array(m.mem_coefs_)
    assert np.allclose(p["peak_mem_mb"], mem)
    assert (p["latency_ms_lower"] <= p["latency_ms"]).all()
    assert (p["latency_ms"] <= p["latency_ms_upper"]).all()
    assert (p["peak_mem_mb_lower"] <= p["peak_mem_mb"]).all()
    again = ModuleCostModel.load(m.save(tmp_path / "m"))
    q = again.predict(rows, ops, alpha=0.1)
    assert np.allclose(q["peak_mem_mb_upper"], p["peak_mem_mb_upper"])
    assert np.allclose(q["latency_ms_upper"], p["latency_ms_upper"])
    with pytest.raises(ModelError, match="invalid memory"):
        ModuleCostModel(memory="magic").fit(rows, ops)


# -- the fast single-module path (issue 14: featurize + predict <= 50 ms) ---------------------
_LOGGED = ("flops", "read_bytes", "write_bytes", "weight_bytes")
_NUMERIC = ("batch", "c_in", "h_in", "w_in", "c_out", "h_out", "w_out", "kernel", "stride",
            "groups", "native")  # fmt: skip


def _reference_op_ms(km: KernelCostModel, ops: pd.DataFrame) -> np.ndarray:
    """The per-op path as it was before the fast one: the booster's input built column by
    column from the table's first row of each signature, XGBRegressor.predict, the prior, the
    range clamp and the roofline of unmeasured ops from pandas columns."""
    codes, _ = pd.factorize(ops["signature"])
    first = ops.iloc[np.unique(codes, return_index=True)[1]]
    col = lambda c: first[c].to_numpy(dtype=float)  # noqa: E731
    moved = col("read_bytes") + col("write_bytes")
    kinds = first["kind"].to_numpy(dtype=object)
    if km.shared_conv:
        kinds = np.array(["conv" if k in ("gconv", "dwconv") else k for k in kinds], dtype=object)
    cols = []
    if km.geometry:  # channels per group, elements, GEMM depth, 16-lane padding, log groups
        g = np.maximum(col("groups"), 1)
        cpi, cpo = col("c_in") / g, col("c_out") / g
        pad = lambda c: np.where(c > 0, np.ceil(c / 16) * 16 / np.maximum(c, 1), 1)  # noqa: E731
        cols += [np.log1p(cpi), np.log1p(cpo), np.log1p(col("batch") * col("h_out") * col("w_out")),
                 np.log1p(col("batch") * col("h_in") * col("w_in")),
                 np.log1p(cpi * col("kernel") ** 2), pad(cpi), pad(cpo), pad(col("c_in")),
                 pad(col("c_out")), np.log1p(g)]  # fmt: skip
    cols += [np.log1p(col(c)) for c in _LOGGED] + [col(c) for c in _NUMERIC]
    cols += [np.log1p(moved), np.log1p(col("flops")) - np.log1p(moved)]
    cols += [(kinds == k).astype(float) for k in km.kinds_]
    cols += [(first["op"].to_numpy() == o).astype(float) for o in km.ops_]
    corr = np.exp(km.booster_.predict(np.column_stack(cols)))
    cols_p = [np.ones(len(first)), col("flops") / 1e9, moved / 1e6, col("weight_bytes") / 1e6]
    if km.simd_lanes:  # idle SIMD lanes of grouped convs: lanes / L - 1, L | channels per group
        g = np.maximum(col("groups"), 1)
        cpi, cpo = np.rint(col("c_in") / g), np.rint(col("c_out") / g)
        lanes = np.ones(len(first))
        for lane in (2, 4, 8, 16, 32, 64):
            if lane <= km.simd_lanes:
                lanes = np.where((cpi % lane == 0) & (cpo % lane == 0), lane, lanes)
        waste = np.where((g > 1) & (cpi > 1), np.log2(km.simd_lanes / lanes), 0.0)
        cols_p.append(col("flops") / 1e9 * waste)
    A = np.column_stack(cols_p)
    coef = np.array([km.prior_.get(k, [1.0, 0.0, 0.0, 0.0, 0.0]) for k in kinds])
    prior = np.maximum((A * coef).sum(axis=1), 1e-6)
    top = np.array([km.range_.get(k, [np.inf] * 4) for k in kinds])
    rng = first[["flops", "weight_bytes", "read_bytes", "write_bytes"]].to_numpy(float)
    edge = np.array([km.edge_.get(k, 1.0) for k in kinds])
    pred = np.where((rng > top).any(axis=1), edge, corr) * prior
    seen = np.array([f"{k}:{o}" in set(km.seen_) for k, o in zip(kinds, first["op"])])
    mb, gflops = (moved + col("weight_bytes")) / 1e6, col("flops") / 1e9
    roof = mb * km.ms_per_mb_ + gflops * km.ms_per_gflop_
    return np.where(seen, pred, roof)[codes]


@pytest.fixture(scope="module")
def fitted_modes(fake_data):
    rows, ops = fake_data
    kernel = ModuleCostModel().kernel_part(rows, ops)
    return {mode: ModuleCostModel(mode=mode).fit(rows, ops, kernel=kernel)
            for mode in ("kernel", "both")}  # fmt: skip


_MODULES = [
    (lambda: _net(16, 3), (2, 3, 16, 16)),
    (lambda: _net(8, 2, act=nn.GELU), (1, 3, 8, 8)),  # an op never measured
    (lambda: _net(24, 4, dw=True), (4, 3, 16, 16)),
    (lambda: _net(96, 1), (4, 3, 64, 64)),  # larger than every measured op: the prior alone
]


@pytest.mark.parametrize("mode", ["kernel", "both"])
@pytest.mark.parametrize("alpha", [None, 0.1])
def test_fast_module_prediction_equals_the_table_path(fitted_modes, mode, alpha):
    m = fitted_modes[mode]
    for make, shape in _MODULES:
        m.kernel_.clear_cache()
        fast = m.predict_module(make(), shape, alpha=alpha)
        ops, feats = trace_ops(make(), shape)
        row = pd.DataFrame([{**feats, "key": "module", "batch_size": shape[0]}])
        table = m.predict(row, ops.assign(key="module"), alpha=alpha).iloc[0].to_dict()
        assert list(fast) == list(table)  # the same columns, in the same order
        assert fast["unmodelled_ops"] == table["unmodelled_ops"]
        for c in fast:
            if c != "unmodelled_ops":
                assert fast[c] == pytest.approx(table[c], rel=1e-12, abs=1e-15), c
        # both against the per-op computation as it was (XGBRegressor.predict, pandas)
        ref = _reference_op_ms(m.kernel_, ops)
        ms, _ = m.kernel_.predict_ops(ops)
        np.testing.assert_allclose(ms, ref, rtol=1e-12)
        if mode == "kernel":
            a, b = m.kernel_coefs_
            assert fast["latency_ms"] == pytest.approx(a * ref.sum() + b * len(ops), rel=1e-12)
    assert m.predict_module(_net(8, 2, act=nn.GELU), (1, 3, 8, 8))["unmodelled_ops"] == ["gelu"]


class _UserNet(nn.Module):
    """A user's own module: ops the FAKE dataset never measured (GELU, ELU, tanh, softplus,
    sigmoid, mish, layer norm, mean), some of a measured kind (stand-ins), some not."""

    def __init__(self, w: int = 12) -> None:
        super().__init__()
        self.a, self.n = nn.Conv2d(3, w, 3, padding=1), nn.LayerNorm([w, 16, 16])
        self.b, self.c = nn.Conv2d(w, w, 3, groups=w, padding=1), nn.Conv2d(w, 2 * w, 1)
        self.relu6, self.fc = nn.ReLU6(), nn.Linear(2 * w, 10)

    def forward(self, x):  # noqa: ANN001, ANN201
        x = self.n(nn.functional.gelu(self.a(x)))
        x = nn.functional.elu(self.b(x)) + self.relu6(x)
        x = torch.tanh(self.c(x))
        x = nn.functional.mish(nn.functional.softplus(x) * torch.sigmoid(x))
        return self.fc(x.mean((2, 3)))


def _reference_module_prediction(m: ModuleCostModel, module: nn.Module, shape: tuple) -> dict:
    """``predict_module`` done the straightforward way: every cache cleared, a cold trace to
    a frame, each distinct op predicted on its own (one booster row; an unmeasured name of a
    measured kind by the median over its stand-in names, found by a plain scan of the
    measured names), then the table path ``predict`` on that per-op sum."""
    clear_ops_cache()
    km = m.kernel_
    ops, feats = trace_ops(module, shape, cache=False)
    codes, _ = pd.factorize(ops["signature"])
    first = np.unique(codes, return_index=True)[1]
    kinds, names, num, logged = km._arrays(ops)
    seen_names = set(km.seen_)
    ms = np.zeros(len(first))
    for j, i in enumerate(first):
        k, o, nu, lg = kinds[i : i + 1], names[i : i + 1], num[i : i + 1], logged[i : i + 1]
        seen = f"{k[0]}:{o[0]}" in seen_names
        corr = float(np.exp(km.booster_.predict(km._matrix_of(k, o, nu, lg))[0]))
        stand_ins = []
        if not seen and km.unseen == "kind" and k[0] in km.prior_:
            moved = lg[0, 1] + lg[0, 2]
            for s in km.seen_:
                kk, name = s.split(":", 1)
                same_class = (name.rstrip("_") in _TRANSCENDENTAL) == (
                    o[0].rstrip("_") in _TRANSCENDENTAL
                )
                if kk == k[0] and same_class and km.name_range_.get(s, 0.0) >= moved:
                    stand_ins.append(name)
        if stand_ins:
            raw = [km.booster_.predict(km._matrix_of(k, np.array([a], dtype=object), nu, lg))[0]
                   for a in stand_ins]  # fmt: skip
            corr = float(np.float32(np.exp(np.median(np.array(raw, dtype=np.float32)))))
        edge = km.edge_.get(k[0], 1.0) if km._beyond_of(k, lg)[0] else corr
        pred = edge * km._prior_of(k, lg, nu)[0]
        flops, read, write, weight = lg[0]
        roof = (read + write + weight) / 1e6 * km.ms_per_mb_ + flops / 1e9 * km.ms_per_gflop_
        ms[j] = pred if (seen or stand_ins) else roof
    row = pd.DataFrame([{**feats, "key": "module", "batch_size": shape[0]}])
    ref = m.predict(row, ops.assign(key="module")).iloc[0].to_dict()
    per_op = ms[codes]
    un = np.array([f"{s}:{o}" not in seen_names for o, s in zip(names, kinds)], dtype=bool)
    return {**ref, "_ops_ms": per_op, "_un": un, "_unmodelled": sorted(set(names[un]))}


def test_warm_and_cold_module_predictions_equal_a_straightforward_reference(fitted_modes):
    """The optimized single-module path (op columns without a frame, replayed layers,
    cached per-op predictions, one booster call for ops and stand-ins) returns exactly what a
    straightforward reference does, values and unmodelled-op lists, on built-in families and
    a user's module: a future speed-up cannot silently change a prediction."""
    from carb_nas.models import build_model
    from carb_nas.space import ZOO_FAMILIES, Config

    modules = [
        (build_model(Config(f, ZOO_FAMILIES.get(f, 18), 0.5, 32, b), "meta"), (b, 3, 32, 32))
        for f, b in (("basic", 1), ("mobilenet_v2", 2), ("mobilenet_v3_small", 1),
                     ("efficientnet", 1), ("regnet_y_400mf", 1))
    ] + [(_UserNet(), (2, 3, 16, 16)), (_UserNet(20), (1, 3, 16, 16))]  # fmt: skip
    for mode, m in fitted_modes.items():
        refs = [_reference_module_prediction(m, mod, shape) for mod, shape in modules]
        clear_ops_cache()
        m.kernel_.clear_cache()
        cold = [m.predict_module(mod, shape) for mod, shape in modules]
        clear_ops_cache(layers=False)  # new tables, replayed layers, cached per-op predictions
        warm = [m.predict_module(mod, shape) for mod, shape in modules]
        for (mod, _shape), ref, c, w in zip(modules, refs, cold, warm):
            assert c == w, (mode, type(mod).__name__)  # exactly
            assert c["unmodelled_ops"] == ref["unmodelled_ops"] == ref["_unmodelled"]
            # exactly the reference's per-op numbers, summed as predict_module sums them
            per_op, un = ref["_ops_ms"], ref["_un"]
            assert c["kernel_sum_ms"] == per_op.sum() * m.scale_
            assert c["unmodelled_ms"] == per_op[un].sum() * m.scale_
            if mode == "kernel":
                a, b = m.kernel_coefs_
                assert c["latency_ms"] == a * per_op.sum() + b * len(per_op)
            # and the table path on the cold frame (its sums grouped by pandas: last bits)
            assert list(c) == [k for k in ref if not k.startswith("_")]
            for k, v in c.items():
                if k != "unmodelled_ops":
                    assert v == pytest.approx(ref[k], rel=1e-12, abs=1e-15), (mode, k)
        # the user's module has by-kind stand-ins (ReLU6 like ReLU) and roofline ops
        res = m.kernel_.predict_network(trace_ops(*modules[-2])[0])
        assert "hardtanh" in res["by_kind"] and "gelu" in res["unmodelled"]
        assert set(res["by_kind"]) < set(res["unmodelled"])


def test_per_op_predictions_are_cached_and_a_refit_forgets_them(fake_data, monkeypatch):
    rows, ops = fake_data
    km = KernelCostModel().fit(ops)
    calls = []
    real = KernelCostModel._predict_of

    def counting(self, kinds, *args):
        calls.append(len(kinds))
        return real(self, kinds, *args)

    monkeypatch.setattr(KernelCostModel, "_predict_of", counting)
    net, _ = trace_ops(_net(16, 3), (2, 3, 16, 16))
    first, _ = km.predict_ops(net)
    n_distinct = net["signature"].nunique()
    assert calls == [n_distinct]
    again, _ = km.predict_ops(net)
    assert calls == [n_distinct] and np.array_equal(first, again)  # a lookup, the same numbers
    deeper, _ = trace_ops(_net(16, 5), (2, 3, 16, 16))  # the same layers, more of them
    km.predict_ops(deeper)
    assert calls == [n_distinct]
    km.fit(ops.assign(measured_ms=ops["measured_ms"] * 2))  # refit: new numbers, no stale ones
    doubled, _ = km.predict_ops(net)
    assert len(calls) == 2 and np.median(doubled / first) == pytest.approx(2, rel=0.1)


# -- the per-op learner's options: a log-linear prior that extrapolates, geometry features ----
def _power_law_ops(flops: np.ndarray) -> pd.DataFrame:
    """FAKE dense 3x3 conv rows whose time is an exact power law with a floor in the op's
    work (never a measurement): ms = 0.002 (1 + MFLOPs)^0.7 (1 + moved / 10 kB)^0.2."""
    c = np.maximum(np.round(np.sqrt(flops / (2 * 9 * 64))), 1.0)  # 8x8 output, c_in = c_out
    t = pd.DataFrame({"kind": "conv", "op": "conv2d", "batch": 1.0, "c_in": c, "h_in": 8.0,
                      "w_in": 8.0, "c_out": c, "h_out": 8.0, "w_out": 8.0, "kernel": 3.0,
                      "stride": 1.0, "groups": 1.0, "native": 0.0})  # fmt: skip
    t["flops"] = 2 * 9 * 64 * c * c
    t["read_bytes"] = t["write_bytes"] = 4 * 64 * c
    t["weight_bytes"] = 4 * 9 * c * c
    moved = t["read_bytes"] + t["write_bytes"]
    t["measured_ms"] = 0.002 * (1 + t["flops"] / 1e6) ** 0.7 * (1 + moved / 1e4) ** 0.2
    return t


def test_loglinear_prior_extrapolates_a_power_law_where_trees_cannot():
    train = _power_law_ops(np.geomspace(1e5, 1e8, 200))
    big = _power_law_ops(np.geomspace(1e9, 1e10, 20))  # 10-100x beyond every trained op
    y = big["measured_ms"].to_numpy()
    rel = {}
    for prior in ("linear", "loglinear"):
        km = KernelCostModel(prior=prior).fit(train)
        assert km._beyond(big).all()  # beyond the measured range: the prior alone
        rel[prior] = float(np.median(np.abs(km.predict_ops(big)[0] / y - 1)))
    # trees alone on log ms (no prior) stay at the largest trained ops' time
    import xgboost as xgb

    trees = xgb.XGBRegressor(n_estimators=100).fit(km._matrix(train), np.log(train["measured_ms"]))
    rel["trees"] = float(np.median(np.abs(np.exp(trees.predict(km._matrix(big))) / y - 1)))
    assert rel["loglinear"] < 0.02
    assert rel["linear"] > 0.2 and rel["trees"] > 0.5
    # inside the range both fit the trained ops
    inside = KernelCostModel(prior="loglinear").fit(train).predict_ops(train)[0]
    assert np.median(np.abs(inside / train["measured_ms"].to_numpy() - 1)) < 0.05


def test_kernel_options_persist_and_bad_ones_are_refused(fake_data, tmp_path):
    rows, ops = fake_data
    km = KernelCostModel(prior="loglinear", geometry=True).fit(ops)
    d = tmp_path / "k"
    d.mkdir()
    back = KernelCostModel.load_from(d, km.save_to(d))
    assert (back.prior, back.geometry, back.shared_conv) == ("loglinear", True, True)
    np.testing.assert_allclose(back.predict_ops(ops)[0], km.predict_ops(ops)[0], rtol=1e-6)
    m = ModuleCostModel(kernel_prior="loglinear", kernel_geometry=True).fit(rows, ops)
    assert (m.kernel_.prior, m.kernel_.geometry) == ("loglinear", True)
    m.save(tmp_path / "m")
    again = ModuleCostModel.load(tmp_path / "m")
    assert (again.kernel_prior, again.kernel_geometry) == ("loglinear", True)
    with pytest.raises(ModelError, match="invalid kernel prior.*'cubic'"):
        KernelCostModel(prior="cubic").fit(ops)
    with pytest.raises(ModelError, match="invalid kernel prior"):
        ModuleCostModel(kernel_prior="cubic").fit(rows, ops)


def test_shared_conv_kind_models_a_grouped_conv_from_the_other_convolutions(fake_data):
    _, ops = fake_data
    assert "gconv" not in set(ops["kind"])  # the fake families: dense and depthwise only
    gnet = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1, groups=4))
    g_ops, _ = trace_ops(gnet, (2, 3, 16, 16))
    assert "gconv" in set(g_ops["kind"])
    shared = KernelCostModel().fit(ops)  # the default: one conv kind
    ms, seen = shared.predict_ops(g_ops)
    assert seen.all() and np.isfinite(ms).all() and (ms > 0).all()
    assert "conv:conv2d" in shared.seen_ and not any(s.startswith("gconv") for s in shared.seen_)
    separate = KernelCostModel(shared_conv=False).fit(ops)
    _, seen_sep = separate.predict_ops(g_ops)
    # separate kinds: the grouped conv was never measured, so it is flagged unmodelled
    assert not seen_sep[(g_ops["kind"] == "gconv").to_numpy()].any()


def test_an_unmeasured_op_of_a_measured_kind_is_predicted_by_its_kind(fake_data, tmp_path):
    """ReLU6 (aten ``hardtanh``) was never measured, ReLU was: predicted like ReLU (the FAKE
    times of both are the same function of the bytes moved), still flagged unmodelled; GELU
    (transcendental, no measured stand-in) keeps the roofline; ``unseen="roofline"`` is the
    old rule."""
    rows, ops = fake_data
    assert not {"hardtanh", "gelu"} & set(ops["op"])
    net, shape = _net(16, 3, act=nn.ReLU6), (2, 3, 16, 16)
    new, _ = trace_ops(net, shape)
    act = (new["op"] == "hardtanh").to_numpy()
    truth = fake_op_ms(new).to_numpy()[act]
    by_kind = KernelCostModel().fit(ops)
    roof = KernelCostModel(unseen="roofline").fit(ops)
    ms, seen = by_kind.predict_ops(new)
    ms_roof, seen_roof = roof.predict_ops(new)
    assert not seen[act].any() and not seen_roof[act].any()  # flagged either way
    np.testing.assert_allclose(ms[~act], ms_roof[~act])  # measured ops are unchanged
    ratio = ms[act] / truth
    assert 0.8 < ratio.min() and ratio.max() < 1.25
    assert np.median(np.abs(np.log(ms_roof[act] / truth))) > 2 * np.median(np.abs(np.log(ratio)))
    res = by_kind.predict_network(new)
    assert res["unmodelled"] == ["hardtanh"] and res["by_kind"] == ["hardtanh"]
    assert res["unmodelled_ms"] == pytest.approx(float(ms[act].sum()))
    assert roof.predict_network(new)["by_kind"] == []
    gelu, _ = trace_ops(_net(16, 3, act=nn.GELU), shape)
    g = by_kind.predict_network(gelu)
    assert g["unmodelled"] == ["gelu"] and g["by_kind"] == []  # no transcendental measured
    # the rule and the stand-ins' ranges persist; a bad rule is refused
    d = tmp_path / "k"
    d.mkdir()
    back = KernelCostModel.load_from(d, by_kind.save_to(d))
    assert back.unseen == "kind"
    np.testing.assert_allclose(back.predict_ops(new)[0], ms, rtol=1e-6)
    # a ReLU6 larger than every measured ReLU has no stand-in: the roofline
    big, _ = trace_ops(_net(96, 1, act=nn.ReLU6), (4, 3, 64, 64))
    assert by_kind.predict_network(big)["by_kind"] == []
    with pytest.raises(ModelError, match="invalid unseen-op rule.*'guess'"):
        KernelCostModel(unseen="guess").fit(ops)


def test_lofo_kind_breakdown_says_which_kinds_of_a_held_out_family_err(fake_data):
    """Per held-out family and op kind: the predicted / measured sums of a kernel model that
    never saw the family (checked against that model computed here), shares summing to 1."""
    rows, ops = fake_data
    groups = dict(zip(rows["key"], rows["family"]))
    br = _research().lofo_kind_breakdown(ops, groups)
    assert set(br["family"]) == {"plain", "dw", "wide"}
    np.testing.assert_allclose(br.groupby("family")["share"].sum(), 1.0)
    fam = ops["key"].map(groups)
    km = KernelCostModel().fit(ops[fam != "dw"])
    held = ops[fam == "dw"]
    pred = held.assign(p=km.predict_ops(held)[0])
    dw = pred[pred["kind"] == "dwconv"]
    row = br[(br["family"] == "dw") & (br["kind"] == "dwconv")].iloc[0]
    assert row["sum_ratio"] == pytest.approx(dw["p"].sum() / dw["measured_ms"].sum())
    per_net = dw.groupby("key")[["p", "measured_ms"]].sum()
    assert row["net_median_ratio"] == pytest.approx(
        (per_net["p"] / per_net["measured_ms"]).median()
    )
    assert row["unmeasured"] == [] and row["by_kind"] == []  # one conv kind: measured
    with pytest.raises(ModelError, match="op rows of unknown networks"):
        _research().lofo_kind_breakdown(ops, {k: g for k, g in groups.items() if k != "k0"})


# -- grouped convs: the lane-waste prior term ------------------------------------------------
def test_lane_waste_counts_the_halvings_of_the_vector_a_group_width_forces():
    from carb_nas.costmodel._kernels import lane_waste

    # columns: batch c_in h_in w_in c_out h_out w_out kernel stride groups native
    def row(c_in, c_out, groups):
        return [1, c_in, 8, 8, c_out, 8, 8, 3, 1, groups, 0]

    rows = [(64, 64, 32), (96, 96, 32), (128, 128, 16), (256, 256, 16), (64, 64, 1),
            (64, 64, 64), (64, 128, 16)]  # fmt: skip
    num = np.array([row(*r) for r in rows], dtype=float)
    # 2 / 3 / 8 / 16 channels per group; dense; depthwise; 4 in, 8 out per group
    np.testing.assert_allclose(lane_waste(num, 16), [3, 4, 1, 0, 0, 0, 2])
    np.testing.assert_allclose(lane_waste(num, 8), [2, 3, 0, 0, 0, 0, 1])
    np.testing.assert_allclose(lane_waste(num, 0), 0)


def _grouped_ops(cpgs: list[int], seed: int) -> pd.DataFrame:
    """Traced dense + grouped 3x3 convs (groups of ``cpgs`` channels) with FAKE times (never a
    measurement): 0.005 ms + 20 ms per GFLOP x (1 + 2 x the vector halvings of the group width)
    + 0.05 ms per MB moved, so narrow groups cost more per FLOP."""
    rng = np.random.default_rng(seed)
    tables = []
    for i in range(60):
        cpg = int(cpgs[i % len(cpgs)])
        c = cpg * int(rng.choice([8, 16, 32]))
        net = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1),
                            nn.Conv2d(c, c, 3, padding=1, groups=c // cpg))  # fmt: skip
        r, b = int(rng.choice([8, 16, 32])), int(rng.choice([1, 2, 4]))
        ops, _ = trace_ops(net, (b, 3, r, r))
        tables.append(ops[ops["kind"].isin(["conv", "gconv"])].assign(key=f"g{seed}-{i}"))
    ops = pd.concat(tables, ignore_index=True)
    g = ops["groups"].to_numpy(float)
    cpg = np.rint(ops["c_in"].to_numpy(float) / g)
    lanes = np.ones(len(ops))
    for lane in (2, 4, 8, 16):
        lanes = np.where(cpg % lane == 0, lane, lanes)
    halvings = np.where(g > 1, np.log2(16 / lanes), 0.0)
    mb = (ops["read_bytes"] + ops["write_bytes"] + ops["weight_bytes"]) / 1e6
    return ops.assign(measured_ms=0.005 + 20 * ops["flops"] / 1e9 * (1 + 2 * halvings) + 0.05 * mb)


def test_lane_waste_term_extrapolates_to_narrower_groups_than_any_measured(tmp_path):
    train = _grouped_ops([8, 16, 32], seed=0)  # one halving at most, like RegNet
    test = _grouped_ops([2, 3], seed=1)  # three and four halvings, like ResNeXt at widths
    gc = (test["kind"] == "gconv").to_numpy()
    y = test["measured_ms"].to_numpy()[gc]
    ratio = {}
    for lanes in (16, 0):
        km = KernelCostModel(simd_lanes=lanes).fit(train)
        ratio[lanes] = float(np.median(km.predict_ops(test)[0][gc] / y))
    assert 0.8 < ratio[16] < 1.25, ratio
    assert ratio[0] < 0.7, ratio  # without the term: about the cost of the narrowest trained
    assert len(km.prior_["conv"]) == 4 and KernelCostModel().simd_lanes == 0  # the default
    km = KernelCostModel(simd_lanes=16).fit(train)
    assert len(km.prior_["conv"]) == 5 and km.prior_["conv"][4] > 0
    d = tmp_path / "k"
    d.mkdir()
    back = KernelCostModel.load_from(d, km.save_to(d))
    assert back.simd_lanes == 16
    m = ModuleCostModel(kernel_simd_lanes=16)
    assert m._kernel_model().simd_lanes == 16
    np.testing.assert_allclose(back.predict_ops(test)[0], km.predict_ops(test)[0], rtol=1e-6)
    with pytest.raises(ModelError, match="invalid SIMD lane count.*12"):
        KernelCostModel(simd_lanes=12).fit(train)


# -- kernel samples: single ops of no network in every per-op fit -----------------------------
def _sample_gconvs(cpgs: list[int], seed: int) -> pd.DataFrame:
    """Single traced grouped convs (no network) with the FAKE times of ``_grouped_ops``."""
    ops = _grouped_ops(cpgs, seed)
    return ops[ops["kind"] == "gconv"].assign(key=lambda t: "s-" + t["key"])


def test_kernel_samples_teach_the_per_op_model_group_widths_no_network_has():
    nets = _grouped_ops([8, 16, 32], seed=0)  # the networks: RegNet-like group widths
    test = _grouped_ops([2, 3], seed=1)  # held out: ResNeXt-like narrow groups
    samples = _sample_gconvs([2, 3, 5, 6], seed=2)  # sampled kernels, no network
    gc = (test["kind"] == "gconv").to_numpy()
    y = test["measured_ms"].to_numpy()[gc]
    rows = pd.DataFrame({"key": sorted(set(nets["key"]))})
    ratio = {}
    for name, extra in (("without", None), ("with", samples)):
        km, _ = ModuleCostModel(kernel_folds=2).kernel_part(rows, nets, kernel_samples=extra)
        ratio[name] = float(np.median(km.predict_ops(test)[0][gc] / y))
    assert ratio["without"] < 0.7, ratio  # the trees stop at the narrowest network group
    assert 0.85 < ratio["with"] < 1.15, ratio
    with pytest.raises(ModelError, match="kernel samples that are networks"):
        ModuleCostModel().kernel_part(rows, nets, kernel_samples=nets)
    with pytest.raises(ModelError, match="kernel samples without their op columns"):
        ModuleCostModel().kernel_part(rows, nets, kernel_samples=samples[["key", "flops"]])


def test_lofo_takes_kernel_samples_in_every_fold(fake_data):
    rows, ops = fake_data
    dw = ops[ops["kind"] == "dwconv"].assign(key=lambda t: "s-" + t["key"])
    # not anchored: the FAKE latency is 1.1x the op sum, a 10 % overhead on every op that the
    # anchored network ops would carry and the samples not (real overhead is per op, small)
    kp = {"kernel_anchor": False}
    plain = leave_one_family_out(rows, ops, rows["family"], modes=("kernel",), kernel_params=kp)
    sampled = leave_one_family_out(
        rows, ops, rows["family"], modes=("kernel",), kernel_params=kp, kernel_samples=dw
    )
    # the held-out "dw" family's depthwise convs are no longer unseen when sampled
    before = plain.set_index("family").loc["dw", "latency_mape"]
    after = sampled.set_index("family").loc["dw", "latency_mape"]
    assert after < before, (before, after)
    groups = dict(zip(rows["key"], rows["family"]))
    off = {}
    for name, extra in (("without", None), ("with", dw)):
        br = _research().lofo_kind_breakdown(ops, groups, kernel_samples=extra)
        row = br[(br["family"] == "dw") & (br["kind"] == "dwconv")].iloc[0]
        off[name] = abs(row["sum_ratio"] - 1)
    assert off["with"] < off["without"], off


def test_anchored_ops_sum_to_each_networks_latency_and_leave_the_rest():
    rows = pd.DataFrame({"key": ["a", "b", "c"], "latency_ms": [3.0, np.nan, 8.0]})
    ops = pd.DataFrame({"key": ["a", "a", "b", "c", "d"], "measured_ms": [1.0, 1.0, 5.0, 0.0, 2.0]})
    out = anchored_ops(rows, ops)
    assert out["measured_ms"].tolist() == [1.5, 1.5, 5.0, 0.0, 2.0]  # b, c, d: nothing to scale by
    assert ops["measured_ms"].tolist() == [1.0, 1.0, 5.0, 0.0, 2.0]  # the input is not changed


def test_anchoring_removes_a_whole_run_shift_of_the_profiled_ops(fake_data, tmp_path):
    # FAKE: each network's profiled ops ran at its own speed (x0.7-1.4, every op alike) while
    # its timed latency did not; anchored per-op models learn the latency's scale
    rows, ops = fake_data
    shift = dict(zip(rows["key"], np.random.default_rng(1).uniform(0.7, 1.4, len(rows))))
    noisy = ops.assign(measured_ms=ops["measured_ms"] * ops["key"].map(shift))
    tr, te = rows.iloc[:80], rows.iloc[80:]
    err = {}
    for anchor in (True, False):
        m = ModuleCostModel(kernel_anchor=anchor).fit(tr, noisy[noisy["key"].isin(set(tr["key"]))])
        p = m.predict(te, ops[ops["key"].isin(set(te["key"]))], alpha=None)
        err[anchor] = float(np.median(np.abs(p["latency_ms"] / te["latency_ms"].to_numpy() - 1)))
    assert err[True] < 0.05 and err[True] < err[False] / 2, err
    m.save(tmp_path / "m")  # the last one: not anchored, and so it loads
    assert ModuleCostModel.load(tmp_path / "m").kernel_anchor is False


def test_a_family_never_trained_on_gets_the_interval_of_held_out_families(fake_data, tmp_path):
    """interval="family": a network of no trained family (a user's module) gets the interval
    of the training families each predicted by models that never saw it; a trained family's
    network keeps the networks' own (out-of-fold) interval."""
    rows, ops = fake_data
    m = ModuleCostModel().fit(rows, ops)
    assert m.families_ == ["dw", "plain", "wide"] and len(m.new_family_kernel_scores_) == len(rows)
    # a family held out predicts worse than a network held out (the depthwise convs of "dw"
    # were never measured by the models that predict it)
    assert m._quantile("kernel_new", 0.1) > m._quantile("kernel", 0.1)
    net, shape = _net(16, 3), (2, 3, 16, 16)
    user = m.predict_module(net, shape)  # no family: a user's module
    plain = m.predict_module(net, shape, family="plain")
    assert user["latency_ms"] == plain["latency_ms"]
    ratio = lambda p, t: p[f"{t}_upper"] / p[t]  # noqa: E731
    assert ratio(user, "latency_ms") == pytest.approx(np.exp(m._quantile("kernel_new", 0.1)))
    assert ratio(plain, "latency_ms") == pytest.approx(np.exp(m._quantile("kernel", 0.1)))
    assert ratio(user, "peak_mem_mb") == pytest.approx(np.exp(m._quantile("mem_new", 0.1)))
    # rows: by their family column
    p = m.predict(rows.assign(family=np.where(rows.index < 5, "other", rows["family"])), ops)
    wide = p["latency_ms_upper"] / p["latency_ms"]
    assert np.allclose(wide[:5], ratio(user, "latency_ms"))
    assert np.allclose(wide[5:], ratio(plain, "latency_ms"))
    numbers = lambda p: {k: v for k, v in p.items() if k != "unmodelled_ops"}  # noqa: E731
    again = ModuleCostModel.load(m.save(tmp_path / "m"))
    assert numbers(again.predict_module(net, shape)) == pytest.approx(numbers(user))
    # "network", or too few families to hold one out: every network gets the networks' interval
    for same in (
        ModuleCostModel(interval="network").fit(rows, ops),
        ModuleCostModel().fit(rows[rows["family"] != "wide"], ops),
    ):
        assert same.new_family_kernel_scores_ == []
        assert numbers(same.predict_module(net, shape)) == pytest.approx(
            numbers(same.predict_module(net, shape, family="plain"))
        )
    with pytest.raises(ModelError, match="invalid interval"):
        ModuleCostModel(interval="wide").fit(rows, ops)
