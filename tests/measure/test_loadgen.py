"""MLPerf LoadGen scenarios with the real mlperf_loadgen bindings, on a tiny config."""

from __future__ import annotations

import json

import pytest

from carb_nas.errors import ConfigError
from carb_nas.measure.loadgen import (
    LoadGenSettings,
    Workload,
    loadgen_rows,
    parse_detail_log,
    parse_summary,
    run_loadgen_campaign,
)
from carb_nas.space import Config

pytest.importorskip("mlperf_loadgen")

TINY = Config("basic", 8, 0.1, 32, 1)


def _fast(scenario: str, **kw) -> LoadGenSettings:
    kw = {"min_duration_ms": 200, "min_query_count": 16, **kw}
    return LoadGenSettings(scenario, "quick", **kw)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("lg")
    settings = [_fast(s) for s in ("single-stream", "multi-stream", "offline")]
    summary = run_loadgen_campaign(
        [Workload.from_config(TINY)], out, "torch", "fp32", settings, threads=1
    )
    return out, summary


def test_three_scenarios_give_rows_and_keep_logs(runs):
    out, summary = runs
    assert summary.total == summary.done == 3 and not summary.errors
    rows = {r["scenario"]: r for r in loadgen_rows(out)}
    assert set(rows) == {"single-stream", "multi-stream", "offline"}
    ss, ms, off = rows["single-stream"], rows["multi-stream"], rows["offline"]
    assert ss["latency_p90_ms"] > 0 and ss["query_count"] >= 16
    assert ms["latency_p99_ms"] >= ms["latency_p50_ms"] > 0
    assert off["throughput_sps"] > 0 and off["query_count"] == 1
    for r in rows.values():
        assert r["rules"] == "quick" and r["quick"] is True
        assert r["runtime"] == "torch" and r["precision"] == "fp32"
        assert r["loadgen_version"].startswith("6.")
        assert json.loads(r["fingerprint"])["scheme_conversion"]
        assert (out / r["log_dir"] / "mlperf_log_summary.txt").exists()
        assert (out / r["log_dir"] / "mlperf_log_detail.txt").exists()
        assert r["result_is"] == r["result_validity"]  # summary and detail agree


def test_invalid_is_reported_not_hidden(runs):
    out, summary = runs
    ms = next(r for r in loadgen_rows(out) if r["scenario"] == "multi-stream")
    # 16 queries cannot satisfy LoadGen's early stopping for a p99 (>= 662 queries)
    assert ms["result_validity"] == "INVALID" and ms["valid"] is False
    assert ms["early_stopping_met"] is False
    assert any("multi-stream" in line and "early stopping" in line for line in summary.invalid)
    assert ms["latency_p99_ms"] > 0  # the measured figure stays in the row


def test_resume_skips_finished_runs(runs):
    out, _ = runs
    before = {p.name: p.stat().st_mtime_ns for p in (out / "results").iterdir()}
    again = run_loadgen_campaign(
        [Workload.from_config(TINY)], out, "torch", "fp32", [_fast("single-stream")], threads=1
    )
    assert again.measured_now == 0 and again.done == 1
    assert {p.name: p.stat().st_mtime_ns for p in (out / "results").iterdir()} == before


def test_log_parsers(runs):
    out, _ = runs
    row = next(r for r in loadgen_rows(out) if r["scenario"] == "single-stream")
    d = parse_detail_log(out / row["log_dir"] / "mlperf_log_detail.txt")
    assert d["effective_scenario"] == "SingleStream"
    assert d["result_validity"] in ("VALID", "INVALID")  # a loaded machine may miss the rules
    assert d["effective_min_query_count"] == 16 and d["result_query_count"] >= 16
    s = parse_summary(out / row["log_dir"] / "mlperf_log_summary.txt")
    assert s["result_is"] == d["result_validity"] == row["result_validity"]
    assert s["min_queries_satisfied"] in ("Yes", "NO")


def test_failed_workload_is_a_row_and_the_rest_go_on(tmp_path):
    bad = Workload.from_config(Config("vgg", 11, 0.1, 64, 1))  # no ONNX export (pool 2->7)
    good = Workload.from_config(TINY)
    s = run_loadgen_campaign(
        [bad, good], tmp_path, "onnxruntime", "fp32", [_fast("single-stream")], threads=1
    )
    assert s.done == 1 and len(s.errors) == 1 and "adaptive_avg_pool2d" in s.errors[0]
    rows = {r["model"]: r for r in loadgen_rows(tmp_path)}
    assert rows[bad.name]["status"] == "error" and rows[good.name]["status"] == "ok"


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"scenario": "server"}, "invalid scenario"),
        (
            {"scenario": "single-stream", "min_duration_ms": 500, "max_duration_ms": 100},
            "max_duration_ms >= min_duration_ms",
        ),
        ({"scenario": "single-stream", "samples_per_query": 4}, "only multi-stream uses it"),
        ({"scenario": "multi-stream", "samples_per_query": 100}, "samples in the library"),
        ({"scenario": "offline", "min_query_count": -1}, "whole number >= 1"),
        ({"scenario": "offline", "min_query_count": 0}, "no queries measures nothing"),
        ({"scenario": "single-stream", "min_duration_ms": 0}, "min_duration_ms"),
        ({"scenario": "single-stream", "max_duration_ms": -5}, "0: no maximum"),
        ({"scenario": "multi-stream", "samples_per_query": 0}, "samples per query"),
        ({"scenario": "offline", "batch_size": 0}, "offline batch size"),
    ],
)
def test_impossible_settings_are_one_line(kw, match):
    with pytest.raises(ConfigError, match=match) as e:
        LoadGenSettings(**kw)
    assert "\n" not in str(e.value)
