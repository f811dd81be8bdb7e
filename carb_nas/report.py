"""Characterization and cross-platform transfer reports on measured datasets.

Two questions users ask about their own measurements:

``characterize(datasets)``
    How does cost scale with each knob on this hardware? Per knob and family, the cost range
    (largest over smallest group mean, per target), width asymmetry between targets, per-sample
    efficiency by batch tier (ms and J per GFLOP), energy-latency divergence by SM utilization
    and batch tier (when energy and telemetry exist), precision/runtime ratios (FP16/FP32,
    INT8/FP32, ONNX Runtime/PyTorch) by family and batch tier, and how much FLOPs alone explain.

``transfer(a, b)``
    Does a source platform's cost tell anything about a target platform's? On configs both
    measured: a linear fit ``B = slope * A + intercept`` with R2, Spearman rank correlation and
    the overlap of the two top-100 (cheapest) lists; then few-shot calibration: adapt the
    source platform's cost model with N target measurements (``calibrate``) and compare with a
    model trained on the same N target rows alone, over several random draws.

Only rows with ``status == "ok"`` count. Every result is a plain dict (JSON-ready); the
``write_*_report`` functions add a Markdown summary and PNG plots.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._json import jsonable as _jsonable
from carb_nas.dataset import TARGETS
from carb_nas.errors import InputFileError, MissingFileError, ModelError
from carb_nas.space import normalize_config_frame, read_table

__all__ = [
    "BATCH_TIERS",
    "JOIN_COLUMNS",
    "KNOBS",
    "CalibratedModel",
    "calibrate",
    "characterize",
    "load_measurements",
    "transfer",
    "write_characterization_report",
    "write_transfer_report",
]

_CONFIG = ("family", "depth", "width", "resolution", "batch_size", "precision", "runtime")
JOIN_COLUMNS = ("family", "depth", "width", "resolution", "batch_size")
"""Config columns that identify "the same network and batch" across platforms."""
KNOBS = ("depth", "width", "batch_size", "resolution", "precision", "runtime")
BATCH_TIERS = ((1, 4, "1-4"), (5, 16, "5-16"), (17, 64, "17-64"), (65, 256, "65-256"))
"""(low, high, label), inclusive; batches above 256 fall in a ">256" tier."""
SM_TIERS = ((0.0, 35.0, "low"), (35.0, 65.0, "mid"), (65.0, math.inf, "high"))
"""SM utilization tiers in %, [low, high); CARB calls > 65 % the high-stress regime."""
FEW_SHOT_SIZES = (10, 25, 50, 100)
CALIBRATION_METHODS = ("auto", "scale", "loglinear", "features")
_TARGET_UNITS = {"peak_mem_mb": "MB", "energy_j": "J", "latency_ms": "ms"}
_RUNTIME_LABELS = {"torch": "PyTorch", "onnxruntime": "ONNX Runtime"}
_LOG_SPAN = 30.0  # use a log axis when values span more than this factor


# ----------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------
def load_measurements(source: str | Path | pd.DataFrame, name: str | None = None) -> pd.DataFrame:
    """Measured rows with ``status == "ok"``, validated, with a ``variant`` column added.

    ``source`` is a CSV/Parquet path or a DataFrame following ``carb_nas.dataset.SCHEMA``
    (at least the config columns family, depth, width, resolution, batch_size and one target;
    precision/runtime default to fp32/torch, a missing ``status`` means every row is ok).
    ``variant`` is ``device/runtime/precision`` (the platform string), the unit that
    precision/runtime ratios compare. ``frame.attrs`` holds ``source``, ``rows`` (all rows),
    ``ok_rows``, ``targets`` (those with at least one finite value) and ``notes``.
    """
    if isinstance(source, pd.DataFrame):
        raw, label = source, name or "<frame>"
    else:
        p = Path(source)
        if not p.exists():
            raise MissingFileError(
                f"dataset not found: expected an existing .csv or .parquet file of measured "
                f"rows, got {str(source)!r}. Check the path (shipped datasets live in "
                f"carb_nas/data/datasets/)."
            )
        raw, label = read_table(p), name or str(p)
    notes: list[str] = []
    if len(raw) == 0:
        raise InputFileError(
            f"{label}: empty dataset: expected measured rows, got 0 rows. Point to a dataset "
            "written by `carb-nas dataset export`."
        )
    if "status" in raw.columns:
        status = raw["status"].astype(str).str.strip().str.lower()
        ok = raw[status == "ok"]
        if len(ok) == 0:
            counts = status.value_counts().to_dict()
            raise InputFileError(
                f"{label}: no usable rows: expected rows with status == 'ok', got status counts "
                f"{counts}. Re-run the failed measurements or pick another dataset."
            )
    else:
        ok = raw
        notes.append(f"{label}: no 'status' column; every row taken as a successful measurement")
    frame = normalize_config_frame(ok.reset_index(drop=True), source=label)
    targets = []
    for t in TARGETS:
        if t in frame.columns:
            frame[t] = pd.to_numeric(frame[t], errors="coerce").astype(float)
            frame.loc[~np.isfinite(frame[t]), t] = np.nan
            if frame[t].notna().any():
                targets.append(t)
    if not targets:
        raise InputFileError(
            f"{label}: no target column with values: expected at least one of {list(TARGETS)} "
            f"holding numbers, got columns {list(raw.columns)}. Export the dataset with "
            "`carb-nas dataset export` or add the measured target columns."
        )
    if "energy_j" not in targets:
        notes.append(f"{label}: no energy_j values (no energy meter on this platform)")
    if "device" in frame.columns:
        device = frame["device"].fillna("unknown").astype(str)
    elif "platform" in frame.columns:
        device = frame["platform"].fillna("unknown").astype(str).str.split("/").str[0]
    else:
        device = pd.Series("unknown", index=frame.index)
    frame["variant"] = device + "/" + frame["runtime"] + "/" + frame["precision"]
    methods = []
    if "peak_mem_method" in frame.columns:
        methods = sorted(frame["peak_mem_method"].dropna().astype(str).unique())
    cv = math.nan
    if "latency_cv" in frame.columns:
        cv = float(pd.to_numeric(frame["latency_cv"], errors="coerce").median())
    frame.attrs = {
        "source": label,
        "rows": int(len(raw)),
        "ok_rows": int(len(frame)),
        "targets": targets,
        "peak_mem_methods": methods,
        "latency_cv_median": cv,
        "notes": notes,
    }
    return frame


def _with_gflops(frame: pd.DataFrame) -> pd.DataFrame:
    from carb_nas.features import compute_features  # lazy: features import the space stack

    cols = ["family", "depth", "width", "resolution", "batch_size", "precision", "runtime"]
    feats = compute_features(frame[cols].reset_index(drop=True))
    out = frame.copy()
    out["gflops"] = feats["flops"].to_numpy(dtype=float) / 1e9
    return out


def batch_tier(batch_size: Any) -> np.ndarray:
    """Tier label of each batch size (see ``BATCH_TIERS``)."""
    b = np.asarray(batch_size, dtype=float)
    conds = [(b >= lo) & (b <= hi) for lo, hi, _ in BATCH_TIERS]
    return np.select(conds, [lab for *_, lab in BATCH_TIERS], default=">256")


def _tier_order(labels: Iterable[str]) -> list[str]:
    known = [lab for *_, lab in BATCH_TIERS] + [">256"]
    present = set(labels)
    return [lab for lab in known if lab in present]


# ----------------------------------------------------------------------------------------
# small statistics
# ----------------------------------------------------------------------------------------
def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if len(y) < 2 or ss_tot == 0.0:
        return math.nan
    return 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot


def _linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least-squares ``y = slope * x + intercept``; returns (slope, intercept, R2)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.ptp(x) == 0.0:
        return math.nan, math.nan, math.nan
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept), _r2(y, slope * x + intercept)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(spearmanr(x, y).statistic)


def _ratio_stats(r: np.ndarray) -> dict[str, float]:
    r = np.asarray(r, float)
    r = r[np.isfinite(r) & (r > 0)]
    if len(r) == 0:
        return {"n": 0}
    return {
        "n": int(len(r)),
        "geomean": float(np.exp(np.mean(np.log(r)))),
        "median": float(np.median(r)),
        "p10": float(np.quantile(r, 0.10)),
        "p90": float(np.quantile(r, 0.90)),
        "frac_below_1": float(np.mean(r < 1.0)),
    }


def _mean_stats(v: np.ndarray) -> dict[str, float]:
    v = np.asarray(v, float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return {"n": 0}
    return {"n": int(len(v)), "mean": float(v.mean()), "median": float(np.median(v))}


def _key(value: Any) -> str:
    """JSON key for a knob value: 0.5 -> "0.5", 64 -> "64"."""
    if isinstance(value, (float, np.floating)):
        return format(float(value), "g")
    return str(value)


# ----------------------------------------------------------------------------------------
# characterization
# ----------------------------------------------------------------------------------------
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
        "lowest": _key(lo),
        "highest": _key(hi),
        "group_means": {_key(k): float(v) for k, v in means.items()},
        "group_rows": {_key(k): int(v) for k, v in counts.items()},
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
        return {"ranges": {}, "log_r2": math.nan}
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
        factors[k] = {_key(v): float(np.exp(e)) for v, e in zip(levels[k], effects)}
    return {"ranges": out, "effects": factors, "log_r2": _r2(y, design @ coef)}


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
        by_tier = {lab: _mean_stats(per[tiers == lab]) for lab in _tier_order(tiers)}
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
    order_b = _tier_order(sub["batch_tier"])
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


def _variant_parts(variant: str) -> tuple[str, str, str]:
    device, runtime, precision = variant.rsplit("/", 2)
    return device, runtime, precision


def _comparison_name(num: str, den: str) -> str | None:
    """Name of the ratio num/den, or None when the pair should be oriented the other way."""
    dn, rn, pn = _variant_parts(num)
    dd, rd, pd_ = _variant_parts(den)
    if dn != dd or (rn, pn) == (rd, pd_):
        return None
    if pn != pd_:
        if pn == "fp32" or (pd_ != "fp32" and pn > pd_):
            return None  # reduced precision goes on top, FP32 below
    elif rn == "torch" or (rd != "torch" and rn > rd):
        return None  # same precision: the alternative runtime goes on top of PyTorch
    rl = lambda r: _RUNTIME_LABELS.get(r, r)  # noqa: E731
    if rn == rd:
        return f"{pn.upper()}/{pd_.upper()} ({rl(rn)})"
    if pn == pd_:
        return f"{rl(rn)}/{rl(rd)} ({pn.upper()})"
    return f"{rl(rn)} {pn.upper()}/{rl(rd)} {pd_.upper()}"


def _aggregate(frame: pd.DataFrame, targets: Sequence[str]) -> pd.DataFrame:
    return frame.groupby(list(JOIN_COLUMNS), as_index=False, sort=True)[list(targets)].mean()


def _pair_ratios(frame: pd.DataFrame, targets: Sequence[str]) -> list[dict[str, Any]]:
    variants = sorted(frame["variant"].unique())
    out = []
    for num in variants:
        for den in variants:
            name = _comparison_name(num, den)
            if name is None:
                continue
            a = _aggregate(frame[frame["variant"] == num], targets)
            b = _aggregate(frame[frame["variant"] == den], targets)
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
                    "overall": _ratio_stats(r),
                    "by_family": {f: _ratio_stats(r[fam == f]) for f in sorted(set(fam))},
                    "by_tier": {b: _ratio_stats(r[tiers == b]) for b in _tier_order(tiers)},
                    "by_family_tier": {
                        f: {
                            b: s
                            for b in _tier_order(tiers)
                            if (s := _ratio_stats(r[(fam == f) & (tiers == b)]))["n"] > 0
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


def _flops_r2(frame: pd.DataFrame, targets: Sequence[str]) -> dict[str, Any]:
    out = {}
    for t in targets:
        sub = frame[["gflops", t]].dropna()
        sub = sub[sub[t] > 0]
        if len(sub) < 3:
            continue
        x, y = sub["gflops"].to_numpy(float), sub[t].to_numpy(float)
        slope, intercept, r2 = _linear_fit(x, y)
        _, _, r2_log = _linear_fit(np.log(x), np.log(y))
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
    return _characterize(datasets)[0]


def _characterize(
    datasets: Sequence[str | Path | pd.DataFrame] | str | Path | pd.DataFrame,
) -> tuple[dict[str, Any], pd.DataFrame]:
    if isinstance(datasets, (str, Path, pd.DataFrame)):
        datasets = [datasets]
    if not datasets:
        raise InputFileError(
            "no dataset given: expected at least one measured dataset (.csv/.parquet), got "
            "none. Pass a dataset path."
        )
    frames = [load_measurements(d) for d in datasets]
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
    pooled = _with_gflops(pooled)
    variants = sorted(pooled["variant"].unique())
    by_variant = {v: pooled[pooled["variant"] == v] for v in variants}

    scopes = dict(by_variant)
    if len(variants) > 1:
        scopes = {"all": pooled} | scopes
    knobs = {s: _knob_section(f, targets) for s, f in scopes.items()}
    result = {
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
        "flops_r2": {v: _flops_r2(f, targets) for v, f in by_variant.items()},
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
    return _jsonable(result), pooled


# ----------------------------------------------------------------------------------------
# calibration (few-shot transfer of a cost model)
# ----------------------------------------------------------------------------------------
_CALIBRATION_FEATURES = (
    "log_flops",
    "log_batch_size",
    "log_resolution",
    "log_width",
    "log_depth",
    "is_bottleneck",
)


def _calibration_features(X: pd.DataFrame, names: Sequence[str] | None = None) -> np.ndarray:
    """Columns ``names`` (default: all of ``_CALIBRATION_FEATURES`` that X can give)."""
    if names is None:
        names = _calibration_feature_names(X)
    cols = []
    for name in names:
        if name == "is_bottleneck":
            cols.append((X["family"].astype(str).to_numpy() == "bottleneck").astype(float))
        else:
            v = pd.to_numeric(X[name[4:]]).to_numpy(float)
            cols.append(np.log(np.maximum(v, 1e-12)))
    return np.column_stack(cols)


def _calibration_feature_names(X: pd.DataFrame) -> list[str]:
    return [n for n in _CALIBRATION_FEATURES if n != "log_flops" or "flops" in X.columns]


def _smoother(design: np.ndarray, r: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Penalized least squares (intercept column 0 unpenalized): coefficients, LOO residuals."""
    penalty = lam * np.eye(design.shape[1])
    penalty[0, 0] = 0.0
    gram_inv = np.linalg.pinv(design.T @ design + penalty)
    coef = gram_inv @ design.T @ r
    hat = np.einsum("ij,jk,ik->i", design, gram_inv, design)
    resid = r - design @ coef
    with np.errstate(divide="ignore", invalid="ignore"):
        loo = np.where(hat < 1 - 1e-9, resid / (1 - hat), np.inf)
    return coef, loo


