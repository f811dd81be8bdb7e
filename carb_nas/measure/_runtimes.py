"""Runtimes: prepare a model of a config for a precision, run one batch, measure its memory.

Call order for a ``Runtime``::

    rt = TorchRuntime(device="cpu", threads=1)
    prepared = rt.prepare(config)          # build/export/quantize once per architecture
    x = rt.make_input(prepared, config)    # a batch at the config's batch size
    seconds = rt.run_timed(prepared, x)    # one synchronized, timed forward pass
    peak_mb, method = rt.peak_memory_mb(prepared, x)   # one extra untimed pass

A prepared model serves every batch size of its architecture and resolution (ONNX models are
exported with a dynamic batch axis), so a campaign ordered by architecture builds each model
once.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from carb_nas.errors import ConfigError, DeviceUnavailableError, MeasurementError
from carb_nas.models import TORCH_DTYPES, build_model
from carb_nas.space import Config

__all__ = [
    "usable_cpus",
    "Runtime",
    "TorchRuntime",
    "OnnxRuntime",
    "Prepared",
    "get_runtime",
    "check_platform",
    "SUPPORTED",
    "TORCH_CPU_PEAK_METHOD",
    "ORT_PEAK_METHOD",
    "CALIBRATION",
]

# (device kind, runtime) -> precisions
SUPPORTED: dict[tuple[str, str], tuple[str, ...]] = {
    ("cpu", "torch"): ("fp32",),
    ("cpu", "onnxruntime"): ("fp32", "int8"),
    ("cuda", "torch"): ("fp32", "fp16", "bf16"),
    ("cuda", "onnxruntime"): ("fp32",),
}
DEVICES = ("cpu", "cuda")

TORCH_CPU_PEAK_METHOD = (
    "torch-profiler: param+buffer+input bytes + peak bytes allocated beyond them during one "
    "forward (profile_memory events)"
)
TORCH_CUDA_PEAK_METHOD = "torch.cuda.max_memory_allocated after reset (params+input+peak)"
ORT_PEAK_METHOD = (
    "ort-profiler: initializer bytes + input bytes + CPU allocator in-use peak "
    "(mem_in_use_peak) of one run in a fresh profiled session"
)
CALIBRATION: dict[str, Any] = {
    "method": "MinMax",
    "batches": 8,
    "batch_size": 1,
    "inputs": "torch.randn seeded 1234+i, N(0,1), at the config's resolution",
    "format": "QDQ",
    "per_channel": True,
    "activation_type": "QUInt8",
    "weight_type": "QInt8",
    "pre_process": "onnxruntime.quantization.quant_pre_process",
}
ONNX_OPSET = 17
MODEL_SEED = 0
INPUT_SEED = 42


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; the CPU count off Linux)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_platform(device: str, runtime: str, precision: str) -> str:
    """Validate a platform; returns the device kind (``cpu`` or ``cuda``)."""
    kind = device.split(":")[0]
    if kind not in DEVICES or (kind == "cpu" and device != "cpu"):
        raise ConfigError(
            f"unknown device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}. "
            "Use --device cpu or --device cuda:0."
        )
    if kind == "cuda" and ":" in device and not device.split(":")[1].isdigit():
        raise ConfigError(
            f"bad CUDA device: expected 'cuda:N' with N a GPU index, got {device!r}. "
            "Use e.g. --device cuda:0."
        )
    runtimes = sorted({r for _, r in SUPPORTED})
    if runtime not in runtimes:
        raise ConfigError(
            f"unknown runtime: expected one of {runtimes}, got {runtime!r}. "
            "Use --runtime torch or onnxruntime."
        )
    allowed = SUPPORTED[(kind, runtime)]
    if precision not in allowed:
        raise ConfigError(
            f"unsupported precision for {kind}/{runtime}: expected one of {list(allowed)}, got "
            f"{precision!r}. Pick one of those (int8 runs on cpu/onnxruntime; fp16/bf16 on cuda)."
        )
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"CUDA device unavailable: expected an NVIDIA GPU visible to torch for "
                f"{device!r}, got torch.cuda.is_available() == False (torch "
                f"{torch.__version__}). Run on a GPU machine with a CUDA build of torch, or "
                "use --device cpu."
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"CUDA device unavailable: expected an index below "
                f"{torch.cuda.device_count()}, got {device!r}. Pick an existing GPU."
            )
    return kind


@dataclass
class Prepared:
    """A model ready to run at any batch size of one architecture and resolution."""

    group: tuple
    model: Any
    info: dict = field(default_factory=dict)  # e.g. output_rel_error, param bytes


def group_of(config: Config) -> tuple:
    return (config.family, config.depth, config.width, config.resolution, config.precision)


class Runtime(ABC):
    """Prepares models for one device/precision and runs batches (see module docstring)."""

    name: str = "abstract"

    def __init__(self, device: str = "cpu", precision: str = "fp32", threads: int | None = None):
        self.kind = check_platform(device, self.name, precision)
        self.device = device if device != "cuda" else "cuda:0"
        self.precision = precision
        if threads is not None and threads < 1:
            raise ConfigError(f"invalid threads: expected >= 1, got {threads}. Use --threads 1.")
        if threads is not None:
            torch.set_num_threads(threads)
        self.threads = torch.get_num_threads() if threads is None else int(threads)

    @abstractmethod
    def prepare(self, config: Config) -> Prepared: ...

    @abstractmethod
    def make_input(self, prepared: Prepared, config: Config) -> Any: ...

    @abstractmethod
    def run(self, prepared: Prepared, x: Any) -> Any:
        """One forward pass, synchronized."""

    def run_timed(self, prepared: Prepared, x: Any) -> float:
        """Seconds of one synchronized forward pass (perf_counter)."""
        t0 = time.perf_counter()
        self.run(prepared, x)
        return time.perf_counter() - t0

    @abstractmethod
    def peak_memory_mb(self, prepared: Prepared, x: Any) -> tuple[float, str]: ...

    def versions(self) -> dict:
        return {"torch": torch.__version__}

    def hygiene(self) -> None:
        """Clear caches and synchronize before a config."""
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()

    def release(self, prepared: Prepared) -> None:  # noqa: B027 - optional hook
        """Free what ``prepare`` made."""


def _seeded_randn(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32)


def _build_seeded(config: Config, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(MODEL_SEED)
    return build_model(config, device)


@contextlib.contextmanager
def _quiet_stderr():
    """Silence the profiler backend's start/stop lines (written by C++ to fd 2)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def torch_cpu_peak_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Exact tensor peak of one CPU forward pass, in bytes.

    Bytes of parameters + buffers + input, plus the peak (over the forward) of bytes allocated
    beyond those. The second term comes from the PyTorch profiler's raw allocation events
    (``profile_memory=True``): every CPU allocation and free is an event with a signed size;
    their running sum in time order peaks at the tensor peak. (The aggregated
    ``FunctionEvent`` view folds allocations into ops, so the raw event tree is read.)
    """
    from torch.profiler import ProfilerActivity, profile

    static = sum(p.numel() * p.element_size() for p in model.parameters())
    static += sum(b.numel() * b.element_size() for b in model.buffers())
    static += x.numel() * x.element_size()
    with (
        _quiet_stderr(),
        torch.inference_mode(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        out = model(x)
        del out
    return static + _peak_from_allocations(prof)


def _peak_from_allocations(prof) -> int:
    from carb_nas._torch_internals import cpu_allocation_events

    try:
        allocations = cpu_allocation_events(prof)
    except (ImportError, AttributeError) as e:
        raise MeasurementError(
            "cannot read the PyTorch profiler's allocation events: expected "
            "kineto_results.experimental_event_tree() and torch._C._profiler._EventType "
            f"(torch 2.13/2.14; see carb_nas._torch_internals), got {type(e).__name__}: {e}. "
            "Use a supported torch version."
        ) from e
    # the index breaks timestamp ties in recorded order
    events = [(start_ns, i, size) for i, (start_ns, size) in enumerate(allocations)]
    events.sort()
    running = peak = 0
    for _, _, size in events:
        running += size
        peak = max(peak, running)
    return peak


class TorchRuntime(Runtime):
    """PyTorch eager under ``inference_mode``: fp32 on CPU; fp32/fp16/bf16 on CUDA."""

    name = "torch"

    def prepare(self, config: Config) -> Prepared:
        model = _build_seeded(config, self.device)
        return Prepared(group_of(config), model)

    def make_input(self, prepared: Prepared, config: Config) -> torch.Tensor:
        x = _seeded_randn((config.batch_size, 3, config.resolution, config.resolution), INPUT_SEED)
        return x.to(self.device, TORCH_DTYPES.get(self.precision, torch.float32))

    def run(self, prepared: Prepared, x: torch.Tensor) -> Any:
        with torch.inference_mode():
            out = prepared.model(x)
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
        return out

    def run_timed(self, prepared: Prepared, x: torch.Tensor) -> float:
        if self.kind != "cuda":
            return super().run_timed(prepared, x)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.inference_mode():
            start.record()
            prepared.model(x)
            end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def peak_memory_mb(self, prepared: Prepared, x: torch.Tensor) -> tuple[float, str]:
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.run(prepared, x)
            return torch.cuda.max_memory_allocated(self.device) / 1e6, TORCH_CUDA_PEAK_METHOD
        return torch_cpu_peak_bytes(prepared.model, x) / 1e6, TORCH_CPU_PEAK_METHOD


def _import_ort():
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise DeviceUnavailableError(
            "ONNX Runtime unavailable: expected the `onnxruntime` package, got ImportError "
            f"({e}). Install the extra: pip install 'carb-nas[onnx]'."
        ) from e
    return ort


def _rel_error(a: np.ndarray, b: np.ndarray) -> float:
    denom = float(np.linalg.norm(b.astype(np.float64)))
    return float(np.linalg.norm(a.astype(np.float64) - b.astype(np.float64)) / max(denom, 1e-30))


class _CalibrationReader:
    """The documented calibration set: 8 seeded N(0,1) batches of one image (CALIBRATION)."""

    def __init__(self, input_name: str, resolution: int) -> None:
        self._batches = [
            {input_name: _seeded_randn((1, 3, resolution, resolution), 1234 + i).numpy()}
            for i in range(int(CALIBRATION["batches"]))
        ]
        self._it = iter(self._batches)

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._batches)


class OnnxRuntime(Runtime):
    """ONNX Runtime: the config's model exported with ``torch.onnx.export`` (TorchScript
    exporter, ``dynamo=False``, opset 17, dynamic batch axis), checked against eager before
    any timing; ``int8`` is static QDQ quantization (``quant_pre_process`` +
    ``quantize_static``, per-channel, U8 activations / S8 weights, MinMax calibration on
    CALIBRATION's inputs). CPU execution provider, or CUDA where present.
    """

    name = "onnxruntime"
    #: fp32 export must agree with eager within this relative L2 error
    max_fp32_rel_error = 1e-4

    def __init__(
        self,
        device: str = "cpu",
        precision: str = "fp32",
        threads: int | None = None,
        workdir: str | Path | None = None,
    ) -> None:
        super().__init__(device, precision, threads)
        self._ort = _import_ort()
        if self.kind == "cuda":
            if "CUDAExecutionProvider" not in self._ort.get_available_providers():
                raise DeviceUnavailableError(
                    "ONNX Runtime CUDA provider unavailable: expected CUDAExecutionProvider, got "
                    f"{self._ort.get_available_providers()}. Install onnxruntime-gpu."
                )
            idx = int(self.device.split(":")[1])
            self.providers = [("CUDAExecutionProvider", {"device_id": idx}), "CPUExecutionProvider"]
        else:
            self.providers = ["CPUExecutionProvider"]
        self._tmp = tempfile.TemporaryDirectory(prefix="carb-nas-onnx-", dir=workdir)
        self.workdir = Path(self._tmp.name)

    def versions(self) -> dict:
        import onnx

        return {
            "torch": torch.__version__,
            "onnxruntime": self._ort.__version__,
            "onnx": onnx.__version__,
            "onnx_opset": ONNX_OPSET,
        }

    def _options(self, profile_prefix: str | None = None):
        so = self._ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = self._ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        if profile_prefix is not None:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        return so

    def prepare(self, config: Config) -> Prepared:
        import onnx

        base = config.replace(precision="fp32", runtime="torch")
        model = _build_seeded(base, "cpu")
        name = "_".join(str(v) for v in group_of(config)).replace(".", "p")
        fp32_path = self.workdir / f"{name}.onnx"
        x1 = _seeded_randn((1, 3, config.resolution, config.resolution), INPUT_SEED)
        try:
            with warnings.catch_warnings():  # TorchScript exporter: deprecated, still exact
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.onnx.export(
                    model,
                    (x1,),
                    str(fp32_path),
                    dynamo=False,
                    opset_version=ONNX_OPSET,
                    input_names=["input"],
                    output_names=["logits"],
                    dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                )
        except Exception as e:  # noqa: BLE001 - exporter errors have many types
            raise MeasurementError(
                f"ONNX export failed for {config.family}-{config.depth} w{config.width}: "
                f"expected torch.onnx.export to succeed, got {type(e).__name__}: {e}"
            ) from e
        xc = _seeded_randn((2, 3, config.resolution, config.resolution), INPUT_SEED + 1)
        with torch.inference_mode():
            ref = model(xc).numpy()
        fp32_sess = self._ort.InferenceSession(
            str(fp32_path), self._options(), providers=self.providers
        )
        fp32_err = _rel_error(fp32_sess.run(None, {"input": xc.numpy()})[0], ref)
        if fp32_err > self.max_fp32_rel_error:
            raise MeasurementError(
                f"exported ONNX model disagrees with eager: expected relative error <= "
                f"{self.max_fp32_rel_error:g}, got {fp32_err:.3g}. The export is wrong; report it."
            )
        path, rel_err = fp32_path, fp32_err
        if self.precision == "int8":
            path = self._quantize(fp32_path, config.resolution)
            del fp32_sess
        sess = (
            fp32_sess
            if self.precision == "fp32"
            else self._ort.InferenceSession(str(path), self._options(), providers=self.providers)
        )
        if self.precision == "int8":
            rel_err = _rel_error(sess.run(None, {"input": xc.numpy()})[0], ref)
        init_bytes = sum(
            int(np.prod(t.dims)) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            for t in onnx.load(str(path), load_external_data=False).graph.initializer
        )
        return Prepared(
            group_of(config),
            sess,
            {
                "path": path,
                "output_rel_error": rel_err,
                "init_bytes": init_bytes,
                "fp32_path": fp32_path,
            },
        )

    def _quantize(self, fp32_path: Path, resolution: int) -> Path:
        from onnxruntime.quantization import (
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quant_pre_process,
            quantize_static,
        )

        pre = fp32_path.with_name(fp32_path.stem + "_pre.onnx")
        out = fp32_path.with_name(fp32_path.stem + "_int8.onnx")
        try:
            quant_pre_process(str(fp32_path), str(pre), skip_symbolic_shape=True)
            quantize_static(
                str(pre),
                str(out),
                _CalibrationReader("input", resolution),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
            )
        except Exception as e:  # noqa: BLE001 - quantizer errors have many types
            raise MeasurementError(
                f"INT8 static quantization failed: expected quantize_static to succeed, got "
                f"{type(e).__name__}: {e}"
            ) from e
        finally:
            pre.unlink(missing_ok=True)
        return out

    def make_input(self, prepared: Prepared, config: Config) -> np.ndarray:
        shape = (config.batch_size, 3, config.resolution, config.resolution)
        return _seeded_randn(shape, INPUT_SEED).numpy()

    def run(self, prepared: Prepared, x: np.ndarray) -> Any:
        return prepared.model.run(None, {"input": x})

    def peak_memory_mb(self, prepared: Prepared, x: np.ndarray) -> tuple[float, str]:
        prefix = str(self.workdir / f"prof_{os.getpid()}")
        sess = self._ort.InferenceSession(
            str(prepared.info["path"]), self._options(prefix), providers=self.providers
        )
        sess.run(None, {"input": x})
        prof_file = Path(sess.end_profiling())
        try:
            events = json.loads(prof_file.read_text())
        finally:
            prof_file.unlink(missing_ok=True)
        peaks = [
            int(e["args"]["mem_in_use_peak"])
            for e in events
            if isinstance(e, dict) and "mem_in_use_peak" in e.get("args", {})
        ]
        if not peaks:
            raise MeasurementError(
                "ONNX Runtime profile holds no memory statistics: expected node events with "
                f"mem_in_use_peak (onnxruntime >= 1.20), got none (onnxruntime "
                f"{self._ort.__version__}). Upgrade onnxruntime."
            )
        total = prepared.info["init_bytes"] + x.nbytes + max(peaks)
        return total / 1e6, ORT_PEAK_METHOD

    def release(self, prepared: Prepared) -> None:
        for key in ("path", "fp32_path"):
            p = prepared.info.get(key)
            if p is not None:
                Path(p).unlink(missing_ok=True)


def get_runtime(
    device: str, runtime: str, precision: str, threads: int | None = None, **kwargs
) -> Runtime:
    check_platform(device, runtime, precision)
    cls = TorchRuntime if runtime == "torch" else OnnxRuntime
    return cls(device=device, precision=precision, threads=threads, **kwargs)
