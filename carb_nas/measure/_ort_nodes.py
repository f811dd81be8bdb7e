"""Per-node measurements of ONNX Runtime on the CPU: what each kernel of a config's graph took.

:func:`measure_ort_nodes` exports a config's network (the exporter the ``onnxruntime`` runtime
measures with), opens it in a session of one thread with every graph optimization (Conv +
BatchNorm + ReLU fused, the residual Add fused into its Conv as a sum input, NCHWc layouts: the
graph ONNX Runtime really runs), warms it up, then runs it ``runs`` times with ONNX Runtime's
own profiler on (public ``SessionOptions.enable_profiling``) and keeps, per node, the median of
its ``*_kernel_time`` events. Each node comes back with its op type, the shapes of its data
input, weight and output, whether it adds a residual (a sum input), and its median time.

:func:`run_ort_nodes_campaign` measures many configs and appends one JSON line per config to
``nodes.jsonl`` in a directory (its config, the platform fingerprint, its nodes), so a killed
campaign resumes where it stopped; rows of another platform fingerprint are refused.
:func:`read_ort_nodes` reads such a directory back as one node table.

These rows train ``costmodel.NodeCostModel``: how this CPU kind runs each kernel shape, the
ONNX Runtime analogue of the PyTorch per-op rows (``_ops``).
"""

from __future__ import annotations

import json
import platform as _platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.errors import ConfigError, MeasurementError
from carb_nas.measure._ops import _append, _done_keys  # the ops campaign's resumable lines
from carb_nas.measure._profiler import cpu_identity, cpu_model_name
from carb_nas.space import CONFIG_COLUMNS, Config

__all__ = [
    "NODE_COLUMNS",
    "measure_ort_nodes",
    "ort_nodes_fingerprint",
    "read_ort_nodes",
    "run_ort_nodes_campaign",
]

NODES = "nodes.jsonl"
NODE_COLUMNS = ("key", "node", "op", "x", "w", "y", "sum", "us")
"""A node row: the config's ``key``, the node's position in the run, its ONNX ``op`` type, the
shapes of its data input ``x``, weight ``w`` (empty for ops without one) and output ``y``,
``sum`` (1 when a residual Add is fused into it) and its median kernel time ``us``."""


def ort_nodes_fingerprint() -> dict[str, Any]:
    """The platform of a per-node campaign: CPU, one thread, versions, what a node's time is."""
    import onnxruntime as ort
    import torch

    return {
        "platform": "cpu/onnxruntime/fp32",
        "device": "cpu",
        "device_name": cpu_model_name(),
        "cpu": cpu_identity(),
        "threads": 1,
        "runtime": "onnxruntime",
        "precision": "fp32",
        "python": _platform.python_version(),
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "graph_optimization": "ORT_ENABLE_ALL",
        "per_node": "median of the onnxruntime profiler's kernel_time events over the runs",
        "meter": "none",
    }


def _session(path: Path, profile_prefix: str | None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _shape(entry: dict[str, Any]) -> list[int]:
    """The shape of one ``input_type_shape`` / ``output_type_shape`` entry ({type: shape})."""
    return [int(v) for v in next(iter(entry.values()))]


def measure_ort_nodes(config: Config, runs: int = 5) -> list[dict[str, Any]]:
    """The nodes ONNX Runtime (CPU, fp32, one thread) runs for ``config``, each with its
    median kernel time over ``runs`` profiled runs (see the module docstring)."""
    import torch

    from carb_nas.measure._runtimes import _build_seeded, export_onnx

    _check_runs(runs)
    torch.set_num_threads(1)
    shape = (3, config.resolution, config.resolution)
    x = np.random.default_rng(0).standard_normal((config.batch_size, *shape)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="carb_nas_nodes_") as tmp:
        path = Path(tmp) / "model.onnx"
        export_onnx(_build_seeded(config).eval(), shape, path)
        sess = _session(path, str(Path(tmp) / "profile"))
        for _ in range(1 + runs):  # the profiler's first run: a warm-up, dropped below
            sess.run(None, {"input": x})
        events = json.loads(Path(sess.end_profiling()).read_text())
    kernels = [
        e
        for e in events
        if isinstance(e, dict) and e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
    ]
    per_run, left = divmod(len(kernels), 1 + runs)
    if per_run == 0 or left:
        raise MeasurementError(
            f"ONNX Runtime's profile does not split into runs: expected {1 + runs} runs of the "
            f"same nodes, got {len(kernels)} kernel events. Measure again; report it if it "
            "persists."
        )
    nodes = []
    for i in range(per_run):
        times = [e["dur"] for e in kernels[per_run + i :: per_run]]
        args = kernels[per_run + i]["args"]
        inputs = [_shape(t) for t in args.get("input_type_shape", [])]
        outputs = [_shape(t) for t in args.get("output_type_shape", [])]
        op = str(args.get("op_name", ""))
        nodes.append(
            {
                "op": op,
                "x": inputs[0] if inputs else [],
                "w": inputs[1] if op in ("Conv", "Gemm") and len(inputs) > 1 else [],
                "y": outputs[0] if outputs else [],
                "sum": int(op == "Conv" and len(inputs) > 3),
                "us": float(statistics.median(times)),
            }
        )
    return nodes


def _check_runs(runs: Any) -> None:
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ConfigError(f"invalid runs: expected an integer >= 1, got {runs!r}. Pass runs=5.")


def run_ort_nodes_campaign(
    configs: Iterable[Config],
    out_dir: str | Path,
    runs: int = 5,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Measure the nodes of every config not yet in ``out_dir``; returns how many were
    measured now. Each config appends one line to ``nodes.jsonl`` (its knobs, the
    fingerprint, its nodes or ``status: error``); interrupt it and call it again to go on."""
    _check_runs(runs)  # before the directory is made
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fp = json.dumps(ort_nodes_fingerprint(), sort_keys=True)
    done = _done_keys(out / NODES, fp)
    n = 0
    for config in configs:
        if config.key in done:
            continue
        base = {
            "key": config.key,
            **{c: getattr(config, c) for c in CONFIG_COLUMNS},
            "fingerprint": fp,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        try:
            rec = {**base, "status": "ok", "nodes": measure_ort_nodes(config, runs)}
        except (MeasurementError, RuntimeError) as e:
            rec = {**base, "status": "error", "error": f"{type(e).__name__}: {e}"[:500]}
        _append(out / NODES, [rec])
        done.add(config.key)
        n += 1
        if progress is not None:
            progress(f"{config.key}: {rec.get('error') or str(len(rec['nodes'])) + ' nodes'}")
    return n


def read_ort_nodes(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(configs, nodes)`` of a per-node campaign (its directory, or its ``nodes.jsonl``,
    gzipped or not, as shipped): one row per measured config (its knobs, ``key``,
    ``fingerprint``) and one per node (:data:`NODE_COLUMNS`); torn lines and failed configs
    are skipped."""
    import gzip

    p = Path(path)
    if p.is_dir():
        p = p / NODES
    if not p.is_file():
        raise ConfigError(
            f"not a per-node campaign: expected {p}, got no such file. Pass the directory "
            "run_ort_nodes_campaign wrote, or its nodes.jsonl."
        )
    configs, nodes = [], []
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("status") != "ok":
                continue
            configs.append({k: v for k, v in rec.items() if k not in ("nodes", "status")})
            for i, node in enumerate(rec["nodes"]):
                nodes.append({"key": rec["key"], "node": i, **node})
    return pd.DataFrame(configs), pd.DataFrame(nodes, columns=list(NODE_COLUMNS))
