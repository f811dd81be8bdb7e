"""Building blocks the families share: channel rounding, conv + norm + activation, squeeze and
excitation (the layouts of torchvision's ``Conv2dNormActivation`` and ``SqueezeExcitation``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

NUM_CLASSES = 1000


def round_channels(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """``value`` rounded to the nearest multiple of ``divisor``, at least ``min_value``
    (default ``divisor``), never more than 10 % below ``value`` (MobileNet's
    ``make_divisible``)."""
    floor = divisor if min_value is None else min_value
    rounded = max(floor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvNormAct(nn.Sequential):
    """Conv (no bias) + BN + optional activation, padding ``(k - 1) // 2``."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel: int = 3,
        stride: int = 1,
        groups: int = 1,
        act: Callable[[], nn.Module] | None = nn.ReLU,
        bn_eps: float = 1e-5,
    ) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(c_in, c_out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(c_out, eps=bn_eps),
        ]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


def inplace(act: type[nn.Module]) -> Callable[[], nn.Module]:
    return lambda: act(inplace=True)


class SqueezeExcitation(nn.Module):
    """Global average pool, 1x1 conv down, activation, 1x1 conv up, gate, scale."""

    def __init__(
        self,
        channels: int,
        squeeze: int,
        act: Callable[[], nn.Module] = nn.ReLU,
        gate: Callable[[], nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = act()
        self.scale_activation = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x
