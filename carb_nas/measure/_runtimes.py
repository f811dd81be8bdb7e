"""Runtimes: prepare a model of a config for a precision, run one batch, measure its memory.

Call order for a ``Runtime``::

    rt = TorchRuntime(device="cpu", threads=1)
    prepared = rt.prepare(config)          # build/export/quantize once per architecture
    x = rt.make_input(prepared, config)    # a batch at the config's batch size
    seconds = rt.run_timed(prepared, x)    # one synchronized, timed forward pass
    peak_mb, method = rt.peak_memory_mb(prepared, x)   # one extra untimed pass

Any CNN: ``rt.prepare_module(module, (3, H, W))`` prepares an fp32 ``nn.Module`` of one
input shape (``prepare(config)`` builds the config's seeded module and calls it), and
``rt.make_batch(prepared, n)`` makes a seeded batch of ``n``. Every quantized or reduced
precision is compared with the fp32 module on :data:`AGREEMENT` inputs when prepared
(``info["output_rel_error"]``, ``info["top1_agreement"]``: agreement with fp32, not accuracy --
no trained weights or labelled data exist here). ``rt.scheme()`` names the conversion path,
the quantization scheme and the calibration set.

A prepared model serves every batch size of its architecture and resolution (ONNX models are
exported with a dynamic batch axis), so a campaign ordered by architecture builds each model
once.

Platforms on the CPU (``cpu/<runtime>/<precision>``): ``torch`` fp32, bf16, int8-dynamic;
``onnxruntime`` fp32, int8 (static QDQ), int8-dynamic, fp16; ``openvino`` fp32, int8 (NNCF),
bf16, fp16; ``litert`` fp32, fp16 (fp16 weights), int8 (full integer). OpenVINO and LiteRT
live in ``_openvino`` and ``_litert``.
"""

from __future__ import annotations

import contextlib
import io
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
    "AGREEMENT",
    "INSTALL_HINTS",
    "calibration_batches",
    "output_agreement",
    "export_onnx",
    "check_runtime",
]

