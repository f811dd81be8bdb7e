"""EfficientNet (Tan & Le 2019), torchvision's B0 layout: a 3x3/2 stem, seven stages of MBConv
blocks (1x1 expand, depthwise kxk, squeeze-excitation of ``c_in // 4`` channels with SiLU,
1x1 project; a residual add when the shape is kept), a 1x1 head of 4 x the last stage's
channels, global pooling and a linear classifier; SiLU throughout.

Width multiplies channels (rounded to multiples of 8); depth counts blocks, spread over the
stages as :func:`carb_nas.space.stage_layout` says (B1..B7's depth multipliers at their
depths 23, 26, 32, 39, 45, 55). Stochastic depth is an identity at inference and left out.
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

# (expansion, kernel, stride, out channels) per stage; stage 0 takes the 32-channel stem
_STAGES = ((1, 3, 1, 16), (6, 3, 2, 24), (6, 5, 2, 40), (6, 3, 2, 80), (6, 5, 1, 112),
           (6, 5, 2, 192), (6, 3, 1, 320))  # fmt: skip


class MBConv(nn.Module):
    def __init__(self, c_in: int, c_out: int, expansion: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.use_residual = stride == 1 and c_in == c_out
        expanded = round_channels(c_in * expansion)
        silu = inplace(nn.SiLU)
        layers: list[nn.Module] = []
        if expanded != c_in:
            layers.append(ConvNormAct(c_in, expanded, 1, act=silu))
        layers += [
            ConvNormAct(expanded, expanded, kernel, stride, groups=expanded, act=silu),
            SqueezeExcitation(expanded, max(1, c_in // 4), act=silu),
            ConvNormAct(expanded, c_out, 1, act=None),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        if self.use_residual:
            out += x
        return out


class EfficientNet(nn.Module):
    def __init__(self, layout: tuple[int, ...], width: float) -> None:
        super().__init__()
        silu = inplace(nn.SiLU)
        c_in = round_channels(32 * width)
        layers: list[nn.Module] = [ConvNormAct(3, c_in, 3, 2, act=silu)]
        for (t, k, s, c), n in zip(_STAGES, layout):
            c_out = round_channels(c * width)
            stage = []
            for i in range(n):
                stage.append(MBConv(c_in, c_out, t, k, s if i == 0 else 1))
                c_in = c_out
            layers.append(nn.Sequential(*stage))
        head = 4 * c_in
        layers.append(ConvNormAct(c_in, head, 1, act=silu))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(head, NUM_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build_efficientnet(config: Config) -> nn.Module:
    return EfficientNet(stage_layout(config.family, config.depth), config.width)
