"""How this CPU kind runs each kernel: a per-node cost model, summed per network.

ONNX Runtime's CPU graph of a CNN is a chain of fused kernels: one ``Conv`` per convolution
(BatchNorm, ReLU and the residual Add fused into it), the pools and the classifier's ``Gemm``.
How long each takes depends on its shape in ways a config-level model trained on another
machine cannot know: a 3x3 conv on a tiny feature map runs at a fraction of the FLOP rate of
the same conv on a larger one, by a ratio that differs from one CPU kind to another.
:class:`NodeCostModel` learns ``log`` kernel time of one node (its op, batch, channels, spatial
size, kernel, groups, FLOPs, bytes in / out / of weights, channel padding to 16 lanes) with
two network columns beside it (the network's conv weight bytes and its largest output: what
stays in cache between kernels), from per-node rows measured on this CPU kind
(:func:`carb_nas.measure.run_ort_nodes_campaign`). A network's prediction is the sum of its
nodes, read from the meta-device trace of its config (:func:`node_table`: the trace's conv,
pool and linear rows are ONNX Runtime's ``Conv``, pool and ``Gemm`` nodes one to one); the
reorders, flatten and per-run overhead are left to the calibration map, whose column the sum
is (``calibrate.module_ratio``). Persisted as LightGBM's booster text, no pickle.

PyTorch eager runs every op of the trace (conv, BatchNorm, ReLU, add, pools, linear) as its own
kernel, on oneDNN or its native kernels by shape; the same model learns them from the PyTorch
profiler's per-op times (:func:`carb_nas.measure.run_ops_campaign`), with the native flag as a
column, where the CPU kind has such rows.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._io import atomic_write_text
from carb_nas.costmodel._calibration import ModuleRatio
from carb_nas.costmodel._common import booster_from_text, check_config_columns, sha256_file
from carb_nas.costmodel._defaults import (
    _check_writable,
    _this_cpu_kind,
    default_model_cache_dir,
)
from carb_nas.errors import ModelError
from carb_nas.features import native_conv_mask
from carb_nas.models import EXPANSION, NUM_CLASSES, stage_channels
from carb_nas.space import CONFIG_COLUMNS, Config, frame_to_configs

__all__ = [
    "NODE_OPS",
    "NodeCostModel",
    "NodeRatio",
    "load_default_node_model",
    "node_ratio",
    "measured_table",
    "node_rows_path",
    "node_table",
    "torch_measured_table",
]

NODE_OPS = {"Conv": 0, "MaxPool": 1, "GlobalAveragePool": 2, "Gemm": 3}
"""ONNX Runtime's node types the model learns (op code); the rest (reorders, flatten) take a
few µs."""
TORCH_OPS = {**NODE_OPS, "norm": 4, "act": 5, "add": 6}
"""PyTorch's op kinds the model learns: ONNX Runtime's four (conv, max pool, global average
pool, linear) and the ops ONNX Runtime fuses into its convs."""
PLATFORMS = ("cpu/onnxruntime/fp32", "cpu/torch/fp32")
NODE_COLUMNS = ("key", "op", "n", "c", "h", "co", "ho", "k", "g")
"""A node's shape: batch ``n``, channels in / out, square spatial size in / out, kernel ``k``
(0 off conv) and groups ``g``."""
LANES = 16  # fp32 lanes of an AVX-512 vector: ONNX Runtime's NCHWc block on such a CPU
NODE_PARAMS = {
    "objective": "l2",
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_data_in_leaf": 3,
    "lambda_l2": 1.0,
    "verbose": -1,
    "num_threads": 0,
    "seed": 0,
    "deterministic": True,
    "force_row_wise": True,
}
NODE_ROUNDS = 800
MAX_KEPT_SUMS = 200_000  # configs whose node sum a model keeps (a few MB)
_NODE_RECIPE_REVISION = 1
_SHIPPED_NODES = Path(__file__).resolve().parents[1] / "data" / "nodes"


def node_rows_path(
    cpu_kind: str | None = None, platform: str = "cpu/onnxruntime/fp32"
) -> Path | None:
    """The shipped per-node rows of ``platform`` (:data:`PLATFORMS`) measured on ``cpu_kind``
    (default: this machine's), or None where that kind has none."""
    kind = cpu_kind or _this_cpu_kind()
    path = _SHIPPED_NODES / f"{platform.replace('/', '_')}_{kind}.jsonl.gz"
    return path if path.is_file() else None


def measured_table(configs: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """The ONNX Runtime node table of the measured ``configs`` (:func:`node_table`) with each
    node's measured time ``us`` (``measure.read_ort_nodes``' two frames).

    ONNX Runtime's own shapes are not the network's: its NCHWc layout pads a map's channels to
    the vector's lanes (56 -> 64), in the weights too, and a net of narrow maps gets reorder
    and unfused Add nodes instead. So each traced node takes the time of a measured node of
    its op, spatial sizes and kernel whose channels agree once both are padded to the lanes
    (identical shapes are interchangeable); traced nodes with no such partner are dropped and
    so are measured nodes of other types (reorders, flatten: a few µs each, left to the map)."""
    known = nodes[nodes["op"].isin(list(NODE_OPS))]
    by_key = {k: g for k, g in known.groupby("key", sort=False)}
    parts = []
    for config in frame_to_configs(configs[list(CONFIG_COLUMNS)]):
        measured = by_key.get(config.key)
        if measured is None:
            continue
        waiting: dict[tuple, list[float]] = {}
        for op, x, w, y, us in measured[["op", "x", "w", "y", "us"]].itertuples(
            index=False, name=None
        ):
            gemm = op == "Gemm"
            k = int(w[2]) if op == "Conv" else 0
            shape = (1, 1) if gemm else (int(x[2]), int(y[2]))
            key = (NODE_OPS[op], *shape, k, _padded(int(x[1])), _padded(int(y[1])))
            waiting.setdefault(key, []).append(float(us))
        table = node_table([config], "cpu/onnxruntime/fp32")
        us_col = np.full(len(table), np.nan)
        for i, row in enumerate(table[list(NODE_COLUMNS[1:])].itertuples(index=False)):
            op, _, c, h, co, ho, k, _ = (int(v) for v in row)
            times = waiting.get((op, h, ho, k, _padded(c), _padded(co)))
            if times:
                us_col[i] = times.pop(0)
        parts.append(table.assign(us=us_col).dropna(subset=["us"]))
    columns = [*NODE_COLUMNS, "us"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def _padded(channels: int) -> int:
    return -(-channels // LANES) * LANES


def node_table(
    configs: pd.DataFrame | list[Config], platform: str = "cpu/onnxruntime/fp32"
) -> pd.DataFrame:
    """The nodes ``platform`` runs for each config (:data:`NODE_COLUMNS`; ``key`` the
    config's), from its network's ops: for ONNX Runtime the conv (``Conv``), max pool,
    global average pool and linear (``Gemm``) ones, for PyTorch also every BatchNorm, ReLU and
    add. A network is read once for all its batch sizes (a node's shape is the batch's but for
    ``n``)."""
    if isinstance(configs, pd.DataFrame):
        configs = frame_to_configs(configs[list(CONFIG_COLUMNS)])
    if not configs:
        return pd.DataFrame(columns=NODE_COLUMNS)
    table = _stacked(configs, platform)
    table["key"] = np.array([c.key for c in configs], dtype=object)[table["key"].to_numpy()]
    return table


def _stacked(configs: list[Config], platform: str) -> pd.DataFrame:
    """:func:`node_table` with each config's position in ``configs`` as its ``key``."""
    last = max(NODE_OPS.values()) if platform == "cpu/onnxruntime/fp32" else max(TORCH_OPS.values())
    arrays = [_network_array(replace(c, batch_size=1), last) for c in configs]
    counts = [len(a) for a in arrays]
    t = np.concatenate(arrays)
    t[:, 1] = np.repeat([c.batch_size for c in configs], counts)  # n: the config's batch
    table = pd.DataFrame(t, columns=list(NODE_COLUMNS[1:]))
    table.insert(0, "key", np.repeat(np.arange(len(configs)), counts))
    return table


@functools.lru_cache(maxsize=8192)
def _network_array(config: Config, last_op: int) -> np.ndarray:
    """One network's node rows at batch 1 as an int64 array (``NODE_COLUMNS`` but ``key``),
    ops up to ``last_op``: in closed form for the ResNet space (microseconds), else from the
    meta-device trace (a search reads thousands of networks: one frame for all, not one
    each)."""
    if config.family in EXPANSION:
        t = _resnet_rows(config)
    else:
        t = _traced_nodes(config)[list(NODE_COLUMNS[1:])].to_numpy(np.int64)
    return t[t[:, 0] <= last_op]


def _resnet_rows(config: Config) -> np.ndarray:
    """The ops of a basic / bottleneck ResNet (``carb_nas.models``' layout: 7x7/2 stem,
    3x3/2 max pool, stages striding at their first block, 1x1/stride downsample; each conv
    followed by its BatchNorm), the rows :func:`_traced_nodes` gives, without tracing (a
    search scores thousands of configs)."""
    from carb_nas.space import stage_layout

    def out(h: int, k: int, s: int) -> int:
        return (h + 2 * ((k - 1) // 2) - k) // s + 1

    conv, pool, gemm = TORCH_OPS["Conv"], TORCH_OPS["MaxPool"], TORCH_OPS["Gemm"]
    norm, act, add = TORCH_OPS["norm"], TORCH_OPS["act"], TORCH_OPS["add"]
    layout = stage_layout(config.family, config.depth)
    chans = stage_channels(config.width, len(layout))
    expansion = EXPANSION[config.family]

    def conv_bn(c: int, h: int, co: int, k: int, s: int, relu: bool) -> list[tuple]:
        ho = out(h, k, s)
        return [(conv, c, h, co, ho, k), (norm, co, ho, co, ho, 0)] + (
            [(act, co, ho, co, ho, 0)] if relu else []
        )

    h = config.resolution
    rows = conv_bn(3, h, chans[0], 7, 2, True)
    h = out(h, 7, 2)
    rows.append((pool, chans[0], h, chans[0], out(h, 3, 2), 0))
    h, c = out(h, 3, 2), chans[0]
    for i, (n_blocks, planes) in enumerate(zip(layout, chans)):
        for b in range(n_blocks):
            s = 2 if (i > 0 and b == 0) else 1
            ho, co = out(h, 3, s), planes * expansion
            if config.family == "basic":
                rows += conv_bn(c, h, planes, 3, s, True) + conv_bn(planes, ho, planes, 3, 1, False)
            else:
                rows += conv_bn(c, h, planes, 1, 1, True) + conv_bn(planes, h, planes, 3, s, True)
                rows += conv_bn(planes, ho, co, 1, 1, False)
            if s != 1 or c != co:
                rows += conv_bn(c, h, co, 1, s, False)
            rows += [(add, co, ho, co, ho, 0), (act, co, ho, co, ho, 0)]
            h, c = ho, co
    rows += [(NODE_OPS["GlobalAveragePool"], c, h, c, 1, 0), (gemm, c, 1, NUM_CLASSES, 1, 0)]
    t = np.array(rows, dtype=np.int64)  # op, c, h, co, ho, k
    one = np.ones(len(t), dtype=np.int64)
    return np.column_stack([t[:, 0], one, t[:, 1:6], one])  # n = 1, g = 1


def torch_op_codes(kind: np.ndarray, op: np.ndarray, h_out: np.ndarray) -> np.ndarray:
    """The :data:`TORCH_OPS` code of each traced op (``kind``, ``op`` and output map size
    columns of ``trace_ops``); -1 for ops the model leaves out (reshapes)."""
    code = np.full(len(kind), -1)
    code[kind == "conv"] = TORCH_OPS["Conv"]
    code[op == "max_pool2d"] = TORCH_OPS["MaxPool"]
    code[(kind == "pool") & (op != "max_pool2d") & (h_out == 1)] = TORCH_OPS["GlobalAveragePool"]
    code[kind == "linear"] = TORCH_OPS["Gemm"]
    for name in ("norm", "act", "add"):
        code[kind == name] = TORCH_OPS[name]
    return code


def torch_measured_table(lines: list[dict[str, Any]]) -> pd.DataFrame:
    """:data:`NODE_COLUMNS` plus ``us`` of shipped PyTorch per-op lines (one per config:
    ``key`` and ``ops``, each ``[kind, op, batch, c_in, h_in, c_out, h_out, kernel, stride,
    groups, us]``, ``benchmarks/node_data.py``), the op kinds of :data:`TORCH_OPS` only."""
    parts = []
    for line in lines:
        ops = pd.DataFrame(line["ops"], columns=[*TRACE_COLUMNS[:-1], "stride", "groups", "us"])
        cols = {c: ops[c].to_numpy() for c in TRACE_COLUMNS}
        kept = torch_op_codes(cols["kind"], cols["op"], cols["h_out"]) >= 0
        parts.append(_from_trace(line["key"], cols).assign(us=ops["us"].to_numpy()[kept]))
    columns = [*NODE_COLUMNS, "us"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


TRACE_COLUMNS = ("kind", "op", "batch", "c_in", "h_in", "c_out", "h_out", "kernel", "groups")
"""The columns of the traced op table (``features.trace_ops``) a node row is made of."""


def _from_trace(key: str, cols: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The node rows (:data:`NODE_COLUMNS`) of a traced op table's columns
    (:data:`TRACE_COLUMNS`), ops the model leaves out dropped: a linear layer's map size is
    1, only a conv has a kernel and groups."""
    code = torch_op_codes(cols["kind"], cols["op"], cols["h_out"])
    m = code >= 0
    conv, linear = code[m] == TORCH_OPS["Conv"], code[m] == TORCH_OPS["Gemm"]
    return pd.DataFrame(
        {
            "key": key,
            "op": code[m],
            "n": cols["batch"][m],
            "c": cols["c_in"][m],
            "h": np.where(linear, 1, cols["h_in"][m]),
            "co": cols["c_out"][m],
            "ho": np.where(linear, 1, cols["h_out"][m]),
            "k": np.where(conv, cols["kernel"][m], 0),
            "g": np.where(conv, cols["groups"][m], 1),
        }
    )


def _traced_nodes(config: Config) -> pd.DataFrame:
    """The op table of one network from its meta-device trace."""
    from carb_nas.features import trace_op_arrays
    from carb_nas.models import ModelSpec, meta_model

    spec = ModelSpec.from_config(config)
    cols, _ = trace_op_arrays(meta_model(config), spec.input_shape, "fp32")
    return _from_trace(config.key, cols)


def node_features(table: pd.DataFrame, platform: str = "cpu/onnxruntime/fp32") -> np.ndarray:
    """The model's columns of a node table (:data:`NODE_COLUMNS`); for PyTorch also whether
    a conv runs on PyTorch's native kernels rather than oneDNN (``features.native_conv_mask``:
    by shape and batch)."""
    t = {c: table[c].to_numpy(float) for c in NODE_COLUMNS[1:]}
    n, c, h, co, ho, k, g = (t[x] for x in ("n", "c", "h", "co", "ho", "k", "g"))
    conv = t["op"] == NODE_OPS["Conv"]
    weight = np.where(conv, co * c / g * k * k, np.where(t["op"] == NODE_OPS["Gemm"], co * c, 0))
    flops = np.where(conv | (t["op"] == NODE_OPS["Gemm"]), 2 * n * ho * ho * weight, n * c * h * h)
    out = n * co * ho * ho
    stride = np.maximum(1, np.round(h / np.maximum(ho, 1)))
    # what stays in cache from one kernel to the next: the network's weights, its largest map
    keys = table["key"].to_numpy()
    w_total = pd.Series(np.where(conv, weight, 0)).groupby(keys).transform("sum").to_numpy()
    out_max = pd.Series(out).groupby(keys).transform("max").to_numpy()
    columns = [
        t["op"],
        np.log(n),
        np.log(c),
        np.log(h),
        np.log(co),
        np.log(ho),
        k,
        stride,
        g,
        np.log1p(flops),
        np.log(n * c * h * h),
        np.log(out),
        np.log1p(weight),
        np.ceil(c / LANES) * LANES / c,
        np.ceil(co / LANES) * LANES / co,
        np.log1p(w_total * 4),
        np.log(out_max * 4),
    ]
    if platform == "cpu/torch/fp32":
        columns.append((conv & native_conv_mask(n, c, h, k, stride, g)).astype(float))
    return np.column_stack(columns)


class NodeCostModel:
    """Per-node kernel times of one platform (:data:`PLATFORMS`) on one CPU kind, summed per
    network (see the module docstring). ``fit(table)`` on :func:`measured_table`'s (ONNX
    Runtime) or :func:`torch_measured_table`'s rows; ``predict(X)`` on config rows
    (``model_inputs``) gives ``latency_ms``: the sum of the network's node times, without the
    per-run overhead (a column of the calibration map, not a latency to quote)."""

    targets_ = ["latency_ms"]

    def __init__(
        self, booster_text: str | None = None, platform: str = "cpu/onnxruntime/fp32"
    ) -> None:
        if platform not in PLATFORMS:
            raise ModelError(
                f"no node model for {platform!r}: expected one of {list(PLATFORMS)}. Calibrate "
                "other platforms without one."
            )
        self.platform = platform
        self.booster_text = booster_text
        self._booster = None
        self._sums: dict[str, float] = {}  # node sum (ms) by config key
        self.rows_sha256_16: str | None = None  # the shipped rows it was trained on, if any
        if booster_text is not None:
            self._booster = booster_from_text(
                booster_text,
                "node model",
                "Delete the cached file; it is trained again on first use.",
            )

    def fit(self, table: pd.DataFrame) -> NodeCostModel:
        import lightgbm as lgb

        us = table["us"].to_numpy(float)
        if len(table) == 0 or not (np.isfinite(us) & (us > 0)).all():
            raise ModelError(
                f"unusable node rows: expected positive finite kernel times, got {len(table)} "
                "rows with some missing or <= 0. Measure them with "
                "measure.run_ort_nodes_campaign (or run_ops_campaign for PyTorch)."
            )
        data = lgb.Dataset(node_features(table, self.platform), np.log(us))
        booster = lgb.train(NODE_PARAMS, data, num_boost_round=NODE_ROUNDS)
        self.booster_text = booster.model_to_string()
        self._booster = booster
        self._sums = {}
        return self

    def predict_table(self, table: pd.DataFrame) -> pd.Series:
        """The summed node time (ms) of each ``key`` of a node table."""
        if self._booster is None:
            raise ModelError("node model not fitted: call fit(table) first.")
        features = node_features(table, self.platform)
        # a deep network repeats its blocks' nodes: each distinct node is predicted once
        group = table.groupby(list(NODE_COLUMNS), sort=False).ngroup().to_numpy()
        first = np.unique(group, return_index=True)[1]
        us = np.exp(self._booster.predict(features[first]))[group]
        return pd.Series(us / 1000).groupby(table["key"].to_numpy()).sum()

    def predict(self, X: pd.DataFrame, alpha: float | None = None) -> pd.DataFrame:
        """``latency_ms`` (the node sum) per config row of ``X``, in ``X``'s order; each
        config's sum is kept (a search, its re-scoring and validation ask again)."""
        check_config_columns(X, "node model")
        configs = frame_to_configs(X[list(CONFIG_COLUMNS)])
        new = list({c.key: c for c in configs if c.key not in self._sums}.values())
        if new:
            if len(self._sums) > MAX_KEPT_SUMS:
                self._sums.clear()
            sums = self.predict_table(_stacked(new, self.platform))  # keyed by position
            self._sums.update({new[i].key: float(v) for i, v in sums.items()})
        return pd.DataFrame({"latency_ms": [float(self._sums[c.key]) for c in configs]})


def load_default_node_model(
    cpu_kind: str | None = None, verbose: bool = True, platform: str = "cpu/onnxruntime/fp32"
) -> NodeCostModel | None:
    """The node model of ``platform`` from ``cpu_kind``'s shipped per-node rows (default:
    this machine's kind), trained on first use (1,500 configs: torch 5 s, ONNX Runtime 6 s,
    its rows paired with traced nodes first; said on stderr) and cached beside the default
    models (and in this process); None where that kind has no such rows."""
    path = node_rows_path(cpu_kind, platform)
    if path is None:
        return None
    digest = sha256_file(path)[:16]
    key = (str(default_model_cache_dir()), digest, NODE_ROUNDS)
    if key not in _LOADED:
        _LOADED[key] = _load_or_train(path, digest, platform, verbose)
        _LOADED[key].rows_sha256_16 = digest
    return _LOADED[key]


_LOADED: dict[tuple[str, str, int], NodeCostModel] = {}  # this process's, by cache and rows


def _load_or_train(path: Path, digest: str, platform: str, verbose: bool) -> NodeCostModel:
    import gzip
    import time

    from carb_nas.measure.campaign import read_ort_nodes

    cache = default_model_cache_dir()
    stem = platform.replace("/", "_")
    cached = cache / f"{stem}-nodes-{digest}-r{_NODE_RECIPE_REVISION}.json"
    if cached.is_file():
        try:
            doc = json.loads(cached.read_text())
            return NodeCostModel(str(doc["booster"]), platform)
        except (json.JSONDecodeError, KeyError, ModelError):
            pass  # a damaged cache entry: trained again below
    _check_writable(cache)
    if verbose:
        print(
            f"carb_nas: training the {platform} node model on {path.name} (once, a few "
            "seconds; then cached)",
            file=sys.stderr,
            flush=True,
        )
    t0 = time.perf_counter()
    if platform == "cpu/onnxruntime/fp32":
        table = measured_table(*read_ort_nodes(path))
    else:
        with gzip.open(path, "rt") as f:
            table = torch_measured_table([json.loads(line) for line in f if line.strip()])
    model = NodeCostModel(platform=platform).fit(table)
    atomic_write_text(
        cached, json.dumps({"rows": path.name, "sha256_16": digest, "booster": model.booster_text})
    )
    if verbose:
        print(f"carb_nas: trained in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return model


class NodeRatio(ModuleRatio):
    """The calibration map's column ``log_module_ratio`` from a node model: the exact
    ``log(node sum / source latency)`` of each config, from this CPU kind's
    :class:`NodeCostModel` (no surrogate: a ResNet's node table is closed-form, microseconds).

    A surrogate over the knobs, as torch's :class:`ModuleRatio` is, follows the exact column
    poorly and gives back much of its gain (docs/accuracy.md): the node sum moves with the
    channel padding to 16 lanes, a step in width a tree of knobs follows poorly. Saved
    as a reference to the shipped node rows it was trained on (platform, ``cpu_kind`` and
    their digest), not as the booster: :func:`load_default_node_model` trains the same model
    from them."""

    def __init__(self, cpu_kind: str, node_model: NodeCostModel) -> None:
        if node_model.rows_sha256_16 is None:
            raise ModelError(
                "unusable node model for a calibration column: expected one loaded from shipped "
                "rows (load_default_node_model), got one fitted here, which a saved calibration "
                "could not name. Use carb_nas.costmodel.calibration.node_ratio(cpu_kind, platform)."
            )
        self.cpu_kind = cpu_kind
        self.rows_sha256_16 = node_model.rows_sha256_16
        self.node_model = node_model
        self.platform = node_model.platform
        self.booster_text = node_model.booster_text or ""
        self.what = f"{'ONNX Runtime' if 'onnxruntime' in self.platform else 'PyTorch'} node model"

    def predict(self, X: pd.DataFrame, log_source_ms: np.ndarray) -> np.ndarray:
        """``log(node sum / source)`` latency of each config row of ``X``."""
        sums = self.node_model.predict(X)["latency_ms"].to_numpy(float)
        return np.log(np.maximum(sums, 1e-12)) - np.asarray(log_source_ms, dtype=float)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "nodes",
            "platform": self.platform,
            "cpu_kind": self.cpu_kind,
            "rows_sha256_16": self.rows_sha256_16,
        }

    @classmethod
    def from_reference(cls, data: Mapping[str, Any]) -> NodeRatio:
        """The :meth:`to_dict` reference loaded again; a ``ModelError`` where this install's
        node rows of that kind are gone or differ (the calibration's column would move)."""
        kind, platform = str(data.get("cpu_kind")), str(data.get("platform"))
        model = load_default_node_model(kind, platform=platform) if platform in PLATFORMS else None
        digest = None if model is None else model.rows_sha256_16
        if digest != data.get("rows_sha256_16"):
            raise ModelError(
                f"calibration made with other node rows: expected the {platform} rows of "
                f"{kind} with digest {data.get('rows_sha256_16')}, got {digest or 'none'}. "
                "Calibrate again (carb-nas calibrate)."
            )
        assert model is not None  # its digest matched
        return cls(kind, model)


def node_ratio(
    cpu_kind: str | None = None, platform: str = "cpu/onnxruntime/fp32"
) -> NodeRatio | None:
    """The exact node-sum column of ``platform`` on ``cpu_kind`` (default: this machine's),
    or None where that kind has no shipped node rows of it."""
    kind = cpu_kind or _this_cpu_kind()
    model = load_default_node_model(kind, platform=platform)
    return None if model is None else NodeRatio(kind, model)
