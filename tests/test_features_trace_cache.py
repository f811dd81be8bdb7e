"""The trace's caches (features._trace, features._ops): what they key on, and that the numbers
they give equal those of a slower reference implementation of the trace (tests/data/
trace_golden.json, written by this module run as a script on that code:
``PYTHONPATH=<old tree> python tests/test_features_trace_cache.py``)."""

from __future__ import annotations

import hashlib
import json
import sys
from functools import partial
from pathlib import Path

import torch
from torch import nn

from carb_nas.features import clear_ops_cache, trace_features, trace_ops
from carb_nas.models import build_model
from carb_nas.space import Config
from tests.user_nets import SqueezeExcite

GOLDEN = Path(__file__).parent / "data" / "trace_golden.json"
# (family, depth, width, resolution, batch): every family group, small enough to trace fast
_CONFIGS = [
    ("basic", 18, 0.25, 32, 2),
    ("bottleneck", 50, 0.25, 32, 1),
    ("resnext32x4d", 50, 0.25, 32, 1),
    ("vgg_bn", 11, 0.25, 32, 2),
    ("densenet", 121, 0.25, 32, 1),
    ("mobilenet_v2", 17, 0.5, 32, 2),
    ("mobilenet_v3_small", 11, 0.5, 32, 1),
    ("efficientnet", 16, 0.25, 32, 1),
    ("regnet_y_400mf", 16, 0.5, 32, 2),
    ("regnet_x_400mf", 22, 0.5, 32, 1),
]


class _Block(nn.Module):
    """A user block whose ``residual`` flag is no submodule and not in its extra_repr."""

    def __init__(self, residual: bool = True) -> None:
        super().__init__()
        self.residual = residual
        self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.Hardswish()
        self.se = SqueezeExcite(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.se(self.act(self.bn(self.dw(x))))
        return x + y if self.residual else y


def _user(residual: bool = True) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        _Block(residual),
        _Block(residual),
        nn.GELU(),
        nn.PixelShuffle(2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 10),
    )


def _user_on_meta() -> nn.Module:
    with torch.device("meta"):
        return _user(True)


def _cases() -> list[tuple[str, object, tuple[int, ...]]]:
    out: list[tuple[str, object, tuple[int, ...]]] = []
    for f, d, w, r, b in _CONFIGS:
        config = Config(f, d, w, r, b)
        out.append((f"{f}-{d}-{w}-{r}-{b}", partial(build_model, config, "meta"), (b, 3, r, r)))
    out.append(("user-residual", lambda: _user(True), (2, 3, 16, 16)))
    out.append(("user-plain", lambda: _user(False), (2, 3, 16, 16)))
    out.append(("user-on-meta", _user_on_meta, (1, 3, 16, 16)))  # runs as it is, no swap
    return out


def _digest(make: object, shape: tuple[int, ...]) -> dict[str, object]:
    ops, feats = trace_ops(make(), shape)  # type: ignore[operator]
    return {
        "features": {k: (float(v) if isinstance(v, float) else int(v)) for k, v in feats.items()},
        "n_ops": len(ops),
        "columns": list(ops.columns),
        "table_sha1": hashlib.sha1(ops.to_csv(index=False).encode()).hexdigest(),
    }


def _write_golden() -> None:
    cases = {}
    for name, make, shape in _cases():
        # every case cold: a cache keyed by a hash that leaves out plain attributes would
        # give "user-plain" the table of "user-residual"
        clear_ops_cache()
        cases[name] = _digest(make, shape)
    GOLDEN.write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({len(cases)} cases)")


def test_tables_and_features_equal_the_previous_code_cold_and_warm():
    golden = json.loads(GOLDEN.read_text())
    assert sorted(golden) == sorted(name for name, _, _ in _cases())
    for warm in (False, True):
        clear_ops_cache()
        for name, make, shape in _cases():
            if not warm:
                clear_ops_cache()  # cold: no table, no layer, no structure cached
            else:
                clear_ops_cache(layers=False)  # new tables over the layers traced before
            got = _digest(make, shape)
            assert got["features"] == golden[name]["features"], (name, warm)
            assert got == golden[name], (name, warm)


