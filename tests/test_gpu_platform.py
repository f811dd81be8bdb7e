"""The GPU platform measured on an NVIDIA H200 (benchmarks/gpu_campaign.py): the shipped
cuda/torch/{fp16,fp32} rows are real NVML/CUDA measurements with their fingerprint, and their
default model predicts configs nobody has run (it cannot read the clocks seen while measuring).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from carb_nas.cli import cli
from carb_nas.costmodel import load_default_model
from carb_nas.datasets import load_dataset, shipped_names

GPU = ("cuda/torch/fp16", "cuda/torch/fp32")


@pytest.mark.parametrize("platform", GPU)
def test_gpu_rows_are_real_measurements_with_their_fingerprint(platform):
    assert platform in shipped_names() and f"{platform}/zoo@nvidia-h200" in shipped_names()
    rows = load_dataset(platform)
    assert len(rows) >= 150 and (rows.status == "ok").all()
    assert set(rows.meter) == {"nvml-counter"}  # the total-energy counter, never a fake
    assert (rows.energy_j > 0).all() and (rows.energy_window_s >= 0.9).all()
    assert (rows.peak_mem_method.str.contains("max_memory_allocated")).all()
    fp = json.loads(rows.fingerprint.iloc[0])
    assert fp["device_name"] == "NVIDIA H200" and fp["platform"] == platform
    assert fp["driver"] and fp["cuda"] and fp["locked_sm_clock_mhz"] is None
    assert fp["energy_counter_update_period_s"] == pytest.approx(0.1, rel=0.05)
    assert rows.family.nunique() >= 10  # the built-in families and both ResNet blocks


def test_fp16_and_fp32_pair_up_by_config():
    pair = ["family", "depth", "width", "resolution", "batch_size"]
    a, b = load_dataset("cuda/torch/fp16"), load_dataset("cuda/torch/fp32")
    both = a.merge(b, on=pair, suffixes=("_16", "_32"))
    assert len(both) == len(a) == len(b)
    # fp16 halves the weights and activations: memory, not latency, is where it shows
    assert np.median(both.peak_mem_mb_32 / both.peak_mem_mb_16) > 1.4


def test_default_gpu_model_predicts_and_calibrates(tmp_path, monkeypatch):
    """One test, so one worker traces the 181 configs (~13 s; conftest gives default models
    the tiny recipe and a cache of the run's own)."""
    import carb_nas.calibrate as cal_mod
    from carb_nas.calibrate import calibrate_on_arrival
    from carb_nas.costmodel import model_inputs
    from tests.test_calibrate import FakeClock, FakeProfiler

    model = load_default_model("cuda/torch/fp16", verbose=False)
    assert model.architecture_only and "energy_j" in model.targets_
    assert not set(model.feature_names_in_) & {"sm_clock_mhz", "temperature_c"}
    configs = tmp_path / "c.csv"
    pd.DataFrame(
        {
            "family": ["mobilenet_v2", "basic"],
            "depth": [18, 18],
            "width": [1.0, 1.0],
            "resolution": [224, 128],
            "batch_size": [32, 64],
            "precision": ["fp16", "fp16"],
        }
    ).to_csv(configs, index=False)
    r = CliRunner().invoke(cli, ["predict", "cuda/torch/fp16", str(configs), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)["predictions"]
    assert len(out) == 2 and all(o["energy_j"] > 0 and o["latency_ms"] > 0 for o in out)
    # CARB's space holds fp32 and fp16: the hint names the fp16 the model knows, not 'cpu'
    from carb_nas.errors import ModelError
    from carb_nas.scoring import align_to_platform

    both = pd.DataFrame({"family": ["basic"] * 2, "precision": ["fp16", "fp32"]})
    with pytest.raises(ModelError, match=r"precision line reads \['fp16'\]"):
        align_to_platform(model, both)
    # a user's own network on the GPU platform: energy too, with intervals, and the warning
    # says how a multi-family model generalizes (as to a held-out family)
    import torch.nn as nn

    import carb_nas

    net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    with pytest.warns(UserWarning, match="held out in `carb-nas model evaluate"):
        costs = carb_nas.predict_costs(net, (8, 3, 64, 64), platform="cuda/torch/fp16")
    lo, mid, hi = (
        costs.values["energy_j"][1],
        costs.values["energy_j"][0],
        costs.values["energy_j"][2],
    )
    assert 0 < lo <= mid <= hi and costs.platform == "cuda/torch/fp16"
    # ... and inside the user's Optuna study: an energy budget is one constraint
    import optuna

    from carb_nas.integrations import CostConstraints, stored_constraints

    trial = optuna.create_study(direction="maximize").ask()
    with pytest.warns(UserWarning, match="never saw"):  # the architecture: said once
        CostConstraints("cuda/torch/fp16", budgets={"energy_j": 0.01}).constrain(
            trial, net, (8, 3, 64, 64)
        )
    assert stored_constraints(trial) == pytest.approx({"carb_nas.energy_j": mid - 0.01})

    # a GPU user's first `carb-nas calibrate cuda/torch/fp16`: the scripted FAKE profiler's GPU
    # runs 1.3x slower and draws 0.8x the energy of the H200 model; the calibration must
    # recover both (CPU calibrations never had an energy target)
    class FakeGPU(FakeProfiler):
        kind = "cuda"

        def profile(self, config):
            row = super().profile(config)
            pred = self.model.predict(model_inputs(pd.DataFrame([config.as_dict()])))
            row.update(device="cuda", energy_j=float(pred["energy_j"].iloc[0]) * 0.8)
            return row

    clock = FakeClock()  # each config "takes" 1 s: 12 of them in the 12 s budget
    monkeypatch.setattr(cal_mod.time, "perf_counter", clock.perf_counter)
    prof = FakeGPU(model, 1.3, platform="cuda/torch/fp16", device_name="FAKE GPU (scripted)",
                   clock=clock, seconds_per_config=1.0)  # fmt: skip
    cal = calibrate_on_arrival(
        "cuda/torch/fp16", 12, prof, source_model=model, passes=1, save=False
    )
    assert 8 <= cal.n_rows <= 12
    f = cal.factors()
    assert f["latency_ms"] == pytest.approx(1.3, rel=0.02)
    assert f["energy_j"] == pytest.approx(0.8, rel=0.02)
    assert f["peak_mem_mb"] == pytest.approx(1.0, rel=0.02)
    assert "cuda_torch_fp16" in str(cal.directory) and not cal.directory.exists()


def test_transfer_between_the_gpu_precisions_trains_its_baseline_on_any_family():
    """N rows of a multi-family pool miss families: the target-only baseline must still
    train (it failed on every draw before), and no model reads the measured telemetry."""
    from carb_nas.reports import transfer

    pair = ["family", "depth", "width", "resolution", "batch_size"]
    a = load_dataset("cuda/torch/fp32").sample(90, random_state=0)  # all groups,
    b = load_dataset("cuda/torch/fp16").merge(a[pair], on=pair)  # in seconds
    out = transfer(a, b, few_shot=[20], repeats=1, prior="none")
    run = out["few_shot"]["runs"]["20"]
    assert run["target_only_errors"] == []
    assert np.isfinite(run["target_only"]["peak_mem_mb"]["r2_mean"])
    # memory moves with precision (fp16 about 0.6x): calibration on 20 rows recovers it
    assert (
        run["calibrated"]["peak_mem_mb"]["r2_mean"]
        > 0.8
        > run["source_only"]["peak_mem_mb"]["r2_mean"]
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks a machine without a GPU")
def test_validate_with_a_gpu_model_measures_on_the_gpu_or_says_there_is_none(tmp_path):
    """It measured on the CPU at the model's 16 threads before (a thread-count error, and
    GPU predictions would have been compared with CPU measurements)."""
    shortlist = tmp_path / "p.csv"
    shortlist.write_text(
        "family,depth,width,resolution,batch_size,precision\nbasic,18,1.0,128,64,fp16\n"
    )
    args = ["validate", str(shortlist), "--model", "cuda/torch/fp16", "--budget", "latency_ms=5"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 1 and "CUDA device unavailable" in r.output, r.output
    assert "measuring on cuda/torch/fp16" in r.output and "threads" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv"]  # nothing written


def test_calibrating_a_gpu_platform_leaves_the_host_thread_count_alone(monkeypatch):
    """The H200 rows record their host's 16 cores; a GPU calibration must not set torch's
    CPU threads to that on the user's machine (the CPU's count is capped, the GPU's unset)."""
    import carb_nas.measure as measure
    from carb_nas.predictors import _store

    seen = {}
    monkeypatch.setattr(_store, "check_runnable", lambda p: tuple(p.split("/")[:3]))
    monkeypatch.setattr(
        measure, "Profiler", lambda *a, **k: (seen.setdefault("args", a), seen.update(kw=k))
    )
    source = type("M", (), {"platform_": {"threads": 16}})()
    _store.calibration_profiler("cuda/torch/fp16", source)
    assert seen["args"][:4] == ("cuda", "torch", "fp16", None)
    # CARB's training-mode utilization window costs 1 s a CUDA row and feeds no calibration
    assert seen["kw"]["utilization_window_s"] == 0
    del seen["args"]
    _store.calibration_profiler("cpu/torch/fp32", source)
    assert seen["args"][3] == min(16, measure.usable_cpus())


def test_cuda_rows_carry_no_host_cpu_speed_probe(monkeypatch):
    """On the H200 host the CPU probe read 0.3-23 ms at random between CUDA runs (GPU sitting
    2): a CUDA profiler must not time it, a CPU one still does."""
    from carb_nas.measure import Profiler
    from carb_nas.measure._reference import LAUNCH_WORKLOAD
    from carb_nas.measure._runtimes import TorchRuntime

    monkeypatch.setattr(Profiler, "_device_name", lambda self: "FAKE GPU (scripted)")
    cpu = TorchRuntime("cpu", "fp32", 1)
    assert Profiler(runtime_obj=cpu, meter="none", idle_s=0).reference_probe
    gpu = TorchRuntime("cpu", "fp32", 1)
    gpu.kind = "cuda"  # the runtime a CUDA device gets, without a CUDA device
    prof = Profiler(runtime_obj=gpu, meter="none", idle_s=0)
    assert prof.kind == "cuda" and prof.reference_probe is False
    assert "reference" not in prof.fingerprint
    # asked for, a CUDA row times the launch probe instead, and its fingerprint says so
    asked = Profiler(runtime_obj=gpu, meter="none", idle_s=0, reference_probe=True)
    assert asked.reference_probe and asked.fingerprint["reference"] == LAUNCH_WORKLOAD


def test_the_launch_probe_times_a_chain_of_tiny_kernels():
    """The launch workload (a GPU's dispatch speed) runs on any device; here on the CPU, where
    a chain of 16 tiny convs costs more than nothing and less than the conv probe's 64x28x28."""
    from carb_nas.errors import ConfigError
    from carb_nas.measure import ReferenceProbe
    from carb_nas.measure._reference import LAUNCH_WORKLOAD

    probe = ReferenceProbe(burst=5, workload="launch")
    probe.start()
    probe.run_burst()
    assert probe.workload == LAUNCH_WORKLOAD and len(probe.samples_s) == 5
    assert all(0 < t < 1.0 for t in probe.samples_s)
    with pytest.raises(ConfigError, match="expected 'conv'.*got 'gemm'"):
        ReferenceProbe(workload="gemm")