class CalibratedModel:
    """A source platform's cost model adapted to a target platform with a few measurements.

    Per target, the map works in log space on the residual ``r = log(y) - log(source)``
    (so "no change" is the zero map and every method shrinks toward it):

    - ``scale``: ``r = a`` -- one multiplicative factor (1 parameter);
    - ``loglinear``: ``r = a + b*log(source)`` -- a power law ``y = e^a * source^(1+b)``;
    - ``features``: ``r = a + w . [log source, log FLOPs, log batch, log resolution,
      log width, log depth, is_bottleneck]`` (standardized; log FLOPs when X has ``flops``),
      ridge-penalized, penalty picked by leave-one-out error;
    - ``auto`` (default): the method with the lowest leave-one-out RMSE of ``log(y)`` on the
      calibration rows, per target.

    Every map's correction is clipped to the range of ``r`` seen on the calibration rows:
    fitted on a handful of noisy points, a trend must not be extrapolated into factors it
    never observed (beyond the data the nearest observed correction holds).

    ``predict(X)`` takes the same ``X`` as the source ``CostModel`` (``model_inputs(frame)``)
    and returns a DataFrame of the calibrated targets. Prediction intervals are not
    calibrated: ask the source model for them only as a rough guide.

    The source model is asked what each config costs *on the source platform*: ``runtime``
    and ``precision`` of ``X`` are replaced by ``source_runtime``/``source_precision`` (by
    default read from ``source_model.platform_``, e.g. ``"cpu/torch/fp32"``) and the inputs
    rebuilt, so a PyTorch FP32 model can be calibrated to ONNX Runtime INT8 rows.
    """

    def __init__(
        self,
        source_model: Any,
        method: str = "auto",
        source_runtime: str | None = None,
        source_precision: str | None = None,
    ) -> None:
        self.source_model = source_model
        self.method = method
        self.source_runtime = source_runtime
        self.source_precision = source_precision

    def _source_platform(self) -> dict[str, str]:
        platform = getattr(self.source_model, "platform_", None) or {}
        out = {}
        for col, given in (("runtime", self.source_runtime), ("precision", self.source_precision)):
            value = given or (platform.get(col) if isinstance(platform, Mapping) else None)
            if value:
                out[col] = str(value)
        return out

    def _source_predict(self, X: pd.DataFrame) -> pd.DataFrame:
        override = self._source_platform()
        if override and all(c in X.columns for c in _CONFIG):
            differs = any((X[c].astype(str) != v).any() for c, v in override.items())
            if differs:
                from carb_nas.costmodel import model_inputs

                X = model_inputs(X.assign(**override))
        return self.source_model.predict(X)

    def fit(self, X: pd.DataFrame, Y: pd.DataFrame) -> CalibratedModel:
        if self.method not in CALIBRATION_METHODS:
            raise ModelError(
                f"unknown calibration method: expected one of {list(CALIBRATION_METHODS)}, got "
                f"{self.method!r}. Pick one of those."
            )
        source_targets = list(getattr(self.source_model, "targets_", []) or [])
        targets = [t for t in Y.columns if t in source_targets and Y[t].notna().any()]
        if not targets:
            raise ModelError(
                f"nothing to calibrate: expected target rows for at least one of the source "
                f"model's targets {source_targets}, got columns {list(Y.columns)} with values. "
                "Measure a target the source model predicts."
            )
        base = self._source_predict(X)
        self.feature_names_ = _calibration_feature_names(X)
        feats = _calibration_features(X, self.feature_names_)
        self.maps_: dict[str, dict[str, Any]] = {}
        for t in targets:
            y = Y[t].to_numpy(float)
            s = base[t].to_numpy(float)
            ok = np.isfinite(y) & (y > 0) & np.isfinite(s)
            if ok.sum() < 1:
                raise ModelError(
                    f"cannot calibrate {t}: expected at least 1 positive measurement, got "
                    f"{int(ok.sum())}. Measure more target rows."
                )
            self.maps_[t] = self._fit_target(
                np.log(np.maximum(s[ok], 1e-12)), np.log(y[ok]), feats[ok]
            )
        self.targets_ = targets
        self.n_calibration_rows_ = int(len(Y))
        return self

    def _fit_target(self, z: np.ndarray, logy: np.ndarray, feats: np.ndarray) -> dict[str, Any]:
        n = len(z)
        r = logy - z
        full = np.column_stack([z, feats])
        mean, std = full.mean(axis=0), full.std(axis=0)
        std[std == 0] = 1.0
        candidates: dict[str, tuple[dict[str, Any], float]] = {}
        coef, loo = _smoother(np.ones((n, 1)), r, 0.0)
        candidates["scale"] = (
            {"method": "scale", "intercept": float(coef[0])},
            float(np.sqrt(np.mean(loo**2))) if n > 1 else math.inf,
        )
        if n >= 3 and np.ptp(z) > 0:
            zs = (z - mean[0]) / std[0]
            coef, loo = _smoother(np.column_stack([np.ones(n), zs]), r, 0.0)
            candidates["loglinear"] = (
                {
                    "method": "loglinear",
                    "intercept": float(coef[0]),
                    "weights": [float(coef[1])],
                    "mean": [float(mean[0])],
                    "std": [float(std[0])],
                },
                float(np.sqrt(np.mean(loo**2))),
            )
        if n >= 4:
            design = np.column_stack([np.ones(n), (full - mean) / std])
            best = None
            for lam in (0.3, 1.0, 3.0, 10.0, 30.0, 100.0):
                coef, loo = _smoother(design, r, lam * n / 10)
                err = float(np.sqrt(np.mean(loo**2)))
                if best is None or err < best[1]:
                    best = (
                        {
                            "method": "features",
                            "intercept": float(coef[0]),
                            "weights": [float(c) for c in coef[1:]],
                            "mean": mean.tolist(),
                            "std": std.tolist(),
                            "penalty": lam,
                        },
                        err,
                    )
            candidates["features"] = best
        if self.method == "auto":
            name = min(candidates, key=lambda k: candidates[k][1])
        elif self.method in candidates:
            name = self.method
        else:  # too few rows for the asked method: fall back to the one-parameter map
            name = "scale"
        spec, err = candidates[name]
        # corrections stay inside the range seen on the calibration rows: a map fitted on a
        # handful of (noisy) points must not extrapolate a trend into factors it never
        # observed; beyond the data the nearest observed correction holds (like isotonic
        # regression's flat ends)
        return spec | {
            "clip": [float(r.min()), float(r.max())],
            "loo_rmse_log": err,
            "n": int(n),
            "candidates_loo_rmse_log": {k: v[1] for k, v in candidates.items()},
        }

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        if not hasattr(self, "maps_"):
            raise ModelError(
                "calibrated model not fitted: expected fit() or calibrate() before predict(), "
                "got an unfitted CalibratedModel. Call calibrate(source_model, rows) first."
            )
        base = self._source_predict(X)
        feats = _calibration_features(X, self.feature_names_)
        out = {}
        for t, spec in self.maps_.items():
            z = np.log(np.maximum(base[t].to_numpy(float), 1e-12))
            r = np.full(len(z), spec["intercept"])
            if spec["method"] == "loglinear":
                r = r + spec["weights"][0] * (z - spec["mean"][0]) / spec["std"][0]
            elif spec["method"] == "features":
                full = np.column_stack([z, feats])
                r = r + ((full - np.asarray(spec["mean"])) / np.asarray(spec["std"])) @ np.asarray(
                    spec["weights"]
                )
            r = np.clip(r, *spec["clip"])  # see _fit_target
            out[t] = np.exp(z + r)
        return pd.DataFrame(out, index=X.index)

    def to_dict(self) -> dict[str, Any]:
        """The fitted maps as plain JSON-ready data (the source model is saved separately)."""
        return _jsonable(
            {
                "method": self.method,
                "source_runtime": self.source_runtime,
                "source_precision": self.source_precision,
                "targets": list(self.targets_),
                "feature_names": list(self.feature_names_),
                "n_calibration_rows": self.n_calibration_rows_,
                "maps": self.maps_,
            }
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source_model: Any) -> CalibratedModel:
        model = cls(
            source_model,
            method=data["method"],
            source_runtime=data.get("source_runtime"),
            source_precision=data.get("source_precision"),
        )
        model.maps_ = {t: dict(m) for t, m in data["maps"].items()}
        model.targets_ = list(data["targets"])
        model.feature_names_ = list(data["feature_names"])
        model.n_calibration_rows_ = int(data["n_calibration_rows"])
        return model


