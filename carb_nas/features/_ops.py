"""The per-operator table of any ``nn.Module``, traced on the meta device.

:func:`trace_ops` runs the module once on the meta device, as :func:`trace_features` does and in
the same pass (so the network-level feature columns keep their values), under a
``torch.overrides.TorchFunctionMode`` that records one row per *function-level* operator: a
``torch.nn.functional`` / ``torch`` / ``Tensor`` call that reaches the aten dispatcher
(``F.conv2d``, ``F.batch_norm``, ``x + y``, ``torch.cat``, ``x.flatten(1)``). Those are exactly
the top-level ``aten::`` events the PyTorch profiler records for an eager forward pass
(``aten::conv2d``, ``aten::batch_norm``, ``aten::add_``, ...), which is how
:mod:`carb_nas.measure` matches measured per-op times to this table.

Op kinds (:data:`OP_KINDS`): ``conv`` (dense 2-D convolution, groups 1), ``dwconv`` (depthwise:
groups = input channels), ``gconv`` (other grouped), ``linear``, ``norm``, ``pool``, ``act``,
``add``, ``mul``, ``cat``, ``reshape`` (views and copies that only move data) and ``other``.

Per op (:data:`OP_COLUMNS`): input and output shapes (the first tensor argument, NCHW), kernel,
stride, groups, ``flops`` (2 x multiply-accumulates of convolutions and linear layers, as
``FlopCounterMode`` counts them; 0 elsewhere), ``read_bytes`` (every activation tensor argument,
read once), ``write_bytes`` (the output tensors), ``weight_bytes`` (the parameter and buffer
tensors among the arguments), at the precision's element size, and ``native`` (1 for a
convolution eager PyTorch runs on its native kernels instead of oneDNN, one thread:
``_torch_cpu.is_native_conv``). The rows of one op *signature*
(kind, aten name, shapes, scalars) are computed once and reused (repeated blocks cost a
dictionary lookup), and a whole module's table is cached by its structure, input shape and
precision.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from carb_nas.features import _torch_cpu as torch_cpu
from carb_nas.features._trace import ModuleWalk, clear_layer_cache, run_trace

__all__ = [
    "OP_KINDS",
    "OP_COLUMNS",
    "OP_AGGREGATE_COLUMNS",
    "trace_ops",
    "trace_op_arrays",
    "op_aggregates",
    "op_kind",
    "clear_ops_cache",
]

OP_KINDS = (
    "conv",
    "dwconv",
    "gconv",
    "linear",
    "norm",
    "pool",
    "act",
    "add",
    "mul",
    "cat",
    "reshape",
    "other",
)
OP_COLUMNS = (
    "index",
    "kind",
    "op",
    "batch",
    "c_in",
    "h_in",
    "w_in",
    "c_out",
    "h_out",
    "w_out",
    "kernel",
    "stride",
    "groups",
    "flops",
    "read_bytes",
    "write_bytes",
    "weight_bytes",
    "native",
    "signature",
)
_ROW_COLUMNS = OP_COLUMNS[1:]  # what a recorded row holds (the index is its position)
_TEXT_COLUMNS = frozenset({"kind", "op", "signature"})
#: network-level columns aggregated from the op table (per batch; MB = 1e6 bytes)
OP_AGGREGATE_COLUMNS = (
    "dense_conv_flops",
    "depthwise_flops",
    "grouped_flops",
    "linear_flops",
    "elementwise_mb",
    "concat_mb",
    "norm_mb",
    "act_op_mb",
    "pool_mb",
    "reshape_mb",
    "n_dwconv",
    "n_gconv",
    "n_act",
    "n_elementwise",
    "n_concat",
    "n_ops",
    "onednn_reorder_mb",
)

_NAME_KIND = {
    "conv2d": "conv",
    "conv1d": "conv",
    "conv3d": "conv",
    "linear": "linear",
    "matmul": "linear",
    "mm": "linear",
    "addmm": "linear",
    "bmm": "linear",
    "batch_norm": "norm",
    "layer_norm": "norm",
    "group_norm": "norm",
    "instance_norm": "norm",
    "max_pool2d": "pool",
    "_max_pool2d": "pool",
    "max_pool2d_with_indices": "pool",
    "avg_pool2d": "pool",
    "adaptive_avg_pool2d": "pool",
    "adaptive_max_pool2d": "pool",
    "_adaptive_max_pool2d": "pool",
    "mean": "pool",
    "add": "add",
    "add_": "add",
    "__add__": "add",
    "__iadd__": "add",
    "__radd__": "add",
    "sub": "add",
    "__sub__": "add",
    "mul": "mul",
    "mul_": "mul",
    "__mul__": "mul",
    "__imul__": "mul",
    "__rmul__": "mul",
    "div": "mul",
    "__truediv__": "mul",
    "cat": "cat",
    "concat": "cat",
    "concatenate": "cat",
    "stack": "cat",
    "flatten": "reshape",
    "view": "reshape",
    "reshape": "reshape",
    "permute": "reshape",
    "transpose": "reshape",
    "contiguous": "reshape",
    "squeeze": "reshape",
    "unsqueeze": "reshape",
    "chunk": "reshape",
    "split": "reshape",
    "narrow": "reshape",
    "__getitem__": "reshape",
    "dropout": "reshape",
    "expand": "reshape",
    "expand_as": "reshape",
    "repeat": "reshape",
    "clone": "reshape",
}
_ACTIVATIONS = {
    "relu",
    "relu_",
    "relu6",
    "hardtanh",
    "hardtanh_",
    "hardswish",
    "hardswish_",
    "hardsigmoid",
    "hardsigmoid_",
    "silu",
    "silu_",
    "sigmoid",
    "sigmoid_",
    "tanh",
    "tanh_",
    "gelu",
    "elu",
    "elu_",
    "leaky_relu",
    "leaky_relu_",
    "mish",
    "softmax",
    "log_softmax",
    "clamp",
    "clamp_",
    "clamp_min",
    "clamp_min_",
}


def op_kind(name: str, groups: int = 1, c_in: int = 0) -> str:
    """The op kind of a function-level op name (``conv2d``, ``aten::add_``, ``__add__``);
    a convolution is ``dwconv`` when ``groups`` equals ``c_in`` > 1, ``gconv`` for other
    groups > 1."""
    name = name.split("::")[-1]
    if name not in _ACTIVATIONS and name not in _NAME_KIND and name.endswith("_"):
        name = name[:-1]  # the in-place variant (aten::dropout_, aten::hardswish_)
    if name in _ACTIVATIONS:
        return "act"
    kind = _NAME_KIND.get(name, "other")
    if kind == "conv" and groups > 1:
        return "dwconv" if groups == c_in else "gconv"
    return kind


def _tensors(args: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    stack = [args]
    while stack:
        a = stack.pop()
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            stack.extend(reversed(a))
        elif isinstance(a, dict):
            stack.extend(reversed(list(a.values())))
    return out


def _scalars(args: Any) -> tuple:
    """The non-tensor arguments (strides, paddings, flags): part of an op's signature."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, (int, float, bool, str)) or a is None:
            out.append(a)
        elif isinstance(a, (list, tuple)) and all(isinstance(v, (int, float)) for v in a):
            out.append(tuple(a))
    return tuple(out)


