"""What buffers of at least 32 MiB cost eager PyTorch per call (the ``mmap_mb`` feature).

glibc serves an allocation from fresh ``mmap`` pages when it is at least its mmap threshold,
which adapts upwards to at most 32 MiB; such a buffer is unmapped when freed, so its pages
fault (and are zeroed) again on every call. This script times single ops whose buffers sit
just below and just above that line, once with glibc's defaults and once, as the control,
with ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` raised so nothing is mapped
anew. One intra-op thread, the median of ``--runs`` calls after warm-up, each setting in its
own process.

    .venv/bin/python benchmarks/page_faults.py [--runs 15]

Per case it prints the milliseconds of both settings and the buffer MB that ``mmap_mb``
counts; the last line is ``mmap_cost_ms_per_mb=<median over the cases above the line>``
(the extra time divided by the counted MB). This machine, 2026-11-30: about 0.4.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# (name, module spec, input shape): the 960-channel conv's weights are 31.6 MiB, under the line
CASES = [
    ("conv3x3 960->960, 4x4, batch 2", ("conv", 960, 960, 3), (2, 960, 4, 4)),
    ("conv3x3 1024->1024, 4x4, batch 2", ("conv", 1024, 1024, 3), (2, 1024, 4, 4)),
    ("batch norm, 64x112x112, batch 16", ("bn", 64), (16, 64, 112, 112)),
    ("conv1x1 64->256, 56x56, batch 16", ("conv", 64, 256, 1), (16, 64, 56, 56)),
    ("conv1x1 256->64, 56x56, batch 16", ("conv", 256, 64, 1), (16, 256, 56, 56)),
]
_NO_MMAP = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**33)}


def _module(spec: tuple):  # noqa: ANN202
    from torch import nn

    if spec[0] == "bn":
        return nn.BatchNorm2d(spec[1]).eval()
    _, c_in, c_out, k = spec
    return nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=False).eval()


def _child(runs: int) -> None:
    import time

    import torch

    torch.set_num_threads(1)
    out = {}
    for name, spec, shape in CASES:
        module, x = _module(spec), torch.randn(*shape)
        with torch.inference_mode():
            for _ in range(3):
                module(x)
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                module(x)
                times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) * 1e3
    print(json.dumps(out))


def _counted_mb() -> dict[str, float]:
    from carb_nas.features import trace_features

    return {name: trace_features(_module(spec), shape)["mmap_mb"] for name, spec, shape in CASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.runs)
        return

    def run(extra: dict[str, str]) -> dict[str, float]:
        env = {**os.environ, **extra}
        cmd = [sys.executable, __file__, "--child", "--runs", str(args.runs)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    default, control = run({}), run(_NO_MMAP)
    counted = _counted_mb()
    per_mb = []
    for name, _, _ in CASES:
        extra = default[name] - control[name]
        line = (
            f"{name}: {default[name]:.2f} ms, no-mmap control {control[name]:.2f} ms, "
            f"mmap_mb {counted[name]:.1f}"
        )
        if counted[name] > 0:
            per_mb.append(extra / counted[name])
            line += f", {per_mb[-1]:.3f} ms/MB"
        print(line)
    print(f"mmap_cost_ms_per_mb={statistics.median(per_mb):.3f}")


if __name__ == "__main__":
    main()
