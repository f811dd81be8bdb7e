"""Energy meters: cumulative energy in joules behind a small abstract class.

Backends are probed in a fixed order (NVML for CUDA devices, RAPL for CPUs, then none), each
with a cached ``is_available()``. Vendor errors are mapped to typed carb_nas errors once, here
at the boundary, with a remedy in the message (the way Zeus does it).

Call order for a ``Meter``::

    meter = NVMLMeter(index=0)          # raises MeterUnavailableError if it cannot be read
    e0 = meter.energy_j()               # cumulative joules since an arbitrary origin
    ...                                 # work
    e1 = meter.energy_j()               # e1 - e0 = energy of the work (wraparound handled)

``measure_window`` repeats a callable until the window is long enough for the counter to
advance (``min_window_s`` and at least ``10 x update_period_s``) and divides by the repeats.
"""

from __future__ import annotations

import functools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from carb_nas.errors import MeasurementError, MeterUnavailableError

__all__ = [
    "Meter",
    "NVMLMeter",
    "RAPLMeter",
    "NoMeter",
    "EnergyWindow",
    "get_meter",
    "measure_window",
    "observe_update_period_s",
    "measure_idle_power_w",
    "NO_METER_REASON",
    "METER_NAMES",
]

NO_METER_REASON = "meter=none: no energy counter readable (no NVML, no powercap)"
METER_NAMES = ("auto", "nvml", "rapl", "none")


class Meter(ABC):
    """Cumulative energy counter of one device, in joules.

    Subclasses set ``name`` (the row's ``meter`` column, e.g. ``nvml-counter``) and implement
    ``_read_raw`` (the vendor reading in the vendor's unit) and ``_raw_to_j``. Wraparound of the
    raw counter at ``max_raw`` is handled here: ``energy_j()`` is monotonic as long as it is
    read at least once per wraparound period.
    """

    name: str = "abstract"
    #: seconds between counter updates (measured or documented); windows are >= 10x this
    update_period_s: float = 0.001
    #: raw counter value at which it wraps to 0 (None: never wraps)
    max_raw: float | None = None

    def __init__(self) -> None:
        self._last_raw: float | None = None
        self._origin_raw: float | None = None  # energy_j() counts from the first reading
        self._offset_raw: float = 0
        self._lock = threading.Lock()

    @classmethod
    @abstractmethod
    def is_available(cls) -> bool:
        """True when this backend can be read on this machine (cached)."""

    @abstractmethod
    def _read_raw(self) -> float:
        """One raw counter reading in the vendor's unit."""

    @abstractmethod
    def _raw_to_j(self, raw: float) -> float:
        """Convert a raw counter difference to joules."""

    def energy_j(self) -> float:
        """Cumulative energy in joules since the first reading (monotonic, wrap-safe)."""
        with self._lock:
            raw = self._read_raw()  # ints stay exact (a 64-bit counter exceeds float precision)
            if self._origin_raw is None:
                self._origin_raw = raw
            if self._last_raw is not None and raw < self._last_raw:
                if self.max_raw is None:
                    raise MeasurementError(
                        f"{self.name} energy counter went backwards: expected a monotonic "
                        f"counter, got {raw} after {self._last_raw}. The driver may have been "
                        "reloaded; measure again."
                    )
                self._offset_raw += self.max_raw
            self._last_raw = raw
            return self._raw_to_j(raw + self._offset_raw - self._origin_raw)

    def power_w(self) -> float | None:
        """Instantaneous power in watts when the backend offers it, else None."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release vendor resources."""

    def describe(self) -> dict:
        return {"meter": self.name, "update_period_s": self.update_period_s}


class NoMeter(Meter):
    """No energy counter: ``energy_j`` is never available; rows get ``NO_METER_REASON``."""

    name = "none"

    @classmethod
    def is_available(cls) -> bool:
        return True

    def _read_raw(self) -> float:
        raise MeasurementError(NO_METER_REASON)

    def _raw_to_j(self, raw: float) -> float:
        return raw


# -- NVML --------------------------------------------------------------------------------------
def _import_pynvml():
    try:
        import pynvml
    except ImportError as e:
        raise MeterUnavailableError(
            "NVML meter unavailable: expected the `pynvml` module (package nvidia-ml-py), got "
            f"ImportError ({e}). Install it with `pip install nvidia-ml-py`."
        ) from e
    return pynvml