# (device kind, runtime) -> precisions
SUPPORTED: dict[tuple[str, str], tuple[str, ...]] = {
    ("cpu", "torch"): ("fp32", "bf16", "int8-dynamic"),
    ("cpu", "onnxruntime"): ("fp32", "int8", "int8-dynamic", "fp16"),
    ("cpu", "openvino"): ("fp32", "int8", "bf16", "fp16"),
    ("cpu", "litert"): ("fp32", "fp16", "int8"),
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
#: what a quantized model's output is compared with: the fp32 module on these inputs
AGREEMENT: dict[str, Any] = {
    "samples": 16,
    "inputs": "torch.randn seeded 777, N(0,1), one batch of 16 at the model's input shape",
    "reference": "the fp32 PyTorch module (eager, inference_mode)",
    "metrics": "relative L2 error of the logits; top-1 agreement (share of samples whose argmax "
    "matches fp32) -- agreement, not accuracy: the weights are random (seed 0)",
}
AGREEMENT_SEED = 777
#: the extra that brings each runtime, and the command to install it
INSTALL_HINTS: dict[str, str] = {
    "onnxruntime": "pip install 'carb-nas[onnx]'",
    "openvino": "pip install 'carb-nas[openvino]'",
    "litert": "pip install 'carb-nas[litert]'",
    "loadgen": "pip install 'carb-nas[loadgen]'",
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


def check_platform(
    device: str, runtime: str, precision: str, *, no_gpu_fix: str = "or use --device cpu"
) -> str:
    """Validate a platform; returns the device kind (``cpu`` or ``cuda``). ``no_gpu_fix``
    ends the fix of a CUDA device this machine lacks (a command without --device names
    its own way out)."""
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
            "Use --runtime torch, onnxruntime, openvino or litert."
        )
    allowed = SUPPORTED.get((kind, runtime), ())
    if precision not in allowed:
        raise ConfigError(
            f"unsupported precision for {kind}/{runtime}: expected one of {list(allowed)}, got "
            f"{precision!r}. Pick one of those (cpu: torch fp32/bf16/int8-dynamic, onnxruntime "
            "fp32/int8/int8-dynamic/fp16, openvino fp32/int8/bf16/fp16, litert fp32/fp16/int8)."
        )
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"CUDA device unavailable: expected an NVIDIA GPU visible to torch for "
                f"{device!r}, got torch.cuda.is_available() == False (torch "
                f"{torch.__version__}). Run on a GPU machine with a CUDA build of torch, "
                f"{no_gpu_fix}."
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

    group: tuple | None  # None: a module prepared directly (prepare_module), not a config
    model: Any
    info: dict = field(default_factory=dict)  # e.g. output_rel_error, param bytes


def group_of(config: Config) -> tuple:
    return (config.family, config.depth, config.width, config.resolution, config.precision)


class Runtime(ABC):
    """Prepares models for one device/precision and runs batches (see module docstring).

    Subclasses implement ``prepare_module`` (an fp32 ``nn.Module`` of one input shape ->
    ``Prepared``), ``make_batch``, ``run`` and ``peak_memory_mb``; ``prepare(config)`` builds the
    config's seeded module and hands it to ``prepare_module``.
    """

    name: str = "abstract"

    def __init__(
        self,
        device: str = "cpu",
        precision: str = "fp32",
        threads: int | None = None,
        calibration: Any = None,
    ):
        self.kind = check_platform(device, self.name, precision)
        self.device = device if device != "cuda" else "cuda:0"
        self.precision = precision
        if threads is not None and threads < 1:
            raise ConfigError(f"invalid threads: expected >= 1, got {threads}. Use --threads 1.")
        if threads is not None:
            torch.set_num_threads(threads)
        self.threads = torch.get_num_threads() if threads is None else int(threads)
        #: None: the documented seeded set (CALIBRATION); else an (N, C, H, W) array or .npy
        self.calibration = calibration

    def prepare(self, config: Config) -> Prepared:
        """Build the config's seeded fp32 module and prepare it (``prepare_module``)."""
        module = _build_seeded(config.replace(precision="fp32", runtime="torch"), "cpu")
        return self.prepare_module(
            module, (3, config.resolution, config.resolution), group_of(config)
        )

    def prepare_module(
        self, module: torch.nn.Module, input_shape: tuple[int, ...], group: tuple | None = None
    ) -> Prepared:
        """Prepare an fp32 eval-mode module whose input is ``(batch, *input_shape)``."""
        raise NotImplementedError(f"{type(self).__name__} prepares configs only")

    def make_input(self, prepared: Prepared, config: Config) -> Any:
        return self.make_batch(prepared, config.batch_size)

    def make_batch(self, prepared: Prepared, batch_size: int, seed: int = INPUT_SEED) -> Any:
        """A seeded N(0,1) batch in this runtime's input type."""
        shape = (batch_size, *prepared.info["input_shape"])
        return _seeded_randn(shape, seed).numpy()

    @abstractmethod
    def run(self, prepared: Prepared, x: Any) -> Any:
        """One forward pass, synchronized."""

    def run_timed(self, prepared: Prepared, x: Any) -> float:
        """Seconds of one synchronized forward pass (perf_counter)."""
        t0 = time.perf_counter()
        self.run(prepared, x)
        return time.perf_counter() - t0

    def logits(self, prepared: Prepared, x: Any) -> np.ndarray:
        """The model's output for ``x`` as a float32 array (for agreement checks)."""
        out = self.run(prepared, x)
        out = out[0] if isinstance(out, (list, tuple)) else out
        if isinstance(out, torch.Tensor):
            return out.float().cpu().numpy()
        return np.asarray(out, dtype=np.float32)

    @abstractmethod
    def peak_memory_mb(self, prepared: Prepared, x: Any) -> tuple[float, str]: ...

    def versions(self) -> dict:
        return {"torch": torch.__version__}

    def scheme(self) -> dict:
        """Conversion path, quantization scheme and calibration set of this platform."""
        return {"conversion": "none (PyTorch eager)", "quantization": "none", "calibration": None}

    def hygiene(self) -> None:
        """Clear caches and synchronize before a config."""
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()

    def release(self, prepared: Prepared) -> None:  # noqa: B027 - optional hook
        """Free what ``prepare`` made."""

    def _agreement(
        self, prepared: Prepared, reference: torch.nn.Module, input_shape: tuple[int, ...]
    ) -> None:
        prepared.info.update(output_agreement(self, prepared, reference, input_shape))


def _seeded_randn(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32)


def _build_seeded(config: Config, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(MODEL_SEED)
    return build_model(config, device)


@contextlib.contextmanager
def _quiet_stderr(fd: int = 2):
    """Silence what C++ writes to a file descriptor (the profiler backend's start/stop lines
    on fd 2, the ONNX exporter's graph dump on fd 1)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(fd)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        for stream in {sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__}:
            with contextlib.suppress(OSError, ValueError, AttributeError):  # None: no stream
                stream.flush()  # type: ignore[union-attr]  # what was buffered goes to /dev/null too
        os.dup2(saved, fd)
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


def _group_name(group: tuple) -> str:
    return "_".join(str(v) for v in group).replace(".", "p").replace("/", "-")[:120]


def output_agreement(
    runtime: Runtime, prepared: Prepared, reference: torch.nn.Module, input_shape: tuple[int, ...]
) -> dict[str, Any]:
    """Relative L2 error and top-1 agreement of a prepared model against its fp32 module.

    On :data:`AGREEMENT`'s seeded inputs. Agreement, not accuracy: no trained weights exist.
    """
    n = int(AGREEMENT["samples"])
    x = _seeded_randn((n, *input_shape), AGREEMENT_SEED)
    with torch.inference_mode():
        ref = reference(x).float().numpy()
    got = runtime.logits(prepared, runtime.make_batch(prepared, n, AGREEMENT_SEED))
    if got.shape != ref.shape:
        raise MeasurementError(
            f"{runtime.name}/{runtime.precision} output disagrees with fp32 in shape: expected "
            f"{ref.shape}, got {got.shape}. The conversion changed the model; report it."
        )
    top1 = float(np.mean(got.reshape(n, -1).argmax(1) == ref.reshape(n, -1).argmax(1)))
    return {"output_rel_error": _rel_error(got, ref), "top1_agreement": top1, "agreement_n": n}


def calibration_batches(calibration: Any, input_shape: tuple[int, ...]) -> list[np.ndarray]:
    """The calibration set as a list of (1, C, H, W) float32 batches.

    ``None``: :data:`CALIBRATION`'s seeded set. Else an ``(N, C, H, W)`` array or the path of
    a ``.npy`` file holding one; its sample shape must equal ``input_shape``.
    """
    if calibration is None:
        return [
            _seeded_randn((1, *input_shape), 1234 + i).numpy()
            for i in range(int(CALIBRATION["batches"]))
        ]
    source = calibration
    if isinstance(calibration, (str, Path)):
        try:
            calibration = np.load(calibration, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"unreadable calibration set: expected a .npy file of shape (N, "
                f"{', '.join(map(str, input_shape))}), got {str(source)!r} ({e}). Save one with "
                "numpy.save."
            ) from e
    arr = np.asarray(calibration)
    if (
        arr.ndim != len(input_shape) + 1
        or tuple(arr.shape[1:]) != tuple(input_shape)
        or not len(arr)
    ):
        raise ConfigError(
            f"calibration set of the wrong shape: expected (N, {', '.join(map(str, input_shape))}) "
            f"with N >= 1 (the model's input shape), got {tuple(arr.shape)}. Make the calibration "
            "samples at the model's resolution."
        )
    return [np.ascontiguousarray(arr[i : i + 1], dtype=np.float32) for i in range(len(arr))]


#: the part of :data:`CALIBRATION` every runtime shares (the inputs); the rest is ONNX
#: Runtime's static-QDQ recipe, which OpenVINO's NNCF and LiteRT's quantizer do not follow
CALIBRATION_INPUT_KEYS = ("batches", "batch_size", "inputs")


def _calibration_record(calibration: Any, inputs_only: bool = False) -> dict[str, Any]:
    """The calibration set as a row records it; ``inputs_only``: without ONNX Runtime's QDQ
    settings (for runtimes that quantize with their own tool)."""
    if calibration is None:
        if inputs_only:
            return {k: CALIBRATION[k] for k in CALIBRATION_INPUT_KEYS}
        return dict(CALIBRATION)
    if isinstance(calibration, (str, Path)):
        return {"inputs": f"user file {Path(calibration).name}"}
    return {"inputs": f"user array of shape {tuple(np.shape(calibration))}"}


def _first_sentence(e: BaseException) -> str:
    """An exception's message up to its first sentence (exporters append pages of graph)."""
    text = " ".join(str(e).split())
    for stop in (" Please ", " [Caused by", ". "):
        if stop in text:
            text = text[: text.index(stop)]
    return text.rstrip(".")[:300]


def export_onnx(module: torch.nn.Module, input_shape: tuple[int, ...], path: Path) -> None:
    """``torch.onnx.export`` (TorchScript exporter, opset 17, dynamic batch axis)."""
    x1 = _seeded_randn((1, *input_shape), INPUT_SEED)
    try:
        with (
            warnings.catch_warnings(),  # TorchScript exporter: deprecated, still exact
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),  # on failure the exporter prints the
            _quiet_stderr(2),  # whole graph, from Python and from C++
            _quiet_stderr(1),
        ):
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(
                module,
                (x1,),
                str(path),
                dynamo=False,
                opset_version=ONNX_OPSET,
                input_names=["input"],
                output_names=["logits"],
                dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            )
    except Exception as e:  # noqa: BLE001 - exporter errors have many types
        raise MeasurementError(
            f"ONNX export failed for {type(module).__name__}: expected torch.onnx.export "
            f"(opset {ONNX_OPSET}) to succeed, got {type(e).__name__}: {_first_sentence(e)}. The "
            "model holds an op the exporter cannot write; change the model (e.g. its resolution) "
            "or use --runtime torch."
        ) from e


class TorchRuntime(Runtime):
    """PyTorch eager under ``inference_mode``: fp32, bf16 (the module and input cast to
    bfloat16: oneDNN's AVX-512-BF16 kernels where the CPU has them) and int8-dynamic
    (``torch.ao.quantization.quantize_dynamic``, qint8: it quantizes ``nn.Linear`` layers only,
    so a convnet's convolutions stay fp32) on the CPU; fp32/fp16/bf16 on CUDA."""

    name = "torch"

    def prepare(self, config: Config) -> Prepared:
        if self.kind == "cuda":  # today's path: built on the device at the config's precision
            model = _build_seeded(config, self.device)
            shape = (3, config.resolution, config.resolution)
            return Prepared(group_of(config), model, {"input_shape": shape})
        return super().prepare(config)

    def prepare_module(
        self, module: torch.nn.Module, input_shape: tuple[int, ...], group: tuple | None = None
    ) -> Prepared:
        module = module.eval()
        info: dict[str, Any] = {"input_shape": tuple(input_shape)}
        if self.precision == "fp32":
            return Prepared(group, module.to(self.device), info)
        if self.precision == "int8-dynamic":
            linear = sum(isinstance(m, torch.nn.Linear) for m in module.modules())
            with warnings.catch_warnings():  # torch.ao eager quantization: deprecated, works
                warnings.simplefilter("ignore")
                model = torch.ao.quantization.quantize_dynamic(
                    module, {torch.nn.Linear}, dtype=torch.qint8, inplace=False
                )
            info["quantized_linear_layers"] = linear
        else:
            import copy

            model = copy.deepcopy(module).to(self.device, TORCH_DTYPES[self.precision])
        prepared = Prepared(group, model, info)
        self._agreement(prepared, module, input_shape)
        return prepared

    def make_batch(self, prepared: Prepared, batch_size: int, seed: int = INPUT_SEED) -> Any:
        x = _seeded_randn((batch_size, *prepared.info["input_shape"]), seed)
        dtype = TORCH_DTYPES.get(self.precision, torch.float32)
        return x.to(self.device, dtype)

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

    def scheme(self) -> dict:
        if self.precision == "int8-dynamic":
            return {
                "conversion": "none (PyTorch eager)",
                "quantization": "torch.ao.quantization.quantize_dynamic, qint8, nn.Linear only "
                "(convolutions stay fp32); activations quantized per batch at run time",
                "calibration": None,
            }
        if self.precision in ("bf16", "fp16"):
            return {
                "conversion": f"module and input cast to {self.precision}",
                "quantization": "none",
                "calibration": None,
            }
        return super().scheme()


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
    """The calibration set for ``quantize_static`` (``calibration_batches``)."""

    def __init__(self, input_name: str, batches: list[np.ndarray]) -> None:
        self._batches = [{input_name: b} for b in batches]
        self._it = iter(self._batches)

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._batches)


