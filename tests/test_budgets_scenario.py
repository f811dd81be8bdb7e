"""Scenario budgets: latency_p90_ms / latency_p99_ms (upper limits), throughput_sps (lower)."""

from __future__ import annotations

import math

import pytest

from carb_nas.budgets import (
    BUDGET_METRICS,
    SCENARIO_METRICS,
    accept_measured,
    check_budgets,
    measured_violations,
    parse_budgets,
)
from carb_nas.errors import BudgetError


def test_scenario_budgets_parse_and_follow_their_direction():
    b = parse_budgets(["latency_p90_ms=10", "throughput_sps=100"])
    assert set(SCENARIO_METRICS) <= set(BUDGET_METRICS)
    v = measured_violations({"latency_p90_ms": 5.0, "throughput_sps": 50.0}, b)
    assert v["latency_p90_ms"] == pytest.approx(-0.5)  # half the limit: within
    assert v["throughput_sps"] == pytest.approx(1.0)  # half the required throughput: over
    assert accept_measured({"latency_p90_ms": 9.9, "throughput_sps": 101.0}, b)
    assert not accept_measured({"latency_p90_ms": 10.1, "throughput_sps": 101.0}, b)
    assert not accept_measured({"latency_p90_ms": 1.0}, b)  # not measured: not accepted
    assert math.isinf(measured_violations({"throughput_sps": 0.0}, b)["throughput_sps"])


def test_a_cost_model_cannot_take_a_scenario_budget():
    class Fitted:
        targets_ = ["peak_mem_mb", "latency_ms"]
        platform_ = {"platform": "cpu/torch/fp32"}

    with pytest.raises(BudgetError, match="measured under an MLPerf LoadGen scenario") as e:
        check_budgets(parse_budgets(["latency_p90_ms=5"]), Fitted())
    assert "\n" not in str(e.value)


def test_unknown_budget_lists_the_scenario_metrics():
    with pytest.raises(BudgetError, match="throughput_sps"):
        parse_budgets(["qps=3"])


def test_a_memory_budget_on_an_rss_peak_runtime_warns_once(monkeypatch):
    """OpenVINO/LiteRT rows measure peak_mem_mb as one inference's RSS growth (weights
    excluded): a memory budget on such a model says so, once per platform; torch's does not."""
    import warnings
    from types import SimpleNamespace

    import carb_nas.budgets as budgets_mod

    monkeypatch.setattr(budgets_mod, "_WARNED_RSS_PEAK", set())

    def model(runtime):
        plat = {"platform": f"cpu/{runtime}/int8", "runtime": runtime}
        return SimpleNamespace(targets_=["peak_mem_mb", "latency_ms"], platform_=plat)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_budgets({"peak_mem_mb": 50}, model("torch"))
        check_budgets({"latency_ms": 5}, model("openvino"))  # no memory budget: nothing
        check_budgets({"peak_mem_mb_per_image": 5}, model("openvino"), role="target model")
        check_budgets({"peak_mem_mb": 50}, model("openvino"))  # said already
    (w,) = [str(c.message) for c in caught]
    assert "target model for cpu/openvino/int8" in w and "weights and compiled model" in w
