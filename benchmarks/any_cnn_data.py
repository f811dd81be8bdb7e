"""Measure the multi-family dataset of issue 14 on this machine (torch fp32, one thread, fresh
processes), with the per-operator table of the same runs; resumable.

    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py measure --out CAMPAIGN [--resnet 300]
        [--per-family 80] [--max-gflops 2]
    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py measure --out CAMPAIGN_RE
        --remeasure-from CAMPAIGN --cv-above 0.10
    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py export CAMPAIGN [CAMPAIGN_RE ...]
        [--name zoo-<machine>] [--pick lowest-cv|median]
    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py measure --out CAMPAIGN2
        --specs research/runs/passes/<name>/specs.json.gz --skip-in carb_nas/data/zoo/<file>.csv
    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py kernels --out KERNELS [--n 300]
        [--seed 0] [--kind gconv|linear|dwconv|act|conv|wideconv] [--min-weight-mb 0]
        [--max-weight-mb 450] [--batches 1,2,4,8,16] [--reference]
    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py export-kernels KERNELS|K.csv.gz [...]
        --out K2.csv.gz

``measure`` draws the configs (seeded): ``--resnet`` ResNet configs among the shipped
``cpu_torch_fp32`` ones at batch <= 16 (same keys, so the two machines pair up), and
``--per-family`` configs of each built-in family of :mod:`carb_nas.models` (a space-filling
draw over width, depth, resolution 32-128 and batch 1-16, under ``--max-gflops`` per batch),
then measures each config not yet in CAMPAIGN in a fresh forked process
(``carb_nas.measure._ops.run_ops_campaign``). Kill it at any time; the same command continues.
A second pass (``--remeasure-from``) measures the rows whose CV is above ``--cv-above`` (or whose
``cpu_per_wall`` is below 0.9: timed while another process held the core) again;
``export`` keeps each config's lowest-CV row among the passes (``--pick median``: the row of
its median probe-normalized latency, with three or more passes) and writes
``carb_nas/data/zoo/cpu_torch_fp32_zoo.csv`` (one row per config, the dataset schema) and
``..._ops.csv.gz`` (one row per operator). ``--name`` writes another machine's dataset
(``cpu_torch_fp32_<name>.csv``) beside the shipped one; export refuses passes of two machines
and writing over a file of another machine. A later sitting continues a shipped draw
(``--specs``, skipping the exported configs with ``--skip-in``) and exports the old CSV and
the new campaign together (``export OLD.csv CAMPAIGN2 --name ...``; a CSV part reads its
``_ops.csv.gz`` beside it); ``--remeasure-from`` takes an exported CSV too, ``--sample N``
re-measures a seeded N of its rows (``--cv-above -1``: any of them; a repeatability pass for
``benchmarks/repeatability.py``), and ``--skip-in`` repeats. ``--reference`` times the
machine-speed probe in every row (``reference_ms``, ``ops_reference_ms``; docs/measurement.md).

``kernels`` measures *kernel samples* the same way: single grouped convolutions (or, with
``--kind linear``, fully connected layers; ``dwconv`` depthwise convolutions; ``act``
activation and pooling layers; ``conv`` dense convolutions at any channel count;
``wideconv`` dense convolutions of 4+ MB of weights at 1-8 px, at every batch) drawn over
a kernel space that the families' networks leave mostly empty (channels per group not a
multiple of 8, 1-8 px, GEMVs of 100+ MB of weights, an activation only one family uses, a
channel count only one family has); ``export-kernels`` writes them as one CSV, a row per
sample, which ``benchmarks/any_cnn.py --kernel-samples`` adds to every fold's per-op fit
(research/notes/costmodel.md, stops 36-39).
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "carb_nas" / "data" / "datasets"
SHIPPED = DATA / "cpu_torch_fp32.csv"
OUT_ROWS = ROOT / "carb_nas" / "data" / "zoo" / "cpu_torch_fp32_zoo.csv"
OUT_OPS = ROOT / "carb_nas" / "data" / "zoo" / "cpu_torch_fp32_zoo_ops.csv.gz"
RESNET = ("basic", "bottleneck")
BATCHES = (1, 2, 3, 4, 6, 8, 12, 16)
RESOLUTIONS = (32, 40, 48, 56, 64, 80, 96, 112, 128)


def _config(spec: dict):
    from carb_nas.space import Config

    return Config(
        spec["family"],
        int(spec["depth"]),
        float(spec["width"]),
        int(spec["resolution"]),
        int(spec["batch_size"]),
    )


def build(spec: dict):
    """(module, input shape) of a spec: a config of :mod:`carb_nas.models`."""
    from carb_nas.models import build_model

    c = _config(spec)
    return build_model(c), (c.batch_size, 3, c.resolution, c.resolution)


def resnet_specs(n: int, seed: int = 0) -> list[dict]:
    d = pd.read_csv(SHIPPED)
    d = d[(d.status == "ok") & (d.batch_size <= 16)]
    d = d.sample(n=min(n, len(d)), random_state=seed) if n < len(d) else d
    cols = ["key", "family", "depth", "width", "resolution", "batch_size"]
    return [dict(zip(cols, r)) for r in d[cols].itertuples(index=False)]


WIDTHS = (0.25, 0.35, 0.5, 0.75, 1.0, 1.25, 1.5)


def _depths(family: str, standard: int) -> list[int]:
    """The depths of ``family`` between ~0.4x and ~1.3x its standard one that it accepts."""
    from carb_nas.space import stage_layout

    out = []
    for d in range(max(2, int(standard * 0.4)), int(standard * 1.3) + 2):
        try:
            stage_layout(family, d)
        except Exception:  # noqa: BLE001 - a depth the family refuses
            continue
        out.append(d)
    return out or [standard]


def family_specs(
    per_family: int,
    max_gflops: float,
    seed: int = 0,
    resolutions: tuple[int, ...] = RESOLUTIONS,
    batches: tuple[int, ...] = BATCHES,
) -> list[dict]:
    """``per_family`` configs of each built-in family group beyond ResNet, interleaved across
    groups (a stopped campaign still covers every group): variant, depth and width drawn
    uniformly, resolution stratified over ``resolutions`` (32-128), batch drawn among
    ``batches`` under ``max_gflops`` per batch (FLOPs from the meta-device trace of batch 1)."""
    from carb_nas.features import trace_features
    from carb_nas.models import build_model
    from carb_nas.space import ZOO_FAMILIES, Config, family_group

    rng = np.random.default_rng(seed)
    groups: dict[str, list[str]] = {}
    for f in ZOO_FAMILIES:
        groups.setdefault(family_group(f), []).append(f)
    depths = {f: _depths(f, d) for f, d in ZOO_FAMILIES.items()}
    per_group: dict[str, list[dict]] = {g: [] for g in groups}
    seen: set[str] = set()
    for g, fams in groups.items():
        tries = 0
        while len(per_group[g]) < per_family and tries < per_family * 10:
            tries += 1
            f = fams[rng.integers(len(fams))]
            d = int(depths[f][rng.integers(len(depths[f]))])
            w = float(WIDTHS[rng.integers(len(WIDTHS))])
            res = int(resolutions[(len(per_group[g]) + rng.integers(2)) % len(resolutions)])
            try:
                one = Config(f, d, w, res, 1)
                gf1 = trace_features(build_model(one, "meta"), (1, 3, res, res))["flops"] / 1e9
            except Exception:  # noqa: BLE001 - a combination the family refuses
                continue
            ok = [b for b in batches if b * gf1 <= max_gflops]
            if not ok:
                continue
            b = int(ok[rng.integers(len(ok))])
            c = Config(f, d, w, res, b)
            if c.key in seen:
                continue
            seen.add(c.key)
            per_group[g].append(
                {
                    "key": c.key,
                    "family": f,
                    "depth": d,
                    "width": w,
                    "resolution": res,
                    "batch_size": b,
                }
            )
    out = []
    for i in range(per_family):
        out += [v[i] for v in per_group.values() if i < len(v)]
    return out


def interleave(families: list[dict], resnets: list[dict]) -> list[dict]:
    """The ResNet specs spread evenly through the (already interleaved) family specs, so a
    campaign stopped at any point holds every group in proportion."""
    n = len(families) + len(resnets)
    slots = {round(i * n / len(resnets)) for i in range(len(resnets))} if resnets else set()
    fam, res = iter(families), iter(resnets)
    return [next(res) if i in slots else next(fam) for i in range(n)]


def measure(args: argparse.Namespace) -> None:
    import json

    from carb_nas.measure import MIN_CPU_PER_WALL

    cached = Path(args.out) / "specs.json"  # the draw, kept so a resume does not redo it
    if args.remeasure_from:
        rows, _ = read_part(args.remeasure_from, with_ops=False)
        noisy = rows.latency_cv > args.cv_above
        if "cpu_per_wall" in rows:  # timed while another process held the core
            noisy |= pd.to_numeric(rows.cpu_per_wall, errors="coerce") < MIN_CPU_PER_WALL
        rows = rows[(rows.status == "ok") & noisy]
        if args.sample is not None:  # a seeded random subset, e.g. a repeatability pass
            rows = rows.sample(n=min(args.sample, len(rows)), random_state=0)
        rows = rows.sort_values("latency_cv", ascending=False)  # the noisiest first
        cols = ["key", "family", "depth", "width", "resolution", "batch_size"]
        specs = [dict(zip(cols, r)) for r in rows[cols].itertuples(index=False)]
        specs = [
            {
                **sp,
                "depth": int(sp["depth"]),
                "width": float(sp["width"]),
                "resolution": int(sp["resolution"]),
                "batch_size": int(sp["batch_size"]),
            }
            for sp in specs
        ]
    elif cached.exists():
        specs = json.loads(cached.read_text())
    elif args.specs:  # a shipped draw (research/runs/passes/...): a later sitting continues it
        specs = json.loads(gzip.decompress(_existing(args.specs, "--specs").read_bytes()))
        Path(args.out).mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(specs))
    else:
        specs = interleave(
            family_specs(args.per_family, args.max_gflops), resnet_specs(args.resnet)
        )
        Path(args.out).mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(specs))
    for part in args.skip_in:  # configs an exported dataset or another campaign already holds
        rows, _ = read_part(part, with_ops=False)  # the keys only: not the large ops table
        have = set(rows.key[rows.status == "ok"])
        specs = [sp for sp in specs if sp["key"] not in have]
    _run_campaign(specs, build, args.out, args.reference, "specs")


def _run_campaign(specs: list[dict], build_spec, out: str, reference: bool, what: str) -> None:
    from carb_nas.measure.campaign import run_ops_campaign

    print(f"{len(specs)} {what}", file=sys.stderr, flush=True)
    n = run_ops_campaign(
        specs,
        build_spec,
        out,
        progress=lambda s: print(s, file=sys.stderr, flush=True),
        reference=reference,
    )
    print(f"measured {n} now", file=sys.stderr)


# --- kernel samples: single grouped convolutions, no family --------------------------------
KERNEL_CPG = (2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 14, 16, 20, 22, 24, 32, 40, 48, 64, 80, 96)
KERNEL_GROUPS = (2, 4, 8, 16, 32, 64)
# the families' grouped convs sit mostly in the last stages: 1-8 px at 32-128 px inputs
KERNEL_HW = (1, 2, 3, 4, 5, 6, 7, 8, 10, 14, 16, 28, 32, 56)
KERNEL_BATCH = (1, 2, 4, 8, 16)


def _conv_flops(spec: dict) -> int:
    """FLOPs of a conv sample (``build_kernel``'s padding ``kernel // 2``)."""
    k, hw = spec["kernel"], spec["hw"]
    h_out = (hw + 2 * (k // 2) - k) // spec["stride"] + 1
    per_group_in = spec["c_in"] // spec["groups"]
    return 2 * spec["batch_size"] * spec["c_out"] * h_out * h_out * per_group_in * k * k


def _distinct_specs(n: int, draw_one) -> list[dict]:
    """``n`` distinct specs from ``draw_one()`` (a spec, or None for a draw out of range),
    each keyed by the hash of its fields."""
    import hashlib
    import json

    out: dict[str, dict] = {}
    while len(out) < n:
        spec = draw_one()
        if spec is not None:
            key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
            out.setdefault(key, {"key": key, **spec})
    return list(out.values())


def kernel_specs(n: int, max_gflops: float = 0.5, seed: int = 0) -> list[dict]:
    """``n`` single grouped convolutions drawn uniformly over channels per group (odd and
    even, as ResNeXt's width multipliers give them), groups, spatial size, batch, kernel 1/3
    and stride 1/2, each under ``max_gflops``: the kernel space nn-Meter samples instead of
    learning it from the families' networks (which leave most of it empty)."""
    rng = np.random.default_rng(seed)

    def one() -> dict | None:
        cpg = int(KERNEL_CPG[rng.integers(len(KERNEL_CPG))])
        g = int(KERNEL_GROUPS[rng.integers(len(KERNEL_GROUPS))])
        cpg_out = cpg * int((1, 1, 2)[rng.integers(3)])  # mostly square, some widening
        spec = {
            "family": "kernel",
            "kind": "gconv",
            "c_in": cpg * g,
            "c_out": cpg_out * g,
            "groups": g,
            "kernel": int((3, 3, 3, 1)[rng.integers(4)]),
            "stride": int((1, 1, 2)[rng.integers(3)]),
            "hw": int(KERNEL_HW[rng.integers(len(KERNEL_HW))]),
            "batch_size": int(KERNEL_BATCH[rng.integers(len(KERNEL_BATCH))]),
        }
        return spec if _conv_flops(spec) <= max_gflops * 1e9 else None

    return _distinct_specs(n, one)


LINEAR_FEATURES = (256, 512, 1000, 1024, 1280, 2048, 3136, 4096, 6272, 8192, 12544, 25088)
#: VGG's widest classifiers (width 0.75-1.5: 512w x 49 inputs, 4,096w outputs), drawn only when
#: the range reaches past the first draw's 450 MB (so seed 0 below it still redraws that draw)
LINEAR_FEATURES_LARGE = (3072, 5120, 6144, 18816, 31360, 37632)


def linear_specs(
    n: int,
    max_weight_mb: float = 450.0,
    seed: int = 0,
    min_weight_mb: float = 0.0,
    batches: tuple[int, ...] = KERNEL_BATCH,
) -> list[dict]:
    """``n`` single fully connected layers (a classifier's: 256-25,088 inputs, 256-8,192
    outputs, batch 1-16, weights of ``min_weight_mb``-``max_weight_mb``): VGG's classifier
    holds most of its time in GEMVs of 100+ MB of weights that no other family has. Above
    450 MB the grid gains VGG's widest classifiers' sizes (up to 37,632 x 6,144: 925 MB).
    ``batches``: the batch sizes drawn (the families' draws also hold 3, 6 and 12)."""
    if not 0 <= min_weight_mb < max_weight_mb:
        raise ValueError(
            f"linear_specs: expected 0 <= min_weight_mb < max_weight_mb, got "
            f"{min_weight_mb} and {max_weight_mb}"
        )
    grid = LINEAR_FEATURES
    if max_weight_mb > 450.0:
        grid = tuple(sorted(set(LINEAR_FEATURES) | set(LINEAR_FEATURES_LARGE)))
    rng = np.random.default_rng(seed)

    def one() -> dict | None:
        f_in = int(grid[rng.integers(len(grid))])
        f_out = int(grid[rng.integers(len(grid))])
        if not min_weight_mb <= f_in * f_out * 4 / 1e6 <= max_weight_mb:
            return None
        return {"family": "kernel", "kind": "linear", "c_in": f_in, "c_out": f_out,
                "batch_size": int(batches[rng.integers(len(batches))])}  # fmt: skip

    return _distinct_specs(n, one)


#: depthwise channel counts of the families at their width multipliers (MobileNet's and
#: EfficientNet's expansions: 6x, 4x, SE-reduced; many not a multiple of 8)
DW_CHANNELS = (8, 16, 24, 32, 40, 48, 60, 72, 88, 96, 120, 144, 168, 184, 200, 240, 288,
               336, 384, 432, 480, 576, 672, 720, 816, 960, 1152, 1344, 1632, 1920)  # fmt: skip
DW_HW = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)


def dwconv_specs(n: int, max_gflops: float = 0.5, seed: int = 0) -> list[dict]:
    """``n`` single depthwise convolutions (kernel 3 / 5 / 7, stride 1 / 2, the families'
    channel counts and 1-64 px, batch 1-16, under ``max_gflops``): the MBConv families
    (MobileNetV2 / V3, EfficientNet) hold a fifth of their time in them, each family in its
    own corner of channels x size."""
    rng = np.random.default_rng(seed)

    def one() -> dict | None:
        c = int(DW_CHANNELS[rng.integers(len(DW_CHANNELS))])
        spec = {
            "family": "kernel",
            "kind": "dwconv",
            "c_in": c,
            "c_out": c,
            "groups": c,
            "kernel": int((3, 3, 5, 5, 7)[rng.integers(5)]),
            "stride": int((1, 1, 2)[rng.integers(3)]),
            "hw": int(DW_HW[rng.integers(len(DW_HW))]),
            "batch_size": int(KERNEL_BATCH[rng.integers(len(KERNEL_BATCH))]),
        }
        return spec if _conv_flops(spec) <= max_gflops * 1e9 else None

    return _distinct_specs(n, one)


def conv_specs(n: int, max_gflops: float = 0.5, seed: int = 0) -> list[dict]:
    """``n`` single dense convolutions (groups 1; input and output channels drawn
    log-uniformly over 8-1,024 and 8-512, any integer, as DenseNet's concatenations and the
    width multipliers give them; kernel 1 / 3, stride 1 / 2, 1-64 px, batch 1-16, under
    ``max_gflops``): the families' dense convs sit at channel counts their own family alone
    has (DenseNet's 1x1 convs read 2g + i x g channels and its 3x3 convs write g, g = 32 x
    width), where a held-out family's per-op model has no neighbour."""
    rng = np.random.default_rng(seed)

    def log_int(lo: int, hi: int) -> int:
        return int(round(np.exp(rng.uniform(np.log(lo), np.log(hi)))))

    def one() -> dict | None:
        spec = {
            "family": "kernel",
            "kind": "conv",
            "c_in": log_int(8, 1024),
            "c_out": log_int(8, 512),
            "groups": 1,
            "kernel": int((1, 3)[rng.integers(2)]),
            "stride": int((1, 1, 1, 2)[rng.integers(4)]),
            "hw": int(DW_HW[rng.integers(len(DW_HW))]),
            "batch_size": int(KERNEL_BATCH[rng.integers(len(KERNEL_BATCH))]),
        }
        return spec if _conv_flops(spec) <= max_gflops * 1e9 else None

    return _distinct_specs(n, one)


#: every batch size the families' networks are drawn at
NETWORK_BATCH = (1, 2, 3, 4, 6, 8, 12, 16)


def wide_conv_specs(
    n: int, max_gflops: float = 3.0, seed: int = 0, min_weight_mb: float = 4.0
) -> list[dict]:
    """``n`` single dense convolutions with ``min_weight_mb`` or more of weights at 1-8 px
    (channels drawn log-uniformly over 256-2,048, kernel 1 / 3, stride 1 / 2, every batch of
    :data:`NETWORK_BATCH`, under ``max_gflops``): a wide network's last stage (ResNet at
    width 2: 1,024 x 1,024 x 3 x 3, 38 MB; VGG at 1.5: 768 channels), where oneDNN streams
    the weights for little arithmetic and its time depends on the batch (the 38 MB conv at
    2 px: 13 ms at batch 1, 40 ms at batch 3 on the Zen 4 VM), which no other family holds."""
    rng = np.random.default_rng(seed)

    def one() -> dict | None:
        c_in, c_out = (int(round(np.exp(rng.uniform(np.log(256), np.log(2048))))) for _ in "io")
        spec = {
            "family": "kernel",
            "kind": "conv",
            "c_in": c_in,
            "c_out": c_out,
            "groups": 1,
            "kernel": int((1, 3, 3)[rng.integers(3)]),
            "stride": int((1, 1, 1, 2)[rng.integers(4)]),
            "hw": int(rng.integers(1, 9)),
            "batch_size": int(NETWORK_BATCH[rng.integers(len(NETWORK_BATCH))]),
        }
        mb = c_in * c_out * spec["kernel"] ** 2 * 4 / 1e6
        return spec if mb >= min_weight_mb and _conv_flops(spec) <= max_gflops * 1e9 else None

    return _distinct_specs(n, one)


#: the families' activation and pooling layers: (name, in place as the families use it)
ACT_OPS = (("relu", True), ("relu6", True), ("hardswish", True), ("silu", True),
           ("sigmoid", False), ("hardsigmoid", False), ("adaptive_avg_pool", False),
           ("max_pool3s2", False), ("max_pool2s2", False), ("avg_pool2s2", False))  # fmt: skip


def act_specs(n: int, max_mb: float = 64.0, seed: int = 0) -> list[dict]:
    """``n`` single activation or pooling layers (:data:`ACT_OPS`) on a ``batch x channels x
    hw x hw`` input (the families' channel counts, 1-64 px, batch 1-16, input up to
    ``max_mb``): each family brings an activation no other family has (EfficientNet's SiLU,
    MobileNetV3's hard-swish / hard-sigmoid, MobileNetV2's ReLU6), which a held-out family's
    per-op model otherwise only estimates by a stand-in."""
    rng = np.random.default_rng(seed)

    def one() -> dict | None:
        op = ACT_OPS[rng.integers(len(ACT_OPS))][0]
        spec = {
            "family": "kernel",
            "kind": "act",
            "op": op,
            "c_in": int(DW_CHANNELS[rng.integers(len(DW_CHANNELS))]),
            "hw": int(DW_HW[rng.integers(len(DW_HW))]),
            "batch_size": int(KERNEL_BATCH[rng.integers(len(KERNEL_BATCH))]),
        }
        if op.endswith("s2") and spec["hw"] < 2:
            return None
        mb = spec["batch_size"] * spec["c_in"] * spec["hw"] ** 2 * 4 / 1e6
        return spec if mb <= max_mb else None

    return _distinct_specs(n, one)


def _act_module(op: str):
    """The layer of an ``act`` sample; in place where the families use it in place, with
    denormals flushed in this (forked, per-sample) process: every run applies the layer to the
    same input again, which an in-place SiLU or hard-swish shrinks through the denormal range
    (SiLU 1.8x slower there, measured on the Zen 4 VM), where a network's activation always
    sees a fresh conv output."""
    import torch
    from torch import nn

    in_place = dict(ACT_OPS)[op]
    if in_place:
        torch.set_flush_denormal(True)
    layers = {
        "relu": lambda: nn.ReLU(inplace=in_place),
        "relu6": lambda: nn.ReLU6(inplace=in_place),
        "hardswish": lambda: nn.Hardswish(inplace=in_place),
        "silu": lambda: nn.SiLU(inplace=in_place),
        "sigmoid": nn.Sigmoid,
        "hardsigmoid": nn.Hardsigmoid,
        "adaptive_avg_pool": lambda: nn.AdaptiveAvgPool2d(1),
        "max_pool3s2": lambda: nn.MaxPool2d(3, 2, 1),
        "max_pool2s2": lambda: nn.MaxPool2d(2, 2),
        "avg_pool2s2": lambda: nn.AvgPool2d(2, 2),
    }
    return layers[op]()


def build_kernel(spec: dict):
    """(module, input shape) of a kernel sample: one ``nn.Conv2d``, no bias (as in the
    families' conv + norm blocks; kinds ``gconv``, ``dwconv`` and ``conv``), one ``nn.Linear`` (kind
    ``linear``) or one activation / pooling layer (kind ``act``, :func:`_act_module`)."""
    from torch import nn

    if spec.get("kind") == "linear":
        fc = nn.Linear(int(spec["c_in"]), int(spec["c_out"]))
        return fc.eval(), (int(spec["batch_size"]), int(spec["c_in"]))
    if spec.get("kind") == "act":
        hw = int(spec["hw"])
        return _act_module(spec["op"]).eval(), (int(spec["batch_size"]), int(spec["c_in"]), hw,
                                                 hw)  # fmt: skip
    k = int(spec["kernel"])
    conv = nn.Conv2d(int(spec["c_in"]), int(spec["c_out"]), k, int(spec["stride"]), k // 2,
                     groups=int(spec["groups"]), bias=False)  # fmt: skip
    return conv.eval(), (int(spec["batch_size"]), int(spec["c_in"]), int(spec["hw"]),
                         int(spec["hw"]))  # fmt: skip


def kernels(args: argparse.Namespace) -> None:
    """Measure ``--n`` kernel samples into ``--out`` (fresh process each; resumable)."""
    import json

    cached = Path(args.out) / "specs.json"  # the draw, kept so a resume does not redo it
    try:
        batches = tuple(int(b) for b in args.batches.split(",")) if args.batches else KERNEL_BATCH
    except ValueError:
        batches = ()
    if not batches or min(batches) < 1 or args.batches and args.kind != "linear":
        sys.exit(f"kernels: --batches takes positive batch sizes, comma-separated, for --kind "
                 f"linear: got {args.batches!r} for --kind {args.kind}. Pass e.g. --kind linear "
                 "--batches 3,6,12.")  # fmt: skip
    if cached.exists():
        specs = json.loads(cached.read_text())
    else:
        if args.kind == "linear":
            if not 0 <= args.min_weight_mb < args.max_weight_mb:
                sys.exit(
                    "kernels: --min-weight-mb must be >= 0 and below --max-weight-mb: got "
                    f"{args.min_weight_mb} and {args.max_weight_mb}. Pass e.g. "
                    "--min-weight-mb 450 --max-weight-mb 1000."
                )
            specs = linear_specs(args.n, args.max_weight_mb, args.seed, args.min_weight_mb, batches)
        elif args.kind == "dwconv":
            specs = dwconv_specs(args.n, args.max_gflops, args.seed)
        elif args.kind == "act":
            specs = act_specs(args.n, seed=args.seed)
        elif args.kind == "conv":
            specs = conv_specs(args.n, args.max_gflops, args.seed)
        elif args.kind == "wideconv":
            specs = wide_conv_specs(args.n, seed=args.seed)
        else:
            specs = kernel_specs(args.n, args.max_gflops, args.seed)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(specs))
    _run_campaign(specs, build_kernel, args.out, args.reference, "kernel specs")


def read_kernels(campaign: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows, ops)`` of the ok rows of a kernel-sample campaign directory."""
    from carb_nas.measure.campaign import read_ops_campaign

    p = _existing(campaign, "a kernel-sample campaign directory")
    rows, ops = read_ops_campaign(p)
    return rows[rows.status == "ok"].drop_duplicates("key", keep="last"), ops


def kernel_table(
    parts: str, typical_ms: float | None = None, networks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The op table (``trace_ops`` columns, ``key``, ``measured_ms``) of kernel samples
    (comma-separated campaign directories or exports), for ``ModuleCostModel``'s
    ``kernel_samples``; with ``typical_ms`` the times are normalized by each sample's speed
    probe to that median (as the networks' are); an export of another machine than the
    ``networks``' is refused (``carb_nas.datasets.load_kernel_samples``)."""
    from carb_nas.datasets import load_kernel_samples, machines, reference_normalized
    from carb_nas.errors import ConfigError

    tables = []
    for part in parts.split(","):
        if not Path(part).is_dir():
            try:
                tables.append(load_kernel_samples(part, typical_ms, networks))
            except ConfigError as e:  # one line, as the CLI's --kernel-samples says it
                sys.exit(f"--kernel-samples: {e}")
            continue
        rows, ops = read_kernels(part)
        if networks is not None and machines(rows) != machines(networks):
            sys.exit(
                f"--kernel-samples: {part} holds samples of another machine: expected the "
                f"networks' {sorted(machines(networks))}, got {sorted(machines(rows))}. Per-op "
                "costs are per machine: measure the samples where the networks were measured."
            )
        ops = ops[ops["key"].isin(set(rows["key"]))]
        if typical_ms is not None:
            rows, scaled, _ = reference_normalized(rows, ops, typical_ms, drop_unprobed=True)
            assert scaled is not None
            ops = scaled
        tables.append(ops[ops["measured_ms"].notna()])
    return pd.concat(tables, ignore_index=True).drop_duplicates(["key", "index"])


def _kernel_part(path: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows, ops)`` of a kernel-sample campaign directory, or of an earlier
    ``export-kernels`` file (its samples as one more part: a later campaign extends an export
    whose campaign directories are gone)."""
    from carb_nas.datasets._kernels import KERNEL_SAMPLE_COLUMNS

    p = _existing(path, "a kernel-sample campaign directory or export")
    if p.is_dir():
        return read_kernels(path)
    table = pd.read_csv(p)
    missing = [c for c in ("measured_ms", *KERNEL_SAMPLE_COLUMNS) if c not in table]
    if missing:
        sys.exit(f"export-kernels: {path} is not a kernel-sample export: expected the columns "
                 f"{list(KERNEL_SAMPLE_COLUMNS)} and measured_ms, missing {missing}. Pass a "
                 "campaign directory or a file export-kernels wrote.")  # fmt: skip
    per_sample = [c for c in (*KERNEL_SAMPLE_COLUMNS, "latency_ms") if c in table]
    rows = table[per_sample].drop_duplicates("key").assign(status="ok")
    return rows, table.drop(columns=per_sample[1:])


def export_kernels(args: argparse.Namespace) -> None:
    """Kernel-sample campaigns (or earlier exports) -> one CSV (gzip when the name ends in
    .gz), a row per sample (``carb_nas.datasets.load_kernel_samples`` reads it)."""
    from carb_nas.datasets import machines
    from carb_nas.datasets._kernels import KERNEL_SAMPLE_COLUMNS
    from carb_nas.measure import MIN_CPU_PER_WALL

    read = [_kernel_part(c) for c in args.campaign]
    rows = pd.concat([r.assign(_part=i) for i, (r, _) in enumerate(read)], ignore_index=True)
    found = machines(rows)
    if len(found) != 1:
        sys.exit(f"export-kernels: expected one machine, got {len(found)}: {sorted(found)}")
    share = pd.to_numeric(rows.get("cpu_per_wall"), errors="coerce")
    rows = _pick(rows.assign(_lost=share < MIN_CPU_PER_WALL), args.pick)  # a pass per campaign
    ops = pd.concat([o.assign(_part=i) for i, (_, o) in enumerate(read)], ignore_index=True)
    ops = ops.merge(rows[["key", "_part"]], on=["key", "_part"]).drop(columns="_part")
    # the sample's whole-module latency too: what anchoring a sample would need
    per_sample = [c for c in (*KERNEL_SAMPLE_COLUMNS, "latency_ms") if c in rows]
    out = rows[per_sample].merge(ops, on="key")
    out.to_csv(args.out, index=False, float_format="%.6g")
    print(f"wrote {args.out} ({len(out)} samples)", file=sys.stderr)


def _existing(path: str, what: str) -> Path:
    """``path`` if it exists; else a one-line exit saying what was expected (before any work)."""
    p = Path(path)
    if not p.exists():
        sys.exit(f"{what}: expected an existing path, got {path!r}. Check the path.")
    return p


def read_part(path: str, with_ops: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows, ops)`` of a campaign directory, or of an exported rows CSV (its per-op table
    ``<stem>_ops.csv.gz`` beside it), so an export can be extended by a later campaign;
    ``with_ops=False`` skips the per-op table (empty)."""
    from carb_nas.measure.campaign import read_ops_campaign

    p = _existing(path, "a campaign directory or an exported rows CSV")
    if p.is_dir():
        return read_ops_campaign(p, with_ops)
    rows = pd.read_csv(p)
    ops = p.with_name(p.name.removesuffix(".csv") + "_ops.csv.gz")
    return rows.assign(status=rows.get("status", "ok")), (
        pd.read_csv(ops) if with_ops else pd.DataFrame()
    )


def _pick(rows: pd.DataFrame, how: str) -> pd.DataFrame:
    """One row per config among its passes' rows (with its own ops, by ``_part``): rows that
    kept their core first; then ``lowest-cv``, or ``median``: the row of the median latency
    (probe-normalized where every row of the config timed the probe; the lower middle of an
    even count), an actual measurement, so its op table stays its own. A config with fewer
    than three such rows takes the lowest CV either way (a median of two is a pick of one)."""
    rows = rows.sort_values(["_lost", "latency_cv"])
    if how == "lowest-cv":
        return rows.drop_duplicates("key")
    kept = rows[~rows["_lost"]]
    kept = kept[kept.groupby("key")["key"].transform("size") >= 3]
    ref = pd.to_numeric(kept.get("reference_ms", pd.Series(np.nan, kept.index)), errors="coerce")
    scaled = ref.notna().groupby(kept["key"]).transform("all")
    speed = kept["latency_ms"] / ref.where(scaled, 1.0)
    order = kept.assign(_speed=speed).sort_values(["key", "_speed"])
    rank = order.groupby("key").cumcount()
    middle = (order.groupby("key")["key"].transform("size") - 1) // 2
    medians = order[rank == middle].drop(columns="_speed")
    rest = rows[~rows["key"].isin(set(medians["key"]))].drop_duplicates("key")
    return pd.concat([medians, rest], ignore_index=True)


def export(args: argparse.Namespace) -> None:
    import json

    from carb_nas.datasets import SCHEMA, machines
    from carb_nas.measure import MIN_CPU_PER_WALL

    out_rows, out_ops = OUT_ROWS, OUT_OPS
    if args.name != "zoo":  # another machine's dataset beside the shipped one, never over it
        out_rows = OUT_ROWS.with_name(f"cpu_torch_fp32_{args.name}.csv")
        out_ops = OUT_OPS.with_name(f"cpu_torch_fp32_{args.name}_ops.csv.gz")
    parts = [read_part(c) for c in args.campaign]
    rows = pd.concat([r.assign(_part=i) for i, (r, _) in enumerate(parts)], ignore_index=True)
    ours = machines(rows)
    if len(ours) != 1:
        sys.exit(f"export: expected passes of one machine, got {len(ours)}: {sorted(ours)}")
    if out_rows.exists():
        theirs = machines(pd.read_csv(out_rows, usecols=["fingerprint", "device_name"]))
        if theirs != ours:
            sys.exit(
                f"export: {out_rows.name} holds another machine's rows ({sorted(theirs)}), these "
                f"are {sorted(ours)}; export them under their own name: --name zoo-<machine>"
            )
    ops = pd.concat([o.assign(_part=i) for i, (_, o) in enumerate(parts)], ignore_index=True)
    rows = rows[rows.status == "ok"]
    share = rows["cpu_per_wall"] if "cpu_per_wall" in rows else pd.Series(np.nan, rows.index)
    lost = pd.to_numeric(share, errors="coerce") < MIN_CPU_PER_WALL  # timed off its core
    rows = _pick(rows.assign(_lost=lost), args.pick).drop(columns="_lost")
    ops = ops.merge(rows[["key", "_part"]], on=["key", "_part"]).drop(columns="_part")
    rows = rows.drop(columns="_part").sort_values(["family", "key"])
    rows = rows.assign(
        precision="fp32",
        runtime="torch",
        platform="cpu/torch/fp32",
        device="cpu",
        threads=1,
        meter="none",
        energy_reason="meter=none: no energy counter readable (no NVML, no powercap)",
    )
    rows["device_name"] = rows.fingerprint.map(lambda s: json.loads(s)["device_name"])
    extra = [
        "op_sum_ms",
        "n_ops",
        "n_events",
        "n_unmatched",
        "minor_faults_per_run",
        "ops_reference_ms",
    ]
    cols = [c for c in SCHEMA if c in rows.columns] + [c for c in extra if c in rows.columns]
    out = rows.reindex(columns=list(dict.fromkeys([*SCHEMA, *cols])))
    out.to_csv(out_rows, index=False)
    ops = ops[ops.key.isin(set(out.key))]
    ops = ops[["key", "index", "kind", "op", "event", "measured_ms", "signature"]]
    ops.to_csv(out_ops, index=False, float_format="%.6g")
    print(f"wrote {out_rows} ({len(out)} rows), {out_ops} ({len(ops)} op rows)", file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--resnet", type=int, default=300)
    m.add_argument("--per-family", type=int, default=80)
    m.add_argument("--max-gflops", type=float, default=2.0)
    m.add_argument("--remeasure-from", default=None, help="re-measure this campaign's rows...")
    m.add_argument("--cv-above", type=float, default=0.10, help="...whose latency CV is above")
    m.add_argument("--specs", default=None, help="a draw to continue (specs.json.gz)")
    m.add_argument(
        "--skip-in",
        action="append",
        default=[],
        help="skip the configs of this exported CSV or campaign directory (repeatable)",
    )
    m.add_argument(
        "--sample", type=int, default=None, help="with --remeasure-from: N of its rows, seeded"
    )
    m.add_argument(
        "--reference",
        action="store_true",
        help="time the machine-speed probe among each row's runs (reference_ms)",
    )
    e = sub.add_parser("export")
    e.add_argument("campaign", nargs="+", help="campaign directories or exported CSVs (passes)")
    e.add_argument(
        "--name",
        default="zoo",
        help="writes cpu_torch_fp32_<name>.csv (+ _ops.csv.gz); zoo is the shipped one",
    )
    e.add_argument(
        "--pick",
        choices=("lowest-cv", "median"),
        default="lowest-cv",
        help="per config among the passes: the lowest-CV row, or the median one (3+ passes)",
    )
    k = sub.add_parser("kernels", help="measure single grouped convs (kernel samples)")
    k.add_argument("--out", required=True)
    k.add_argument("--n", type=int, default=300)
    k.add_argument("--max-gflops", type=float, default=0.5, help="gconv, dwconv, conv: per sample")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument(
        "--kind", choices=("gconv", "linear", "dwconv", "act", "conv", "wideconv"),
        default="gconv",
    )  # fmt: skip
    k.add_argument(
        "--batches", default=None,
        help="--kind linear: the batch sizes to draw, comma-separated (default 1,2,4,8,16)",
    )  # fmt: skip
    k.add_argument("--min-weight-mb", type=float, default=0.0, help="linear: smallest weights")
    k.add_argument("--max-weight-mb", type=float, default=450.0, help="linear: largest weights")
    k.add_argument("--reference", action="store_true", help="time the machine-speed probe")
    x = sub.add_parser("export-kernels", help="kernel-sample campaigns -> one CSV")
    x.add_argument(
        "campaign", nargs="+",
        help="campaigns (several draws, or passes of one) or earlier export-kernels files",
    )  # fmt: skip
    x.add_argument("--out", required=True)
    x.add_argument(
        "--pick",
        choices=("lowest-cv", "median"),
        default="lowest-cv",
        help="per sample measured in several campaigns: the lowest-CV row or the median one",
    )
    a = p.parse_args()
    cmds = {"measure": measure, "export": export, "kernels": kernels}
    cmds["export-kernels"] = export_kernels
    cmds[a.cmd](a)


if __name__ == "__main__":
    main()
