"""LiteRT (TFLite) interpreter on the CPU: fp32, fp16 weights, int8 full integer.

Conversion: ``torch.export`` of the fp32 module (saved as ``.pt2``), then ``litert-torch``
(``_litert_convert``): fp32 as is, fp16 weights with ai-edge-quantizer's ``float_casting``,
int8 full-integer static PT2E quantization calibrated on the calibration set. litert-torch
pins ``typing-extensions<4.13`` (through ``xdsl``) and pulls jax, transformers and torchao
(about 2 GB), so it is not a dependency of any extra: it converts in this process when it is
importable, else in the Python named by ``CARB_NAS_LITERT_PYTHON`` (an environment with
torch 2.13 and litert-torch; the script imports no carb_nas). The interpreter is
``ai-edge-litert`` (the ``litert`` extra; XNNPACK delegate, ``num_threads`` = threads).

A full-integer model takes int8 input and gives int8 output: ``run`` quantizes the float batch
with the input tensor's scale and zero point and dequantizes the output (part of the timed
call, as in a deployment).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from carb_nas.errors import DeviceUnavailableError, MeasurementError
from carb_nas.measure import _litert_convert
from carb_nas.measure._openvino import rss_peak_mb
from carb_nas.measure._runtimes import (
    INPUT_SEED,
    INSTALL_HINTS,
    Prepared,
    Runtime,
    _calibration_record,
    _group_name,
    _seeded_randn,
    calibration_batches,
)

__all__ = ["LiteRtRuntime", "LITERT_PEAK_METHOD", "LITERT_PYTHON_ENV", "converter_available"]

LITERT_PYTHON_ENV = "CARB_NAS_LITERT_PYTHON"
LITERT_PEAK_METHOD = (
    "rss: VmHWM after resetting it (clear_refs 5) minus VmRSS before one invoke (coarse)"
)
CONVERT_TIMEOUT_S = 1800


def _in_process_converter() -> bool:
    try:
        import litert_torch  # noqa: F401
    except ImportError:
        return False
    return True


def converter_available() -> str | None:
    """Where conversion runs: ``"in-process"``, the interpreter path, or None."""
    if _in_process_converter():
        return "in-process"
    py = os.environ.get(LITERT_PYTHON_ENV)
    return py if py and Path(py).exists() else None


class LiteRtRuntime(Runtime):
    """LiteRT interpreter (see module docstring)."""

    name = "litert"

    def __init__(
        self,
        device: str = "cpu",
        precision: str = "fp32",
        threads: int | None = None,
        workdir: str | Path | None = None,
        calibration: Any = None,
    ) -> None:
        super().__init__(device, precision, threads, calibration)
        try:
            from ai_edge_litert import interpreter
        except ImportError as e:
            raise DeviceUnavailableError(
                f"LiteRT unavailable: expected the `ai-edge-litert` package, got ImportError "
                f"({e}). Install the extra: {INSTALL_HINTS['litert']}."
            ) from e
        self._interpreter = interpreter
        self.converter = converter_available()
        if self.converter is None:
            raise DeviceUnavailableError(
                "LiteRT conversion unavailable: expected `litert-torch` importable here or "
                f"${LITERT_PYTHON_ENV} naming a Python that has it, got neither. Make one: "
                "python -m venv ~/litert && ~/litert/bin/pip install torch==2.13.0 && "
                "~/litert/bin/pip install 'litert-torch==0.10.*' ai-edge-quantizer "
                "'typing-extensions<4.13' "
                f"&& export {LITERT_PYTHON_ENV}=~/litert/bin/python (it downgrades "
                "typing-extensions, so keep it out of this environment)."
            )
        self._tmp = tempfile.TemporaryDirectory(prefix="carb-nas-litert-", dir=workdir)
        self.workdir = Path(self._tmp.name)
        self._convert_versions: dict[str, Any] = {}

    def versions(self) -> dict:
        from importlib.metadata import version

        return {
            "torch": torch.__version__,
            "ai_edge_litert": version("ai-edge-litert"),
            **self._convert_versions,
        }

    def scheme(self) -> dict:
        quant = {
            "fp32": "none",
            "fp16": "fp16 weights (ai-edge-quantizer float_casting), fp32 compute",
            "int8": "full-integer static PT2E: symmetric per-channel int8 weights, int8 "
            "activations and int8 input/output (quantized at the boundary)",
        }[self.precision]
        where = "in-process" if self.converter == "in-process" else f"${LITERT_PYTHON_ENV}"
        return {
            "conversion": f"torch.export -> litert-torch ({where})",
            "quantization": quant,
            "calibration": _calibration_record(self.calibration, inputs_only=True)
            if self.precision == "int8"
            else None,
        }

    def prepare_module(
        self, module: torch.nn.Module, input_shape: tuple[int, ...], group: tuple | None = None
    ) -> Prepared:
        module = module.eval()
        input_shape = tuple(input_shape)
        batches = calibration_batches(self.calibration, input_shape)  # its shape, before work
        stem = self.workdir / (_group_name(group) if group else f"module_{id(module)}")
        program, calib = stem.with_suffix(".pt2"), stem.with_suffix(".calib.npy")
        out = Path(f"{stem}_{self.precision}.tflite")
        x1 = _seeded_randn((1, *input_shape), INPUT_SEED)
        try:
            torch.export.save(torch.export.export(module, (x1,)), str(program))
        except Exception as e:  # noqa: BLE001 - torch.export raises many types
            raise MeasurementError(
                f"LiteRT conversion failed for {type(module).__name__}: expected torch.export "
                f"to trace it, got {type(e).__name__}: {' '.join(str(e).split())[:300]}. Use "
                "another runtime for this model."
            ) from e
        np.save(calib, np.concatenate(batches))
        spec = {
            "program": str(program),
            "shape": [1, *input_shape],
            "precision": self.precision,
            "calibration": str(calib),
            "out": str(out),
        }
        try:
            result = self._convert(spec)
        finally:
            program.unlink(missing_ok=True)
            calib.unlink(missing_ok=True)
        if "error" in result:
            raise MeasurementError(
                f"LiteRT conversion failed for {type(module).__name__} at {self.precision}: "
                f"expected litert-torch to convert it, got {result['error'][:400]}. Use another "
                "runtime for this model."
            )
        self._convert_versions = {
            k: v for k, v in result.items() if k in ("litert_torch", "ai_edge_quantizer") and v
        }
        prepared = Prepared(
            group, {"path": out, "interpreters": {}}, {"input_shape": input_shape, "path": out}
        )
        self._agreement(prepared, module, input_shape)
        return prepared

    def _convert(self, spec: dict) -> dict:
        if self.converter == "in-process":
            try:
                return _litert_convert.convert(spec)
            except Exception as e:  # noqa: BLE001 - reported like the subprocess's error
                return {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"}
        try:
            proc = subprocess.run(
                [str(self.converter), _litert_convert.__file__, json.dumps(spec)],
                capture_output=True,
                text=True,
                timeout=CONVERT_TIMEOUT_S,
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return {"error": f"{type(e).__name__}: {e}"}
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            tail = " ".join(proc.stderr.split())[-400:]
            return {"error": f"converter exited {proc.returncode} with no result: {tail}"}
        return json.loads(lines[-1])

    def _interp(self, prepared: Prepared, batch_size: int) -> Any:
        cache = prepared.model["interpreters"]
        if batch_size not in cache:
            it = self._interpreter.Interpreter(
                model_path=str(prepared.model["path"]), num_threads=self.threads
            )
            detail = it.get_input_details()[0]
            it.resize_tensor_input(detail["index"], [batch_size, *prepared.info["input_shape"]])
            it.allocate_tensors()
            cache[batch_size] = (it, detail, it.get_output_details()[0])
        return cache[batch_size]

    def make_batch(self, prepared: Prepared, batch_size: int, seed: int = INPUT_SEED) -> Any:
        self._interp(prepared, batch_size)  # allocate outside any timed call
        return super().make_batch(prepared, batch_size, seed)

    def run(self, prepared: Prepared, x: np.ndarray) -> Any:
        it, inp, out = self._interp(prepared, x.shape[0])
        if inp["dtype"] != np.float32:  # full integer: quantize at the boundary
            scale, zero = inp["quantization"]
            info = np.iinfo(inp["dtype"])
            x = np.clip(np.round(x / scale) + zero, info.min, info.max).astype(inp["dtype"])
        it.set_tensor(inp["index"], x)
        it.invoke()
        y = it.get_tensor(out["index"])
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            y = (y.astype(np.float32) - zero) * scale
        return y

    def peak_memory_mb(self, prepared: Prepared, x: np.ndarray) -> tuple[float, str]:
        self._interp(prepared, x.shape[0])
        return rss_peak_mb(lambda: self.run(prepared, x)) + x.nbytes / 1e6, LITERT_PEAK_METHOD

    def release(self, prepared: Prepared) -> None:
        prepared.model["interpreters"].clear()
        Path(prepared.model["path"]).unlink(missing_ok=True)