def calibrate(
    source_model: Any,
    target_rows: pd.DataFrame,
    method: str = "auto",
    source_runtime: str | None = None,
    source_precision: str | None = None,
) -> CalibratedModel:
    """Adapt ``source_model`` (a fitted CostModel) to a new platform from a few measured rows.

    ``target_rows`` holds the config columns and the measured targets of the new platform
    (e.g. 10-100 rows of a dataset). Returns a ``CalibratedModel`` whose
    ``predict(model_inputs(frame))`` gives that platform's costs. See ``CalibratedModel``
    for the methods and for ``source_runtime``/``source_precision``.
    """
    from carb_nas.costmodel import model_inputs

    rows = load_measurements(target_rows, name="target rows")
    model = CalibratedModel(source_model, method, source_runtime, source_precision)
    return model.fit(model_inputs(rows), rows[rows.attrs["targets"]])


# ----------------------------------------------------------------------------------------
# transfer
# ----------------------------------------------------------------------------------------
def _single_variant(frame: pd.DataFrame) -> str:
    variants = sorted(frame["variant"].unique())
    if len(variants) != 1:
        raise InputFileError(
            f"{frame.attrs['source']}: mixed platforms: expected one device/runtime/precision "
            f"per transfer dataset, got {variants}. Split the dataset by its 'platform' column."
        )
    return variants[0]


