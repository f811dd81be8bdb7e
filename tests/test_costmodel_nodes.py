"""ONNX Runtime's per-node model: measured nodes, their traced / closed-form table, the model,
and the exact node-sum column of a calibration map (costmodel._nodes, measure._ort_nodes)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from carb_nas import calibrate as cal_mod
from carb_nas.costmodel import NodeCostModel, calibrate, model_inputs
from carb_nas.costmodel._nodes import (
    NODE_OPS,
    NodeRatio,
    _traced_nodes,
    measured_table,
    node_rows_path,
    node_table,
)
from carb_nas.costmodel.calibration import ModuleRatio, node_ratio
from carb_nas.errors import ConfigError, ModelError
from carb_nas.measure.campaign import measure_ort_nodes, read_ort_nodes, run_ort_nodes_campaign
from carb_nas.space import CONFIG_COLUMNS, Config

pytest.importorskip("onnxruntime")

SHIPPED_KIND = "intel-avx512"  # the one CPU kind with shipped node rows


def _cfg(family="basic", depth=8, width=0.25, resolution=32, batch_size=2) -> Config:
    return Config(family, depth, width, resolution, batch_size, "fp32", "onnxruntime")


@pytest.fixture(scope="module")
def shipped():
    path = node_rows_path(SHIPPED_KIND)
    assert path is not None, "the Intel node rows must ship in carb_nas/data/nodes"
    return read_ort_nodes(path)


@pytest.mark.parametrize(
    "config",
    [
        _cfg(),
        _cfg("basic", 34, 0.1, 56, 1),  # 8-channel maps (rounded up, never below 8)
        _cfg("bottleneck", 50, 0.875, 48, 6),
        _cfg("bottleneck", 101, 1.5, 40, 3),  # odd map sizes: 40 -> 20 -> 10 -> 5 -> 3 -> 2
        _cfg("basic", 18, 2.0, 128, 1),
    ],
)
def test_the_closed_form_node_table_is_the_traced_one(config):
    """A ResNet's ops in closed form are exactly the rows of its trace, at any batch (a search
    reads thousands of networks: 0.3 ms each instead of 22); ONNX Runtime's are the conv /
    pool / linear ones."""
    cols = ["op", "n", "c", "h", "co", "ho", "k", "g"]
    closed = node_table([config], "cpu/torch/fp32")[cols].sort_values(cols).to_numpy()
    traced = _traced_nodes(config)[cols].sort_values(cols).to_numpy()  # traced at its batch
    np.testing.assert_array_equal(closed, traced)  # every op: conv, BN, ReLU, add, pools, fc
    ort = node_table([config])
    assert set(ort["op"]) == set(NODE_OPS.values())  # ORT's: BN, ReLU and add fused away
    assert len(ort) == int(np.isin(closed[:, 0], list(NODE_OPS.values())).sum())
    many = node_table([replace(config, batch_size=b) for b in (1, 4)])
    assert set(many.groupby("key")["n"].first()) == {1, 4}  # one trace, every batch


def test_measured_nodes_match_the_traced_table_of_their_config(tmp_path):
    """A real ONNX Runtime run: every conv / pool / Gemm node of the trace finds its measured
    node (ORT pads NCHWc channels: 8 -> 16), and they hold most of the run's kernel time."""
    config = _cfg()
    nodes = measure_ort_nodes(config, runs=2)
    assert all(n["us"] > 0 for n in nodes) and {n["op"] for n in nodes} >= {"Conv", "Gemm"}
    assert any(n["sum"] for n in nodes)  # the residual Add fused into its conv
    frame = pd.DataFrame([{"key": config.key, "node": i, **n} for i, n in enumerate(nodes)])
    configs = pd.DataFrame([{c: getattr(config, c) for c in CONFIG_COLUMNS}])
    table = measured_table(configs, frame)
    assert len(table) == len(node_table([config]))  # all matched
    assert table["us"].sum() >= 0.7 * frame["us"].sum()


def test_a_nodes_campaign_resumes_and_refuses_another_platforms_rows(tmp_path):
    """Measured configs are skipped on a second call; a torn last line is measured again;
    rows of another fingerprint are refused before anything is measured."""
    a, b = _cfg(), _cfg(resolution=40)
    assert run_ort_nodes_campaign([a], tmp_path, runs=1) == 1
    assert run_ort_nodes_campaign([a, b], tmp_path, runs=1) == 1  # only b
    path = tmp_path / "nodes.jsonl"
    with open(path, "a") as f:
        f.write('{"key": "torn')  # a kill mid-line
    configs, nodes = read_ort_nodes(tmp_path)
    assert sorted(configs["key"]) == sorted([a.key, b.key]) and (nodes["us"] > 0).all()
    lines = path.read_text().splitlines()
    other = json.loads(lines[0])
    other["fingerprint"] = json.dumps({"platform": "another machine"})
    path.write_text(json.dumps(other) + "\n")
    with pytest.raises(ConfigError, match="another platform.*new directory"):
        run_ort_nodes_campaign([_cfg(resolution=48)], tmp_path, runs=1)
    with pytest.raises(ConfigError, match="not a per-node campaign"):
        read_ort_nodes(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="invalid runs"):
        run_ort_nodes_campaign([a], tmp_path / "fresh", runs=0)
    assert not (tmp_path / "fresh").exists()  # refused before the directory was made


