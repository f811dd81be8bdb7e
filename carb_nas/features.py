"""Architecture features of configs: closed form (vectorized) and meta-device tracing.

Two ways to the same numbers:

- :func:`compute_features` takes a DataFrame of configs (``CONFIG_COLUMNS``) and returns one
  feature row per config. It derives everything in closed form once per unique architecture
  (family, depth, width, resolution) and broadcasts over batch size and precision with numpy,
  so it featurizes millions of configs per second.
- :func:`trace_features` runs ANY ``nn.Module`` once on the meta device (no memory, no compute)
  and returns the same features. On the spaces' ResNets both agree exactly (a test).

Definitions (all per batch; MB = 10**6 bytes; ``e`` = element bytes of the precision: fp32 4,
fp16 2, bf16 2, int8 1 -- int8 configs run as static QDQ ONNX models whose weights and
activations are int8, so every parameter and every activation element counts 1 byte; int64
tensors keep 8 bytes and the CPU kernels' float temporaries below keep 4):

``flops``
    2 x multiply-accumulates of every convolution and linear layer, exactly as
    ``torch.utils.flop_counter.FlopCounterMode`` counts them (bias adds, BN, pooling and ReLU
    are not counted). Scales with batch size.
``native_conv_flops``
    The part of ``flops`` in convolutions that eager PyTorch on the CPU, with one intra-op
    thread, runs on its native kernels instead of oneDNN (``ConvParams::use_mkldnn``):
    unstrided 1x1 convolutions at batch < 16, and at batch 1 every convolution with a kernel
    of at most 3x3 whose input holds at most 20,480 elements. The native kernels run about
    half as fast (this machine: a 64->256 1x1 conv at 98 GFLOP/s for batch 15, 186 for batch
    16), so single-thread latency jumps down at batch 16. With more threads PyTorch sends the
    1x1 convolutions to oneDNN too; the column then over-counts, and a cost model trained at
    that thread count learns how much the column is worth. 0 for other runtimes (e.g. ONNX
    Runtime) in :func:`compute_features`. Scales with batch size.
``onednn_weight_mb``
    Bytes (/1e6) of the convolution weights that go through oneDNN in that dispatch (every
    convolution not counted in ``native_conv_flops``). Eager PyTorch hands oneDNN plain-layout
    weights, which it reorders into its blocked layout on every call: a read and a write of
    each such weight per forward pass, at any batch size. Weight-heavy nets therefore slow
    down sharply from batch 1 to 2 here (a 1024->1024 3x3 conv on a 2x2 input: 9 ms at batch
    1, native; 21 ms at batch 2). 0 for other runtimes (ONNX Runtime pre-packs weights once).
``mmap_mb``
    Bytes (/1e6) that eager PyTorch on Linux gets from fresh, zero-filled pages on every
    forward pass: the buffers of at least 32 MiB, glibc's largest dynamic mmap threshold.
    glibc serves smaller buffers from its heap after the first pass, but maps each buffer
    that large anew and unmaps it when freed, so every page faults again on each call (this
    machine: about 0.4 ms per MB, as if written at 2.5 GB/s). Counted: every activation
    (below) and, for each convolution that goes through oneDNN, its reordered weight copy and
    blocked copies of its input and output (oneDNN's first-layer kernels read a 3-channel
    input in place). Measured here with ``MALLOC_MMAP_THRESHOLD_`` raised as the control: a
    1024->1024 3x3 conv at batch 2 on a 4x4 input (37.7 MB of weights) 22.6 ms -> 8.6 ms; a
    960-channel one (33.2 MB, under 32 MiB) has no such gap; a batch-norm over 51 MB
    24 ms -> 2.5 ms; a 64->256 1x1 conv with a 51 MB output 54.5 ms -> 12.7 ms (two copies);
    whole networks of the shipped torch dataset lose 0.36-0.39 ms per counted MB (basic-50
    width 2 at batch 2: 190 ms -> 67 ms; ``benchmarks/page_faults.py``). The cost depends on
    the heap's history: glibc serves a large request from a free heap chunk that fits before
    it maps new pages, so a process that has just freed other large buffers may not pay it.
    Fresh processes and the profiler's campaigns do. 0 for other runtimes (ONNX Runtime
    keeps its buffers in an arena). Not linear in batch.
``params``, ``param_mb``
    Number of parameters (conv and linear weights, linear bias, BN weight and bias; BN running
    statistics are buffers, not parameters) and their size, ``params x e / 1e6``.
``act_mb_total``, ``act_mb_max``
    The activations are the floating-point tensors newly created by the forward pass: the
    outputs of every convolution, batch norm, pooling and linear op, each counted once.
    In-place ops (``relu_``, ``out += identity``), views (``flatten``), integer outputs
    (max-pool indices) and kernel workspaces are not activations. ``act_mb_total`` sums
    their sizes, ``act_mb_max`` is the largest one.
``pool_in_mb``
    Bytes read by max-pooling layers (in these ResNets, the stem's). Eager PyTorch's CPU max
    pool is slow for its size: about 1.4 ms per MB of input here with one thread, against
    0.05 for a batch norm over the same tensor, so a wide, high-resolution stem costs more in
    its pool than in many convolutions.
``weight_mb_max``
    The largest single parameter tensor (a conv or the linear weight), ``x e / 1e6``.
``input_mb``
    The input batch, ``batch x 3 x resolution**2 x e``.
``compute_intensity``
    FLOPs per byte moved, ``flops / (param bytes + input bytes + total activation bytes)``:
    every weight and the input read once, every activation written once.
``log_flops_per_param``
    ``ln(flops / params)``.
``n_conv``, ``n_bn``, ``n_linear``, ``n_blocks``, ``n_stages``
    Layer counts; blocks are residual blocks, stages the groups of blocks at one resolution
    (for a traced module: blocks = additions of two equally shaped activations, stages = the
    distinct shapes among them).
``tensor_peak_mb``
    Exact peak tensor memory of one inference forward pass in eager PyTorch on the CPU
    (``torch.inference_mode``, the module as built by :mod:`carb_nas.models`: BN not fused,
    in-place ReLU and residual add): bytes of parameters + buffers + input, plus the peak,
    over the pass, of the bytes allocated beyond those. Python reference counting decides
    when each tensor is freed. The peak includes what the CPU kernels allocate internally and
    free before returning, modelled once in :func:`_conv_workspace_elems` and
    :func:`_op_workspace_bytes`: the im2col buffer of PyTorch's native (non-oneDNN)
    convolution, which eager PyTorch picks for batch 1 and small inputs; the two float32
    per-channel scale/shift vectors of eval-mode batch norm; the int64 indices of max pooling.
    For fp32 this equals, to the byte, the peak of the PyTorch profiler's memory events
    (``profile_memory=True``) on top of the resident model and input, once the buffers that
    oneDNN allocates and frees inside ``aten::mkldnn_convolution`` are left out (tested).
    Those oneDNN-internal buffers -- weights, input and output reordered into blocked
    layouts, and per-thread scratchpads -- depend on the CPU's ISA, the thread count and the
    oneDNN version, so no closed form can match them on every machine; on this machine
    (AVX-512) they add 0-35 % on top at batch >= 2 and nothing at batch 1 when the native
    path runs. ``weight_mb_max`` (the largest weight tensor, which oneDNN reorders) helps a
    cost model learn that part. Other precisions use the same model at their element size;
    PyTorch's own fp16/bf16 CPU kernels allocate differently (e.g. fp32 staging buffers), so
    there the figure is a consistent model, not a CPU measurement.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from carb_nas.errors import ConfigError
from carb_nas.models import EXPANSION, NUM_CLASSES, stage_channels
from carb_nas.space import FAMILIES, PRECISIONS, _canonical_width, stage_layout

__all__ = [
    "FEATURE_COLUMNS",
    "ELEMENT_BYTES",
    "compute_features",
    "trace_features",
]

FEATURE_COLUMNS = (
    "flops",
    "native_conv_flops",
    "onednn_weight_mb",
    "mmap_mb",
    "params",
    "param_mb",
    "weight_mb_max",
    "input_mb",
    "act_mb_total",
    "act_mb_max",
    "pool_in_mb",
    "compute_intensity",
    "log_flops_per_param",
    "n_conv",
    "n_bn",
    "n_linear",
    "n_blocks",
    "n_stages",
    "tensor_peak_mb",
)
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
_E_LEVELS = (4, 2, 1)  # distinct element sizes; per-architecture tables hold one row each
_MB = 1e6
_BN_TEMP_BYTES_PER_CHANNEL = 8  # eval BN on CPU: float32 scale + float32 shift per channel
_INDEX_BYTES = 8  # max-pool indices are int64
_NATIVE_CONV_MAX_NUMEL = 20480  # PyTorch's use_mkldnn threshold for batch-1 inputs
_NATIVE_1X1_MAX_BATCH = 15  # one thread: unstrided 1x1 convs below batch 16 skip oneDNN
_MMAP_MIN_BYTES = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: always mmap'd
_N_TIERS = 3  # batch 1 / 2-15 / >= 16: the batches that send more convs to oneDNN
_IN_PLACE_MAX_CHANNELS = 3  # oneDNN's first-layer kernels read a plain 3-channel input as is


# -- the CPU kernel workspace model (shared by the closed form and the tracer) -----------------
def _conv_workspace_elems(
    n: int,
    c_in: Any,
    h: Any,
    w: Any,
    k_h: int,
    k_w: int,
    h_out: Any,
    w_out: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    groups: int = 1,
) -> Any:
    """Elements of the im2col buffer eager PyTorch allocates for a 2-D convolution on CPU.

    PyTorch's ``ConvParams::use_mkldnn`` sends a float convolution to oneDNN (no buffer through
    PyTorch's allocator) unless the batch is 1, the kernel is not larger than 3 in both
    dimensions, groups is 1 and the input holds at most 20,480 elements. Then the native
    ``_slow_conv2d_forward`` unfolds the input into ``n x (c_in k_h k_w) x (h_out w_out)``
    elements, except for an unpadded, unstrided 1x1 kernel, where the buffer is a view.
    ``c_in``, ``h``, ``w``, ``h_out`` and ``w_out`` may be numpy arrays (one per architecture).
    """
    if k_h == 1 and k_w == 1 and all(s == 1 for s in stride) and all(p == 0 for p in padding):
        return 0
    if n > 1:
        return 0
    native = _native_at_batch1(c_in, h, w, k_h, k_w, groups)
    return np.where(native, n * c_in * k_h * k_w * h_out * w_out, 0)


def _native_at_batch1(c_in: Any, h: Any, w: Any, k_h: int, k_w: int, groups: int = 1) -> Any:
    """PyTorch's batch-1 rule: a float conv with a kernel of at most 3x3, groups 1 and at most
    20,480 input elements skips oneDNN (bool, or a numpy array over architectures)."""
    if groups > 1 or (k_h > 3 and k_w > 3):
        return False
    return c_in * h * w <= _NATIVE_CONV_MAX_NUMEL


def _native_conv_kind(
    c_in: Any, h: Any, w: Any, k_h: int, k_w: int, stride: Sequence[int], groups: int = 1
) -> tuple[bool, Any]:
    """Which batches eager PyTorch (one thread) runs a float conv with on its native kernels.

    ``(below16, at_batch1)``: ``below16`` -- an unstrided 1x1 kernel, native for every batch
    below 16; otherwise ``at_batch1`` -- native at batch 1 (:func:`_native_at_batch1`). See
    ``ConvParams::use_mkldnn`` and the ``native_conv_flops`` definition.
    """
    if k_h == 1 and k_w == 1 and all(s == 1 for s in stride):
        return True, False
    return False, _native_at_batch1(c_in, h, w, k_h, k_w, groups)


# -- closed form ---------------------------------------------------------------------------
class _ArchSim:
    """Walks the forward pass of many ResNets of one family and depth at once.

    Sizes are per sample at 1 byte per element; each quantity is a numpy array with one entry
    per architecture (width, resolution). Each candidate peak point is
    ``(float_elems, index_elems, const_bytes, column_elems)``: bytes at that point beyond the
    resident model and input are
    ``b*(float_elems*e + 8*index_elems) + const_bytes + [b == 1]*column_elems*e``.
    Convolution workspaces exist only at batch 1 (see `_conv_workspace_elems`).
    """

    def __init__(self, m: int) -> None:
        self.m = m
        self.points: list[tuple[Any, Any, Any, Any]] = []
        self.acts: list[Any] = []
        zero = np.zeros(m, dtype=np.int64)
        self.flops, self.params, self.weight_max, self.bn_channels = zero, zero, zero, zero
        # per-sample FLOPs of convs native below batch 16 / native only at batch 1, and the
        # conv weight elements: all, and those of the same two native classes
        self.native_below16, self.native_b1 = zero, zero
        self.conv_w, self.w_below16, self.w_b1 = zero, zero, zero
        # oneDNN's per-call copies per sample (input, output), by the batches that send the
        # conv to oneDNN: every batch / batch >= 2 / batch >= 16 (one (m,) array per copy;
        # 0 where the arch does not belong), and per element size the weight elements whose
        # reordered copy reaches the mmap threshold, in the same three classes
        self.copies: dict[str, list[Any]] = {"any": [], "b2": [], "b16": []}
        self.big_w = {c: np.zeros((len(_E_LEVELS), m), dtype=np.int64) for c in self.copies}
        self.n_conv = 0
        self.n_bn = 0

    def conv(self, live: Any, c_in: Any, c_out: Any, k: int, s: int, p: int, h: Any) -> tuple:
        h_out = (h + 2 * p - k) // s + 1
        out = c_out * h_out * h_out
        flops = 2 * c_out * h_out * h_out * c_in * k * k
        self.flops = self.flops + flops
        below16, at_b1 = _native_conv_kind(c_in, h, h, k, k, (s, s))
        weights = c_out * c_in * k * k
        self.conv_w = self.conv_w + weights
        if below16:
            self.native_below16 = self.native_below16 + flops
            self.w_below16 = self.w_below16 + weights
        else:
            self.native_b1 = self.native_b1 + np.where(at_b1, flops, 0)
            self.w_b1 = self.w_b1 + np.where(at_b1, weights, 0)
        src = np.where(c_in <= _IN_PLACE_MAX_CHANNELS, 0, c_in * h * h)
        big = np.stack([weights * e >= _MMAP_MIN_BYTES for e in _E_LEVELS]) * weights
        if below16:
            classes = {"b16": True}
        else:
            classes = {"any": ~np.asarray(at_b1), "b2": np.asarray(at_b1)}
        for c, member in classes.items():
            self.copies[c] += [np.where(member, src, 0), np.where(member, out, 0)]
            self.big_w[c] = self.big_w[c] + np.where(member, big, 0)
        self.params = self.params + weights
        self.weight_max = np.maximum(self.weight_max, weights)
        self.n_conv += 1
        cols = _conv_workspace_elems(1, c_in, h, h, k, k, h_out, h_out, (s, s), (p, p))
        self.points.append((live + out, 0, 0, cols))
        self.acts.append(out)
        return h_out, out

    def bn(self, live: Any, channels: Any, size: Any) -> None:
        # live includes the BN input; the output is a new tensor of the same size
        self.params = self.params + 2 * channels
        self.bn_channels = self.bn_channels + channels
        self.n_bn += 1
        self.points.append((live + size, 0, _BN_TEMP_BYTES_PER_CHANNEL * channels, 0))
        self.acts.append(size)

    def stacked(self) -> tuple[np.ndarray, ...]:
        """The points as four (n_points, m) int64 arrays."""
        return tuple(
            np.stack([np.broadcast_to(np.asarray(v, dtype=np.int64), (self.m,)) for v in col])
            for col in zip(*self.points)
        )


def _simulate(
    family: str, depth: int, widths: Sequence[float], resolutions: Sequence[int]
) -> list[dict[str, Any]]:
    """Closed-form quantities of the ResNets (family, depth, widths[i], resolutions[i])."""
    layout = stage_layout(family, depth)
    m = len(widths)
    chans = np.array([stage_channels(w, len(layout)) for w in widths], dtype=np.int64).T
    res = np.asarray(resolutions, dtype=np.int64)
    expansion = EXPANSION[family]
    sim = _ArchSim(m)
    # stem: conv 7x7/2 -> BN -> ReLU_ -> max-pool 3x3/2 (indices allocated and dropped)
    h, stem = sim.conv(0, 3, chans[0], 7, 2, 3, res)
    sim.bn(stem, chans[0], stem)  # conv output + BN output
    h_pool = (h + 2 - 3) // 2 + 1
    pooled = chans[0] * h_pool * h_pool
    sim.points.append((stem + pooled, pooled, 0, 0))
    sim.acts.append(pooled)
    # stages: ResNet.forward's `x` keeps the pooled stem output alive through every stage, the
    # outer Sequential keeps each stage's input alive through that stage, the inner Sequential
    # keeps each block's input alive through that block.
    h = h_pool
    c_in = chans[0]
    stage_in = pooled
    for s, n_blocks in enumerate(layout):
        planes = chans[s]
        base_stage = pooled + (stage_in if s > 0 else 0)
        block_in = stage_in
        for j in range(n_blocks):
            stride = 2 if (s > 0 and j == 0) else 1
            base = base_stage + (block_in if j > 0 else 0)
            c_out = planes * expansion
            h_out = (h - 1) // stride + 1
            # the downsample exists in the same blocks for every width (channels grow by
            # stage, and a bottleneck's first block expands)
            if stride != 1 or (s == 0 and j == 0 and expansion != 1):
                _, o = sim.conv(base, c_in, c_out, 1, stride, 0, h)  # conv 1x1/stride + BN
                sim.bn(base + o, c_out, o)
                base = base + o  # the identity
            if family == "basic":
                _, o = sim.conv(base, c_in, planes, 3, stride, 1, h)
                sim.bn(base + o, planes, o)
                _, o2 = sim.conv(base + o, planes, planes, 3, 1, 1, h_out)
                sim.bn(base + o + o2, planes, o2)  # conv1's BN output still bound to `out`
                out = o2
            else:
                _, m1 = sim.conv(base, c_in, planes, 1, 1, 0, h)
                sim.bn(base + m1, planes, m1)
                _, m2 = sim.conv(base + m1, planes, planes, 3, stride, 1, h)
                sim.bn(base + m1 + m2, planes, m2)
                _, o = sim.conv(base + m2, planes, c_out, 1, 1, 0, h_out)
                sim.bn(base + m2 + o, c_out, o)
                out = o
            block_in = out
            c_in = c_out
            h = h_out
        stage_in = block_in
    # head: x = final stage output (the pooled stem output is released); mean over H, W;
    # flatten (a view); linear (x and the pooled vector still alive)
    final = stage_in
    sim.points.append((final + c_in, 0, 0, 0))
    sim.acts.append(c_in)
    sim.points.append((final + c_in + NUM_CLASSES, 0, 0, 0))
    sim.acts.append(np.full(m, NUM_CLASSES, dtype=np.int64))
    flops = sim.flops + 2 * c_in * NUM_CLASSES
    params = sim.params + c_in * NUM_CLASSES + NUM_CLASSES
    weight_max = np.maximum(sim.weight_max, c_in * NUM_CLASSES)
    acts = np.stack(np.broadcast_arrays(*sim.acts))
    floats, index, const, cols = sim.stacked()
    # per element size: the exact batch-1 peak, and the few (slope, intercept) lines whose
    # maximum is the peak for every batch >= 2
    peak1, lines = [], []
    for e in _E_LEVELS:
        slope = floats * e + _INDEX_BYTES * index
        peak1.append((slope + const + cols * e).max(axis=0))
        # the steepest line (highest intercept among ties) is the whole envelope when it is
        # already on top at batch 2; otherwise compute the envelope
        top = slope.max(axis=0)
        top_c = np.where(slope == top, const, -1).max(axis=0)
        alone = top * 2 + top_c >= (slope * 2 + const).max(axis=0)
        lines.append(
            [
                [(int(top[i]), int(top_c[i]))]
                if alone[i]
                else _envelope_lines(slope[:, i], const[:, i])
                for i in range(m)
            ]
        )
    columns = {
        "flops": flops,
        "native_below16": sim.native_below16,
        "native_b1": sim.native_b1,
        "conv_w": sim.conv_w,
        "w_below16": sim.w_below16,
        "w_b1": sim.w_b1,
        "params": params,
        "weight_max": weight_max,
        "bn_channels": sim.bn_channels,
        "input": 3 * res * res,
        "pool_in": np.broadcast_to(stem, (m,)),
        "act_total": acts.sum(axis=0),
        "act_max": acts.max(axis=0),
    }

    def stack(items: list[Any]) -> np.ndarray:
        rows = [np.broadcast_to(np.asarray(v, dtype=np.int64), (m,)) for v in items]
        return np.stack(rows) if rows else np.zeros((0, m), dtype=np.int64)

    # per batch tier (batch 1, 2-15, >= 16) the buffers present: cumulative, since each tier
    # sends more convs to oneDNN
    copies = {g: stack(items) for g, items in sim.copies.items()}
    tier_items = [np.concatenate([acts, copies["any"]])]
    tier_items += [np.concatenate([tier_items[-1], copies["b2"]])]
    tier_items += [np.concatenate([tier_items[-1], copies["b16"]])]
    tier_tables = [_suffix_tables(items) for items in tier_items]
    tier_w = np.cumsum(np.stack([sim.big_w[g] for g in ("any", "b2", "b16")]), axis=0)
    big_w = tier_w.transpose(2, 0, 1).tolist()  # (m, tier, element size)
    lists = {k: v.tolist() for k, v in columns.items()}
    peak1_rows = np.stack(peak1, axis=1).tolist()
    fixed = {
        "n_conv": sim.n_conv,
        "n_bn": sim.n_bn,
        "n_linear": 1,
        "n_blocks": sum(layout),
        "n_stages": len(layout),
    }
    return [
        {
            **{k: v[i] for k, v in lists.items()},
            **fixed,
            "peak1": peak1_rows[i],
            "mmap": [t[i] for t in tier_tables],
            "big_w": big_w[i],
            "lines": [lines[li][i] for li in range(len(_E_LEVELS))],
        }
        for i in range(m)
    ]


def _suffix_tables(sizes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per column of ``sizes`` (n_items, m): its distinct positive sizes ascending, and for
    each the sum of all sizes at least as large (one trailing 0): what
    :func:`_sum_at_least` looks up."""
    v = np.sort(sizes, axis=0)
    suffix = np.cumsum(v[::-1], axis=0)[::-1]
    keep = v > 0
    keep[1:] &= v[1:] != v[:-1]  # the first of equal sizes carries the sum of all of them
    return [(v[keep[:, i], i], np.append(suffix[keep[:, i], i], 0)) for i in range(sizes.shape[1])]


