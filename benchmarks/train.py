"""Time ``CostModel(preset="carb").fit`` on about 13,000 rows (CARB's dataset size).

Data: the REAL rows of every shipped dataset (``carb_nas.datasets``, ok rows of all three CPU
platforms, 6,656 rows; ``runtime`` and ``precision`` become categorical features), or a rows
table given with ``--data``. When ``--rows`` asks for more rows than the data has, rows are
drawn again with replacement (seeded) to reach it -- fine for timing, meaningless for
accuracy, and said so in the output. Imports only the package.

    nice -n 15 .venv/bin/python benchmarks/train.py [--rows 13000] [--preset carb] [--data F]

Last line: ``train_seconds=<number>`` (wall seconds of ``fit``).
"""

from __future__ import annotations

import argparse
import os
import time


def _rows(args: argparse.Namespace):
    import numpy as np
    import pandas as pd

    from carb_nas.datasets import list_datasets, load_dataset

    if args.data:
        frame = load_dataset(args.data, ok_only=True)
        source = f"REAL rows from {args.data}"
    else:
        # the ResNet-space rows of the three CPU platforms' default datasets (not the zoo's)
        names = [
            d["name"] for d in list_datasets() if d["name"].endswith("/resnet@amd-epyc-avx512")
        ]
        frame = pd.concat([load_dataset(p, ok_only=True) for p in names], ignore_index=True)
        source = f"REAL rows of the shipped datasets {names}"
    n = len(frame)
    if args.rows and args.rows != n:
        rng = np.random.default_rng(args.seed)
        idx = rng.permutation(n)[: args.rows]
        if args.rows > n:
            idx = np.concatenate([idx, rng.choice(n, size=args.rows - n)])
            source += f" ({n} distinct, drawn again to {args.rows}: timing only, not accuracy)"
        frame = frame.iloc[np.sort(idx)].reset_index(drop=True)
    return frame, source


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=13_000, help="0: every row of the data once")
    ap.add_argument("--preset", default="carb")
    ap.add_argument("--data", default=None, help="a real rows table (dataset.SCHEMA)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads",
        "--jobs",
        dest="jobs",
        type=int,
        default=-1,
        help="CostModel n_jobs (-1: all cores)",
    )
    ap.add_argument("--save", default=None, help="also save the model here and report its size")
    args = ap.parse_args()

    from carb_nas.costmodel import CostModel, model_inputs
    from carb_nas.datasets import TARGETS

    frame, source = _rows(args)
    targets = [t for t in TARGETS if t in frame and frame[t].notna().all()]
    t0 = time.perf_counter()
    X = model_inputs(frame)
    t_features = time.perf_counter() - t0
    model = CostModel(preset=args.preset, random_state=args.seed, n_jobs=args.jobs)
    load0 = os.getloadavg()[0]
    c0, t0 = time.process_time(), time.perf_counter()
    model.fit(X, frame[targets])
    train_s = time.perf_counter() - t0
    cpu_s = time.process_time() - c0
    info = model.fit_info_
    print(f"data: {len(frame)} {source}")
    print(
        f"targets: {targets}; features: {info['n_features']}; split train/val/cal = "
        f"{info['n_train']}/{info['n_validation']}/{info['n_calibration']}; "
        f"cpu cores: {os.cpu_count()}; model_inputs {t_features:.2f} s"
    )
    for t, secs in info["seconds"].items():
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in secs.items())
        print(
            f"  {t}: {parts}; validation R2 {info['validation'][t]['r2']:.4f}; "
            f"weights {model.blend_weights_[t]}"
        )
    t0 = time.perf_counter()
    model.predict(X)
    print(f"predict {len(X)} rows: {time.perf_counter() - t0:.2f} s")
    print(
        f"fit cpu seconds (all threads) {cpu_s:.1f}; n_jobs={args.jobs}; 1-min load average "
        f"{load0:.1f} before, {os.getloadavg()[0]:.1f} after (other processes share the cores)"
    )
    if args.save:
        t0 = time.perf_counter()
        d = model.save(args.save)
        sizes = {p.name: p.stat().st_size for p in sorted(d.iterdir())}
        print(f"saved in {time.perf_counter() - t0:.1f} s: {sum(sizes.values()) / 1e6:.1f} MB")
        for name, size in sizes.items():
            print(f"  {name}: {size / 1e6:.2f} MB")
        t0 = time.perf_counter()
        type(model).load(d)
        print(f"loaded in {time.perf_counter() - t0:.1f} s")
    print(f"train_seconds={train_s:.1f}")


if __name__ == "__main__":
    main()
