"""The quantization study (arXiv:2303.05016) on this machine: every runtime x precision x
MLPerf scenario, plus the p90 check.

Two parts, both resumable (a finished run is never redone; kill and rerun at will):

1. ``--part p90``: LoadGen SingleStream p90 (LoadGen's own rules: >= 10 s, >= 100 queries)
   against the profiler's own p90 (``Profiler``, adaptive protocol) of the same config, for a
   few ResNet configs on cpu/torch/fp32 and cpu/onnxruntime/fp32. Rows in ``OUT/p90.json``.
2. ``--part table``: MobileNetV2 (r160), VGG-19 (width 0.25, r224: full width at 224 is
   ~20 GFLOPs, seconds per image on one core, and below 224 its 7x7 adaptive pool has no ONNX
   export), DenseNet-121 (r160) and ResNet-50 (r160), batch 1, one thread, on every CPU
   platform, under SingleStream, MultiStream and Offline with the ``quick`` rules (>= 1 s,
   >= 64 queries; MultiStream >= 16 queries, which LoadGen's early-stopping rule marks INVALID:
   its p99 needs >= 662 queries). Rows in ``OUT/results``, LoadGen's logs in ``OUT/logs``.

The machine is shared (2 cores, other jobs running): the figures are noisy; the p90 part
records the profiler's CV.

Last line: ``p90_ratio_median=<LoadGen p90 / profiler p90, median over configs> ...``.

    PYTHONPATH=. python benchmarks/seed004.py --part p90 \
        --out research/runs/characterization/seed004_runs
    PYTHONPATH=. python benchmarks/seed004.py --part table \
        --out research/runs/characterization/seed004_runs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from carb_nas._io import atomic_write_json
from carb_nas.measure import SUPPORTED, Profiler
from carb_nas.measure.loadgen import LoadGenSettings, Workload, loadgen_rows, run_loadgen_campaign
from carb_nas.space import Config

MODELS = [
    Config("mobilenet_v2", 17, 1.0, 160, 1),
    Config("bottleneck", 50, 1.0, 160, 1),
    Config("densenet", 121, 1.0, 160, 1),
    Config("vgg", 19, 0.25, 224, 1),
]
P90_CONFIGS = [
    Config("basic", 18, 0.5, 64, 1),
    Config("basic", 34, 0.5, 96, 1),
    Config("bottleneck", 50, 0.5, 64, 1),
]
THREADS = 1


def part_p90(out: Path) -> list[dict]:
    path = out / "p90.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    done = {(r["key"], r["runtime"]) for r in rows}
    for runtime in ("torch", "onnxruntime"):
        for c in P90_CONFIGS:
            w = Workload.from_config(c)
            if (w.key, runtime) in done:
                continue
            prof = Profiler("cpu", runtime, "fp32", THREADS, meter="none", idle_s=0)
            try:
                prow = prof.profile(c)
            finally:
                prof.close()
            summ = run_loadgen_campaign(
                [w],
                out / "p90_runs",
                runtime,
                "fp32",
                LoadGenSettings("single-stream"),
                threads=THREADS,
            )
            lrow = next(
                r
                for r in loadgen_rows(out / "p90_runs")
                if r["key"] == w.key and r["runtime"] == runtime
            )
            rows.append(
                {
                    "model": w.name,
                    "key": w.key,
                    "runtime": runtime,
                    "profiler_p90_ms": prow["latency_p90_ms"],
                    "profiler_median_ms": prow["latency_ms"],
                    "profiler_cv": prow["latency_cv"],
                    "profiler_runs": prow.get("n_runs"),
                    "loadgen_p90_ms": lrow.get("latency_p90_ms"),
                    "loadgen_p50_ms": lrow.get("latency_p50_ms"),
                    "loadgen_valid": lrow.get("valid"),
                    "loadgen_queries": lrow.get("query_count"),
                    "ratio_p90": lrow["latency_p90_ms"] / prow["latency_p90_ms"],
                    "errors": summ.errors,
                }
            )
            atomic_write_json(path, rows)
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def part_table(out: Path, runtimes: list[str], families: list[str] | None = None) -> None:
    quick = [
        LoadGenSettings("single-stream", "quick"),
        LoadGenSettings("multi-stream", "quick", min_query_count=16),
        LoadGenSettings("offline", "quick"),
    ]
    for c in MODELS:
        if families and c.family not in families:
            continue
        w = Workload.from_config(c)
        for (kind, runtime), precisions in SUPPORTED.items():
            if kind != "cpu" or runtime not in runtimes:
                continue
            for precision in precisions:
                t0 = time.time()
                try:
                    s = run_loadgen_campaign([w], out, runtime, precision, quick, threads=THREADS)
                except Exception as e:  # noqa: BLE001 - the platform is missing here: go on
                    print(
                        f"{w.name} {runtime}/{precision}: {type(e).__name__}: {e}",
                        file=sys.stderr,
                        flush=True,
                    )
                    continue
                print(
                    f"{w.name} {runtime}/{precision}: {s.done}/{s.total} ok, "
                    f"{len(s.invalid)} invalid, errors {s.errors} ({time.time() - t0:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["p90", "table"], required=True)
    ap.add_argument("--out", default="research/runs/characterization/seed004_runs")
    ap.add_argument("--runtimes", default="torch,onnxruntime,openvino,litert")
    ap.add_argument("--families", default=None, help="e.g. vgg,densenet (default: all four)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.part == "table":
        part_table(out, a.runtimes.split(","), a.families.split(",") if a.families else None)
        rows = loadgen_rows(out)
        ok = [r for r in rows if r.get("status") == "ok"]
        print(f"runs={len(rows)} ok={len(ok)} valid={sum(bool(r.get('valid')) for r in ok)}")
        return
    rows = part_p90(out)
    ratios = [r["ratio_p90"] for r in rows]
    cvs = [r["profiler_cv"] for r in rows]
    print(
        f"p90_ratio_median={np.median(ratios):.3f} p90_ratio_min={min(ratios):.3f} "
        f"p90_ratio_max={max(ratios):.3f} profiler_cv_median={np.median(cvs):.3f} "
        f"configs={len(rows)} pid={os.getpid()}"
    )


if __name__ == "__main__":
    main()
