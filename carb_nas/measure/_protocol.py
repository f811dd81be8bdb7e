"""Timing protocols: the adaptive default and CARB's fixed protocol.

Adaptive: after warmup, time runs until the 95% confidence interval of the median (the
distribution-free order-statistic interval from the binomial distribution) has a half-width
within ``target_ci_rel`` (2%) of the median, with at least ``min_runs`` runs, or until
``time_cap_s`` of timing is spent. Such an interval needs at least 6 runs at 95% (with 5, even
[min, max] covers the median only 93.75% of the time), so the CI rule never stops earlier.
Nor does it stop before ``min_time_s`` (0.15 s) of timing: successive runs are not independent
on a shared machine (its speed wanders on a scale of seconds), so six short runs can agree
closely and still miss the median a longer window sees (``benchmarks/protocol.py`` compares
the two protocols with and without the window; docs/measurement.md, "Timing protocol").

CARB: the fixed protocol of the CARB paper: 10 warmups, 100 timed runs, 1 s cooldown.
"""

from __future__ import annotations

import functools
import gc
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from carb_nas.errors import ConfigError

if TYPE_CHECKING:
    from carb_nas.measure._reference import ReferenceProbe

__all__ = [
    "MIN_CPU_PER_WALL",
    "PROTOCOLS",
    "Protocol",
    "TimingResult",
    "lost_its_core",
    "median_ci",
    "min_runs_for_ci",
    "time_runs",
]

#: a one-thread row below this ``cpu_per_wall`` was off its core for >10 % of its timing
MIN_CPU_PER_WALL = 0.9

PROTOCOLS = ("adaptive", "carb")


@dataclass(frozen=True)
class Protocol:
    """Repetition and hygiene parameters (recorded in every row's ``protocol_params``)."""

    name: str = "adaptive"
    warmup_runs: int = 3
    warmup_min_s: float = 0.05  # keep warming up (max 50 runs) until this much time passed
    min_runs: int = 6  # the fewest runs with a distribution-free 95% CI of the median
    min_time_s: float = 0.15  # timing window before the CI rule may stop (module docstring)
    max_runs: int = 2000
    target_ci_rel: float | None = 0.02
    time_cap_s: float = 2.0
    cooldown_s: float = 0.0
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if self.name not in PROTOCOLS:
            raise ConfigError(
                f"unknown protocol: expected one of {list(PROTOCOLS)}, got {self.name!r}. "
                "Use --protocol adaptive or carb."
            )
        if not 1 <= self.min_runs <= self.max_runs:
            raise ConfigError(
                f"invalid run counts: expected 1 <= min_runs <= max_runs, got "
                f"min_runs={self.min_runs}, max_runs={self.max_runs}. Fix the protocol."
            )
        for field in ("time_cap_s", "cooldown_s", "warmup_min_s", "min_time_s"):
            v = getattr(self, field)
            if not (v >= 0):
                raise ConfigError(f"invalid {field}: expected >= 0, got {v!r}. Use a value >= 0.")
        if not 0 < self.confidence < 1:
            raise ConfigError(
                f"invalid confidence: expected a number in (0, 1) (e.g. 0.95), got "
                f"{self.confidence!r}."
            )
        if self.target_ci_rel is not None and not self.target_ci_rel > 0:
            raise ConfigError(
                f"invalid target_ci_rel: expected > 0 (e.g. 0.02), got {self.target_ci_rel!r}."
            )

    @classmethod
    def carb(cls, cooldown_s: float = 1.0) -> Protocol:
        return cls(
            name="carb",
            warmup_runs=10,
            warmup_min_s=0.0,
            min_runs=100,
            min_time_s=0.0,
            max_runs=100,
            target_ci_rel=None,
            time_cap_s=math.inf,
            cooldown_s=cooldown_s,
        )

    @classmethod
    def named(cls, name: str, **overrides) -> Protocol:
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if name == "carb":
            base = cls.carb()
            return cls(**{**asdict(base), **overrides})
        return cls(name=name, **overrides)

    def params(self) -> dict:
        d = asdict(self)
        d.pop("name")
        if math.isinf(d["time_cap_s"]):
            d["time_cap_s"] = None
        return d


def min_runs_for_ci(confidence: float = 0.95) -> int:
    """Fewest runs whose [min, max] covers the median with at least ``confidence``."""
    if not 0 < confidence < 1:
        raise ConfigError(f"invalid confidence: expected a number in (0, 1), got {confidence!r}.")
    n = 1
    while 1.0 - 2.0 * 0.5**n < confidence:
        n += 1
    return n


@functools.lru_cache(maxsize=4096)
def _order_stat_bounds(n: int, confidence: float) -> tuple[int, int]:
    """0-based indices (lo, hi) of the order statistics bounding the median's CI.

    With k the smallest integer such that P(Bin(n, 1/2) <= k) >= alpha/2, the interval
    [x_(k), x_(n-k+1)] (1-based) covers the median with probability >= confidence. Below
    ``min_runs_for_ci(confidence)`` runs no such k >= 1 exists and [min, max] is returned
    (it covers less than ``confidence``; callers check the run count).
    """
    alpha = 1.0 - confidence
    # exact binomial CDF in log space (no scipy import: it costs seconds on a busy box)
    log_half_n = n * math.log(0.5)
    cdf, k = 0.0, 0
    while k <= n:
        cdf += math.exp(
            math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half_n
        )
        if cdf >= alpha / 2:
            break
        k += 1
    lo = max(k - 1, 0)
    hi = min(n - k, n - 1)
    return lo, hi


