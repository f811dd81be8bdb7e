"""One measurement: a config on a platform -> one row following ``carb_nas.datasets.SCHEMA``."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import platform as _platform
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from threadpoolctl import threadpool_limits

from carb_nas.datasets import SCHEMA
from carb_nas.errors import ConfigError
from carb_nas.measure._meters import (
    NO_METER_REASON,
    Meter,
    NoMeter,
    NVMLMeter,
    get_meter,
    measure_idle_power_w,
    measure_window,
    observe_update_period_s,
)
from carb_nas.measure._protocol import Protocol, time_runs
from carb_nas.measure._quiet import wait_for_quiet
from carb_nas.measure._reference import LAUNCH_WORKLOAD, ReferenceProbe
from carb_nas.measure._runtimes import (
    CALIBRATION,
    OnnxRuntime,
    Prepared,
    Runtime,
    _calibration_record,
    get_runtime,
    group_of,
    usable_cpus,
)
from carb_nas.space import Config

__all__ = [
    "Profiler",
    "profile_config",
    "cpu_identity",
    "cpu_model_name",
    "frozen_heap",
    "platform_string",
]

ERROR_MAX_CHARS = 500
#: platforms whose fingerprint has no ``scheme`` key (their conversion is fixed): kept so, so
#: that their campaigns' fingerprints stay equal to those of their shipped rows
_PLATFORMS_WITHOUT_SCHEME = {("torch", "fp32"), ("onnxruntime", "fp32"), ("onnxruntime", "int8")}


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Around a loop of :meth:`Profiler.profile` calls: collect, then freeze what lives now
    (the imported libraries, a loaded cost model, a campaign's store), so the full
    ``gc.collect()`` before each config scans only what the measurements create. Unfrozen on
    exit. With a default model loaded, a full collection is a sizeable share of each
    config's time, time a calibration's budget could measure with instead. Inside a heap
    frozen already (an outer ``frozen_heap``), it does nothing: ``gc.unfreeze`` thaws every
    frozen object, so unfreezing here would leave the outer loop scanning the whole heap."""
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@functools.cache
def cpu_model_name() -> str:
    """The CPU model from /proc/cpuinfo (``model name``), else platform.processor()."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine() or "unknown CPU"


#: instruction-set extensions that change which kernels the runtimes pick (oneDNN, MLAS, OpenVINO)
ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
_CPUINFO_FIELDS = {
    "vendor_id": "vendor",
    "cpu family": "family",
    "model": "model",
    "stepping": "stepping",
    "microcode": "microcode",
    "cache size": "cache",
}


@functools.cache
def cpu_identity() -> dict[str, Any]:
    """What tells two CPUs of the same ``model name`` apart (/proc/cpuinfo's first processor):
    vendor, family, model, stepping, microcode, cache size and the ISA extensions of
    :data:`ISA_FLAGS` it has. Two machines that both report ``AMD EPYC`` can run the same
    configs several times apart; the name alone cannot say they differ. Empty off Linux.
    No clock: the current frequency moves from one read to the next."""
    try:
        with open("/proc/cpuinfo") as f:
            return parse_cpuinfo(f.read())
    except OSError:
        return {}


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """:func:`cpu_identity` of a /proc/cpuinfo text."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break  # the first processor is enough
            continue
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key in _CPUINFO_FIELDS:
            out[_CPUINFO_FIELDS[key]] = value
        elif key == "flags":
            flags = set(value.split())
            out["isa"] = [f for f in ISA_FLAGS if f in flags]
    return out


def platform_string(device: str, runtime: str, precision: str) -> str:
    return f"{device.split(':')[0]}/{runtime}/{precision}"


def _is_oom(e: BaseException) -> bool:
    if isinstance(e, MemoryError):
        return True
    oom_cls = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_cls is not None and isinstance(e, oom_cls):
        return True
    text = str(e).lower()
    return "out of memory" in text or "can't allocate memory" in text or "bad_alloc" in text


def allocator_fingerprint() -> dict[str, Any]:
    """The C library and the environment that change how its allocator serves this process.

    Eager PyTorch on the CPU allocates through ``malloc``; buffers of at least glibc's mmap
    threshold get fresh pages on every call, a cost per MB (the ``mmap_mb`` feature,
    docs/measurement.md). Raised ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` remove it
    (measured), other ``MALLOC_*`` / ``GLIBC_TUNABLES`` settings or a preloaded allocator
    (jemalloc, tcmalloc) may, so rows measured under them are not comparable. Preloaded
    libraries are named by file name only (no paths, so no user or host names).
    """
    libc, version = _platform.libc_ver()
    env = {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"
    }
    preload = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
    if preload:
        env["LD_PRELOAD"] = " ".join(os.path.basename(p) for p in preload)
    return {"libc": f"{libc} {version}".strip() or None, "env": env}


class Profiler:
    """Measures configs on one platform, reusing prepared models across batch sizes.

    ``max_host_mem_mb`` is a host memory cap for CPU runs: a config whose measured tensor peak
    exceeds it (or whose allocation fails) is recorded with status ``oom`` and not timed.
    ``wait_quiet_s`` > 0: before timing each config, wait up to that long until the other
    processes use fewer than ``quiet_threshold_cores`` CPU cores (shared machines).
    ``fresh_process=True`` (CPU only) measures each config in a new process forked from a
    clean server, so no measurement depends on what ran before it: eager PyTorch pays the
    per-call page faults of its buffers of >= 32 MiB (``mmap_mb``) only when glibc has no
    freed heap chunk to reuse, and a shared process sometimes has one (docs/measurement.md,
    "Page faults and process history"). Costs the model build per config instead of per
    model, plus the fork (Linux and macOS: it needs ``os.fork``).
    """

    def __init__(
        self,
        device: str = "cpu",
        runtime: str = "torch",
        precision: str = "fp32",
        threads: int | None = None,
        protocol: Protocol | str = "adaptive",
        meter: str | Meter = "auto",
        max_host_mem_mb: float | None = None,
        energy_min_window_s: float = 1.0,
        idle_s: float = 1.0,
        runtime_obj: Runtime | None = None,
        lock_sm_clock_mhz: int | None = None,
        wait_quiet_s: float = 0.0,
        quiet_threshold_cores: float = 0.5,
        fresh_process: bool = False,
        calibration: Any = None,
        reference_probe: bool | None = None,
        utilization_window_s: float = 1.0,
    ) -> None:
        if fresh_process and calibration is not None and not isinstance(calibration, (str, Path)):
            raise ConfigError(
                "fresh_process hands its arguments to a forked server as JSON: expected the "
                f"calibration set as a .npy path, got {type(calibration).__name__}. Save it with "
                "numpy.save and pass the path."
            )
        if fresh_process and (
            runtime_obj is not None
            or not isinstance(meter, str)
            or device != "cpu"
            or not hasattr(os, "fork")
        ):
            raise ConfigError(
                f"fresh_process measures in a forked process built from the arguments: "
                f"expected device 'cpu', a meter name, no runtime object and os.fork, got "
                f"device={device!r}, meter={meter!r}, runtime_obj={runtime_obj!r}, fork "
                f"{'available' if hasattr(os, 'fork') else 'missing'}. Drop fresh_process (it "
                "removes host-allocator history, which only CPU measurements carry)."
            )
        if threads is not None and device == "cpu" and not 1 <= threads <= usable_cpus():
            raise ConfigError(
                f"invalid threads: expected 1 to {usable_cpus()} (the CPUs this process may "
                f"use), got {threads!r}. More intra-op threads than cores measure "
                "oversubscription, not the platform; use at most the core count."
            )
        self.fresh_process = fresh_process
        self._fresh_args = {
            "device": device,
            "runtime": runtime,
            "precision": precision,
            "threads": threads,
            "meter": meter,
            "max_host_mem_mb": max_host_mem_mb,
            "energy_min_window_s": energy_min_window_s,
            "idle_s": 0.0,  # the idle power is recorded, not subtracted: the parent's serves
            "wait_quiet_s": wait_quiet_s,
            "quiet_threshold_cores": quiet_threshold_cores,
            "reference_probe": reference_probe,
        }
        if calibration is not None:
            self._fresh_args["calibration"] = str(calibration)
        self._server: Any = None
        extra = {} if calibration is None else {"calibration": calibration}
        self.runtime = runtime_obj or get_runtime(device, runtime, precision, threads, **extra)
        self.device = self.runtime.device
        self.kind = self.runtime.kind
        self.precision = precision
        self._protocol = Protocol.named(protocol) if isinstance(protocol, str) else protocol
        self.meter = meter if isinstance(meter, Meter) else get_meter(meter, self.device)
        if max_host_mem_mb is not None and not max_host_mem_mb > 0:
            raise ConfigError(f"invalid --max-host-mem-mb: expected > 0, got {max_host_mem_mb!r}.")
        self.max_host_mem_mb = max_host_mem_mb
        self.lock_sm_clock_mhz = lock_sm_clock_mhz
        self.wait_quiet_s = wait_quiet_s
        self.quiet_threshold_cores = quiet_threshold_cores
        # the machine-speed probe among each row's runs (reference_ms); built on first use.
        # None: CPU rows only. Between CUDA runs the CPU conv probe does not follow the
        # latency's drift, so dividing it out makes repeats disagree more (docs/measurement.md);
        # True on a GPU times the launch probe (LAUNCH_WORKLOAD, opt-in until a measurement
        # shows it follows the latency's drift)
        if reference_probe is None:
            reference_probe = self.kind == "cpu"
        self.reference_probe = bool(reference_probe) and self.kind in ("cpu", "cuda")
        self._probe: ReferenceProbe | None = None
        if lock_sm_clock_mhz is not None:
            if not isinstance(self.meter, NVMLMeter):
                raise ConfigError(
                    f"clock locking needs the NVML meter on a CUDA device: expected --meter "
                    f"nvml with --device cuda:N, got meter={self.meter.name!r}. Drop "
                    "--lock-sm-clock-mhz (it is opt-in, for your own machine only)."
                )
            self.meter.lock_clocks(lock_sm_clock_mhz)
        self.energy_min_window_s = energy_min_window_s
        # CARB's SM/memory utilization: a training-mode window per CUDA row; 0 skips it
        self.utilization_window_s = utilization_window_s
        self._prepared: Prepared | None = None
        self._prepare_error: tuple[tuple, str] | None = None
        self.counter_update_period_s = None
        if self.meter.name == "nvml-counter" and idle_s:
            # Windows must span many counter updates: measure the period on this GPU.
            self.counter_update_period_s = observe_update_period_s(self.meter, idle_s)
            if self.counter_update_period_s:
                self.meter.update_period_s = self.counter_update_period_s
        self.idle_power_w = measure_idle_power_w(self.meter, idle_s) if idle_s else None
        self.platform = platform_string(self.device, self.runtime.name, precision)
        self.device_name = self._device_name()
        self._refresh_fingerprint()

    @property
    def protocol(self) -> Protocol:
        return self._protocol

    @protocol.setter
    def protocol(self, protocol: Protocol | str) -> None:
        """Swap the timing protocol; later rows record the new one (the prepared model stays,
        so two protocols can measure the same model instance)."""
        self._protocol = Protocol.named(protocol) if isinstance(protocol, str) else protocol
        self._refresh_fingerprint()

    def _refresh_fingerprint(self) -> None:
        self.fingerprint = self._fingerprint()
        self._fingerprint_json = json.dumps(self.fingerprint, sort_keys=True)
        self._protocol_json = json.dumps(self.protocol.params(), sort_keys=True)

    # -- platform ---------------------------------------------------------------------------
    def _device_name(self) -> str:
        if self.kind == "cuda":
            return torch.cuda.get_device_name(self.device)
        return cpu_model_name()

    def _fingerprint(self) -> dict[str, Any]:
        fp: dict[str, Any] = {
            "platform": self.platform,
            "device": self.kind,
            "device_name": self.device_name,
            "cpu_model": cpu_model_name(),
            "cpu": cpu_identity(),
            "threads": self.runtime.threads,
            "runtime": self.runtime.name,
            "precision": self.precision,
            "python": _platform.python_version(),
            **self.runtime.versions(),
            "protocol": self.protocol.name,
            "protocol_params": self.protocol.params(),
            "meter": self.meter.name,
        }
        fp["allocator"] = allocator_fingerprint()
        if self.fresh_process:  # absent: configs measured one after another in one process
            fp["fresh_process"] = True
        fp["locked_sm_clock_mhz"] = self.lock_sm_clock_mhz  # None: clocks as found
        if self.kind == "cuda" and self.reference_probe:  # what a CUDA row's reference_ms is
            fp["reference"] = LAUNCH_WORKLOAD
        if self.counter_update_period_s is not None:
            fp["energy_counter_update_period_s"] = self.counter_update_period_s
        if not isinstance(self.meter, NoMeter):
            fp["energy_min_window_s"] = self.energy_min_window_s
        if self.kind == "cuda":
            fp["cuda"] = torch.version.cuda
            if isinstance(self.meter, NVMLMeter):
                try:
                    fp["driver"] = self.meter._nvml.nvmlSystemGetDriverVersion()
                except Exception:  # noqa: BLE001 - best effort
                    fp["driver"] = None
        if isinstance(self.runtime, OnnxRuntime):
            fp["providers"] = [p if isinstance(p, str) else p[0] for p in self.runtime.providers]
            if self.precision == "int8":
                cal = self.runtime.calibration
                fp["calibration"] = CALIBRATION if cal is None else _calibration_record(cal)
        if (self.runtime.name, self.precision) not in _PLATFORMS_WITHOUT_SCHEME:
            fp["scheme"] = self.runtime.scheme()  # conversion, quantization, calibration set
        try:
            from importlib.metadata import version

            fp["carb_nas"] = version("carb-nas")
        except Exception:  # noqa: BLE001
            fp["carb_nas"] = None
        return fp

    # -- measurement ------------------------------------------------------------------------
    def _get_prepared(self, config: Config) -> Prepared:
        group = group_of(config)
        if self._prepared is not None and self._prepared.group == group:
            return self._prepared
        if self._prepare_error is not None and self._prepare_error[0] == group:
            raise RuntimeError(self._prepare_error[1])
        self.close_model()
        try:
            self._prepared = self.runtime.prepare(config)
        except Exception as e:
            self._prepare_error = (group, f"{type(e).__name__}: {e}")
            raise
        return self._prepared

    def close_model(self) -> None:
        if self._prepared is not None:
            self.runtime.release(self._prepared)
            self._prepared = None

    def platform_config(self, config: Config) -> Config:
        """The config with the platform's runtime and precision (what the row's key names)."""
        return config.replace(runtime=self.runtime.name, precision=self.precision)

    def profile(self, config: Config) -> dict[str, Any]:
        """Measure one config; failures become rows with status ``oom`` or ``error``."""
        config = self.platform_config(config)
        if self.fresh_process:
            return self._profile_fresh(config)
        row = self._base_row(config)
        try:
            # numpy's OpenBLAS pool would otherwise spin on every core beside the timed runs
            # (and was seen to hang an OpenVINO campaign in exec_blas): the measuring process
            # gets the platform's thread count, for every library, not just the runtime's
            with self._thread_limits():
                self._measure(config, row)
            row["status"] = "ok"
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - every failure is a result row
            row["status"] = "oom" if _is_oom(e) else "error"
            row["error"] = f"{type(e).__name__}: {e}"[:ERROR_MAX_CHARS]
            if row["status"] == "oom" and self.kind == "cuda":
                torch.cuda.empty_cache()
        if self.protocol.cooldown_s > 0:
            time.sleep(self.protocol.cooldown_s)
        return row

    def _thread_limits(self) -> Any:
        if self.kind != "cpu":
            return contextlib.nullcontext()
        return threadpool_limits(limits=self.runtime.threads or usable_cpus())

    def _profile_fresh(self, config: Config) -> dict[str, Any]:
        from carb_nas.measure._fresh import FreshProcessServer

        if self._server is None:
            self._server = FreshProcessServer()
        try:
            row = self._server.profile({**self._fresh_args, "protocol": self.protocol}, config)
        except RuntimeError as e:  # the measuring process (or the server) died; the server
            return self.error_row(config, str(e))  # handle restarts a dead server by itself
        # the parent's view of the platform: the same, plus fresh_process in the fingerprint
        row.update(fingerprint=self._fingerprint_json, idle_power_w=self.idle_power_w)
        return row

    def error_row(self, config: Config, message: str) -> dict[str, Any]:
        """A row with status ``error`` for a config that could not be measured."""
        row = self._base_row(self.platform_config(config))
        row["status"], row["error"] = "error", message[:ERROR_MAX_CHARS]
        return row

    def _base_row(self, config: Config) -> dict[str, Any]:
        row: dict[str, Any] = dict.fromkeys(SCHEMA)
        row.update(config.as_dict())
        row.update(
            key=config.key,
            platform=self.platform,
            device=self.kind,
            device_name=self.device_name,
            threads=self.runtime.threads,
            fingerprint=self._fingerprint_json,
            protocol=self.protocol.name,
            protocol_params=self._protocol_json,
            timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
            meter=self.meter.name,
            idle_power_w=self.idle_power_w,
        )
        if isinstance(self.meter, NoMeter):
            row["energy_reason"] = NO_METER_REASON
        return row

    def _measure(self, config: Config, row: dict[str, Any]) -> None:
        gc.collect()
        self.runtime.hygiene()
        prepared = self._get_prepared(config)
        row["output_rel_error"] = prepared.info.get("output_rel_error")
        x = self.runtime.make_input(prepared, config)
        peak_mb, method = self.runtime.peak_memory_mb(prepared, x)
        row["peak_mem_mb"], row["peak_mem_method"] = peak_mb, method
        if (
            self.max_host_mem_mb is not None
            and self.kind == "cpu"
            and peak_mb > self.max_host_mem_mb
        ):
            raise MemoryError(
                f"out of memory: tensor peak {peak_mb:.1f} MB exceeds the configured host "
                f"memory cap --max-host-mem-mb {self.max_host_mem_mb:g}"
            )
        if self.wait_quiet_s > 0:
            wait_for_quiet(self.wait_quiet_s, self.quiet_threshold_cores)
        if self.reference_probe and self._probe is None:
            if self.kind == "cuda":
                self._probe = ReferenceProbe(workload="launch", device=self.device)
            else:
                self._probe = ReferenceProbe()
        timing = time_runs(lambda: self.runtime.run_timed(prepared, x), self.protocol, self._probe)
        row.update(timing.as_row())
        if isinstance(self.meter, NVMLMeter):
            row.update(self.meter.telemetry())
        if not isinstance(self.meter, NoMeter):
            try:
                w = measure_window(
                    self.meter, lambda: self.runtime.run(prepared, x), self.energy_min_window_s
                )
                row["energy_j"], row["energy_window_s"] = w.energy_j, w.window_s
            except Exception as e:  # noqa: BLE001 - energy failure keeps the timing
                row["energy_reason"] = f"meter={self.meter.name}: {e}"[:ERROR_MAX_CHARS]
        if (
            self.kind == "cuda"
            and isinstance(self.meter, NVMLMeter)
            and self.utilization_window_s > 0
        ):
            row.update(self._gpu_utilization(config, self.utilization_window_s))

    def _gpu_utilization(self, config: Config, window_s: float = 1.0) -> dict[str, Any]:
        """Mean NVML SM and memory utilization over a training-mode fwd+bwd window (CARB)."""
        from carb_nas.models import build_model

        if not isinstance(self.meter, NVMLMeter):  # utilization is NVML's
            return {}
        try:
            model = build_model(config.replace(precision="fp32"), self.device).train()
            x = torch.randn(
                config.batch_size, 3, config.resolution, config.resolution, device=self.device
            )
            sm, mem = [], []
            t_end = time.perf_counter() + window_s
            while time.perf_counter() < t_end:
                model(x).sum().backward()
                torch.cuda.synchronize(self.device)
                u = self.meter.utilization()
                if u is not None:
                    sm.append(u[0])
                    mem.append(u[1])
            del model, x
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - telemetry must not fail the measurement
            torch.cuda.empty_cache()
            return {}
        if not sm:
            return {}
        return {"sm_util": sum(sm) / len(sm), "mem_util": sum(mem) / len(mem)}

    def close(self) -> None:
        self.close_model()
        self.meter.close()
        if self._server is not None:
            self._server.close()
            self._server = None


def profile_config(
    config: Config,
    device: str = "cpu",
    runtime: str = "torch",
    precision: str | None = None,
    threads: int | None = None,
    protocol: Protocol | str = "adaptive",
    meter: str | Meter = "auto",
    **kwargs: Any,
) -> dict[str, Any]:
    """Profile one config on a platform; returns a row following ``dataset.SCHEMA``.

    ``precision`` defaults to the config's precision. For many configs use ``Profiler`` (or
    a campaign), which reuses prepared models across batch sizes.
    """
    prof = Profiler(
        device, runtime, precision or config.precision, threads, protocol, meter, **kwargs
    )
    try:
        return prof.profile(config)
    finally:
        prof.close()
