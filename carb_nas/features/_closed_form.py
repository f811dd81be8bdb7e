"""Closed-form features of the spaces' ResNets, vectorized over configs.

:func:`compute_features` walks each unique architecture's forward pass once (many widths and
resolutions of one family and depth at a time, as numpy arrays), caches what it finds per
architecture and broadcasts over batch size and precision, so it featurizes millions of
configs per second. Eager PyTorch's CPU behaviour enters through :mod:`._torch_cpu` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.features import _torch_cpu as torch_cpu
from carb_nas.features._common import (
    E_LEVELS,
    ELEMENT_BYTES,
    FEATURE_COLUMNS,
    INT64_BYTES,
    MB,
    derive,
)
from carb_nas.features._trace import trace_features
from carb_nas.models import EXPANSION, NUM_CLASSES, meta_model, stage_channels
from carb_nas.space import (
    RESNET_FAMILIES,
    Config,
    canonical_width,
    factorize_configs,
    stage_layout,
)


class _ArchSim:
    """Walks the forward pass of many ResNets of one family and depth at once.

    Sizes are per sample at 1 byte per element; each quantity is a numpy array with one entry
    per architecture (width, resolution). Each candidate peak point is
    ``(float_elems, index_elems, const_bytes, column_elems)``: bytes at that point beyond the
    resident model and input are
    ``b*(float_elems*e + 8*index_elems) + const_bytes + [b == 1]*column_elems*e``.
    Convolution workspaces exist only at batch 1 (``_torch_cpu.conv_workspace_elems``).
    """

    def __init__(self, m: int) -> None:
        self.m = m
        self.points: list[tuple[Any, Any, Any, Any]] = []
        self.acts: list[Any] = []
        zero = np.zeros(m, dtype=np.int64)
        self.flops, self.params, self.weight_max, self.bn_channels = zero, zero, zero, zero
        self.dispatch = torch_cpu.ClosedFormDispatch(m)
        self.n_conv = 0
        self.n_bn = 0

    def conv(self, live: Any, c_in: Any, c_out: Any, k: int, s: int, p: int, h: Any) -> tuple:
        h_out = (h + 2 * p - k) // s + 1
        out = c_out * h_out * h_out
        flops = 2 * c_out * h_out * h_out * c_in * k * k
        weights = c_out * c_in * k * k
        self.flops = self.flops + flops
        self.dispatch.conv(c_in, h, k, s, out, flops, weights)
        self.params = self.params + weights
        self.weight_max = np.maximum(self.weight_max, weights)
        self.n_conv += 1
        cols = torch_cpu.conv_workspace_elems(1, c_in, h, h, k, k, h_out, h_out, (s, s), (p, p))
        self.points.append((live + out, 0, 0, cols))
        self.acts.append(out)
        return h_out, out

    def bn(self, live: Any, channels: Any, size: Any) -> None:
        # live includes the BN input; the output is a new tensor of the same size
        self.params = self.params + 2 * channels
        self.bn_channels = self.bn_channels + channels
        self.n_bn += 1
        self.points.append((live + size, 0, torch_cpu.BN_TEMP_BYTES_PER_CHANNEL * channels, 0))
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
    for e in E_LEVELS:
        slope = floats * e + torch_cpu.INDEX_BYTES * index
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
        "params": params,
        "weight_max": weight_max,
        "bn_channels": sim.bn_channels,
        "input": 3 * res * res,
        "pool_in": np.broadcast_to(stem, (m,)),
        "act_total": acts.sum(axis=0),
        "act_max": acts.max(axis=0),
    }
    lists = {k: v.tolist() for k, v in columns.items()}
    dispatch = sim.dispatch.rows(acts)
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
            **dispatch[i],
            "peak1": peak1_rows[i],
            "lines": [lines[li][i] for li in range(len(E_LEVELS))],
        }
        for i in range(m)
    ]


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


def compute_features(frame: pd.DataFrame) -> pd.DataFrame:
    """Architecture features of every config in ``frame``, vectorized.

    ``frame`` needs the columns family, depth, width, resolution and batch_size; precision is
    optional (default fp32); so is runtime: on rows whose runtime is not ``torch`` the eager
    PyTorch CPU columns (``native_conv_flops``, ``onednn_weight_mb``, ``mmap_mb``) are 0
    (other runtimes have their own kernels). Returns a DataFrame with ``frame``'s index and
    the columns :data:`FEATURE_COLUMNS` (see :mod:`carb_nas.features` for definitions;
    ``flops``, ``params``, the ``n_*`` counts are int64, the rest float64).
    Raises :class:`~carb_nas.errors.ConfigError` on any value :mod:`carb_nas.space` refuses
    (:func:`~carb_nas.space.factorize_configs`), before any work.

    Rows of the other built-in families (MobileNet, VGG, ...) have no closed form: their
    module (:func:`carb_nas.models.build_model`) is traced on the meta device
    (:func:`trace_features`), once per distinct config, cached.
    """
    encoded = factorize_configs(frame)
    families = encoded["family"][1]
    if any(f not in RESNET_FAMILIES for f in families):
        return _mixed_features(frame, encoded)
    return _resnet_features(frame, encoded)


_TRACED_CACHE: dict[tuple, dict[str, Any]] = {}
_TRACED_CACHE_MAX = 20_000
_INT_COLUMNS = ("flops", "native_conv_flops", "params", "n_conv", "n_bn", "n_linear",
                "n_blocks", "n_stages")  # fmt: skip


def _traced_row(config: Config) -> dict[str, Any]:
    key = (config.family, config.depth, config.width, config.resolution, config.batch_size,
           config.precision)  # fmt: skip
    row = _TRACED_CACHE.get(key)
    if row is None:
        model = meta_model(config)  # one build for all of a network's batch sizes
        shape = (config.batch_size, 3, config.resolution, config.resolution)
        row = trace_features(model, shape, config.precision)
        if len(_TRACED_CACHE) >= _TRACED_CACHE_MAX:
            _TRACED_CACHE.clear()
        _TRACED_CACHE[key] = row
    return row


def _mixed_features(frame: pd.DataFrame, encoded: dict) -> pd.DataFrame:
    """ResNet rows in closed form, the other families' rows traced; ``frame``'s row order."""
    fam_c, fam_u = encoded["family"]
    resnet = np.array([f in RESNET_FAMILIES for f in fam_u], dtype=bool)[fam_c]
    positions = np.arange(len(frame))
    parts = []
    if resnet.any():
        sub = frame.iloc[np.flatnonzero(resnet)]
        parts.append(_resnet_features(sub, factorize_configs(sub)).set_axis(positions[resnet]))
    # one traced row per distinct config
    codes = {k: (c[~resnet], v) for k, (c, v) in encoded.items()}
    names = list(codes)
    rows = [
        _traced_row(Config(**dict(zip(names, values))))
        for values in zip(*[[v[i] for i in c.tolist()] for c, v in codes.values()])
    ]
    traced = pd.DataFrame(rows, columns=list(FEATURE_COLUMNS), index=positions[~resnet])
    if "runtime" in codes:
        run_c, run_u = codes["runtime"]
        other = np.array([r != torch_cpu.RUNTIME for r in run_u], dtype=bool)[run_c]
        traced.loc[other, list(torch_cpu.COLUMNS)] = 0
    parts.append(traced.astype({c: np.int64 for c in _INT_COLUMNS}))
    out = pd.concat(parts).sort_index()
    out = out.astype({c: np.float64 for c in FEATURE_COLUMNS if c not in _INT_COLUMNS})
    out.index = frame.index
    return out[list(FEATURE_COLUMNS)]


def _resnet_features(frame: pd.DataFrame, encoded: dict) -> pd.DataFrame:
    n = len(frame)
    fam_c, fam_u = encoded["family"]
    dep_c, dep_u = encoded["depth"]
    wid_c, wid_u = encoded["width"]
    res_c, res_u = encoded["resolution"]
    pre_c, pre_u = encoded.get("precision", (np.zeros(n, dtype=np.int64), ["fp32"]))
    e_of = [ELEMENT_BYTES[p] for p in pre_u]
    bat_c, bat_u = encoded["batch_size"]
    batch = np.asarray(bat_u, dtype=np.int64)[bat_c]

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
    width_canon = [float(canonical_width(w)) for w in wid_u]
    keys = [
        (fam_u[fam_k[a]], dep_u[dep_k[a]], width_canon[wid_k[a]], res_u[res_k[a]])
        for a in range(n_arch)
    ]
    rows = _archs(keys)

    def table(name: str) -> np.ndarray:
        return np.fromiter((r[name] for r in rows), dtype=np.int64, count=n_arch)

    # per (architecture, element size) peak tables, padded to the longest line set
    n_lines = max((len(ls) for r in rows for ls in r["lines"]), default=1)
    slopes = np.zeros((n_arch, len(E_LEVELS), n_lines), dtype=np.int64)
    icpts = np.zeros_like(slopes)
    peak1 = np.zeros((n_arch, len(E_LEVELS)), dtype=np.int64)
    for a, r in enumerate(rows):
        peak1[a] = r["peak1"]
        for li, ls in enumerate(r["lines"]):
            arr = np.array(ls + [ls[0]] * (n_lines - len(ls)), dtype=np.int64)
            slopes[a, li], icpts[a, li] = arr[:, 0], arr[:, 1]
    e_level = np.array([E_LEVELS.index(e) for e in e_of], dtype=np.int64)[pre_c]
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
    resident = (params + 2 * bn_ch_a[arch_id]) * e + INT64_BYTES * n_bn + input_bytes
    flat = arch_id * len(E_LEVELS) + e_level
    slope_rows, icpt_rows = slopes.reshape(-1, n_lines), icpts.reshape(-1, n_lines)
    extra = slope_rows[flat, 0] * batch + icpt_rows[flat, 0]
    for li in range(1, n_lines):
        np.maximum(extra, slope_rows[flat, li] * batch + icpt_rows[flat, li], out=extra)
    extra = np.where(batch == 1, peak1.reshape(-1)[flat], extra)
    out: dict[str, np.ndarray] = {"flops": flops, "params": params}
    out.update(torch_cpu.closed_form_columns(rows, table, arch_id, batch, e, e_level))
    if "runtime" in encoded:
        run_c, run_u = encoded["runtime"]
        other = np.array([r != torch_cpu.RUNTIME for r in run_u], dtype=bool)[run_c]
        for col in torch_cpu.COLUMNS:
            out[col] = np.where(other, 0, out[col])
    weight_max = table("weight_max")[arch_id]
    out.update(
        derive(flops, params, e, weight_max, input_bytes, act_total, act_max, resident + extra)
    )
    out["pool_in_mb"] = pool_in / MB
    out["n_conv"] = table("n_conv")[arch_id]
    out["n_bn"] = n_bn
    out["n_linear"] = table("n_linear")[arch_id]
    out["n_blocks"] = table("n_blocks")[arch_id]
    out["n_stages"] = table("n_stages")[arch_id]
    # copy=False: the columns are fresh arrays; consolidating them would only copy
    return pd.DataFrame({k: out[k] for k in FEATURE_COLUMNS}, index=frame.index, copy=False)


def within_max_gflops(frame: pd.DataFrame, max_gflops_per_batch: float) -> np.ndarray:
    """Per config of ``frame``, whether its ``flops`` stay within ``max_gflops_per_batch``
    GFLOPs (the ``[limits]`` rule of a space file)."""
    encoded = factorize_configs(frame)
    if all(f in RESNET_FAMILIES for f in encoded["family"][1]):
        return compute_features(frame)["flops"].to_numpy() <= max_gflops_per_batch * 1e9
    # FLOPs are exactly linear in the batch: trace each other family's architecture once, at
    # batch 1, instead of every config
    fam_c, fam_u = encoded["family"]
    resnet = np.array([f in RESNET_FAMILIES for f in fam_u], dtype=bool)[fam_c]
    flops = np.zeros(len(frame), dtype=np.int64)
    if resnet.any():
        flops[resnet] = compute_features(frame.iloc[np.flatnonzero(resnet)])["flops"].to_numpy()
    names = ("family", "depth", "width", "resolution", "batch_size")
    cols = [[encoded[k][1][i] for i in encoded[k][0][~resnet].tolist()] for k in names]
    flops[~resnet] = [
        _traced_row(Config(f, d, w, r, 1))["flops"] * b for f, d, w, r, b in zip(*cols)
    ]
    return flops <= max_gflops_per_batch * 1e9


def clear_cache() -> None:
    """Forget the per-architecture results (a cold start, e.g. for a benchmark)."""
    _ARCH_CACHE.clear()
    _TRACED_CACHE.clear()