def _mdape(y: np.ndarray, pred: np.ndarray) -> float:
    """Median absolute percentage error, %."""
    return float(100 * np.median(np.abs(pred - y) / np.abs(y)))


def _summary(runs: Sequence[tuple[float, float]]) -> dict[str, Any]:
    r2 = np.array([r for r, _ in runs], float)
    mdape = np.array([m for _, m in runs], float)
    any_ = np.isfinite(r2).any()
    return {
        "r2_mean": float(np.nanmean(r2)) if any_ else math.nan,
        "r2_std": float(np.nanstd(r2)) if any_ else math.nan,
        "mdape_pct_mean": float(np.nanmean(mdape)) if any_ else math.nan,
        "r2_runs": r2.tolist(),
    }


def _linear_baseline(X_train: pd.DataFrame, y: np.ndarray, X_test: pd.DataFrame) -> np.ndarray:
    """Ridge regression of log(y) on log FLOPs and the log config knobs (LOO-picked penalty):
    the simplest model one could fit to N target rows alone."""

    def feats(X: pd.DataFrame) -> np.ndarray:
        flops = np.log(np.maximum(pd.to_numeric(X["flops"]).to_numpy(float), 1.0))
        return np.column_stack([flops, _calibration_features(X)])

    F, Ft = feats(X_train), feats(X_test)
    mean, std = F.mean(axis=0), F.std(axis=0)
    std[std == 0] = 1.0
    design = np.column_stack([np.ones(len(F)), (F - mean) / std])
    logy = np.log(y)
    best = None
    for lam in (0.01, 0.1, 1.0, 10.0, 100.0):
        coef, loo = _smoother(design, logy, lam)
        err = float(np.mean(loo**2))
        if best is None or err < best[1]:
            best = (coef, err)
    return np.exp(np.column_stack([np.ones(len(Ft)), (Ft - mean) / std]) @ best[0])


def _few_shot(
    a: pd.DataFrame,
    b: pd.DataFrame,
    targets: Sequence[str],
    sizes: Sequence[int],
    seeds: int,
    method: str,
    source_model: Any,
    preset: str,
    progress: Callable[[str], None] | None,
    n_jobs: int | None,
) -> dict[str, Any]:
    from carb_nas.costmodel import MIN_TRAIN_ROWS as _MIN_TRAIN, CostModel, model_inputs

    say = progress or (lambda _msg: None)
    notes = []
    _, runtime_a, precision_a = _variant_parts(a["variant"].iloc[0])
    if source_model is None:
        a_targets = [t for t in targets if a[t].notna().any()]
        train = a.dropna(subset=a_targets)
        say(f"training the source model ({preset} preset) on {len(train)} rows of A")
        source_model = CostModel(preset=preset, n_jobs=n_jobs).fit(
            model_inputs(train), train[a_targets], platform=a["variant"].iloc[0]
        )
        source_desc = f"CostModel(preset={preset!r}) trained on all {len(train)} ok rows of A"
    else:
        source_desc = "given source model"
    targets = [t for t in targets if t in list(source_model.targets_)]
    pool = b.dropna(subset=targets).reset_index(drop=True)
    X_pool = model_inputs(pool)
    probe = CalibratedModel(source_model, method, runtime_a, precision_a)
    zero = probe._source_predict(X_pool)
    kinds = ("source_only", "calibrated", "target_only", "target_only_linear")
    runs: dict[str, Any] = {}
    for n in sizes:
        if n >= len(pool) - 10:
            notes.append(f"N={n} skipped: B has only {len(pool)} usable rows (need N + 10)")
            continue
        say(f"few-shot N={n}: {seeds} draws")
        rec = {k: {t: [] for t in targets} for k in kinds}
        methods: dict[str, int] = {}
        errors: list[str] = []
        if n < _MIN_TRAIN:
            errors.append(f"CostModel needs at least {_MIN_TRAIN} rows to train; N={n}")
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            idx = rng.choice(len(pool), size=n, replace=False)
            test = np.setdiff1d(np.arange(len(pool)), idx)
            train_rows, X_train, X_test = pool.iloc[idx], X_pool.iloc[idx], X_pool.iloc[test]
            cal = CalibratedModel(source_model, method, runtime_a, precision_a)
            pred_cal = cal.fit(X_train, train_rows[targets]).predict(X_test)
            for t in targets:
                methods[cal.maps_[t]["method"]] = methods.get(cal.maps_[t]["method"], 0) + 1
            pred_own = None
            if n >= _MIN_TRAIN:
                try:
                    own = CostModel(
                        preset=preset,
                        n_jobs=n_jobs,
                        validation_fraction=0.0,
                        calibration_fraction=0.0,
                        random_state=seed,
                    )
                    pred_own = own.fit(X_train, train_rows[targets]).predict(X_test)
                except ModelError as e:
                    errors.append(f"seed {seed}: {e}")
            for t in targets:
                y = pool[t].to_numpy(float)[test]
                preds = {
                    "calibrated": pred_cal[t].to_numpy(float),
                    "source_only": zero[t].to_numpy(float)[test],
                    "target_only": None if pred_own is None else pred_own[t].to_numpy(float),
                    "target_only_linear": _linear_baseline(
                        X_train, train_rows[t].to_numpy(float), X_test
                    ),
                }
                for kind, p in preds.items():
                    rec[kind][t].append(
                        (math.nan, math.nan) if p is None else (_r2(y, p), _mdape(y, p))
                    )
        runs[str(n)] = {
            kind: {t: _summary(v) for t, v in per.items()} for kind, per in rec.items()
        } | {"methods_chosen": methods, "target_only_errors": errors[:3]}
    return {
        "sizes": [int(n) for n in sizes],
        "seeds": int(seeds),
        "method": method,
        "source_model": source_desc,
        "source_platform": f"{runtime_a}/{precision_a}",
        "evaluation": "R2 on every usable row of B not drawn for calibration",
        "targets": list(targets),
        "runs": runs,
        "notes": notes,
    }


