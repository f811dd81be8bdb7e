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
    "characterize_loadgen",
    "loadgen_markdown",
    "write_loadgen_characterization",
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


# -- runtimes x precisions x MLPerf scenarios (the quantization study, arXiv:2303.05016) -----
SCENARIO_METRIC = {
    "single-stream": "latency_p90_ms",
    "multi-stream": "latency_p99_ms",
    "offline": "throughput_sps",
}
PLATFORM_ORDER = {
    "torch": ("fp32", "bf16", "int8-dynamic"),
    "onnxruntime": ("fp32", "fp16", "int8", "int8-dynamic"),
    "openvino": ("fp32", "bf16", "fp16", "int8"),
    "litert": ("fp32", "fp16", "int8"),
}


def characterize_loadgen(run_dir: str | Path) -> dict[str, Any]:
    """The runtime x precision x scenario table from a LoadGen run directory (``carb-nas
    loadgen`` / the benchmark).

    Per model and platform: SingleStream p90 (ms), MultiStream p99 (ms per query of 8),
    Offline samples/s, LoadGen's verdict per scenario, agreement with fp32 (relative error,
    top-1 agreement); per runtime, each precision's speedup over that runtime's fp32 (offline
    throughput ratio and single-stream p90 ratio); the fastest platform per model and scenario.
    An INVALID run's figure is kept and flagged.
    """
    from carb_nas.measure.loadgen import loadgen_rows

    rows = loadgen_rows(run_dir)
    if not rows:
        raise InputFileError(
            f"no LoadGen results: expected {str(Path(run_dir) / 'results')!r} to hold run "
            "rows, got none. Run `carb-nas loadgen ... -o DIR` first."
        )
    table: dict[str, dict[str, dict[str, Any]]] = {}
    errors = []
    for r in rows:
        plat = f"{r['runtime']}/{r['precision']}"
        cell = table.setdefault(r["model"], {}).setdefault(
            plat, {"runtime": r["runtime"], "precision": r["precision"]}
        )
        if r.get("status") != "ok":
            errors.append(
                {
                    "model": r["model"],
                    "platform": plat,
                    "scenario": r["scenario"],
                    "error": r.get("error"),
                }
            )
            continue
        metric = SCENARIO_METRIC[r["scenario"]]
        cell[r["scenario"]] = {
            "value": r.get(metric),
            "valid": bool(r.get("valid")),
            "rules": r.get("rules"),
            "queries": r.get("query_count"),
            "early_stopping": r.get("early_stopping_result"),
        }
        for k in ("output_rel_error", "top1_agreement"):
            if r.get(k) is not None:
                cell[k] = r[k]
    speedups, fastest = [], []
    for model, plats in table.items():
        for runtime, precs in PLATFORM_ORDER.items():
            base = plats.get(f"{runtime}/fp32", {})
            for p in precs[1:]:
                other = plats.get(f"{runtime}/{p}")
                if not other:
                    continue
                cell = other
                entry = {"model": model, "runtime": runtime, "precision": p}
                b_off, c_off = (base.get("offline") or {}), (cell.get("offline") or {})
                if b_off.get("value") and c_off.get("value"):
                    entry["offline_speedup"] = c_off["value"] / b_off["value"]
                b_ss, c_ss = (base.get("single-stream") or {}), (cell.get("single-stream") or {})
                if b_ss.get("value") and c_ss.get("value"):
                    entry["single_stream_speedup"] = b_ss["value"] / c_ss["value"]
                speedups.append(entry)
        for scenario, metric in SCENARIO_METRIC.items():
            cands = [
                (p, c[scenario]["value"])
                for p, c in plats.items()
                if c.get(scenario, {}).get("value")
            ]
            if cands:
                pick = (max if metric == "throughput_sps" else min)(cands, key=lambda t: t[1])
                fastest.append(
                    {
                        "model": model,
                        "scenario": scenario,
                        "platform": pick[0],
                        "value": pick[1],
                        "metric": metric,
                    }
                )
    fingerprints = sorted({r.get("fingerprint", "") for r in rows if r.get("status") == "ok"})
    p90_path = Path(run_dir) / "p90.json"
    import json as _json

    p90 = _json.loads(p90_path.read_text()) if p90_path.exists() else []
    return jsonable(
        {
            "run_dir": str(run_dir),
            "runs": len(rows),
            "ok": sum(r.get("status") == "ok" for r in rows),
            "valid": sum(bool(r.get("valid")) for r in rows),
            "rules": sorted({str(r.get("rules")) for r in rows}),
            "table": table,
            "speedups": speedups,
            "fastest": fastest,
            "errors": errors,
            "p90_check": p90,
            "cpu_model": sorted({_json.loads(f).get("cpu_model") for f in fingerprints if f}),
        }
    )


def _f(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:.{digits}g}"


