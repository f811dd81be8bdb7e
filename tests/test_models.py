"""The built-in families: torchvision's parameter counts at their defaults, every family
builds and runs at other widths and depths, and the depth rules."""

from __future__ import annotations

import pytest
import torch

from carb_nas.errors import ConfigError
from carb_nas.models import build_model, example_input
from carb_nas.space import FAMILIES, ZOO_FAMILIES, Config, stage_layout

# torchvision's published parameter counts (family, depth, width): params
TORCHVISION_PARAMS = {
    ("mobilenet_v2", 17, 1.0): 3_504_872,
    ("mobilenet_v3_large", 15, 1.0): 5_483_032,
    ("mobilenet_v3_small", 11, 1.0): 2_542_856,
    ("efficientnet", 16, 1.0): 5_288_548,  # B0
    ("efficientnet", 23, 1.0): 7_794_184,  # B1
    ("efficientnet", 23, 1.1): 9_109_994,  # B2
    ("efficientnet", 26, 1.2): 12_233_232,  # B3
    ("efficientnet", 32, 1.4): 19_341_616,  # B4
    ("vgg", 11, 1.0): 132_863_336,
    ("vgg", 13, 1.0): 133_047_848,
    ("vgg", 16, 1.0): 138_357_544,
    ("vgg", 19, 1.0): 143_667_240,
    ("vgg_bn", 11, 1.0): 132_868_840,
    ("vgg_bn", 16, 1.0): 138_365_992,
    ("vgg_bn", 19, 1.0): 143_678_248,
    ("densenet", 121, 1.0): 7_978_856,
    ("densenet", 169, 1.0): 14_149_480,
    ("densenet", 201, 1.0): 20_013_928,
    ("densenet", 161, 1.5): 28_681_000,
    ("resnext32x4d", 50, 1.0): 25_028_904,
    ("resnext32x8d", 101, 1.0): 88_791_336,
    ("resnext64x4d", 101, 1.0): 83_455_272,
    ("regnet_x_400mf", 22, 1.0): 5_495_976,
    ("regnet_x_800mf", 16, 1.0): 7_259_656,
    ("regnet_x_1_6gf", 18, 1.0): 9_190_136,
    ("regnet_x_3_2gf", 25, 1.0): 15_296_552,
    ("regnet_y_400mf", 16, 1.0): 4_344_144,
    ("regnet_y_800mf", 14, 1.0): 6_432_512,
    ("regnet_y_1_6gf", 27, 1.0): 11_202_430,
    ("regnet_y_3_2gf", 21, 1.0): 19_436_338,
    ("basic", 18, 1.0): 11_689_512,
    ("bottleneck", 50, 1.0): 25_557_032,
}


def n_params(config: Config) -> int:
    return sum(p.numel() for p in build_model(config, "meta").parameters())


@pytest.mark.parametrize(("family", "depth", "width"), sorted(TORCHVISION_PARAMS))
def test_parameter_counts_match_torchvision(family: str, depth: int, width: float) -> None:
    assert (
        n_params(Config(family, depth, width, 224, 1)) == TORCHVISION_PARAMS[(family, depth, width)]
    )


def test_every_family_has_a_count_at_its_standard_depth() -> None:
    checked = {(f, d) for f, d, _ in TORCHVISION_PARAMS}
    assert all((f, d) in checked for f, d in ZOO_FAMILIES.items())
    assert set(FAMILIES) == {f for f, _ in checked}


# non-standard width and depth per family, small enough to run on the CPU
_SMALL = {
    "resnext32x4d": 26,
    "resnext32x8d": 26,
    "resnext64x4d": 26,
    "vgg": 9,
    "vgg_bn": 12,
    "densenet": 29,
    "mobilenet_v2": 9,
    "mobilenet_v3_large": 8,
    "mobilenet_v3_small": 6,
    "efficientnet": 10,
    "regnet_x_400mf": 7,
    "regnet_x_800mf": 7,
    "regnet_x_1_6gf": 7,
    "regnet_x_3_2gf": 7,
    "regnet_y_400mf": 7,
    "regnet_y_800mf": 7,
    "regnet_y_1_6gf": 7,
    "regnet_y_3_2gf": 7,
}


@pytest.mark.parametrize("family", sorted(ZOO_FAMILIES))
def test_family_runs_at_other_widths_and_depths(family: str) -> None:
    config = Config(family, _SMALL[family], 0.5, 32, 2)
    model = build_model(config)
    with torch.inference_mode():
        out = model(example_input(config))
    assert out.shape == (2, 1000)
    assert torch.isfinite(out).all()
    # width and depth change the network
    assert n_params(config) < n_params(config.replace(width=1.0))
    assert n_params(config) < n_params(config.replace(depth=ZOO_FAMILIES[family]))


def test_half_precision_builds() -> None:
    model = build_model(Config("mobilenet_v3_small", 11, 1.0, 32, 1, "bf16"), "meta")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize(
    ("family", "depth", "match"),
    [
        ("vgg", 7, r"depth = 3 \+ 1 x convs"),
        ("densenet", 120, r"depth = 5 \+ 2 x dense layers"),
        ("mobilenet_v2", 6, "at least 7 blocks"),
        ("resnext32x4d", 51, r"depth = 2 \+ 3 x blocks"),
        ("efficientnet", 2000, "from 4 to 1202"),
    ],
)
def test_depth_rules_refuse_impossible_depths(family: str, depth: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Config(family, depth, 1.0, 64, 1)


def test_standard_depths_give_standard_layouts() -> None:
    assert stage_layout("vgg_bn", 19) == (2, 2, 4, 4, 4)
    assert stage_layout("densenet", 161) == (6, 12, 36, 24)
    assert stage_layout("efficientnet", 55) == (4, 7, 7, 10, 10, 13, 4)  # B7
    assert stage_layout("regnet_y_400mf", 16) == (1, 3, 6, 6)
    assert stage_layout("regnet_x_400mf", 22) == (1, 2, 7, 12)
    # other depths spread in the family's proportions, every stage at least one
    assert sum(stage_layout("mobilenet_v2", 25)) == 25
    assert min(stage_layout("densenet", 5 + 2 * 4)) == 1


def test_resnet_keys_unchanged() -> None:
    # the key of a shipped ResNet config stays byte-identical
    assert Config("basic", 18, 1.0, 64, 8).key == Config("basic", 18, 1, 64, 8).key
    assert Config("mobilenet_v2", 17, 1.0, 64, 8).key != Config("basic", 18, 1.0, 64, 8).key
