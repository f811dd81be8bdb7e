"""Closed-form features vs meta-device tracing vs real CPU measurements."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from carb_nas.errors import ConfigError
from carb_nas.features import ELEMENT_BYTES, FEATURE_COLUMNS, compute_features, trace_features
from carb_nas.models import build_model, example_input
from carb_nas.space import Config, configs_to_frame, load_space

INT_COLUMNS = ("flops", "params", "n_conv", "n_bn", "n_linear", "n_blocks", "n_stages")


def _features(*configs: Config) -> pd.DataFrame:
    return compute_features(configs_to_frame(list(configs)))


def _trace(config: Config) -> dict:
    model = build_model(config, "meta")
    shape = (config.batch_size, 3, config.resolution, config.resolution)
    return trace_features(model, shape, config.precision)


# -- closed form == meta trace -------------------------------------------------------------
@pytest.mark.parametrize(("space", "n"), [("resnet", 30), ("carb_screening", 30), ("cpu", 30)])
def test_closed_form_equals_meta_trace_on_space_sample(space: str, n: int) -> None:
    configs = load_space(space).sample(n, seed=7)
    # exercise batch 1 (native convolutions) and larger batches (oneDNN) of the same model
    configs += [configs[0].replace(batch_size=1), configs[0].replace(batch_size=3)]
    closed = _features(*configs)
    for i, config in enumerate(configs):
        traced = _trace(config)
        row = closed.iloc[i]
        mismatched = {k: (row[k], traced[k]) for k in FEATURE_COLUMNS if row[k] != traced[k]}
        assert not mismatched, f"{config}: closed form != trace: {mismatched}"


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "int8"])
@pytest.mark.parametrize("batch_size", [1, 2, 5, 15, 16])
def test_closed_form_equals_trace_for_every_precision_and_batch(
    precision: str, batch_size: int
) -> None:
    for config in (
        Config("basic", 10, 0.1, 32, batch_size, precision),
        Config("bottleneck", 50, 0.25, 48, batch_size, precision),
    ):
        row = _features(config).iloc[0]
        traced = _trace(config)
        assert {k: row[k] for k in FEATURE_COLUMNS} == traced


def test_mmap_mb_counts_the_per_call_buffers_of_at_least_32_mib() -> None:
    from torch import nn

    def mmap(module: nn.Module, shape: tuple) -> float:
        return trace_features(module, shape)["mmap_mb"]

    mib32 = 32 * 2**20
    # a 1024->1024 3x3 conv: 37.7 MB of weights, reordered by oneDNN from batch 2 (at batch 1
    # on a 4x4 input it runs natively); its 64 KB activations stay far below the threshold
    big = nn.Conv2d(1024, 1024, 3, padding=1, bias=False)
    assert mmap(big, (1, 1024, 4, 4)) == 0
    assert mmap(big, (2, 1024, 4, 4)) == 1024 * 1024 * 9 * 4 / 1e6
    assert mmap(nn.Conv2d(960, 960, 3, padding=1, bias=False), (2, 960, 4, 4)) == 0  # 31.6 MiB
    # an out-of-place batch norm output of exactly 32 MiB counts; one element less does not
    bn = nn.BatchNorm2d(8)
    assert mmap(bn, (1, 8, 1024, 1024)) == mib32 / 1e6
    assert mmap(bn, (1, 8, 1024 * 1024 - 1, 1)) == 0
    # a oneDNN 1x1 conv with a 51 MB output: the output and oneDNN's blocked copy of it; its
    # 12.8 MB input copy stays below; natively (batch 15 here) only the output
    conv = nn.Conv2d(64, 256, 1, bias=False)
    out16 = 16 * 256 * 56 * 56 * 4
    assert mmap(conv, (16, 64, 56, 56)) == 2 * out16 / 1e6
    assert mmap(conv, (15, 64, 56, 56)) == out16 * 15 / 16 / 1e6
    # the input copy counts when it is large, except a 3-channel input (read in place)
    down = nn.Conv2d(256, 64, 1, bias=False)
    assert mmap(down, (16, 256, 56, 56)) == out16 / 1e6  # input copy only: out is 12.8 MB
    stem = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
    stem_out = 48 * 64 * 112 * 112 * 4
    assert mmap(stem, (48, 3, 224, 224)) == 2 * stem_out / 1e6  # 28.9 MB input, in place
    assert mmap(stem, (96, 3, 224, 224)) == 4 * stem_out / 1e6  # 57.8 MB input, in place


@pytest.mark.parametrize(
    "config",
    [
        Config("basic", 50, 2.0, 32, 2),  # reordered weights >= 32 MiB
        Config("bottleneck", 50, 1.0, 224, 16),  # activations and copies >= 32 MiB
        Config("bottleneck", 26, 1.0, 224, 15),  # the 1x1 convs native: no copies
        Config("basic", 18, 1.0, 224, 64, "fp16"),
        Config("bottleneck", 50, 1.0, 224, 200, "int8"),
    ],
)
def test_closed_form_equals_trace_where_buffers_are_mmapped(config: Config) -> None:
    row = _features(config).iloc[0]
    assert row["mmap_mb"] > 0
    assert {k: row[k] for k in FEATURE_COLUMNS} == _trace(config)


def test_mmap_mb_is_not_linear_in_batch() -> None:
    feats = _features(*(Config("basic", 18, 1.0, 224, b) for b in (1, 8, 16, 32, 64)))
    mm = feats["mmap_mb"].to_numpy()
    act_max = feats["act_mb_max"].to_numpy()
    assert act_max[1] * 1e6 < 32 * 2**20 and mm[0] == mm[1] == 0 < mm[2]
    # 16 -> 32: the same buffers, twice the size; 32 -> 64: more buffers cross 32 MiB
    assert mm[3] == pytest.approx(2 * mm[2]) and mm[4] > 2 * mm[3]


# -- known figures (torchvision's ResNets) ---------------------------------------------------
def test_resnet50_and_resnet18_figures() -> None:
    r50 = Config("bottleneck", 50, 1.0, 224, 1)
    r18 = Config("basic", 18, 1.0, 224, 1)
    feats = _features(r50, r18)
    assert feats["params"].tolist() == [25_557_032, 11_689_512]
    assert feats["flops"].iloc[0] == 8_178_368_512
    assert feats["n_conv"].tolist() == [53, 20]
    assert feats["n_blocks"].tolist() == [16, 8]
    assert feats["n_stages"].tolist() == [4, 4]
    assert feats["n_linear"].tolist() == [1, 1]
    # the stem's max-pool reads the 64 x 112 x 112 stem output
    assert feats["pool_in_mb"].tolist() == [64 * 112 * 112 * 4 / 1e6] * 2
    # the closed-form FLOPs are FlopCounterMode's on a real forward pass
    model = build_model(r18)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 3, 224, 224))
    assert counter.get_total_flops() == feats["flops"].iloc[1]
    assert sum(p.numel() for p in model.parameters()) == feats["params"].iloc[1]


# -- batch and precision scaling ----------------------------------------------------------------
def test_batch_scales_per_batch_columns_linearly() -> None:
    base = Config("bottleneck", 65, 0.5, 64, 2)
    feats = _features(base, base.replace(batch_size=8), base.replace(batch_size=32))
    for col in ("flops", "act_mb_total", "act_mb_max", "input_mb", "pool_in_mb"):
        np.testing.assert_allclose(feats[col].to_numpy() / feats[col].iloc[0], [1, 4, 16])
    for col in ("params", "param_mb", "weight_mb_max", "n_conv", "n_bn", "n_blocks"):
        assert feats[col].nunique() == 1, col
    peaks = feats["tensor_peak_mb"].to_numpy()
    assert peaks[0] < peaks[1] < peaks[2]
    # the peak grows by less than 4x per 4x batch (the weights are resident once)
    assert peaks[1] < 4 * peaks[0]


def test_native_conv_flops_follow_pytorchs_single_thread_dispatch() -> None:
    from torch import nn

    def native(module: nn.Module, shape: tuple) -> tuple[int, int]:
        f = trace_features(module, shape)
        return f["native_conv_flops"], f["flops"]

    conv1x1 = nn.Conv2d(64, 256, 1, bias=False)
    n, f = native(conv1x1, (15, 64, 8, 8))
    assert n == f == 2 * 15 * 256 * 64 * 8 * 8  # unstrided 1x1 below batch 16: native
    assert native(conv1x1, (16, 64, 8, 8))[0] == 0  # batch 16: oneDNN
    assert native(nn.Conv2d(64, 256, 1, stride=2, bias=False), (4, 64, 8, 8))[0] == 0
    conv3x3 = nn.Conv2d(64, 64, 3, padding=1, bias=False)
    assert native(conv3x3, (1, 64, 16, 16))[0] > 0  # 16,384 input elements at batch 1
    assert native(conv3x3, (1, 64, 32, 32))[0] == 0  # 65,536 > 20,480
    assert native(conv3x3, (2, 64, 16, 16))[0] == 0
    assert native(nn.Conv2d(3, 64, 7, stride=2, padding=3), (1, 3, 32, 32))[0] == 0
    # weights oneDNN reorders per call: exactly the non-native convs'
    assert trace_features(conv1x1, (15, 64, 8, 8))["onednn_weight_mb"] == 0
    assert trace_features(conv1x1, (16, 64, 8, 8))["onednn_weight_mb"] == 64 * 256 * 4 / 1e6
    assert trace_features(conv3x3, (1, 64, 16, 16))["onednn_weight_mb"] == 0
    assert trace_features(conv3x3, (2, 64, 16, 16))["onednn_weight_mb"] == 64 * 64 * 9 * 4 / 1e6
    # in a ResNet the share drops to zero at batch 16 and is batch-proportional below it
    base = Config("bottleneck", 50, 0.5, 64, 1)
    feats = _features(*(base.replace(batch_size=b) for b in (1, 2, 8, 15, 16, 64)))
    nat = feats["native_conv_flops"].to_numpy()
    assert nat[0] > nat[1] / 2 > 0 and nat[2] == 4 * nat[1] and nat[4] == nat[5] == 0
    assert (nat <= feats["flops"].to_numpy()).all()


def test_precision_scales_bytes_not_flops() -> None:
    base = Config("basic", 34, 0.75, 96, 4)
    feats = _features(*(base.replace(precision=p) for p in ("fp32", "fp16", "bf16", "int8")))
    assert feats["flops"].nunique() == 1 and feats["params"].nunique() == 1
    for col in ("param_mb", "act_mb_total", "act_mb_max", "input_mb", "weight_mb_max"):
        ratios = feats[col].to_numpy() / feats[col].iloc[0]
        np.testing.assert_allclose(ratios, [1, 0.5, 0.5, 0.25], err_msg=col)
    assert feats["param_mb"].iloc[0] == feats["params"].iloc[0] * 4 / 1e6
    assert feats["tensor_peak_mb"].is_monotonic_decreasing
    assert feats["compute_intensity"].is_monotonic_increasing
    assert set(ELEMENT_BYTES) == {"fp32", "fp16", "bf16", "int8", "int8-dynamic"}


def test_derived_columns_follow_their_definitions() -> None:
    feats = _features(Config("bottleneck", 101, 1.25, 128, 16), Config("basic", 8, 0.1, 32, 1))
    for _, row in feats.iterrows():
        moved = (row["param_mb"] + row["input_mb"] + row["act_mb_total"]) * 1e6
        assert math.isclose(row["compute_intensity"], row["flops"] / moved, rel_tol=1e-12)
        assert math.isclose(row["log_flops_per_param"], math.log(row["flops"] / row["params"]))
        assert row["act_mb_max"] <= row["act_mb_total"] < row["tensor_peak_mb"] * 10
        assert row["tensor_peak_mb"] > row["param_mb"] + row["input_mb"]
    assert set(feats.columns) == set(FEATURE_COLUMNS)
    for col in INT_COLUMNS:
        assert feats[col].dtype == np.int64, col


# -- against a real CPU measurement ----------------------------------------------------------
def _profiled_peak_bytes(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(tensor-level peak, raw peak) from the profiler's memory events, resident included.

    Tensor level: everything oneDNN allocates and frees inside one ``aten::mkldnn_convolution``
    (blocked-layout copies, scratchpads) is collapsed into that op's net allocation (its
    output), as ``tensor_peak_mb`` defines.
    """
    with torch.inference_mode():
        model(x)  # warm-up
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model(x)
    events = list(prof.profiler.kineto_results.events())
    memory = [(e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"]
    windows = [
        (e.start_ns(), e.start_ns() + e.duration_ns())
        for e in events
        if e.name() == "aten::mkldnn_convolution"
    ]
    assert memory, "the profiler recorded no memory events"

    def peak(collapse: bool) -> int:
        deltas: dict[int, int] = {}  # time -> net bytes (a collapsed op counts at its start)
        for t, nbytes in memory:
            if collapse:
                t = next((w0 for w0, w1 in windows if w0 <= t <= w1), t)
            deltas[t] = deltas.get(t, 0) + nbytes
        running = best = 0
        for t in sorted(deltas):
            running += deltas[t]
            best = max(best, running)
        return best

    resident = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    resident += x.numel() * x.element_size()
    return resident + peak(True), resident + peak(False)


@pytest.mark.parametrize(
    "spec",
    [
        ("basic", 8, 0.1, 32, 1),  # native convolutions with im2col buffers
        ("basic", 10, 0.375, 32, 2),  # oneDNN; channels not a multiple of 16
        ("basic", 14, 0.25, 64, 1),
        ("bottleneck", 50, 0.1, 32, 3),
        ("bottleneck", 50, 0.125, 48, 1),
    ],
)
def test_tensor_peak_matches_cpu_profiler_to_the_byte(spec: tuple) -> None:
    config = Config(*spec)
    torch.manual_seed(0)
    model = build_model(config)
    x = example_input(config)
    tensor_level, raw = _profiled_peak_bytes(model, x)
    predicted = round(_features(config)["tensor_peak_mb"].iloc[0] * 1e6)
    assert predicted == tensor_level
    assert raw >= tensor_level  # oneDNN's internal buffers only add


# -- any module ------------------------------------------------------------------------------
class _TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=True)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = y + self.bn(self.conv(x))  # a residual add of equal shapes
        return self.fc(torch.flatten(nn.functional.avg_pool2d(y, 2), 1))


def test_trace_features_of_a_module_outside_the_spaces() -> None:
    net = _TinyNet().train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    feats = trace_features(net, (2, 3, 8, 8))
    # FLOPs as FlopCounterMode counts them on a real CPU pass
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        net.eval()(torch.zeros(2, 3, 8, 8))
    net.train()
    assert (
        feats["flops"] == counter.get_total_flops() == 2 * 2 * (2 * 8 * 64 * 27) + 2 * 2 * 128 * 10
    )
    assert feats["params"] == sum(p.numel() for p in net.parameters()) == 224 + 16 + 1290
    assert (feats["n_conv"], feats["n_bn"], feats["n_linear"]) == (2, 2, 1)
    assert (feats["n_blocks"], feats["n_stages"]) == (1, 1)
    # activations: 2 conv + 2 BN + relu + add + pool outputs + linear output (fp32)
    big, pooled, logits = 2 * 8 * 64 * 4, 2 * 8 * 16 * 4, 2 * 10 * 4
    assert feats["act_mb_total"] * 1e6 == pytest.approx(6 * big + pooled + logits)
    assert feats["act_mb_max"] * 1e6 == pytest.approx(big)
    # the module is untouched: same device, values and training flag
    assert net.training and all(p.device.type == "cpu" for p in net.parameters())
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    half = trace_features(net, (2, 3, 8, 8), torch.float16)
    assert half["param_mb"] == pytest.approx(feats["param_mb"] / 2)
    assert half["flops"] == feats["flops"]


def test_trace_features_of_a_cpu_model_matches_the_meta_build() -> None:
    config = Config("basic", 10, 0.25, 32, 2)
    on_cpu = trace_features(build_model(config), (2, 3, 32, 32))
    assert on_cpu == _trace(config)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((nn.Linear(2, 2), (0, 2)), "input shape"),
        (("not a module", (1, 2)), "torch.nn.Module"),
        ((nn.Linear(2, 2), (1, 2), torch.int32), "dtype"),
        ((nn.Linear(2, 2), (1, 2), "fp8"), "precision"),
    ],
)
def test_trace_features_rejects_bad_arguments(args: tuple, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        trace_features(*args)


# -- compute_features on frames --------------------------------------------------------------
def test_compute_features_keeps_the_index_and_order() -> None:
    frame = configs_to_frame(load_space("carb_screening").sample(50, seed=3))
    shuffled = frame.sample(frac=1.0, random_state=1)
    original = shuffled.index.to_numpy()
    shuffled.index = original * 10 + 5
    expected = compute_features(frame).iloc[original].reset_index(drop=True)
    got = compute_features(shuffled)
    assert list(got.index) == list(shuffled.index)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected)


