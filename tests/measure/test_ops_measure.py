"""Per-operator measurements (measure._ops) on tiny models, on this CPU (real, cheap)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from carb_nas.errors import ConfigError
from carb_nas.features import trace_ops
from carb_nas.measure import Protocol
from carb_nas.measure.campaign import match_ops, measure_ops, read_ops_campaign, run_ops_campaign

QUICK = Protocol(warmup_runs=1, warmup_min_s=0.0, min_runs=3, max_runs=3, target_ci_rel=None)


def _tiny(c: int = 8) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1),
        nn.BatchNorm2d(c),
        nn.Hardswish(),
        nn.Conv2d(c, c, 3, padding=1, groups=c),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(c, 4),
    ).eval()


def test_every_traced_op_gets_a_profiled_time():
    torch.set_num_threads(1)
    row, ops = measure_ops(_tiny(), (2, 3, 16, 16), QUICK, profiled_runs=2)
    assert row["n_unmatched"] == 0 and row["n_events"] == row["n_ops"] == len(ops)
    assert (ops["measured_ms"] > 0).all()
    assert list(ops["event"]) == [
        "aten::conv2d",
        "aten::batch_norm",
        "aten::hardswish",
        "aten::conv2d",
        "aten::relu",
        "aten::adaptive_avg_pool2d",
        "aten::flatten",
        "aten::linear",
    ]
    assert row["latency_ms"] > 0 and row["peak_mem_mb"] > 0
    assert row["op_sum_ms"] == pytest.approx(ops["measured_ms"].sum())


def test_an_op_the_runtime_did_not_run_stays_unmatched_instead_of_shifting():
    ops, _ = trace_ops(_tiny(), (1, 3, 8, 8), cache=False)
    events = [
        ("aten::conv2d", 1.0),
        ("aten::batch_norm", 2.0),
        # hardswish missing
        ("aten::conv2d", 4.0),
        ("aten::relu", 5.0),
        ("aten::adaptive_avg_pool2d", 6.0),
        ("aten::flatten", 7.0),
        ("aten::linear", 8.0),
    ]
    got = match_ops(ops, events)["measured_ms"].to_numpy()
    assert np.isnan(got[2])
    assert list(got[[0, 1, 3, 4, 5, 6, 7]]) == [1.0, 2.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def _build(spec):
    return _tiny(int(spec["c"])), (1, 3, 8, 8)


def _bad(spec):
    raise ValueError("no such model")


def test_ops_campaign_measures_in_fresh_processes_and_resumes(tmp_path):
    specs = [{"key": "a", "c": 4}, {"key": "b", "c": 8}]
    assert run_ops_campaign(specs, _build, tmp_path, QUICK, profiled_runs=1) == 2
    assert run_ops_campaign(specs, _build, tmp_path, QUICK, profiled_runs=1) == 0  # resumed
    rows, ops = read_ops_campaign(tmp_path)
    assert list(rows["key"]) == ["a", "b"] and (rows["status"] == "ok").all()
    assert set(ops["key"]) == {"a", "b"} and ops["measured_ms"].notna().all()
    fp = json.loads(rows["fingerprint"].iloc[0])
    assert fp["fresh_process"] is True and fp["threads"] == 1
    # a torn last line (a kill mid-write) is measured again, never half-read
    with open(tmp_path / "rows.jsonl", "a") as f:
        f.write('{"key": "c", "sta')
    assert run_ops_campaign([{"key": "c", "c": 4}], _build, tmp_path, QUICK, 1) == 1
    rows, _ = read_ops_campaign(tmp_path)
    assert list(rows["key"]) == ["a", "b", "c"]


def test_a_campaign_refuses_to_resume_on_another_platform(tmp_path):
    assert run_ops_campaign([{"key": "a", "c": 4}], _build, tmp_path, QUICK, 1) == 1
    path = tmp_path / "rows.jsonl"
    rec = json.loads(path.read_text())
    fp = json.loads(rec["fingerprint"])
    fp["cpu"] = {**fp["cpu"], "model": "another"}
    rec["fingerprint"] = json.dumps(fp, sort_keys=True)
    path.write_text(json.dumps(rec) + "\n")
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="another platform.*differ in cpu"):
        run_ops_campaign([{"key": "b", "c": 8}], _build, tmp_path, QUICK, 1)
    assert path.read_bytes() == before  # nothing measured, nothing appended


def test_a_failing_build_becomes_an_error_row(tmp_path):
    assert run_ops_campaign([{"key": "x"}], _bad, tmp_path, QUICK, profiled_runs=1) == 1
    rows, _ = read_ops_campaign(tmp_path)
    assert rows["status"].tolist() == ["error"] and "no such model" in rows["error"].iloc[0]


def test_read_needs_a_campaign(tmp_path):
    with pytest.raises(ConfigError, match="not an ops campaign"):
        read_ops_campaign(tmp_path)


def test_a_reference_campaign_times_the_probe_and_never_mixes_with_rows_without_it(tmp_path):
    ref_dir, plain_dir = tmp_path / "ref", tmp_path / "plain"
    assert run_ops_campaign([{"key": "a", "c": 4}], _build, ref_dir, QUICK, 1, reference=True)
    rows, _ = read_ops_campaign(ref_dir)
    assert rows["reference_ms"].iloc[0] > 0 and rows["ops_reference_ms"].iloc[0] > 0
    assert "conv2d" in json.loads(rows["fingerprint"].iloc[0])["reference"]
    assert run_ops_campaign([{"key": "a", "c": 4}], _build, plain_dir, QUICK, 1) == 1
    plain, _ = read_ops_campaign(plain_dir)
    assert plain["reference_ms"].isna().all()  # no probe, no number
    keys_only, no_ops = read_ops_campaign(plain_dir, with_ops=False)
    assert keys_only["key"].tolist() == ["a"] and no_ops.empty
    with pytest.raises(ConfigError, match="differ in reference"):
        run_ops_campaign([{"key": "b", "c": 8}], _build, ref_dir, QUICK, 1)  # probe-less resume