def _side_meta(frame: pd.DataFrame, variant: Any) -> dict[str, Any]:
    """What a transfer report records about one of its two datasets."""
    keys = ("ok_rows", "rows", "peak_mem_methods", "latency_cv_median")
    return {
        "source": frame.attrs["source"],
        "variant": variant,
        **{k: frame.attrs[k] for k in keys},
    }


def transfer(
    dataset_a: str | Path | pd.DataFrame,
    dataset_b: str | Path | pd.DataFrame,
    *,
    few_shot: Sequence[int] | None = FEW_SHOT_SIZES,
    seeds: int = 5,
    method: str = "auto",
    source_model: Any = None,
    preset: str = "fast",
    top_k: int = 100,
    progress: Callable[[str], None] | None = None,
    n_jobs: int | None = None,
) -> dict[str, Any]:
    """Compare platform B with platform A on the configs both measured.

    Returns a JSON-ready dict with one entry per shared target, ``{"slope", "intercept",
    "r2", "spearman", "top100_overlap", ...}`` (fit ``B = slope * A + intercept``; top-k
    overlap as a fraction of k, k = min(top_k, shared configs)), plus ``"meta"`` and,
    unless ``few_shot`` is empty/None, ``"few_shot"`` (see ``calibrate``): the source model
    (``source_model``, or a ``CostModel(preset)`` trained on all of A) adapted with N random
    rows of B, ``seeds`` draws per N, against a ``CostModel(preset)`` trained on the N rows
    alone; R2 on the rows of B not drawn. ``n_jobs``: threads per learner (None: 1).
    """
    if method not in CALIBRATION_METHODS:
        raise ModelError(
            f"unknown calibration method: expected one of {list(CALIBRATION_METHODS)}, got "
            f"{method!r}. Pick one of those."
        )
    if seeds < 1:
        raise ModelError(f"invalid seeds: expected >= 1, got {seeds}. Use --seeds 1 or more.")
    a, b = load_measurements(dataset_a), load_measurements(dataset_b)
    va, vb = _single_variant(a), _single_variant(b)
    targets = [t for t in TARGETS if t in a.attrs["targets"] and t in b.attrs["targets"]]
    if not targets:
        raise InputFileError(
            f"no common target: expected both datasets to measure one of {list(TARGETS)}, got "
            f"A: {a.attrs['targets']}, B: {b.attrs['targets']}. Compare datasets that share a "
            "target."
        )
    shared = _aggregate(a, targets).merge(
        _aggregate(b, targets), on=list(JOIN_COLUMNS), suffixes=("_a", "_b")
    )
    if len(shared) == 0:
        raise InputFileError(
            f"no shared configs: expected configs (family, depth, width, resolution, "
            f"batch_size) measured in both {a.attrs['source']} ({len(a)} ok rows) and "
            f"{b.attrs['source']} ({len(b)} ok rows), got none in common. Profile the same "
            "configs on both platforms (e.g. the same `carb-nas space sample` file)."
        )
    result: dict[str, Any] = {}
    for t in targets:
        sub = shared[[*JOIN_COLUMNS, f"{t}_a", f"{t}_b"]].dropna()
        if len(sub) < 3:
            continue
        x, y = sub[f"{t}_a"].to_numpy(float), sub[f"{t}_b"].to_numpy(float)
        slope, intercept, r2 = _linear_fit(x, y)
        k = min(top_k, len(sub))
        top_a = set(np.argsort(x, kind="stable")[:k])
        top_b = set(np.argsort(y, kind="stable")[:k])
        pos = (x > 0) & (y > 0)
        result[t] = {
            "slope": slope,
            "intercept": intercept,
            "r2": r2,
            "spearman": _spearman(x, y),
            "top100_overlap": len(top_a & top_b) / k,
            "top_k": int(k),
            "n": int(len(sub)),
            "ratio_geomean": float(np.exp(np.mean(np.log(y[pos] / x[pos]))))
            if pos.any()
            else math.nan,
            "loglog_slope": _linear_fit(np.log(x[pos]), np.log(y[pos]))[0],
            "by_tier": {
                tier: {"slope": s, "intercept": i, "r2": r, "n": int(m.sum())}
                for tier in _tier_order(batch_tier(sub["batch_size"]))
                for m in [batch_tier(sub["batch_size"]) == tier]
                for s, i, r in [_linear_fit(x[m], y[m])]
            },
        }
    if not result:
        raise InputFileError(
            f"too few shared measurements: expected at least 3 shared configs with values for "
            f"one of {targets}, got {len(shared)} shared configs. Measure more shared configs."
        )
    result["meta"] = {
        "kind": "transfer",
        "a": _side_meta(a, va),
        "b": _side_meta(b, vb),
        "shared_configs": int(len(shared)),
        "join_columns": list(JOIN_COLUMNS),
        "targets": [t for t in targets if t in result],
        "notes": a.attrs["notes"] + b.attrs["notes"],
    }
    if "peak_mem_mb" in result and a.attrs["peak_mem_methods"] != b.attrs["peak_mem_methods"]:
        result["meta"]["notes"].append(
            f"peak_mem_mb is measured differently on A ({'; '.join(a.attrs['peak_mem_methods'])})"
            f" and B ({'; '.join(b.attrs['peak_mem_methods'])}): the memory fit includes the "
            "difference in what each method counts"
        )
    if few_shot:
        sizes = sorted({int(n) for n in few_shot})
        if sizes[0] < 1:
            raise ModelError(
                f"invalid few-shot size: expected sizes >= 1, got {sizes}. Use e.g. 10,25,50,100."
            )
        result["few_shot"] = _few_shot(
            a,
            b,
            result["meta"]["targets"],
            sizes,
            seeds,
            method,
            source_model,
            preset,
            progress,
            n_jobs,
        )
    return _jsonable(result)


# ----------------------------------------------------------------------------------------
# writing reports (Markdown + PNG + JSON)
# ----------------------------------------------------------------------------------------
def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def _x(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3g}x"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [
        "| " + " | ".join(_fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows
    ]
    return lines + [""]


def _figure(nrows: int, ncols: int, size: tuple[float, float]):
    from matplotlib.figure import Figure  # Agg canvas, no pyplot global state

    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _maybe_log(ax: Any, values: Iterable[float], axis: str = "y") -> None:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0], float)
    if len(v) and v.max() / v.min() > _LOG_SPAN:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def _write_json(result: Mapping[str, Any], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_jsonable(result), indent=1, allow_nan=False) + "\n")
    tmp.replace(path)


def _prepare_dir(report_dir: str | Path) -> Path:
    d = Path(report_dir)
    if d.exists() and not d.is_dir():
        raise InputFileError(
            f"report directory is a file: expected a directory path, got {str(d)!r}. "
            "Choose another --report path."
        )
    d.mkdir(parents=True, exist_ok=True)
    return d


