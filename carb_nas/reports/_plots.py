"""PNG plots of ``characterize`` and ``transfer`` results (matplotlib, Agg, no pyplot state).

Each plotting function returns ``{file name: PNG bytes}``; nothing touches the disk here, so a
report directory is written only once every plot rendered.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.reports._characterize import aggregate
from carb_nas.reports._load import JOIN_COLUMNS, KNOBS, tier_order
from carb_nas.reports._markdown import fmt

__all__ = ["plot_characterization", "plot_transfer"]

LOG_SPAN = 30.0  # use a log axis when values span more than this factor


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _figure(nrows: int, ncols: int, size: tuple[float, float]):
    from matplotlib.figure import Figure  # Agg canvas, no pyplot global state

    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _maybe_log(ax: Any, values: Iterable[float], axis: str = "y") -> None:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0], float)
    if len(v) and v.max() / v.min() > LOG_SPAN:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def plot_characterization(result: Mapping[str, Any], frame: pd.DataFrame) -> dict[str, bytes]:
    targets = result["targets"]
    files: dict[str, bytes] = {}
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
    files["knob_ranges.png"] = _png(fig)
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
    files["knob_effects.png"] = _png(fig)
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
                        knob_values = [float(x) for x in factors]
                        ax.plot(
                            knob_values,
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
    files["knob_effects_adjusted.png"] = _png(fig)
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
        files["efficiency.png"] = _png(fig)
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
        files["ratios.png"] = _png(fig)
    # 5. cost vs GFLOPs
    fig, axes = _figure(1, len(targets), (4.2 * len(targets), 3.6))
    for ax, t in zip(axes[0], targets):
        for v, part in frame.groupby("variant", sort=True):
            sub = part[["gflops", t]].dropna()
            r2 = result["flops_r2"].get(v, {}).get(t, {}).get("r2")
            ax.scatter(sub["gflops"], sub[t], s=4, alpha=0.5, label=f"{v} (R2 {fmt(r2, 2)})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("GFLOPs per batch")
        ax.set_ylabel(t)
        ax.legend(fontsize=6)
    fig.suptitle("cost vs FLOPs (R2 of the linear FLOPs-only fit)")
    files["flops_vs_cost.png"] = _png(fig)
    # 6. divergence heatmap
    for v, dv in result["divergence"].items():
        if "skipped" in dv:
            continue
        sms = list(dv["cells"])
        tiers = tier_order({b for c in dv["cells"].values() for b in c})
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
        files[name] = _png(fig)
    return files


def plot_transfer(result: Mapping[str, Any], a: pd.DataFrame, b: pd.DataFrame) -> dict[str, bytes]:
    targets = result["meta"]["targets"]
    files: dict[str, bytes] = {}
    shared = aggregate(a, targets).merge(
        aggregate(b, targets), on=list(JOIN_COLUMNS), suffixes=("_a", "_b")
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
        ax.set_title(f"Spearman {fmt(r['spearman'])}", fontsize=9)
        ax.legend(fontsize=6)
    fig.colorbar(sc, ax=axes[0, -1], label="log2 batch size")
    fig.suptitle(f"{result['meta']['b']['variant']} vs {result['meta']['a']['variant']}")
    files["transfer_scatter.png"] = _png(fig)
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
        files["few_shot.png"] = _png(fig)
    return files
