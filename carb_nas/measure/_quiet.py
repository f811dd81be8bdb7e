"""How busy the rest of the machine is, so a campaign can wait for quiet before timing.

On a small shared machine other processes preempt a single-threaded measurement and inflate
its median (not only its spread). ``others_cpu_cores`` measures, over a short interval, the
CPU cores used by every process but this one, from ``/proc/stat`` and ``os.times()``;
``wait_for_quiet`` sleeps until that drops below a threshold or a time limit passes.
"""

from __future__ import annotations

import os
import time

__all__ = ["autogroup_enabled", "autogroup_hint", "others_cpu_cores", "wait_for_quiet"]

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_s() -> float | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:7]) - idle) / _TICKS_PER_S  # steal (field 8) excluded


def _own_s() -> float:
    t = os.times()
    return t.user + t.system


def others_cpu_cores(interval_s: float = 0.25) -> float | None:
    """CPU cores (0..n) used by other processes over ``interval_s``; None off Linux."""
    b0, o0, t0 = _busy_s(), _own_s(), time.perf_counter()
    if b0 is None:
        return None
    time.sleep(interval_s)
    b1, o1, t1 = _busy_s(), _own_s(), time.perf_counter()
    if b1 is None:  # /proc/stat became unreadable meanwhile
        return None
    return max(0.0, ((b1 - b0) - (o1 - o0)) / (t1 - t0))


def autogroup_enabled() -> bool | None:
    """Whether Linux's autogroup scheduling is on (None where it cannot be read).

    With it on, the scheduler shares the CPU fairly between terminal sessions first and
    applies ``nice`` only inside a session: a ``nice -n 19`` job started from another
    session still takes half of a core a measurement needs (a one-thread convolution's wall
    time then exceeds its CPU time several times over; docs/measurement.md, "Sharing the
    CPU").
    """
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return None


def autogroup_hint() -> str:
    """The sentence a contention warning ends with when autogroup scheduling is on, else ""."""
    if not autogroup_enabled():
        return ""
    return (
        " Linux's autogroup scheduling is on (/proc/sys/kernel/sched_autogroup_enabled = 1),"
        " so a `nice`d job started from another terminal session still takes its share:"
        " stop it, or set sched_autogroup_enabled to 0 as root."
    )


def wait_for_quiet(
    max_wait_s: float, threshold_cores: float = 0.5, interval_s: float = 0.25
) -> float:
    """Sleep until others use < ``threshold_cores`` (or ``max_wait_s`` passed); seconds waited."""
    start = time.perf_counter()
    while time.perf_counter() - start < max_wait_s:
        load = others_cpu_cores(interval_s)
        if load is None or load < threshold_cores:
            break
        time.sleep(max(0.0, min(1.0, max_wait_s - (time.perf_counter() - start))))
    return time.perf_counter() - start