def _c_out(ops: object) -> list[int]:
    return list(ops["c_out"])  # type: ignore[index]


def test_equal_structures_with_other_hyper_parameters_do_not_share_an_entry():
    clear_ops_cache()
    shape = (1, 3, 16, 16)
    one = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU())
    two = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU())
    a, _ = trace_ops(one, shape)
    b, _ = trace_ops(two, shape)
    assert list(a["h_out"]) == [16, 16] and list(b["h_out"]) == [8, 8]
    # a plain attribute of a user block (not shown by extra_repr) is part of the key
    res, res_f = trace_ops(_user(True), (2, 3, 16, 16))
    plain, plain_f = trace_ops(_user(False), (2, 3, 16, 16))
    assert "add" in set(res["kind"]) and "add" not in set(plain["kind"])
    assert res_f["n_blocks"] == 2 and plain_f["n_blocks"] == 0

    # a function held as an attribute is keyed by identity (its code)
    class Act(nn.Module):
        def __init__(self, fn: object) -> None:
            super().__init__()
            self.fn = fn

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fn(x)  # type: ignore[operator]

    relu, _ = trace_ops(nn.Sequential(nn.Conv2d(3, 4, 3), Act(torch.relu)), shape)
    sig, _ = trace_ops(nn.Sequential(nn.Conv2d(3, 4, 3), Act(torch.sigmoid)), shape)
    assert list(relu["op"])[-1] == "relu" and list(sig["op"])[-1] == "sigmoid"
    # tied weights are counted once: a tied and an untied pair are two structures
    tied = nn.Sequential(nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False))
    tied[1].weight = tied[0].weight
    untied = nn.Sequential(nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False))
    assert trace_ops(tied, (2, 8))[1]["params"] == 64
    assert trace_ops(untied, (2, 8))[1]["params"] == 128
    # one module used twice is not two modules
    lin = nn.Linear(8, 8)
    assert trace_ops(nn.Sequential(lin, lin), (2, 8))[1]["params"] == 72
    assert trace_ops(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)), (2, 8))[1]["params"] == 144


def test_in_place_changes_of_a_module_are_seen():
    clear_ops_cache()
    shape = (1, 3, 16, 16)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 1, 1))
    before, before_f = trace_ops(net, shape)
    # a hyper-parameter changed in place: the table and the leaf layer's entry are not reused
    net[2].stride = (2, 2)
    strided, _ = trace_ops(net, shape)
    assert list(strided["h_out"]) == [16, 16, 8]
    clear_ops_cache()
    assert strided.equals(trace_ops(net, shape, cache=False)[0])
    # the weights swapped for others of another shape (the attributes left as they were)
    net[2].stride = (1, 1)
    net[0].weight = nn.Parameter(torch.empty(16, 3, 3, 3))
    net[0].bias = nn.Parameter(torch.empty(16))
    net[2].weight = nn.Parameter(torch.empty(8, 16, 3, 3))
    wider, wider_f = trace_ops(net, shape)
    assert _c_out(wider)[0] == 16 and _c_out(before)[0] == 8
    assert wider_f["params"] == before_f["params"] + 8 * 27 + 8 + 8 * 8 * 9
    # in-place activations: the flag is an attribute extra_repr may not show
    clear_ops_cache()
    inplace = trace_features(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True)), shape)
    out_of_place = trace_features(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), shape)
    assert out_of_place["act_mb_total"] > inplace["act_mb_total"]


def test_a_layer_with_other_hyper_parameters_is_not_replayed():
    # the same input shape, the same class and weights: only the dilation differs
    shape = (1, 8, 16, 16)
    plain = nn.Sequential(nn.Conv2d(8, 8, 3, padding=2))
    dilated = nn.Sequential(nn.Conv2d(8, 8, 3, padding=2, dilation=2))
    clear_ops_cache()
    cold, cold_f = trace_ops(dilated, shape, cache=False)
    clear_ops_cache()
    trace_ops(plain, shape)
    warm, warm_f = trace_ops(dilated, shape)
    assert warm.equals(cold) and warm_f == cold_f
    assert list(warm["h_out"]) == [16]


