"""DenseNet-BC (Huang et al. 2017), torchvision's layout: a 7x7/2 conv + BN + ReLU + 3x3/2 max
pool stem of ``2 x growth`` channels, dense blocks of BN-ReLU-1x1 (4 x growth)-BN-ReLU-3x3
(growth) layers whose outputs are concatenated, transitions (BN-ReLU-1x1 halving the
channels, 2x2 average pool), a final BN + ReLU, global pooling and a linear classifier.
``growth = round(32 x width)``: DenseNet-161 is depth 161 at width 1.5 (growth 48).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from carb_nas.models._layers import NUM_CLASSES
from carb_nas.space import Config, stage_layout

_BN_SIZE = 4


class _DenseLayer(nn.Module):
    def __init__(self, c_in: int, growth: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(c_in)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(c_in, _BN_SIZE * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(_BN_SIZE * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(_BN_SIZE * growth, growth, 3, 1, 1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        x = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(x)))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, n_layers: int, c_in: int, growth: int) -> None:
        super().__init__()
        for i in range(n_layers):
            self.add_module(f"denselayer{i + 1}", _DenseLayer(c_in + i * growth, growth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            nn.BatchNorm2d(c_in),
            nn.ReLU(inplace=True),
            nn.Conv2d(c_in, c_out, 1, bias=False),
            nn.AvgPool2d(2, 2),
        )


class DenseNet(nn.Module):
    def __init__(self, layout: tuple[int, ...], width: float) -> None:
        super().__init__()
        growth = max(1, round(32 * width))
        c = 2 * growth
        layers: list[nn.Module] = [
            nn.Conv2d(3, c, 7, 2, 3, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        ]
        for i, n_layers in enumerate(layout):
            layers.append(_DenseBlock(n_layers, c, growth))
            c += n_layers * growth
            if i != len(layout) - 1:
                layers.append(_Transition(c, c // 2))
                c //= 2
        layers.append(nn.BatchNorm2d(c))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.features(x), inplace=True)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


def build_densenet(config: Config) -> nn.Module:
    return DenseNet(stage_layout(config.family, config.depth), config.width)