def test_the_node_model_predicts_held_out_networks_node_sums(shipped):
    """Fitted on some shipped configs' nodes, the model's node sums of the other configs follow
    their measured sums (log correlation), and a broken booster is one clear error."""
    configs, nodes = shipped
    keys = configs["key"].to_numpy()
    fit_keys, held = set(keys[:150]), keys[450:]
    table = measured_table(configs[configs["key"].isin(fit_keys)], nodes)
    model = NodeCostModel().fit(table)
    held_cfg = configs[configs["key"].isin(held)]
    predicted = model.predict(model_inputs(held_cfg[list(CONFIG_COLUMNS)]))["latency_ms"]
    measured = measured_table(held_cfg, nodes).groupby("key")["us"].sum() / 1000
    measured = measured.reindex(held_cfg["key"]).to_numpy()
    r = np.corrcoef(np.log(predicted.to_numpy()), np.log(measured))[0, 1]
    assert r > 0.97, r
    assert NodeCostModel(model.booster_text).predict_table(table).equals(model.predict_table(table))
    with pytest.raises(ModelError, match="damaged node model"):
        NodeCostModel("tree\nnot a booster")
    with pytest.raises(ModelError, match="expected the config columns"):
        model.predict(held_cfg[["family", "depth"]])
    with pytest.raises(ModelError, match="loaded from shipped rows"):
        NodeRatio(SHIPPED_KIND, model)  # fitted here: a saved calibration could not name it
    with pytest.raises(ModelError, match="positive finite"):
        NodeCostModel().fit(table.assign(us=0.0))


def test_onnxruntime_calibrations_take_the_kinds_exact_node_column(make_rows, ort_model):
    """``module_ratio`` gives ONNX Runtime the node column of a kind with node rows (none
    without); a map with it is saved as a reference to the rows and loads to the same
    predictions; rows that changed since are one clear error."""
    rows = make_rows(120, seed=3)
    rows = rows[rows["precision"] == "fp32"].assign(runtime="onnxruntime")
    source = ort_model
    assert cal_mod.module_ratio("cpu/onnxruntime/fp32", source, "amd-zen3") is None
    ratio = cal_mod.module_ratio("cpu/onnxruntime/fp32", source, SHIPPED_KIND)
    assert isinstance(ratio, NodeRatio) and isinstance(ratio, ModuleRatio)
    X = model_inputs(rows[list(CONFIG_COLUMNS)])
    z = np.log(source.predict(X)["latency_ms"].to_numpy(float))
    col = ratio.predict(X, z)
    assert np.isfinite(col).all() and np.ptp(col) > 0
    cal = calibrate(source, rows, module_ratio=ratio)
    assert cal.feature_names_[-1] == "log_module_ratio"
    doc = json.loads(json.dumps(cal.to_dict()))
    assert doc["module_ratio"] == ratio.to_dict() and "booster" not in doc["module_ratio"]
    again = type(cal).from_dict(doc, source)
    pd.testing.assert_frame_equal(again.predict(X), cal.predict(X))
    doc["module_ratio"]["rows_sha256_16"] = "0" * 16
    with pytest.raises(ModelError, match="other node rows.*Calibrate again"):
        type(cal).from_dict(doc, source)
    assert node_ratio("amd-zen3") is None


def test_torch_calibrations_take_the_kinds_exact_node_column_over_the_surrogate(
    make_rows, torch_model
):
    """A CPU kind with shipped PyTorch per-op rows gives torch the exact node column (its model
    learns every op: BN, ReLU and add too, and the native-kernel flag); a kind without keeps
    the module model's surrogate."""
    path = node_rows_path(SHIPPED_KIND, "cpu/torch/fp32")
    assert path is not None, "the Intel PyTorch per-op rows must ship in carb_nas/data/nodes"
    ratio = cal_mod.module_ratio("cpu/torch/fp32", torch_model, SHIPPED_KIND)
    assert isinstance(ratio, NodeRatio) and ratio.what == "PyTorch node model"
    assert ratio.to_dict()["platform"] == "cpu/torch/fp32"
    rows = make_rows(80, seed=4)
    rows = rows[rows["precision"] == "fp32"]
    X = model_inputs(rows[list(CONFIG_COLUMNS)])
    # the node sum grows with the work: batch 8 costs more than batch 1 of the same network
    one = X.head(5).assign(batch_size=1)
    eight = X.head(5).assign(batch_size=8)
    s1 = ratio.node_model.predict(one)["latency_ms"].to_numpy()
    s8 = ratio.node_model.predict(eight)["latency_ms"].to_numpy()
    assert (s8 > s1).all() and np.median(s8 / s1) > 2
    assert type(cal_mod.module_ratio("cpu/torch/fp32", torch_model, "amd-zen3")) is ModuleRatio