def _nvml_error(pynvml, e: Exception, what: str) -> MeterUnavailableError:
    """Map an NVMLError to a MeterUnavailableError with a remedy."""
    cls = type(e).__name__
    remedies = {
        "NVMLError_LibraryNotFound": "Install the NVIDIA driver (libnvidia-ml.so) or run on a "
        "machine with an NVIDIA GPU; use --meter none to profile without energy.",
        "NVMLError_DriverNotLoaded": "Load the NVIDIA driver (nvidia-smi must work) or use "
        "--meter none.",
        "NVMLError_NoPermission": "Run with permission to query the GPU (a user in the video "
        "group, or ask the administrator) or use --meter none.",
        "NVMLError_NotSupported": "This GPU does not offer the query; use --meter none.",
        "NVMLError_InvalidArgument": "Check the CUDA device index (--device cuda:N).",
        "NVMLError_GpuIsLost": "The GPU fell off the bus; reboot the machine.",
    }
    fix = remedies.get(cls, "Check `nvidia-smi` works, or use --meter none.")
    return MeterUnavailableError(
        f"NVML meter unavailable: expected {what} to succeed, got {cls} ({e}). {fix}"
    )


class NVMLMeter(Meter):
    """NVIDIA GPU energy through NVML.

    Prefers the total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since
    the driver loaded, Volta and newer): ``name = "nvml-counter"``. On GPUs without the counter
    it integrates ``nvmlDeviceGetPowerUsage`` (milliwatts) polled by a background thread every
    ``poll_interval_s`` with the trapezoid rule: ``name = "nvml-power"``.
    """

    name = "nvml-counter"
    update_period_s = 0.1  # replaced by observe_update_period_s when measured
    max_raw: float | None = 2**64  # unsigned long long millijoules

    def __init__(self, index: int = 0, poll_interval_s: float = 0.01) -> None:
        super().__init__()
        pynvml = _import_pynvml()
        self._nvml = pynvml
        self.index = int(index)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise _nvml_error(pynvml, e, "nvmlInit()") from e
        try:
            count = pynvml.nvmlDeviceGetCount()
            if not 0 <= self.index < count:
                raise MeterUnavailableError(
                    f"NVML meter unavailable: expected a GPU index in [0, {count}), got "
                    f"{self.index}. Use --device cuda:N with N below {count}."
                )
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except pynvml.NVMLError as e:
            raise _nvml_error(pynvml, e, f"nvmlDeviceGetHandleByIndex({self.index})") from e
        self._poller: _PowerPoller | None = None
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except pynvml.NVMLError as e:
            if type(e).__name__ != "NVMLError_NotSupported":
                raise _nvml_error(pynvml, e, "nvmlDeviceGetTotalEnergyConsumption") from e
            # GPU without the counter (pre-Volta): integrate polled power instead.
            try:
                pynvml.nvmlDeviceGetPowerUsage(self._handle)
            except pynvml.NVMLError as e2:
                raise _nvml_error(pynvml, e2, "nvmlDeviceGetPowerUsage") from e2
            self.name = "nvml-power"
            self.max_raw = None
            self.update_period_s = poll_interval_s
            self._poller = _PowerPoller(self._power_mw, poll_interval_s)
            self._poller.start()

    @classmethod
    @functools.cache
    def is_available(cls) -> bool:
        try:
            meter = cls(0)
        except MeterUnavailableError:
            return False
        meter.close()
        return True

    def _power_mw(self) -> float:
        try:
            return float(self._nvml.nvmlDeviceGetPowerUsage(self._handle))
        except self._nvml.NVMLError as e:
            raise _nvml_error(self._nvml, e, "nvmlDeviceGetPowerUsage") from e

    def _read_raw(self) -> float:
        if self._poller is not None:
            return self._poller.energy_mj()
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except self._nvml.NVMLError as e:
            raise _nvml_error(self._nvml, e, "nvmlDeviceGetTotalEnergyConsumption") from e

    def _raw_to_j(self, raw: float) -> float:
        return raw / 1000.0

    def power_w(self) -> float | None:
        return self._power_mw() / 1000.0

    def telemetry(self) -> dict:
        """Clocks, temperature and power limit seen now (None for any query that fails)."""
        n = self._nvml

        def q(fn, *args, scale=1.0):
            try:
                return float(fn(self._handle, *args)) * scale
            except Exception:  # noqa: BLE001 - telemetry is best effort, never fatal
                return None

        return {
            "sm_clock_mhz": q(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
            "mem_clock_mhz": q(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
            "temperature_c": q(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU),
            "power_limit_w": q(n.nvmlDeviceGetEnforcedPowerLimit, scale=1e-3),
        }

    def utilization(self) -> tuple[float, float] | None:
        """(SM %, memory %) from nvmlDeviceGetUtilizationRates, or None."""
        try:
            u = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
        except Exception:  # noqa: BLE001
            return None
        return float(u.gpu), float(u.memory)

    def lock_clocks(self, sm_mhz: int) -> None:
        """Opt-in, for a user's own machine only: lock the SM clock to ``sm_mhz``.

        Never a default (on a shared or borrowed GPU, measure the card as you find it).
        ``close()`` resets the clocks. Needs root or the admin's permission.
        """
        n = self._nvml
        try:
            n.nvmlDeviceSetGpuLockedClocks(self._handle, int(sm_mhz), int(sm_mhz))
        except n.NVMLError as e:
            raise _nvml_error(n, e, f"nvmlDeviceSetGpuLockedClocks({sm_mhz} MHz)") from e
        self._locked = True

    def close(self) -> None:
        if getattr(self, "_locked", False):
            try:
                self._nvml.nvmlDeviceResetGpuLockedClocks(self._handle)
            finally:
                self._locked = False
        if self._poller is not None:
            self._poller.stop()
            self._poller = None


class _PowerPoller(threading.Thread):
    """Integrates polled power (mW) into energy (mJ) with the trapezoid rule."""

    def __init__(self, read_mw: Callable[[], float], interval_s: float) -> None:
        super().__init__(daemon=True)
        self._read_mw = read_mw
        self._interval_s = interval_s
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._energy_mj = 0.0
        self._last = (time.perf_counter(), read_mw())

    def run(self) -> None:
        while not self._stop_event.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        now, p = time.perf_counter(), self._read_mw()
        with self._lock:
            t0, p0 = self._last
            self._energy_mj += 0.5 * (p + p0) * (now - t0)
            self._last = (now, p)

    def energy_mj(self) -> float:
        self._sample()
        with self._lock:
            return self._energy_mj

    def stop(self) -> None:
        self._stop_event.set()


# -- RAPL --------------------------------------------------------------------------------------
POWERCAP_ROOT = Path("/sys/class/powercap")


class RAPLMeter(Meter):
    """CPU package energy from RAPL through the Linux powercap interface.

    Sums ``energy_uj`` of every top-level package zone (``intel-rapl:N``, also used by AMD),
    each wrapping at its own ``max_energy_range_uj``. The counter updates about every
    millisecond.
    """

    name = "rapl"
    update_period_s = 0.001

    def __init__(self, root: str | Path = POWERCAP_ROOT) -> None:
        super().__init__()
        self.root = Path(root)
        zones = sorted(
            p for p in self.root.glob("intel-rapl:*") if p.name.count(":") == 1 and p.is_dir()
        )
        if not zones:
            raise MeterUnavailableError(
                f"RAPL meter unavailable: expected package zones intel-rapl:N under "
                f"{self.root}, got none. This CPU or kernel exposes no powercap RAPL; use "
                "--meter none."
            )
        self._zones = zones
        self._max_uj = [self._read_int(z / "max_energy_range_uj") for z in zones]
        self._last_uj: list[int | None] = [None] * len(zones)
        self._total_uj = 0.0
        for z in zones:
            self._read_int(z / "energy_uj")

    @staticmethod
    def _read_int(path: Path) -> int:
        try:
            return int(path.read_text().strip())
        except PermissionError as e:
            raise MeterUnavailableError(
                f"RAPL meter unavailable: expected read access to {path}, got permission "
                "denied (kernels since 5.10 restrict energy_uj to root). Run as root, or "
                f"`sudo chmod a+r {path.parent}/energy_uj`, or use --meter none."
            ) from e
        except (OSError, ValueError) as e:
            raise MeterUnavailableError(
                f"RAPL meter unavailable: expected an integer in {path}, got {e}. Use --meter none."
            ) from e

    @classmethod
    @functools.cache
    def is_available(cls) -> bool:
        try:
            cls()
        except MeterUnavailableError:
            return False
        return True

    def _read_raw(self) -> float:
        # Per-zone wraparound (each zone has its own range), accumulated here.
        for i, z in enumerate(self._zones):
            uj = self._read_int(z / "energy_uj")
            last = self._last_uj[i]
            if last is not None:
                delta = uj - last
                if delta < 0:
                    delta += self._max_uj[i]
                self._total_uj += delta
            self._last_uj[i] = uj
        return self._total_uj

    def _raw_to_j(self, raw: float) -> float:
        return raw / 1e6


def get_meter(name: str = "auto", device: str = "cpu") -> Meter:
    """The meter for ``device``: ``auto`` probes NVML (cuda) or RAPL (cpu), then none.

    An explicitly requested meter that cannot be read raises MeterUnavailableError.
    """
    if name not in METER_NAMES:
        raise MeterUnavailableError(
            f"unknown meter: expected one of {list(METER_NAMES)}, got {name!r}. "
            "Use --meter auto, nvml, rapl or none."
        )
    is_cuda = device.startswith("cuda")
    index = _nvml_index(int(device.split(":")[1]) if ":" in device else 0) if is_cuda else 0
    if name == "none":
        return NoMeter()
    if name == "nvml":
        if not is_cuda:
            raise MeterUnavailableError(
                f"NVML meter asked for device {device!r}: expected a cuda device, got a CPU. "
                "Use --meter rapl or none for CPU profiling."
            )
        return NVMLMeter(index)
    if name == "rapl":
        return RAPLMeter()
    # auto
    try:
        return NVMLMeter(index) if is_cuda else RAPLMeter()
    except MeterUnavailableError:
        return NoMeter()


def _nvml_index(cuda_index: int) -> int:
    """NVML's index of torch's ``cuda:N`` (they differ under CUDA_VISIBLE_DEVICES or when
    CUDA orders GPUs by speed): matched by PCI bus id, else assumed equal."""
    try:
        import pynvml
        import torch

        props = torch.cuda.get_device_properties(cuda_index)
        # the PCI fields exist on CUDA builds; torch's type stubs do not declare them
        domain, bus_id, dev = (
            getattr(props, name) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")
        )
        bus = f"{domain:08X}:{bus_id:02X}:{dev:02X}.0"
        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(bus)))
    except Exception:  # noqa: BLE001 - no torch CUDA, old torch or NVML: keep the index
        return cuda_index


