"""User factories for the --model-spec tests (imported by name, as a user's package would be)."""

from __future__ import annotations

import torch
from torch import nn


def make_cnn(channels: int = 16, layers: int = 2, depthwise: bool = False) -> nn.Module:
    mods: list[nn.Module] = [nn.Conv2d(3, channels, 3, padding=1), nn.ReLU()]
    for _ in range(layers):
        groups = channels if depthwise else 1
        mods += [nn.Conv2d(channels, channels, 3, padding=1, groups=groups), nn.ReLU()]
    return nn.Sequential(*mods, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))


def broken(**kwargs) -> nn.Module:
    raise ValueError("channels must be even")


def not_a_module() -> int:
    return 3


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if y.sum() > 0:  # data-dependent control flow: no meta-device trace
            return y * 2
        return y


def data_dependent() -> nn.Module:
    return DataDependent()


@torch.library.custom_op("carb_nas_tests::scale", mutates_args=())
def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


class CustomOp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _scale(x)


def custom_op() -> nn.Module:
    return CustomOp()


def flat_linear() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))


class SqueezeExcite(nn.Module):
    """A user squeeze-and-excitation block (mean, two 1x1 convs, sigmoid gate)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))


def needs_real_tensors(channels: int = 8) -> nn.Module:
    """Builds only on a real device: it reads a value out of a tensor while constructing."""
    scale = torch.ones(1).item()  # meta tensors hold no data
    return make_cnn(int(channels * scale))
