"""Every CPU runtime x precision on a tiny model: prepare, run, agreement with fp32.

Real runs on this CPU (no fakes). A runtime whose extra is missing is skipped with the install
hint (CI installs the extras); LiteRT also needs a converter (litert-torch here or
$CARB_NAS_LITERT_PYTHON), and is skipped without one.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from torch import nn

from carb_nas.errors import ConfigError, DeviceUnavailableError, MeasurementError
from carb_nas.measure import (
    SUPPORTED,
    Profiler,
    Protocol,
    calibration_batches,
    check_platform,
    get_runtime,
)
from carb_nas.space import Config

TINY = Config("basic", 8, 0.1, 32, 1)
FAST = Protocol(time_cap_s=0.2, warmup_runs=1, warmup_min_s=0.0)
EXTRA = {"onnxruntime": "onnxruntime", "openvino": "openvino", "litert": "ai_edge_litert"}
CPU_PLATFORMS = [
    # LiteRT converts through litert-torch (jax): ~25 s per model here
    pytest.param(r, p, marks=[pytest.mark.slow] if r in ("litert", "openvino") else [])
    for (k, r), ps in SUPPORTED.items()
    if k == "cpu"
    for p in ps
]


def _runtime(runtime: str, precision: str, **kw):
    module = EXTRA.get(runtime)
    if module and importlib.util.find_spec(module) is None:
        pytest.skip(f"{runtime} extra not installed")
    try:
        return get_runtime("cpu", runtime, precision, threads=1, **kw)
    except DeviceUnavailableError as e:
        if runtime == "litert":
            pytest.skip(f"no LiteRT converter here: {e}")
        raise


def _cpu_lacks(runtime: str, precision: str) -> bool:
    """OpenVINO bf16 / fp16 on a CPU whose plugin cannot run them (e.g. AVX2-only Zen 3)."""
    if runtime != "openvino" or precision not in ("bf16", "fp16"):
        return False
    import openvino as ov

    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return precision.upper() not in caps


def _check_refused(rt, precision: str) -> None:
    # where the CPU cannot run the precision, the run is refused in one line, not faked in fp32
    with pytest.raises(MeasurementError, match=f"did not honour {precision}.*use fp32"):
        rt.prepare_module(_tiny_net(), (3, 16, 16), ("tiny", precision))


def _tiny_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.ReLU6(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    ).eval()


@pytest.mark.parametrize(("runtime", "precision"), CPU_PLATFORMS)
def test_every_cpu_platform_runs_a_module_and_agrees_with_fp32(runtime, precision):
    rt = _runtime(runtime, precision)
    if _cpu_lacks(runtime, precision):
        _check_refused(rt, precision)
        return
    prepared = rt.prepare_module(_tiny_net(), (3, 16, 16), ("tiny", precision))
    try:
        out = rt.logits(prepared, rt.make_batch(prepared, 3))
        assert out.shape == (3, 10) and np.isfinite(out).all()
        assert rt.run_timed(prepared, rt.make_batch(prepared, 3)) > 0
        scheme = rt.scheme()
        assert set(scheme) == {"conversion", "quantization", "calibration"}
        if precision == "fp32" and runtime == "torch":
            return
        # agreement with the fp32 module, named as such: relative error and top-1 agreement
        err, top1 = prepared.info["output_rel_error"], prepared.info["top1_agreement"]
        assert 0 <= err < (1e-4 if precision == "fp32" else 0.5)
        assert 0.0 <= top1 <= 1.0
        if precision == "int8":
            assert scheme["calibration"] is not None  # the calibration set is recorded
            # ONNX Runtime's QDQ settings only where ONNX Runtime quantized (issue 15: the
            # OpenVINO rows recorded format QDQ / MinMax though NNCF quantized them)
            assert ("format" in scheme["calibration"]) == (runtime == "onnxruntime")
    finally:
        rt.release(prepared)


@pytest.mark.parametrize(
    "runtime", ["onnxruntime", pytest.param("openvino", marks=pytest.mark.slow)]
)
def test_profiler_rows_for_new_platforms(runtime):
    _runtime(runtime, "int8")
    prof = Profiler("cpu", runtime, "int8", threads=1, protocol=FAST, meter="none", idle_s=0)
    try:
        row = prof.profile(TINY)
    finally:
        prof.close()
    assert row["status"] == "ok", row["error"]
    assert row["platform"] == f"cpu/{runtime}/int8"
    assert row["latency_ms"] > 0 and row["output_rel_error"] is not None
    fp = json.loads(row["fingerprint"])
    if runtime == "openvino":  # new platforms record conversion, quantization, calibration
        assert fp["scheme"]["calibration"]["batches"] == 8 and fp["nncf"]
    else:  # the shipped platforms' fingerprints stay as they were
        assert "scheme" not in fp and fp["calibration"]["batches"] == 8


def test_torch_int8_dynamic_quantizes_linear_layers_only():
    rt = _runtime("torch", "int8-dynamic")
    prepared = rt.prepare(TINY)
    assert prepared.info["quantized_linear_layers"] == 1  # the classifier; convs stay fp32
    mods = list(prepared.model.modules())
    assert not any(type(m) is nn.Linear for m in mods)  # the float Linear is gone ...
    assert any("quantized" in type(m).__module__ for m in mods)  # ... replaced by a dynamic one
    assert any(type(m) is nn.Conv2d for m in mods)  # convolutions stay fp32
    assert "nn.Linear only" in rt.scheme()["quantization"]


@pytest.mark.slow
def test_openvino_reports_executed_precisions():
    rt = _runtime("openvino", "bf16")
    if _cpu_lacks("openvino", "bf16"):
        _check_refused(rt, "bf16")
        return
    prepared = rt.prepare_module(_tiny_net(), (3, 16, 16))
    assert any(k.startswith("bf16") for k in prepared.info["executed_precisions"])


def test_openvino_onnx_conversion_path():
    if importlib.util.find_spec("openvino") is None:
        pytest.skip("openvino extra not installed")
    rt = _runtime("openvino", "fp32", conversion="onnx")
    prepared = rt.prepare_module(_tiny_net(), (3, 16, 16))
    assert prepared.info["output_rel_error"] < 1e-4
    assert "onnx" in rt.scheme()["conversion"]


# -- bad input ------------------------------------------------------------------------------
def test_precision_a_runtime_cannot_run_is_one_line():
    with pytest.raises(ConfigError, match=r"unsupported precision for cpu/openvino") as e:
        check_platform("cpu", "openvino", "int8-dynamic")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="unknown runtime"):
        check_platform("cpu", "tensorrt", "fp32")


def test_missing_extra_names_the_install_command(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_openvino(name, *a, **k):
        if name == "openvino":
            raise ImportError("No module named 'openvino'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_openvino)
    with pytest.raises(DeviceUnavailableError, match=r"pip install 'carb-nas\[openvino\]'") as e:
        get_runtime("cpu", "openvino", "fp32")
    assert "\n" not in str(e.value)


def test_litert_without_converter_says_how(monkeypatch):
    if importlib.util.find_spec("ai_edge_litert") is None:
        pytest.skip("litert extra not installed")
    from carb_nas.measure import _litert

    monkeypatch.setattr(_litert, "converter_available", lambda: None)
    with pytest.raises(DeviceUnavailableError, match="CARB_NAS_LITERT_PYTHON"):
        get_runtime("cpu", "litert", "fp32")


def test_calibration_set_of_the_wrong_shape(tmp_path):
    with pytest.raises(ConfigError, match=r"wrong shape: expected \(N, 3, 32, 32\)") as e:
        calibration_batches(np.zeros((4, 3, 16, 16), np.float32), (3, 32, 32))
    assert "(4, 3, 16, 16)" in str(e.value) and "\n" not in str(e.value)
    good = tmp_path / "c.npy"
    np.save(good, np.ones((2, 3, 8, 8), np.float32))
    assert [b.shape for b in calibration_batches(str(good), (3, 8, 8))] == [(1, 3, 8, 8)] * 2
    bad = tmp_path / "bad.npy"
    bad.write_text("not numpy")
    with pytest.raises(ConfigError, match="unreadable calibration set"):
        calibration_batches(str(bad), (3, 8, 8))


def test_wrong_calibration_fails_before_any_export():
    rt = _runtime("onnxruntime", "int8", calibration=np.zeros((2, 3, 9, 9), np.float32))
    with pytest.raises(ConfigError, match="wrong shape"):
        rt.prepare(TINY)
    assert not list(rt.workdir.iterdir())  # nothing was exported


class _NoExport(nn.Module):
    """adaptive_avg_pool2d to 7x7 from 3x3: torch runs it, the ONNX exporter cannot."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.fc = nn.Linear(3 * 49, 4)

    def forward(self, x):
        return self.fc(self.pool(x).flatten(1))


def test_model_that_fails_conversion_names_the_op(capfd):
    rt = _runtime("onnxruntime", "fp32")
    with pytest.raises(MeasurementError, match="adaptive_avg_pool2d") as e:
        rt.prepare_module(_NoExport().eval(), (3, 3, 3))
    assert "\n" not in str(e.value) and len(str(e.value)) < 600
    out, err = capfd.readouterr()
    assert "Torch IR graph" not in out + err  # the exporter's graph dump is silenced


def test_failed_conversion_is_an_error_row_not_a_crash():
    _runtime("onnxruntime", "fp32")
    prof = Profiler("cpu", "onnxruntime", "fp32", 1, protocol=FAST, meter="none", idle_s=0)
    try:
        row = prof.profile(Config("vgg", 11, 0.1, 64, 1))  # 2x2 -> 7x7 adaptive pool
    finally:
        prof.close()
    assert row["status"] == "error" and "adaptive_avg_pool2d" in row["error"]
