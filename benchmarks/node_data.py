"""Measure per-node (per-op) kernel times on this machine and ship them.

``measure``: a seeded draw of ``--n`` ResNet configs of the shipped dataset of ``--runtime``
(``onnxruntime``: ``cpu/onnxruntime/fp32``; ``torch``: ``cpu/torch/fp32``), leaving out the 300
configs of the calibration pools (``research/runs/passes/calibration_pool_*``, which score the
calibration replay: a node model that saw them would flatter it), is measured into ``DIR``
(resumable: run it again after a kill; a larger ``--n`` extends a smaller draw of the same
seed, its first configs being the same, so a campaign grows in place): ONNX Runtime by
:func:`carb_nas.measure.run_ort_nodes_campaign` (its own profiler, per node), torch by
:func:`carb_nas.measure.run_ops_campaign` (the PyTorch profiler's per-op events matched to the
traced op table, each config in a fresh fork). ``ship``: the campaign gzipped into
``carb_nas/data/nodes/cpu_<runtime>_fp32_<kind>.jsonl.gz`` (torch: its rows' fingerprint and
the matched ops' shape columns and times, one JSON line per config, the ORT format), ``kind``
this CPU's module kind (``costmodel.module_cpu_kind``), read by
``costmodel.load_default_node_model``. Last line: ``configs=<..> nodes=<..> median_us=<..>``.
The default 1,500 configs (the node models' held-out error still fell from 600;
about 11 min for ONNX Runtime and 20 min for torch on a quiet 2-core VM) are what is shipped.

    PYTHONPATH=$PWD python benchmarks/node_data.py measure DIR [--runtime onnxruntime|torch]
        [--n 1500] [--seed 0]
    PYTHONPATH=$PWD python benchmarks/node_data.py ship DIR [--runtime onnxruntime|torch]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from carb_nas.costmodel.registry import module_cpu_kind
from carb_nas.datasets import load_dataset
from carb_nas.errors import ConfigError
from carb_nas.measure.campaign import (
    read_ops_campaign,
    read_ort_nodes,
    run_ops_campaign,
    run_ort_nodes_campaign,
)
from carb_nas.space import CONFIG_COLUMNS, RESNET_FAMILIES, Config, frame_to_configs

ROOT = Path(__file__).resolve().parents[1]
POOLS = sorted((ROOT / "research" / "runs" / "passes").glob("calibration_pool_*"))
KNOBS = ["family", "depth", "width", "resolution", "batch_size"]


def draw(runtime: str, n: int, seed: int) -> pd.DataFrame:
    platform = f"cpu/{runtime}/fp32"
    frame = load_dataset(platform, ok_only=True)[list(CONFIG_COLUMNS)]
    frame = frame[frame["family"].isin(RESNET_FAMILIES)].drop_duplicates().reset_index(drop=True)
    stem = platform.replace("/", "_")
    pooled = pd.concat([pd.read_parquet(p / f"{stem}_pass1.parquet")[KNOBS] for p in POOLS])
    seen = set(pooled.astype(str).itertuples(index=False, name=None))
    keep = [t not in seen for t in frame[KNOBS].astype(str).itertuples(index=False, name=None)]
    frame = frame[keep]
    if not 1 <= n <= len(frame):
        raise ConfigError(
            f"invalid --n for {platform}: expected 1 to {len(frame)} (its shipped ResNet configs "
            f"outside the calibration pools), got {n}. Pass --n {min(1500, len(frame))}."
        )
    return frame.sample(n=n, random_state=seed).reset_index(drop=True)


def _build(spec: dict) -> tuple:
    import torch

    from carb_nas.models import build_model

    config = Config(**{c: spec[c] for c in CONFIG_COLUMNS})
    torch.manual_seed(0)
    shape = (config.batch_size, 3, config.resolution, config.resolution)
    return build_model(config).eval(), shape


def torch_lines(directory: Path) -> list[dict]:
    """One JSON-ready line per measured config of a torch ops campaign: its knobs, the
    fingerprint, the timed latency and its matched ops' shapes and times (µs)."""
    rows, ops = read_ops_campaign(directory)
    rows = rows[rows["status"] == "ok"]
    ops = ops[np.isfinite(ops["measured_ms"].to_numpy(float))]
    by_key = {k: g for k, g in ops.groupby("key", sort=False)}
    lines = []
    for row in rows.itertuples(index=False):
        got = by_key.get(row.key)
        if got is None:
            continue
        table = got[["kind", "op", *TORCH_SHAPE]].assign(us=got["measured_ms"] * 1000)
        lines.append(
            {
                "key": row.key,
                **{c: getattr(row, c) for c in CONFIG_COLUMNS},
                "fingerprint": row.fingerprint,
                "status": "ok",
                "latency_ms": float(row.latency_ms),
                "ops": [[*r[:-1], round(float(r[-1]), 3)] for r in table.to_numpy().tolist()],
            }
        )
    return lines


TORCH_SHAPE = ["batch", "c_in", "h_in", "c_out", "h_out", "kernel", "stride", "groups"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("measure", "ship"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--runtime", choices=("onnxruntime", "torch"), default="onnxruntime")
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        run(args)
    except ConfigError as e:  # a bad --n or directory: one line, not a traceback
        sys.exit(f"node_data.py: {e}")


def run(args: argparse.Namespace) -> None:
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if args.what == "measure":
        frame = draw(args.runtime, args.n, args.seed)
        if args.runtime == "onnxruntime":
            run_ort_nodes_campaign(frame_to_configs(frame), args.dir, progress=say)
        else:
            specs = [{"key": c.key, **{k: getattr(c, k) for k in CONFIG_COLUMNS}}
                     for c in frame_to_configs(frame)]  # fmt: skip
            run_ops_campaign(specs, _build, args.dir, progress=say)
    if args.runtime == "onnxruntime":
        configs, nodes = read_ort_nodes(args.dir)
        fingerprints, us = configs.get("fingerprint", pd.Series()).tolist(), nodes["us"]
        text = (args.dir / "nodes.jsonl").read_text()
    else:
        lines = torch_lines(args.dir)
        fingerprints = [line["fingerprint"] for line in lines]
        us = pd.Series([o[-1] for line in lines for o in line["ops"]], dtype=float)
        text = "".join(json.dumps(line) + "\n" for line in lines)
    if not fingerprints:
        raise ConfigError(
            f"nothing measured in {args.dir}: expected at least one config measured ok, got "
            "none (every line failed, or none was written). Run `measure` first."
        )
    fingerprint, n_configs, n_nodes = fingerprints[0], len(fingerprints), len(us)
    if args.what == "ship":
        cpu = json.loads(fingerprint)["cpu"]
        kind = module_cpu_kind(cpu.get("isa", []), cpu.get("vendor"))
        out = ROOT / "carb_nas" / "data" / "nodes" / f"cpu_{args.runtime}_fp32_{kind}.jsonl.gz"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write(text.encode())  # mtime 0: reproducible bytes
        say(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    print(f"configs={n_configs} nodes={n_nodes} median_us={us.median():.1f}")


if __name__ == "__main__":
    main()
