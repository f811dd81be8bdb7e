"""Architecture features of configs: closed form (vectorized) and meta-device tracing.

The stage after :mod:`carb_nas.space` and :mod:`carb_nas.models`. Its parts: the closed form
(``_closed_form``), the meta-device tracer (``_trace``), what both share (``_common``), and the
runtime priors of eager PyTorch on the CPU (``_torch_cpu``: oneDNN dispatch, kernel
workspaces, glibc's mmap threshold), kept apart so that another runtime can get its own.

Two ways to the same numbers:

- :func:`compute_features` takes a DataFrame of configs (``CONFIG_COLUMNS``) and returns one
  feature row per config. It derives everything in closed form once per unique architecture
  (family, depth, width, resolution) and broadcasts over batch size and precision with numpy,
  so it featurizes millions of configs per second.
- :func:`trace_features` runs ANY ``nn.Module`` once on the meta device (no memory, no compute)
  and returns the same features. On the spaces' ResNets both agree exactly (a test).

Definitions (all per batch; MB = 10**6 bytes; ``e`` = element bytes of the precision: fp32 4,
fp16 2, bf16 2, int8 1 -- int8 configs run as static QDQ ONNX models whose weights and
activations are int8, so every parameter and every activation element counts 1 byte;
int8-dynamic 4: dynamic quantization keeps activations fp32 (torch's also its conv weights); int64
tensors keep 8 bytes and the CPU kernels' float temporaries below keep 4):

``flops``
    2 x multiply-accumulates of every convolution and linear layer, exactly as
    ``torch.utils.flop_counter.FlopCounterMode`` counts them (bias adds, BN, pooling and ReLU
    are not counted). Scales with batch size.
``native_conv_flops``, ``onednn_weight_mb``, ``mmap_mb``
    The eager-PyTorch-on-CPU (oneDNN, glibc) columns, defined in :mod:`carb_nas.features._torch_cpu`
    (0 on rows of other runtimes). ``native_conv_flops`` scales with batch size.
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
    pool is slow for its size (many times a batch norm over the same tensor), so a wide,
    high-resolution stem costs more in its pool than in many convolutions.
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
    (``torch.inference_mode``, the module as built by :mod:`carb_nas.models`: BN not fused, in-place
    ReLU and residual add): bytes of parameters + buffers + input, plus the peak, over the pass, of
    the bytes allocated beyond those. Python reference counting decides when each tensor is freed.
    The peak includes what the CPU kernels allocate internally and free before returning, modelled
    once in ``_torch_cpu.conv_workspace_elems`` and ``_trace._op_workspace_bytes``: the im2col
    buffer of PyTorch's native (non-oneDNN) convolution, which eager PyTorch picks for batch 1 and
    small inputs; the two float32 per-channel scale/shift vectors of eval-mode batch norm; the int64
    indices of max pooling. For fp32 this equals, to the byte, the peak of the PyTorch profiler's
    memory events (``profile_memory=True``) on top of the resident model and input, once the buffers
    that oneDNN allocates and frees inside ``aten::mkldnn_convolution`` are left out (tested). Those
    oneDNN-internal buffers -- weights, input and output reordered into blocked layouts, and
    per-thread scratchpads -- depend on the CPU's ISA, the thread count and the oneDNN version, so
    no closed form can match them on every machine; they add to the peak at batch >= 2 and nothing
    at batch 1 when the native path runs. ``weight_mb_max`` (the largest weight tensor, which oneDNN
    reorders) helps a cost model learn that part. Other precisions use the same model at their
    element size; PyTorch's own fp16/bf16 CPU kernels allocate differently (e.g. fp32 staging
    buffers), so there the figure is a consistent model, not a CPU measurement.
"""

from __future__ import annotations

from carb_nas.features import _torch_cpu
from carb_nas.features._closed_form import clear_cache, compute_features, within_max_gflops
from carb_nas.features._common import ELEMENT_BYTES, FEATURE_COLUMNS
from carb_nas.features._ops import (
    OP_AGGREGATE_COLUMNS,
    OP_COLUMNS,
    OP_KINDS,
    clear_ops_cache,
    op_aggregates,
    op_kind,
    trace_op_arrays,
    trace_ops,
)
from carb_nas.features._trace import trace_features

TORCH_CPU_COLUMNS = _torch_cpu.COLUMNS  # 0 on rows whose runtime is not torch
native_conv_mask = _torch_cpu.native_conv_mask

__all__ = [
    "FEATURE_COLUMNS",
    "ELEMENT_BYTES",
    "TORCH_CPU_COLUMNS",
    "native_conv_mask",
    "compute_features",
    "trace_features",
    "within_max_gflops",
    "clear_cache",
    "OP_KINDS",
    "OP_COLUMNS",
    "OP_AGGREGATE_COLUMNS",
    "trace_ops",
    "trace_op_arrays",
    "op_aggregates",
    "op_kind",
    "clear_ops_cache",
]
