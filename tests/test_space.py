"""Search spaces, configs, stage layouts and width rounding."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from carb_nas.datasets import read_configs, write_table
from carb_nas.errors import ConfigError, InputFileError, SpaceError
from carb_nas.features import compute_features
from carb_nas.models import build_model, round_channels, stage_channels
from carb_nas.space import (
    CONFIG_COLUMNS,
    Config,
    Space,
    configs_to_frame,
    factorize_configs,
    frame_to_configs,
    load_space,
    normalize_config_frame,
    stage_layout,
)

GOLDEN = Config("bottleneck", 50, 1.0, 224, 1, "fp32", "torch")
# Written once from the key format "family=..;depth=..;width=..;..." (SHA-256, 16 hex). A change
# of the format changes every dataset row's key and every Optuna parameter value: bump this
# only together with a migration of stored keys.
GOLDEN_KEY = "7137fda6f9798403"


# -- Config ----------------------------------------------------------------------------------
def test_config_key_is_golden() -> None:
    assert GOLDEN.key == GOLDEN_KEY


def test_config_key_is_stable_across_processes() -> None:
    code = (
        "from carb_nas.space import Config;"
        "print(Config('bottleneck', 50, 1.0, 224, 1, 'fp32', 'torch').key,"
        " Config('basic', 18, 0.25, 64, 8, 'fp16', 'onnxruntime').key)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out == [GOLDEN_KEY, Config("basic", 18, 0.25, 64, 8, "fp16", "onnxruntime").key]


def test_config_key_depends_on_every_field_and_only_on_values() -> None:
    changes = {
        "family": "basic",
        "depth": 101,
        "width": 0.5,
        "resolution": 128,
        "batch_size": 2,
        "precision": "fp16",
        "runtime": "onnxruntime",
    }
    keys = {GOLDEN.replace(**{k: v}).key for k, v in changes.items()}
    assert len(keys) == len(changes) and GOLDEN_KEY not in keys
    # equal values give equal keys whatever their Python type or float noise
    assert Config("bottleneck", 50.0, 1, 224.0, 1).key == GOLDEN_KEY  # type: ignore[arg-type]
    assert Config("bottleneck", 50, 1.00000001, 224, 1).key == GOLDEN_KEY
    assert all(c in "0123456789abcdef" for c in GOLDEN_KEY) and len(GOLDEN_KEY) == 16


def test_config_is_frozen_and_validated() -> None:
    with pytest.raises(AttributeError):
        GOLDEN.depth = 18  # type: ignore[misc]
    for bad, match in [
        ({"family": "dense"}, "unknown family"),
        ({"depth": 51}, "invalid depth"),
        ({"batch_size": 0}, "batch_size"),
        ({"precision": "fp8"}, "precision"),
        ({"runtime": "tvm"}, "runtime"),
        ({"resolution": 16}, "resolution"),
        ({"width": float("nan")}, "width"),
    ]:
        with pytest.raises(ConfigError, match=match):
            GOLDEN.replace(**bad)


def test_frame_round_trip_keeps_configs(tmp_path) -> None:
    configs = load_space("resnet").sample(40, seed=1)
    frame = configs_to_frame(configs)
    assert list(frame.columns) == list(CONFIG_COLUMNS)
    assert frame_to_configs(frame) == configs
    for suffix in ("csv", "parquet"):
        path = write_table(frame, tmp_path / f"configs.{suffix}")
        assert frame_to_configs(read_configs(path)) == configs
        assert not list(tmp_path.glob(".*.tmp"))


# -- stage layouts and widths ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "depth", "layout"),
    [
        ("basic", 18, (2, 2, 2, 2)),
        ("basic", 34, (3, 4, 6, 3)),
        ("bottleneck", 50, (3, 4, 6, 3)),
        ("bottleneck", 101, (3, 4, 23, 3)),
        ("bottleneck", 152, (3, 8, 36, 3)),
        ("bottleneck", 200, (3, 24, 36, 3)),
    ],
)
def test_standard_layouts(family: str, depth: int, layout: tuple) -> None:
    assert stage_layout(family, depth) == layout


@pytest.mark.parametrize(
    ("family", "depth", "layout"),
    [
        # fewer than four blocks: one block per stage
        ("basic", 8, (1, 1, 1)),
        ("basic", 10, (1, 1, 1, 1)),
        # spare blocks spread 3:4:6:3 by largest remainder, ties to the earlier stage
        ("basic", 14, (1, 2, 2, 1)),  # spare 2: 0.375, 0.5, 0.75, 0.375
        ("basic", 26, (3, 3, 4, 2)),  # spare 8: 1.5, 2, 3, 1.5 -> tie goes to stage 1
        ("bottleneck", 65, (4, 5, 8, 4)),  # spare 17: 3.19, 4.25, 6.38, 3.19
    ],
)
def test_layout_rule_on_worked_examples(family: str, depth: int, layout: tuple) -> None:
    assert stage_layout(family, depth) == layout


def test_layout_rule_holds_for_every_depth_in_the_spaces() -> None:
    per_block = {"basic": 2, "bottleneck": 3}
    for name in ("resnet", "carb_screening", "cpu"):
        space = load_space(name)
        for family, knobs in space.knobs.items():
            for depth in knobs["depth"]:
                layout = stage_layout(family, depth)
                assert layout == stage_layout(family, depth)  # deterministic
                assert 2 + per_block[family] * sum(layout) == depth
                assert all(b >= 1 for b in layout) and len(layout) in (3, 4)
                if sum(layout) >= 4:
                    assert len(layout) == 4
                    # deeper stages never get fewer blocks than the 3:4:6:3 order implies
                    assert layout[2] >= max(layout[0], layout[1], layout[3])


def test_layout_rejects_impossible_depths() -> None:
    with pytest.raises(ConfigError, match=r"depth = 2 \+ 3 x blocks"):
        stage_layout("bottleneck", 51)
    with pytest.raises(ConfigError, match="unknown family"):
        stage_layout("dense", 18)


def test_model_depth_matches_layout() -> None:
    for family, depth in [("basic", 26), ("bottleneck", 65), ("basic", 8)]:
        model = build_model(Config(family, depth, 0.25, 32, 1), "meta")
        weighted = [m for m in model.modules() if m.__class__.__name__ in ("Conv2d", "Linear")]
        downsample = sum(1 for n, _ in model.named_modules() if n.endswith("downsample.0"))
        assert len(weighted) - downsample == depth


@pytest.mark.parametrize(
    ("width", "channels"),
    [
        (1.0, [64, 128, 256, 512]),
        (0.5, [32, 64, 128, 256]),
        (0.1, [8, 16, 24, 48]),  # 6.4 -> 8 (floor of 8), 12.8 -> 16, 25.6 -> 24, 51.2 -> 48
        (0.375, [24, 48, 96, 192]),
        (1.25, [80, 160, 320, 640]),
        (0.15, [16, 24, 40, 80]),  # 9.6 -> 8 would be 17 % low, so 16
    ],
)
def test_width_rounding(width: float, channels: list[int]) -> None:
    assert stage_channels(width, 4) == channels


def test_width_rounding_rule() -> None:
    for exact in np.arange(1.0, 2100.0, 0.37):
        c = round_channels(float(exact))
        assert c % 8 == 0 and c >= 8
        assert c >= 0.9 * exact  # never more than 10 % below
        nearest = max(8, int(exact + 4) // 8 * 8)
        assert c == nearest or (c == nearest + 8 and nearest < 0.9 * exact)
    assert round_channels(8.8) == 8  # 8 is within 10 % of 8.8
    assert round_channels(9.0) == 16  # 8 would be 11 % low
    assert round_channels(12.0) == 16 and round_channels(11.9) == 16


# -- spaces ----------------------------------------------------------------------------------
def test_space_counts() -> None:
    assert len(load_space("resnet")) == 14_688
    assert len(load_space("search_spaces/resnet.toml")) == 14_688
    assert len(load_space("carb_screening")) == 3_072
    assert len(load_space("carb_screening").grid()) == 3_072


def test_cpu_space_cap() -> None:
    space = load_space("cpu")
    grid = space.grid()
    assert 0 < len(space) == len(grid)
    flops = compute_features(grid)["flops"]
    assert flops.max() <= space.limits["max_gflops_per_batch"] * 1e9
    uncapped = Space(space.knobs, name="uncapped")
    full = uncapped.grid()
    assert len(full) == math.prod(len(v) for v in space.knobs["basic"].values()) + math.prod(
        len(v) for v in space.knobs["bottleneck"].values()
    )
    assert len(grid) < len(full)
    # the cap removes exactly the configs above it
    over = compute_features(full)["flops"] > space.limits["max_gflops_per_batch"] * 1e9
    assert len(grid) == int((~over).sum())


def test_spaces_respect_carb_ranges() -> None:
    for name in ("resnet", "carb_screening", "cpu"):
        grid = load_space(name).grid()
        assert grid["width"].between(0.1, 4.0).all()
        assert grid["resolution"].between(32, 128).all()
        assert grid["batch_size"].between(1, 256).all()
        basic = grid[grid["family"] == "basic"]["depth"]
        bottleneck = grid[grid["family"] == "bottleneck"]["depth"]
        assert basic.between(8, 152).all() and bottleneck.between(50, 200).all()


def test_grid_has_distinct_configs_and_consistent_membership() -> None:
    space = load_space("carb_screening")
    grid = space.grid()
    assert not grid.duplicated().any()
    assert all(c in space for c in space.sample(20, seed=0))
    assert GOLDEN not in space  # 224 px lies outside it


def test_sampling_is_deterministic_and_distinct() -> None:
    space = load_space("resnet")
    a = space.sample(200, seed=11)
    assert a == space.sample(200, seed=11)
    assert a != space.sample(200, seed=12)
    assert len(set(a)) == 200
    assert space.sample(200, seed=11, stratify=True) == space.sample(200, seed=11, stratify=True)
    small = load_space("carb_screening")
    assert sorted(small.sample(10_000, seed=0)) == sorted(frame_to_configs(small.grid()))
    with pytest.raises(ConfigError, match="sample size"):
        space.sample(0)


def test_space_from_dict_ranges() -> None:
    space = Space.from_dict(
        {
            "knobs": {
                "family": ["basic"],
                "depth": [18],
                "width": {"start": 0.25, "stop": 1.0, "step": 0.25},
                "resolution": {"start": 32, "stop": 128, "step": 32},
                "batch_size": {"start": 1, "stop": 64, "factor": 4},
            }
        }
    )
    assert space.values("width") == [0.25, 0.5, 0.75, 1.0]
    assert space.values("resolution") == [32, 64, 96, 128]
    assert space.values("batch_size") == [1, 4, 16, 64]
    assert space.values("precision") == ["fp32"] and space.values("runtime") == ["torch"]
    assert len(space) == 4 * 4 * 4


def test_space_fingerprint_depends_on_content_only(tmp_path) -> None:
    src = load_space("carb_screening")
    copy = tmp_path / "renamed.toml"
    copy.write_text(src_path_text("carb_screening"))
    assert load_space(copy).fingerprint == src.fingerprint
    assert load_space("resnet").fingerprint != src.fingerprint


def src_path_text(name: str) -> str:
    from carb_nas.space import bundled_space_path

    path = bundled_space_path(name)
    assert path is not None
    return path.read_text()


def test_read_configs_errors(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"family": ["basic"], "depth": [18]}).to_csv(bad, index=False)
    with pytest.raises(InputFileError, match="missing column"):
        read_configs(bad)
    with pytest.raises(SpaceError, match="malformed TOML"):
        (tmp_path / "x.toml").write_text("name = [")
        read_configs(tmp_path / "x.toml")


# -- one rule set for config values (issue 13), bad spaces and values (issue 19) -------------
def _space_doc(**knobs: object) -> dict:
    base = {"family": ["basic"], "depth": [18], "width": [1.0], "resolution": [64]}
    return {"knobs": {**base, "batch_size": [1], **knobs}}


def test_nan_and_infinite_knob_values_are_refused() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(SpaceError, match="invalid width"):
            Space.from_dict(_space_doc(width=[0.5, bad]))
    with pytest.raises(SpaceError, match="invalid resolution"):
        Space.from_dict(_space_doc(resolution=[float("nan")]))


def test_depth_is_capped_at_a_documented_maximum() -> None:
    from carb_nas.space import _MAX_DEPTH

    assert _MAX_DEPTH == 1202
    assert sum(stage_layout("basic", _MAX_DEPTH)) == (_MAX_DEPTH - 2) // 2
    with pytest.raises(ConfigError, match="1202"):
        stage_layout("basic", 2_000_000)
    with pytest.raises(SpaceError, match=r"depth.*1202.*2000000"):
        Space.from_dict(_space_doc(depth=[18, 2_000_000]))
    with pytest.raises(ConfigError, match="1202"):
        Config("bottleneck", 2_000_003, 1.0, 64, 1)


def test_huge_ranges_and_grids_fail_before_enumerating() -> None:
    import time

    from carb_nas.space import _MAX_GRID_CONFIGS, _MAX_KNOB_VALUES

    start = time.perf_counter()
    with pytest.raises(SpaceError, match=r"resolution.*32"):  # the bound, before 10^8 values
        Space.from_dict(_space_doc(resolution={"start": 1, "stop": 10**8, "step": 1}))
    with pytest.raises(SpaceError, match=f"at most {_MAX_KNOB_VALUES:,} values"):
        Space.from_dict(_space_doc(width={"start": 0.1, "stop": 4.0, "step": 1e-7}))
    wide = {"start": 0.01, "stop": 16.0, "step": 0.01}  # 1,600 widths
    huge = Space.from_dict(
        _space_doc(
            width=wide,
            resolution={"start": 32, "stop": 1024, "step": 1},
            batch_size={"start": 1, "stop": 64, "step": 1},
        )
    )
    assert len(huge) > _MAX_GRID_CONFIGS  # counting needs no grid
    with pytest.raises(SpaceError, match=f"at most {_MAX_GRID_CONFIGS:,} configs"):
        huge.grid()
    with pytest.raises(SpaceError, match="too large"):
        huge.sample(3)
    assert time.perf_counter() - start < 5.0


def test_sample_refuses_bad_seeds_and_sizes() -> None:
    space = load_space("carb_screening")
    for seed in (-1, 1.5, "0", True):
        with pytest.raises(ConfigError, match=r"invalid seed: expected an integer >= 0"):
            space.sample(3, seed=seed)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="sample size"):
        space.sample(2.5)  # type: ignore[arg-type]
    assert space.sample(3, seed=np.int64(4)) == space.sample(3, seed=4)


@pytest.mark.parametrize(
    ("knob", "value", "allowed"),
    [
        ("width", 1e30, "from 0.0001 to 16"),
        ("width", 0.0, "from 0.0001 to 16"),
        ("width", 0.00001, "from 0.0001 to 16"),
        ("resolution", 1e30, "32 to 1024"),
        ("batch_size", 10**12, "1 to 4096"),
        ("depth", 1e30, "4 to 1202"),
    ],
)
def test_values_out_of_range_give_one_line_with_the_allowed_range(
    knob: str, value: float, allowed: str
) -> None:
    good = {"family": "basic", "depth": 18, "width": 1.0, "resolution": 64, "batch_size": 2}
    with pytest.raises(ConfigError, match=allowed) as e:
        Config(**{**good, knob: value})
    assert "\n" not in str(e.value) and "expected" in str(e.value)
    frame = pd.DataFrame([good, {**good, knob: value}])
    with pytest.raises(InputFileError, match=rf"configs.csv: .*{knob}.*data row 2.*{allowed}"):
        normalize_config_frame(frame, source="configs.csv")
    with pytest.raises(ConfigError, match=allowed):
        compute_features(frame)


def test_factorize_configs_encodes_each_column() -> None:
    frame = configs_to_frame(load_space("carb_screening").sample(300, seed=2))
    encoded = factorize_configs(frame.drop(columns=["runtime"]))
    assert set(encoded) == set(CONFIG_COLUMNS) - {"runtime"}
    for col, (codes, values) in encoded.items():
        assert codes.dtype == np.int64 and len(codes) == len(frame)
        assert [values[c] for c in codes] == frame[col].tolist()
    text = frame.astype({"depth": str, "resolution": str})  # numeric text counts as numbers
    pd.testing.assert_frame_equal(normalize_config_frame(text), normalize_config_frame(frame))
    with pytest.raises(ConfigError, match=r"missing depth at data row 3"):
        factorize_configs(frame.assign(depth=frame["depth"].astype(float).where(frame.index != 2)))


def test_space_imports_nothing_above_it_and_still_applies_its_limits() -> None:
    import ast
    from pathlib import Path

    import carb_nas.space

    tree = ast.parse(Path(carb_nas.space.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module] + [
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    ]
    carb = sorted(m for m in imported if m.startswith("carb_nas"))
    assert carb == ["carb_nas.errors"], carb
    # a fresh process: importing space loads neither features nor torch, and the cpu space's
    # [limits] still apply (the package root installs the rule)
    code = (
        "import sys; from carb_nas.space import load_space;"
        "before = ('carb_nas.features' in sys.modules, 'torch' in sys.modules);"
        "print(before, len(load_space('cpu')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout.split(")")
    assert out[0].strip() == "(False, False"
    assert int(out[1]) == len(load_space("cpu")) < len(Space(load_space("cpu").knobs))


def test_register_limit_knows_only_declared_limits() -> None:
    from carb_nas.space import register_limit

    with pytest.raises(SpaceError, match="unknown limit"):
        register_limit("max_watts", lambda frame, limit: np.ones(len(frame), dtype=bool))
