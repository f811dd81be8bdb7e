"""The fresh-process server: ``python -m carb_nas.measure._fresh_server`` (see ``_fresh``).

It imports torch and the profiler once, warms them up, then forks one child per JSON-line
request on stdin; each child measures one config and the server writes its row to stdout.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from carb_nas.measure._profiler import Profiler
from carb_nas.measure._protocol import Protocol
from carb_nas.space import Config


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    args = {**request["args"], "protocol": Protocol(**request["args"]["protocol"])}
    prof = Profiler(**args)
    try:
        return {"row": prof.profile(Config(**request["config"]))}
    finally:
        prof.close()


_LARGEST_DYNAMIC_MMAP_BYTES = 32 * 2**20 - 2**16  # just under glibc's 32 MiB maximum


def _warm_up() -> None:
    """Bring the server to a long-running process's steady state, minus its freed buffers.

    - glibc starts with 128 KiB mmap and trim thresholds and raises them (up to 32 MiB and
      64 MiB) when it frees a mapped buffer. A process that has not yet seen a large buffer
      maps, unmaps or trims its mid-size buffers on every call, so fresh children measured
      without this ran slower than a long-running process (docs/measurement.md, "Page faults
      and process history"). Allocating and freeing one buffer just under 32 MiB raises both, as
      any big model does in a shared profiling process; buffers of 32 MiB and more are still
      mapped anew on every call (``mmap_mb``), which no threshold changes.
    - A fresh process spends most of a second in its first memory profile (PyTorch's profiler) and
      JITs oneDNN on its first convolution: a tiny model pays that once here.
    The tiny model frees only small buffers, so the heap holds no free chunk that a large
    request could reuse.
    """
    import torch

    buf = torch.ones(_LARGEST_DYNAMIC_MMAP_BYTES // 4)  # mapped (above 128 KiB), touched
    del buf  # freed: glibc raises its mmap threshold to this size, the trim threshold to 2x

    quick = Protocol(warmup_runs=1, warmup_min_s=0.0, min_runs=1, max_runs=1, target_ci_rel=None)
    prof = Profiler("cpu", "torch", "fp32", threads=1, protocol=quick, meter="none", idle_s=0)
    try:
        prof.profile(Config("basic", 8, 0.1, 32, 2))
    finally:
        prof.close()


def _serve() -> None:
    _warm_up()
    replies = sys.stdout
    for line in sys.stdin:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: measure, write the reply, exit without cleanup handlers
            os.close(read_end)
            os.dup2(2, 1)  # anything printed goes to stderr, never into the replies
            try:
                reply = _measure(json.loads(line))
            except BaseException as e:  # noqa: BLE001 - every failure is a reply
                reply = {"error": f"{type(e).__name__}: {e}"}
            with os.fdopen(write_end, "w") as f:
                f.write(json.dumps(reply))
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        if not data:
            data = json.dumps(
                {"error": f"measuring process ended without a result (wait status {status})"}
            )
        replies.write(data + "\n")
        replies.flush()


if __name__ == "__main__":
    _serve()