def test_compute_features_defaults_precision_and_handles_empty_frames() -> None:
    frame = pd.DataFrame(
        {"family": ["basic"], "depth": [18], "width": [1.0], "resolution": [64], "batch_size": [4]}
    )
    with_prec = frame.assign(precision="fp32", runtime="torch")
    pd.testing.assert_frame_equal(compute_features(frame), compute_features(with_prec))
    # the PyTorch dispatch columns are 0 for other runtimes; nothing else depends on it
    ort = compute_features(frame.assign(runtime="onnxruntime"))
    torch_only = ["native_conv_flops", "onednn_weight_mb", "mmap_mb"]
    big = frame.assign(resolution=224, batch_size=64)
    assert compute_features(big.assign(runtime="onnxruntime"))["mmap_mb"][0] == 0
    assert compute_features(big)["mmap_mb"][0] > 0
    assert (ort[torch_only] == 0).all().all() and compute_features(frame)["onednn_weight_mb"][0] > 0
    pd.testing.assert_frame_equal(
        ort.drop(columns=torch_only), compute_features(frame).drop(columns=torch_only)
    )
    empty = compute_features(frame.iloc[:0])
    assert len(empty) == 0 and list(empty.columns) == list(FEATURE_COLUMNS)


def test_compute_features_canonicalizes_width_like_config() -> None:
    noisy = configs_to_frame([Config("basic", 18, 0.5, 64, 4)]).assign(width=0.50000001)
    exact = configs_to_frame([Config("basic", 18, 0.5, 64, 4)])
    pd.testing.assert_frame_equal(compute_features(noisy), compute_features(exact))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"family": "dense"}, "unknown family"),
        ({"precision": "fp8"}, "unsupported precision"),
        ({"depth": 19}, "invalid depth"),
        ({"batch_size": 0}, "batch_size"),
        ({"width": -1.0}, "width"),
        ({"resolution": 16}, "resolution"),
        ({"depth": "deep"}, "non-numeric depth"),
    ],
)
def test_compute_features_rejects_invalid_values(change: dict, match: str) -> None:
    frame = configs_to_frame([Config("basic", 18, 1.0, 64, 2)] * 3)
    frame = frame.astype({k: object for k in change})
    frame.loc[1, list(change)] = list(change.values())
    with pytest.raises(ConfigError, match=match):
        compute_features(frame)


