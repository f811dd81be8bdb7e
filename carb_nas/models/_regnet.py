"""RegNetX / RegNetY (Radosavovic et al. 2020), torchvision's layout: a 3x3/2 stem of 32 x
width channels, stages of residual bottleneck blocks (1x1, grouped 3x3 with stride at a
stage's first block, [squeeze-excitation of ``round(0.25 x c_in)`` channels for Y], 1x1; a
1x1/stride projection when the shape changes; ReLU after the add), global pooling and a
linear classifier. Widths come from the variant's generator
(:func:`carb_nas.space.regnet_block_widths`), then the group-width adjustment below.
"""

from __future__ import annotations

import torch
from torch import nn

from carb_nas.models._layers import NUM_CLASSES, ConvNormAct, SqueezeExcitation, round_channels
from carb_nas.space import REGNET_PARAMS, Config, regnet_block_widths


def regnet_stages(family: str, depth: int, width: float) -> list[tuple[int, int, int]]:
    """``(stage width, blocks, group width)`` per stage (bottleneck multiplier 1)."""
    widths = regnet_block_widths(family, depth, width)
    group_width = REGNET_PARAMS[family][3]
    stages: list[list[int]] = []
    for w in widths:
        if stages and stages[-1][0] == w:
            stages[-1][1] += 1
        else:
            stages.append([w, 1])
    out = []
    for w, n in stages:
        g = min(group_width, w)
        out.append((round_channels(w, g), n, g))
    return out


class _Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, group_width: int, se: float) -> None:
        super().__init__()
        self.proj = None
        if c_in != c_out or stride != 1:
            self.proj = ConvNormAct(c_in, c_out, 1, stride, act=None)
        layers: list[nn.Module] = [
            ConvNormAct(c_in, c_out, 1),
            ConvNormAct(c_out, c_out, 3, stride, groups=c_out // group_width),
        ]
        if se:
            layers.append(SqueezeExcitation(c_out, int(round(se * c_in))))
        layers.append(ConvNormAct(c_out, c_out, 1, act=None))
        self.f = nn.Sequential(*layers)
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.proj is None else self.proj(x)
        return self.activation(shortcut + self.f(x))


class RegNet(nn.Module):
    def __init__(self, family: str, depth: int, width: float) -> None:
        super().__init__()
        se = REGNET_PARAMS[family][4]
        c_in = round_channels(32 * width)
        self.stem = ConvNormAct(3, c_in, 3, 2)
        stages = []
        for w, n, g in regnet_stages(family, depth, width):
            blocks = []
            for i in range(n):
                blocks.append(_Block(c_in, w, 2 if i == 0 else 1, g, se))
                c_in = w
            stages.append(nn.Sequential(*blocks))
        self.trunk_output = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.trunk_output(self.stem(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_regnet(config: Config) -> nn.Module:
    return RegNet(config.family, config.depth, config.width)
