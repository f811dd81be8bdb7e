"""The profiler: measure latency, peak memory and energy of configs on a platform.

A platform is device x runtime x precision x threads. ``profile_config`` measures one config;
``Profiler`` measures many and reuses prepared models; campaigns (``carb_nas.campaign``) make
it resumable. Hardware sits behind ``Meter`` (energy) and ``Runtime`` (model execution).
"""

from carb_nas.measure._meters import (
    METER_NAMES,
    NO_METER_REASON,
    EnergyWindow,
    Meter,
    NoMeter,
    NVMLMeter,
    RAPLMeter,
    get_meter,
    measure_idle_power_w,
    measure_window,
    observe_update_period_s,
)
from carb_nas.measure._profiler import Profiler, cpu_model_name, platform_string, profile_config
from carb_nas.measure._protocol import PROTOCOLS, Protocol, TimingResult, median_ci, time_runs
from carb_nas.measure._quiet import others_cpu_cores, wait_for_quiet
from carb_nas.measure._runtimes import (
    CALIBRATION,
    ORT_PEAK_METHOD,
    SUPPORTED,
    TORCH_CPU_PEAK_METHOD,
    OnnxRuntime,
    Prepared,
    Runtime,
    TorchRuntime,
    check_platform,
    get_runtime,
    torch_cpu_peak_bytes,
)

__all__ = [
    "CALIBRATION",
    "EnergyWindow",
    "METER_NAMES",
    "Meter",
    "NO_METER_REASON",
    "NVMLMeter",
    "NoMeter",
    "ORT_PEAK_METHOD",
    "OnnxRuntime",
    "PROTOCOLS",
    "Prepared",
    "Profiler",
    "Protocol",
    "RAPLMeter",
    "Runtime",
    "SUPPORTED",
    "TORCH_CPU_PEAK_METHOD",
    "TimingResult",
    "TorchRuntime",
    "check_platform",
    "cpu_model_name",
    "get_meter",
    "get_runtime",
    "measure_idle_power_w",
    "measure_window",
    "median_ci",
    "observe_update_period_s",
    "others_cpu_cores",
    "platform_string",
    "profile_config",
    "time_runs",
    "torch_cpu_peak_bytes",
    "wait_for_quiet",
]
