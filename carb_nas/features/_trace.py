"""Features of any ``nn.Module`` by running it once on the meta device (no memory, no compute).

:func:`trace_features` gives the same numbers as the closed form on the spaces' ResNets (a
test). Eager PyTorch's CPU behaviour enters through :mod:`._torch_cpu` only; the torch
private APIs the tracer needs come from :mod:`carb_nas._torch_internals`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from carb_nas._torch_internals import (
    dispatch_mode_base,
    flop_formulas,
    global_forward_hooks,
    op_name,
    overload_packet,
    torch_function_disabled,
)
from carb_nas.errors import ConfigError
from carb_nas.features import _torch_cpu as torch_cpu
from carb_nas.features._common import ELEMENT_BYTES, FEATURE_COLUMNS, MB, derive
from carb_nas.space import PRECISIONS

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
# Elementwise activations of the built-in families (ReLU6 is hardtanh): their meta results
# without the slow Python decompositions, which dominate a traced MobileNet's time.
_INPLACE_UNARY = {"hardtanh_", "hardswish_", "silu_", "sigmoid_", "hardsigmoid_", "relu6_"}
_UNARY = {"hardtanh", "hardswish", "silu", "sigmoid", "hardsigmoid", "relu", "relu6", "gelu"}


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


def _op_workspace_bytes(
    name: str, args: tuple, kwargs: dict, out: Any, elem: int, g: dict[str, Any] | None
) -> int:
    """Bytes a CPU eager kernel allocates internally (and frees) beyond its outputs (``g``:
    the op's :func:`_conv2d_geometry`)."""
    if g is not None:
        if g["dilated"]:
            return 0
        n, c, h, wd = g["x"]
        (k_h, k_w), (h_out, w_out) = g["k"], g["out"][2:]
        cols = torch_cpu.conv_workspace_elems(
            n, c, h, wd, k_h, k_w, h_out, w_out, g["stride"], g["padding"], g["groups"]
        )
        return int(cols) * elem
    if name in _BN_OPS:
        training = _arg(args, kwargs, 5, "training", False)
        if name in ("_native_batch_norm_legit_no_training", "_batch_norm_no_update"):
            training = False
        if not training and args[0].dim() >= 2:
            return torch_cpu.BN_TEMP_BYTES_PER_CHANNEL * int(args[0].shape[1])
        return 0
    if name == "max_pool2d" and isinstance(out, torch.Tensor):
        return torch_cpu.INDEX_BYTES * out.numel()  # CPU computes indices, then drops them
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


# FLOPs as ``FlopCounterMode`` counts them (its formulas on the ops a composite decomposes
# into), without its per-module hooks: ops whose decomposition never reaches a formula are
# remembered as FLOP-free; the others' counts are cached by argument shapes and scalars.
_FLOP_FREE: set[Any] = set()
_FLOP_CACHE: dict[tuple, int] = {}


def _arg_key(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.shape), a.dtype)
    if isinstance(a, (list, tuple)):
        return tuple(_arg_key(v) for v in a)
    if isinstance(a, (int, float, bool, str)) or a is None:
        return a
    return type(a).__name__


class _FlopCounter(dispatch_mode_base()):  # type: ignore[misc]
    """Counts the FLOPs of the ops it sees, decomposing composites first (FlopCounterMode's
    order)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.formula_seen = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        with self:
            r = func.decompose(*args, **kwargs)
        if r is not NotImplemented:
            return r
        out = func(*args, **kwargs)
        formula = flop_formulas().get(overload_packet(func))
        if formula is not None:
            self.formula_seen = True
            self.flops += int(formula(*args, **kwargs, out_val=out))
        return out


_FORMULAS: dict[Any, Any] = {}  # op overload -> its FLOP formula (or None), looked up once
_OP_NAMES: dict[Any, str] = {}  # op overload -> its bare aten name


def _op_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    """The FLOPs ``FlopCounterMode`` counts for one op seen by the tracer."""
    if func in _FLOP_FREE:
        return 0
    try:
        formula = _FORMULAS[func]
    except KeyError:
        formula = _FORMULAS[func] = flop_formulas().get(overload_packet(func))
    if formula is not None:
        return int(formula(*args, **kwargs, out_val=out))
    key = (func, _arg_key(args), _arg_key(tuple(sorted(kwargs.items()))))
    hit = _FLOP_CACHE.get(key)
    if hit is not None:
        return hit
    counter = _FlopCounter()
    with counter:
        func(*args, **kwargs)
    if not counter.formula_seen:
        _FLOP_FREE.add(func)
    if len(_FLOP_CACHE) > 65536:
        _FLOP_CACHE.clear()
    _FLOP_CACHE[key] = counter.flops
    return counter.flops


def _empty_like(x: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like(x)`` of a meta tensor: for a contiguous one (dense, not
    overlapping: empty_like keeps its strides) ``empty_strided`` gives the same tensor at a
    tenth of the cost (empty_like on meta runs its Python reference)."""
    if x.is_contiguous():
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return torch.empty_like(x)


