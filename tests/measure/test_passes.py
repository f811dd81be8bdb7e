"""Interleaved passes: the fastest ok row per config, its passes recorded (fake rows)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from carb_nas.errors import ConfigError
from carb_nas.measure.passes import check_passes, fastest_of_passes, pass_spread_pct, profile_passes


def _row(key, lat, status="ok"):
    return {"key": key, "latency_ms": lat, "status": status, "device_name": "FAKE",
            "protocol_params": json.dumps({"target_ci_rel": 0.02})}  # fmt: skip


def test_fastest_ok_row_kept_with_every_pass_recorded():
    passes = [
        [_row("a", 10.0), _row("b", 5.0), _row("c", None, "error")],
        [_row("a", 8.0), _row("b", 9.0, "error"), _row("c", None, "error")],
        [_row("a", 12.0)],  # a pass cut short by a budget
    ]
    a, b, c = fastest_of_passes(passes)
    assert a["latency_ms"] == 8.0 and b["latency_ms"] == 5.0 and c["status"] == "error"
    pa = json.loads(a["protocol_params"])
    assert pa == {"target_ci_rel": 0.02, "passes": 3, "pass_latency_ms": [10.0, 8.0, 12.0]}
    assert json.loads(b["protocol_params"])["passes"] == 2
    # first two passes ok: a (8/10) and b (9/5, the second failed but timed) count
    np.testing.assert_allclose(sorted(pass_spread_pct([a, b, c])), [20.0, 80.0])
    assert passes[0][0]["latency_ms"] == 10.0  # the inputs are not modified
    assert "passes" not in json.loads(passes[1][0]["protocol_params"])


class SlowingProfiler:
    """FAKE: every call 5 % slower than the last."""

    def __init__(self):
        self.calls = []

    def profile(self, config):
        self.calls.append(config)
        return _row(config, 1.0 * 1.05 ** (len(self.calls) - 1))


def test_profile_passes_interleaves_rounds():
    prof, seen = SlowingProfiler(), []
    rows = profile_passes(prof, ["x", "y"], passes=3, progress=lambda *a: seen.append(a))
    assert prof.calls == ["x", "y"] * 3 and seen == [(i, 6, "xy"[i % 2]) for i in range(6)]
    assert [r["latency_ms"] for r in rows] == pytest.approx([1.0, 1.05])
    single = profile_passes(SlowingProfiler(), ["x"], passes=1)
    assert "passes" not in json.loads(single[0]["protocol_params"])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None])
def test_bad_passes_is_one_clear_error(bad):
    with pytest.raises(ConfigError, match="bad passes: expected an integer >= 1"):
        check_passes(bad)
    with pytest.raises(ConfigError):
        profile_passes(SlowingProfiler(), ["x"], passes=bad)
