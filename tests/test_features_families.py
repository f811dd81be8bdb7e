"""compute_features on configs of the built-in non-ResNet families: traced on the meta device,
the same columns and dtypes as the closed form, row order and index kept, cached."""

from __future__ import annotations

import pandas as pd
import pytest

from carb_nas.features import (
    FEATURE_COLUMNS,
    TORCH_CPU_COLUMNS,
    clear_cache,
    compute_features,
    trace_features,
)
from carb_nas.models import build_model
from carb_nas.space import Config, configs_to_frame

CONFIGS = [
    Config("basic", 18, 0.5, 32, 2),
    Config("mobilenet_v2", 9, 0.5, 32, 2),
    Config("vgg_bn", 11, 0.25, 32, 1, "fp16"),
    Config("bottleneck", 50, 0.25, 64, 1),
    Config("regnet_y_400mf", 8, 0.5, 32, 4, runtime="onnxruntime"),
    Config("mobilenet_v2", 9, 0.5, 32, 2),  # a repeat
]


@pytest.fixture(scope="module")
def mixed() -> tuple[pd.DataFrame, pd.DataFrame]:
    frame = configs_to_frame(CONFIGS).set_axis([7, 3, 9, 1, 5, 8])
    return frame, compute_features(frame)


def test_family_rows_are_their_traced_features(mixed) -> None:
    frame, feats = mixed
    c = CONFIGS[2]
    want = trace_features(build_model(c, "meta"), (1, 3, 32, 32), "fp16")
    got = feats.loc[9]
    for col in FEATURE_COLUMNS:
        assert got[col] == pytest.approx(want[col], rel=1e-12), col
    assert feats.loc[3].equals(feats.loc[8])  # the repeat


def test_resnet_rows_match_the_closed_form_alone(mixed) -> None:
    frame, feats = mixed
    alone = compute_features(frame.loc[[7, 1]])
    pd.testing.assert_frame_equal(feats.loc[[7, 1]], alone)


def test_columns_index_and_dtypes_as_the_closed_form(mixed) -> None:
    frame, feats = mixed
    assert list(feats.columns) == list(FEATURE_COLUMNS)
    assert list(feats.index) == list(frame.index)
    resnet_only = compute_features(frame.loc[[7]])
    assert feats.dtypes.equals(resnet_only.dtypes)


def test_other_runtime_zeroes_the_torch_cpu_columns(mixed) -> None:
    _, feats = mixed
    assert (feats.loc[5, list(TORCH_CPU_COLUMNS)] == 0).all()
    assert feats.loc[5, "flops"] > 0


def test_traced_rows_are_cached() -> None:
    clear_cache()
    frame = configs_to_frame([Config("mobilenet_v3_small", 6, 0.5, 32, 1)])
    first = compute_features(frame)
    from carb_nas.features import _closed_form

    assert len(_closed_form._TRACED_CACHE) == 1
    pd.testing.assert_frame_equal(compute_features(frame), first)


# -- int8 / int8-dynamic on the built-in families (issue 15) ----------------------------------
def test_int8_dynamic_has_an_element_size_and_every_family_featurizes_at_int8():
    """int8-dynamic used to be measurable but not featurizable (no ELEMENT_BYTES entry)."""
    from carb_nas.features import ELEMENT_BYTES, compute_features
    from carb_nas.space import PRECISIONS, ZOO_FAMILIES

    assert set(PRECISIONS) <= set(ELEMENT_BYTES)
    assert ELEMENT_BYTES["int8-dynamic"] == ELEMENT_BYTES["fp32"]  # activations stay fp32
    families = {"basic": 18, "bottleneck": 50, **ZOO_FAMILIES}
    rows = [
        {
            "family": f,
            "depth": d,
            "width": 0.5,
            "resolution": 32,
            "batch_size": 2,
            "precision": p,
            "runtime": "openvino" if p == "int8" else "torch",
        }
        for f, d in families.items()
        for p in ("fp32", "int8", "int8-dynamic")
    ]
    feats = compute_features(pd.DataFrame(rows))
    by = {(r["family"], r["precision"]): i for i, r in enumerate(rows)}
    for f in families:
        fp32, int8, dyn = (feats.iloc[by[f, p]] for p in ("fp32", "int8", "int8-dynamic"))
        assert int8["flops"] == fp32["flops"] > 0 and int8["params"] == fp32["params"]
        assert int8["param_mb"] == pytest.approx(fp32["param_mb"] / 4)
        assert int8["act_mb_total"] == pytest.approx(fp32["act_mb_total"] / 4)
        assert dyn["param_mb"] == fp32["param_mb"]
        assert dyn["tensor_peak_mb"] == fp32["tensor_peak_mb"]