def _range_cell(r: Mapping[str, Any]) -> str:
    return f"{_x(r['range'])} ({_x(r['adjusted_range'])})"


def characterization_markdown(result: Mapping[str, Any]) -> str:
    """The Markdown summary of a ``characterize`` result."""
    targets = result["targets"]
    lines = ["# Characterization", ""]
    lines += [
        f"{result['rows_ok']} measured rows with status ok; targets: {', '.join(targets)}.",
        "",
    ]
    lines += _table(
        ["dataset", "rows", "ok rows", "variants", "targets", "median latency CV"],
        [
            [
                d["source"],
                d["rows"],
                d["ok_rows"],
                ", ".join(d["variants"]),
                ", ".join(d["targets"]),
                d["latency_cv_median"],
            ]
            for d in result["datasets"]
        ],
    )
    for d in result["datasets"]:
        if d["peak_mem_methods"]:
            lines.append(f"- {d['source']}: peak memory by {'; '.join(d['peak_mem_methods'])}")
    for note in result["notes"]:
        lines.append(f"- note: {note}")
    lines += [
        "",
        "## Cost range per knob",
        "",
        "Largest over smallest group mean of each knob's values (marginal, over whatever "
        "else was measured), and in brackets the same ratio from a log-additive model that "
        "holds the other knobs fixed (robust to uneven sampling such as a FLOPs cap).",
        "",
    ]
    for scope, sec in result["knob_ranges"].items():
        lines += [f"### {scope}", ""]
        rows = []
        for fam, fam_out in sec["by_family"].items():
            for knob in KNOBS:
                if knob in fam_out:
                    rows.append(
                        [fam, knob]
                        + [
                            _range_cell(fam_out[knob][t]) if t in fam_out[knob] else "-"
                            for t in targets
                        ]
                    )
        if sec["family"]:
            rows.append(
                ["all", "family"]
                + [
                    f"{_x(sec['family'][t]['range'])} ({sec['family'][t]['highest']} / "
                    f"{sec['family'][t]['lowest']})"
                    if t in sec["family"]
                    else "-"
                    for t in targets
                ]
            )
        lines += _table(["family", "knob"] + targets, rows)
        fits = [
            f"{fam}: " + ", ".join(f"{t} {_fmt(v['log_r2'])}" for t, v in o["_model"].items())
            for fam, o in sec["by_family"].items()
        ]
        lines += [f"Log-additive model R2 (log scale): {'; '.join(fits)}.", ""]
    lines += ["## Width asymmetry between targets", ""]
    rows = []
    for scope, fams in result["width_asymmetry"].items():
        for fam, w in fams.items():
            for pair, ratio in w["ratio"].items():
                rows.append([scope, fam, pair, _x(ratio), _x(w["adjusted_ratio"][pair])])
    lines += (
        _table(["scope", "family", "width range ratio", "marginal", "adjusted"], rows)
        if rows
        else ["(only one target: no asymmetry to compute)", ""]
    )
    lines += ["## Per-sample efficiency by batch tier", ""]
    for v, eff in result["efficiency"].items():
        for metric, e in eff.items():
            tiers = list(e["by_tier"])
            lines += [
                f"{v}: {metric} (mean, median) -- worst/best tier mean "
                f"{_x(e['worst_over_best'])}, best tier {e['best_tier']}",
                "",
            ]
            lines += _table(
                ["tier"] + tiers,
                [
                    ["mean"] + [e["by_tier"][k]["mean"] for k in tiers],
                    ["median"] + [e["by_tier"][k]["median"] for k in tiers],
                    ["rows"] + [e["by_tier"][k]["n"] for k in tiers],
                ],
            )
    lines += ["## Energy-latency divergence (SM utilization x batch tier)", ""]
    for v, d in result["divergence"].items():
        if "skipped" in d:
            lines += [f"- {v}: skipped ({d['skipped']})"]
            continue
        b = d["baseline"]
        lines += [
            f"{v}: scale vs the {b['sm_tier']}-SM, batch {b['batch_tier']} cell "
            "(energy scale / latency scale = divergence)",
            "",
        ]
        rows = [
            [s, t, c["n"], _x(c["energy_scale"]), _x(c["latency_scale"]), _x(c["divergence"])]
            for s, cells in d["cells"].items()
            for t, c in cells.items()
        ]
        lines += _table(["SM tier", "batch tier", "rows", "energy", "latency", "divergence"], rows)
        if d["high_over_low_sm_energy"]:
            lines += [
                "High/low SM energy ratio by batch tier: "
                + ", ".join(f"{k}: {_x(x)}" for k, x in d["high_over_low_sm_energy"].items()),
                "",
            ]
    lines.append("")
    lines += ["## Precision and runtime ratios", ""]
    if not result["ratios"]:
        lines += ["(one variant only: give datasets of several precisions/runtimes)", ""]
    for comp in result["ratios"]:
        lines += [
            f"### {comp['name']}",
            "",
            f"{comp['numerator']} / {comp['denominator']} on {comp['pairs']} shared configs;"
            " geometric mean of per-config ratios (< 1: the numerator is cheaper).",
            "",
        ]
        tiers = result["batch_tiers"] + [">256"]
        for t, s in comp["targets"].items():
            present = [k for k in tiers if k in s["by_tier"]]
            rows = [
                ["all", _x(s["overall"].get("geomean")), s["overall"]["n"]]
                + [_x(s["by_tier"][k].get("geomean")) for k in present]
            ]
            for fam, ft in s["by_family_tier"].items():
                rows.append(
                    [fam, _x(s["by_family"][fam].get("geomean")), s["by_family"][fam]["n"]]
                    + [_x(ft[k]["geomean"]) if k in ft else "-" for k in present]
                )
            lines += [
                f"{t}: median {_x(s['overall'].get('median'))}, p10-p90 "
                f"{_x(s['overall'].get('p10'))}-{_x(s['overall'].get('p90'))}, numerator "
                f"cheaper on {_fmt(100 * s['overall'].get('frac_below_1', math.nan))}% of "
                "configs",
                "",
            ]
            lines += _table(["family", "overall", "pairs"] + [f"bs {k}" for k in present], rows)
    lines += [
        "## FLOPs-only R2",
        "",
        "Linear fit target = a + b * GFLOPs (in sample), and in log-log space.",
        "",
    ]
    rows = [
        [v, t, s["n"], s["r2"], s["r2_loglog"]]
        for v, fr in result["flops_r2"].items()
        for t, s in fr.items()
    ]
    lines += _table(["variant", "target", "rows", "R2 linear", "R2 log-log"], rows)
    return "\n".join(lines)


