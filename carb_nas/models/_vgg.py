"""VGG (Simonyan & Zisserman 2015), with or without batch norm, torchvision's layout: 3x3
convs (with bias) in five stages of 64, 128, 256, 512, 512 channels x width, each followed by
a 2x2 max pool; a 7x7 adaptive average pool; a 4096-4096-1000 classifier (hidden size x width).
"""

from __future__ import annotations

import torch
from torch import nn

from carb_nas.models._layers import NUM_CLASSES, round_channels
from carb_nas.space import Config, stage_layout

_STAGE_CHANNELS = (64, 128, 256, 512, 512)


class VGG(nn.Module):
    def __init__(self, layout: tuple[int, ...], width: float, batch_norm: bool) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for n_convs, base in zip(layout, _STAGE_CHANNELS):
            c_out = round_channels(base * width)
            for _ in range(n_convs):
                layers.append(nn.Conv2d(c_in, c_out, 3, padding=1))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(c_out))
                layers.append(nn.ReLU(inplace=True))
                c_in = c_out
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        hidden = round_channels(4096 * width)
        self.classifier = nn.Sequential(
            nn.Linear(c_in * 7 * 7, hidden),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(hidden, hidden),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(hidden, NUM_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def build_vgg(config: Config) -> nn.Module:
    layout = stage_layout(config.family, config.depth)
    return VGG(layout, config.width, batch_norm=config.family == "vgg_bn")