def _dims(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(batch, channels, height, width) of an NCHW (or NC, or N...) shape; 1 where absent."""
    if len(shape) >= 4:  # NCHW (extra middle dims fold into the height)
        return int(shape[0]), int(shape[1]), int(math.prod(shape[2:-1])), int(shape[-1])
    s = [*shape, 1, 1, 1, 1][:4] if shape else [1, 1, 1, 1]
    return int(s[0]), int(s[1]), int(s[2]), int(s[3])


class _OpRecorder(TorchFunctionMode):
    """Records one row per function-level op that reaches the dispatcher (see module doc)."""

    def __init__(self, dispatch_counter: Any, elem: int, weight_ids: set[int]) -> None:
        super().__init__()
        self.counter = dispatch_counter  # the dispatch tracer (its op count tells real ops)
        self.elem = elem
        self.weight_ids = weight_ids
        self.rows: list[dict[str, Any]] = []
        self.cache: dict[tuple, dict[str, Any]] = {}

    def _bytes(self, t: torch.Tensor) -> int:
        return t.numel() * (self.elem if t.is_floating_point() else t.element_size())

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        before = self.counter.n_ops
        out = func(*args, **kwargs)
        if self.counter.n_ops == before:
            return out  # metadata (size, dim, shape) or a no-op: the runtime runs nothing
        name = getattr(func, "__name__", str(func))
        ins = _tensors(args) + _tensors(kwargs)
        outs = _tensors(out)
        sig = (
            name,
            tuple((tuple(t.shape), id(t) in self.weight_ids) for t in ins),
            tuple(tuple(t.shape) for t in outs),
            _scalars(args),
            tuple(sorted((k, v) for k, v in kwargs.items() if not isinstance(v, torch.Tensor))),
        )
        row = self.cache.get(sig)
        if row is None:
            row = self._row(name, args, kwargs, ins, outs)
            row["signature"] = hashlib.sha1(repr(sig).encode()).hexdigest()[:12]
            self.cache[sig] = row
        self.rows.append(row)
        return out

    def _row(self, name: str, args: tuple, kwargs: dict, ins: list, outs: list) -> dict[str, Any]:
        acts = [t for t in ins if id(t) not in self.weight_ids]
        weights = [t for t in ins if id(t) in self.weight_ids]
        x = acts[0] if acts else (ins[0] if ins else None)
        y = outs[0] if outs else None
        n, c, h, w = _dims(tuple(x.shape)) if x is not None else (0, 0, 0, 0)
        _, c2, h2, w2 = _dims(tuple(y.shape)) if y is not None else (0, 0, 0, 0)
        kernel, stride, groups, flops = 0, 0, 1, 0
        if name in ("conv2d", "conv1d", "conv3d") and len(ins) >= 2:
            wt = args[1]
            groups = int(args[6] if len(args) > 6 else kwargs.get("groups", 1))
            st = args[3] if len(args) > 3 else kwargs.get("stride", 1)
            stride = int(st if isinstance(st, int) else st[0])
            kernel = int(wt.shape[-1])
            flops = 2 * (y.numel() if y is not None else 0) * int(math.prod(wt.shape[1:]))
        elif name in ("linear",) and len(ins) >= 2:
            wt = args[1]
            flops = 2 * (y.numel() if y is not None else 0) * int(wt.shape[-1])
        elif name in ("matmul", "mm", "bmm") and len(ins) >= 2 and y is not None:
            flops = 2 * y.numel() * int(ins[0].shape[-1])
        elif name in ("addmm",) and len(ins) >= 3 and y is not None:
            flops = 2 * y.numel() * int(ins[1].shape[-1])
        elif "pool" in name:
            k = args[1] if len(args) > 1 else kwargs.get("kernel_size", 0)
            kernel = int(k if isinstance(k, int) else (k[0] if k else 0))
            s = args[2] if len(args) > 2 else kwargs.get("stride", None)
            if s in (None, []) or (isinstance(s, (list, tuple)) and not s):
                s = kernel
            stride = int(s if isinstance(s, int) else s[0])
        kind = op_kind(name, groups, c)
        native = 0
        if kind in ("conv", "dwconv", "gconv") and x is not None and x.dim() == 4:
            k2 = tuple(int(v) for v in args[1].shape[2:])
            native = int(
                torch_cpu.is_native_conv(tuple(x.shape), k2, (stride, stride), groups, False)
            )
        if kind == "other" and y is not None and x is not None and y.numel() == x.numel():
            kind = "act"  # an unknown shape-preserving op runs like an elementwise kernel
        return {
            "kind": kind,
            "op": name,
            "batch": n,
            "c_in": c,
            "h_in": h,
            "w_in": w,
            "c_out": c2,
            "h_out": h2,
            "w_out": w2,
            "kernel": kernel,
            "stride": stride,
            "groups": groups,
            "flops": int(flops),
            "read_bytes": int(sum(self._bytes(t) for t in acts)),
            "write_bytes": int(sum(self._bytes(t) for t in outs)),
            "weight_bytes": int(sum(self._bytes(t) for t in weights)),
            "native": native,
        }


#: structure key -> [op columns (read-only arrays), the features, the DataFrame once built]
_TABLE_CACHE: dict[tuple, list[Any]] = {}
_TABLE_CACHE_MAX = 256


def trace_ops(
    module: nn.Module,
    input_shape: Sequence[int],
    precision: torch.dtype | str = "fp32",
    *,
    cache: bool = True,
) -> tuple[pd.DataFrame, dict[str, float | int]]:
    """The per-operator table of ``module`` for one input batch, and its network features.

    Returns ``(ops, features)``: ``ops`` a DataFrame with :data:`OP_COLUMNS`, one row per
    function-level op in execution order (see the module docstring); ``features`` the
    :func:`trace_features` dict (same values) plus :data:`OP_AGGREGATE_COLUMNS`. Raises
    ``ConfigError`` for a non-module or a bad shape, ``TraceError`` when the module cannot
    run on the meta device. ``cache``: reuse the table of a module of the same structure
    (``_trace.ModuleWalk``: classes, attributes, tensor shapes, children), input shape and
    precision (a class's code is assumed not to change while the class object lives).
    """
    entry = _traced(module, input_shape, precision, cache)
    if entry[2] is None:
        entry[2] = _frame(entry[0])
    return entry[2].copy(), dict(entry[1])


def trace_op_arrays(
    module: nn.Module,
    input_shape: Sequence[int],
    precision: torch.dtype | str = "fp32",
) -> tuple[Mapping[str, np.ndarray], dict[str, float | int]]:
    """:func:`trace_ops` without the DataFrame (what a prediction needs, cached alike):
    ``(columns, features)``, ``columns`` each of :data:`OP_COLUMNS` as a read-only numpy
    array (``kind``, ``op``, ``signature``: objects; the others: int64), in the table's row
    order; the values of ``trace_ops``' table. Building the frame and reading its columns
    back cost more than a warm trace of a network's new layers (``benchmarks/any_cnn.py``)."""
    entry = _traced(module, input_shape, precision, True)
    return dict(entry[0]), dict(entry[1])


def _traced(
    module: nn.Module, input_shape: Sequence[int], precision: torch.dtype | str, cache: bool
) -> list[Any]:
    """The :data:`_TABLE_CACHE` entry of one trace (traced now on a miss)."""
    shape = tuple(int(s) for s in input_shape) if _is_shape(input_shape) else input_shape
    key = None
    walk = ModuleWalk(module) if isinstance(module, nn.Module) else None
    if cache and walk is not None and isinstance(shape, tuple):
        key = (walk.structure, shape, str(precision))
        hit = _TABLE_CACHE.get(key)
        if hit is not None:
            return hit
    holder: dict[str, Any] = {}

    def make_mode(tracer: Any, elem: int, weight_ids: set[int]) -> _OpRecorder:
        holder["rec"] = _OpRecorder(tracer, elem, weight_ids)
        return holder["rec"]

    features = run_trace(module, shape, precision, extra_mode=make_mode, walk=walk)
    rows = holder["rec"].rows
    # column by column, the numbers as int64 arrays (a frame from a list of dicts costs
    # several times more); the aggregates from the same arrays
    data: dict[str, np.ndarray] = {"index": np.arange(len(rows), dtype=np.int64)}
    for c in _ROW_COLUMNS:
        col = [r[c] for r in rows]
        if c in _TEXT_COLUMNS:
            arr = np.empty(len(col), dtype=object)
            arr[:] = col
        else:
            arr = np.array(col, dtype=np.int64)
        data[c] = arr
    for arr in data.values():
        arr.flags.writeable = False  # shared by every later hit of the cache
    if rows:
        aggregates = _aggregates(data["kind"], data)
    else:
        aggregates = op_aggregates(_frame(data))
    entry = [data, {**features, **aggregates}, None]
    if key is not None:
        if len(_TABLE_CACHE) >= _TABLE_CACHE_MAX:
            _TABLE_CACHE.pop(next(iter(_TABLE_CACHE)))
        _TABLE_CACHE[key] = entry
    return entry


def _frame(data: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The op table of :func:`_traced`'s columns (text columns from lists, as pandas infers
    their dtype from strings)."""
    if not len(data["index"]):
        ops = pd.DataFrame([], columns=list(OP_COLUMNS[1:]))
        ops.insert(0, "index", np.arange(0, dtype=np.int64))
        return ops
    cols = {c: (v.tolist() if c in _TEXT_COLUMNS else v) for c, v in data.items()}
    return pd.DataFrame(cols, columns=list(OP_COLUMNS))


def _is_shape(s: Any) -> bool:
    try:
        return all(isinstance(int(v), int) for v in s)
    except (TypeError, ValueError):
        return False


def op_aggregates(ops: pd.DataFrame) -> dict[str, float | int]:
    """The :data:`OP_AGGREGATE_COLUMNS` of an op table (per batch; MB = 1e6 bytes)."""
    cols = {c: ops[c].to_numpy() for c in _AGGREGATED}
    return _aggregates(ops["kind"].to_numpy(), cols)


_AGGREGATED = ("read_bytes", "write_bytes", "flops", "native", "batch", "weight_bytes")


def _aggregates(kind: np.ndarray, cols: Mapping[str, Any]) -> dict[str, float | int]:
    """:func:`op_aggregates` of the op kinds and the :data:`_AGGREGATED` columns (arrays)."""
    moved = (cols["read_bytes"] + cols["write_bytes"]).astype(float) / 1e6
    flops = np.asarray(cols["flops"]).astype(np.int64)

    def s(mask: np.ndarray, v: np.ndarray) -> float:
        return float(v[mask].sum())

    elementwise = np.isin(kind, ("add", "mul"))
    return {
        "dense_conv_flops": int(flops[kind == "conv"].sum()),
        "depthwise_flops": int(flops[kind == "dwconv"].sum()),
        "grouped_flops": int(flops[kind == "gconv"].sum()),
        "linear_flops": int(flops[kind == "linear"].sum()),
        "elementwise_mb": s(elementwise, moved),
        "concat_mb": s(kind == "cat", moved),
        "norm_mb": s(kind == "norm", moved),
        "act_op_mb": s(kind == "act", moved),
        "pool_mb": s(kind == "pool", moved),
        "reshape_mb": s(kind == "reshape", moved),
        "n_dwconv": int((kind == "dwconv").sum()),
        "n_gconv": int((kind == "gconv").sum()),
        "n_act": int((kind == "act").sum()),
        "n_elementwise": int(elementwise.sum()),
        "n_concat": int((kind == "cat").sum()),
        "n_ops": len(kind),
        "onednn_reorder_mb": _reorder_mb(kind, cols),
    }


def _reorder_mb(kind: np.ndarray, cols: Mapping[str, Any]) -> float:
    """The largest weight (MB) of a dense or grouped convolution oneDNN runs, at batch >= 2
    (0 at batch 1): oneDNN reorders a convolution's weights into its blocked layout on each
    call, so the copy of the largest one adds to the peak (a cost model learns how much of it)."""
    sel = np.isin(kind, ("conv", "gconv")) & (np.asarray(cols["native"]) == 0)
    sel &= np.asarray(cols["batch"]) >= 2
    weight = np.asarray(cols["weight_bytes"]).astype(float)
    return float(weight[sel].max() / 1e6) if sel.any() else 0.0


def clear_ops_cache(layers: bool = True) -> None:
    """Forget the cached op tables (tests; a module class whose code changed) and, with
    ``layers`` (default), the trace's layer cache too (a cold trace); ``layers=False`` keeps
    the per-layer entries, so a module not seen before but made of seen layers stays warm."""
    _TABLE_CACHE.clear()
    if layers:
        clear_layer_cache()
