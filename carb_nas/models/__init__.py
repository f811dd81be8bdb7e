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
from carb_nas.models._spec import (
    TORCH_DTYPES,
    ModelSpec,
    load_factory,
    parse_input_shape,
    parse_kwargs,
)
from carb_nas.models._vgg import build_vgg
from carb_nas.space import Config, family_group

__all__ = [
    "build_model",
    "meta_model",
    "META_MODELS_KEPT",
    "example_input",
    "ModelSpec",
    "load_factory",
    "parse_input_shape",
    "parse_kwargs",
    "stage_channels",
    "round_channels",
    "NUM_CLASSES",
    "EXPANSION",
    "TORCH_DTYPES",
]


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


#: networks :func:`meta_model` keeps (meta modules: no tensor storage, the layers' objects only)
META_MODELS_KEPT = 256
_META_MODELS: dict[tuple, nn.Module] = {}  # network -> its meta module, oldest first


def meta_model(config: Config) -> nn.Module:
    """``build_model(config, "meta")``, built once per network and kept for the next: a
    config's batch size is only its input's, and building costs more than tracing (21 of a
    MobileNetV2 config's 38 ms; a space's batch sizes share one build). The module is shared:
    trace it, do not change it."""
    key = (config.family, config.depth, config.width, config.resolution, config.precision)
    model = _META_MODELS.pop(key, None)
    if model is None:
        model = build_model(config, "meta")
    _META_MODELS[key] = model  # the most recent last
    while len(_META_MODELS) > META_MODELS_KEPT:
        _META_MODELS.pop(next(iter(_META_MODELS)))
    return model


def example_input(config: Config, device: str | torch.device = "cpu") -> torch.Tensor:
    dtype = TORCH_DTYPES.get(config.precision, torch.float32)
    shape = (config.batch_size, 3, config.resolution, config.resolution)
    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)
