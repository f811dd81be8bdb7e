"""Real measurements of tiny configs on this CPU (torch eager, ONNX Runtime fp32 and INT8)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from torch import nn

from carb_nas.datasets import SCHEMA
from carb_nas.errors import ConfigError, DeviceUnavailableError, InputFileError
from carb_nas.measure import Profiler, Protocol, check_platform, profile_config
from carb_nas.measure._runtimes import ORT_PEAK_METHOD, TORCH_CPU_PEAK_METHOD, torch_cpu_peak_bytes
from carb_nas.space import Config
from tests.measure._machine import thp_always
from tests.measure.fakes import FakeMeter

FAST = Protocol(time_cap_s=0.3, warmup_runs=2, warmup_min_s=0.0)
TINY = Config("basic", 8, 0.1, 32, 1)


class _Allocates(nn.Module):
    """Allocates a known buffer inside forward; returns a scalar."""

    def __init__(self, nbytes: int) -> None:
        super().__init__()
        self.nbytes = nbytes
        self.scale = nn.Parameter(torch.ones(1000))  # 4000 bytes of parameters
        self.register_buffer("offset", torch.zeros(10))  # 40 bytes of buffers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buf = torch.ones(self.nbytes, dtype=torch.uint8)
        return buf[:1].float() + x[:1, :1].sum()


def test_cpu_peak_memory_matches_a_known_allocation():
    nbytes = 100 * 2**20
    x = torch.zeros(2, 8)  # 64 bytes
    peak = torch_cpu_peak_bytes(_Allocates(nbytes), x)
    static = 4000 + 40 + 64
    assert static + nbytes <= peak <= static + nbytes + 4096  # + a few small temporaries


def test_cpu_peak_memory_counts_only_what_the_forward_keeps_alive():
    x = torch.zeros(1, 8)
    small, big = (torch_cpu_peak_bytes(_Allocates(n), x) for n in (2**20, 2**24))
    assert big - small == pytest.approx(2**24 - 2**20, abs=1024)


def _check_row(row: dict, platform: str) -> None:
    assert set(row) == set(SCHEMA)
    assert row["status"] == "ok", row["error"]
    assert row["platform"] == platform and row["device"] == "cpu"
    assert 0.001 < row["latency_ms"] < 1000
    assert row["latency_p90_ms"] >= row["latency_ms"] * 0.999
    assert row["n_runs"] >= FAST.min_runs and row["latency_cv"] >= 0
    assert row["minor_faults_per_run"] >= 0
    assert row["peak_mem_mb"] > 0
    assert row["meter"] == "none" and row["energy_j"] is None
    assert row["energy_reason"].startswith("meter=none")
    fp = json.loads(row["fingerprint"])
    assert fp["threads"] == 1 and fp["platform"] == platform and "torch" in fp
    assert not {"hostname", "user", "node"} & set(fp)
    assert set(fp["allocator"]) == {"libc", "env"}
    assert json.loads(row["protocol_params"])["target_ci_rel"] == 0.02


def test_torch_cpu_row_plausible_and_larger_config_slower():
    prof = Profiler("cpu", "torch", "fp32", threads=1, protocol=FAST, meter="none")
    try:
        small = prof.profile(TINY)
        large = prof.profile(Config("basic", 18, 0.5, 64, 8))
    finally:
        prof.close()
    for row in (small, large):
        _check_row(row, "cpu/torch/fp32")
        assert row["peak_mem_method"] == TORCH_CPU_PEAK_METHOD
    assert large["latency_ms"] > 2 * small["latency_ms"]
    assert large["peak_mem_mb"] > small["peak_mem_mb"]
    params_mb = (
        sum(p.numel() for p in __import__("carb_nas.models").models.build_model(TINY).parameters())
        * 4e-6
    )
    assert small["peak_mem_mb"] > params_mb
    assert small["key"] == TINY.key
    # the machine-speed probe ran among the runs: a 64-channel 3x3 conv at 28 px, 0.06 GFLOP
    assert 0.01 < small["reference_ms"] < 50 and 0.01 < large["reference_ms"] < 50


def test_a_profiler_without_the_speed_probe_leaves_reference_ms_empty():
    prof = Profiler("cpu", "torch", "fp32", 1, FAST, meter="none", reference_probe=False)
    try:
        assert prof.profile(TINY)["reference_ms"] is None
    finally:
        prof.close()


def test_peak_memory_agrees_with_closed_form_tensor_peak():
    features = pytest.importorskip("carb_nas.features")
    if not hasattr(features, "compute_features"):
        pytest.skip("carb_nas.features.compute_features not available yet")
    import pandas as pd

    cfgs = [TINY, Config("bottleneck", 50, 0.25, 48, 2)]
    frame = pd.DataFrame([c.as_dict() for c in cfgs])
    feats = features.compute_features(frame)
    if "tensor_peak_mb" not in feats:
        pytest.skip("features has no tensor_peak_mb column")
    from carb_nas.models import build_model, example_input

    # The closed form leaves out oneDNN's internal reorder buffers and scratchpads (ISA- and
    # thread-dependent; up to +45% in 3,000 campaign rows), which the measurement includes.
    for c, predicted in zip(cfgs, feats["tensor_peak_mb"]):
        measured = torch_cpu_peak_bytes(build_model(c), example_input(c)) / 1e6
        assert predicted * 0.99 <= measured <= predicted * 1.5


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_onnxruntime_rows(precision):
    prof = Profiler("cpu", "onnxruntime", precision, threads=1, protocol=FAST, meter="none")
    try:
        rows = [prof.profile(TINY.replace(batch_size=b)) for b in (1, 4)]
        prepared_once = prof._prepared
    finally:
        prof.close()
    for row in rows:
        _check_row(row, f"cpu/onnxruntime/{precision}")
        assert row["peak_mem_method"] == ORT_PEAK_METHOD
        assert row["runtime"] == "onnxruntime" and row["precision"] == precision
    assert prepared_once is not None  # one export served both batch sizes
    err = rows[0]["output_rel_error"]
    if precision == "fp32":
        assert err < 1e-4
    else:
        assert 0 < err < 0.3
        assert json.loads(rows[0]["fingerprint"])["calibration"]["batches"] == 8
    assert rows[1]["peak_mem_mb"] > rows[0]["peak_mem_mb"]


def test_host_memory_cap_gives_oom_rows_and_errors_are_rows():
    row = profile_config(TINY, threads=1, protocol=FAST, meter="none", max_host_mem_mb=0.001)
    assert row["status"] == "oom" and "max-host-mem-mb" in row["error"]
    assert row["latency_ms"] is None and row["peak_mem_mb"] > 0

    class Broken(Profiler):
        def _get_prepared(self, config):
            raise RuntimeError("scripted failure")

    prof = Broken("cpu", "torch", "fp32", threads=1, protocol=FAST, meter="none")
    row = prof.profile(TINY)
    assert row["status"] == "error" and "scripted failure" in row["error"]


def test_fake_meter_rows_are_labelled_and_never_valid_data():
    from carb_nas.datasets._validate import validate_rows

    prof = Profiler(
        "cpu",
        "torch",
        "fp32",
        threads=1,
        protocol=FAST,
        meter=FakeMeter(),
        energy_min_window_s=0.01,
        idle_s=0.01,
    )
    try:
        row = prof.profile(TINY)
    finally:
        prof.close()
    assert row["meter"] == "fake-counter" and row["energy_j"] > 0
    import pandas as pd

    with pytest.raises(InputFileError, match="meter"):
        validate_rows(pd.DataFrame([row]), "fake rows")


@pytest.mark.parametrize(
    ("device", "runtime", "precision", "error", "match"),
    [
        ("tpu", "torch", "fp32", ConfigError, "unknown device"),
        ("cpu", "tensorrt", "fp32", ConfigError, "unknown runtime"),
        ("cpu", "torch", "int8", ConfigError, "unsupported precision"),
        ("cpu", "torch", "fp16", ConfigError, "unsupported precision"),
        ("cpu", "onnxruntime", "fp8", ConfigError, "unsupported precision"),
    ],
)
def test_bad_platforms_are_clear_errors(device, runtime, precision, error, match):
    with pytest.raises(error, match=match):
        check_platform(device, runtime, precision)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(DeviceUnavailableError, match="use --device cpu"):
        check_platform("cuda:0", "torch", "fp16")


def test_swapping_the_protocol_keeps_the_model_and_records_the_new_one():
    prof = Profiler("cpu", "torch", "fp32", threads=1, protocol=FAST, meter="none")
    first = prof.profile(TINY)
    model = prof._prepared
    prof.protocol = Protocol.named("carb", cooldown_s=0.0)
    second = prof.profile(TINY)
    assert prof._prepared is model  # both protocols timed the same model instance
    assert first["protocol"] == "adaptive" and second["protocol"] == "carb"
    assert json.loads(second["protocol_params"])["min_runs"] == 100 and second["n_runs"] == 100
    assert json.loads(second["fingerprint"])["protocol"] == "carb"
    prof.close()


def test_fingerprint_records_the_allocator_environment(monkeypatch):
    from carb_nas.measure._profiler import allocator_fingerprint

    for k in [k for k in os.environ if k.startswith("MALLOC_")]:
        monkeypatch.delenv(k)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert allocator_fingerprint()["env"] == {}
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4294967296")
    monkeypatch.setenv("LD_PRELOAD", "/home/someone/lib/libjemalloc.so.2:/opt/x/libfoo.so")
    env = allocator_fingerprint()["env"]
    assert env == {
        "MALLOC_MMAP_THRESHOLD_": "4294967296",
        "LD_PRELOAD": "libjemalloc.so.2 libfoo.so",
    }


def _fresh_profiler():
    return Profiler(
        "cpu",
        "torch",
        "fp32",
        threads=1,
        protocol=FAST,
        meter="none",
        idle_s=0,
        fresh_process=True,
    )


def test_fresh_process_measures_each_config_from_a_clean_heap():
    from carb_nas.features import compute_features
    from carb_nas.space import configs_to_frame

    heavy = Config("basic", 18, 2.0, 32, 4)  # 113.2 MB of buffers >= 32 MiB on every call
    prof = _fresh_profiler()
    try:
        tiny, big = prof.profile(TINY), prof.profile(heavy)
    finally:
        prof.close()
    for row in (tiny, big):
        _check_row(row, "cpu/torch/fp32")
        assert json.loads(row["fingerprint"])["fresh_process"] is True
        assert row["reference_ms"] > 0  # the child timed the probe too
    if sys.platform.startswith("linux") and not thp_always():
        # a fresh process maps those buffers anew on every call: ~244 faults per MB
        pages = compute_features(configs_to_frame([heavy]))["mmap_mb"].iloc[0] * 1e6 / 4096
        assert pages * 0.95 < big["minor_faults_per_run"] < pages * 1.1


@pytest.mark.slow
def test_fresh_process_server_that_died_is_started_again():
    prof = _fresh_profiler()
    try:
        prof.profile(TINY)
        prof._server._proc.kill()
        prof._server._proc.wait()
        again = prof.profile(TINY)
    finally:
        prof.close()
    _check_row(again, "cpu/torch/fp32")
    assert json.loads(again["fingerprint"])["fresh_process"] is True


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"device": "cuda"}, "device 'cpu'"),
        ({"meter": FakeMeter()}, "a meter name"),
    ],
)
def test_fresh_process_needs_a_cpu_platform_given_by_names(kwargs, words):
    args = {"device": "cpu", "runtime": "torch", "precision": "fp32", "meter": "none"}
    with pytest.raises(ConfigError, match=words):
        Profiler(**{**args, **kwargs}, fresh_process=True)


def test_fresh_process_server_reports_a_failed_child_and_keeps_serving():
    from carb_nas.measure._fresh import FreshProcessServer

    server = FreshProcessServer()
    args = {"device": "cpu", "runtime": "torch", "precision": "fp32", "threads": 1}
    args |= {"meter": "none", "idle_s": 0.0, "protocol": FAST}
    try:
        with pytest.raises(RuntimeError, match="unsupported precision"):
            server.profile({**args, "precision": "int4"}, TINY)
        pid = server._proc.pid
        row = server.profile(args, TINY)
        assert row["status"] == "ok" and server._proc.pid == pid  # the same server
    finally:
        server.close()
    assert server._proc is None
