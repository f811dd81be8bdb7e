"""The timing protocols: stopping rules, statistics, parameter validation."""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import pytest

from carb_nas.errors import ConfigError
from carb_nas.measure import Protocol, ReferenceProbe, time_runs
from carb_nas.measure._protocol import median_ci
from tests.measure._machine import thp_always


def test_median_ci_bounds_the_median_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    widths = []
    for n in (10, 100, 1000):
        s = np.sort(rng.lognormal(0, 0.1, n))
        lo, hi = median_ci(s)
        assert lo <= np.median(s) <= hi
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]


def test_median_ci_covers_the_true_median_about_95_percent():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(400):
        lo, hi = median_ci(np.sort(rng.exponential(1.0, 40)))
        hits += lo <= math.log(2) <= hi
    assert 0.90 <= hits / 400 <= 0.99


def test_adaptive_stops_early_on_steady_timings():
    steady = Protocol(min_time_s=0.0)
    res = time_runs(lambda: 0.001, steady)
    assert res.n_runs == steady.min_runs == 6
    assert res.latency_ms == pytest.approx(1.0)
    assert res.latency_cv == pytest.approx(0.0, abs=1e-12)
    assert res.latency_ci_rel == pytest.approx(0.0, abs=1e-12)


def test_adaptive_runs_until_cap_or_max_on_noisy_timings():
    values = itertools.cycle([0.0005, 0.002, 0.001, 0.004])
    res = time_runs(lambda: next(values), Protocol(max_runs=60, time_cap_s=10.0))
    assert res.n_runs == 60  # the CI never gets within 2% with these values
    assert res.latency_ci_rel > 0.02
    assert res.latency_p90_ms >= res.latency_ms
    cap = time_runs(lambda: next(values), Protocol(max_runs=10**6, time_cap_s=0.05))
    assert cap.timing_s >= 0.05 and cap.n_runs < 10**6


def test_carb_protocol_is_fixed():
    p = Protocol.carb()
    assert (p.warmup_runs, p.min_runs, p.max_runs, p.cooldown_s) == (10, 100, 100, 1.0)
    calls = []
    res = time_runs(lambda: calls.append(1) or 0.0001, p)
    assert res.n_runs == 100 and len(calls) == 110
    assert p.params()["time_cap_s"] is None  # JSON-safe


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(name="fast"),
        dict(min_runs=0),
        dict(min_runs=10, max_runs=5),
        dict(time_cap_s=-1.0),
        dict(target_ci_rel=0.0),
        dict(confidence=1.0),
    ],
)
def test_protocol_rejects_bad_parameters(kwargs):
    with pytest.raises(ConfigError, match="expected"):
        Protocol(**kwargs)


def test_named_protocol_overrides():
    p = Protocol.named("carb", cooldown_s=0.0)
    assert p.name == "carb" and p.cooldown_s == 0.0 and p.max_runs == 100
    assert Protocol.named("adaptive", time_cap_s=None).time_cap_s == 2.0


def test_a_95_percent_median_ci_needs_six_runs():
    from carb_nas.measure._protocol import min_runs_for_ci

    assert min_runs_for_ci(0.95) == 6  # [min, max] of 5 runs covers the median 93.75%
    assert min_runs_for_ci(0.99) == 8
    # Low min_runs cannot make the CI rule stop before the interval exists ...
    res = time_runs(lambda: 0.001, Protocol(min_runs=2, min_time_s=0.0))
    assert res.n_runs == 6 and res.latency_ci_rel == pytest.approx(0.0, abs=1e-12)
    # ... and a result with fewer runs has no CI rather than an overconfident one.
    few = time_runs(lambda: 0.001, Protocol(min_runs=3, max_runs=4, min_time_s=0.0))
    assert few.n_runs == 4 and few.latency_ci_rel is None


def test_min_time_keeps_timing_past_a_narrow_early_ci():
    import time

    def run_once_s():
        time.sleep(0.002)
        return 0.001  # identical values: the CI is narrow from the start

    res = time_runs(run_once_s, Protocol(min_time_s=0.05))
    assert res.timing_s >= 0.05 and res.n_runs > 6
    with pytest.raises(ConfigError, match="min_time_s"):
        Protocol(min_time_s=-0.1)


