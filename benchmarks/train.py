"""Time ``CostModel(preset="carb").fit`` on about 13,000 rows (CARB's dataset size).

Uses a shipped/real dataset when one of that size exists (``--data rows.csv``); otherwise a
SYNTHETIC table (tests/test_costmodel_synthetic.py: closed-form targets plus noise, labelled
synthetic) -- fine for timing, meaningless for accuracy, and said so in the output.

    nice -n 15 .venv/bin/python benchmarks/train.py [--rows 13000] [--preset carb] [--data F]

Last line: ``train_seconds=<number>`` (wall seconds of ``fit``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=13_000)
    ap.add_argument("--preset", default="carb")
    ap.add_argument("--data", default=None, help="a real rows table (dataset.SCHEMA)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from carb_nas.costmodel import CostModel, model_inputs
    from carb_nas.dataset import TARGETS

    if args.data:
        from carb_nas.space import read_table

        frame = read_table(args.data)
        frame = frame[frame["status"] == "ok"].reset_index(drop=True)
        source = f"REAL rows from {args.data}"
    else:
        from test_costmodel_synthetic import synthetic_dataset

        frame = synthetic_dataset(args.rows, seed=args.seed, space="resnet", energy=True)
        source = "SYNTHETIC rows (closed-form formula + noise; timing only, not accuracy)"
    targets = [t for t in TARGETS if t in frame and frame[t].notna().all()]
    t0 = time.perf_counter()
    X = model_inputs(frame)
    t_features = time.perf_counter() - t0
    model = CostModel(preset=args.preset, random_state=args.seed)
    t0 = time.perf_counter()
    model.fit(X, frame[targets])
    train_s = time.perf_counter() - t0
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
    print(f"train_seconds={train_s:.1f}")


if __name__ == "__main__":
    main()
