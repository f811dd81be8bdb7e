"""SYNTHETIC measurement tables, a tiny CostModel and FAKE per-op times of small traced CNNs
(the kernel-level module model) for the cost-model tests.

Nothing here is a measurement: targets come from a physically plausible closed-form formula
plus seeded log-normal noise, and every table carries ``meter="synthetic"`` and
``peak_mem_method="synthetic"`` so it can never pass for real data. Used only by tests; never
shipped (benchmarks/train.py times the shipped datasets instead).

Architecture features come from ``carb_nas.features.compute_features`` when that module
exists; otherwise from a small local stand-in (``_standin_features``) that follows the same
layout rules as ``carb_nas.models`` closely enough for a plausible synthetic table.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from torch import nn as torch_nn

from carb_nas.costmodel import CostModel, model_inputs
from carb_nas.space import CONFIG_COLUMNS, load_space, stage_layout

SYNTHETIC_LABEL = "synthetic"
_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}


def _round_channels(value: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def _arch(family: str, depth: int, width: float, res: int) -> dict[str, float]:
    """MACs, params and activation elements (per image) of one architecture."""
    layout = stage_layout(family, depth)
    chans = [_round_channels(64 * 2**i * width) for i in range(len(layout))]
    exp = 1 if family == "basic" else 4
    macs = params = 0.0
    acts: list[float] = []
    s = math.ceil(res / 2)
    macs += 3 * 49 * chans[0] * s * s
    params += 3 * 49 * chans[0]
    acts.append(chans[0] * s * s)
    s = math.ceil(s / 2)
    inp = chans[0]
    n_conv = 1
    for i, (n_blocks, planes) in enumerate(zip(layout, chans)):
        for b in range(n_blocks):
            stride = 2 if (i > 0 and b == 0) else 1
            so = math.ceil(s / stride)
            out = planes * exp
            if family == "basic":
                convs = [(inp, planes, 9, so), (planes, planes, 9, so)]
            else:
                convs = [(inp, planes, 1, s), (planes, planes, 9, so), (planes, out, 1, so)]
            if stride != 1 or inp != out:
                convs.append((inp, out, 1, so))
            for cin, cout, k, sp in convs:
                macs += cin * cout * k * sp * sp
                params += cin * cout * k
                acts.append(cout * sp * sp)
                n_conv += 1
            inp, s = out, so
    macs += inp * 1000
    params += inp * 1000 + 1000
    return {
        "macs": macs,
        "params": params,
        "act_total": sum(acts),
        "act_max": max(acts),
        "n_conv": n_conv,
    }


def _standin_features(frame: pd.DataFrame) -> pd.DataFrame:
    """Local stand-in for carb_nas.features.compute_features (tests only)."""
    keys = ["family", "depth", "width", "resolution"]
    uniq = frame[keys].drop_duplicates()
    rows = {tuple(r): _arch(*r) for r in uniq.itertuples(index=False)}
    per = pd.DataFrame(
        [rows[tuple(r)] for r in frame[keys].itertuples(index=False)], index=frame.index
    )
    bpe = frame["precision"].map(_BYTES).fillna(4).to_numpy()
    b = frame["batch_size"].to_numpy(dtype=float)
    out = pd.DataFrame(index=frame.index)
    out["flops"] = 2 * per["macs"] * b
    out["params"] = per["params"]
    out["param_mb"] = per["params"] * bpe / 1e6
    out["act_mb_total"] = per["act_total"] * b * bpe / 1e6
    out["act_mb_max"] = per["act_max"] * b * bpe / 1e6
    out["compute_intensity"] = out["flops"] / ((out["act_mb_total"] + out["param_mb"]) * 1e6)
    out["log_flops_per_param"] = np.log(out["flops"] / out["params"])
    out["n_conv"] = per["n_conv"]
    out["tensor_peak_mb"] = out["param_mb"] + 2 * out["act_mb_max"]
    return out


def architecture_features(frame: pd.DataFrame) -> pd.DataFrame:
    try:
        from carb_nas.features import compute_features
    except ImportError:
        return _standin_features(frame)
    return compute_features(frame)


def synthetic_dataset(
    n: int, seed: int = 0, space: str = "resnet", energy: bool = True, telemetry: bool = False
) -> pd.DataFrame:
    """``n`` SYNTHETIC rows following dataset.SCHEMA's main columns (labelled synthetic).

    Formula (CPU-like): latency = overhead + FLOPs / throughput(batch) + bytes / bandwidth,
    where throughput saturates with batch size; peak memory = params + 2 x largest activation
    + a constant; energy = (idle + dynamic power x utilisation(batch)) x latency. Noise is
    multiplicative, larger at small batch (the regime CARB's corrector targets).
    """
    rng = np.random.default_rng(seed)
    grid = load_space(space).grid()
    idx = rng.choice(len(grid), size=min(n, len(grid)), replace=False)
    if n > len(grid):
        idx = np.concatenate([idx, rng.choice(len(grid), size=n - len(grid))])
    cfg = grid.iloc[idx].reset_index(drop=True)
    feats = architecture_features(cfg)
    b = cfg["batch_size"].to_numpy(dtype=float)
    flops = feats["flops"].to_numpy()
    act = feats["act_mb_total"].to_numpy()
    fp16 = (cfg["precision"] != "fp32").to_numpy()
    thr = 60e9 * (1 - 0.7 * np.exp(-b / 6)) * np.where(fp16, 1.6, 1.0)
    small = b <= 8
    noise_sd = np.where(small, 0.06, 0.02)
    lat = 0.2 + 1e3 * flops / thr + act / 8.0
    # a structured small-batch effect (what the low-batch corrector should learn)
    lat *= np.where(small, 1 + 0.15 * np.sin(cfg["depth"].to_numpy() / 7.0), 1.0)
    lat *= np.exp(rng.normal(0, noise_sd))
    mem = (5 + feats["param_mb"] + 2 * feats["act_mb_max"]).to_numpy(copy=True)
    mem *= np.exp(rng.normal(0, 0.01, size=len(cfg)))
    util = 1 - 0.6 * np.exp(-b / 16)
    power_w = 15 + 45 * util
    out = cfg.copy()
    out["peak_mem_mb"] = mem
    out["latency_ms"] = lat
    if energy:
        out["energy_j"] = power_w * lat / 1e3 * np.exp(rng.normal(0, noise_sd))
    if telemetry:
        out["sm_util"] = np.clip(100 * util + rng.normal(0, 3, len(cfg)), 0, 100)
        out["mem_util"] = np.clip(60 * util + rng.normal(0, 3, len(cfg)), 0, 100)
    out["status"] = "ok"
    out["meter"] = SYNTHETIC_LABEL
    out["peak_mem_method"] = SYNTHETIC_LABEL
    out["platform"] = "synthetic/torch/fp32"
    out["fingerprint"] = '{"synthetic": true}'
    return out[[*CONFIG_COLUMNS, *[c for c in out.columns if c not in CONFIG_COLUMNS]]]


# The CARB structure with a few dozen trees per learner, so the suite stays fast: explicit
# learner parameters on top of the "fast" preset (nothing global is edited).
TINY_LEARNERS = {
    "xgb": {"n_estimators": 40, "max_depth": 5},
    "lgbm": {"n_estimators": 40, "num_leaves": 15},
    "et": {"n_estimators": 30, "min_samples_leaf": 2},
    "corrector": {"n_estimators": 30, "num_leaves": 7, "learning_rate": 0.1},
    "cascade": {"n_estimators": 30, "num_leaves": 7},
}
TINY_PARAMS = {"preset": "fast", "learner_params": TINY_LEARNERS, "n_jobs": 1}


def tiny(**kw) -> CostModel:
    """A CostModel with the TINY_LEARNERS sizes, one thread, 3 cascade folds."""
    kw.setdefault("cascade_folds", 3)
    return CostModel(**{**TINY_PARAMS, **kw})


# -- CPU-like rows and fast models for the screen/search/validate tests --------------------
def synthetic_rows(
    n: int, runtime: str = "torch", seed: int = 0, space: str = "cpu", energy: bool = False
) -> pd.DataFrame:
    """SYNTHETIC dataset rows (not measurements): a CPU-like formula over real features."""
    from carb_nas.features import compute_features

    rng = np.random.default_rng(seed)
    grid = load_space(space).grid()
    cfg = grid.iloc[np.sort(rng.choice(len(grid), size=min(n, len(grid)), replace=False))]
    cfg = cfg.reset_index(drop=True)
    cfg["runtime"] = runtime
    f = compute_features(cfg)
    b = cfg["batch_size"].to_numpy(dtype=float)
    speed = 25e9 * (1 - 0.6 * np.exp(-b / 8)) * (1.7 if runtime == "onnxruntime" else 1.0)
    lat = 0.1 + 1e3 * f["flops"].to_numpy() / speed + f["act_mb_total"].to_numpy() / 40
    out = cfg.copy()
    out["latency_ms"] = lat * np.exp(rng.normal(0, 0.03, len(cfg)))
    out["peak_mem_mb"] = (2 + f["tensor_peak_mb"].to_numpy()) * np.exp(
        rng.normal(0, 0.01, len(cfg))
    )
    if energy:
        out["energy_j"] = 30 * out["latency_ms"] / 1e3
    out["status"] = "ok"
    out["meter"] = "synthetic"
    out["platform"] = f"cpu/{runtime}/fp32"
    return out


def fit_fast(runtime: str, seed: int, n: int = 500):
    rows = synthetic_rows(n, runtime=runtime, seed=seed)
    return CostModel(preset="fast", n_jobs=1, random_state=seed).fit(
        model_inputs(rows), rows[["peak_mem_mb", "latency_ms"]], platform=f"cpu/{runtime}/fp32"
    )


# -- FAKE per-operator times of traced tiny networks (the kernel-level module model) ---------
def small_cnn(c: int, depth: int, act: type | None = None, dw: bool = False) -> torch_nn.Module:
    """A plain (or depthwise, ``dw``) conv-BN-activation stack with a linear head."""
    act = act or torch_nn.ReLU
    layers: list[torch_nn.Module] = [torch_nn.Conv2d(3, c, 3, 1, 1), torch_nn.BatchNorm2d(c), act()]
    for _ in range(depth):
        layers += [
            torch_nn.Conv2d(c, c, 3, 1, 1, groups=c if dw else 1),
            torch_nn.BatchNorm2d(c),
            act(),
        ]
    layers += [torch_nn.AdaptiveAvgPool2d(1), torch_nn.Flatten(), torch_nn.Linear(c, 10)]
    return torch_nn.Sequential(*layers)


def fake_op_ms(ops: pd.DataFrame) -> np.ndarray:
    """FAKE: 0.01 ms per op + 1 ms per GFLOP x (3 if depthwise) + 0.5 ms per MB moved."""
    mb = (ops["read_bytes"] + ops["write_bytes"] + ops["weight_bytes"]) / 1e6
    slow = np.where(ops["kind"] == "dwconv", 3.0, 1.0)
    return 0.01 + ops["flops"] / 1e9 * slow + 0.5 * mb


def fake_module_dataset(n: int = 105, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows, ops)`` of ``n`` traced small CNNs of three FAKE families with FAKE per-op
    times (:func:`fake_op_ms`; latency 1.1 x their sum): what ``ModuleCostModel.fit`` takes."""
    from carb_nas.features import trace_ops

    rng = np.random.default_rng(seed)
    rows, tables = [], []
    for i in range(n):
        fam = ("plain", "dw", "wide")[i % 3]
        c = int(rng.choice([8, 16, 24])) * (2 if fam == "wide" else 1)
        depth, b, r = int(rng.integers(1, 5)), int(rng.choice([1, 2, 4])), int(rng.choice([8, 16]))
        ops, feats = trace_ops(small_cnn(c, depth, dw=fam == "dw"), (b, 3, r, r))
        ops = ops.assign(key=f"k{i}", measured_ms=fake_op_ms(ops))
        lat = float(ops["measured_ms"].sum() * 1.1)
        rows.append(
            {
                **feats,
                "key": f"k{i}",
                "family": fam,
                "batch_size": b,
                "latency_ms": lat,
                "peak_mem_mb": feats["tensor_peak_mb"] * 1.05,
            }
        )
        tables.append(ops)
    return pd.DataFrame(rows), pd.concat(tables, ignore_index=True)
