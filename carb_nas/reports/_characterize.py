"""``characterize``: how cost scales with each knob on one platform (or several)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._json import jsonable
from carb_nas.datasets import TARGETS
from carb_nas.errors import InputFileError
from carb_nas.reports._load import (
    BATCH_TIERS,
    JOIN_COLUMNS,
    KNOBS,
    SM_TIERS,
    batch_tier,
    load_measurements,
    same_dataset,
    tier_order,
    with_gflops,
)
from carb_nas.reports._stats import json_key, linear_fit, mean_stats, r2, ratio_stats

__all__ = [
    "characterize",
    "characterize_frames",
    "MIN_CHARACTERIZE_ROWS",
    "aggregate",
    "variant_parts",
]

MIN_CHARACTERIZE_ROWS = 10
"""Ok rows a dataset needs before its knob ranges and fits mean anything."""
RUNTIME_LABELS = {"torch": "PyTorch", "onnxruntime": "ONNX Runtime"}


def _knob_range(frame: pd.DataFrame, knob: str, target: str) -> dict[str, Any] | None:
    sub = frame[[knob, target]].dropna()
    if sub[knob].nunique() < 2:
        return None
    means = sub.groupby(knob, sort=True)[target].mean()
    counts = sub.groupby(knob, sort=True)[target].size()
    lo, hi = means.idxmin(), means.idxmax()
    rng = float(means.max() / means.min()) if means.min() > 0 else math.nan
    return {
        "range": rng,
        "lowest": json_key(lo),
        "highest": json_key(hi),
        "group_means": {json_key(k): float(v) for k, v in means.items()},
        "group_rows": {json_key(k): int(v) for k, v in counts.items()},
    }


def _adjusted_ranges(frame: pd.DataFrame, knobs: Sequence[str], target: str) -> dict[str, Any]:
    """Per-knob ranges from a log-additive model ``log y = sum_k effect_k(value)``.

    Marginal group means are confounded when knobs are not sampled independently (a FLOPs
    cap keeps large batches only for small networks); the additive model compares values
    of one knob with the others held fixed, assuming effects multiply.
    """
    sub = frame[list(knobs) + [target]].dropna()
    sub = sub[sub[target] > 0]
    knobs = [k for k in knobs if sub[k].nunique() >= 2]
    if not knobs or len(sub) < 3:
        return {"ranges": {}, "effects": {}, "log_r2": math.nan}
    blocks, slices, levels = [np.ones((len(sub), 1))], {}, {}
    col = 1
    for k in knobs:
        values = sorted(sub[k].unique())
        levels[k] = values
        onehot = sub[k].to_numpy()[:, None] == np.asarray(values[1:], dtype=object)[None, :]
        blocks.append(onehot.astype(float))
        slices[k] = slice(col, col + len(values) - 1)
        col += len(values) - 1
    design = np.hstack(blocks)
    y = np.log(sub[target].to_numpy(float))
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    if rank < design.shape[1]:  # some knob values never vary apart: effects not identifiable
        return {"ranges": {k: math.nan for k in knobs}, "effects": {}, "log_r2": math.nan}
    out, factors = {}, {}
    for k in knobs:
        effects = np.concatenate([[0.0], coef[slices[k]]])
        out[k] = float(np.exp(effects.max() - effects.min()))
        # cost factor of each value relative to the knob's smallest value, others fixed
        factors[k] = {json_key(v): float(np.exp(e)) for v, e in zip(levels[k], effects)}
    return {"ranges": out, "effects": factors, "log_r2": r2(y, design @ coef)}


def _knob_section(frame: pd.DataFrame, targets: Sequence[str]) -> dict[str, Any]:
    by_family: dict[str, Any] = {}
    for fam, part in frame.groupby("family", sort=True):
        fam_out: dict[str, Any] = {}
        adjusted = {t: _adjusted_ranges(part, KNOBS, t) for t in targets}
        for knob in KNOBS:
            per_target = {}
            for t in targets:
                r = _knob_range(part, knob, t)
                if r is not None:
                    r["adjusted_range"] = adjusted[t]["ranges"].get(knob, math.nan)
                    r["adjusted_factors"] = adjusted[t]["effects"].get(knob, {})
                    per_target[t] = r
            if per_target:
                fam_out[knob] = per_target
        fam_out["_model"] = {t: {"log_r2": adjusted[t]["log_r2"]} for t in targets}
        by_family[str(fam)] = fam_out
    fam_ranges = {t: r for t in targets if (r := _knob_range(frame, "family", t)) is not None}
    return {"by_family": by_family, "family": fam_ranges}


def _width_asymmetry(knobs: Mapping[str, Any], targets: Sequence[str]) -> dict[str, Any]:
    out = {}
    for fam, fam_out in knobs["by_family"].items():
        width = fam_out.get("width", {})
        ranges = {t: width[t]["range"] for t in targets if t in width}
        adjusted = {t: width[t]["adjusted_range"] for t in targets if t in width}
        ratios, adj_ratios = {}, {}
        present = [t for t in targets if t in ranges]
        for i, a in enumerate(present):
            for b in present[i + 1 :]:
                ratios[f"{a}/{b}"] = ranges[a] / ranges[b]
                adj_ratios[f"{a}/{b}"] = adjusted[a] / adjusted[b]
        if ranges:
            out[fam] = {
                "width_range": ranges,
                "width_adjusted_range": adjusted,
                "ratio": ratios,
                "adjusted_ratio": adj_ratios,
            }
    return out


def _efficiency(frame: pd.DataFrame) -> dict[str, Any]:
    out = {}
    tiers = batch_tier(frame["batch_size"])
    metrics = [("ms_per_gflop", "latency_ms"), ("j_per_gflop", "energy_j")]
    for name, target in metrics:
        if target not in frame.columns or frame[target].notna().sum() == 0:
            continue
        per = frame[target].to_numpy(float) / frame["gflops"].to_numpy(float)
        by_tier = {lab: mean_stats(per[tiers == lab]) for lab in tier_order(tiers)}
        by_tier = {k: v for k, v in by_tier.items() if v["n"] > 0}
        means = [v["mean"] for v in by_tier.values()]
        out[name] = {
            "by_tier": by_tier,
            "best_tier": min(by_tier, key=lambda k: by_tier[k]["mean"]) if by_tier else None,
            "worst_over_best": (max(means) / min(means)) if means and min(means) > 0 else None,
        }
    return out


def _divergence(frame: pd.DataFrame) -> dict[str, Any]:
    """Energy and latency scale factors per (SM-utilization tier, batch tier) cell."""
    has_energy = "energy_j" in frame.columns and frame["energy_j"].notna().any()
    has_sm = "sm_util" in frame.columns and pd.to_numeric(frame["sm_util"], "coerce").notna().any()
    if not (has_energy and has_sm):
        missing = [n for n, ok in (("energy_j", has_energy), ("sm_util", has_sm)) if not ok]
        return {"skipped": f"needs energy and SM-utilization telemetry; missing {missing}"}
    sub = frame.assign(sm_util=pd.to_numeric(frame["sm_util"], errors="coerce"))
    sub = sub.dropna(subset=["energy_j", "latency_ms", "sm_util"])
    if len(sub) == 0:
        return {"skipped": "no row holds energy_j, latency_ms and sm_util together"}
    sm = sub["sm_util"].to_numpy(float)
    sub = sub.assign(
        sm_tier=np.select(
            [(sm >= lo) & (sm < hi) for lo, hi, _ in SM_TIERS],
            [lab for *_, lab in SM_TIERS],
            default="low",
        ),
        batch_tier=batch_tier(sub["batch_size"]),
    )
    cells = sub.groupby(["sm_tier", "batch_tier"])[["energy_j", "latency_ms"]].agg(["mean", "size"])
    order_sm = [lab for *_, lab in SM_TIERS if lab in set(sub["sm_tier"])]
    order_b = tier_order(sub["batch_tier"])
    base = (order_sm[0], order_b[0])
    if base not in cells.index:
        base = cells.index[0]
    base_e = cells.loc[base, ("energy_j", "mean")]
    base_l = cells.loc[base, ("latency_ms", "mean")]
    table: dict[str, dict[str, Any]] = {s: {} for s in order_sm}
    for (s, b), row in cells.loc[
        [c for c in ((s, b) for s in order_sm for b in order_b) if c in cells.index]
    ].iterrows():
        e_scale = row[("energy_j", "mean")] / base_e
        l_scale = row[("latency_ms", "mean")] / base_l
        table[s][b] = {
            "n": int(row[("energy_j", "size")]),
            "energy_j_mean": float(row[("energy_j", "mean")]),
            "latency_ms_mean": float(row[("latency_ms", "mean")]),
            "energy_scale": float(e_scale),
            "latency_scale": float(l_scale),
            "divergence": float(e_scale / l_scale),
        }
    high_low = {}
    if "high" in table and "low" in table:
        for b in order_b:
            if b in table["high"] and b in table["low"]:
                high_low[b] = table["high"][b]["energy_j_mean"] / table["low"][b]["energy_j_mean"]
    return {
        "baseline": {"sm_tier": base[0], "batch_tier": base[1]},
        "sm_tiers": {lab: [lo, hi] for lo, hi, lab in SM_TIERS},
        "cells": table,
        "high_over_low_sm_energy": high_low,
    }


def variant_parts(variant: str) -> tuple[str, str, str]:
    device, runtime, precision = variant.rsplit("/", 2)
    return device, runtime, precision


def _comparison_name(num: str, den: str) -> str | None:
    """Name of the ratio num/den, or None when the pair should be oriented the other way."""
    dn, rn, pn = variant_parts(num)
    dd, rd, pd_ = variant_parts(den)
    if dn != dd or (rn, pn) == (rd, pd_):
        return None
    if pn != pd_:
        if pn == "fp32" or (pd_ != "fp32" and pn > pd_):
            return None  # reduced precision goes on top, FP32 below
    elif rn == "torch" or (rd != "torch" and rn > rd):
        return None  # same precision: the alternative runtime goes on top of PyTorch
    rl = lambda r: RUNTIME_LABELS.get(r, r)  # noqa: E731
    if rn == rd:
        return f"{pn.upper()}/{pd_.upper()} ({rl(rn)})"
    if pn == pd_:
        return f"{rl(rn)}/{rl(rd)} ({pn.upper()})"
    return f"{rl(rn)} {pn.upper()}/{rl(rd)} {pd_.upper()}"


def aggregate(frame: pd.DataFrame, targets: Sequence[str]) -> pd.DataFrame:
    return frame.groupby(list(JOIN_COLUMNS), as_index=False, sort=True)[list(targets)].mean()


def _pair_ratios(frame: pd.DataFrame, targets: Sequence[str]) -> list[dict[str, Any]]:
    variants = sorted(frame["variant"].unique())
    out = []
    for num in variants:
        for den in variants:
            name = _comparison_name(num, den)
            if name is None:
                continue
            a = aggregate(frame[frame["variant"] == num], targets)
            b = aggregate(frame[frame["variant"] == den], targets)
            pair = a.merge(b, on=list(JOIN_COLUMNS), suffixes=("_num", "_den"))
            if len(pair) == 0:
                continue
            tiers = batch_tier(pair["batch_size"])
            per_target = {}
            for t in targets:
                r = (pair[f"{t}_num"] / pair[f"{t}_den"]).to_numpy(float)
                if not np.isfinite(r).any():
                    continue
                fam = pair["family"].to_numpy()
                per_target[t] = {
                    "overall": ratio_stats(r),
                    "by_family": {f: ratio_stats(r[fam == f]) for f in sorted(set(fam))},
                    "by_tier": {b: ratio_stats(r[tiers == b]) for b in tier_order(tiers)},
                    "by_family_tier": {
                        f: {
                            b: s
                            for b in tier_order(tiers)
                            if (s := ratio_stats(r[(fam == f) & (tiers == b)]))["n"] > 0
                        }
                        for f in sorted(set(fam))
                    },
                }
            if per_target:
                out.append(
                    {
                        "name": name,
                        "numerator": num,
                        "denominator": den,
                        "pairs": int(len(pair)),
                        "targets": per_target,
                    }
                )
    return out


def _flopsr2(frame: pd.DataFrame, targets: Sequence[str]) -> dict[str, Any]:
    out = {}
    for t in targets:
        sub = frame[["gflops", t]].dropna()
        sub = sub[sub[t] > 0]
        if len(sub) < 3:
            continue
        x, y = sub["gflops"].to_numpy(float), sub[t].to_numpy(float)
        slope, intercept, r2 = linear_fit(x, y)
        _, _, r2_log = linear_fit(np.log(x), np.log(y))
        out[t] = {
            "r2": r2,
            "r2_loglog": r2_log,
            "slope_per_gflop": slope,
            "intercept": intercept,
            "n": int(len(sub)),
        }
    return out


def characterize(
    datasets: Sequence[str | Path | pd.DataFrame] | str | Path | pd.DataFrame,
) -> dict[str, Any]:
    """Characterize one or more measured datasets (see the module docstring).

    Several datasets (or one holding several precisions/runtimes) are pooled; rows are
    grouped per ``variant`` (device/runtime/precision) and paired across variants on
    ``JOIN_COLUMNS`` for the precision/runtime ratios. Returns a JSON-ready dict.
    """
    return characterize_frames(datasets)[0]


def characterize_frames(
    datasets: Sequence[str | Path | pd.DataFrame] | str | Path | pd.DataFrame,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """``characterize`` and the pooled rows (with ``gflops``) it was computed from."""
    if isinstance(datasets, (str, Path, pd.DataFrame)):
        datasets = [datasets]
    if not datasets:
        raise InputFileError(
            "no dataset given: expected at least one measured dataset (.csv/.parquet), got "
            "none. Pass a dataset path."
        )
    for i, d in enumerate(datasets):
        for other in datasets[:i]:
            if same_dataset(d, other):
                raise InputFileError(
                    f"the same dataset given twice: expected distinct datasets, got "
                    f"{d if not isinstance(d, pd.DataFrame) else 'one DataFrame'} twice (its rows "
                    "would count double). Give each dataset once."
                )
    frames = [load_measurements(d) for d in datasets]
    for f in frames:
        if len(f) < MIN_CHARACTERIZE_ROWS:
            raise InputFileError(
                f"{f.attrs['source']}: too few rows to characterize: expected at least "
                f"{MIN_CHARACTERIZE_ROWS} rows with status ok, got {len(f)}. Measure more "
                "configs (e.g. `carb-nas space sample`, then `carb-nas profile`)."
            )
    notes = [n for f in frames for n in f.attrs["notes"]]
    info = [
        {
            k: f.attrs[k]
            for k in (
                "source",
                "rows",
                "ok_rows",
                "targets",
                "peak_mem_methods",
                "latency_cv_median",
            )
        }
        | {"variants": sorted(f["variant"].unique())}
        for f in frames
    ]
    pooled = pd.concat(frames, ignore_index=True)
    pooled.attrs = {}
    targets = [t for t in TARGETS if t in pooled.columns and pooled[t].notna().any()]
    pooled = with_gflops(pooled)
    variants = sorted(pooled["variant"].unique())
    by_variant = {v: pooled[pooled["variant"] == v] for v in variants}

    scopes = dict(by_variant)
    if len(variants) > 1:
        scopes = {"all": pooled} | scopes
    knobs = {s: _knob_section(f, targets) for s, f in scopes.items()}
    result: dict[str, Any] = {
        "kind": "characterization",
        "datasets": info,
        "rows_ok": int(len(pooled)),
        "targets": targets,
        "variants": {v: int(len(f)) for v, f in by_variant.items()},
        "batch_tiers": [lab for *_, lab in BATCH_TIERS],
        "knob_ranges": knobs,
        "width_asymmetry": {s: _width_asymmetry(k, targets) for s, k in knobs.items()},
        "efficiency": {v: _efficiency(f) for v, f in by_variant.items()},
        "divergence": {v: _divergence(f) for v, f in by_variant.items()},
        "ratios": _pair_ratios(pooled, targets),
        "flops_r2": {v: _flopsr2(f, targets) for v, f in by_variant.items()},
        "notes": notes,
    }
    methods = {m for f in frames for m in f.attrs["peak_mem_methods"]}
    if len(methods) > 1:
        result["notes"].append(
            f"peak_mem_mb was measured by {len(methods)} different methods across the datasets "
            "(see peak_mem_methods): memory ratios between them include the difference in what "
            "each method counts"
        )
    if len(variants) > 1 and not result["ratios"]:
        result["notes"].append(
            "several variants but no two share a device and config: no precision/runtime ratios"
        )
    return jsonable(result), pooled
