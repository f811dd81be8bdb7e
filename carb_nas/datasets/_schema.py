"""The row schema of measurement datasets: one table per platform, CSV or Parquet.

A row is one measured config on one platform. ``SCHEMA`` below is the contract between the
profiler (which writes rows), the cost model, the screen/search stages and the reports.
Targets are ``peak_mem_mb``, ``energy_j`` and ``latency_ms`` (per batch); ``energy_j`` is empty
when the platform has no energy meter, with the reason in ``energy_reason``.
"""

from __future__ import annotations

__all__ = ["SCHEMA", "TARGETS", "REQUIRED_COLUMNS", "STATUSES", "REAL_METERS", "DEVICES"]

TARGETS = ("peak_mem_mb", "energy_j", "latency_ms")  # cascade order
STATUSES = ("ok", "oom", "error")
REAL_METERS = ("nvml-counter", "nvml-power", "rapl", "none")
"""Meters whose rows may enter a dataset (rows of test doubles never do)."""
DEVICES = ("cpu", "cuda")

# column -> (kind, required, description). kind: str | int | float | bool | json
SCHEMA: dict[str, tuple[str, bool, str]] = {
    # the config
    "key": ("str", True, "Config.key: 16 hex digits, stable across processes and releases"),
    "family": ("str", True, "basic | bottleneck"),
    "depth": ("int", True, "weighted layers (stem conv + block convs + fc)"),
    "width": ("float", True, "channel multiplier"),
    "resolution": ("int", True, "input height = width, pixels"),
    "batch_size": ("int", True, "images per batch"),
    "precision": ("str", True, "fp32 | fp16 | bf16 | int8"),
    "runtime": ("str", True, "torch | onnxruntime"),
    # the platform
    "platform": ("str", True, "device/runtime/precision, e.g. cpu/torch/fp32"),
    "device": ("str", True, "cpu | cuda"),
    "device_name": ("str", True, "CPU or GPU model name"),
    "threads": ("int", True, "intra-op threads used (CPU)"),
    "fingerprint": ("json", True, "platform fingerprint: versions, driver, clocks, no host names"),
    "protocol": ("str", True, "adaptive | carb"),
    "protocol_params": ("json", True, "protocol parameters (warmups, target, caps, cooldown)"),
    "timestamp": ("str", True, "ISO 8601 UTC time of the measurement"),
    # outcome
    "status": ("str", True, "ok | oom | error"),
    "error": ("str", False, "error message when status != ok"),
    # latency per batch
    "latency_ms": ("float", False, "median latency per batch, ms"),
    "latency_mean_ms": ("float", False, "mean latency per batch, ms"),
    "latency_p90_ms": ("float", False, "90th percentile latency per batch, ms"),
    "latency_cv": ("float", False, "coefficient of variation of timed runs (std/mean)"),
    "latency_ci_rel": ("float", False, "95% CI half-width of the median / median"),
    "n_runs": ("int", False, "timed runs"),
    "timing_s": ("float", False, "wall seconds spent timing (cap reached if >= protocol cap)"),
    "minor_faults_per_run": (
        "float",
        False,
        "minor page faults of the profiling process per timed run (getrusage): about 244 per "
        "MB of buffers mapped anew on each call; empty in rows from before it was recorded",
    ),
    "cpu_per_wall": (
        "float",
        False,
        "process CPU seconds per wall second while timing: about 1.0 (one thread) when the "
        "run had a core to itself, lower when other processes took the CPU; empty in rows "
        "from before it was recorded",
    ),
    "reference_ms": (
        "float",
        False,
        "median time of the machine-speed probe (measure.REFERENCE_WORKLOAD) timed in bursts "
        "among the row's runs, ms: divides the machine's momentary speed out "
        "(datasets.reference_normalized); empty where no probe was timed",
    ),
    # energy
    "energy_j": ("float", False, "energy per batch, J (empty without a meter)"),
    "energy_reason": ("str", False, "why energy_j is empty, e.g. meter=none"),
    "meter": ("str", True, "nvml-counter | nvml-power | rapl | none"),
    "idle_power_w": ("float", False, "idle/baseline power before the window, W"),
    "energy_window_s": ("float", False, "length of the energy window, s"),
    # memory
    "peak_mem_mb": ("float", False, "peak memory per batch, MB (10^6 bytes)"),
    "peak_mem_method": ("str", False, "how peak_mem_mb was obtained"),
    # GPU telemetry (empty on CPU)
    "sm_util": ("float", False, "mean NVML SM utilization during fwd+bwd window, %"),
    "mem_util": ("float", False, "mean NVML memory utilization during fwd+bwd window, %"),
    "sm_clock_mhz": ("float", False, "SM clock seen at measurement time"),
    "mem_clock_mhz": ("float", False, "memory clock seen at measurement time"),
    "temperature_c": ("float", False, "GPU temperature at measurement time"),
    "power_limit_w": ("float", False, "enforced power limit at measurement time"),
    # runtime-specific
    "output_rel_error": ("float", False, "relative output error vs fp32 eager (ONNX/INT8)"),
}
REQUIRED_COLUMNS = tuple(k for k, (_, req, _) in SCHEMA.items() if req)
