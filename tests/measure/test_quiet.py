"""The quiet gate: CPU used by other processes, and waiting for it to drop."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from carb_nas.measure._quiet import others_cpu_cores, wait_for_quiet

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat")


def test_a_busy_child_process_counts_as_other_load():
    base = others_cpu_cores(0.2)
    assert base is not None and base >= 0
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"]
    )
    try:
        time.sleep(0.3)
        busy = others_cpu_cores(0.5)
    finally:
        child.kill()
        child.wait()
    assert busy >= 0.6  # the spinning child is another process: about one core


def test_wait_for_quiet_gives_up_after_max_wait():
    t0 = time.perf_counter()
    waited = wait_for_quiet(0.3, threshold_cores=-1.0, interval_s=0.05)  # never quiet
    assert 0.3 <= waited <= 0.3 + 1.0
    assert time.perf_counter() - t0 < 2
    assert wait_for_quiet(5.0, threshold_cores=1e9, interval_s=0.05) < 1  # always quiet


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/sys/kernel")
def test_autogroup_enabled_reads_the_kernels_switch():
    from pathlib import Path

    from carb_nas.measure._quiet import autogroup_enabled

    switch = Path("/proc/sys/kernel/sched_autogroup_enabled")
    if not switch.exists():
        assert autogroup_enabled() is None
    else:
        assert autogroup_enabled() is (switch.read_text().strip() == "1")
