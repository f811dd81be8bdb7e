"""Profile a handful of configs on an NVIDIA GPU with NVML energy; ready to run unchanged.

    python benchmarks/gpu_check.py                 # cuda:0, torch fp16, 6 configs
    python benchmarks/gpu_check.py --device cuda:1 --precision fp32 --runtime torch

Prints, per config: latency (ms/batch), energy (J/batch, NVML total-energy counter or
integrated power), peak memory (MB), SM/memory utilization and clocks; plus the observed
update period of the energy counter and the idle power. Never changes clocks, power limits
or any GPU setting. On a machine without an NVIDIA GPU it exits with code 2 and says why.
"""

from __future__ import annotations

import argparse
import json
import sys

CONFIGS = [
    ("basic", 18, 1.0, 128, 1),
    ("basic", 18, 1.0, 128, 64),
    ("basic", 34, 0.5, 96, 32),
    ("bottleneck", 50, 1.0, 128, 16),
    ("bottleneck", 101, 0.5, 64, 128),
    ("basic", 10, 2.0, 32, 256),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--runtime", default="torch")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--json", action="store_true", help="also print each row as JSON")
    args = ap.parse_args(argv)

    import torch

    from carb_nas.errors import CarbNasError
    from carb_nas.measure import Profiler
    from carb_nas.measure.meters import NVMLMeter, observe_update_period_s
    from carb_nas.space import Config

    if not torch.cuda.is_available():
        print(
            "gpu_check: no NVIDIA GPU visible to torch (torch.cuda.is_available() is False, "
            f"torch {torch.__version__}); run this on a machine with an NVIDIA GPU and a CUDA "
            "build of torch. Nothing was measured.",
            file=sys.stderr,
        )
        return 2
    try:
        meter = NVMLMeter(int(args.device.split(":")[1]) if ":" in args.device else 0)
    except CarbNasError as e:
        print(f"gpu_check: {e}", file=sys.stderr)
        return 2
    period = (
        observe_update_period_s(meter, duration_s=2.0) if meter.name == "nvml-counter" else None
    )
    if period is not None:
        meter.update_period_s = period
    print(
        f"device={torch.cuda.get_device_name(args.device)} meter={meter.name} "
        f"counter_update_period_ms={period * 1e3 if period else float('nan'):.1f}"
    )
    try:
        prof = Profiler(args.device, args.runtime, args.precision, meter=meter, idle_s=2.0)
    except CarbNasError as e:
        print(f"gpu_check: {e}", file=sys.stderr)
        return 2
    print(f"idle_power_w={prof.idle_power_w} fingerprint={json.dumps(prof.fingerprint)}")
    print(
        f"{'config':<32} {'status':<6} {'lat_ms':>8} {'cv':>6} {'energy_J':>9} "
        f"{'window_s':>8} {'peak_MB':>9} {'sm%':>5} {'mem%':>5} {'sm_MHz':>7} {'T_C':>5}"
    )
    bad = 0
    for fam, depth, width, res, batch in CONFIGS:
        c = Config(fam, depth, width, res, batch, precision=args.precision, runtime=args.runtime)
        row = prof.profile(c)
        label = f"{fam}-{depth} w{width:g} r{res} b{batch}"

        def f(v, fmt):
            return format(v, fmt) if v is not None else "-"

        print(
            f"{label:<32} {row['status']:<6} {f(row['latency_ms'], '8.3f')} "
            f"{f(row['latency_cv'], '6.3f')} {f(row['energy_j'], '9.4f')} "
            f"{f(row['energy_window_s'], '8.2f')} {f(row['peak_mem_mb'], '9.1f')} "
            f"{f(row['sm_util'], '5.0f')} {f(row['mem_util'], '5.0f')} "
            f"{f(row['sm_clock_mhz'], '7.0f')} {f(row['temperature_c'], '5.0f')}"
        )
        if row["status"] == "error":
            print(f"  error: {row['error']}")
        if row["energy_j"] is None and row["status"] == "ok":
            print(f"  no energy: {row['energy_reason']}")
        bad += row["status"] == "error"
        if args.json:
            print(json.dumps(row))
    prof.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
