"""The profiler: measure latency, peak memory and energy of configs on a platform.

A platform is device x runtime x precision x threads. ``profile_config`` measures one config;
``Profiler`` measures many and reuses prepared models. Runtimes: PyTorch, ONNX Runtime,
OpenVINO and LiteRT, each at the precisions in ``SUPPORTED``, behind ``Runtime``; timing by a
``Protocol`` (``time_runs``). Four public namespaces hold the rest: ``measure.meters`` (energy
``Meter`` s), ``measure.passes`` (the fastest of interleaved passes, for shared machines),
``measure.campaign`` (resumable campaigns on an Optuna study: configs, per-op events, ONNX
Runtime nodes) and ``measure.loadgen`` (MLPerf LoadGen scenarios).
"""

from carb_nas.measure._profiler import (
    Profiler,
    cpu_identity,
    cpu_model_name,
    frozen_heap,
    platform_string,
    profile_config,
)
from carb_nas.measure._protocol import (
    MIN_CPU_PER_WALL,
    Protocol,
    TimingResult,
    lost_its_core,
    time_runs,
)
from carb_nas.measure._quiet import (
    autogroup_hint,
)
from carb_nas.measure._reference import (
    REFERENCE_WORKLOAD,
    ReferenceProbe,
)
from carb_nas.measure._runtimes import (
    SUPPORTED,
    Prepared,
    Runtime,
    calibration_batches,
    check_platform,
    check_runtime,
    get_runtime,
    usable_cpus,
)

__all__ = [
    "Profiler",
    "cpu_identity",
    "cpu_model_name",
    "frozen_heap",
    "platform_string",
    "profile_config",
    "MIN_CPU_PER_WALL",
    "Protocol",
    "TimingResult",
    "lost_its_core",
    "time_runs",
    "autogroup_hint",
    "REFERENCE_WORKLOAD",
    "ReferenceProbe",
    "SUPPORTED",
    "Prepared",
    "Runtime",
    "calibration_batches",
    "check_platform",
    "check_runtime",
    "get_runtime",
    "usable_cpus",
]