_FAULTS_CHILD = """
import json, torch
from torch import nn
from carb_nas.features import trace_features
from carb_nas.measure import Protocol, time_runs
torch.set_num_threads(1)
conv = nn.Conv2d(1024, 1024, 3, padding=1, bias=False).eval()
x = torch.randn(2, 1024, 4, 4)
small = nn.Conv2d(960, 960, 3, padding=1, bias=False).eval()
y = torch.randn(2, 960, 4, 4)
proto = Protocol.named("carb", warmup_runs=2, min_runs=5, max_runs=5)
def timed(m, v):
    def once():
        with torch.inference_mode():
            m(v)
        return 0.001
    return time_runs(once, proto).minor_faults_per_run
print(json.dumps({
    "big": timed(conv, x), "small": timed(small, y),
    "big_mb": trace_features(conv, (2, 1024, 4, 4))["mmap_mb"],
}))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or thp_always(),
    reason="counts 4 KiB faults of glibc's per-call mappings: Linux, without always-on THP",
)
def test_minor_faults_per_run_see_the_buffers_mmap_mb_counts():
    # a fresh process: whether a large buffer is mapped anew depends on the heap's history
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _FAULTS_CHILD], capture_output=True, text=True, check=True
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    pages = got["big_mb"] * 1e6 / 4096  # oneDNN's 37.7 MB weight copy, faulted in per call
    assert pages * 0.95 < got["big"] < pages * 1.1
    assert got["small"] < 100  # 31.6 MiB: glibc keeps it on the heap


def test_cpu_per_wall_tells_a_run_that_waited_from_one_that_computed():
    import time

    proto = Protocol.named("carb", warmup_runs=1, min_runs=5, max_runs=5)

    def sleeping():  # off the CPU for the whole run, as when another process holds the core
        t0 = time.perf_counter()
        time.sleep(0.005)
        return time.perf_counter() - t0

    def computing():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.005:
            pass
        return time.perf_counter() - t0

    waited = time_runs(sleeping, proto).cpu_per_wall
    computed = time_runs(computing, proto).cpu_per_wall
    # margins for a loaded 2-core machine (a third process on the cores put a computing run
    # at ~0.5): off the CPU is near 0, on it near 1
    assert waited < 0.15 and computed > 0.3 and computed > 3 * waited
    assert "cpu_per_wall" in time_runs(computing, proto).as_row()


class _CountingProbe(ReferenceProbe):
    """The real probe's burst schedule with a fixed 1 ms per probe run (fake, no timing)."""

    def _once(self) -> float:
        return 0.001


def test_the_speed_probe_runs_in_bursts_at_the_start_every_interval_and_the_end():
    import time

    probe = _CountingProbe(burst=2, every_s=0.05)
    fixed = Protocol(min_runs=10, max_runs=10, target_ci_rel=None, warmup_runs=0,
                     warmup_min_s=0.0)  # fmt: skip

    def run() -> float:
        time.sleep(0.02)
        return 0.02

    res = time_runs(run, fixed, probe)
    bursts = len(probe.samples_s) / 2
    # 10 runs of 20 ms: a burst at the start, one after every ~50 ms (3 or 4), one at the end
    assert bursts == int(bursts) and 4 <= bursts <= 7
    assert res.reference_ms == pytest.approx(1.0)
    assert time_runs(run, fixed).reference_ms is None  # no probe, no number
    time_runs(run, fixed, probe)
    assert len(probe.samples_s) <= 14  # each window starts afresh


@pytest.mark.parametrize("kwargs", [{"burst": 0}, {"every_s": 0.0}])
def test_a_speed_probe_with_impossible_settings_is_a_clear_error(kwargs):
    with pytest.raises(ConfigError, match="invalid speed probe.*Use the defaults"):
        ReferenceProbe(**kwargs)
