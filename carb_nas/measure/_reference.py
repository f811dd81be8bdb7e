"""The machine-speed probe: one fixed workload timed in short bursts among a config's runs.

Why: on a shared virtual machine a core can run convolution code slower for seconds at a time
while the process keeps its core (``cpu_per_wall`` about 1.0, no steal in ``/proc/stat``), so
two fresh-process measurements of one config disagree by more than any cost model can learn.
A convolution probe timed between a network's runs moves with them, where a matmul does not:
the slow phases are not a clock change that every kind of code feels the same way (the
measurements: docs/measurement.md, "How well the machine repeats itself").

A row's ``reference_ms`` (the probe's median over the row's timing window) lets a dataset
divide the machine's momentary speed out: :func:`carb_nas.datasets.reference_normalized`.

On a GPU that CPU conv says nothing (its readings between CUDA runs are uncorrelated with the
latency's drift), while eager CNNs there are launch-bound (host dispatch per op).
``workload="launch"`` times :data:`LAUNCH_WORKLOAD` instead,
a chain of tiny kernels on the row's device, synchronized: the host's dispatch speed, which
launch-bound latency follows. Opt-in (``Profiler(reference_probe=True)`` on a CUDA device)
until a GPU measurement shows it tracks the latency's drift.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from carb_nas.errors import ConfigError

__all__ = ["LAUNCH_WORKLOAD", "REFERENCE_WORKLOAD", "ReferenceProbe"]

#: what ``reference_ms`` times (recorded in the fingerprint of every campaign that uses it)
REFERENCE_WORKLOAD = "torch conv2d 64->64 3x3 pad 1 on 1x64x28x28 fp32, eval, inference_mode"
#: what ``reference_ms`` times with ``workload="launch"`` (a CUDA row's opt-in probe)
LAUNCH_WORKLOAD = (
    "torch 16 x (conv2d 8->8 3x3 pad 1, relu) on 1x8x8x8 fp32 on the row's device, eval, "
    "inference_mode, synchronized before and after"
)
LAUNCH_LAYERS = 16


class ReferenceProbe:
    """Times :data:`REFERENCE_WORKLOAD` in bursts of ``burst`` runs, one burst at the start
    of a timing window, then one whenever ``every_s`` of the window has passed since the
    last, and one at its end (:func:`carb_nas.measure.time_runs` calls it). Bursts rather
    than one probe run after every timed run: the probe's working set (weights, input and
    output) would evict part of a small network's before each of its runs; a burst every
    ``every_s`` colds at most a few runs, which the median ignores."""

    def __init__(
        self,
        burst: int = 3,
        every_s: float = 0.1,
        workload: str = "conv",
        device: str | torch.device = "cpu",
    ) -> None:
        if not (isinstance(burst, int) and burst >= 1 and every_s > 0):
            raise ConfigError(
                f"invalid speed probe: expected burst >= 1 (runs per burst) and every_s > 0 "
                f"(seconds between bursts), got burst={burst!r}, every_s={every_s!r}. Use the "
                "defaults (3, 0.1)."
            )
        if workload not in ("conv", "launch"):
            raise ConfigError(
                f"invalid speed probe workload: expected 'conv' (CPU rows) or 'launch' (a "
                f"GPU's dispatch), got {workload!r}. Use the default 'conv'."
            )
        self.burst, self.every_s = burst, every_s
        self.workload = REFERENCE_WORKLOAD if workload == "conv" else LAUNCH_WORKLOAD
        self._device = torch.device(device)
        g = torch.Generator().manual_seed(0)
        if workload == "conv":
            self._module: nn.Module = nn.Conv2d(64, 64, 3, padding=1).eval()
            shape: tuple[int, ...] = (1, 64, 28, 28)
        else:
            layers = [(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()) for _ in range(LAUNCH_LAYERS)]
            self._module = nn.Sequential(*[m for pair in layers for m in pair]).eval()
            shape = (1, 8, 8, 8)
        with torch.no_grad():
            for conv in self._module.modules():
                if isinstance(conv, nn.Conv2d):
                    conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * 0.05)
        self._module.to(self._device)
        self._x = torch.randn(shape, generator=g).to(self._device)
        self.samples_s: list[float] = []
        for _ in range(2):  # oneDNN (cuDNN) picks and JITs its kernel on the first call
            self._once()

    def _once(self) -> float:
        if self._device.type != "cuda":
            return self.time_call(self._module, self._x)
        torch.cuda.synchronize(self._device)  # time this chain alone, not queued work
        t0 = time.perf_counter()
        with torch.inference_mode():
            self._module(self._x)
        torch.cuda.synchronize(self._device)
        return time.perf_counter() - t0

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
