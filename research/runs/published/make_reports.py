"""Regenerate the published-platform figures in docs/: cost-model R2 per platform and the
cross-GPU transfer reports.

    python research/runs/published/make_reports.py            # about 3 minutes on 2 cores

Writes research/runs/published/costmodels.json (``carb-nas published evaluate`` on every published
benchmark, fast preset, 5 folds) and research/runs/transfer/published_<A>__to__<B>/ (``carb-nas
transfer A B --report ...``, few-shot 10,25,50,100 with 5 draws), and prints one summary line
per figure; the reading is in research/runs/transfer/published_gpus.md and
research/runs/published/README.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from carb_nas.datasets import list_published
from carb_nas.published import evaluate_published
from carb_nas.reports import write_published_transfer_report

DOCS = Path(__file__).resolve().parents[1]
PAIRS = [
    # (A, B, what differs)
    (
        "published/rtx5090/amp-nchw-pt291-cu130",
        "published/rtx3090/amp-nchw-pt240-cu124",
        "GPU (and PyTorch 2.9.1 vs 2.4.0): newest to oldest card, as CARB's 5090 -> 3080",
    ),
    (
        "published/rtx4090/amp-nchw-pt240-cu124",
        "published/rtx3090/amp-nchw-pt240-cu124",
        "GPU only (same PyTorch 2.4.0, CUDA 12.4)",
    ),
    (
        "published/rtx4090/amp-nchw-pt291-cu128",
        "published/rtx5090/amp-nchw-pt291-cu130",
        "GPU (CUDA 12.8 vs 13.0)",
    ),
    (
        "published/rtx4090/amp-nchw-pt291-cu128",
        "published/pro6000maxq/amp-nchw-pt291-cu130",
        "GPU (CUDA 12.8 vs 13.0; batch 1024 vs 2048)",
    ),
    (
        "published/rtx4090/amp-nchw-pt291-cu128",
        "published/rtx4090/amp-nchw-pt291-cu128-dynamo",
        "eager vs torch.compile on the same GPU",
    ),
    (
        "published/rtx3090/amp-nchw-pt240-cu124",
        "published/rtx3090/amp-nhwc-pt240-cu124",
        "memory format NCHW vs NHWC on the same GPU",
    ),
    (
        "published/rtx4090/amp-nchw-pt240-cu124",
        "published/i9_10940x/fp32-nchw-pt240-cpu-dynamo",
        "GPU (AMP, batch 1024) to CPU (fp32, batch 1, torch.compile)",
    ),
]


def _dir(a: str, b: str) -> Path:
    def short(x: str) -> str:
        return x.removeprefix("published/").replace("/", "_")

    return DOCS / "transfer" / f"published_{short(a)}__to__{short(b)}"


def main() -> None:
    only = sys.argv[1:]  # "costmodels" or "transfer" to redo one part
    if not only or "costmodels" in only:
        results = []
        for item in list_published():
            if item["kind"] != "benchmark" or item["platform"].endswith("pt221-cpu-dynamo"):
                continue  # the PyTorch 2.2.1 CPU file has no MAC or activation counts
            r = evaluate_published(item["platform"], folds=5, preset="fast", seed=0)
            results.append(r)
            c = {s: r[s]["costmodel"]["r2"] for s in ("random", "family")}
            print(
                f"{item['platform']}: R2 random {c['random']:.3f} family {c['family']:.3f} "
                f"flops {r['random']['flops_linear']['r2']:.3f}",
                flush=True,
            )
        (DOCS / "published" / "costmodels.json").write_text(json.dumps(results, indent=1) + "\n")
    if not only or "transfer" in only:
        summary = []
        for a, b, what in PAIRS:
            r = write_published_transfer_report(
                a, b, _dir(a, b), few_shot=[10, 25, 50, 100], repeats=5, seed=0
            )
            lat = r["latency_ms_per_image"]
            fs = r["few_shot"]["runs"]
            summary.append(
                {
                    "a": a,
                    "b": b,
                    "differs": what,
                    "dir": _dir(a, b).name,
                    **{
                        k: lat[k]
                        for k in (
                            "n",
                            "slope",
                            "intercept",
                            "r2",
                            "spearman",
                            "top100_overlap",
                            "ratio_median",
                            "ratio_p10_p90",
                            "loglog_slope",
                        )
                    },
                    "few_shot": {
                        n: {
                            k: fs[n][k]["latency_ms_per_image"]
                            for k in (
                                "source_only",
                                "calibrated",
                                "target_only",
                                "target_only_linear",
                            )
                        }
                        for n in fs
                    },
                }
            )
            print(
                f"{a} -> {b}: slope {lat['slope']:.3f} median ratio {lat['ratio_median']:.3f} "
                f"Spearman {lat['spearman']:.3f} top100 {lat['top100_overlap']:.2f}",
                flush=True,
            )
        (DOCS / "transfer" / "published_gpus.json").write_text(json.dumps(summary, indent=1) + "\n")


def tables() -> str:
    """The Markdown tables of research/runs/published/README.md, from the two JSON files."""
    rows = json.loads((DOCS / "published" / "costmodels.json").read_text())
    out = [
        "| platform | models | families | R2 random | R2 by family | FLOPs-only R2 random / by "
        "family | log R2 random / by family (FLOPs power law) | MdAPE random / by family |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cr, cf = r["random"]["costmodel"], r["family"]["costmodel"]
        fr, ff = r["random"]["flops_linear"], r["family"]["flops_linear"]
        lr, lf = r["random"]["flops_loglog"], r["family"]["flops_loglog"]
        out.append(
            f"| `{r['platform']}` | {r['rows']} | {r['families']} | {cr['r2']:.3f} | "
            f"{cf['r2']:.3f} | {fr['r2']:.3f} / {ff['r2']:.3f} | {cr['r2_log']:.3f} / "
            f"{cf['r2_log']:.3f} ({lr['r2_log']:.3f} / {lf['r2_log']:.3f}) | "
            f"{cr['mdape_pct']:.1f} % / {cf['mdape_pct']:.1f} % |"
        )
    pairs = json.loads((DOCS / "transfer" / "published_gpus.json").read_text())
    out += [
        "",
        "| A -> B | what differs | models | slope | B/A median (p10-p90) | log-log slope | R2 | "
        "Spearman | top-100 overlap | few-shot N=25: calibrated / CostModel on N / source as is "
        "(R2; MdAPE) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        fs = p["few_shot"]["25"]

        def cell(k: str, fs: dict = fs) -> str:
            v = fs[k]
            r2 = "n/a" if v["r2_mean"] is None else f"{v['r2_mean']:.3f}"
            return f"{r2}; {v['mdape_pct_mean']:.0f} %"

        lo, hi = p["ratio_p10_p90"]
        out.append(
            f"| [{p['a'].removeprefix('published/')} -> {p['b'].removeprefix('published/')}]"
            f"({p['dir']}/README.md) | {p['differs']} | {p['n']} | {p['slope']:.3f} | "
            f"{p['ratio_median']:.3f} ({lo:.2f}-{hi:.2f}) | {p['loglog_slope']:.3f} | "
            f"{p['r2']:.3f} | {p['spearman']:.3f} | {100 * p['top100_overlap']:.0f} % | "
            f"{cell('calibrated')} / {cell('target_only')} / {cell('source_only')} |"
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["tables"]:
        print(tables())
        sys.exit(0)
    main()
