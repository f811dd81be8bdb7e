"""Meters: cumulative energy counters behind one ``Meter`` interface (``get_meter``:
NVML, RAPL or none), and the energy of a window of repeated runs.
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

__all__ = [
    "METER_NAMES",
    "NO_METER_REASON",
    "EnergyWindow",
    "Meter",
    "NoMeter",
    "NVMLMeter",
    "RAPLMeter",
    "get_meter",
    "measure_idle_power_w",
    "measure_window",
    "observe_update_period_s",
]
