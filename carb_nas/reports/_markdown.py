"""Markdown summaries of ``characterize`` and ``transfer`` results."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from carb_nas.reports._load import KNOBS

__all__ = ["characterization_markdown", "transfer_markdown", "fmt"]


def fmt(v: Any, digits: int = 3) -> str:
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
        "| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows
    ]
    return lines + [""]


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
            f"{fam}: " + ", ".join(f"{t} {fmt(v['log_r2'])}" for t, v in o["_model"].items())
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
                f"cheaper on {fmt(100 * s['overall'].get('frac_below_1', math.nan))}% of "
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
            f"{fmt(100 * r['top100_overlap'])}% of {r['top_k']}",
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
                f"bs {k}: {fmt(s['slope'])} ({fmt(s['r2'])}, n={s['n']})"
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
            "`carb_nas.costmodel.calibrate`). For each N, N rows of B are drawn at random "
            f"({fs['seeds']} draws); R2 is measured on every other usable row of B. "
            "`source only`: the A model's predictions unchanged; `calibrated`: the A model "
            "adapted with the N rows; `target only`: a model trained on the N rows alone -- "
            "a CostModel of the same preset (no validation/calibration split; it needs at least "
            "20 rows) and a ridge regression of log cost on log FLOPs and the log knobs. "
            "Cells: R2 mean +- std over draws (mean median absolute percentage error).",
            "",
        ]
        kinds = ["source_only", "calibrated", "target_only", "target_only_linear"]
        heads = ["source only", "calibrated", "target only (CostModel)", "target only (log-linear)"]
        if fs.get("prior_pairs"):
            lines += [
                f"Transfer prior (`--prior`) learned on: {', '.join(fs['prior_pairs'])}; "
                "`calibrated` uses it, `calibrated without prior` is the same draw without it.",
                "",
            ]
            kinds.append("calibrated_without_prior")
            heads.append("calibrated without prior")
        rows = []
        for n, run in fs["runs"].items():
            for t in fs["targets"]:
                rows.append(
                    [n, t]
                    + [
                        f"{fmt(run[k][t]['r2_mean'])} +- {fmt(run[k][t]['r2_std'], 2)} "
                        f"({fmt(run[k][t]['mdape_pct_mean'], 2)}%)"
                        for k in kinds
                    ]
                )
        lines += _table(["N", "target", *heads], rows)
        chosen = {n: run["methods_chosen"] for n, run in fs["runs"].items()}
        lines += [f"Calibration maps chosen (count over targets x draws): {chosen}", ""]
        for n, run in fs["runs"].items():
            for e in run["target_only_errors"]:
                lines.append(f"- N={n} target-only failed: {e}")
        for note in fs["notes"]:
            lines.append(f"- note: {note}")
    return "\n".join(lines) + "\n"
