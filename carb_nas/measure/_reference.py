"""The machine-speed probe: one fixed workload timed in short bursts among a config's runs.

Why: on the shared VMs this project measures on, a core runs convolution code 10-25 % slower
for seconds at a time while the process keeps its core (``cpu_per_wall`` about 1.0, no steal
in ``/proc/stat``), so two fresh-process measurements of one config disagree by more than any
cost model can learn. Measured (2026-12-02, AMD EPYC Zen 5, 2 vCPUs, the other core idle):
the per-second medians of MobileNetV2 and ResNet-26 runs had a log sd of 0.110 and 0.074; this
probe, timed between them, moved with them (correlation 0.95), so the ratios had 0.034 and
0.042. A 512 x 512 matmul moved far less (0.030), so the slow phases are not a clock change
that every kind of code feels the same way; a convolution probe follows convolution networks.

A row's ``reference_ms`` (the probe's median over the row's timing window) lets a dataset
divide the machine's momentary speed out: :func:`carb_nas.datasets.reference_normalized`.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from carb_nas.errors import ConfigError

__all__ = ["REFERENCE_WORKLOAD", "ReferenceProbe"]

#: what ``reference_ms`` times (recorded in the fingerprint of every campaign that uses it)
REFERENCE_WORKLOAD = "torch conv2d 64->64 3x3 pad 1 on 1x64x28x28 fp32, eval, inference_mode"


class ReferenceProbe:
    """Times :data:`REFERENCE_WORKLOAD` in bursts of ``burst`` runs, one burst at the start
    of a timing window, then one whenever ``every_s`` of the window has passed since the
    last, and one at its end (:func:`carb_nas.measure.time_runs` calls it). Bursts rather
    than one probe run after every timed run: the probe's ~0.55 MB (0.15 MB of weights, 0.2 MB
    each of input and output) would evict part of a
    small network's working set before each of its runs; a burst every 0.1 s colds at most
    one run in ten or more, which the median ignores."""

    def __init__(self, burst: int = 3, every_s: float = 0.1) -> None:
        if not (isinstance(burst, int) and burst >= 1 and every_s > 0):
            raise ConfigError(
                f"invalid speed probe: expected burst >= 1 (runs per burst) and every_s > 0 "
                f"(seconds between bursts), got burst={burst!r}, every_s={every_s!r}. Use the "
                "defaults (3, 0.1)."
            )
        self.burst, self.every_s = burst, every_s
        g = torch.Generator().manual_seed(0)
        self._conv = nn.Conv2d(64, 64, 3, padding=1).eval()
        with torch.no_grad():
            self._conv.weight.copy_(torch.randn(self._conv.weight.shape, generator=g) * 0.05)
        self._x = torch.randn((1, 64, 28, 28), generator=g)
        self.samples_s: list[float] = []
        for _ in range(2):  # oneDNN picks and JITs its kernel on the first call
            self._once()

    def _once(self) -> float:
        return self.time_call(self._conv, self._x)

    @staticmethod
    def time_call(module: nn.Module, x: torch.Tensor) -> float:
        """Seconds of one ``module(x)`` under ``inference_mode`` (the probe's own timing)."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            module(x)
        return time.perf_counter() - t0

    def run_burst(self) -> None:
        """Time one burst; its runs join :attr:`samples_s`."""
        self.samples_s.extend(self._once() for _ in range(self.burst))

    def start(self) -> None:
        """Forget earlier windows' samples (one probe serves many configs)."""
        self.samples_s = []