def test_compute_features_rejects_missing_columns() -> None:
    frame = configs_to_frame([Config("basic", 18, 1.0, 64, 2)]).drop(columns=["resolution"])
    with pytest.raises(ConfigError, match=r"missing column\(s\) \[.resolution.\]"):
        compute_features(frame)
    with pytest.raises(ConfigError, match="DataFrame"):
        compute_features([Config("basic", 18, 1.0, 64, 2)])  # type: ignore[arg-type]


def test_compute_features_on_a_large_grid_equals_small_frames_and_cold_runs() -> None:
    # the speed target (>= 1e6 configs/s) lives in benchmarks/features.py; this checks that
    # the vectorized, cached path gives every row what a one-config frame gives it
    from carb_nas.features import clear_cache

    space = load_space("resnet")
    grid = pd.concat([space.grid()] * 10, ignore_index=True)  # 146,880 configs
    feats = compute_features(grid)
    assert len(feats) == len(grid) and list(feats.index) == list(grid.index)
    n = len(space.grid())
    first = feats.iloc[:n].reset_index(drop=True)
    for k in range(1, 10):
        pd.testing.assert_frame_equal(feats.iloc[k * n : (k + 1) * n].reset_index(drop=True), first)
    clear_cache()
    pd.testing.assert_frame_equal(compute_features(space.grid()), first)
    rows = np.random.default_rng(0).choice(n, size=25, replace=False)
    for i in rows:
        alone = compute_features(space.grid().iloc[[i]]).reset_index(drop=True)
        pd.testing.assert_frame_equal(alone, first.iloc[[i]].reset_index(drop=True))


