"""Measure ONNX Runtime's per-node kernel times on this machine and ship them (stop 50).

``measure``: a seeded draw of ``--n`` ResNet configs of the shipped ``cpu/onnxruntime/fp32``
dataset, leaving out the 300 configs of the calibration pools (``docs/passes/calibration_pool_*``,
which score the calibration replay: a node model that saw them would flatter it), is measured
by :func:`carb_nas.measure.run_ort_nodes_campaign` into ``DIR`` (resumable: run it again after
a kill). ``ship``: the campaign's ``nodes.jsonl`` gzipped into
``carb_nas/data/nodes/cpu_onnxruntime_fp32_<kind>.jsonl.gz``, ``kind`` this CPU's module kind
(``costmodel.module_cpu_kind``), read by ``costmodel.load_node_rows``. Last line:
``configs=<..> nodes=<..> median_us=<..>``.

    PYTHONPATH=$PWD python benchmarks/ort_nodes_data.py measure DIR [--n 600] [--seed 0]
    PYTHONPATH=$PWD python benchmarks/ort_nodes_data.py ship DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import pandas as pd

from carb_nas.costmodel import module_cpu_kind
from carb_nas.datasets import load_dataset
from carb_nas.measure import read_ort_nodes, run_ort_nodes_campaign
from carb_nas.space import CONFIG_COLUMNS, frame_to_configs

ROOT = Path(__file__).resolve().parents[1]
POOLS = sorted((ROOT / "docs" / "passes").glob("calibration_pool_*"))
KNOBS = ["family", "depth", "width", "resolution", "batch_size"]


def draw(n: int, seed: int) -> pd.DataFrame:
    frame = load_dataset("cpu/onnxruntime/fp32", ok_only=True)[list(CONFIG_COLUMNS)]
    frame = frame.drop_duplicates().reset_index(drop=True)
    pooled = pd.concat(
        [pd.read_parquet(p / "cpu_onnxruntime_fp32_pass1.parquet")[KNOBS] for p in POOLS]
    ).astype(str)
    seen = set(pooled.itertuples(index=False, name=None))
    keep = [t not in seen for t in frame[KNOBS].astype(str).itertuples(index=False, name=None)]
    return frame[keep].sample(n=n, random_state=seed).reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("measure", "ship"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.what == "measure":
        configs = frame_to_configs(draw(args.n, args.seed))
        run_ort_nodes_campaign(configs, args.dir, progress=lambda s: print(s, file=sys.stderr))
    configs, nodes = read_ort_nodes(args.dir)
    if args.what == "ship":
        cpu = json.loads(configs["fingerprint"].iloc[0])["cpu"]
        kind = module_cpu_kind(cpu.get("isa", []), cpu.get("vendor"))
        out = ROOT / "carb_nas" / "data" / "nodes" / f"cpu_onnxruntime_fp32_{kind}.jsonl.gz"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write((args.dir / "nodes.jsonl").read_bytes())  # mtime 0: reproducible bytes
        print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)
    print(f"configs={len(configs)} nodes={len(nodes)} median_us={nodes['us'].median():.1f}")


if __name__ == "__main__":
    main()