_TABLE_STRIDE = 2**40  # above any per-sample element count; < 2**23 tables fit in int64


def _sum_at_least(
    tables: Sequence[tuple[np.ndarray, np.ndarray]], table_id: np.ndarray, min_size: np.ndarray
) -> np.ndarray:
    """Per row, the sum of the sizes in ``tables[table_id]`` that are >= ``min_size``
    (vectorized: one search over all tables laid end to end, offset by table)."""
    if not len(table_id):
        return np.zeros(0, dtype=np.int64)
    lengths = np.array([len(v) for v, _ in tables], dtype=np.int64)
    offsets = np.repeat(np.arange(len(tables), dtype=np.int64) * _TABLE_STRIDE, lengths)
    keys = np.concatenate([v for v, _ in tables]) + offsets
    suffix = np.concatenate([sfx for _, sfx in tables])
    limit = np.minimum(min_size, _TABLE_STRIDE - 1)
    pos = np.searchsorted(keys, table_id * _TABLE_STRIDE + limit, side="left")
    return suffix[pos + table_id]  # each table's suffix has one extra entry


def _envelope_lines(
    slope: np.ndarray, intercept: np.ndarray, x_min: int = 2
) -> list[tuple[int, int]]:
    """The lines ``slope * x + intercept`` whose maximum is the maximum of all, for x >= x_min.

    Exact integer arithmetic: first the Pareto set (no other line has both a larger-or-equal
    slope and intercept), then its upper convex hull, then only the hull lines that are on
    top somewhere at or beyond ``x_min``. Usually one or two lines remain.
    """
    order = np.lexsort((-intercept, -slope))  # slope descending, then intercept descending
    c = intercept[order]
    prior_best = np.maximum.accumulate(np.concatenate(([-1], c[:-1])))
    keep = order[c > prior_best]
    # slopes now distinct; ascending slope means descending intercept
    pareto = sorted(zip(slope[keep].tolist(), intercept[keep].tolist()))
    hull: list[tuple[int, int]] = []
    for s, b in pareto:
        while len(hull) >= 2:
            (s1, b1), (s2, b2) = hull[-2], hull[-1]
            # the middle line is never strictly on top if the new one overtakes the first
            # no later than the middle one does
            if (b1 - b) * (s2 - s1) <= (b1 - b2) * (s - s1):
                hull.pop()
            else:
                break
        hull.append((s, b))
    while len(hull) >= 2:
        (s1, b1), (s2, b2) = hull[0], hull[1]
        if b1 - b2 <= x_min * (s2 - s1):  # the second overtakes the first by x_min
            hull.pop(0)
        else:
            break
    return hull


