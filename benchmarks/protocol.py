"""Adaptive vs CARB's fixed protocol on configs of search_spaces/cpu.toml.

For each config both protocols measure the same model (alternating which goes first, so slow
drift of the machine does not favour one), and the wall time of each ``Profiler.profile`` call
is summed per protocol (warmups, timed runs, cooldown, memory pass: everything a campaign pays).

    nice -n 5 .venv/bin/python benchmarks/protocol.py            # 20 configs, torch, 1 thread
    .venv/bin/python benchmarks/protocol.py --n 30 --runtime onnxruntime

Last line: ``speedup=<carb wall / adaptive wall> median_gap=<largest relative difference of
the medians>`` (target: speedup >= 3 with median_gap <= 0.02; on a busy machine the gap
measures the machine's noise as much as the protocols').
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="search_spaces/cpu.toml")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runtime", default="torch")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--wait-quiet-s",
        type=float,
        default=0.0,
        help="per config, wait up to this long for other processes to go quiet",
    )
    ap.add_argument("--target-ci", type=float, default=None, help="adaptive target_ci_rel")
    ap.add_argument("--min-runs", type=int, default=None, help="adaptive min_runs")
    ap.add_argument("--warmup-min-s", type=float, default=None, help="adaptive warmup_min_s")
    args = ap.parse_args(argv)
    if args.n < 20:
        print("note: the issue asks for at least 20 configs", file=sys.stderr)

    from carb_nas.measure import Profiler, Protocol
    from carb_nas.space import load_space

    configs = load_space(args.space).sample(args.n, seed=args.seed)
    tweaks = {
        "target_ci_rel": args.target_ci,
        "min_runs": args.min_runs,
        "warmup_min_s": args.warmup_min_s,
    }
    adaptive = Protocol(**{k: v for k, v in tweaks.items() if v is not None})
    profs = {
        name: Profiler(
            "cpu",
            args.runtime,
            args.precision,
            threads=args.threads,
            protocol=proto,
            meter="none",
            wait_quiet_s=args.wait_quiet_s,
        )
        for name, proto in (("adaptive", adaptive), ("carb", Protocol.carb()))
    }
    from carb_nas.space import Config

    warm = Config("basic", 8, 0.1, 32, 1)  # one-time costs (imports, first profiler use)
    for p in profs.values():
        p.profile(warm)
    wall = {"adaptive": 0.0, "carb": 0.0}
    gaps = []
    print(
        f"{'config':<36} {'adaptive_ms':>11} {'n':>4} {'carb_ms':>9} {'gap':>7} "
        f"{'wall_a_s':>8} {'wall_c_s':>8}"
    )
    for i, c in enumerate(configs):
        order = ("adaptive", "carb") if i % 2 == 0 else ("carb", "adaptive")
        rows, secs = {}, {}
        for name in order:
            t0 = time.perf_counter()
            rows[name] = profs[name].profile(c)
            secs[name] = time.perf_counter() - t0
            wall[name] += secs[name]
        a, b = rows["adaptive"], rows["carb"]
        if a["status"] != "ok" or b["status"] != "ok":
            print(f"{c.key}: skipped ({a['error'] or b['error']})")
            continue
        gap = abs(a["latency_ms"] - b["latency_ms"]) / b["latency_ms"]
        gaps.append(gap)
        label = f"{c.family}-{c.depth} w{c.width:g} r{c.resolution} b{c.batch_size}"
        print(
            f"{label:<36} {a['latency_ms']:>11.3f} {a['n_runs']:>4} {b['latency_ms']:>9.3f} "
            f"{gap:>7.4f} {secs['adaptive']:>8.2f} {secs['carb']:>8.2f}",
            flush=True,
        )
    for p in profs.values():
        p.close()
    if not gaps:
        print("no config measured ok", file=sys.stderr)
        return 1
    print(
        f"configs={len(gaps)} wall_adaptive_s={wall['adaptive']:.1f} "
        f"wall_carb_s={wall['carb']:.1f} median_gap_p50={np.median(gaps):.4f}"
    )
    print(f"speedup={wall['carb'] / wall['adaptive']:.2f} median_gap={max(gaps):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