def test_torch_cpu_columns_are_the_runtime_part() -> None:
    from carb_nas.features import TORCH_CPU_COLUMNS

    assert TORCH_CPU_COLUMNS == ("native_conv_flops", "onednn_weight_mb", "mmap_mb")
    assert set(TORCH_CPU_COLUMNS) <= set(FEATURE_COLUMNS)
    configs = load_space("carb_screening").sample(40, seed=5)
    frame = configs_to_frame([*configs, Config("bottleneck", 50, 2.0, 128, 64)])  # mmaps
    torch_rows = compute_features(frame)
    ort_rows = compute_features(frame.assign(runtime="onnxruntime"))
    assert (torch_rows[list(TORCH_CPU_COLUMNS)] > 0).any().all()
    assert (ort_rows[list(TORCH_CPU_COLUMNS)] == 0).all().all()
    with pytest.raises(ConfigError, match="unsupported runtime"):
        compute_features(frame.assign(runtime="tvm"))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"width": 1e30}, r"width at data row 2: expected a number from 0.0001 to 16, got 1e\+30"),
        (
            {"resolution": 10**30},
            "resolution at data row 2: expected a whole number from 32 to 1024",
        ),
        ({"depth": 2_000_000}, "depth at data row 2: expected a whole number from 4 to 1202"),
        ({"width": float("nan")}, "missing width"),
    ],
)
def test_compute_features_refuses_huge_values_before_any_work(change: dict, match: str) -> None:
    frame = configs_to_frame([Config("basic", 18, 1.0, 64, 2)] * 2).astype(object)
    frame.loc[1, list(change)] = list(change.values())
    with pytest.raises(ConfigError, match=match):
        compute_features(frame)