_ARCH_CACHE: dict[tuple[str, int, float, int], dict[str, Any]] = {}
_ARCH_CACHE_MAX = 200_000


def _archs(keys: Sequence[tuple[str, int, float, int]]) -> list[dict[str, Any]]:
    """Closed-form rows of architectures (family, depth, width, resolution), cached."""
    todo = [key for key in keys if key not in _ARCH_CACHE]
    if todo and len(_ARCH_CACHE) + len(todo) > _ARCH_CACHE_MAX:
        _ARCH_CACHE.clear()  # bounded memory; a frame's own architectures always fit
        todo = list(keys)
    missing: dict[tuple[str, int], list[tuple[float, int]]] = {}
    for key in dict.fromkeys(todo):
        missing.setdefault(key[:2], []).append(key[2:])
    for (family, depth), rest in missing.items():
        widths, resolutions = zip(*rest)
        for (width, res), row in zip(rest, _simulate(family, depth, widths, resolutions)):
            _ARCH_CACHE[(family, depth, width, res)] = row
    return [_ARCH_CACHE[key] for key in keys]


def _derive(
    flops: np.ndarray,
    params: np.ndarray,
    e: np.ndarray,
    weight_max: np.ndarray,
    input_bytes: np.ndarray,
    act_total_bytes: np.ndarray,
    act_max_bytes: np.ndarray,
    peak_bytes: np.ndarray,
) -> dict[str, np.ndarray]:
    """Derived float columns from exact integers (shared by both paths, so they agree)."""
    param_bytes = params * e
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = flops / (param_bytes + input_bytes + act_total_bytes)
        log_fpp = np.log(flops / params)
    return {
        "param_mb": param_bytes / _MB,
        "weight_mb_max": weight_max * e / _MB,
        "input_mb": input_bytes / _MB,
        "act_mb_total": act_total_bytes / _MB,
        "act_mb_max": act_max_bytes / _MB,
        "compute_intensity": intensity,
        "log_flops_per_param": log_fpp,
        "tensor_peak_mb": peak_bytes / _MB,
    }