def _plot_characterization(result: Mapping[str, Any], frame: pd.DataFrame, d: Path) -> list[str]:
    targets = result["targets"]
    files = []
    # 1. knob ranges (bars: marginal, dots: adjusted)
    scopes = list(result["knob_ranges"])
    scope = scopes[0]
    fams = list(result["knob_ranges"][scope]["by_family"])
    fig, axes = _figure(len(fams), 1, (9, 3.2 * len(fams)))
    for ax, fam in zip(axes[:, 0], fams):
        fam_out = result["knob_ranges"][scope]["by_family"][fam]
        knobs = [k for k in KNOBS if k in fam_out]
        w = 0.8 / max(1, len(targets))
        for i, t in enumerate(targets):
            xs = np.arange(len(knobs)) + (i - (len(targets) - 1) / 2) * w
            vals = [fam_out[k].get(t, {}).get("range") or np.nan for k in knobs]
            adj = [fam_out[k].get(t, {}).get("adjusted_range") or np.nan for k in knobs]
            ax.bar(xs, vals, w, label=f"{t} (marginal)")
            ax.plot(xs, adj, "k.", ms=8, label="adjusted" if i == 0 else None)
        ax.set_xticks(np.arange(len(knobs)), knobs)
        ax.set_yscale("log")
        ax.axhline(1, color="grey", lw=0.8)
        ax.set_ylabel("max/min group mean")
        ax.set_title(f"cost range per knob -- {scope}, family {fam}")
        ax.legend(fontsize=7)
    fig.savefig(d / "knob_ranges.png", dpi=110)
    files.append("knob_ranges.png")
    # 2. knob effects: group means per knob value
    knobs = ["depth", "width", "batch_size", "resolution"]
    fig, axes = _figure(len(targets), len(knobs), (3.4 * len(knobs), 2.8 * len(targets)))
    groups = list(frame.groupby(["variant", "family"], sort=True))
    colors = {g: f"C{i % 10}" for i, (g, _) in enumerate(groups)}
    for r, t in enumerate(targets):
        for c, k in enumerate(knobs):
            ax = axes[r, c]
            for (v, fam), part in groups:
                m = part.groupby(k)[t].mean().dropna()
                if len(m):
                    ax.plot(
                        m.index.to_numpy(float),
                        m.to_numpy(),
                        "o-",
                        ms=3,
                        color=colors[(v, fam)],
                        label=f"{v} {fam}",
                    )
            _maybe_log(ax, frame[t].dropna())
            if k in ("batch_size", "width"):
                ax.set_xscale("log", base=2)
            ax.set_xlabel(k)
            ax.set_ylabel(f"mean {t}")
    handles = [
        axes[0, 0].plot([], [], "o-", color=colors[g], label=f"{g[0]} {g[1]}")[0] for g, _ in groups
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)), fontsize=7)
    fig.suptitle("group means per knob value (marginal)")
    fig.savefig(d / "knob_effects.png", dpi=110)
    files.append("knob_effects.png")
    # 2b. the same knobs, other knobs held fixed (log-additive model factors)
    scopes = [v for v in result["knob_ranges"] if v != "all"]
    fig, axes = _figure(len(targets), len(knobs), (3.4 * len(knobs), 2.8 * len(targets)))
    for r, t in enumerate(targets):
        for c, k in enumerate(knobs):
            ax = axes[r, c]
            for v in scopes:
                for fam, fam_out in result["knob_ranges"][v]["by_family"].items():
                    factors = fam_out.get(k, {}).get(t, {}).get("adjusted_factors") or {}
                    if factors:
                        xs = [float(x) for x in factors]
                        ax.plot(
                            xs,
                            list(factors.values()),
                            "o-",
                            ms=3,
                            color=colors.get((v, fam), "grey"),
                        )
            ax.set_yscale("log")
            if k in ("batch_size", "width"):
                ax.set_xscale("log", base=2)
            ax.set_xlabel(k)
            ax.set_ylabel(f"{t}: x smallest {k}", fontsize=8)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)), fontsize=7)
    fig.suptitle("cost factor per knob value with the other knobs held fixed (log-additive fit)")
    fig.savefig(d / "knob_effects_adjusted.png", dpi=110)
    files.append("knob_effects_adjusted.png")
    # 3. efficiency by batch tier
    metrics = sorted({m for e in result["efficiency"].values() for m in e})
    if metrics:
        fig, axes = _figure(1, len(metrics), (5 * len(metrics), 3.5))
        for ax, m in zip(axes[0], metrics):
            for v, e in result["efficiency"].items():
                if m in e:
                    tiers = list(e[m]["by_tier"])
                    ax.plot(tiers, [e[m]["by_tier"][k]["mean"] for k in tiers], "o-", label=v)
            ax.set_yscale("log")
            ax.set_xlabel("batch tier")
            ax.set_ylabel(f"{m} (mean)")
            ax.legend(fontsize=7)
        fig.suptitle("per-sample efficiency by batch tier")
        fig.savefig(d / "efficiency.png", dpi=110)
        files.append("efficiency.png")
    # 4. precision/runtime ratios by batch tier
    if result["ratios"]:
        comps = result["ratios"]
        fig, axes = _figure(1, len(comps), (5 * len(comps), 3.6))
        for ax, comp in zip(axes[0], comps):
            for t, s in comp["targets"].items():
                for fam, ft in s["by_family_tier"].items():
                    tiers = list(ft)
                    ax.plot(tiers, [ft[k]["geomean"] for k in tiers], "o-", label=f"{t} {fam}")
            ax.axhline(1, color="grey", lw=0.8, ls="--")
            ax.set_yscale("log")
            ax.set_xlabel("batch tier")
            ax.set_ylabel("geomean ratio")
            ax.set_title(comp["name"], fontsize=9)
            ax.legend(fontsize=6)
        fig.savefig(d / "ratios.png", dpi=110)
        files.append("ratios.png")
    # 5. cost vs GFLOPs
    fig, axes = _figure(1, len(targets), (4.2 * len(targets), 3.6))
    for ax, t in zip(axes[0], targets):
        for v, part in frame.groupby("variant", sort=True):
            sub = part[["gflops", t]].dropna()
            r2 = result["flops_r2"].get(v, {}).get(t, {}).get("r2")
            ax.scatter(sub["gflops"], sub[t], s=4, alpha=0.5, label=f"{v} (R2 {_fmt(r2, 2)})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("GFLOPs per batch")
        ax.set_ylabel(t)
        ax.legend(fontsize=6)
    fig.suptitle("cost vs FLOPs (R2 of the linear FLOPs-only fit)")
    fig.savefig(d / "flops_vs_cost.png", dpi=110)
    files.append("flops_vs_cost.png")
    # 6. divergence heatmap
    for v, dv in result["divergence"].items():
        if "skipped" in dv:
            continue
        sms = list(dv["cells"])
        tiers = _tier_order({b for c in dv["cells"].values() for b in c})
        grid = np.array(
            [[dv["cells"][s].get(b, {}).get("divergence", np.nan) for b in tiers] for s in sms],
            float,
        )
        fig, axes = _figure(1, 1, (6, 3))
        ax = axes[0, 0]
        im = ax.imshow(grid, aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(tiers)), tiers)
        ax.set_yticks(range(len(sms)), sms)
        ax.set_xlabel("batch tier")
        ax.set_ylabel("SM tier")
        fig.colorbar(im, ax=ax, label="energy scale / latency scale")
        name = f"divergence_{v.replace('/', '_')}.png"
        fig.savefig(d / name, dpi=110)
        files.append(name)
    return files


def write_characterization_report(
    datasets: Sequence[str | Path | pd.DataFrame] | str | Path | pd.DataFrame,
    report_dir: str | Path,
) -> dict[str, Any]:
    """Run ``characterize`` and write ``characterization.json``, ``README.md`` and PNGs."""
    result, frame = _characterize(datasets)
    d = _prepare_dir(report_dir)
    files = _plot_characterization(result, frame, d)
    md = characterization_markdown(result)
    md += "\n## Plots\n\n" + "\n".join(f"![{f}]({f})" for f in files) + "\n"
    (d / "README.md").write_text(md)
    result = dict(result) | {"files": ["README.md", "characterization.json", *files]}
    _write_json(result, d / "characterization.json")
    return result


