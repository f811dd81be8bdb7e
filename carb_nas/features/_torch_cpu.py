"""Runtime priors of eager PyTorch on the CPU (oneDNN dispatch, CPU kernel workspaces, glibc).

Everything here models how one runtime behaves, not what the architecture is: which
convolutions PyTorch (one intra-op thread) sends to its native kernels or to oneDNN
(``ConvParams::use_mkldnn``), what its CPU kernels allocate internally (the im2col buffer of
the native convolution, eval-BN's scale/shift vectors, max-pool indices: part of
``tensor_peak_mb``), and which buffers glibc maps anew on every call. A new runtime gets its
own module of this kind; the closed form (:mod:`._closed_form`) and the tracer
(:mod:`._trace`) call this one through :class:`ClosedFormDispatch` and :class:`TraceDispatch`
and the workspace functions, and :func:`compute_features` sets :data:`COLUMNS` to 0 on rows
whose runtime is not :data:`RUNTIME`.

The columns (per batch; MB = 10**6 bytes; ``e`` = element bytes of the precision):

``native_conv_flops``
    The part of ``flops`` in convolutions that eager PyTorch on the CPU, with one intra-op thread,
    runs on its native kernels instead of oneDNN (``ConvParams::use_mkldnn``): unstrided 1x1
    convolutions at batch < 16, and at batch 1 every convolution with a kernel of at most 3x3 whose
    input holds at most 20,480 elements. The native kernels run about half as fast, so single-thread
    latency jumps down at batch 16. With more threads PyTorch sends the 1x1 convolutions to oneDNN
    too; the column then over-counts, and a cost model trained at that thread count learns how much
    the column is worth. 0 for other runtimes (e.g. ONNX Runtime) in :func:`compute_features`.
    Scales with batch size.
``onednn_weight_mb``
    Bytes (/1e6) of the convolution weights that go through oneDNN in that dispatch (every
    convolution not counted in ``native_conv_flops``). Eager PyTorch hands oneDNN plain-layout
    weights, which it reorders into its blocked layout on every call: a read and a write of each
    such weight per forward pass, at any batch size. Weight-heavy nets therefore slow down sharply
    from batch 1 (native) to 2 (oneDNN). 0 for other runtimes (ONNX Runtime pre-packs weights once).
``mmap_mb``
    Bytes (/1e6) that eager PyTorch on Linux gets from fresh, zero-filled pages on every forward
    pass: the buffers of at least 32 MiB, glibc's largest dynamic mmap threshold. glibc serves
    smaller buffers from its heap after the first pass, but maps each buffer that large anew and
    unmaps it when freed, so every page faults again on each call. Counted: every activation (below)
    and, for each convolution that goes through oneDNN, its reordered weight copy and blocked copies
    of its input and output (oneDNN's first-layer kernels read a 3-channel input in place).
    ``benchmarks/page_faults.py`` measures the cost per counted MB, with ``MALLOC_MMAP_THRESHOLD_``
    raised as the control. The cost depends on the heap's history: glibc serves a large request from
    a free heap chunk that fits before it maps new pages, so a process that has just freed other
    large buffers may not pay it. Fresh processes and the profiler's campaigns do. 0 for other
    runtimes (ONNX Runtime keeps its buffers in an arena). Not linear in batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from carb_nas.features._common import E_LEVELS, MB, suffix_tables, sum_at_least

RUNTIME = "torch"
COLUMNS = ("native_conv_flops", "onednn_weight_mb", "mmap_mb")

BN_TEMP_BYTES_PER_CHANNEL = 8  # eval BN on CPU: float32 scale + float32 shift per channel
INDEX_BYTES = 8  # the CPU max pool computes int64 indices, then drops them
NATIVE_CONV_MAX_NUMEL = 20480  # PyTorch's use_mkldnn threshold for batch-1 inputs
NATIVE_1X1_MAX_BATCH = 15  # one thread: unstrided 1x1 convs below batch 16 skip oneDNN
MMAP_MIN_BYTES = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: always mmap'd
N_TIERS = 3  # batch 1 / 2-15 / >= 16: the batches that send more convs to oneDNN
IN_PLACE_MAX_CHANNELS = 3  # oneDNN's first-layer kernels read a plain 3-channel input as is


# -- dispatch and kernel workspaces (shared by the closed form and the tracer) ---------------
def conv_workspace_elems(
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
    native = native_at_batch1(c_in, h, w, k_h, k_w, groups)
    return np.where(native, n * c_in * k_h * k_w * h_out * w_out, 0)


def native_at_batch1(c_in: Any, h: Any, w: Any, k_h: int, k_w: int, groups: int = 1) -> Any:
    """PyTorch's batch-1 rule: a float conv with a kernel of at most 3x3, groups 1 and at most
    20,480 input elements skips oneDNN (bool, or a numpy array over architectures)."""
    if groups > 1 or (k_h > 3 and k_w > 3):
        return False
    return c_in * h * w <= NATIVE_CONV_MAX_NUMEL


def native_conv_kind(
    c_in: Any, h: Any, w: Any, k_h: int, k_w: int, stride: Sequence[int], groups: int = 1
) -> tuple[bool, Any]:
    """Which batches eager PyTorch (one thread) runs a float conv with on its native kernels.

    ``(below16, at_batch1)``: ``below16`` -- an unstrided 1x1 kernel, native for every batch
    below 16; otherwise ``at_batch1`` -- native at batch 1 (:func:`native_at_batch1`). See
    ``ConvParams::use_mkldnn`` and the ``native_conv_flops`` definition.
    """
    if k_h == 1 and k_w == 1 and all(s == 1 for s in stride):
        return True, False
    return False, native_at_batch1(c_in, h, w, k_h, k_w, groups)


def is_native_conv(
    x_shape: Sequence[int], k: Sequence[int], stride: Sequence[int], groups: int, dilated: bool
) -> bool:
    """Whether eager PyTorch runs one conv (input ``x_shape`` NCHW) natively on one thread."""
    n, c, h, w = x_shape
    below16, at_b1 = native_conv_kind(c, h, w, k[0], k[1], stride, groups)
    return (below16 and not dilated and n <= NATIVE_1X1_MAX_BATCH) or (bool(at_b1) and n == 1)


def mmapped(nbytes: int) -> int:
    """The bytes of one buffer that glibc maps anew on every call (all of them or none)."""
    return nbytes if nbytes >= MMAP_MIN_BYTES else 0


# -- closed form ---------------------------------------------------------------------------
class ClosedFormDispatch:
    """The dispatch columns of many ResNets at once, filled conv by conv by the closed form.

    Per architecture (numpy arrays of length m), per sample: the FLOPs of convs native below
    batch 16 / native only at batch 1, the conv weight elements (all, and those of the same
    two native classes), oneDNN's per-call copies (input, output) by the batches that send
    the conv to oneDNN (every batch / batch >= 2 / batch >= 16; 0 where the arch does not
    belong), and per element size the weight elements whose reordered copy reaches the mmap
    threshold, in the same three classes.
    """

    def __init__(self, m: int) -> None:
        zero = np.zeros(m, dtype=np.int64)
        self.native_below16, self.native_b1 = zero, zero
        self.conv_w, self.w_below16, self.w_b1 = zero, zero, zero
        self.copies: dict[str, list[Any]] = {"any": [], "b2": [], "b16": []}
        self.big_w = {c: np.zeros((len(E_LEVELS), m), dtype=np.int64) for c in self.copies}

    def conv(self, c_in: Any, h: Any, k: int, s: int, out: Any, flops: Any, weights: Any) -> None:
        """One k x k / s conv on a square ``h`` input of ``c_in`` channels (per-sample
        ``out`` elements, ``flops``, ``weights`` elements)."""
        below16, at_b1 = native_conv_kind(c_in, h, h, k, k, (s, s))
        self.conv_w = self.conv_w + weights
        if below16:
            self.native_below16 = self.native_below16 + flops
            self.w_below16 = self.w_below16 + weights
        else:
            self.native_b1 = self.native_b1 + np.where(at_b1, flops, 0)
            self.w_b1 = self.w_b1 + np.where(at_b1, weights, 0)
        src = np.where(c_in <= IN_PLACE_MAX_CHANNELS, 0, c_in * h * h)
        big = np.stack([weights * e >= MMAP_MIN_BYTES for e in E_LEVELS]) * weights
        classes: dict[str, Any]
        if below16:
            classes = {"b16": True}
        else:
            classes = {"any": ~np.asarray(at_b1), "b2": np.asarray(at_b1)}
        for c, member in classes.items():
            self.copies[c] += [np.where(member, src, 0), np.where(member, out, 0)]
            self.big_w[c] = self.big_w[c] + np.where(member, big, 0)

    def rows(self, acts: np.ndarray) -> list[dict[str, Any]]:
        """Per architecture, the entries :func:`closed_form_columns` reads; ``acts`` are the
        per-sample activation sizes (n_acts, m), which glibc maps like oneDNN's copies."""
        m = acts.shape[1]

        def stack(items: list[Any]) -> np.ndarray:
            rows = [np.broadcast_to(np.asarray(v, dtype=np.int64), (m,)) for v in items]
            return np.stack(rows) if rows else np.zeros((0, m), dtype=np.int64)

        # per batch tier (batch 1, 2-15, >= 16) the buffers present: cumulative, since each
        # tier sends more convs to oneDNN
        copies = {g: stack(items) for g, items in self.copies.items()}
        tier_items = [np.concatenate([acts, copies["any"]])]
        tier_items += [np.concatenate([tier_items[-1], copies["b2"]])]
        tier_items += [np.concatenate([tier_items[-1], copies["b16"]])]
        tier_tables = [suffix_tables(items) for items in tier_items]
        tier_w = np.cumsum(np.stack([self.big_w[g] for g in ("any", "b2", "b16")]), axis=0)
        big_w = tier_w.transpose(2, 0, 1).tolist()  # (m, tier, element size)
        lists = {
            k: np.broadcast_to(getattr(self, k), (m,)).tolist()
            for k in ("native_below16", "native_b1", "conv_w", "w_below16", "w_b1")
        }
        return [
            {
                **{k: v[i] for k, v in lists.items()},
                "mmap": [t[i] for t in tier_tables],
                "big_w": big_w[i],
            }
            for i in range(m)
        ]