def test_within_max_gflops_is_the_space_limit_rule() -> None:
    from carb_nas.features import within_max_gflops

    frame = configs_to_frame(load_space("carb_screening").sample(60, seed=1))
    flops = compute_features(frame)["flops"].to_numpy()
    limit = float(np.median(flops)) / 1e9
    keep = within_max_gflops(frame, limit)
    assert keep.dtype == bool and 0 < keep.sum() < len(frame)
    np.testing.assert_array_equal(keep, flops <= limit * 1e9)


def test_envelope_lines_give_the_maximum_of_all_lines() -> None:
    from carb_nas.features._closed_form import _envelope_lines

    rng = np.random.default_rng(0)
    xs = np.arange(2, 400, dtype=np.int64)
    for _ in range(300):
        k = int(rng.integers(1, 40))
        slope = rng.integers(0, 10**6, k) * rng.integers(1, 3, k)
        intercept = rng.integers(0, 10**8, k)
        brute = (slope[:, None] * xs + intercept[:, None]).max(axis=0)
        lines = _envelope_lines(slope, intercept)
        kept = np.array(lines, dtype=np.int64)
        fast = (kept[:, :1] * xs + kept[:, 1:]).max(axis=0)
        np.testing.assert_array_equal(fast, brute)
        assert len(lines) <= k


