"""Two-stage deployment screening GPU -> GPU on real, published measurements.

The CARB paper's "Two-Stage Deployment Screening" ranks every candidate with the
source GPU's cost model, re-scores the top K with the target GPU's model, applies the deployment
budget and keeps the Pareto set. No GPU is needed: timm (huggingface/pytorch-image-models,
Apache-2.0) publishes inference benchmarks of about 1,600 models on RTX 3090/4090/5090 and RTX PRO
6000 Max-Q, plus their ImageNet top-1; carb_nas ships them read-only (``carb-nas dataset list
--source published``).

Here the zoo is every model timm benchmarked on the source GPU that has a published top-1 at
the same image size; the costs are CARB cost models (``carb_nas.costmodel.CostModel``) of each
GPU's step time from timm's architecture columns (GMACs, activations, parameters, image size,
batch size). Each model is predicted by cost models fitted WITHOUT its own family's rows (5
folds by family), so the final check against the target GPU's published measurements is out
of sample: it says how many accept/reject decisions and Pareto picks were right.

Default pair: RTX 4090 -> RTX 3090, both PyTorch 2.4.0 / CUDA 12.4, AMP, NCHW, eager (only the
GPU differs); budget 0.25 ms per image (4,000 images/s) on the target.

    python examples/gpu_two_stage_screening.py [--source published/rtx4090/amp-nchw-pt240-cu124]
        [--target published/rtx3090/amp-nchw-pt240-cu124] [--top-k 300] [--budget-ms 0.25]
"""

from __future__ import annotations

import argparse

from carb_nas.published import screen_published
from carb_nas.screen import percent_fewer

SOURCE = "published/rtx4090/amp-nchw-pt240-cu124"
TARGET = "published/rtx3090/amp-nchw-pt240-cu124"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=SOURCE)
    ap.add_argument("--target", default=TARGET)
    ap.add_argument("--top-k", type=int, default=300)
    ap.add_argument("--budget-ms", type=float, default=0.25, help="ms per image on the target")
    ap.add_argument(
        "--quick", action="store_true", help="smaller learners and 3 folds (for the tests)"
    )
    args = ap.parse_args(argv)
    small = {"n_estimators": 40}
    quick = dict(
        folds=3,
        learner_params={"xgb": small, "lgbm": small, "et": {"n_estimators": 30}},
    )

    r = screen_published(
        args.source,
        args.target,
        top_k=args.top_k,
        budgets={"latency_ms_per_image": args.budget_ms},
        quality="imagenet",
        **(quick if args.quick else {}),
    )
    c, k = r.counts, r.check
    n = c["candidates"]

    def line(stage: str, count: int, note: str = "") -> None:
        print(f"{stage:<50} {count:>6,}   {percent_fewer(count, n):>5}% fewer   {note}")

    print(
        f"source {r.source} -> target {r.target} ({r.seconds:.1f} s"
        + (", --quick: smaller learners, 3 folds)" if args.quick else ")")
    )
    print(f"{'zoo: models benchmarked on the source GPU':<50} {c['zoo']:>6,}")
    line("candidates: with a published ImageNet top-1", n)
    line(f"stage 1: top {args.top_k} by source-predicted ms/image", c["shortlisted"])
    line(
        "stage 2: target model, within budget",
        c["within_budget"],
        f"latency_ms_per_image <= {args.budget_ms:g}",
    )
    line("Pareto set (top-1, target ms/image)", c["pareto"], "the models left to measure")
    print(
        f"Spearman rank correlation, source vs target prediction on the shortlist: {r.spearman:.3f}"
    )
    d = k["decisions"]
    print(
        f"\ncheck against the target's published measurements ({k['measured']} of "
        f"{c['shortlisted']} shortlisted models measured there):"
    )
    print(
        f"  budget decisions right {d['right']}, wrong {d['wrong']}: true accept "
        f"{d['true_accept']}, false accept {d['false_accept']}, true reject {d['true_reject']}, "
        f"false reject {d['false_reject']}"
    )
    print(f"  latency per image on the shortlist: MdAPE {k['mdape_pct']:.1f} %")
    print(
        f"  Pareto models within budget when measured: {k['pareto_within_budget_measured']} "
        f"of {c['pareto']}; on the measured front of the shortlist: "
        f"{k['pareto_on_measured_front']} of {c['pareto']}"
    )
    print(
        f"  zoo-wide measured front within budget (a full profiling campaign): "
        f"{k['zoo_front']} models, {k['zoo_front_found']} of them in our Pareto set"
    )
    cols = [
        "entry",
        "weights",
        "top1",
        "source_latency_ms_per_image",
        "latency_ms_per_image",
        "measured_latency_ms_per_image",
    ]
    print()
    print(r.pareto[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
