"""Few-shot transfer, replayed: torch -> ONNX Runtime fp32 latency R2 from N target rows.

Pool-based, on the shipped datasets (no new measurement): ``carb_nas.reports.transfer`` (what
``carb-nas report transfer A B --few-shot 10,25 --repeats R`` runs) trains the source model (fast
preset) on every ok row of A, learns the transfer prior (``--prior auto``: the shipped pairs of
B's runtime at another precision on B's machine or at B's precision on another machine, never
B itself; the latter also give B's level), then per seed chooses N rows of B with
``costmodel.informative_rows`` (greedy D-optimal design, a seeded random start), fits the
few-shot map (``calibrate``, method ``auto``) on them and scores latency R2 (milliseconds,
sklearn ``r2_score``) on every other row of B.

    nice python benchmarks/transfer.py [--a cpu/torch/fp32] [--b cpu/onnxruntime/fp32]
        [--repeats 10] [--prior auto|none]

Last line: ``fewshot_r2_n10=<mean> ± <sd> fewshot_r2_n25=<mean> ± <sd>`` (latency R2 over the
seeds). Last measured (2026-12-05, repeats 10, prior auto): ``fewshot_r2_n10=0.955 ± 0.007
fewshot_r2_n25=0.964 ± 0.002``; history in research/notes/benchmarks.md.
Goal (issue 18): R2 >= 0.95 at N = 10: met.
"""

from __future__ import annotations

import argparse
import time

from carb_nas.reports import transfer

SIZES = (10, 25)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="cpu/torch/fp32", help="source dataset (platform A)")
    ap.add_argument("--b", default="cpu/onnxruntime/fp32", help="target dataset (platform B)")
    ap.add_argument("--repeats", type=int, default=10, help="seeds per size (0, 1, ...)")
    ap.add_argument("--prior", default="auto", help="transfer prior pairs: auto, none or A:B,...")
    args = ap.parse_args()
    t0 = time.perf_counter()
    result = transfer(
        args.a, args.b, few_shot=SIZES, repeats=args.repeats, prior=args.prior, progress=print
    )
    fs = result["few_shot"]
    cells = []
    for n in SIZES:
        run = fs["runs"][str(n)]
        lat = run["calibrated"]["latency_ms"]
        line = f"N={n}: calibrated latency R2 {lat['r2_mean']:.3f} ± {lat['r2_std']:.3f}"
        if "calibrated_without_prior" in run:
            plain = run["calibrated_without_prior"]["latency_ms"]
            line += f" (without prior {plain['r2_mean']:.3f} ± {plain['r2_std']:.3f})"
        src = run["source_only"]["latency_ms"]["r2_mean"]
        mem = run["calibrated"].get("peak_mem_mb")
        if mem is not None:
            line += f"; memory R2 {mem['r2_mean']:.4f} ± {mem['r2_std']:.4f}"
        print(f"{line}; latency source only {src:.3f}; maps chosen {run['methods_chosen']}")
        cells.append(f"fewshot_r2_n{n}={lat['r2_mean']:.3f} ± {lat['r2_std']:.3f}")
    print(f"prior pairs {fs['prior_pairs']}; {args.repeats} seeds; no measurement; "
          f"elapsed {time.perf_counter() - t0:.0f} s")  # fmt: skip
    print(" ".join(cells))


if __name__ == "__main__":
    main()