def median_ci(sorted_s: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median from order statistics (binomial); with fewer than
    ``min_runs_for_ci(confidence)`` values it is [min, max], at a lower coverage."""
    lo, hi = _order_stat_bounds(len(sorted_s), confidence)
    return float(sorted_s[lo]), float(sorted_s[hi])


@dataclass
class TimingResult:
    latency_ms: float
    latency_mean_ms: float
    latency_p90_ms: float
    latency_cv: float
    latency_ci_rel: float | None  # None: too few runs for a CI at the protocol's confidence
    n_runs: int
    timing_s: float
    # minor page faults of this process per timed run; None where getrusage is missing
    minor_faults_per_run: float | None = None
    # process CPU seconds per wall second while timing: ~1.0 for a one-thread run that had a
    # core to itself; lower when other processes took the CPU (the wait is in the latency)
    cpu_per_wall: float | None = None
    # the machine-speed probe's median over the timing window (``ReferenceProbe``), ms;
    # None when no probe was timed
    reference_ms: float | None = None

    def as_row(self) -> dict:
        return asdict(self)


def time_runs(
    run_once_s: Callable[[], float],
    protocol: Protocol,
    reference: ReferenceProbe | None = None,
) -> TimingResult:
    """Warm up, then time ``run_once_s`` (returns one run's seconds) under ``protocol``;
    with ``reference``, also time its bursts among the runs (``reference_ms``).

    The garbage collector is disabled during timing so collector pauses do not land inside
    timed runs (the caller collects once per config before calling this).
    """
    t0 = time.perf_counter()
    n_warm = 0
    while n_warm < protocol.warmup_runs or (
        time.perf_counter() - t0 < protocol.warmup_min_s and n_warm < 50
    ):
        run_once_s()
        n_warm += 1
    samples: list[float] = []
    n_ci = min_runs_for_ci(protocol.confidence)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        faults_before = _minor_faults()
        cpu_start = time.process_time()  # every thread of this process (runtimes' workers too)
        start = time.perf_counter()
        if reference is not None:
            reference.start()
            reference.run_burst()
            last_burst = time.perf_counter()
        check_every = 1
        while True:
            samples.append(run_once_s())
            if reference is not None and time.perf_counter() - last_burst >= reference.every_s:
                reference.run_burst()
                last_burst = time.perf_counter()
            n = len(samples)
            elapsed = time.perf_counter() - start
            if n >= protocol.max_runs or (
                n >= protocol.min_runs and elapsed >= protocol.time_cap_s
            ):
                break
            if (
                protocol.target_ci_rel is not None
                and n >= max(protocol.min_runs, n_ci)
                and elapsed >= protocol.min_time_s
                and n % check_every == 0
            ):
                s = np.sort(samples)
                lo, hi = median_ci(s, protocol.confidence)
                med = float(np.median(s))
                if med > 0 and (hi - lo) / 2 / med <= protocol.target_ci_rel:
                    break
                check_every = max(1, n // 20)  # sorting stays O(n log n) amortized-cheap
        if reference is not None:
            reference.run_burst()
        timing_s = time.perf_counter() - start
        cpu_s = time.process_time() - cpu_start
        faults = _minor_faults()
    finally:
        if was_enabled:
            gc.enable()
    s = np.sort(np.asarray(samples))
    med = float(np.median(s))
    lo, hi = median_ci(s, protocol.confidence)
    mean = float(s.mean())
    cv = float(s.std(ddof=1) / mean) if len(s) > 1 and mean > 0 else 0.0
    return TimingResult(
        latency_ms=med * 1e3,
        latency_mean_ms=mean * 1e3,
        latency_p90_ms=float(np.percentile(s, 90)) * 1e3,
        latency_cv=cv,
        latency_ci_rel=None if len(s) < n_ci else (hi - lo) / 2 / med if med > 0 else math.inf,
        n_runs=len(s),
        timing_s=timing_s,
        minor_faults_per_run=(
            None if faults is None or faults_before is None else (faults - faults_before) / len(s)
        ),
        cpu_per_wall=cpu_s / timing_s if timing_s > 0 else None,
        reference_ms=(None if reference is None else float(np.median(reference.samples_s)) * 1e3),
    )


def lost_its_core(row: Mapping[str, Any]) -> bool:
    """Whether an ok one-thread CPU row was timed while other processes took its core
    (``cpu_per_wall`` below ``MIN_CPU_PER_WALL``; rows without it are not judged). More
    threads spin and wait in ways that are the runtime's own, so they are not judged."""
    raw_share, raw_threads = row.get("cpu_per_wall"), row.get("threads")
    if raw_share is None or raw_threads is None:  # rows without the columns: nothing to judge
        return False
    try:
        share, threads = float(raw_share), float(raw_threads)
    except (TypeError, ValueError):
        return False
    return (
        row.get("status") == "ok"
        and row.get("device", "cpu") == "cpu"
        and threads == 1
        and math.isfinite(share)
        and share < MIN_CPU_PER_WALL
    )


def _minor_faults() -> int | None:
    """This process's minor page faults so far (``getrusage``; None where there is none).

    Eager PyTorch pays a fault per 4 KiB page of every buffer glibc maps anew on each call
    (those of at least 32 MiB, unless a free heap chunk fits): the count tells whether a
    measurement paid that cost, which depends on the process's history.
    """
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
