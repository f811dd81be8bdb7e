"""OpenVINO on the CPU: fp32, int8 (NNCF post-training quantization), bf16 and fp16 hints.

The model is read from the ONNX export (``conversion="onnx"``, the same file ONNX Runtime
runs) or converted from PyTorch directly (``conversion="pytorch"``, ``openvino.convert_model``
with an example input; the default). ``int8`` quantizes the fp32 OpenVINO model with
``nncf.quantize`` (preset PERFORMANCE: symmetric int8 weights and activations, fast bias
correction) on the calibration set (``calibration_batches``: the documented seeded set unless
one is given). ``bf16`` / ``fp16`` set ``INFERENCE_PRECISION_HINT``; whether the CPU plugin
honoured it is read back from the compiled model's executed graph (each node's
``runtimePrecision``), and a hint no node follows is an error, not a silent fp32 row.

A model is compiled once per batch size (static shapes: the CPU plugin's fastest path),
``NUM_STREAMS=1``, ``INFERENCE_NUM_THREADS`` = threads, ``PERFORMANCE_HINT=LATENCY``.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from carb_nas.errors import ConfigError, DeviceUnavailableError, MeasurementError
from carb_nas.measure._runtimes import (
    INPUT_SEED,
    INSTALL_HINTS,
    Prepared,
    Runtime,
    _calibration_record,
    _group_name,
    _seeded_randn,
    calibration_batches,
    export_onnx,
)

__all__ = ["OpenVinoRuntime", "OV_PEAK_METHOD", "CONVERSIONS"]

CONVERSIONS = ("pytorch", "onnx")
_HINTS = {"fp32": "f32", "int8": "f32", "bf16": "bf16", "fp16": "f16"}
OV_PEAK_METHOD = (
    "rss: VmHWM after resetting it (clear_refs 5) minus VmRSS before one inference "
    "(whole-process pages: includes allocator slack and plugin buffers; coarse)"
)


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError as e:
        raise DeviceUnavailableError(
            f"OpenVINO unavailable: expected the `{name}` package, got ImportError ({e}). "
            f"Install the extra: {INSTALL_HINTS['openvino']}."
        ) from e


def rss_peak_mb(run: Any) -> float:
    """MB of resident memory one call adds at its peak (Linux /proc; coarse)."""

    def status(key: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
        raise MeasurementError(f"/proc/self/status has no {key}: expected Linux.")

    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError as e:
        raise MeasurementError(
            f"cannot reset the RSS high-water mark: expected a writable /proc/self/clear_refs "
            f"(Linux), got {e}. Peak memory needs Linux here."
        ) from e
    before = status("VmRSS")
    run()
    return max(status("VmHWM") - before, 0) / 1e6


class OpenVinoRuntime(Runtime):
    """OpenVINO CPU plugin (see module docstring)."""

    name = "openvino"

    def __init__(
        self,
        device: str = "cpu",
        precision: str = "fp32",
        threads: int | None = None,
        workdir: str | Path | None = None,
        calibration: Any = None,
        conversion: str = "pytorch",
    ) -> None:
        super().__init__(device, precision, threads, calibration)
        if conversion not in CONVERSIONS:
            raise ConfigError(
                f"unknown OpenVINO conversion: expected one of {list(CONVERSIONS)}, got "
                f"{conversion!r}. Use pytorch (openvino.convert_model) or onnx (read the export)."
            )
        self.conversion = conversion
        self._ov = _import("openvino")
        if precision == "int8":
            self._nncf = _import("nncf")
        self._core = self._ov.Core()
        self._tmp = tempfile.TemporaryDirectory(prefix="carb-nas-ov-", dir=workdir)
        self.workdir = Path(self._tmp.name)

    def versions(self) -> dict:
        v = {"torch": torch.__version__, "openvino": self._ov.__version__}
        if self.precision == "int8":
            v["nncf"] = self._nncf.__version__
        return v

    def scheme(self) -> dict:
        conversion = (
            "openvino.convert_model(torch module, example_input)"
            if self.conversion == "pytorch"
            else "torch.onnx.export (opset 17) -> openvino.convert_model(onnx)"
        )
        quant = {
            "fp32": "none (INFERENCE_PRECISION_HINT f32)",
            "int8": "nncf.quantize preset PERFORMANCE: symmetric int8 weights and activations, "
            "fast bias correction",
            "bf16": "INFERENCE_PRECISION_HINT bf16 (CPU plugin)",
            "fp16": "INFERENCE_PRECISION_HINT f16 (CPU plugin)",
        }[self.precision]
        calib = (
            _calibration_record(self.calibration, inputs_only=True)
            if self.precision == "int8"
            else None
        )
        return {"conversion": conversion, "quantization": quant, "calibration": calib}

    def prepare_module(
        self, module: torch.nn.Module, input_shape: tuple[int, ...], group: tuple | None = None
    ) -> Prepared:
        module = module.eval()
        input_shape = tuple(input_shape)
        batches = calibration_batches(self.calibration, input_shape)  # its shape, before work
        ov = self._ov
        dynamic = ov.PartialShape([-1, *input_shape])
        try:
            if self.conversion == "onnx":
                path = self.workdir / f"{_group_name(group) if group else id(module)}.onnx"
                export_onnx(module, input_shape, path)
                model = ov.convert_model(str(path))
                path.unlink(missing_ok=True)
            else:
                x1 = _seeded_randn((1, *input_shape), INPUT_SEED)
                with torch.no_grad():
                    model = ov.convert_model(module, example_input=x1, input=[dynamic])
        except MeasurementError:
            raise
        except Exception as e:  # noqa: BLE001 - the converter raises many types
            raise MeasurementError(
                f"OpenVINO conversion failed for {type(module).__name__} "
                f"({self.conversion}): expected openvino.convert_model to succeed, got "
                f"{type(e).__name__}: {_first_line(e)}. Try --conversion onnx, or another runtime."
            ) from e
        if self.precision == "int8":
            nncf = self._nncf
            try:
                with contextlib.redirect_stdout(None):
                    model = nncf.quantize(
                        model,
                        nncf.Dataset(batches),
                        preset=nncf.QuantizationPreset.PERFORMANCE,
                        subset_size=len(batches),
                    )
            except Exception as e:  # noqa: BLE001 - NNCF raises many types
                raise MeasurementError(
                    f"NNCF INT8 quantization failed: expected nncf.quantize to succeed, got "
                    f"{type(e).__name__}: {_first_line(e)}. Use --precision fp32."
                ) from e
        prepared = Prepared(group, {"model": model, "compiled": {}}, {"input_shape": input_shape})
        self._compiled(prepared, 1)  # compile now: errors and the precision check up front
        self._agreement(prepared, module, input_shape)
        return prepared

    def _compiled(self, prepared: Prepared, batch_size: int) -> Any:
        cache = prepared.model["compiled"]
        if batch_size in cache:
            return cache[batch_size]
        model = prepared.model["model"].clone()
        model.reshape([batch_size, *prepared.info["input_shape"]])
        props = {
            "INFERENCE_NUM_THREADS": self.threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": _HINTS[self.precision],
        }
        try:
            compiled = self._core.compile_model(model, "CPU", props)
        except Exception as e:  # noqa: BLE001
            raise MeasurementError(
                f"OpenVINO could not compile the model for the CPU at {self.precision}: got "
                f"{type(e).__name__}: {_first_line(e)}. Use --precision fp32."
            ) from e
        executed = Counter(
            str(getattr(op.get_rt_info()["runtimePrecision"], "value", "?"))
            for op in compiled.get_runtime_model().get_ops()
            if "runtimePrecision" in op.get_rt_info()
        )
        prepared.info["executed_precisions"] = dict(sorted(executed.items()))
        want = {"bf16": "bf16", "fp16": "f16", "int8": "i8"}.get(self.precision)
        if want is not None and not any(
            k.startswith(want) or (want == "i8" and k == "u8") for k in executed
        ):
            raise MeasurementError(
                f"the OpenVINO CPU plugin did not honour {self.precision}: expected nodes "
                f"executed in {want}, got runtime precisions {dict(executed)}. This CPU lacks "
                f"the instructions for it (plugin capabilities: "
                f"{self._core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES')}); use fp32."
            )
        request = compiled.create_infer_request()
        cache[batch_size] = request
        return request

    def make_batch(self, prepared: Prepared, batch_size: int, seed: int = INPUT_SEED) -> Any:
        self._compiled(prepared, batch_size)  # compile outside any timed call
        return super().make_batch(prepared, batch_size, seed)

    def run(self, prepared: Prepared, x: np.ndarray) -> Any:
        request = self._compiled(prepared, x.shape[0])
        request.infer([x])
        return request.get_output_tensor(0).data

    def logits(self, prepared: Prepared, x: np.ndarray) -> np.ndarray:
        return np.array(self.run(prepared, x), dtype=np.float32)

    def peak_memory_mb(self, prepared: Prepared, x: np.ndarray) -> tuple[float, str]:
        self._compiled(prepared, x.shape[0])
        return rss_peak_mb(lambda: self.run(prepared, x)) + x.nbytes / 1e6, OV_PEAK_METHOD

    def release(self, prepared: Prepared) -> None:
        prepared.model["compiled"].clear()


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300]
