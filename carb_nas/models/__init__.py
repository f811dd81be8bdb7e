"""Build the PyTorch ``nn.Module`` of a config: ResNets and the other built-in families.

``build_model(config)`` dispatches on the config's family (:func:`carb_nas.space.family_group`):
ResNet (``basic``, ``bottleneck``) and ResNeXt in ``_resnet``, VGG in ``_vgg``, DenseNet in
``_densenet``, MobileNetV2/V3 in ``_mobilenet``, EfficientNet in ``_efficientnet``, RegNet in
``_regnet``. Every family is written here (no torchvision, no weights); at width 1 and its
standard depth each is the torchvision model of the same name, parameter for parameter
(tested). How ``depth`` and ``width`` map onto each family: docs/spaces.md.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from carb_nas.models._densenet import build_densenet
from carb_nas.models._efficientnet import build_efficientnet
from carb_nas.models._layers import NUM_CLASSES, round_channels
from carb_nas.models._mobilenet import build_mobilenet_v2, build_mobilenet_v3
from carb_nas.models._regnet import build_regnet
from carb_nas.models._resnet import EXPANSION, build_resnet, stage_channels
from carb_nas.models._vgg import build_vgg
from carb_nas.space import Config, family_group

__all__ = [
    "build_model",
    "example_input",
    "stage_channels",
    "round_channels",
    "NUM_CLASSES",
    "EXPANSION",
    "TORCH_DTYPES",
]

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

_BUILDERS: dict[str, Callable[[Config], nn.Module]] = {
    "resnet": build_resnet,
    "resnext": build_resnet,
    "vgg": build_vgg,
    "densenet": build_densenet,
    "mobilenet_v2": build_mobilenet_v2,
    "mobilenet_v3": build_mobilenet_v3,
    "efficientnet": build_efficientnet,
    "regnet": build_regnet,
}


def build_model(config: Config, device: str | torch.device = "cpu") -> nn.Module:
    """The eval-mode module of ``config`` on ``device``, cast to its precision.

    ``int8`` configs build the fp32 module (quantization happens in the runtime).
    ``device="meta"`` builds it without allocating memory.
    """
    dtype = TORCH_DTYPES.get(config.precision, torch.float32)
    with torch.device(device):
        model = _BUILDERS[family_group(config.family)](config)
    return model.to(dtype=dtype).eval()


def example_input(config: Config, device: str | torch.device = "cpu") -> torch.Tensor:
    dtype = TORCH_DTYPES.get(config.precision, torch.float32)
    shape = (config.batch_size, 3, config.resolution, config.resolution)
    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)