if __name__ == "__main__":
    sys.exit(_write_golden())


def test_conv2d_and_linear_shortcuts_equal_torch_meta_kernels():
    """The tracer's meta results of 2-D convolutions and 2-D linear layers (no Python meta
    function) equal torch's on the meta device: shape, strides, offset, dtype; the linear
    FLOPs equal FlopCounterMode's; cases the shortcut does not cover fall back to torch."""
    from torch.utils.flop_counter import FlopCounterMode

    from carb_nas.features._trace import _conv2d_out, _linear_2d, _linear_out

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return (a.shape, a.stride(), a.storage_offset(), a.dtype) == (
            b.shape, b.stride(), b.storage_offset(), b.dtype)  # fmt: skip

    meta = partial(torch.empty, device="meta")
    n_conv = 0
    for n, c, h, w, co, k, s, p, d, g, bias, dt in [
        (1, 3, 32, 32, 16, 3, 1, 1, 1, 1, True, torch.float32),
        (2, 16, 17, 9, 32, 3, 2, 1, 1, 1, False, torch.float32),
        (1, 32, 8, 8, 32, 3, 1, 1, 1, 32, False, torch.float32),  # depthwise
        (4, 64, 14, 14, 128, 1, 1, 0, 1, 4, True, torch.float16),  # grouped, fp16
        (1, 8, 7, 7, 8, 5, 3, 2, 2, 1, False, torch.bfloat16),  # dilated, strided
        (1, 8, 1, 1, 4, 1, 1, 0, 1, 1, True, torch.float32),  # 1x1 spatial
        (3, 6, 10, 12, 9, (3, 1), (2, 1), (1, 0), 1, 3, False, torch.float32),
    ]:
        kh, kw = k if isinstance(k, tuple) else (k, k)
        x, wt = meta(n, c, h, w, dtype=dt), meta(co, c // g, kh, kw, dtype=dt)
        b = meta(co, dtype=dt) if bias else None
        pair = lambda v: list(v) if isinstance(v, tuple) else [v, v]  # noqa: E731
        args = (x, wt, b, pair(s), pair(p), pair(d), g)  # as the dispatcher passes them
        out = _conv2d_out(args, {})
        assert out is not None and same(out, torch.ops.aten.conv2d(*args))
        n_conv += 1
    x = meta(1, 3, 8, 8)
    channels_last = x.contiguous(memory_format=torch.channels_last)
    for args in [
        (channels_last, meta(4, 3, 3, 3), None, [1, 1], [1, 1], [1, 1], 1),  # torch's own
        (x, meta(4, 2, 3, 3), None, [1, 1], [1, 1], [1, 1], 1),  # a channel mismatch
        (x, meta(4, 3, 9, 9), None, [1, 1], [0, 0], [1, 1], 1),  # an empty output
    ]:
        assert _conv2d_out(args, {}) is None
    assert _conv2d_out((x, meta(4, 3, 3, 3), None, [1, 1], "same", [1, 1], 1), {}) is None
    for m, kin, kout, bias, dt in [
        (1, 16, 10, True, torch.float32),
        (8, 1, 1, False, torch.float32),
        (3, 1280, 1000, True, torch.float16),
        (2, 7, 5, False, torch.bfloat16),
    ]:
        x, wt = meta(m, kin, dtype=dt), meta(kout, kin, dtype=dt)
        b = meta(kout, dtype=dt) if bias else None
        out = _linear_out((x, wt, b), {})
        ref = torch.ops.aten.linear(x, wt, b)
        assert out is not None and same(out, ref)
        with FlopCounterMode(display=False) as fc:
            torch.ops.aten.linear(x, wt, b)
        assert _linear_2d((x, wt, b), {}) and fc.get_total_flops() == 2 * m * kin * kout
    assert _linear_out((meta(2, 3, 16), meta(10, 16), None), {}) is None  # 3-D: torch's own
    assert _linear_out((meta(2, 15), meta(10, 16), None), {}) is None  # a mismatch
    assert n_conv == 7