def test_sum_at_least_matches_brute_force() -> None:
    from carb_nas.features._common import suffix_tables as _suffix_tables
    from carb_nas.features._common import sum_at_least as _sum_at_least

    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 50, size=(30, 7))  # zeros and repeated sizes included
    tables = _suffix_tables(sizes)
    arch = rng.integers(0, 7, size=500)
    limit = rng.integers(1, 60, size=500)
    want = [sizes[:, a][sizes[:, a] >= t].sum() for a, t in zip(arch, limit)]
    np.testing.assert_array_equal(_sum_at_least(tables, arch, limit), want)
    assert len(_sum_at_least(tables, arch[:0], limit[:0])) == 0


def test_mmap_mb_predicts_the_page_faults_measured_on_real_networks() -> None:
    # research/runs/checks/fresh_process_796.parquet: shipped torch configs re-measured with
    # `carb-nas profile --fresh-process` on the development machine: every one with
    # mmap_mb > 0 (78) and 718 without
    from pathlib import Path

    from carb_nas.datasets import load_dataset

    path = Path(__file__).parents[1] / "research" / "runs" / "checks" / "fresh_process_796.parquet"
    rows = load_dataset(path, ok_only=True)
    assert len(rows) == 796 and rows["fingerprint"].str.contains('"fresh_process": true').all()
    pages = compute_features(rows)["mmap_mb"].to_numpy() * 1e6 / 4096
    faults = rows["minor_faults_per_run"].to_numpy(dtype=float)
    big = pages > 0
    assert big.sum() == 78
    np.testing.assert_allclose(faults[big] / pages[big], 1.0, atol=0.01)
    # the rest fault a few pages per run (none of their buffers is mapped anew), against
    # thousands of pages for the smallest mmap_mb > 0 (37.7 MB: 9,216 pages)
    assert np.median(faults[~big]) < 50 and faults[~big].max() < 0.1 * pages[big].min()
