"""Arriving on a GPU that is not ours, measured: the H200 of GPU sitting 2 against the shipped
rows of sitting 1 (``research/runs/passes/gpu-h200-2``; the sitting's script is ``sitting.sh``
there).

Sitting 2 (2026-12-04, an H200 of the same kind: CPU model, driver and torch as sitting 1)
measured, on the GPU, ``benchmarks/calibration.py --platform cuda/torch/fp16`` (16 shipped configs
before and after a 45 s calibration: its rows in ``cal/``, its output in ``cal.log``) and 105 new
configs of the seeded draw at fp16 and fp32 (``gpu_campaign.py measure --skip-in
research/runs/passes/gpu-h200``). This script replays what those rows say, here on the CPU:

- the same configs measured again: sitting 2's rows against the shipped rows of the same config
  (median measured ratio and its quartiles, per target);
- the default model of the shipped rows on the new configs (never in its training set):
  latency, energy and memory MAPE and the median measured/predicted ratio;
- ``carb_nas.costmodel.calibrate`` on the calibration rows the product chose on the GPU (fp16),
  and on N random new rows (20 draws, scored on the rest);
- the host-CPU speed probe (``reference_ms``) those rows carried: its range and how its two
  readings of one config agree.

Last line: ``same_config_latency_ratio=<..> same_config_energy_ratio=<..> mape_before=<..>
mape_after=<..> energy_mape_before=<..> energy_mape_after=<..> probe_repeat_r=<..>`` (fp16;
MAPE in %, on the new configs; "after": the product's own calibration rows).

    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/gpu_arrival.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import mean_absolute_percentage_error

ROOT = Path(__file__).resolve().parents[1]
SITTING = ROOT / "research" / "runs" / "passes" / "gpu-h200-2"
TARGETS = ("latency_ms", "energy_j", "peak_mem_mb")
KNOBS = ["family", "depth", "width", "resolution", "batch_size"]


def mape_pct(y, p) -> float:
    return float(100 * mean_absolute_percentage_error(np.asarray(y, float), np.asarray(p, float)))


def same_configs(cal_rows: pd.DataFrame, shipped: pd.DataFrame) -> pd.DataFrame:
    """Per target: the median and quartiles of sitting 2 / sitting 1 over the shared configs."""
    m = cal_rows.merge(shipped, on=KNOBS, suffixes=("", "_shipped"))
    out = {}
    for t in TARGETS:
        r = pd.to_numeric(m[t], errors="coerce") / pd.to_numeric(m[f"{t}_shipped"])
        out[t] = {
            "rows": len(r),
            "median": r.median(),
            "q25": r.quantile(0.25),
            "q75": r.quantile(0.75),
        }
    return pd.DataFrame(out).T


def default_model(precision: str):
    from carb_nas.costmodel import load_default_model

    model = load_default_model(f"cuda/torch/{precision}")
    model.handle_unknown = "ignore"  # sitting 2 drew a family group sitting 1 did not have
    return model


def scores(model, rows: pd.DataFrame) -> dict[str, float]:
    from carb_nas.costmodel import model_inputs

    pred = model.predict(model_inputs(rows))
    return {t: mape_pct(rows[t], pred[t]) for t in TARGETS}


def random_calibration(model, rows: pd.DataFrame, n: int, draws: int = 20) -> dict[str, float]:
    """Median MAPE on the rest after calibrating on ``n`` random rows (``draws`` seeded draws)."""
    from carb_nas.costmodel import calibrate

    rng = np.random.default_rng(0)
    got = []
    for _ in range(draws):
        idx = rng.choice(len(rows), n, replace=False)
        rest = rows.drop(rows.index[idx])
        got.append(scores(calibrate(model, rows.iloc[idx], keep_uncalibrated=True), rest))
    return {t: float(np.median([g[t] for g in got])) for t in TARGETS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sitting", type=Path, default=SITTING)
    args = ap.parse_args(argv)
    from gpu_campaign import read_rows

    from carb_nas.costmodel import calibrate, model_inputs
    from carb_nas.datasets import load_dataset

    new = pd.DataFrame(read_rows(args.sitting))
    new = new[new["status"] == "ok"]
    cal_dir = args.sitting / "cal"
    validated = [pd.read_csv(cal_dir / f"cuda_torch_fp16_validate{i}.csv") for i in (1, 2)]
    calibration = pd.read_csv(cal_dir / "cuda_torch_fp16_calibration.csv")
    calibration = calibration[calibration["status"] == "ok"]
    shipped = load_dataset("cuda/torch/fp16/zoo-h200", ok_only=True)

    same = same_configs(pd.concat([*validated, calibration]), shipped)
    print("the same fp16 configs measured again (sitting 2 / shipped sitting 1):")
    print(same.round(3).to_string())

    last = {}
    for precision in ("fp16", "fp32"):
        rows = new[new["precision"] == precision].reset_index(drop=True)
        model = default_model(precision)
        before = scores(model, rows)
        ratio = {
            t: float(np.median(rows[t] / model.predict(model_inputs(rows))[t])) for t in TARGETS
        }
        print(
            f"{precision}: shipped model on {len(rows)} new configs: "
            + ", ".join(
                f"{t} MAPE {before[t]:.1f}% (measured/predicted {ratio[t]:.2f})" for t in TARGETS
            )
        )
        if precision == "fp16":
            after = scores(calibrate(model, calibration, keep_uncalibrated=True), rows)
            print(
                f"  after the product's calibration (its {len(calibration)} configs, on the GPU): "
                + ", ".join(f"{t} {after[t]:.1f}%" for t in TARGETS)
            )
            last = {"before": before, "after": after, "ratio": ratio}
        for n in (10, 25):
            got = random_calibration(model, rows, n)
            print(
                f"  after {n} random new configs (median of 20 draws, on the rest): "
                + ", ".join(f"{t} {got[t]:.1f}%" for t in TARGETS)
            )

    ref = [pd.to_numeric(v["reference_ms"], errors="coerce").to_numpy(float) for v in validated]
    r = float(np.corrcoef(np.log(ref[0]), np.log(ref[1]))[0, 1])
    allref = pd.Series(np.concatenate(ref))
    print(
        f"host-CPU speed probe on CUDA rows: {allref.min():.2f}-{allref.max():.2f} ms "
        f"(median {allref.median():.2f}); its two readings of one config: r = {r:.2f}"
    )
    print(
        f"same_config_latency_ratio={same.loc['latency_ms', 'median']:.3f} "
        f"same_config_energy_ratio={same.loc['energy_j', 'median']:.3f} "
        f"mape_before={last['before']['latency_ms']:.1f} "
        f"mape_after={last['after']['latency_ms']:.1f} "
        f"energy_mape_before={last['before']['energy_j']:.1f} "
        f"energy_mape_after={last['after']['energy_j']:.1f} probe_repeat_r={r:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
