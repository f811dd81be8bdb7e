"""Any CNN (issue 14): leave-one-family-out accuracy of the kernel-level predictor, per
modelling choice, and the cost of featurizing + predicting an arbitrary module.

    PYTHONPATH=$PWD python benchmarks/any_cnn.py [--dataset CSV --ops OPS] [--campaign DIR]
        [--modes kernel,network,feature,both] [--json OUT] [--repeats N]
        [--kernel-prior linear|loglinear] [--kernel-geometry 0|1] [--kernel-shared-conv 0|1]
        [--kernel-simd-lanes N] [--kernel-anchor 0|1] [--per-kind] [--kernel-samples KERNELS]
    PYTHONPATH=$PWD python benchmarks/any_cnn.py --speed-only [--repeats N]

For each family group (ResNet, ResNeXt, VGG, DenseNet, MobileNetV2, MobileNetV3,
EfficientNet, RegNet) the per-operator models and the network cascade are trained on all the
other groups' networks and operators (this machine's measurements only) and tested on it.
Per family and mode: latency and peak-memory MAPE, share within +-10 %, R2. ``ms_per_model``:
trace + predict of a module not seen before whose layers are common (warm: see
:func:`ms_per_model`), median CPU time over the families' standard models at 1x3x64x64
(this shared machine: the wall clock and the CV are printed too).
The last line: ``lofo_latency_within10=<median over families> lofo_latency_min_within10=<worst
family> lofo_mem_within10=<median> ms_per_model=<CPU ms> ms_per_model_wall=<ms>`` for the
default mode (``kernel``).

``--speed-only`` times ``ms_per_model`` alone with the default module model (trained on
first use, then cached; no LOFO) and prints one line: ``ms_per_model=<CPU ms>
ms_per_model_wall=<ms> cpu_cv=.. nocache_cpu_ms=.. cold_cpu_ms=.. repeats=N load=..``.

``ms_per_model`` of the default module model (repeats 3, this shared 2-core VM at load
3.0-3.4, the previous code run just before: research/notes/costmodel.md): warm CPU median 136.0 ->
82.9 ms and 133.6 -> 95.1 ms after the per-op predictions moved to one booster call on numpy
arrays, cached per distinct op row. Then the trace (structure key, layer
and block cache, per-op shortcuts; ``--speed-only --repeats 1``, the previous code just
before, load 3.1 / 3.5): 97.0 -> 50.4 ms warm CPU, cold 135.3 -> 79.1 ms; at load 2.2,
82.5 -> 36.1 ms (``--repeats 1``) and 87.3 -> 46.5 ms (``--repeats 3``, CV 1.08).
Then (no frame on the predict path, one booster call, conv / linear meta results from
their shape formula; another, faster VM, ``--speed-only --repeats 3``, old and new alternating
at load 2.5-3.1): 20.4 -> 13.3 and 16.6 -> 12.8 ms warm CPU (research/notes/costmodel.md).

``--per-kind`` also prints, per held-out family and op kind, the predicted / measured op time
of a kernel model that never saw the family (:func:`carb_nas.costmodel.lofo_kind_breakdown`):
where the per-op predictions err (research/notes/costmodel.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "carb_nas" / "data" / "zoo"
DEFAULT_ROWS = DATA / "cpu_torch_fp32_zoo.csv"
DEFAULT_OPS = DATA / "cpu_torch_fp32_zoo_ops.csv.gz"


def _load(args: argparse.Namespace) -> tuple[pd.DataFrame, pd.DataFrame]:
    if args.campaign:
        from carb_nas.measure.campaign import read_ops_campaign

        rows, ops = read_ops_campaign(args.campaign)
        rows = rows[rows.status == "ok"].drop_duplicates("key", keep="last")
        return rows, ops
    return pd.read_csv(args.dataset), pd.read_csv(args.ops)


def ms_per_model(model, repeats: int = 3) -> dict[str, float]:
    """Trace + predict of each family's standard model (1x3x64x64), *warm*: imports done,
    the cost model loaded and used once, and the trace's layer cache holding the layers of
    the *other* standard models only (each timed model is new to the op-table cache and was
    never traced itself: its layers are common, its structure is not; the kernel model's
    per-op predictions likewise hold the other models' ops). Median over models and repeats
    of the process CPU time (``time.process_time``: this machine is shared, the wall clock
    counts other processes' time too) and of the wall clock; the CV of the CPU times; the
    CPU median of the same warm trace with the per-op predictions forgotten
    (``nocache_cpu_ms``: every distinct op through the booster); and the cold CPU median
    (every cache empty)."""
    from carb_nas.features import clear_ops_cache
    from carb_nas.models import build_model
    from carb_nas.space import ZOO_FAMILIES, Config

    names = ["basic", "bottleneck", *ZOO_FAMILIES]
    depth = {"basic": 18, "bottleneck": 50, **ZOO_FAMILIES}
    modules = [build_model(Config(f, depth[f], 1.0, 64, 1), "meta") for f in names]
    shape = (1, 3, 64, 64)
    model.predict_module(modules[0], shape)  # warm: imports, first predict
    kernel = getattr(model, "kernel_", None)

    def forget_predictions() -> None:
        if kernel is not None and hasattr(kernel, "clear_cache"):
            kernel.clear_cache()

    cpu, wall, cold, nocache = [], [], [], []
    for _ in range(repeats):
        for i, m in enumerate(modules):
            clear_ops_cache()  # cold: no table, no layer, no op prediction cached
            forget_predictions()
            t0 = time.process_time()
            model.predict_module(m, shape)
            cold.append((time.process_time() - t0) * 1e3)
            clear_ops_cache()
            for j, other in enumerate(modules):
                if j != i:
                    model.predict_module(other, shape)
            clear_ops_cache(layers=False)  # this module is new; the others' layers stay
            t0, w0 = time.process_time(), time.perf_counter()
            model.predict_module(m, shape)
            cpu.append((time.process_time() - t0) * 1e3)
            wall.append((time.perf_counter() - w0) * 1e3)
            clear_ops_cache(layers=False)  # the same warm trace, every op through the booster
            forget_predictions()
            t0 = time.process_time()
            model.predict_module(m, shape)
            nocache.append((time.process_time() - t0) * 1e3)
    return {
        "cpu_ms": statistics.median(cpu),
        "wall_ms": statistics.median(wall),
        "cpu_cv": statistics.pstdev(cpu) / statistics.mean(cpu),
        "nocache_cpu_ms": statistics.median(nocache),
        "cold_cpu_ms": statistics.median(cold),
    }


def _speed_only(repeats: int) -> None:
    """``ms_per_model`` of the default module model (trained on first use, then cached)."""
    from carb_nas.costmodel.registry import load_default_module_model

    model = load_default_module_model("cpu/torch/fp32")
    t = ms_per_model(model, repeats)
    print(
        f"ms_per_model={t['cpu_ms']:.1f} ms_per_model_wall={t['wall_ms']:.1f} "
        f"cpu_cv={t['cpu_cv']:.2f} nocache_cpu_ms={t['nocache_cpu_ms']:.1f} "
        f"cold_cpu_ms={t['cold_cpu_ms']:.1f} repeats={repeats} "
        f"load={os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default=str(DEFAULT_ROWS))
    p.add_argument("--ops", default=str(DEFAULT_OPS))
    p.add_argument("--campaign", default=None, help="an ops campaign directory instead")
    p.add_argument("--modes", default="kernel,network,feature,both")
    p.add_argument("--preset", default="fast")
    p.add_argument("--json", default=None, help="write the full report here")
    p.add_argument(
        "--reference-normalized",
        action="store_true",
        help="train and test on latencies at the machine's typical speed (only the rows that "
        "timed the speed probe: datasets.reference_normalized)",
    )
    p.add_argument(
        "--speed-only",
        action="store_true",
        help="time ms_per_model alone, with the default module model (no LOFO: seconds)",
    )
    p.add_argument("--repeats", type=int, default=3, help="ms_per_model's repeats")
    p.add_argument(
        "--kernel-samples", default=None,
        help="kernel samples of this dataset's machine, comma-separated campaign directories "
        "(any_cnn_data.py kernels) or exports "
        "(e.g. research/runs/passes/kernels-zen4/kernels.csv.gz): "
        "their single ops join every fold's per-op fit",
    )  # fmt: skip
    p.add_argument(
        "--per-kind",
        action="store_true",
        help="also print, per held-out family and op kind, predicted / measured op time "
        "(lofo_kind_breakdown: one more kernel model per family)",
    )
    p.add_argument("--kernel-prior", default=None, help="linear / loglinear (default: model's)")
    p.add_argument(
        "--kernel-geometry", default=None, choices=("0", "1"),
        help="KernelCostModel geometry features off / on (default: the model's)",
    )  # fmt: skip
    p.add_argument(
        "--kernel-shared-conv", default=None, choices=("0", "1"),
        help="one conv kind for dense / grouped / depthwise convs off / on (default: the model's)",
    )  # fmt: skip
    p.add_argument(
        "--kernel-anchor", default=None, choices=("0", "1"),
        help="scale each training network's op times to sum to its timed latency off / on "
        "(costmodel.anchored_ops; default: the model's, on)",
    )  # fmt: skip
    p.add_argument(
        "--kernel-simd-lanes", default=None, type=int,
        help="fp32 SIMD lanes of the lane-waste prior term of grouped convs (16: AVX-512); "
        "0: no term (default: the model's, 0)",
    )  # fmt: skip
    args = p.parse_args()
    kp: dict[str, Any] = {}  # ModuleCostModel keyword arguments of several types
    if args.kernel_simd_lanes is not None:
        kp["kernel_simd_lanes"] = args.kernel_simd_lanes
    if args.kernel_shared_conv is not None:
        kp["kernel_shared_conv"] = args.kernel_shared_conv == "1"
    if args.kernel_prior is not None:
        kp["kernel_prior"] = args.kernel_prior
    if args.kernel_anchor is not None:
        kp["kernel_anchor"] = args.kernel_anchor == "1"
    if args.kernel_geometry is not None:
        kp["kernel_geometry"] = args.kernel_geometry == "1"

    if args.speed_only:
        _speed_only(args.repeats)
        return

    from carb_nas.costmodel import ModuleCostModel
    from carb_nas.costmodel.evaluation import lofo_report

    sys.path.insert(0, str(ROOT / "research"))  # research helpers
    from carb_nas_research.costmodel_extras import network_tables

    rows, ops = _load(args)
    typical: float | None = None
    if args.reference_normalized:
        from carb_nas.datasets import reference_normalized

        n_all = len(rows)
        rows, normalized_ops, typical = reference_normalized(rows, ops, drop_unprobed=True)
        assert normalized_ops is not None
        ops = normalized_ops
        print(
            f"the {len(rows)} of {n_all} rows that timed the speed probe, normalized to its "
            f"median {typical:.4f} ms",
            file=sys.stderr,
        )
    samples = None
    if args.kernel_samples:
        from any_cnn_data import kernel_table

        samples = kernel_table(args.kernel_samples, typical, rows)
        print(f"{samples['key'].nunique()} kernel samples ({len(samples)} op rows) from "
              f"{args.kernel_samples} in every fold's per-op fit", file=sys.stderr)  # fmt: skip
    modes = args.modes.split(",")
    t0 = time.perf_counter()
    report = lofo_report(
        rows, ops, modes=modes, preset=args.preset, kernel_params=kp, kernel_samples=samples
    )
    print(
        f"lofo over {report['n_rows']} networks in {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    table = pd.DataFrame(report["per_family"])
    pd.set_option("display.width", 200)
    for mode in modes:
        t = table[table["mode"] == mode].drop(columns="mode")
        print(f"\n## mode={mode}")
        print(t.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nsummary:", json.dumps(report["summary"], indent=1))
    cv = rows["latency_cv"].astype(float)
    print(
        f"measurement latency_cv: median {cv.median():.3f}, p90 {cv.quantile(0.9):.3f} "
        f"over {len(rows)} rows (this machine)"
    )

    net, tab = network_tables(rows, ops)
    if args.per_kind:
        from carb_nas_research.costmodel_extras import (
            anchored_ops,
            family_groups,
            lofo_kind_breakdown,
        )

        kkp = {k.removeprefix("kernel_"): v for k, v in kp.items()}
        # the per-op models train on what the module model's would (and are scored on it)
        anchor = kkp.pop("anchor", ModuleCostModel().kernel_anchor)
        groups = dict(zip(net["key"], family_groups(net["family"])))
        kind_ops = anchored_ops(net, tab) if anchor else tab
        br = lofo_kind_breakdown(kind_ops, groups, kkp, kernel_samples=samples)
        br = br[br["share"] >= 0.02].sort_values(["family", "share"], ascending=[True, False])
        print("\n## per held-out family and op kind (kinds >= 2 % of the measured op time)")
        print(br.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    model = ModuleCostModel(preset=args.preset, **kp).fit(net, tab, kernel_samples=samples)
    t = ms_per_model(model, args.repeats)
    ms = t["cpu_ms"]
    print(
        f"ms_per_model (warm, see ms_per_model's docstring): CPU median {ms:.1f} ms (CV "
        f"{t['cpu_cv']:.2f}), wall median {t['wall_ms']:.1f} ms (shared machine, load "
        f"{os.getloadavg()[0]:.1f}); without cached op predictions {t['nocache_cpu_ms']:.1f} ms; "
        f"cold (no cache) CPU median {t['cold_cpu_ms']:.1f} ms"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "ms_per_model": t}, indent=1))
    default = model.mode
    s = report["summary"][default if default in report["summary"] else modes[-1]]
    print(
        f"lofo_latency_within10={s['lofo_latency_within10']:.3f} "
        f"lofo_latency_min_within10={s['lofo_latency_min_within10']:.3f} "
        f"lofo_mem_within10={s['lofo_mem_within10']:.3f} ms_per_model={ms:.1f} "
        f"ms_per_model_wall={t['wall_ms']:.1f}"
    )


if __name__ == "__main__":
    main()