def loadgen_markdown(result: Mapping[str, Any], reading: str | None = None) -> str:
    """The runtime x precision x scenario table as Markdown (INVALID runs marked with a dagger)."""
    out = ["# Runtimes x precisions x MLPerf scenarios on this machine", ""]
    out.append(
        f"{result['runs']} LoadGen runs ({result['ok']} measured, {result['valid']} VALID by "
        f"LoadGen), rules {', '.join(result['rules'])}; CPU: {', '.join(result['cpu_model'])}. "
        "One thread, batch 1 inputs, seeded N(0,1) samples, random weights (seed 0). "
        "† = LoadGen said INVALID (figure kept). How busy the machine was while it measured "
        "(and so how far to trust small differences) is in the reading below."
    )
    out += ["", "## Latency and throughput", ""]
    out.append(
        "| model | platform | SingleStream p90 ms | MultiStream p99 ms (8/query) | "
        "Offline samples/s | rel. error vs fp32 | top-1 agreement |"
    )
    out.append("|---|---|---|---|---|---|---|")
    for model, plats in result["table"].items():
        for runtime, precs in PLATFORM_ORDER.items():
            for p in precs:
                c = plats.get(f"{runtime}/{p}")
                if not c:
                    continue
                cells = []
                for s in SCENARIO_METRIC:
                    v = c.get(s)
                    cells.append("—" if not v else _f(v["value"]) + ("" if v["valid"] else " †"))
                out.append(
                    f"| {model} | {runtime}/{p} | " + " | ".join(cells) + f" | "
                    f"{_f(c.get('output_rel_error'), 2)} | {_f(c.get('top1_agreement'), 3)} |"
                )
    out += ["", "## Speedup over the same runtime's fp32", ""]
    out.append("| model | runtime | precision | Offline throughput × | SingleStream p90 × |")
    out.append("|---|---|---|---|---|")
    for s in result["speedups"]:
        out.append(
            f"| {s['model']} | {s['runtime']} | {s['precision']} | "
            f"{_f(s.get('offline_speedup'))} | {_f(s.get('single_stream_speedup'))} |"
        )
    out += ["", "## Fastest platform per model and scenario", ""]
    out.append("| model | scenario | platform | value |")
    out.append("|---|---|---|---|")
    for f in result["fastest"]:
        out.append(
            f"| {f['model']} | {f['scenario']} | {f['platform']} | "
            f"{_f(f['value'])} {f['metric'].split('_')[-1]} |"
        )
    if result["errors"]:
        out += ["", "## Not measured", ""]
        out += [
            f"- {e['model']} {e['platform']} {e['scenario']}: {e['error']}"
            for e in result["errors"]
        ]
    if result["p90_check"]:
        out += ["", "## LoadGen SingleStream p90 against the profiler's p90", ""]
        out.append("| config | runtime | profiler p90 ms (CV) | LoadGen p90 ms | ratio |")
        out.append("|---|---|---|---|---|")
        for r in result["p90_check"]:
            out.append(
                f"| {r['model']} | {r['runtime']} | {_f(r['profiler_p90_ms'])} "
                f"({_f(r['profiler_cv'], 2)}) | {_f(r['loadgen_p90_ms'])} | "
                f"{_f(r['ratio_p90'])} |"
            )
        ratios = [r["ratio_p90"] for r in result["p90_check"]]
        out.append(
            f"\nMedian ratio {np.median(ratios):.3f} (min {min(ratios):.3f}, "
            f"max {max(ratios):.3f})."
        )
    if reading:
        out += ["", reading.strip()]
    return "\n".join(out) + "\n"


def plot_loadgen(result: Mapping[str, Any]) -> bytes:
    """One PNG: offline throughput and single-stream p90 per model and platform (log axes)."""
    from carb_nas.reports._plots import _figure, _png

    models = list(result["table"])
    plats = [f"{r}/{p}" for r, ps in PLATFORM_ORDER.items() for p in ps]
    fig, axes = _figure(1, 2, (14, 4.5))
    w = 0.8 / max(1, len(models))
    for ax, scenario, label in (
        (axes[0, 0], "offline", "Offline samples/s (higher is better)"),
        (axes[0, 1], "single-stream", "SingleStream p90 ms (lower is better)"),
    ):
        for i, m in enumerate(models):
            vals = [
                (result["table"][m].get(p, {}).get(scenario) or {}).get("value") or np.nan
                for p in plats
            ]
            ax.bar(np.arange(len(plats)) + (i - (len(models) - 1) / 2) * w, vals, w, label=m)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(plats)), plats, rotation=70, fontsize=7)
        ax.set_title(label, fontsize=9)
    axes[0, 0].legend(fontsize=7)
    return _png(fig)


def write_loadgen_characterization(
    run_dir: str | Path, markdown_path: str | Path, reading: str | Path | None = None
) -> dict[str, Any]:
    """Write ``<name>.md``, ``<name>.png`` and ``<name>.json`` (``markdown_path`` names them)."""
    from carb_nas._io import atomic_write, atomic_write_json, atomic_write_text

    md_path = Path(markdown_path)
    text = Path(reading).read_text() if reading is not None else None
    result = characterize_loadgen(run_dir)
    png = plot_loadgen(result)
    md = loadgen_markdown(result, text) + f"\n![the table's plot]({md_path.stem}.png)\n"
    md_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(md_path.with_suffix(".png"), lambda tmp: tmp.write_bytes(png))
    atomic_write_json(md_path.with_suffix(".json"), result)
    atomic_write_text(md_path, md)
    return dict(result) | {"files": [md_path.name, md_path.stem + ".png", md_path.stem + ".json"]}
