"""Throughput of ``carb_nas.features.compute_features`` on a space of over a million configs.

The space is CARB's ResNet space (17 depths x 12 widths x 4 resolutions = 816 architectures)
with every batch size from 1 to 256, four precisions and both runtimes: 1,671,168 configs.
Each run starts cold (the per-architecture cache is cleared, so the 816 forward-pass
simulations are part of the time) and featurizes the whole grid once; the median over the
runs is reported. Warm runs (cache kept) are printed for reference.

    nice -n 15 .venv/bin/python benchmarks/features.py [--runs 5]

The last line is ``configs_per_s=<number>`` (cold median). Target: >= 1,000,000 (the line
before says whether it is met; ``tests/test_features.py`` checks the same path for
correctness, not speed).
"""

from __future__ import annotations

import argparse
import statistics
import time

from carb_nas import features
from carb_nas.space import ARCH_COLUMNS, Space, load_space

TARGET = 1_000_000  # configs per second, cold


def build_space() -> Space:
    resnet = load_space("resnet")
    doc = {
        "name": "features_benchmark",
        "knobs": {
            "family": ["basic", "bottleneck"],
            "width": resnet.values("width"),
            "resolution": resnet.values("resolution"),
            "batch_size": {"start": 1, "stop": 256, "step": 1},
            "precision": ["fp32", "fp16", "bf16", "int8"],
            "runtime": ["torch", "onnxruntime"],
        },
        "family": {f: {"depth": resnet.knobs[f]["depth"]} for f in ("basic", "bottleneck")},
    }
    return Space.from_dict(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    grid = build_space().grid()
    n = len(grid)
    archs = len(grid[list(ARCH_COLUMNS)].drop_duplicates())
    print(f"configs={n} architectures={archs}")
    assert n >= 1_000_000

    cold, warm = [], []
    for _ in range(args.runs):
        features.clear_cache()
        start = time.perf_counter()
        out = features.compute_features(grid)
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        features.compute_features(grid)
        warm.append(time.perf_counter() - start)
    assert len(out) == n and out["flops"].gt(0).all()
    print(f"cold runs s: {', '.join(f'{t:.3f}' for t in cold)}")
    print(f"warm runs s: {', '.join(f'{t:.3f}' for t in warm)}")
    rate = n / statistics.median(cold)
    print(f"warm_configs_per_s={n / statistics.median(warm):.0f}")
    print(f"target configs_per_s >= {TARGET:,}: {'met' if rate >= TARGET else 'NOT met'}")
    print(f"configs_per_s={rate:.0f}")


if __name__ == "__main__":
    main()
