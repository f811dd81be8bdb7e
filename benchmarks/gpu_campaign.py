"""One sitting on an NVIDIA GPU: the NVML/CUDA check, then as many configs of the built-in
families and of CARB's ResNet space as fit, torch fp16 and fp32, with NVML energy; resumable.

    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/gpu_campaign.py draw --out SPECS.json.gz
    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/gpu_campaign.py measure --out DIR
        --specs SPECS.json.gz [--minutes 7] [--precisions fp16,fp32] [--device cuda:0]
        [--skip-in research/runs/passes/gpu-h200] [--first N] [--reference-probe]
    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/gpu_campaign.py export DIR [DIR ...]
        --name zoo-h200

``draw`` (here, on the CPU: the meta-device traces cost no GPU time) writes the seeded specs:
each family group of :mod:`carb_nas.models` and ResNet configs of ``search_spaces/resnet.toml``,
interleaved so a campaign stopped at any point holds every group, resolution 32-224 and batch
1-256 under ``--max-gflops`` per batch. ``measure`` reads the GPU's state with ``nvidia-smi``
(read-only) before and after, runs ``gpu_check.py``'s counter-period and idle-power readings
through :class:`carb_nas.measure.Profiler`, then measures each spec at every precision (the
order alternates per spec) until ``--minutes`` have passed, appending each row to
``DIR/rows-<precision>.jsonl`` as it comes, so a timeout keeps every finished row and the same
command continues; ``--skip-in`` an earlier sitting's directory continues its draw in a new
one, and ``--first N`` into another directory measures the first N specs again (a repeat pass:
how far a row moves between sittings). It never changes clocks, power limits, persistence or
compute mode.
Its last line: ``measured=<rows now> per_minute=<..> ok=<..> oom=<..> error=<..>
counter_period_ms=<..>``. ``export`` writes ``carb_nas/data/zoo/cuda_torch_<precision>_<name>.csv``
per precision (real rows only: a fake meter's rows are refused).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "carb_nas" / "data" / "zoo"
GPU_RESOLUTIONS = (32, 64, 96, 128, 160, 192, 224)
GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SMI_FIELDS = (
    "name,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,"
    "power.draw,power.limit,enforced.power.limit,persistence_mode,compute_mode"
)


def draw(per_family: int, resnet: int, max_gflops: float, seed: int = 0) -> list[dict]:
    """The seeded specs: ``per_family`` per family group and ``resnet`` ResNet configs."""
    from any_cnn_data import family_specs, interleave

    from carb_nas.features import trace_features
    from carb_nas.models import build_model
    from carb_nas.space import bundled_space_path, load_space

    fams = family_specs(per_family, max_gflops, seed, GPU_RESOLUTIONS, GPU_BATCHES)
    space = load_space(bundled_space_path("resnet"))
    resnets: list[dict] = []
    seen: set[str] = set()
    for c in space.sample(resnet * 4, seed=seed, stratify=True):
        c = c.replace(precision="fp32")
        if c.key in seen or len(resnets) >= resnet:
            continue
        one = c.replace(batch_size=1)
        res = (1, 3, c.resolution, c.resolution)
        if trace_features(build_model(one, "meta"), res)["flops"] / 1e9 * c.batch_size > max_gflops:
            continue
        seen.add(c.key)
        resnets.append(
            {
                "key": c.key,
                "family": c.family,
                "depth": c.depth,
                "width": c.width,
                "resolution": c.resolution,
                "batch_size": c.batch_size,
            }
        )
    return interleave(fams, resnets)


def read_specs(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"gpu_campaign: --specs {path} is not a file; make one with `draw`.")
    raw = p.read_bytes()
    return json.loads(gzip.decompress(raw) if p.suffix == ".gz" else raw)


def smi(out: Path, what: str) -> None:
    """The GPU's clocks, temperature, power limit and modes, read-only, into ``out``."""
    try:
        r = subprocess.run(
            ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        text = r.stdout or r.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        text = f"nvidia-smi unavailable: {e}\n"
    (out / f"nvidia_smi_{what}.csv").write_text(text)
    print(f"nvidia-smi {what}: {text.strip()}", flush=True)


def read_rows(part: str | Path) -> list[dict]:
    """The rows of a sitting's directory: its ``rows-*.jsonl`` (as written) and
    ``rows-*.jsonl.gz`` (as kept in research/runs/passes); a line cut by a kill is skipped."""
    files = sorted(Path(part).glob("rows-*.jsonl")) + sorted(Path(part).glob("rows-*.jsonl.gz"))
    rows = []
    for f in files:
        raw = f.read_bytes()
        for line in (gzip.decompress(raw) if f.suffix == ".gz" else raw).decode().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def _append(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()


def measure(
    specs: list[dict],
    out: str | Path,
    minutes: float,
    precisions: tuple[str, ...] = ("fp16", "fp32"),
    device: str = "cuda:0",
    meter_factory: Callable[[], Any] | None = None,
    energy_min_window_s: float = 0.5,
    idle_s: float = 2.0,
    skip_in: tuple[str | Path, ...] = (),
    reference_probe: bool | None = None,
) -> dict[str, Any]:
    """Measure ``specs`` at each precision until ``minutes`` pass; return the tallies.
    ``skip_in``: earlier sittings' directories whose ok rows are not measured again (a later
    sitting continues the draw, e.g. from research/runs/passes/gpu-h200). ``reference_probe``: the
    Profiler's (True on a GPU: the launch probe in each row's ``reference_ms``)."""
    from carb_nas.errors import CarbNasError
    from carb_nas.measure import Profiler
    from carb_nas.measure.meters import NoMeter, NVMLMeter
    from carb_nas.space import Config

    t0 = time.perf_counter()
    deadline = t0 + minutes * 60
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if meter_factory is None:
        index = int(device.split(":")[1]) if ":" in device else 0
        meter_factory = lambda: NVMLMeter(index)  # noqa: E731
    profs = {}
    for p in precisions:
        try:
            meter = meter_factory()
        except CarbNasError as e:  # no energy, but latency and memory are still worth having
            print(f"no energy meter: {e}", flush=True)
            meter = NoMeter()
        profs[p] = Profiler(
            device,
            "torch",
            p,
            meter=meter,
            energy_min_window_s=energy_min_window_s,
            idle_s=idle_s,
            utilization_window_s=0.0,  # CARB's training-mode window: 1 s a row, not a feature
            reference_probe=reference_probe,
        )
    first = profs[precisions[0]]
    period = first.counter_update_period_s
    print(
        f"device={first.device_name} meter={first.meter.name} idle_power_w={first.idle_power_w} "
        f"counter_update_period_ms={period * 1e3 if period else float('nan'):.1f}",
        flush=True,
    )
    print(f"fingerprint={json.dumps(first.fingerprint, sort_keys=True)}", flush=True)
    files = {p: out / f"rows-{p}.jsonl" for p in precisions}
    # a key names its precision: one set serves every precision
    done = {r["key"] for r in read_rows(out)}  # this sitting's own rows, failed ones too
    done |= {r["key"] for part in skip_in for r in read_rows(part) if r.get("status") == "ok"}
    tally = {"ok": 0, "oom": 0, "error": 0}
    n = 0
    for i, sp in enumerate(specs):
        if time.perf_counter() > deadline:
            break
        c = Config(
            sp["family"],
            int(sp["depth"]),
            float(sp["width"]),
            int(sp["resolution"]),
            int(sp["batch_size"]),
        )
        order = precisions if i % 2 == 0 else precisions[::-1]
        for p in order:
            prof = profs[p]
            if prof.platform_config(c).key in done:
                continue
            row = prof.profile(c)
            row["spec_index"] = i
            _append(files[p], row)
            done.add(row["key"])
            tally[row["status"]] = tally.get(row["status"], 0) + 1
            n += 1
            if row["status"] != "ok":
                print(f"  {row['key']}: {row['status']} {row.get('error')}", flush=True)
            prof.close_model()  # the specs are random: no prepared model is reused
        if n >= 8 and tally["ok"] == 0:  # a broken path: stop before the time is spent
            print(f"stopping: the first {n} rows all failed", flush=True)
            break
        if n and n % 20 == 0:
            el = time.perf_counter() - t0
            print(f"[{el:6.0f} s] {n} rows, spec {i + 1}/{len(specs)}", flush=True)
    for prof in profs.values():
        prof.close()
    minutes_used = (time.perf_counter() - t0) / 60
    return {
        "measured": n,
        "per_minute": n / minutes_used if minutes_used else 0.0,
        **tally,
        "counter_period_ms": period * 1e3 if period else None,
    }


def export(parts: list[str], name: str, out_dir: Path = ZOO) -> list[Path]:
    """One CSV per precision of the real rows in ``parts`` (the latest row per key)."""
    rows = [r for part in parts for r in read_rows(part)]
    if not rows:
        raise SystemExit(f"gpu_campaign export: no rows-*.jsonl[.gz] rows under {parts}.")
    d = pd.DataFrame(rows)
    fake = d.meter.astype(str).str.startswith("fake")
    if fake.any():
        raise SystemExit(
            f"gpu_campaign export: {int(fake.sum())} rows come from a fake meter "
            f"({sorted(set(d.meter[fake]))}); test doubles never enter a shipped dataset."
        )
    d = d.drop_duplicates("key", keep="last")
    written = []
    for prec, g in d.groupby("precision"):
        path = out_dir / f"cuda_torch_{prec}_{name}.csv"
        g = g.drop(columns=[c for c in ("spec_index",) if c in g])
        g.sort_values("key").to_csv(path, index=False)
        written.append(path)
        print(f"{path}: {len(g)} rows ({int((g.status == 'ok').sum())} ok)")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("draw")
    d.add_argument("--out", required=True)
    d.add_argument("--per-family", type=int, default=60)
    d.add_argument("--resnet", type=int, default=120)
    d.add_argument("--max-gflops", type=float, default=2000.0)
    d.add_argument("--seed", type=int, default=0)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--specs", required=True)
    m.add_argument("--minutes", type=float, default=7.0)
    m.add_argument("--precisions", default="fp16,fp32")
    m.add_argument("--device", default="cuda:0")
    m.add_argument("--energy-min-window-s", type=float, default=0.5)
    m.add_argument("--skip-in", action="append", default=[], help="an earlier sitting's directory")
    m.add_argument("--first", type=int, default=None, help="only the first N specs (repeat pass)")
    m.add_argument(
        "--reference-probe",
        action="store_true",
        help="time the launch probe in each row (reference_ms; opt-in on a GPU)",
    )
    e = sub.add_parser("export")
    e.add_argument("parts", nargs="+")
    e.add_argument("--name", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "draw":
        specs = draw(args.per_family, args.resnet, args.max_gflops, args.seed)
        Path(args.out).write_bytes(gzip.compress(json.dumps(specs).encode(), mtime=0))
        print(f"{len(specs)} specs -> {args.out}")
        return 0
    if args.cmd == "export":
        export(args.parts, args.name)
        return 0
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_campaign: no CUDA device visible to torch; nothing measured.", file=sys.stderr)
        return 2
    specs = read_specs(args.specs)[: args.first]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    smi(out, "before")
    tally = measure(
        specs,
        out,
        args.minutes,
        tuple(args.precisions.split(",")),
        args.device,
        energy_min_window_s=args.energy_min_window_s,
        skip_in=tuple(args.skip_in),
        reference_probe=True if args.reference_probe else None,
    )
    smi(out, "after")
    print(
        " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in tally.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