def closed_form_columns(
    rows: Sequence[dict[str, Any]],
    table: Callable[[str], np.ndarray],
    arch_id: np.ndarray,
    batch: np.ndarray,
    e: np.ndarray,
    e_level: np.ndarray,
) -> dict[str, np.ndarray]:
    """The :data:`COLUMNS` per config, from the per-architecture ``rows`` of
    :meth:`ClosedFormDispatch.rows` (``table(name)``: one entry per architecture)."""
    native = table("native_below16")[arch_id] * batch * (batch <= NATIVE_1X1_MAX_BATCH)
    native += table("native_b1")[arch_id] * (batch == 1)
    onednn_w = table("conv_w")[arch_id] - table("w_b1")[arch_id] * (batch == 1)
    onednn_w -= table("w_below16")[arch_id] * (batch <= NATIVE_1X1_MAX_BATCH)
    # buffers of >= 32 MiB: per-sample sizes x with x * batch * e >= the threshold, plus the
    # reordered weights; each class only at the batches that send its convs to oneDNN
    min_size = -(-MMAP_MIN_BYTES // (batch * e))
    tier = (batch >= 2).astype(np.int64) + (batch > NATIVE_1X1_MAX_BATCH)
    per_sample = sum_at_least(
        [t for r in rows for t in r["mmap"]], arch_id * N_TIERS + tier, min_size
    )
    big_w = np.array([r["big_w"] for r in rows], dtype=np.int64)
    big_w = big_w.reshape(len(rows), N_TIERS, len(E_LEVELS))
    mmap = (per_sample * batch + big_w[arch_id, tier, e_level]) * e
    return {
        "native_conv_flops": native,
        "onednn_weight_mb": onednn_w * e / MB,
        "mmap_mb": mmap / MB,
    }


# -- meta-device trace ---------------------------------------------------------------------
class TraceDispatch:
    """The :data:`COLUMNS` of one traced forward pass, op by op."""

    def __init__(self) -> None:
        self.native_conv_flops = 0
        self.onednn_weight_bytes = 0
        self.mmap_bytes = 0

    def new_activation(self, nbytes: int) -> None:
        self.mmap_bytes += mmapped(nbytes)

    def conv(self, g: dict[str, Any], elem: int) -> None:
        """A 2-D conv as the tracer's geometry describes it (``x``, ``k``, ``out`` shapes,
        ``stride``, ``groups``, ``dilated``, ``flops``, ``weights``)."""
        if is_native_conv(g["x"], g["k"], g["stride"], g["groups"], g["dilated"]):
            self.native_conv_flops += g["flops"]
            return
        self.onednn_weight_bytes += g["weights"] * elem
        c_in = g["x"][1]
        src = 0 if c_in <= IN_PLACE_MAX_CHANNELS else math.prod(g["x"])
        for elems in (g["weights"], src, math.prod(g["out"])):
            self.mmap_bytes += mmapped(elems * elem)

    def columns(self) -> dict[str, float | int]:
        return {
            "native_conv_flops": self.native_conv_flops,
            "onednn_weight_mb": self.onednn_weight_bytes / MB,
            "mmap_mb": self.mmap_bytes / MB,
        }


def native_conv_mask(
    n: np.ndarray,
    c: np.ndarray,
    h: np.ndarray,
    k: np.ndarray,
    stride: np.ndarray,
    groups: np.ndarray,
) -> np.ndarray:
    """:func:`is_native_conv` over arrays of square, undilated convs (batch ``n``, input
    channels ``c``, map size ``h``, kernel ``k``, ``stride``, ``groups``)."""
    below16 = (k == 1) & (stride == 1) & (n <= NATIVE_1X1_MAX_BATCH)
    at_batch1 = (n == 1) & (groups == 1) & (k <= 3) & (c * h * h <= NATIVE_CONV_MAX_NUMEL)
    return below16 | at_batch1
