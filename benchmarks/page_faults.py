"""What buffers of at least 32 MiB cost eager PyTorch per call (the ``mmap_mb`` feature).

glibc serves an allocation from fresh ``mmap`` pages when it is at least its mmap threshold,
which adapts upwards to at most 32 MiB; such a buffer is unmapped when freed, so its pages
fault (and are zeroed) again on every call. This script times single ops whose buffers sit
just below and just above that line, once with glibc's defaults and once, as the control,
with ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` raised so nothing is mapped
anew. One intra-op thread, the median of ``--runs`` calls after warm-up, each case and setting
in a fresh process: the cost depends on the heap's history. glibc serves a large request from
a free heap chunk that fits before it maps new pages, so after other large buffers came and
went in the same process the cost can vanish (seen here: networks timed after the op cases in
one process ran 88 ms with or without the control, 151 ms when fresh). Fresh processes and the
profiler's campaigns pay it (the shipped rows agree with fresh runs to a few %).

    .venv/bin/python benchmarks/page_faults.py [--runs 15]

Then the same for whole networks, configs of the shipped torch dataset (eager, one thread).
Per case it prints the milliseconds of both settings and the buffer MB that ``mmap_mb``
counts; the last line is ``mmap_cost_ms_per_mb=<median over the cases with mmap_mb > 0>``
(the extra time divided by the counted MB). This machine, 2026-11-30: about 0.4.
"""

from __future__ import annotations

import argparse
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
# shipped-dataset configs: the three with the most mmap_mb, one with some, one with none
NETWORKS = [
    ("basic", 50, 2.0, 32, 2),
    ("bottleneck", 65, 2.0, 32, 2),
    ("basic", 34, 2.0, 32, 3),
    ("basic", 18, 2.0, 32, 4),
    ("basic", 18, 1.5, 32, 4),
]
_NO_MMAP = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**33)}


def _module(spec: tuple):  # noqa: ANN202
    from torch import nn

    if spec[0] == "bn":
        return nn.BatchNorm2d(spec[1]).eval()
    _, c_in, c_out, k = spec
    return nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=False).eval()


def _child(case: int, runs: int) -> None:
    import time

    import torch

    torch.set_num_threads(1)
    if case < len(CASES):
        _, spec, shape = CASES[case]
        module, x = _module(spec), torch.randn(*shape)
    else:
        from carb_nas.models import build_model
        from carb_nas.space import Config

        config = Config(*NETWORKS[case - len(CASES)])
        module = build_model(config).eval()
        x = torch.randn(config.batch_size, 3, config.resolution, config.resolution)
    with torch.inference_mode():
        for _ in range(3):
            module(x)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            module(x)
            times.append(time.perf_counter() - start)
    print(statistics.median(times) * 1e3)


def _counted_mb() -> dict[str, float]:
    from carb_nas.features import compute_features, trace_features
    from carb_nas.space import Config, configs_to_frame

    out = {name: trace_features(_module(spec), shape)["mmap_mb"] for name, spec, shape in CASES}
    configs = [Config(*spec) for spec in NETWORKS]
    nets = compute_features(configs_to_frame(configs))["mmap_mb"].tolist()
    return out | {_net_name(spec): mb for spec, mb in zip(NETWORKS, nets)}


def _net_name(spec: tuple) -> str:
    family, depth, width, resolution, batch = spec
    return f"{family}-{depth} width {width} r{resolution}, batch {batch}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.runs)
        return

    def run(case: int, extra: dict[str, str]) -> float:
        env = {**os.environ, **extra}
        cmd = [sys.executable, __file__, "--child", str(case), "--runs", str(args.runs)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return float(done.stdout.strip().splitlines()[-1])

    names = [name for name, _, _ in CASES] + [_net_name(spec) for spec in NETWORKS]
    default, control = {}, {}
    for case, name in enumerate(names):  # a fresh process per case and setting (see above)
        default[name], control[name] = run(case, {}), run(case, _NO_MMAP)
    counted = _counted_mb()
    per_mb = []
    for name in names:
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
