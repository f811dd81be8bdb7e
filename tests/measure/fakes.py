"""Honest test doubles at the vendor boundary: a fake ``pynvml`` module and a fake meter.

Everything they produce is labelled fake (meter names start with ``fake-``) and can never pass
dataset validation.
"""

from __future__ import annotations

import types

from carb_nas.measure.meters import Meter


class FakeNVML(types.ModuleType):
    """A stand-in for the ``pynvml`` module that replays scripted readings.

    ``energy_mj``: list of successive nvmlDeviceGetTotalEnergyConsumption readings (the last
    repeats), or an exception class to raise. ``power_mw``: constant power reading.
    ``init_error``: exception class raised by nvmlInit.
    """

    def __init__(self, energy_mj=None, power_mw=100_000.0, init_error=None, count=1):
        super().__init__("pynvml")

        class NVMLError(Exception):
            pass

        self.NVMLError = NVMLError
        for name in (
            "NotSupported",
            "NoPermission",
            "LibraryNotFound",
            "DriverNotLoaded",
            "InvalidArgument",
        ):
            setattr(self, f"NVMLError_{name}", type(f"NVMLError_{name}", (NVMLError,), {}))
        self._energy = list(energy_mj) if isinstance(energy_mj, list) else energy_mj
        self._power = power_mw
        self._init_error = init_error
        self._count = count
        self.NVML_CLOCK_SM, self.NVML_CLOCK_MEM, self.NVML_TEMPERATURE_GPU = 1, 2, 0
        self.reads = 0

    def _err(self, name: str):
        return getattr(self, f"NVMLError_{name}")

    def nvmlInit(self):
        if self._init_error is not None:
            raise self._err(self._init_error)("scripted nvmlInit failure")

    def nvmlDeviceGetCount(self):
        return self._count

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if isinstance(self._energy, str):
            raise self._err(self._energy)("scripted")
        self.reads += 1
        if len(self._energy) > 1:
            return self._energy.pop(0)
        return self._energy[0]

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._power

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1500 if kind == 1 else 5000

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 55

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 250_000

    def nvmlSystemGetDriverVersion(self):
        return "fake-driver"

    def nvmlDeviceSetGpuLockedClocks(self, handle, lo, hi):
        self.locked = (lo, hi)

    def nvmlDeviceResetGpuLockedClocks(self, handle):
        self.locked = None


class FakeMeter(Meter):
    """A meter that adds ``watts x elapsed`` of a fake clock on every reading."""

    name = "fake-counter"
    update_period_s = 0.001

    def __init__(self, joules_per_read: float = 0.5) -> None:
        super().__init__()
        self._raw = 0.0
        self._step = joules_per_read

    @classmethod
    def is_available(cls) -> bool:
        return True

    def _read_raw(self) -> float:
        self._raw += self._step
        return self._raw

    def _raw_to_j(self, raw: float) -> float:
        return raw
