"""MobileNetV2 (Sandler et al. 2018) and MobileNetV3 Large/Small (Howard et al. 2019), in
torchvision's layout: inverted residual blocks (1x1 expand, depthwise kxk, 1x1 project; a
residual add when the shape is kept), V3 with squeeze-excitation (hard-sigmoid gate) and
hard-swish. Channels x width rounded to multiples of 8 (``round_channels``).

Depth counts blocks: a stage of n blocks keeps its first n published blocks and repeats its
last one beyond them.
"""

from __future__ import annotations

import torch
from torch import nn

from carb_nas.models._layers import (
    NUM_CLASSES,
    ConvNormAct,
    SqueezeExcitation,
    inplace,
    round_channels,
)
from carb_nas.space import Config, stage_layout

# MobileNetV2: (expansion t, channels c, stride s) per stage; blocks per stage from the depth
_V2_STAGES = ((1, 16, 1), (6, 24, 2), (6, 32, 2), (6, 64, 2), (6, 96, 1), (6, 160, 2), (6, 320, 1))

# MobileNetV3: per stage, its published blocks as (kernel, expanded, out, SE, hard-swish, stride)
_V3_LARGE = (
    ((3, 16, 16, False, False, 1),),
    ((3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1)),
    ((5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1)),
    (
        (3, 240, 80, False, True, 2),
        (3, 200, 80, False, True, 1),
        (3, 184, 80, False, True, 1),
        (3, 184, 80, False, True, 1),
    ),
    ((3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1)),
    ((5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1)),
)
_V3_SMALL = (
    ((3, 16, 16, True, False, 2),),
    ((3, 72, 24, False, False, 2), (3, 88, 24, False, False, 1)),
    ((5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1)),
    ((5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1)),
    ((5, 288, 96, True, True, 2), (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1)),
)
_V3 = {"mobilenet_v3_large": (_V3_LARGE, 1280), "mobilenet_v3_small": (_V3_SMALL, 1024)}


class InvertedResidualV2(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = int(round(c_in * expansion))
        self.use_residual = stride == 1 and c_in == c_out
        relu6 = inplace(nn.ReLU6)
        layers: list[nn.Module] = []
        if expansion != 1:
            layers.append(ConvNormAct(c_in, hidden, 1, act=relu6))
        layers += [
            ConvNormAct(hidden, hidden, 3, stride, groups=hidden, act=relu6),
            nn.Conv2d(hidden, c_out, 1, bias=False),
            nn.BatchNorm2d(c_out),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, layout: tuple[int, ...], width: float) -> None:
        super().__init__()
        c_in = round_channels(32 * width)
        last = round_channels(1280 * max(1.0, width))
        relu6 = inplace(nn.ReLU6)
        layers: list[nn.Module] = [ConvNormAct(3, c_in, 3, 2, act=relu6)]
        for (t, c, s), n in zip(_V2_STAGES, layout):
            c_out = round_channels(c * width)
            for i in range(n):
                layers.append(InvertedResidualV2(c_in, c_out, s if i == 0 else 1, t))
                c_in = c_out
        layers.append(ConvNormAct(c_in, last, 1, act=relu6))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, NUM_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class InvertedResidualV3(nn.Module):
    def __init__(
        self, c_in: int, kernel: int, expanded: int, c_out: int, se: bool, hs: bool, stride: int
    ) -> None:
        super().__init__()
        self.use_residual = stride == 1 and c_in == c_out
        act = inplace(nn.Hardswish) if hs else inplace(nn.ReLU)
        layers: list[nn.Module] = []
        if expanded != c_in:
            layers.append(ConvNormAct(c_in, expanded, 1, act=act, bn_eps=1e-3))
        layers.append(
            ConvNormAct(expanded, expanded, kernel, stride, groups=expanded, act=act, bn_eps=1e-3)
        )
        if se:
            squeeze = round_channels(expanded // 4)
            layers.append(SqueezeExcitation(expanded, squeeze, gate=nn.Hardsigmoid))
        layers.append(ConvNormAct(expanded, c_out, 1, act=None, bn_eps=1e-3))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_residual else self.block(x)


class MobileNetV3(nn.Module):
    def __init__(self, family: str, layout: tuple[int, ...], width: float) -> None:
        super().__init__()
        stages, last = _V3[family]
        c_in = round_channels(16 * width)
        hswish = inplace(nn.Hardswish)
        layers: list[nn.Module] = [ConvNormAct(3, c_in, 3, 2, act=hswish, bn_eps=1e-3)]
        for blocks, n in zip(stages, layout):
            chosen = list(blocks[:n]) + [blocks[-1]] * (n - len(blocks))
            for i, (k, exp, out, se, hs, stride) in enumerate(chosen):
                c_out = round_channels(out * width)
                expanded = round_channels(exp * width)
                layers.append(
                    InvertedResidualV3(c_in, k, expanded, c_out, se, hs, stride if i == 0 else 1)
                )
                c_in = c_out
        head = 6 * c_in
        layers.append(ConvNormAct(c_in, head, 1, act=hswish, bn_eps=1e-3))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last_channel = round_channels(last * width)
        self.classifier = nn.Sequential(
            nn.Linear(head, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(0.2, inplace=True),
            nn.Linear(last_channel, NUM_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build_mobilenet_v2(config: Config) -> nn.Module:
    return MobileNetV2(stage_layout(config.family, config.depth), config.width)


def build_mobilenet_v3(config: Config) -> nn.Module:
    return MobileNetV3(config.family, stage_layout(config.family, config.depth), config.width)
