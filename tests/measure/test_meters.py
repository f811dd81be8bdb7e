"""Meters against honest fakes at the vendor boundary (pynvml module, powercap files)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from carb_nas.errors import MeasurementError, MeterUnavailableError
from carb_nas.measure._meters import NO_METER_REASON, measure_idle_power_w
from carb_nas.measure.meters import NoMeter, NVMLMeter, RAPLMeter, get_meter, measure_window
from tests.measure.fakes import FakeMeter, FakeNVML


@pytest.fixture
def fake_nvml(monkeypatch):
    def install(**kwargs) -> FakeNVML:
        mod = FakeNVML(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", mod)
        return mod

    return install


# -- NVML ---------------------------------------------------------------------------------------
def test_nvml_counter_difference_in_joules(fake_nvml):
    fake_nvml(energy_mj=[1000, 1000, 4500])
    m = NVMLMeter(0)
    assert m.name == "nvml-counter"
    e0 = m.energy_j()
    e1 = m.energy_j()
    assert e1 - e0 == pytest.approx(3.5)


def test_nvml_counter_wraparound(fake_nvml):
    top = 2**64
    fake_nvml(energy_mj=[0, top - 2000, 1000])
    m = NVMLMeter(0)
    e0 = m.energy_j()
    e1 = m.energy_j()
    assert e1 - e0 == pytest.approx(3.0)  # 2000 mJ to the wrap + 1000 mJ after it


def test_nvml_counter_not_advancing_is_an_error(fake_nvml):
    fake_nvml(energy_mj=[5000])
    m = NVMLMeter(0)
    with pytest.raises(MeasurementError, match="did not advance"):
        measure_window(m, lambda: None, min_window_s=0.01, max_window_s=0.05)


def test_nvml_window_divides_by_repeats(fake_nvml):
    fake = fake_nvml(energy_mj=[0, 0, 10_000])  # init probe, e0, e1
    m = NVMLMeter(0)
    m.update_period_s = 0.001
    calls = []
    w = measure_window(m, lambda: calls.append(1), min_window_s=0.02)
    assert w.repeats == len(calls) >= 1
    assert w.energy_j == pytest.approx(10.0 / w.repeats)
    assert w.window_s >= 0.02
    assert fake.reads == 3


def test_nvml_library_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.raises(MeterUnavailableError, match="nvidia-ml-py"):
        NVMLMeter(0)


@pytest.mark.parametrize(
    ("error", "remedy"),
    [
        ("NoPermission", "permission"),
        ("LibraryNotFound", "driver"),
        ("DriverNotLoaded", "nvidia-smi"),
    ],
)
def test_nvml_init_errors_are_typed_with_a_remedy(fake_nvml, error, remedy):
    fake_nvml(energy_mj=[0], init_error=error)
    with pytest.raises(MeterUnavailableError, match=f"NVMLError_{error}") as info:
        NVMLMeter(0)
    assert remedy in str(info.value).lower()
    assert "--meter none" in str(info.value) or "nvidia-smi" in str(info.value)


def test_nvml_bad_index(fake_nvml):
    fake_nvml(energy_mj=[0], count=1)
    with pytest.raises(MeterUnavailableError, match=r"index in \[0, 1\)"):
        NVMLMeter(3)


def test_nvml_gpu_without_counter_integrates_power(fake_nvml):
    fake_nvml(energy_mj="NotSupported", power_mw=200_000.0)  # 200 W
    m = NVMLMeter(0, poll_interval_s=0.002)
    try:
        assert m.name == "nvml-power"
        w = measure_window(m, lambda: None, min_window_s=0.1)
        power = w.energy_j * w.repeats / w.window_s
        assert power == pytest.approx(200.0, rel=0.1)
    finally:
        m.close()


def test_get_meter_auto_falls_back_to_none_without_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert isinstance(get_meter("auto", "cuda:0"), NoMeter)
    with pytest.raises(MeterUnavailableError):
        get_meter("nvml", "cuda:0")


def test_get_meter_rejects_nvml_for_cpu_and_unknown_names():
    with pytest.raises(MeterUnavailableError, match="cuda device"):
        get_meter("nvml", "cpu")
    with pytest.raises(MeterUnavailableError, match="unknown meter"):
        get_meter("joulemeter", "cpu")


# -- RAPL ---------------------------------------------------------------------------------------
def _zone(root: Path, name: str, energy: int, max_range: int) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "energy_uj").write_text(f"{energy}\n")
    (z / "max_energy_range_uj").write_text(f"{max_range}\n")
    (z / "name").write_text("package-0\n")
    return z


def test_rapl_sums_packages_and_ignores_subzones(tmp_path):
    z0 = _zone(tmp_path, "intel-rapl:0", 1_000_000, 10**9)
    z1 = _zone(tmp_path, "intel-rapl:1", 2_000_000, 10**9)
    _zone(tmp_path, "intel-rapl:0:0", 5, 10**9)  # core subzone, part of package 0
    m = RAPLMeter(tmp_path)
    e0 = m.energy_j()
    (z0 / "energy_uj").write_text("1500000\n")
    (z1 / "energy_uj").write_text("2250000\n")
    assert m.energy_j() - e0 == pytest.approx(0.75)


def test_rapl_wraparound_at_max_energy_range(tmp_path):
    z = _zone(tmp_path, "intel-rapl:0", 999_000, 1_000_000)
    m = RAPLMeter(tmp_path)
    e0 = m.energy_j()
    (z / "energy_uj").write_text("500\n")  # wrapped: 1000 to the top + 500
    assert m.energy_j() - e0 == pytest.approx(1500e-6)


def test_rapl_permission_denied(tmp_path, monkeypatch):
    _zone(tmp_path, "intel-rapl:0", 1, 10)
    real = Path.read_text

    def deny(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", deny)
    with pytest.raises(MeterUnavailableError, match="permission denied") as info:
        RAPLMeter(tmp_path)
    assert "chmod" in str(info.value)


def test_rapl_missing_powercap(tmp_path):
    with pytest.raises(MeterUnavailableError, match="no powercap RAPL"):
        RAPLMeter(tmp_path)


@pytest.mark.skipif(os.path.isdir("/sys/class/powercap/intel-rapl:0"), reason="RAPL present")
def test_rapl_asked_for_on_this_machine_is_a_clear_error():
    with pytest.raises(MeterUnavailableError, match="--meter none"):
        get_meter("rapl", "cpu")


# -- none and fakes -----------------------------------------------------------------------------
def test_no_meter_has_no_energy_and_no_idle_power():
    m = NoMeter()
    assert m.name == "none"
    with pytest.raises(MeasurementError, match="meter=none"):
        m.energy_j()
    assert measure_idle_power_w(m) is None
    assert NO_METER_REASON.startswith("meter=none")


def test_fake_meter_is_labelled_fake():
    m = FakeMeter()
    assert m.name.startswith("fake-")
    assert measure_window(m, lambda: None, min_window_s=0.0).energy_j > 0


def test_clock_locking_is_opt_in_and_reset_on_close(fake_nvml):
    fake = fake_nvml(energy_mj=[0, 10])
    m = NVMLMeter(0)
    assert not hasattr(fake, "locked")  # nothing touched by default
    m.lock_clocks(1400)
    assert fake.locked == (1400, 1400)
    m.close()
    assert fake.locked is None
