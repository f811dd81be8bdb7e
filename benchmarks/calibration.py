"""Calibrate on arrival, measured: validation latency MAPE before and after a calibration.

For the default torch and ONNX Runtime CPU models: measure 20 configs of the shipped dataset
on this machine (seeded, predicted under ``MAX_PREDICTED_MS``, never used for calibration,
none of this CPU kind's shipped node rows: its node model trained on those),
calibrate the model here with ``carb_nas.calibrate`` (half of ``--time-budget-s`` per model,
60 s in all by default; its configs in ``--passes`` interleaved rounds, the fastest kept,
by default the product's ``calibrate.PASSES``), then
measure the 20 configs a second time. Each validation measurement is itself the fastest of
``--validate-passes`` interleaved rounds (``carb_nas.measure.profile_passes``; 1: a single
measurement). The reference latency of a validation config is the mean of its two measurements;
the default and the calibrated model are scored against it. The MAPE of the second measurement
against the first is the machine's own floor: no model can be checked closer than the machine
repeats itself. Real measurements: run it on a quiet machine (a few minutes).

Last line: ``mape_before=<..> mape_after=<..> calibration_s=<..> mape_floor=<..>
mape_after_normalized=<..> mape_floor_normalized=<..>`` (latency MAPE in %, mean of the two
models; seconds of calibration in all; pass 2 vs pass 1; the last two with every row scaled to
the machine's typical speed by its speed probe, ``datasets.reference_normalized``, and the
calibration fitted on rows so scaled).
Goal: mape_after <= 5.

    PYTHONPATH=. python benchmarks/calibration.py [--time-budget-s 60] [--n-validate 20]
        [--platform cuda/torch/fp16 ...] [--rows-out DIR]

``--platform`` (repeatable) replaces the two CPU defaults, e.g. a shipped GPU platform on a GPU
(its profiler: NVML energy where the driver has it, no utilization window); there the energy
and memory MAPE before and after are printed too. ``--rows-out DIR`` keeps every measured row
(``<platform>_validate1.csv``, ``_validate2.csv``, ``_calibration.csv``) to analyse elsewhere.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import mean_absolute_percentage_error

from carb_nas.calibrate import (
    MAX_PREDICTED_MS,
    PASSES,
    calibrate_on_arrival,
    calibration_profiler,
)
from carb_nas.costmodel import calibrate, load_default_model, model_inputs
from carb_nas.datasets import SCHEMA, load_dataset, reference_normalized
from carb_nas.measure import Profiler
from carb_nas.measure.passes import profile_passes
from carb_nas.space import CONFIG_COLUMNS, frame_to_configs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))  # research helpers
from carb_nas_research.costmodel_extras import node_rows_path  # noqa: E402

PLATFORMS = ("cpu/torch/fp32", "cpu/onnxruntime/fp32")


def node_row_keys(platform: str) -> set[str]:
    """Keys of the configs in this CPU kind's shipped node rows of ``platform``: measured on
    this machine kind for its node model, so a validation config among them would flatter the
    node column."""
    path = node_rows_path(platform=platform)
    if path is None:
        return set()
    with gzip.open(path, "rt") as f:
        return {json.loads(line)["key"] for line in f if line.strip()}


def validation_configs(model, platform: str, n: int, seed: int) -> pd.DataFrame:
    rows = load_dataset(platform, ok_only=True)
    frame = rows[list(CONFIG_COLUMNS)].drop_duplicates().reset_index(drop=True)
    seen = node_row_keys(platform)
    unseen = [c.key not in seen for c in frame_to_configs(frame)]
    frame = frame[unseen].reset_index(drop=True)
    pred = model.predict(model_inputs(frame))["latency_ms"].to_numpy(float)
    cheap = frame[pred <= MAX_PREDICTED_MS]
    return cheap.sample(n=min(n, len(cheap)), random_state=seed).reset_index(drop=True)


def mape_pct(measured: np.ndarray, predicted: np.ndarray) -> float:
    return float(100 * mean_absolute_percentage_error(measured, predicted))


def run(
    platform: str,
    budget_s: float,
    n: int,
    seed: int,
    passes: int,
    validate_passes: int,
    rows_out: Path | None = None,
) -> tuple[float, float, float, float, float, float]:
    model = load_default_model(platform)
    prof = calibration_profiler(platform, model)  # the product's, as `carb-nas calibrate`
    try:
        val = validation_configs(model, platform, n, seed)
        first, first_ref, first_rows = measure(prof, val, validate_passes)
        t0 = time.perf_counter()
        cal = calibrate_on_arrival(
            platform, budget_s, prof, source_model=model, exclude=val, save=False, passes=passes
        )
        seconds = time.perf_counter() - t0
        second, second_ref, second_rows = measure(prof, val, validate_passes)
    finally:
        prof.close()
    if rows_out is not None:
        rows_out.mkdir(parents=True, exist_ok=True)
        stem = platform.replace("/", "_")
        first_rows.to_csv(rows_out / f"{stem}_validate1.csv", index=False)
        second_rows.to_csv(rows_out / f"{stem}_validate2.csv", index=False)
        cal.rows.to_csv(rows_out / f"{stem}_calibration.csv", index=False)
    ok = np.isfinite(first) & np.isfinite(second)
    y = (first[ok] + second[ok]) / 2
    X = model_inputs(val[ok])
    before = mape_pct(y, model.predict(X)["latency_ms"].to_numpy(float))
    after = mape_pct(y, cal.model.predict(X)["latency_ms"].to_numpy(float))
    floor = mape_pct(first[ok], second[ok])
    # the same at this machine's typical speed: every row (calibration and validation) scaled
    # by the speed probe's median over the calibration rows / its own probe time
    cal_rows, _, typical = reference_normalized(cal.rows)
    normalized = calibrate(model, cal_rows[cal_rows["status"] == "ok"], keep_uncalibrated=True)
    first_n = first[ok] * typical / first_ref[ok]
    second_n = second[ok] * typical / second_ref[ok]
    y_n = (first_n + second_n) / 2
    after_n = mape_pct(y_n, normalized.predict(X)["latency_ms"].to_numpy(float))
    floor_n = mape_pct(first_n, second_n)
    for target in ("energy_j", "peak_mem_mb"):  # where measured (a GPU's NVML energy)
        both = np.array(
            [
                pd.to_numeric(r[target], errors="coerce").to_numpy(float)[ok]
                for r in (first_rows, second_rows)
            ]
        )
        if target in model.targets_ and np.isfinite(both).all():
            y_t = both.mean(axis=0)
            b_t = mape_pct(y_t, model.predict(X)[target].to_numpy(float))
            a_t = mape_pct(y_t, cal.model.predict(X)[target].to_numpy(float))
            print(f"{platform}: {target} MAPE {b_t:.1f}% -> {a_t:.1f}%", flush=True)
    spec = cal.model.maps_["latency_ms"]
    rep = cal.repeatability()
    repeats = (
        f"calibration's repeatability {rep['median_pct']:.1f}% over {rep['n']} configs"
        if rep["n"]
        else "calibrated in one pass (no repeatability)"
    )
    print(
        f"{platform}: {int(ok.sum())} validation configs; calibrated on {cal.n_rows} configs in "
        f"{seconds:.1f} s ({spec['method']}); latency MAPE {before:.1f}% -> {after:.1f}%; "
        f"the two validation measurements differ by a MAPE of {floor:.1f}%; {repeats}; "
        f"probe-normalized (typical {typical:.3f} ms): after {after_n:.1f}%, floor {floor_n:.1f}%",
        flush=True,
    )
    return before, after, seconds, floor, after_n, floor_n


def measure(
    prof: Profiler, configs: pd.DataFrame, passes: int
) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """Latency (ms) of each config, the fastest of ``passes`` rounds, that row's speed probe
    time (ms), NaN where it failed, and the rows."""
    got = profile_passes(prof, frame_to_configs(configs), passes)
    rows = pd.DataFrame(got, columns=list(SCHEMA))
    ok = (rows["status"] == "ok").to_numpy()
    lat = pd.to_numeric(rows["latency_ms"], errors="coerce").to_numpy(float)
    ref = pd.to_numeric(rows["reference_ms"], errors="coerce").to_numpy(float)
    return np.where(ok, lat, np.nan), np.where(ok, ref, np.nan), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-budget-s", type=float, default=60.0)
    parser.add_argument("--n-validate", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--passes", type=int, default=PASSES, help="calibration rounds per config (product's)"
    )
    parser.add_argument("--validate-passes", type=int, default=3, help="rounds per validation")
    parser.add_argument("--platform", action="append", help="default: the two CPU platforms")
    parser.add_argument("--rows-out", type=Path, help="keep the measured rows here (CSV)")
    args = parser.parse_args()
    platforms = args.platform or PLATFORMS
    results = [
        run(
            p,
            args.time_budget_s / len(platforms),
            args.n_validate,
            args.seed,
            args.passes,
            args.validate_passes,
            args.rows_out,
        )
        for p in platforms
    ]
    before = float(np.mean([r[0] for r in results]))
    after = float(np.mean([r[1] for r in results]))
    seconds = float(sum(r[2] for r in results))
    floor = float(np.mean([r[3] for r in results]))
    after_n = float(np.mean([r[4] for r in results]))
    floor_n = float(np.mean([r[5] for r in results]))
    print(
        f"mape_before={before:.2f} mape_after={after:.2f} calibration_s={seconds:.1f} "
        f"mape_floor={floor:.2f} mape_after_normalized={after_n:.2f} "
        f"mape_floor_normalized={floor_n:.2f}"
    )


if __name__ == "__main__":
    main()
