"""ResNets and ResNeXts (torchvision-compatible).

Layout: a 7x7/2 stem conv + BN + ReLU + 3x3/2 max-pool, then stages of basic or bottleneck
blocks (stride 2 at the first block of every stage but the first; bottlenecks stride in the
3x3 conv as torchvision's v1.5), global average pooling and a 1000-way linear classifier.
At width 1.0 and the standard depths this is exactly torchvision's resnet18/34/50/101/152.

Width rounding: every stage's base channels ``64 * 2**i * width`` are rounded to the nearest
multiple of 8, never below 8 and never more than 10% below the exact value (the
``make_divisible`` rule of MobileNet); the stem uses stage 0's channels.

ResNeXt (Xie et al. 2017) is the bottleneck ResNet with a grouped 3x3 conv of
``int(planes * group_width / 64) * groups`` channels: ``resnext32x4d`` at depth 50 is
torchvision's resnext50_32x4d.
"""

from __future__ import annotations

import torch
from torch import nn

from carb_nas.models._layers import NUM_CLASSES, round_channels
from carb_nas.space import Config, stage_layout

EXPANSION = {"basic": 1, "bottleneck": 4}
# ResNeXt: cardinality (groups) and width per group
RESNEXT = {"resnext32x4d": (32, 4), "resnext32x8d": (32, 8), "resnext64x4d": (64, 4)}


def stage_channels(width: float, n_stages: int) -> list[int]:
    """Base (pre-expansion) channels of each stage for a width multiplier."""
    return [round_channels(64 * 2**i * width) for i in range(n_stages)]


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(inplanes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int, groups: int = 1, group_width: int = 64
    ) -> None:
        super().__init__()
        out_ch = planes * self.expansion
        inner = int(planes * (group_width / 64.0)) * groups
        self.conv1 = nn.Conv2d(inplanes, inner, 1, 1, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(inner)
        self.conv2 = nn.Conv2d(inner, inner, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(inner)
        self.conv3 = nn.Conv2d(inner, out_ch, 1, 1, 0, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(inplanes, out_ch, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


def _downsample(inplanes: int, out_ch: int, stride: int) -> nn.Module | None:
    if stride == 1 and inplanes == out_ch:
        return None
    return nn.Sequential(
        nn.Conv2d(inplanes, out_ch, 1, stride, 0, bias=False), nn.BatchNorm2d(out_ch)
    )


class ResNet(nn.Module):
    def __init__(self, family: str, layout: tuple[int, ...], width: float) -> None:
        super().__init__()
        block = BasicBlock if family == "basic" else Bottleneck
        extra = {}
        if family in RESNEXT:
            groups, group_width = RESNEXT[family]
            extra = {"groups": groups, "group_width": group_width}
        chans = stage_channels(width, len(layout))
        self.conv1 = nn.Conv2d(3, chans[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(chans[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = chans[0]
        stages = []
        for i, (n_blocks, planes) in enumerate(zip(layout, chans)):
            blocks = []
            for b in range(n_blocks):
                stride = 2 if (i > 0 and b == 0) else 1
                blocks.append(block(inplanes, planes, stride, **extra))
                inplanes = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.stages(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_resnet(config: Config) -> nn.Module:
    return ResNet(config.family, stage_layout(config.family, config.depth), config.width)
