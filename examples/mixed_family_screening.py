"""Two-stage screening over a space of mixed CNN families (ResNet, MobileNet, VGG, DenseNet,
EfficientNet, RegNet, ResNeXt), printing every stage's count.

Stage 1 ranks every candidate of ``search_spaces/zoo.toml`` by the PyTorch-CPU model's
predicted latency; stage 2 re-scores the top K with the ONNX Runtime CPU model, keeps those
within the budgets and reduces them to a Pareto set (latency per image vs peak memory).
Configs of the non-ResNet families are featurized by tracing their modules on the meta device
(cached per config). ``load_predictor("cpu/torch/fp32")`` predicts them with the platform's
kernel-level module model (every built-in family); the ONNX Runtime platform has no module
model and its cascade was trained on ResNets only, so its numbers for the other families are
rough until a model is trained on them (a warning says so). Both apply this machine's
calibration of their platform when ``carb-nas calibrate PLATFORM`` has made one.

    python examples/mixed_family_screening.py [--space zoo] [--top-k 40]

Last line: ``candidates=<n> shortlisted=<n> within_budget=<n> pareto=<n> families=<n>``.
"""

from __future__ import annotations

import argparse
import time
import warnings

from carb_nas import load_predictor
from carb_nas.screen import screen
from carb_nas.space import load_space

BUDGETS = {"latency_ms": 40.0, "peak_mem_mb": 300.0}
OBJECTIVES = ("latency_ms_per_image", "peak_mem_mb")
PLATFORMS = {"source": "cpu/torch/fp32", "target": "cpu/onnxruntime/fp32"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="zoo", help="a space TOML or a bundled name")
    ap.add_argument("--top-k", type=int, default=40)
    args = ap.parse_args()

    space = load_space(args.space)
    source = load_predictor(PLATFORMS["source"])
    target = load_predictor(PLATFORMS["target"])
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = screen(space, source, target, rank_by="latency_ms", top_k=args.top_k,
                   budgets=BUDGETS, objectives=OBJECTIVES)  # fmt: skip
    for w in {str(w.message) for w in caught}:
        print(f"warning: {w}")
    print(f"stage 1: {source.provenance.describe()}; stage 2: {target.provenance.describe()}")
    c = r.counts
    print(f"space {space.name!r}: {len(space.families)} families, {c['candidates']:,} candidates")
    print(f"stage 1: top {c['shortlisted']} by {PLATFORMS['source']} predicted latency")
    print(f"stage 2: {c['within_budget']} within {BUDGETS} on {PLATFORMS['target']}")
    print(f"pareto (latency per image vs peak memory): {c['pareto']} configs")
    for row in r.pareto.itertuples(index=False):
        print(f"  {row.family:<20} depth {row.depth:<4} width {row.width:<5g} res "
              f"{row.resolution:<4} batch {row.batch_size:<3} {row.latency_ms:8.2f} ms "
              f"{row.peak_mem_mb:8.1f} MB")  # fmt: skip
    families = r.shortlist["family"].nunique()
    print(f"screened in {time.perf_counter() - t0:.1f} s; the shortlist spans {families} families")
    print(
        f"candidates={c['candidates']} shortlisted={c['shortlisted']} "
        f"within_budget={c['within_budget']} pareto={c['pareto']} families={families}"
    )


if __name__ == "__main__":
    main()
