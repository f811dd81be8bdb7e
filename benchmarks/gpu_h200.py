"""What the H200 sitting measured (``carb_nas/data/zoo/cuda_torch_{fp16,fp32}_zoo-h200.csv``,
``benchmarks/gpu_campaign.py``), set against the GPU figures of the CARB paper
(docs/concepts.md).

    PYTHONPATH=$PWD python benchmarks/gpu_h200.py [--preset fast] [--folds 5]

Per precision: the CARB cascade's 5-fold cross-validated R2 and MAPE for peak memory, energy and
latency, without and with the physical offsets, beside the FLOPs-only linear baseline; the
leave-one-family-out share within +-10 % per family group (network cascade, physical offsets);
J/GFLOP and energy/latency by CARB's batch tiers; fp16 against fp32 of the same configs; and the
measurement floor (the rows' latency CV). Last line: ``h200_rows=<..> cv_mem_r2=<..>
cv_energy_r2=<..> cv_latency_r2=<..> lofo_latency_within10=<median over groups>
lofo_energy_within10=<..> lofo_mem_within10=<..> jpergflop_small_over_large=<..>`` (fp16, with
offsets).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from sklearn.metrics import mean_absolute_percentage_error, r2_score
from sklearn.model_selection import KFold

TARGETS = ("peak_mem_mb", "energy_j", "latency_ms")
TIERS = ((1, 4), (5, 16), (17, 64), (65, 256))  # CARB's batch tiers


def load(precision: str) -> pd.DataFrame:
    from carb_nas.datasets import load_dataset

    return load_dataset(f"cuda/torch/{precision}/zoo-h200", ok_only=True)


def _fit_predict(Xtr, Ytr, Xte, preset: str, offsets: bool) -> pd.DataFrame:
    from carb_nas.costmodel import CostModel, physical_offsets

    m = CostModel(
        preset=preset,
        targets=list(TARGETS),
        target_offsets=physical_offsets(Xtr, TARGETS) if offsets else None,
        calibration_fraction=0.0,
        handle_unknown="ignore",  # a held-out family's labels are unseen by design
        architecture_only=True,  # the clocks and temperature seen while measuring: unknown
        # for a config nobody has run (the default model drops them too)
        random_state=0,
        n_jobs=1,
    ).fit(Xtr, Ytr)
    return m.predict(Xte)


def cross_validated(X, Y, preset: str, folds: int, offsets: bool) -> pd.DataFrame:
    pred = pd.DataFrame(index=Y.index, columns=list(TARGETS), dtype=float)
    for tr, te in KFold(folds, shuffle=True, random_state=0).split(X):
        p = _fit_predict(X.iloc[tr], Y.iloc[tr], X.iloc[te], preset, offsets)
        pred.iloc[te] = p[list(TARGETS)].to_numpy()
    return pred


def tiers(frame: pd.DataFrame, X: pd.DataFrame) -> pd.DataFrame:
    d = frame.assign(gflops=X["flops"].to_numpy() / 1e9)
    out = []
    for lo, hi in TIERS:
        t = d[(d.batch_size >= lo) & (d.batch_size <= hi)]
        out.append(
            {
                "batch": f"{lo}-{hi}",
                "n": len(t),
                "J_per_GFLOP": float((t.energy_j / t.gflops).median()),
                "energy_j": float(t.energy_j.median()),
                "latency_ms": float(t.latency_ms.median()),
                "avg_power_w": float((t.energy_j / t.latency_ms * 1e3).median()),
            }
        )
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    from carb_nas.costmodel import prepare_table
    from carb_nas.costmodel.evaluation import network_lofo_report

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))
    from carb_nas_research.costmodel_extras import flops_linear_baseline_cv

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="fast")
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args(argv)
    pd.set_option("display.width", 160)
    last: dict[str, float] = {}
    frames = {}
    for prec in ("fp16", "fp32"):
        frame = load(prec)
        t = prepare_table(frame, f"cuda_torch_{prec}_zoo-h200", TARGETS)
        X, Y = t["X"], t["Y"]
        frames[prec] = t["frame"]
        cv = t["frame"].latency_cv
        print(
            f"\n== cuda/torch/{prec} on {frame.device_name.iloc[0]}: {len(frame)} rows, "
            f"latency CV median {cv.median():.3f}, > 0.10 for {(cv > 0.10).mean():.0%} "
            f"(the floor: launch-bound runs at batch <= 8 have CV median "
            f"{cv[frame.batch_size <= 8].median():.3f})"
        )
        base = {t: m["r2"] for t, m in flops_linear_baseline_cv(X, Y, args.folds).items()}
        for offsets in (False, True):
            p = cross_validated(X, Y, args.preset, args.folds, offsets)
            label = "physical offsets" if offsets else "CARB cascade   "
            parts = []
            for tg in TARGETS:
                r2 = r2_score(Y[tg], p[tg])
                mape = mean_absolute_percentage_error(Y[tg], p[tg])
                parts.append(f"{tg} R2 {r2:.3f} MAPE {mape:.1%}")
                if prec == "fp16" and offsets:
                    last[f"cv_{tg.split('_')[0]}_r2"] = r2
            print(f"  {args.folds}-fold CV, {label}: " + "; ".join(parts))
        print("  FLOPs-only linear R2: " + ", ".join(f"{k} {v:.3f}" for k, v in base.items()))
        lofo = network_lofo_report(frame, args.preset)  # `carb-nas model evaluate --leave-one-...`
        lo = pd.DataFrame(lofo["per_family"])
        print("  leave one family group out (physical offsets):")
        print(lo.round(3).to_string(index=False))
        if prec == "fp16":
            for tg in TARGETS:
                last[f"lofo_{tg.split('_')[0]}_within10"] = lofo["summary"][tg]["within10_median"]
        tt = tiers(t["frame"], X)
        print("  by CARB's batch tiers (medians):")
        print(tt.round(3).to_string(index=False))
        if prec == "fp16":
            last["jpergflop_small_over_large"] = float(
                tt.J_per_GFLOP.iloc[0] / tt.J_per_GFLOP.iloc[-1]
            )
            last["h200_rows"] = len(frame)
    a, b = frames["fp16"].set_index("key"), frames["fp32"].set_index("key")
    k16 = a.reset_index()[["family", "depth", "width", "resolution", "batch_size"]].astype(str)
    k32 = b.reset_index()[["family", "depth", "width", "resolution", "batch_size"]].astype(str)
    a.index, b.index = k16.agg("|".join, axis=1), k32.agg("|".join, axis=1)
    both = a.index.intersection(b.index)
    print(
        f"\n== fp32 / fp16 of the same {len(both)} configs (medians; CARB: memory 1.7x, "
        "energy 1.1x)"
    )
    for tg in TARGETS:
        r = b.loc[both, tg] / a.loc[both, tg]
        print(f"  {tg}: {r.median():.2f}x (IQR {r.quantile(0.25):.2f}-{r.quantile(0.75):.2f})")
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in last.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