def transfer_markdown(result: Mapping[str, Any]) -> str:
    """The Markdown summary of a ``transfer`` result."""
    meta = result["meta"]
    a, b = meta["a"], meta["b"]
    lines = [
        "# Transfer",
        "",
        f"A = {a['variant']} ({a['source']}, {a['ok_rows']} ok of {a['rows']} rows); "
        f"B = {b['variant']} ({b['source']}, {b['ok_rows']} ok of {b['rows']} rows); "
        f"{meta['shared_configs']} configs measured on both (joined on "
        f"{', '.join(meta['join_columns'])}).",
        "",
    ]
    for note in meta["notes"]:
        lines.append(f"- note: {note}")
    lines += ["", "## B against A", ""]
    rows = [
        [
            t,
            r["n"],
            r["slope"],
            r["intercept"],
            r["r2"],
            r["spearman"],
            f"{_fmt(100 * r['top100_overlap'])}% of {r['top_k']}",
            _x(r["ratio_geomean"]),
            r["loglog_slope"],
        ]
        for t in meta["targets"]
        for r in [result[t]]
    ]
    lines += _table(
        [
            "target",
            "configs",
            "slope",
            "intercept",
            "R2",
            "Spearman",
            "top-k overlap",
            "B/A geomean",
            "log-log slope",
        ],
        rows,
    )
    lines += ["Fit per batch tier (slope, R2):", ""]
    for t in meta["targets"]:
        lines.append(
            f"- {t}: "
            + ", ".join(
                f"bs {k}: {_fmt(s['slope'])} ({_fmt(s['r2'])}, n={s['n']})"
                for k, s in result[t]["by_tier"].items()
            )
        )
    lines.append("")
    fs = result.get("few_shot")
    if fs:
        lines += [
            "## Few-shot calibration",
            "",
            f"Source model: {fs['source_model']}. Method: `{fs['method']}` (see "
            "`carb_nas.report.calibrate`). For each N, N rows of B are drawn at random "
            f"({fs['seeds']} draws); R2 is measured on every other usable row of B. "
            "`source only`: the A model's predictions unchanged; `calibrated`: the A model "
            "adapted with the N rows; `target only`: a model trained on the N rows alone -- "
            "a CostModel of the same preset (no validation/calibration split; it needs at least "
            "20 rows) and a ridge regression of log cost on log FLOPs and the log knobs. "
            "Cells: R2 mean +- std over draws (mean median absolute percentage error).",
            "",
        ]
        rows = []
        for n, run in fs["runs"].items():
            for t in fs["targets"]:
                rows.append(
                    [n, t]
                    + [
                        f"{_fmt(run[k][t]['r2_mean'])} +- {_fmt(run[k][t]['r2_std'], 2)} "
                        f"({_fmt(run[k][t]['mdape_pct_mean'], 2)}%)"
                        for k in ("source_only", "calibrated", "target_only", "target_only_linear")
                    ]
                )
        lines += _table(
            [
                "N",
                "target",
                "source only",
                "calibrated",
                "target only (CostModel)",
                "target only (log-linear)",
            ],
            rows,
        )
        chosen = {n: run["methods_chosen"] for n, run in fs["runs"].items()}
        lines += [f"Calibration maps chosen (count over targets x draws): {chosen}", ""]
        for n, run in fs["runs"].items():
            for e in run["target_only_errors"]:
                lines.append(f"- N={n} target-only failed: {e}")
        for note in fs["notes"]:
            lines.append(f"- note: {note}")
    return "\n".join(lines) + "\n"


def _plot_transfer(
    result: Mapping[str, Any], a: pd.DataFrame, b: pd.DataFrame, d: Path
) -> list[str]:
    targets = result["meta"]["targets"]
    files = []
    shared = _aggregate(a, targets).merge(
        _aggregate(b, targets), on=list(JOIN_COLUMNS), suffixes=("_a", "_b")
    )
    fig, axes = _figure(1, len(targets), (4.2 * len(targets), 4))
    for ax, t in zip(axes[0], targets):
        sub = shared[[f"{t}_a", f"{t}_b", "batch_size"]].dropna()
        sc = ax.scatter(
            sub[f"{t}_a"],
            sub[f"{t}_b"],
            s=5,
            c=np.log2(sub["batch_size"]),
            cmap="viridis",
            alpha=0.6,
        )
        lo = float(min(sub[f"{t}_a"].min(), sub[f"{t}_b"].min()))
        hi = float(max(sub[f"{t}_a"].max(), sub[f"{t}_b"].max()))
        xs = np.geomspace(max(lo, 1e-6), hi, 50)
        r = result[t]
        ax.plot(xs, xs, "k--", lw=0.8, label="B = A")
        ax.plot(
            xs,
            r["slope"] * xs + r["intercept"],
            "r-",
            lw=1,
            label=f"B = {r['slope']:.3g} A {r['intercept']:+.3g} (R2 {r['r2']:.3f})",
        )
        _maybe_log(ax, sub[f"{t}_a"], "x")
        _maybe_log(ax, sub[f"{t}_b"], "y")
        ax.set_xlabel(f"A: {t}")
        ax.set_ylabel(f"B: {t}")
        ax.set_title(f"Spearman {_fmt(r['spearman'])}", fontsize=9)
        ax.legend(fontsize=6)
    fig.colorbar(sc, ax=axes[0, -1], label="log2 batch size")
    fig.suptitle(f"{result['meta']['b']['variant']} vs {result['meta']['a']['variant']}")
    fig.savefig(d / "transfer_scatter.png", dpi=110)
    files.append("transfer_scatter.png")
    fs = result.get("few_shot")
    if fs and fs["runs"]:
        ts = fs["targets"]
        fig, axes = _figure(1, len(ts), (4.2 * len(ts), 3.6))
        ns = [int(n) for n in fs["runs"]]
        for ax, t in zip(axes[0], ts):
            for kind, style, label in (
                ("calibrated", "o-", "A model calibrated with N rows of B"),
                ("target_only", "s--", "CostModel on N rows of B"),
                ("target_only_linear", "^--", "log-linear model on N rows of B"),
                ("source_only", ":", "A model as is"),
            ):
                m = [fs["runs"][str(n)][kind][t]["r2_mean"] for n in ns]
                s = [fs["runs"][str(n)][kind][t]["r2_std"] for n in ns]
                m = [np.nan if v is None else v for v in m]
                s = [np.nan if v is None else v for v in s]
                ax.errorbar(ns, m, yerr=s, fmt=style, capsize=3, label=label)
            ax.set_xscale("log")
            ax.set_xticks(ns, [str(n) for n in ns])
            ax.set_ylim(max(-1.0, ax.get_ylim()[0]), 1.02)
            ax.set_xlabel("target measurements N")
            ax.set_ylabel(f"R2 on held-out B ({t})")
            ax.legend(fontsize=7)
        fig.suptitle("few-shot calibration (mean +- std over draws; R2 below -1 not shown)")
        fig.savefig(d / "few_shot.png", dpi=110)
        files.append("few_shot.png")
    return files


def write_transfer_report(
    dataset_a: str | Path | pd.DataFrame,
    dataset_b: str | Path | pd.DataFrame,
    report_dir: str | Path,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run ``transfer`` and write ``transfer.json``, ``README.md`` and PNGs to ``report_dir``."""
    result = transfer(dataset_a, dataset_b, **kwargs)
    d = _prepare_dir(report_dir)
    files = _plot_transfer(result, load_measurements(dataset_a), load_measurements(dataset_b), d)
    md = transfer_markdown(result)
    md += "\n## Plots\n\n" + "\n".join(f"![{f}]({f})" for f in files) + "\n"
    (d / "README.md").write_text(md)
    result = dict(result)
    result["meta"] = dict(result["meta"]) | {"files": ["README.md", "transfer.json", *files]}
    _write_json(result, d / "transfer.json")
    return result
