"""benchmarks/any_cnn_data.py's export: one machine per dataset, never over another machine's
file, and an exported CSV extends with a later campaign (real tiny campaigns on this CPU)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from carb_nas.measure.campaign import run_ops_campaign
from tests.measure.test_ops_measure import QUICK, _build

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "any_cnn_data", ROOT / "benchmarks/any_cnn_data.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT_ROWS", tmp_path / "out" / "cpu_torch_fp32_zoo.csv")
    monkeypatch.setattr(mod, "OUT_OPS", tmp_path / "out" / "cpu_torch_fp32_zoo_ops.csv.gz")
    (tmp_path / "out").mkdir()
    return mod


def _campaign(path: Path, keys: list[str]) -> Path:
    specs = [{"key": k, "family": "tiny", "c": 4 + 4 * i} for i, k in enumerate(keys)]
    run_ops_campaign(specs, _build, path, QUICK, profiled_runs=1)
    return path


def _export(mod, parts, name="zoo-here", pick="lowest-cv"):
    mod.export(argparse.Namespace(campaign=[str(p) for p in parts], name=name, pick=pick))
    return mod.OUT_ROWS.with_name(f"cpu_torch_fp32_{name}.csv")


def test_an_export_extends_with_a_later_campaign(data, tmp_path):
    first = _export(data, [_campaign(tmp_path / "c1", ["a", "b"])])
    old = tmp_path / "old.csv"
    old.write_bytes(first.read_bytes())
    first.with_name(first.stem + "_ops.csv.gz").rename(tmp_path / "old_ops.csv.gz")
    both = pd.read_csv(_export(data, [old, _campaign(tmp_path / "c2", ["c"])]))
    assert sorted(both.key) == ["a", "b", "c"] and (both.platform == "cpu/torch/fp32").all()
    ops = pd.read_csv(first.with_name(first.stem + "_ops.csv.gz"))
    assert set(ops.key) == {"a", "b", "c"}


def _other_machine(path: Path) -> None:
    rows = path / "rows.jsonl"
    recs = [json.loads(line) for line in rows.read_text().splitlines()]
    for r in recs:
        fp = json.loads(r["fingerprint"])
        r["fingerprint"] = json.dumps({**fp, "device_name": "Another CPU"}, sort_keys=True)
    rows.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_export_refuses_two_machines_and_another_machines_file(data, tmp_path):
    here = _campaign(tmp_path / "here", ["a"])
    there = _campaign(tmp_path / "there", ["b"])
    _other_machine(there)
    with pytest.raises(SystemExit, match="one machine, got 2"):
        _export(data, [here, there])
    _export(data, [there], name="zoo")
    before = data.OUT_ROWS.read_bytes()
    with pytest.raises(SystemExit, match="another machine's rows.*--name zoo-"):
        _export(data, [here], name="zoo")
    assert data.OUT_ROWS.read_bytes() == before  # the other machine's file is untouched


def test_a_missing_part_is_one_line_not_a_traceback(data, tmp_path):
    with pytest.raises(SystemExit, match="expected an existing path, got .*nowhere"):
        _export(data, [tmp_path / "nowhere"])
    assert not any((tmp_path / "out").iterdir())  # nothing written


def test_median_pick_keeps_the_middle_pass_by_probe_normalized_latency(data):
    """Three passes of "a": the median of latency / probe is pass 0's row (raw latency would
    pick pass 1's); "b" has two kept rows (a median of two is a pick of one): the lowest CV;
    "c"'s row timed off its core is never the median."""
    rows = pd.DataFrame(
        {
            "key": ["a", "a", "a", "b", "b", "c", "c", "c", "c"],
            "_part": [0, 1, 2, 0, 1, 0, 1, 2, 3],
            "latency_ms": [10.0, 9.5, 9.0, 5.0, 6.0, 1.0, 2.0, 3.0, 100.0],
            "reference_ms": [1.0, 2.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            "latency_cv": [0.3, 0.1, 0.2, 0.2, 0.1, 0.1, 0.12, 0.11, 0.01],
            "_lost": [False] * 8 + [True],
        }
    )
    picked = data._pick(rows, "median").set_index("key")["_part"].to_dict()
    assert picked == {"a": 0, "b": 1, "c": 1}
    lowest = data._pick(rows, "lowest-cv").set_index("key")["_part"].to_dict()
    assert lowest == {"a": 1, "b": 1, "c": 0}


def test_median_pick_without_a_probe_column_uses_raw_latency(data):
    rows = pd.DataFrame(
        {
            "key": ["a"] * 3,
            "_part": [0, 1, 2],
            "latency_ms": [3.0, 1.0, 2.0],
            "latency_cv": [0.1, 0.2, 0.3],
            "_lost": [False] * 3,
        }
    )
    assert data._pick(rows, "median")["_part"].tolist() == [2]


def test_linear_draw_above_the_first_ceiling_keeps_the_first_draw_and_its_range(data):
    kernels = ROOT / "research/runs/passes/kernels-zen4/kernels.csv.gz"
    shipped = pd.read_csv(kernels, usecols=["key"])
    first = data.linear_specs(150, seed=0)  # the shipped samples' draw, before the range knobs
    assert {s["key"] for s in first} <= set(shipped["key"])
    large = data.linear_specs(40, 1000.0, seed=1, min_weight_mb=450.0)
    mb = [s["c_in"] * s["c_out"] * 4 / 1e6 for s in large]
    assert min(mb) >= 450.0 and max(mb) <= 1000.0
    assert {(37632, 6144), (31360, 5120)} & {(s["c_in"], s["c_out"]) for s in large}
    with pytest.raises(ValueError, match="min_weight_mb < max_weight_mb"):
        data.linear_specs(1, 400.0, min_weight_mb=450.0)


@pytest.fixture
def denormals_restored():
    import torch

    yield
    torch.set_flush_denormal(False)  # an in-place act sample flushes them (per forked child)


def test_dwconv_and_act_draws_cover_their_space_and_build_one_op(data, denormals_restored):
    from carb_nas.features import trace_ops

    dw = data.dwconv_specs(120, max_gflops=0.05)
    assert all(s["groups"] == s["c_in"] == s["c_out"] for s in dw)
    assert {s["kernel"] for s in dw} == {3, 5, 7} and {s["stride"] for s in dw} == {1, 2}
    k, st, hw = dw[0]["kernel"], dw[0]["stride"], dw[0]["hw"]
    flops = [2 * s["batch_size"] * s["c_in"] * ((s["hw"] - 1) // s["stride"] + 1) ** 2
             * s["kernel"] ** 2 for s in dw]  # fmt: skip
    assert max(flops) <= 0.05e9
    acts = data.act_specs(200, max_mb=8.0)
    assert {s["op"] for s in acts} == {name for name, _ in data.ACT_OPS}
    assert max(s["batch_size"] * s["c_in"] * s["hw"] ** 2 * 4 / 1e6 for s in acts) <= 8.0
    expect = {
        "relu6": ("act", "hardtanh"),
        "silu": ("act", "silu"),
        "max_pool3s2": ("pool", "max_pool2d"),
        "avg_pool2s2": ("pool", "avg_pool2d"),
    }
    for name, (kind, op) in expect.items():
        spec = next(s for s in acts if s["op"] == name)
        module, shape = data.build_kernel(spec)
        table, _ = trace_ops(module, shape, "fp32", cache=False)
        assert table[["kind", "op"]].values.tolist() == [[kind, op]]
    module, shape = data.build_kernel(dw[0])
    table, _ = trace_ops(module, shape, "fp32", cache=False)
    assert table[["kind", "kernel", "stride"]].values.tolist() == [["dwconv", k, st]]
    assert shape[2] == hw


def test_dense_conv_draw_covers_odd_channel_counts_and_builds_one_dense_conv(data):
    from carb_nas.features import trace_ops

    convs = data.conv_specs(150, max_gflops=0.05)
    assert all(s["groups"] == 1 for s in convs) and len({s["key"] for s in convs}) == 150
    assert {s["kernel"] for s in convs} == {1, 3} and {s["stride"] for s in convs} == {1, 2}
    c_in = [s["c_in"] for s in convs]
    assert min(c_in) < 16 and max(c_in) > 512 and sum(c % 8 != 0 for c in c_in) > 50
    assert max(data._conv_flops(s) for s in convs) <= 0.05e9
    assert data.conv_specs(150, max_gflops=0.05) == convs  # seeded: a resume redraws it
    module, shape = data.build_kernel(convs[0])
    table, _ = trace_ops(module, shape, "fp32", cache=False)
    assert table[["kind", "c_in", "c_out"]].values.tolist() == [
        ["conv", convs[0]["c_in"], convs[0]["c_out"]]
    ]


def test_export_kernels_extends_an_earlier_export_and_keeps_the_lower_cv_pass(data, tmp_path):
    shipped = pd.read_csv(ROOT / "research/runs/passes/kernels-zen4/kernels.csv.gz")
    first = shipped[shipped["key"].isin(shipped["key"].unique()[:6])].drop(columns="latency_ms")
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    first.to_csv(a, index=False, float_format="%.6g")
    again = first.assign(  # a second pass of the same samples: half quieter, all 2x slower
        latency_cv=first["latency_cv"]
        * first["key"].isin(first["key"].unique()[:3]).map({True: 0.5, False: 2.0}),
        measured_ms=first["measured_ms"] * 2,
    )
    again.to_csv(b, index=False, float_format="%.6g")
    out = tmp_path / "k.csv.gz"
    args = argparse.Namespace(campaign=[str(a), str(b)], out=str(out), pick="lowest-cv")
    data.export_kernels(args)
    got = pd.read_csv(out).set_index("key")["measured_ms"]
    was = first.set_index("key")["measured_ms"]
    quieter = set(first["key"].unique()[:3])
    assert len(got) == 6 and all(
        got[k] == pytest.approx(was[k] * (2 if k in quieter else 1), rel=1e-5) for k in got.index
    )
    data.export_kernels(argparse.Namespace(campaign=[str(a)], out=str(out), pick="lowest-cv"))
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(a))  # one export: itself
    # a sample's whole-module latency is kept where a part has it, never in the op table
    timed = first.assign(latency_ms=first["measured_ms"] * 1.2)
    timed.to_csv(b, index=False, float_format="%.6g")
    data.export_kernels(argparse.Namespace(campaign=[str(a), str(b)], out=str(out),
                                           pick="lowest-cv"))  # fmt: skip
    kept = pd.read_csv(out).dropna(subset=["latency_ms"])  # b's rows where b won a CV tie
    assert kept["latency_ms"].to_numpy() == pytest.approx(kept["measured_ms"] * 1.2, rel=1e-5)
    from carb_nas.datasets import load_kernel_samples

    data.export_kernels(argparse.Namespace(campaign=[str(b)], out=str(out), pick="lowest-cv"))
    assert pd.read_csv(out)["latency_ms"].notna().all()
    assert "latency_ms" not in load_kernel_samples(out).columns
    with pytest.raises(SystemExit, match="not a kernel-sample export.*latency_cv"):
        first.drop(columns="latency_cv").to_csv(a, index=False)
        data.export_kernels(args)


def test_wide_convs_and_odd_batch_gemvs_cover_what_no_family_shares(data, tmp_path, monkeypatch):
    wide = data.wide_conv_specs(80, seed=0)
    mb = [s["c_in"] * s["c_out"] * s["kernel"] ** 2 * 4 / 1e6 for s in wide]
    assert min(mb) >= 4.0 and max(data._conv_flops(s) for s in wide) <= 3e9
    assert max(s["hw"] for s in wide) <= 8 and max(s["c_in"] for s in wide) > 1024
    assert {s["batch_size"] for s in wide} == set(data.NETWORK_BATCH)  # 3, 6 and 12 too
    odd = data.linear_specs(30, 1000.0, seed=2, min_weight_mb=25.0, batches=(3, 6, 12))
    assert {s["batch_size"] for s in odd} == {3, 6, 12}
    assert data.linear_specs(20) == data.linear_specs(20, batches=data.KERNEL_BATCH)
    args = argparse.Namespace(out=str(tmp_path / "k"), kind="gconv", batches="3,6", n=1,
                              seed=0, max_gflops=0.5, reference=False)  # fmt: skip
    for kind, batches in (("gconv", "3,6"), ("linear", "3,x"), ("linear", "0")):
        with pytest.raises(SystemExit, match="--batches takes positive batch sizes"):
            data.kernels(argparse.Namespace(**{**vars(args), "kind": kind, "batches": batches}))
    argv = ["any_cnn_data.py", "kernels", "--out", args.out, "--kind", "wideconv", "--batches", "3"]
    monkeypatch.setattr(sys, "argv", argv)  # the parser knows the kind and the option
    with pytest.raises(SystemExit, match="for --kind linear: got '3' for --kind wideconv"):
        data.main()
    assert not (tmp_path / "k").exists()  # nothing written