def _required_columns(frame: pd.DataFrame) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise ConfigError(
            f"compute_features needs a DataFrame of configs: expected a pandas DataFrame with "
            f"columns family, depth, width, resolution, batch_size[, precision], got "
            f"{type(frame).__name__}. Use space.grid() or space.read_configs()."
        )
    required = ("family", "depth", "width", "resolution", "batch_size")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"configs frame lacks column(s) {missing}: expected {list(required)} (precision "
            f"optional, default fp32), got {list(frame.columns)}. Add the missing columns."
        )


def _codes(column: pd.Series, what: str, kind: type | None = None) -> tuple[np.ndarray, Any]:
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    if (codes < 0).any():
        row = int(np.flatnonzero(codes < 0)[0])
        raise ConfigError(
            f"missing {what} at row {row}: expected a value in every row, got "
            f"{column.iloc[row]!r}. Fill in the cell."
        )
    if kind is not None:
        try:
            values = np.asarray(uniques, dtype=float)
        except (TypeError, ValueError):
            bad = next(v for v in uniques if not _is_number(v))
            raise ConfigError(
                f"non-numeric {what}: expected numbers, got {bad!r}. Fix the column."
            ) from None
        if not np.isfinite(values).all() or (values <= 0).any():
            bad = values[~(np.isfinite(values) & (values > 0))][0]
            raise ConfigError(
                f"invalid {what}: expected positive numbers, got {bad!r}. Use values > 0."
            )
        if kind is int and (values != np.round(values)).any():
            bad = values[values != np.round(values)][0]
            raise ConfigError(f"invalid {what}: expected whole numbers, got {bad!r}. Use integers.")
        uniques = values
    return codes.astype(np.int64, copy=False), uniques


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def compute_features(frame: pd.DataFrame) -> pd.DataFrame:
    """Architecture features of every config in ``frame``, vectorized.

    ``frame`` needs the columns family, depth, width, resolution and batch_size; precision is
    optional (default fp32); so is runtime: on rows whose runtime is not ``torch`` the PyTorch
    dispatch columns ``native_conv_flops`` and ``onednn_weight_mb`` are 0 (other runtimes have
    their own kernels). Returns a DataFrame with ``frame``'s index and the columns
    :data:`FEATURE_COLUMNS` (see the module docstring for definitions; ``flops``, ``params``,
    the ``n_*`` counts are int64, the rest float64).
    Raises :class:`~carb_nas.errors.ConfigError` on unknown families or precisions, invalid
    depths or non-positive sizes.
    """
    _required_columns(frame)
    n = len(frame)
    fam_c, fam_u = _codes(frame["family"], "family")
    fam_u = [str(f) for f in fam_u]
    for f in fam_u:
        if f not in FAMILIES:
            raise ConfigError(
                f"unknown family: expected one of {list(FAMILIES)}, got {f!r}. "
                "Use 'basic' or 'bottleneck'."
            )
    dep_c, dep_u = _codes(frame["depth"], "depth", int)
    wid_c, wid_u = _codes(frame["width"], "width", float)
    res_c, res_u = _codes(frame["resolution"], "resolution", int)
    if "precision" in frame.columns:
        pre_c, pre_u = _codes(frame["precision"], "precision")
    else:
        pre_c, pre_u = np.zeros(n, dtype=np.int64), np.array(["fp32"], dtype=object)
    e_of = []
    for p in list(pre_u):
        if p not in ELEMENT_BYTES:
            raise ConfigError(
                f"unsupported precision: expected one of {list(PRECISIONS)}, got {p!r}. "
                "Use one of those names."
            )
        e_of.append(ELEMENT_BYTES[p])
    bcol = frame["batch_size"]
    if bcol.dtype.kind in "iu":
        batch = bcol.to_numpy(dtype=np.int64)
        if n and batch.min() <= 0:
            raise ConfigError(
                f"invalid batch_size: expected positive integers, got {int(batch.min())}. "
                "Use batch sizes >= 1."
            )
    else:
        _codes(bcol, "batch_size", int)  # validates: numeric, positive, whole
        batch = bcol.to_numpy(dtype=float).astype(np.int64)

    # one id per unique architecture
    key = ((fam_c * len(dep_u) + dep_c) * len(wid_u) + wid_c) * len(res_u) + res_c
    arch_id, arch_keys = pd.factorize(key)
    n_arch = len(arch_keys)
    res_k = arch_keys % len(res_u)
    rest = arch_keys // len(res_u)
    wid_k = rest % len(wid_u)
    rest //= len(wid_u)
    dep_k = rest % len(dep_u)
    fam_k = rest // len(dep_u)
    width_canon = [float(_canonical_width(w)) for w in wid_u]
    keys = []
    for a in range(n_arch):
        res = int(res_u[res_k[a]])
        if res < 32:
            raise ConfigError(
                f"invalid resolution: expected >= 32 pixels (the stem and four stride-2 stages "
                f"need it), got {res}. Use a resolution of at least 32."
            )
        keys.append((fam_u[fam_k[a]], int(dep_u[dep_k[a]]), width_canon[wid_k[a]], res))
    rows = _archs(keys)

    def table(name: str) -> np.ndarray:
        return np.fromiter((r[name] for r in rows), dtype=np.int64, count=n_arch)

    # per (architecture, element size) peak tables, padded to the longest line set
    n_lines = max((len(ls) for r in rows for ls in r["lines"]), default=1)
    slopes = np.zeros((n_arch, len(_E_LEVELS), n_lines), dtype=np.int64)
    icpts = np.zeros_like(slopes)
    peak1 = np.zeros((n_arch, len(_E_LEVELS)), dtype=np.int64)
    for a, r in enumerate(rows):
        peak1[a] = r["peak1"]
        for li, ls in enumerate(r["lines"]):
            arr = np.array(ls + [ls[0]] * (n_lines - len(ls)), dtype=np.int64)
            slopes[a, li], icpts[a, li] = arr[:, 0], arr[:, 1]
    e_level = np.array([_E_LEVELS.index(e) for e in e_of], dtype=np.int64)[pre_c]
    e = np.array(e_of, dtype=np.int64)[pre_c]

    flops_a, params_a = table("flops"), table("params")
    bn_ch_a, n_bn_a = table("bn_channels"), table("n_bn")
    params = params_a[arch_id]
    flops = flops_a[arch_id] * batch
    act_total = table("act_total")[arch_id] * batch * e
    act_max = table("act_max")[arch_id] * batch * e
    input_bytes = table("input")[arch_id] * batch * e
    pool_in = table("pool_in")[arch_id] * batch * e
    n_bn = n_bn_a[arch_id]
    # resident: parameters + BN running stats (+ an int64 counter per BN) + input
    resident = (params + 2 * bn_ch_a[arch_id]) * e + _INDEX_BYTES * n_bn + input_bytes
    flat = arch_id * len(_E_LEVELS) + e_level
    slopes, icpts = slopes.reshape(-1, n_lines), icpts.reshape(-1, n_lines)
    extra = slopes[flat, 0] * batch + icpts[flat, 0]
    for li in range(1, n_lines):
        np.maximum(extra, slopes[flat, li] * batch + icpts[flat, li], out=extra)
    extra = np.where(batch == 1, peak1.reshape(-1)[flat], extra)
    native = table("native_below16")[arch_id] * batch * (batch <= _NATIVE_1X1_MAX_BATCH)
    native += table("native_b1")[arch_id] * (batch == 1)
    onednn_w = table("conv_w")[arch_id] - table("w_b1")[arch_id] * (batch == 1)
    onednn_w -= table("w_below16")[arch_id] * (batch <= _NATIVE_1X1_MAX_BATCH)
    # buffers of >= 32 MiB: per-sample sizes x with x * batch * e >= the threshold, plus the
    # reordered weights; each class only at the batches that send its convs to oneDNN
    min_size = -(-_MMAP_MIN_BYTES // (batch * e))
    tier = (batch >= 2).astype(np.int64) + (batch > _NATIVE_1X1_MAX_BATCH)
    per_sample = _sum_at_least(
        [t for r in rows for t in r["mmap"]], arch_id * _N_TIERS + tier, min_size
    )
    big_w = np.array([r["big_w"] for r in rows], dtype=np.int64)
    big_w = big_w.reshape(n_arch, _N_TIERS, len(_E_LEVELS))
    mmap_elems = per_sample * batch + big_w[arch_id, tier, e_level]
    mmap = mmap_elems * e
    if "runtime" in frame.columns:
        torch_rows = frame["runtime"].astype(str).to_numpy() == "torch"
        native, onednn_w = np.where(torch_rows, native, 0), np.where(torch_rows, onednn_w, 0)
        mmap = np.where(torch_rows, mmap, 0)
    out = {
        "flops": flops,
        "native_conv_flops": native,
        "onednn_weight_mb": onednn_w * e / _MB,
        "mmap_mb": mmap / _MB,
        "params": params,
    }
    weight_max = table("weight_max")[arch_id]
    out.update(
        _derive(flops, params, e, weight_max, input_bytes, act_total, act_max, resident + extra)
    )
    out["pool_in_mb"] = pool_in / _MB
    out["n_conv"] = table("n_conv")[arch_id]
    out["n_bn"] = n_bn
    out["n_linear"] = table("n_linear")[arch_id]
    out["n_blocks"] = table("n_blocks")[arch_id]
    out["n_stages"] = table("n_stages")[arch_id]
    # copy=False: the columns are fresh arrays; consolidating them would only copy
    return pd.DataFrame({k: out[k] for k in FEATURE_COLUMNS}, index=frame.index, copy=False)


# -- meta-device tracing -------------------------------------------------------------------
_CONV_OPS = {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose2d"}
_BN_OPS = {
    "batch_norm",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
    "_batch_norm_impl_index",
    "_batch_norm_with_update",
    "_batch_norm_no_update",
}
_LINEAR_OPS = {"linear", "addmm", "mm", "matmul", "bmm"}
_ADD_OPS = {"add", "add_"}
_MAX_POOL_OPS = {"max_pool2d", "max_pool2d_with_indices"}


def _op_name(func: Any) -> str:
    return func._schema.name.split("::")[-1]


def _conv2d_geometry(name: str, args: tuple, kwargs: dict, out: Any) -> dict[str, Any] | None:
    """Shapes and parameters of a plain (not transposed, numeric padding) 2-D convolution op."""
    if name not in ("conv2d", "convolution", "_convolution"):
        return None
    x, w = args[0], args[1]
    if x.dim() != 4 or w.dim() != 4 or not isinstance(out, torch.Tensor) or out.dim() != 4:
        return None
    stride, padding = (
        _arg(args, kwargs, 3, "stride", (1, 1)),
        _arg(args, kwargs, 4, "padding", (0, 0)),
    )
    dilation = _arg(args, kwargs, 5, "dilation", (1, 1))
    if name == "conv2d":
        groups, transposed = _arg(args, kwargs, 6, "groups", 1), False
    else:
        transposed, groups = (
            _arg(args, kwargs, 6, "transposed", False),
            _arg(args, kwargs, 8, "groups", 1),
        )
    if transposed or isinstance(padding, str):
        return None
    return {
        "x": tuple(x.shape),
        "k": (int(w.shape[2]), int(w.shape[3])),
        "out": tuple(out.shape),
        "stride": _pair(stride),
        "padding": _pair(padding),
        "dilated": any(d != 1 for d in _pair(dilation)),
        "groups": int(groups),
        "flops": 2 * out.numel() * int(w.shape[1]) * int(w.shape[2]) * int(w.shape[3]),
        "weights": w.numel(),
    }


def _is_native_conv(g: dict[str, Any]) -> bool:
    """Whether eager PyTorch runs a conv (``_conv2d_geometry``) natively on one thread."""
    n, c, h, wd = g["x"]
    below16, at_b1 = _native_conv_kind(c, h, wd, *g["k"], g["stride"], g["groups"])
    return (below16 and not g["dilated"] and n <= _NATIVE_1X1_MAX_BATCH) or (bool(at_b1) and n == 1)


def _op_workspace_bytes(name: str, args: tuple, kwargs: dict, out: Any, elem: int) -> int:
    """Bytes a CPU eager kernel allocates internally (and frees) beyond its outputs."""
    g = _conv2d_geometry(name, args, kwargs, out)
    if g is not None:
        if g["dilated"]:
            return 0
        n, c, h, wd = g["x"]
        cols = _conv_workspace_elems(
            n, c, h, wd, *g["k"], *g["out"][2:], g["stride"], g["padding"], g["groups"]
        )
        return int(cols) * elem
    if name in _BN_OPS:
        training = _arg(args, kwargs, 5, "training", False)
        if name in ("_native_batch_norm_legit_no_training", "_batch_norm_no_update"):
            training = False
        if not training and args[0].dim() >= 2:
            return _BN_TEMP_BYTES_PER_CHANNEL * int(args[0].shape[1])
        return 0
    if name == "max_pool2d" and isinstance(out, torch.Tensor):
        return _INDEX_BYTES * out.numel()  # CPU computes indices, then drops them
    return 0


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def _pair(v: Any) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    return v * 2 if len(v) == 1 else v


class _ForwardTracer(TorchDispatchMode):
    """Tracks live tensor bytes (via storage lifetimes), activations and layer counts."""

    def __init__(self, elem_bytes: int, resident: list[torch.Tensor]) -> None:
        super().__init__()
        self.elem = elem_bytes
        self.live = 0
        self.peak = 0
        self.act_total = 0
        self.act_max = 0
        self.native_conv_flops = 0
        self.onednn_weight_bytes = 0
        self.mmap_bytes = 0
        self.pool_in_bytes = 0
        self.counts = {"conv": 0, "bn": 0, "linear": 0}
        self.residual_shapes: list[tuple[int, ...]] = []
        self._known: dict[int, weakref.ref] = {}
        for t in resident:
            st = t.untyped_storage()
            self._known[id(st)] = weakref.ref(st)

    def _nbytes(self, t: torch.Tensor, st: torch.UntypedStorage) -> int:
        if t.is_floating_point():
            return st.nbytes() // t.element_size() * self.elem
        return st.nbytes()

    def _free(self, key: int, nbytes: int) -> None:
        self._known.pop(key, None)
        self.live -= nbytes

    @staticmethod
    def _shortcut(name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
        """Meta results of shape-preserving ops, without their slow Python decompositions."""
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or x.device.type != "meta":
            return None
        if name == "batch_norm" and not _arg(args, kwargs, 5, "training", False):
            return torch.empty_like(x)
        if name == "relu_":
            return x
        if name == "add_" and not kwargs and len(args) == 2:
            other = args[1]
            if (
                isinstance(other, torch.Tensor)
                and other.shape == x.shape
                and other.dtype == x.dtype
            ):
                return x
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = _op_name(func)
        out = self._shortcut(name, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if name in _BN_OPS:
            outs = outs[:1]  # eval BN statistics outputs are empty on CPU
        for t in outs:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            key = id(st)
            ref = self._known.get(key)
            if ref is not None and ref() is st:
                continue
            nbytes = self._nbytes(t, st)
            self._known[key] = weakref.ref(st, lambda _r, k=key, b=nbytes: self._free(k, b))
            self.live += nbytes
            if t.is_floating_point():
                self.act_total += nbytes
                self.act_max = max(self.act_max, nbytes)
                self.mmap_bytes += _mmapped(nbytes)
        ws = _op_workspace_bytes(name, args, kwargs, outs[0] if outs else None, self.elem)
        if name in _MAX_POOL_OPS:
            self.pool_in_bytes += args[0].numel() * self.elem
        g = _conv2d_geometry(name, args, kwargs, outs[0] if outs else None)
        if g is not None:
            if _is_native_conv(g):
                self.native_conv_flops += g["flops"]
            else:
                self.onednn_weight_bytes += g["weights"] * self.elem
                c_in = g["x"][1]
                src = 0 if c_in <= _IN_PLACE_MAX_CHANNELS else math.prod(g["x"])
                for elems in (g["weights"], src, math.prod(g["out"])):
                    self.mmap_bytes += _mmapped(elems * self.elem)
        self.peak = max(self.peak, self.live + ws)
        if name in _CONV_OPS:
            self.counts["conv"] += 1
        elif name in _BN_OPS:
            self.counts["bn"] += 1
        elif name in _LINEAR_OPS:
            self.counts["linear"] += 1
        elif name in _ADD_OPS and len(args) >= 2:
            a, b = args[0], args[1]
            if (
                isinstance(a, torch.Tensor)
                and isinstance(b, torch.Tensor)
                and a.dim() >= 2
                and a.shape == b.shape
                and a.is_floating_point()
            ):
                self.residual_shapes.append(tuple(a.shape[1:]))
        return out


def _mmapped(nbytes: int) -> int:
    return nbytes if nbytes >= _MMAP_MIN_BYTES else 0


def _resolve_dtype(dtype: torch.dtype | str) -> tuple[torch.dtype, int]:
    names = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if isinstance(dtype, str):
        if dtype == "int8":
            return torch.float32, 1
        if dtype not in names:
            raise ConfigError(
                f"unsupported precision: expected one of {list(PRECISIONS)} or a torch float "
                f"dtype, got {dtype!r}. Use one of those."
            )
        dtype = names[dtype]
    if dtype == torch.int8:
        return torch.float32, 1
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ConfigError(
            f"unsupported dtype: expected a floating torch dtype (torch.float32, torch.float16, "
            f"torch.bfloat16) or torch.int8, got {dtype!r}. Pass one of those."
        )
    return dtype, torch.empty((), dtype=dtype).element_size()


def trace_features(
    module: nn.Module,
    input_shape: Sequence[int],
    dtype: torch.dtype | str = torch.float32,
) -> dict[str, float | int]:
    """Features of ``module`` for one input batch of ``input_shape``, traced on the meta device.

    The module may live on any device: its parameters and buffers are swapped for meta tensors
    of the same shapes during the call (nothing is copied, allocated or computed) and the
    module is run in eval mode under ``torch.inference_mode``; its state is restored after.
    ``dtype`` is the precision (a torch float dtype, ``torch.int8`` or a name such as
    ``"fp16"``; int8 counts floating tensors at 1 byte per element). Returns a dict with the
    keys :data:`FEATURE_COLUMNS` (defined in the module docstring); ``flops`` are those of
    ``FlopCounterMode`` over the whole batch.
    """
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(module, nn.Module):
        raise ConfigError(
            f"trace_features needs a torch.nn.Module: expected a module, got "
            f"{type(module).__name__}. Pass the model object."
        )
    shape = tuple(int(s) for s in input_shape)
    if not shape or any(s <= 0 for s in shape):
        raise ConfigError(
            f"invalid input shape: expected positive sizes such as (batch, 3, 224, 224), got "
            f"{tuple(input_shape)!r}. Pass the shape of one input batch."
        )
    cdtype, elem = _resolve_dtype(dtype)

    def meta_like(t: torch.Tensor) -> torch.Tensor:
        return torch.empty(
            t.shape, device="meta", dtype=cdtype if t.is_floating_point() else t.dtype
        )

    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    swapped = {k: meta_like(v) for k, v in {**params, **buffers}.items()}
    resident_bytes = sum(
        (t.numel() * elem if t.is_floating_point() else t.numel() * t.element_size())
        for t in swapped.values()
    )
    n_params = sum(t.numel() for t in params.values())
    weight_max = max((t.numel() for t in params.values() if t.is_floating_point()), default=0)
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        x = torch.empty(shape, device="meta", dtype=cdtype)
        tracer = _ForwardTracer(elem, [x, *swapped.values()])
        # the tracer is entered last, so it sees each op first and passes it on to the counter
        with torch.inference_mode(), FlopCounterMode(display=False) as counter, tracer:
            out = torch.func.functional_call(module, swapped, (x,))
        del out
        flops = int(counter.get_total_flops())
    finally:
        for m, training in modes.items():
            m.training = training
    input_bytes = math.prod(shape) * elem
    resident_bytes += input_bytes
    derived = _derive(
        np.array([flops], dtype=np.int64),
        np.array([n_params], dtype=np.int64),
        np.array([elem], dtype=np.int64),
        np.array([weight_max], dtype=np.int64),
        np.array([input_bytes], dtype=np.int64),
        np.array([tracer.act_total], dtype=np.int64),
        np.array([tracer.act_max], dtype=np.int64),
        np.array([resident_bytes + tracer.peak], dtype=np.int64),
    )
    result: dict[str, float | int] = {
        "flops": flops,
        "native_conv_flops": tracer.native_conv_flops,
        "onednn_weight_mb": tracer.onednn_weight_bytes / _MB,
        "mmap_mb": tracer.mmap_bytes / _MB,
        "pool_in_mb": tracer.pool_in_bytes / _MB,
        "params": n_params,
    }
    result.update({k: float(v[0]) for k, v in derived.items()})
    result.update(
        n_conv=tracer.counts["conv"],
        n_bn=tracer.counts["bn"],
        n_linear=tracer.counts["linear"],
        n_blocks=len(tracer.residual_shapes),
        n_stages=len(set(tracer.residual_shapes)),
    )
    return {k: result[k] for k in FEATURE_COLUMNS}