def _conv2d_out(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The meta result of ``aten::conv2d`` (int paddings) of a contiguous 4-D input:
    ``meta_conv``'s ``input.new_empty(shape)``, a contiguous tensor of the output shape and the
    input's dtype, from the conv shape formula; None where torch's own checks or another
    layout could apply (a mismatch, an empty output: the real kernel runs and says why)."""
    x, w = args[0], args[1] if len(args) > 1 else kwargs.get("weight")
    bias = _arg(args, kwargs, 2, "bias", None)
    if (
        not isinstance(w, torch.Tensor)
        or w.device.type != "meta"
        or x.dim() != 4
        or w.dim() != 4
        or w.dtype != x.dtype
        or not x.is_contiguous()
        or not w.is_contiguous()  # a channels-last weight can make the output channels-last
        or not x.is_floating_point()
        or (bias is not None and (not isinstance(bias, torch.Tensor) or bias.dim() != 1))
    ):
        return None
    try:
        stride = _pair(_arg(args, kwargs, 3, "stride", 1))
        padding = _pair(_arg(args, kwargs, 4, "padding", 0))
        dilation = _pair(_arg(args, kwargs, 5, "dilation", 1))
        groups = int(_arg(args, kwargs, 6, "groups", 1))
    except (TypeError, ValueError):  # padding="same" / "valid": torch's meta function
        return None
    n, c, h, wd = x.shape
    co, cpg, kh, kw = w.shape
    if len(stride) != 2 or len(padding) != 2 or len(dilation) != 2 or groups < 1:
        return None
    if cpg * groups != c or (bias is not None and bias.shape[0] != co) or min(stride) < 1:
        return None
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    if ho < 1 or wo < 1 or n < 1 or co < 1 or c < 1:  # no input channels: torch's 0 out
        return None
    return torch.empty((n, co, ho, wo), dtype=x.dtype, device="meta")


def _linear_2d(args: tuple, kwargs: dict) -> bool:
    """Whether an ``aten::linear`` call is the 2-D case :func:`_linear_out` shortcuts."""
    x, w = args[0], args[1] if len(args) > 1 else kwargs.get("weight")
    bias = _arg(args, kwargs, 2, "bias", None)
    return (
        isinstance(x, torch.Tensor)
        and isinstance(w, torch.Tensor)
        and x.device.type == "meta"
        and w.device.type == "meta"
        and x.dim() == 2
        and w.dim() == 2
        and x.is_floating_point()
        and w.dtype == x.dtype
        and x.is_contiguous()
        and x.shape[0] >= 1
        and x.shape[1] == w.shape[1]
        and w.shape[0] >= 1
        and (bias is None or (isinstance(bias, torch.Tensor) and bias.shape == (w.shape[0],)))
    )


def _linear_out(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The meta result of a 2-D ``aten::linear`` (``addmm`` / ``mm`` of its decomposition):
    a contiguous (batch, out_features) tensor of the input's dtype."""
    if not _linear_2d(args, kwargs):
        return None
    x, w = args[0], args[1] if len(args) > 1 else kwargs["weight"]
    return torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device="meta")