@dataclass
class EnergyWindow:
    """One energy window: ``energy_j`` per call of the repeated callable."""

    energy_j: float
    window_s: float
    repeats: int


def measure_window(
    meter: Meter,
    fn: Callable[[], object],
    min_window_s: float = 1.0,
    max_window_s: float = 30.0,
) -> EnergyWindow:
    """Repeat ``fn`` until at least ``max(min_window_s, 10 x update period)`` has passed and the
    counter advanced; return energy per call. Raises MeasurementError when the counter does
    not advance within ``max_window_s``.
    """
    window = max(min_window_s, 10 * meter.update_period_s)
    e0 = meter.energy_j()
    t0 = time.perf_counter()
    n = 0
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= window:
            e1 = meter.energy_j()
            if e1 > e0:
                elapsed = time.perf_counter() - t0
                return EnergyWindow((e1 - e0) / n, elapsed, n)
            if elapsed >= max_window_s:
                raise MeasurementError(
                    f"{meter.name} energy counter did not advance: expected a change within "
                    f"{max_window_s:g} s, got the same reading {e0:.6f} J after {n} runs. The "
                    "counter may be frozen or unsupported; use --meter none."
                )


def observe_update_period_s(meter: Meter, duration_s: float = 1.0) -> float | None:
    """Median time between changes of the counter while polling it for ``duration_s``."""
    changes = []
    last = meter.energy_j()
    t_end = time.perf_counter() + duration_s
    while time.perf_counter() < t_end:
        e = meter.energy_j()
        if e != last:
            changes.append(time.perf_counter())
            last = e
        time.sleep(0.0005)
    if len(changes) < 3:
        return None
    gaps = sorted(b - a for a, b in zip(changes, changes[1:]))
    return gaps[len(gaps) // 2]


def measure_idle_power_w(meter: Meter, duration_s: float = 1.0) -> float | None:
    """Average power while sleeping ``duration_s`` (the baseline users can subtract)."""
    if isinstance(meter, NoMeter):
        return None
    e0, t0 = meter.energy_j(), time.perf_counter()
    time.sleep(max(duration_s, 10 * meter.update_period_s))
    e1, t1 = meter.energy_j(), time.perf_counter()
    return (e1 - e0) / (t1 - t0) if e1 > e0 else None
