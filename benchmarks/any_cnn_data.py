"""Measure the multi-family dataset of issue 14 on this machine (torch fp32, one thread, fresh
processes), with the per-operator table of the same runs; resumable.

    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py measure --out CAMPAIGN [--resnet 300]
        [--per-family 80] [--max-gflops 2]
    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py export CAMPAIGN

``measure`` draws the configs (seeded): ``--resnet`` ResNet configs among the shipped
``cpu_torch_fp32`` ones at batch <= 16 (same keys, so the two machines pair up), and
``--per-family`` configs of each built-in family of :mod:`carb_nas.models` (a space-filling
draw over width, depth, resolution 32-128 and batch 1-16, under ``--max-gflops`` per batch),
then measures each config not yet in CAMPAIGN in a fresh forked process
(``carb_nas.measure._ops.run_ops_campaign``). Kill it at any time; the same command continues.
``export`` writes ``carb_nas/data/datasets/cpu_torch_fp32_zoo.csv`` (one row per config, the
dataset schema) and ``..._ops.csv.gz`` (one row per operator).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "carb_nas" / "data" / "datasets"
SHIPPED = DATA / "cpu_torch_fp32.csv"
OUT_ROWS = DATA / "cpu_torch_fp32_zoo.csv"
OUT_OPS = DATA / "cpu_torch_fp32_zoo_ops.csv.gz"
RESNET = ("basic", "bottleneck")
BATCHES = (1, 2, 3, 4, 6, 8, 12, 16)
RESOLUTIONS = (32, 40, 48, 56, 64, 80, 96, 112, 128)


def _config(spec: dict):
    from carb_nas.space import Config

    return Config(
        spec["family"],
        int(spec["depth"]),
        float(spec["width"]),
        int(spec["resolution"]),
        int(spec["batch_size"]),
    )


def build(spec: dict):
    """(module, input shape) of a spec: a config of :mod:`carb_nas.models`."""
    from carb_nas.models import build_model

    c = _config(spec)
    return build_model(c), (c.batch_size, 3, c.resolution, c.resolution)


def resnet_specs(n: int, seed: int = 0) -> list[dict]:
    d = pd.read_csv(SHIPPED)
    d = d[(d.status == "ok") & (d.batch_size <= 16)]
    d = d.sample(n=min(n, len(d)), random_state=seed) if n < len(d) else d
    cols = ["key", "family", "depth", "width", "resolution", "batch_size"]
    return [dict(zip(cols, r)) for r in d[cols].itertuples(index=False)]


def family_specs(per_family: int, max_gflops: float, seed: int = 0) -> list[dict]:
    """Configs of the non-ResNet families, a Latin-hypercube-like draw per family."""
    try:
        from carb_nas.space import FAMILY_KNOBS  # the zoo's per-family knob ranges
    except ImportError:
        return []
    from carb_nas.features import trace_features

    rng = np.random.default_rng(seed)
    specs: list[dict] = []
    for family, knobs in FAMILY_KNOBS.items():
        if family in RESNET:
            continue
        depths = list(knobs.get("depth", [None]))
        widths = list(knobs.get("width", [1.0]))
        got, tries = 0, 0
        while got < per_family and tries < per_family * 20:
            tries += 1
            spec = {
                "family": family,
                "depth": depths[rng.integers(len(depths))],
                "width": float(widths[rng.integers(len(widths))]),
                "resolution": int(RESOLUTIONS[(got * 7 + rng.integers(3)) % len(RESOLUTIONS)]),
                "batch_size": int(BATCHES[(got * 5 + rng.integers(2)) % len(BATCHES)]),
            }
            try:
                c = _config(spec)
                module, shape = build(spec)
                flops = trace_features(module, shape)["flops"]
            except Exception:  # noqa: BLE001 - a knob combination the family refuses
                continue
            if flops > max_gflops * 1e9:
                continue
            spec["key"] = c.key
            if any(s["key"] == c.key for s in specs):
                continue
            specs.append(spec)
            got += 1
    return specs


def measure(args: argparse.Namespace) -> None:
    from carb_nas.measure._ops import run_ops_campaign

    specs = family_specs(args.per_family, args.max_gflops) + resnet_specs(args.resnet)
    print(f"{len(specs)} specs", file=sys.stderr, flush=True)
    n = run_ops_campaign(
        specs, build, args.out, progress=lambda s: print(s, file=sys.stderr, flush=True)
    )
    print(f"measured {n} now", file=sys.stderr)


def export(args: argparse.Namespace) -> None:
    from carb_nas.datasets import SCHEMA
    from carb_nas.measure._ops import read_ops_campaign

    rows, ops = read_ops_campaign(args.campaign)
    rows = rows[rows.status == "ok"].drop_duplicates("key", keep="last")
    rows = rows.assign(
        precision="fp32",
        runtime="torch",
        platform="cpu/torch/fp32",
        device="cpu",
        threads=1,
        meter="none",
        energy_reason="meter=none: no energy counter readable (no NVML, no powercap)",
    )
    rows["device_name"] = rows.fingerprint.map(lambda s: pd.io.json.loads(s)["device_name"])
    extra = ["op_sum_ms", "n_ops", "n_events", "n_unmatched", "minor_faults_per_run"]
    cols = [c for c in SCHEMA if c in rows.columns] + [c for c in extra if c in rows.columns]
    out = rows.reindex(columns=list(dict.fromkeys([*SCHEMA, *cols])))
    out.to_csv(OUT_ROWS, index=False)
    ops = ops[ops.key.isin(set(out.key))]
    ops.to_csv(OUT_OPS, index=False)
    print(f"wrote {OUT_ROWS} ({len(out)} rows), {OUT_OPS} ({len(ops)} op rows)", file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--resnet", type=int, default=300)
    m.add_argument("--per-family", type=int, default=80)
    m.add_argument("--max-gflops", type=float, default=2.0)
    e = sub.add_parser("export")
    e.add_argument("campaign")
    a = p.parse_args()
    measure(a) if a.cmd == "measure" else export(a)


if __name__ == "__main__":
    main()