class _ForwardTracer(dispatch_mode_base()):  # type: ignore[misc]
    """Tracks live tensor bytes (via storage lifetimes), activations and layer counts."""

    def __init__(self, elem_bytes: int, resident: list[torch.Tensor]) -> None:
        super().__init__()
        self.elem = elem_bytes
        self.live = 0
        self.peak = 0
        self.act_total = 0
        self.act_max = 0
        self.dispatch = torch_cpu.TraceDispatch()
        self.pool_in_bytes = 0
        self.counts = {"conv": 0, "bn": 0, "linear": 0}
        self.residual_shapes: list[tuple[int, ...]] = []
        self.flops = 0
        self.paused = False
        self.n_ops = 0  # aten ops seen (the op recorder of ``_ops`` tells real ops by it)
        self.last_op = ""
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
        """Meta results of shape-preserving ops, 2-D convolutions and 2-D linear layers,
        without their slow Python meta functions and decompositions."""
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or x.device.type != "meta":
            return None
        if name == "conv2d":
            return _conv2d_out(args, kwargs)
        if name == "linear":
            return _linear_out(args, kwargs)
        if name == "batch_norm" and not _arg(args, kwargs, 5, "training", False):
            return _empty_like(x)
        if name == "dropout" and not _arg(args, kwargs, 2, "train", False):
            return _empty_like(x)  # eval dropout: a copy, as its decomposition makes
        if name == "relu_" or name in _INPLACE_UNARY:
            return x
        if name in _UNARY and x.is_floating_point():
            return _empty_like(x)
        if name == "add_" and not kwargs and len(args) == 2:
            other = args[1]
            if (
                isinstance(other, torch.Tensor)
                and other.shape == x.shape
                and other.dtype == x.dtype
            ):
                return x
        if name == "add" and not kwargs and len(args) == 2 and x.is_floating_point():
            other = args[1]  # a residual sum: both operands laid out alike, so is the result
            if (
                isinstance(other, torch.Tensor)
                and other.device.type == "meta"
                and other.shape == x.shape
                and other.dtype == x.dtype
                and other.stride() == x.stride()
                and x.is_contiguous()
            ):
                return _empty_like(x)
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if self.paused:  # a cached layer's outputs being rebuilt (_LayerCache)
            return func(*args, **kwargs)
        name = _OP_NAMES.get(func)
        if name is None:
            name = _OP_NAMES[func] = op_name(func)
        self.n_ops += 1
        self.last_op = name
        out = self._shortcut(name, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        g = _conv2d_geometry(name, args, kwargs, out)
        # a 2-D convolution's FLOPs are FlopCounterMode's conv formula, 2 x out x weight[1:]
        # (the composite conv2d would otherwise decompose once per new shape); a 2-D linear
        # layer's its addmm / mm formula, 2 x M x N x K
        if g is not None:
            self.flops += g["flops"]
        elif name == "linear" and _linear_2d(args, kwargs):
            self.flops += 2 * out.numel() * int(args[0].shape[1])
        else:
            self.flops += _op_flops(func, args, kwargs, out)
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
                self.dispatch.new_activation(nbytes)
        ws = _op_workspace_bytes(name, args, kwargs, outs[0] if outs else None, self.elem, g)
        if name in _MAX_POOL_OPS:
            self.pool_in_bytes += args[0].numel() * self.elem
        if g is not None:
            self.dispatch.conv(g, self.elem)
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

    def register(self, t: torch.Tensor) -> None:
        """Count a new output storage as live (a cached layer's output, see _LayerCache)."""
        st = t.untyped_storage()
        key = id(st)
        nbytes = self._nbytes(t, st)
        self._known[key] = weakref.ref(st, self._on_free(key, nbytes))
        self.live += nbytes

    def _on_free(self, key: int, nbytes: int) -> Any:
        return lambda _ref: self._free(key, nbytes)

    def state(self) -> tuple:
        d = self.dispatch
        return (self.act_total, d.native_conv_flops, d.onednn_weight_bytes, d.mmap_bytes,
                self.pool_in_bytes, self.counts["conv"], self.counts["bn"],
                self.counts["linear"], self.n_ops, self.flops)  # fmt: skip

    def add_state(self, delta: tuple) -> None:
        d = self.dispatch
        self.act_total += delta[0]
        d.native_conv_flops += delta[1]
        d.onednn_weight_bytes += delta[2]
        d.mmap_bytes += delta[3]
        self.pool_in_bytes += delta[4]
        self.counts["conv"] += delta[5]
        self.counts["bn"] += delta[6]
        self.counts["linear"] += delta[7]
        self.n_ops += delta[8]
        self.flops += delta[9]


# -- the layer cache: a torch.nn leaf layer (conv, norm, activation, pooling, linear, ...),
# or a block of known code below the root (an nn.Sequential of them, a built-in family's
# residual block: ``_KNOWN_CODE``), called with an input of a shape it has seen is not run
# again: its effect on the trace (op rows, counters, peak, outputs) is replayed, so repeated
# blocks cost a dictionary lookup. The key is the module's structure id (ModuleWalk), so a
# layer or block with other hyper-parameters or weight shapes never shares an entry.
_LAYER_CACHE: dict[tuple, dict[str, Any]] = {}
_LAYER_CACHE_MAX = 16384
_CACHE_BLOCKS = True  # False: leaf layers only (to measure what the blocks save)


_no_torch_function = torch_function_disabled()
_PLAIN_TYPES = frozenset({bool, int, float, str, type(None)})
# what every nn.Module keeps in its __dict__ (hooks, registries, the mode): not a hyper-parameter
_MODULE_INTERNALS = frozenset(vars(nn.Module()))
# torch objects that are values (compared by equality), not state
_VALUE_TYPES = (torch.dtype, torch.device, torch.layout, torch.memory_format)


def _value_key(v: Any) -> Any:
    """A hashable key of one module attribute: plain values as they are (lists as tuples),
    tensors by shape and dtype, bound methods by their function, other hashable objects as
    they are (functions and classes by identity: their code), unhashable ones by type."""
    t = type(v)
    if t in _PLAIN_TYPES:
        return v
    if t is tuple:  # a conv's stride: a hashable tuple keys as itself (the common case)
        try:
            hash(v)
            return v
        except TypeError:
            pass
    if isinstance(v, (tuple, list)):
        return (t, tuple(_value_key(x) for x in v))
    if isinstance(v, torch.Tensor):
        return (torch.Tensor, tuple(v.shape), v.dtype)
    if isinstance(v, (bool, int, float, str, *_VALUE_TYPES)):
        return (t, v)  # an enum member, a torch.dtype
    if isinstance(v, types.MethodType):
        return (t, v.__func__)
    try:
        hash(v)
    except TypeError:
        return t  # an unhashable object (a dict of settings): by type, as extra_repr would
    return v  # by identity (a function, a class) or by value (a frozen dataclass)


# Modules whose forward is known code, a function of the module's structure and its input's
# shape alone (no side effects, no state outside the module): torch.nn's own and the
# built-in families'. A subtree made only of them (no hooks) is a *block* the layer cache
# may replay as a whole; a user's class is always run (its leaf layers are still cached).
_KNOWN_CODE = ("torch.nn.modules.", "carb_nas.models.")


class _ClassInfo:
    """What a module class contributes to the walk, computed once per class."""

    __slots__ = ("torch_nn", "known", "own_repr", "plain_train")

    def __init__(self, cls: type[nn.Module]) -> None:
        self.torch_nn = cls.__module__.startswith("torch.nn.modules.")
        # nn.Module's own train/eval (only sets ``training``): the trace may set it directly
        self.plain_train = cls.train is nn.Module.train and cls.eval is nn.Module.eval
        self.known = cls.__module__.startswith(_KNOWN_CODE)
        # a user class's extra_repr may show state kept elsewhere: it joins the key
        self.own_repr = not self.torch_nn and cls.extra_repr is not nn.Module.extra_repr


_CLASS_INFO: dict[type[nn.Module], _ClassInfo] = {}
# structure keys -> small ints (a module's key holds its children's ints, so each key is
# hashed once per walk, whatever the depth); ids are never reused, so clearing the table
# only makes older cache entries unreachable
_STRUCTURE_IDS: dict[tuple, int] = {}
_STRUCTURE_IDS_MAX = 1 << 18
_next_structure_id = itertools.count()


def _structure_id(key: tuple) -> int:
    sid = _STRUCTURE_IDS.get(key)
    if sid is None:
        if len(_STRUCTURE_IDS) >= _STRUCTURE_IDS_MAX:
            _STRUCTURE_IDS.clear()
        sid = _STRUCTURE_IDS[key] = next(_next_structure_id)
    return sid


class ModuleWalk:
    """One walk over a module tree: its parameters and buffers (deduplicated, by full name),
    the torch.nn leaf layers the layer cache may take with their keys, and ``structure``, an
    id of everything that fixes a forward pass as far as shapes go: per submodule, its class,
    its attributes (hyper-parameters such as a conv's stride or an activation's ``inplace``,
    see :func:`_value_key`; a user class's own ``extra_repr`` too), its hooks, every
    parameter's and buffer's name, shape and dtype (tied tensors and shared submodules as
    such), and its children in order. Equal ids mean equal keys (no hash collisions).

    The walk reads each module's ``__dict__`` directly (no ``named_modules`` /
    ``extra_repr`` / string hashing): about 4 us per module."""

    def __init__(self, module: nn.Module) -> None:
        self.params: dict[str, torch.Tensor] = {}
        self.buffers: dict[str, torch.Tensor] = {}
        self.layers: list[tuple[nn.Module, int, bool]] = []  # (layer, id, is a block)
        self.modules: list[nn.Module] = []  # every submodule once, the root first
        self.plain_train = True  # no class overrides nn.Module.train / eval
        self._tensors: dict[int, int] = {}  # id(tensor) -> its ordinal in the walk
        self._keep: list[torch.Tensor] = []  # the tensors above, alive during the walk
        self._modules: dict[int, int] = {}  # id(module) -> its ordinal in ``modules``
        self.structure = self._visit(module, "")[0]
        del self._keep

    def _visit(self, m: nn.Module, prefix: str) -> tuple[Any, bool]:
        """``(structure id, whether the subtree is known code)`` of one submodule (flat
        tuples, plain loops: this runs once per submodule on every trace)."""
        seen = self._modules.get(id(m))
        if seen is not None:
            return ("shared", seen), False  # the same module object again (visited once)
        self._modules[id(m)] = len(self.modules)
        self.modules.append(m)
        cls = type(m)
        info = _CLASS_INFO.get(cls)
        if info is None:
            info = _CLASS_INFO[cls] = _ClassInfo(cls)
        if not info.plain_train:
            self.plain_train = False
        d = m.__dict__
        state: list[Any] = []  # the hyper-parameters, in the order __init__ set them
        for k, v in d.items():
            if k not in _MODULE_INTERNALS:
                state.append(k)
                state.append(v if type(v) in _PLAIN_TYPES else _value_key(v))
        tensors = self._tensors
        owns: list[tuple] = []  # parameters, buffers
        for store, out in ((d["_parameters"], self.params), (d["_buffers"], self.buffers)):
            own: list[Any] = []  # per tensor: name, shape and dtype (or the tied one's ordinal)
            for attr, t in store.items():
                own.append(attr)
                if t is None:
                    own.append(None)
                    continue
                tied = tensors.get(id(t))
                if tied is not None:
                    own.append(tied)
                    continue
                tensors[id(t)] = len(tensors)
                self._keep.append(t)
                out[prefix + attr] = t
                own.append(t.shape)
                own.append(t.dtype)
            owns.append(tuple(own))
        pre, post = d["_forward_pre_hooks"], d["_forward_hooks"]
        hooks = bool(pre or post)
        pure = info.known and not hooks and "forward" not in d
        leaf = True
        children: list[Any] = []
        for name, c in d["_modules"].items():
            children.append(name)
            if c is None:
                children.append(None)
                continue
            leaf = False
            sid, child_pure = self._visit(c, f"{prefix}{name}.")
            children.append(sid)
            pure = pure and child_pure
        sid = _structure_id((
            cls,
            tuple(state),
            *owns,
            tuple(children),
            (tuple(pre.values()), tuple(post.values())) if hooks else None,
            m.extra_repr() if info.own_repr else None,
        ))  # fmt: skip
        if pure and (leaf or prefix):  # a leaf layer, or a block below the root (the table's)
            self.layers.append((m, sid, not leaf))
        return sid, pure


class _LayerCache:
    """Wraps the leaf layers of one trace (see above); ``restore()`` undoes it."""

    def __init__(self, walk: ModuleWalk, tracer: _ForwardTracer, recorder: Any, tag: tuple):
        self.tracer, self.recorder, self.tag = tracer, recorder, tag
        self.wrapped: list[nn.Module] = []
        # a replayed block would skip its children's global hooks
        blocks = _CACHE_BLOCKS and not global_forward_hooks()
        for m, key, block in walk.layers:
            if block and not blocks:
                continue
            # an instance attribute shadows the class's forward (nn.Module.__setattr__ would
            # cost more than the trace of the layer)
            m.__dict__["forward"] = self._wrap(m.forward, key)
            self.wrapped.append(m)

    def restore(self) -> None:
        for m in self.wrapped:
            m.__dict__.pop("forward", None)

    def _wrap(self, forward: Callable, static: int) -> Callable:
        tracer, tag = self.tracer, self.tag

        def cached_forward(*args: Any, **kwargs: Any) -> Any:
            if len(args) != 1 or kwargs or tracer.paused:
                return forward(*args, **kwargs)
            x = args[0]
            if not isinstance(x, torch.Tensor):
                return forward(x)
            # the input's metadata, read past the recorder's mode (each read would be a
            # Python call into it)
            with _no_torch_function():
                if x.device.type != "meta":
                    key = None
                else:
                    key = (static, tag, tuple(x.shape), x.stride(), x.dtype, x.storage_offset())
                    hit = _LAYER_CACHE.get(key)
                    if hit is not None:
                        return self._replay(hit, x)
            if key is None:
                return forward(x)
            return self._record(key, forward, x)

        return cached_forward

    def _record(self, key: tuple, forward: Callable, x: torch.Tensor) -> Any:
        tr, rec = self.tracer, self.recorder
        before, live0, peak0 = tr.state(), tr.live, tr.peak
        act_max0, n_res, n_rows = tr.act_max, len(tr.residual_shapes), len(rec.rows) if rec else 0
        tr.peak, tr.act_max = live0, 0  # the layer's own peak and largest activation
        try:
            out = forward(x)
        finally:
            rel_peak, layer_act_max = tr.peak - live0, tr.act_max
            tr.peak, tr.act_max = max(peak0, tr.peak), max(act_max0, tr.act_max)
        with _no_torch_function():
            if not isinstance(out, torch.Tensor) or out.device.type != "meta":
                return out
            same = out is x or out.untyped_storage() is x.untyped_storage()
            fresh = tr.live - live0
            if not same and fresh != tr._nbytes(out, out.untyped_storage()):
                return out  # the output shares some other storage: not replayable
            meta = (tuple(out.shape), out.stride(), out.storage_offset(), out.dtype)
        after = tr.state()
        if len(_LAYER_CACHE) >= _LAYER_CACHE_MAX:
            _LAYER_CACHE.clear()
        _LAYER_CACHE[key] = {
            "delta": tuple(a - b for a, b in zip(after, before)),
            "rel_peak": rel_peak,
            "act_max": layer_act_max,
            "residual": tr.residual_shapes[n_res:],
            "rows": rec.rows[n_rows:] if rec else None,
            "last_op": tr.last_op,
            "alias": same,
            "out": meta,
        }
        return out

    def _replay(self, hit: dict[str, Any], x: torch.Tensor) -> torch.Tensor:
        """The cached layer's effect on the trace and its output (torch functions off)."""
        tr, rec = self.tracer, self.recorder
        tr.peak = max(tr.peak, tr.live + hit["rel_peak"])
        tr.act_max = max(tr.act_max, hit["act_max"])
        tr.add_state(hit["delta"])
        tr.residual_shapes.extend(hit["residual"])
        tr.last_op = hit["last_op"]
        if rec is not None:
            rec.rows.extend(hit["rows"])
        shape, stride, offset, dtype = hit["out"]
        if hit["alias"]:
            if (shape, stride, offset) == (tuple(x.shape), x.stride(), x.storage_offset()):
                return x
            tr.paused = True  # the view is no op of the traced module
            try:
                return x.as_strided(shape, stride, offset)
            finally:
                tr.paused = False
        tr.paused = True
        try:
            out = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        finally:
            tr.paused = False
        tr.register(out)
        return out


def clear_layer_cache() -> None:
    """Forget the cached layers (tests; benchmarks timing a cold trace)."""
    _LAYER_CACHE.clear()
    _FLOP_CACHE.clear()


def _resolve_dtype(dtype: torch.dtype | str) -> tuple[torch.dtype, int]:
    names = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if isinstance(dtype, str):
        if dtype in ("int8", "int8-dynamic"):
            return torch.float32, ELEMENT_BYTES[dtype]
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
    keys :data:`FEATURE_COLUMNS` (defined in :mod:`carb_nas.features`); ``flops`` are those of
    ``FlopCounterMode`` over the whole batch.
    """
    return run_trace(module, input_shape, dtype)


def run_trace(
    module: nn.Module,
    input_shape: Sequence[int],
    dtype: torch.dtype | str = torch.float32,
    extra_mode: Callable[[Any, int, set[int]], Any] | None = None,
    walk: ModuleWalk | None = None,
) -> dict[str, float | int]:
    """:func:`trace_features`, optionally under one more (torch function) mode entered
    outermost: ``extra_mode(dispatch_tracer, element_bytes, ids_of_weight_tensors)`` makes it
    (the per-operator recorder of :mod:`._ops`)."""
    if not isinstance(module, nn.Module):
        raise ConfigError(
            f"trace_features needs a torch.nn.Module: expected a module, got "
            f"{type(module).__name__}. Pass the model object."
        )
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        shape = ()
    if not shape or any(s <= 0 for s in shape):
        raise ConfigError(
            f"invalid input shape: expected positive sizes such as (batch, 3, 224, 224), got "
            f"{input_shape!r}. Pass the shape of one input batch."
        )
    cdtype, elem = _resolve_dtype(dtype)

    def meta_like(t: torch.Tensor) -> torch.Tensor:
        return torch.empty(
            t.shape, device="meta", dtype=cdtype if t.is_floating_point() else t.dtype
        )

    walk = walk or ModuleWalk(module)
    params, buffers = walk.params, walk.buffers
    # a module already on the meta device at the trace's dtype (the built-in families built
    # with device="meta") runs as it is; any other has its tensors swapped for meta ones
    tensors = {**params, **buffers}
    on_meta = True
    for v in tensors.values():
        if not v.is_meta or (v.dtype != cdtype and v.is_floating_point()):
            on_meta = False
            break
    swapped = tensors if on_meta else {k: meta_like(v) for k, v in tensors.items()}
    resident_bytes = 0
    for t in swapped.values():
        resident_bytes += t.numel() * (elem if t.is_floating_point() else t.element_size())
    n_params, weight_max = 0, 0
    for t in params.values():
        n = t.numel()
        n_params += n
        if n > weight_max and t.is_floating_point():
            weight_max = n
    modes = [(m.__dict__, m.training) for m in walk.modules]
    if walk.plain_train:  # what module.eval() does, without nn.Module.__setattr__ per module
        for d, _ in modes:
            d["training"] = False
    else:
        module.eval()
    try:
        x = torch.empty(shape, device="meta", dtype=cdtype)
        tracer = _ForwardTracer(elem, [x, *swapped.values()])
        outer = (
            extra_mode(tracer, elem, {id(t) for t in swapped.values()})
            if extra_mode is not None
            else contextlib.nullcontext()
        )
        # the tracer is entered last, so it sees each op first and passes it on to the counter
        # (a module that cannot run on meta raises its own error: the spec layer maps it to
        # one line with the user's frame, ``scoring._trace_error``)
        recorder = outer if extra_mode is not None else None
        layers = _LayerCache(walk, tracer, recorder, (elem, cdtype, recorder is not None))
        try:
            with outer, torch.inference_mode(), tracer:
                if on_meta:
                    out = module(x)
                else:
                    out = torch.func.functional_call(module, swapped, (x,))
            del out
        finally:
            layers.restore()
        flops = int(tracer.flops)
    finally:
        for d, training in modes:
            d["training"] = training
    input_bytes = math.prod(shape) * elem
    resident_bytes += input_bytes
    derived = derive(
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
        **tracer.dispatch.columns(),
        "pool_in_mb": tracer.pool_in_bytes / MB,
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