class OnnxRuntime(Runtime):
    """ONNX Runtime: the model exported with ``torch.onnx.export`` (TorchScript exporter,
    ``dynamo=False``, opset 17, dynamic batch axis), checked against eager before any timing.
    ``int8`` is static QDQ quantization (``quant_pre_process`` + ``quantize_static``,
    per-channel, U8 activations / S8 weights, MinMax calibration on CALIBRATION's inputs);
    ``int8-dynamic`` is ``quantize_dynamic`` (S8 weights, activations quantized at run time:
    ConvInteger / MatMulInteger); ``fp16`` converts the graph to float16 with float32 inputs and
    outputs (``onnxruntime.transformers.float16``; the CPU execution provider runs what it has
    fp16 kernels for and casts around the rest). CPU execution provider, or CUDA where present.
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
        calibration: Any = None,
    ) -> None:
        super().__init__(device, precision, threads, calibration)
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

    def scheme(self) -> dict:
        conversion = f"torch.onnx.export (TorchScript, opset {ONNX_OPSET}, dynamic batch)"
        quant = {
            "fp32": "none",
            "int8": "static QDQ: quant_pre_process + quantize_static, per-channel S8 weights, "
            "U8 activations, MinMax",
            "int8-dynamic": "quantize_dynamic: S8 weights, activations quantized at run time "
            "(ConvInteger/MatMulInteger)",
            "fp16": "float16 graph (onnxruntime.transformers.float16, keep_io_types)",
        }[self.precision]
        calib = _calibration_record(self.calibration) if self.precision == "int8" else None
        return {"conversion": conversion, "quantization": quant, "calibration": calib}

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

    def prepare_module(
        self, module: torch.nn.Module, input_shape: tuple[int, ...], group: tuple | None = None
    ) -> Prepared:
        import onnx

        module = module.eval()
        input_shape = tuple(input_shape)
        batches = calibration_batches(self.calibration, input_shape)  # its shape, before work
        name = _group_name(group) if group else f"module_{id(module)}"
        fp32_path = self.workdir / f"{name}.onnx"
        export_onnx(module, input_shape, fp32_path)
        xc = _seeded_randn((2, *input_shape), INPUT_SEED + 1)
        with torch.inference_mode():
            ref = module(xc).numpy()
        fp32_sess = self._ort.InferenceSession(
            str(fp32_path), self._options(), providers=self.providers
        )
        fp32_err = _rel_error(fp32_sess.run(None, {"input": xc.numpy()})[0], ref)
        if fp32_err > self.max_fp32_rel_error:
            raise MeasurementError(
                f"exported ONNX model disagrees with eager: expected relative error <= "
                f"{self.max_fp32_rel_error:g}, got {fp32_err:.3g}. The export is wrong; report it."
            )
        info: dict[str, Any] = {"input_shape": input_shape, "fp32_path": fp32_path}
        if self.precision == "fp32":
            sess, path = fp32_sess, fp32_path
            info["output_rel_error"] = fp32_err
        else:
            del fp32_sess
            path = self._convert(fp32_path, batches)
            sess = self._ort.InferenceSession(str(path), self._options(), providers=self.providers)
        info["path"] = path
        info["init_bytes"] = sum(
            int(np.prod(t.dims)) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            for t in onnx.load(str(path), load_external_data=False).graph.initializer
        )
        prepared = Prepared(group, sess, info)
        self._agreement(prepared, module, input_shape)
        return prepared

    def _convert(self, fp32_path: Path, batches: list[np.ndarray]) -> Path:
        out = fp32_path.with_name(f"{fp32_path.stem}_{self.precision}.onnx")
        if self.precision == "fp16":
            import onnx
            from onnxruntime.transformers.float16 import convert_float_to_float16

            try:
                onnx.save(
                    convert_float_to_float16(onnx.load(str(fp32_path)), keep_io_types=True),
                    str(out),
                )
            except Exception as e:  # noqa: BLE001 - converter errors have many types
                raise MeasurementError(
                    f"fp16 conversion failed: expected convert_float_to_float16 to succeed, got "
                    f"{type(e).__name__}: {str(e)[:300]}. Use --precision fp32."
                ) from e
            return out
        from onnxruntime.quantization import (
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quant_pre_process,
            quantize_dynamic,
            quantize_static,
        )

        pre = fp32_path.with_name(fp32_path.stem + "_pre.onnx")
        try:
            quant_pre_process(str(fp32_path), str(pre), skip_symbolic_shape=True)
            if self.precision == "int8-dynamic":
                quantize_dynamic(str(pre), str(out), weight_type=QuantType.QInt8)
            else:
                quantize_static(
                    str(pre),
                    str(out),
                    _CalibrationReader("input", batches),
                    quant_format=QuantFormat.QDQ,
                    per_channel=True,
                    activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax,
                )
        except Exception as e:  # noqa: BLE001 - quantizer errors have many types
            kind = "dynamic" if self.precision == "int8-dynamic" else "static"
            raise MeasurementError(
                f"INT8 {kind} quantization failed: expected quantize_{kind} to succeed, got "
                f"{type(e).__name__}: {str(e)[:300]}. Use --precision fp32."
            ) from e
        finally:
            pre.unlink(missing_ok=True)
        return out

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


def _runtime_class(runtime: str) -> type[Runtime]:
    if runtime == "torch":
        return TorchRuntime
    if runtime == "onnxruntime":
        return OnnxRuntime
    if runtime == "openvino":
        from carb_nas.measure._openvino import OpenVinoRuntime

        return OpenVinoRuntime
    from carb_nas.measure._litert import LiteRtRuntime

    return LiteRtRuntime


def get_runtime(
    device: str, runtime: str, precision: str, threads: int | None = None, **kwargs
) -> Runtime:
    check_platform(device, runtime, precision)
    cls = _runtime_class(runtime)
    if runtime == "torch":
        kwargs.pop("workdir", None)
    return cls(device=device, precision=precision, threads=threads, **kwargs)


def check_runtime(device: str, runtime: str, precision: str) -> None:
    """Before any work: the platform is one of :data:`SUPPORTED` (ConfigError) and its runtime's
    packages import (DeviceUnavailableError naming the extra to install). Builds the runtime
    once, without a model, and discards it."""
    rt = get_runtime(device, runtime, precision)
    tmp = getattr(rt, "_tmp", None)
    if tmp is not None:
        tmp.cleanup()
