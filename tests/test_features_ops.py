"""The per-operator trace (features._ops): op kinds, FLOPs, bytes, caching, bad modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from carb_nas.errors import ConfigError
from carb_nas.features import (
    FEATURE_COLUMNS,
    OP_AGGREGATE_COLUMNS,
    OP_COLUMNS,
    clear_ops_cache,
    op_kind,
    trace_features,
    trace_ops,
)
from carb_nas.models import build_model
from carb_nas.space import Config
from tests.user_nets import SqueezeExcite


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False)
        self.g = nn.Conv2d(16, 16, 3, 1, 1, groups=4, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.Hardswish()
        self.se = SqueezeExcite(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.se(self.act(self.bn(self.g(self.dw(x)))))
        return torch.cat([x + y, y], 1)


def _net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        _Block(),
        nn.Conv2d(32, 16, 1),
        _Block(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def test_kinds_flops_and_bytes_of_an_ad_hoc_module():
    ops, feats = trace_ops(_net(), (2, 3, 32, 32), cache=False)
    assert list(ops.columns) == list(OP_COLUMNS)
    kinds = set(ops["kind"])
    assert {"conv", "dwconv", "gconv", "norm", "act", "mul", "add", "cat", "pool"} <= kinds
    assert {"reshape", "linear"} <= kinds
    # FLOPs of the table are FlopCounterMode's; the network columns are trace_features'
    ref = trace_features(_net(), (2, 3, 32, 32))
    assert ops["flops"].sum() == ref["flops"]
    assert {k: feats[k] for k in FEATURE_COLUMNS} == ref
    assert set(OP_AGGREGATE_COLUMNS) <= set(feats)
    dw = ops[ops["kind"] == "dwconv"].iloc[0]
    assert (dw["groups"], dw["kernel"], dw["c_in"]) == (16, 3, 16)
    assert dw["flops"] == 2 * 2 * 16 * 16 * 16 * 9  # out elements x (c_in/groups x k x k)
    assert dw["read_bytes"] == dw["write_bytes"] == 2 * 16 * 16 * 16 * 4
    assert dw["weight_bytes"] == 16 * 9 * 4
    assert feats["depthwise_flops"] == ops.loc[ops["kind"] == "dwconv", "flops"].sum()
    assert feats["n_dwconv"] == 2 and feats["n_gconv"] == 2 and feats["n_concat"] == 2
    cat = ops[ops["kind"] == "cat"].iloc[0]
    assert cat["read_bytes"] == cat["write_bytes"] == 2 * 32 * 16 * 16 * 4
    assert feats["concat_mb"] == pytest.approx(2 * 2 * cat["read_bytes"] / 1e6)


def test_resnet_table_agrees_with_closed_form_features():
    c = Config("bottleneck", 50, 0.5, 64, 2)
    ops, feats = trace_ops(build_model(c, "meta"), (2, 3, 64, 64), cache=False)
    ref = trace_features(build_model(c, "meta"), (2, 3, 64, 64))
    assert {k: feats[k] for k in FEATURE_COLUMNS} == ref
    assert (ops["kind"] == "conv").sum() == ref["n_conv"]
    assert (ops["kind"] == "norm").sum() == ref["n_bn"]
    # a ResNet at batch 2 runs its unstrided 1x1 convs natively (ConvParams::use_mkldnn)
    assert ops.loc[
        (ops["kind"] == "conv") & (ops["kernel"] == 1) & (ops["stride"] == 1), "native"
    ].all()


def test_repeated_blocks_share_signatures_and_tables_are_cached():
    clear_ops_cache()
    m = build_model(Config("basic", 34, 0.25, 32, 1), "meta")
    ops, _ = trace_ops(m, (1, 3, 32, 32))
    assert ops["signature"].nunique() < len(ops) / 2  # 16 basic blocks, few distinct shapes
    again, _ = trace_ops(m, (1, 3, 32, 32))
    assert again.equals(ops)
    other, _ = trace_ops(m, (2, 3, 32, 32))
    assert other["batch"].eq(2).all()


def test_op_kind_names():
    assert op_kind("aten::conv2d", groups=8, c_in=8) == "dwconv"
    assert op_kind("conv2d", groups=2, c_in=8) == "gconv"
    assert op_kind("aten::add_") == "add"
    assert op_kind("hardswish") == "act"
    assert op_kind("aten::cat") == "cat"
    assert op_kind("something_new") == "other"
    assert op_kind("aten::dropout_") == op_kind("dropout") == "reshape"  # in-place variant


class _DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # needs a real value: impossible on the meta device
            return x
        return -x


def test_a_module_that_cannot_run_on_meta_raises_its_own_error():
    # the spec layer (scoring._trace_error) turns it into one line naming the op and the way
    # out; the tracer itself neither hides nor rewrites it
    with pytest.raises(RuntimeError, match="meta"):
        trace_ops(_DataDependent(), (1, 3, 8, 8), cache=False)


def test_bad_shape_is_refused():
    with pytest.raises(ConfigError, match="input shape"):
        trace_ops(_net(), (0, 3, 8, 8), cache=False)


# -- the faster trace (issue 14): FLOP formulas without FlopCounterMode, the layer cache -------
def _flop_counter_flops(module: nn.Module, shape: tuple[int, ...]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        module.eval()(torch.empty(shape, device="meta"))
    return int(counter.get_total_flops())


@pytest.mark.parametrize(
    "config",
    [
        Config("mobilenet_v3_small", 11, 0.5, 32, 2),
        Config("regnet_y_400mf", 16, 0.5, 32, 1),
        Config("densenet", 121, 0.25, 32, 1),
        Config("vgg_bn", 11, 0.25, 32, 2),
    ],  # fmt: skip
)
def test_trace_flops_equal_flop_counter_mode(config):
    shape = (config.batch_size, 3, config.resolution, config.resolution)
    module = build_model(config, "meta")
    clear_ops_cache()
    assert trace_features(module, shape)["flops"] == _flop_counter_flops(module, shape)
    # a linear on a 3-D input (matmul): composites decompose to FlopCounterMode's formulas
    attn = nn.Sequential(nn.Flatten(2), nn.Linear(16, 16, device="meta"))
    assert trace_features(attn, (2, 4, 4, 4))["flops"] == _flop_counter_flops(attn, (2, 4, 4, 4))


def test_layer_cache_replays_the_same_table_and_features():
    clear_ops_cache()
    cold_ops, cold = trace_ops(_net(), (2, 3, 32, 32), cache=False)
    # the second module is new to the table cache, but its layers are all cached now
    clear_ops_cache(layers=False)
    warm_ops, warm = trace_ops(_net(), (2, 3, 32, 32), cache=False)
    assert warm == cold
    assert warm_ops.equals(cold_ops)
    # a family model: traced cold, then warm after another width of it filled the cache
    c = Config("mobilenet_v2", 17, 0.5, 32, 2)
    clear_ops_cache()
    ref_ops, ref = trace_ops(build_model(c, "meta"), (2, 3, 32, 32))
    clear_ops_cache(layers=False)
    trace_ops(build_model(Config("mobilenet_v2", 17, 1.0, 32, 2), "meta"), (2, 3, 32, 32))
    got_ops, got = trace_ops(build_model(c, "meta"), (2, 3, 32, 32))
    assert got == ref and got_ops.equals(ref_ops)


def test_layer_cache_leaves_user_layers_and_modules_alone():
    class Doubler(nn.Module):  # a user's leaf layer: its forward is user code, never cached
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return x * 2

    net = nn.Sequential(nn.Conv2d(3, 4, 3), Doubler())
    clear_ops_cache()
    trace_ops(net, (1, 3, 8, 8), cache=False)
    trace_ops(net, (1, 3, 8, 8), cache=False)
    assert net[1].calls == 2
    assert "forward" not in net[0].__dict__  # the wrapper is removed after the trace
    ops, _ = trace_ops(net, (1, 3, 8, 8), cache=False)
    assert list(ops["kind"]) == ["conv", "mul"]
    # a real-device module keeps its weights and mode
    real = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    w = real[0].weight.detach().clone()
    trace_ops(real, (1, 3, 8, 8), cache=False)
    assert real.training and torch.equal(real[0].weight, w)


def test_layer_cache_tells_layers_apart_by_state_extra_repr_hides():
    # nn.Hardswish's extra_repr does not show ``inplace``: an in-place entry must not replay
    # for the out-of-place layer (its output is a new activation)
    clear_ops_cache()
    inplace = trace_features(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Hardswish(inplace=True)),
                             (1, 3, 8, 8))  # fmt: skip
    plain = trace_features(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Hardswish()), (1, 3, 8, 8))
    clear_ops_cache()
    assert plain == trace_features(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Hardswish()), (1, 3, 8, 8))
    assert plain["act_mb_total"] > inplace["act_mb_total"]
