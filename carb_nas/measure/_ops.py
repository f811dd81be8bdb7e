"""Per-operator measurements: the PyTorch profiler's per-op events of whole-network CPU runs,
matched to the traced op table of :func:`carb_nas.features.trace_ops`.

:func:`measure_ops` times a module the way the profiler times a config (the
:class:`~carb_nas.measure.Protocol`'s whole-network runs; the exact tensor peak of
``_runtimes.torch_cpu_peak_bytes``), then runs it ``profiled_runs`` more times under
``torch.profiler.profile`` (public API), each run inside a ``record_function`` marker. The
marker's direct children are the function-level ops the runtime executed (``aten::conv2d``,
``aten::batch_norm``, ``aten::add_``, ...); their per-run CPU times (``cpu_time_total``, which
includes the op's own sub-ops) give each op's median time. The sequence of those events is
aligned with the traced op table by op kind (``difflib.SequenceMatcher``): an op the trace
has and the runtime did not run (or the reverse) stays unmatched (``measured_ms`` NaN) and is
counted, never guessed.

:func:`run_ops_campaign` measures many module specs, each in a fresh forked process (the
parent only warms up and forks, so no measurement inherits another's freed buffers), and
appends each result to JSON-lines files in a directory, so a killed campaign resumes where it
stopped (specs whose key is already there are skipped).
"""

from __future__ import annotations

import difflib
import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from carb_nas.errors import ConfigError
from carb_nas.features import op_kind, trace_ops
from carb_nas.measure._profiler import cpu_identity, cpu_model_name
from carb_nas.measure._protocol import Protocol, time_runs
from carb_nas.measure._reference import REFERENCE_WORKLOAD, ReferenceProbe
from carb_nas.measure._runtimes import _quiet_stderr, torch_cpu_peak_bytes

__all__ = [
    "OPS_PEAK_METHOD",
    "measure_ops",
    "match_ops",
    "run_ops_campaign",
    "read_ops_campaign",
    "ops_fingerprint",
]

_MARKER = "carb_nas.ops.run"
OPS_PEAK_METHOD = "torch-profiler: params+buffers+input + peak of allocation events"
ROWS = "rows.jsonl"
OPS = "ops.jsonl"


def _coarse(kind: str) -> str:
    return "conv" if kind in ("conv", "dwconv", "gconv") else kind


def _event_kind(name: str) -> str:
    return _coarse(op_kind(name))


def profiled_op_times(
    module: nn.Module, x: torch.Tensor, runs: int = 3, warmup: int = 1
) -> list[tuple[str, float]]:
    """``(aten name, median CPU ms)`` of each function-level op of a forward pass, in order,
    from ``runs`` profiled runs (after ``warmup`` unprofiled ones)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with torch.inference_mode():
        for _ in range(warmup):
            module(x)
        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(runs):
                with record_function(f"{_MARKER}{i}"):
                    module(x)
    per_run: dict[str, list[tuple[float, str, float]]] = {}
    for ev in prof.events():
        parent = ev.cpu_parent
        if parent is not None and parent.name.startswith(_MARKER):
            per_run.setdefault(parent.name, []).append(
                (ev.time_range.start, ev.name, ev.cpu_time_total / 1e3)
            )
    seqs = [sorted(v) for _, v in sorted(per_run.items())]
    if not seqs:
        return []
    n = min(len(s) for s in seqs)
    seqs = [s for s in seqs if len(s) == n] or seqs[:1]
    return [(seqs[0][i][1], statistics.median(s[i][2] for s in seqs)) for i in range(n)]


def match_ops(ops: pd.DataFrame, events: list[tuple[str, float]]) -> pd.DataFrame:
    """The op table with ``measured_ms`` (NaN where unmatched) and ``event`` (the aten name)
    from the profiler's events, aligned by op kind."""
    traced = [_coarse(k) for k in ops["kind"]]
    measured = [_event_kind(name) for name, _ in events]
    out = ops.copy()
    ms = np.full(len(ops), np.nan)
    names = np.full(len(ops), "", dtype=object)
    sm = difflib.SequenceMatcher(a=traced, b=measured, autojunk=False)
    for block in sm.get_matching_blocks():
        for j in range(block.size):
            ms[block.a + j] = events[block.b + j][1]
            names[block.a + j] = events[block.b + j][0]
    out["measured_ms"] = ms
    out["event"] = names
    return out


def measure_ops(
    module: nn.Module,
    input_shape: tuple[int, ...],
    protocol: Protocol | str = "adaptive",
    profiled_runs: int = 3,
    seed: int = 0,
    reference: ReferenceProbe | None = None,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Measure ``module`` (fp32, on the CPU, in this process and its thread setting) on one
    random input of ``input_shape``.

    Returns ``(row, ops)``: ``row`` with the whole-network timing (``latency_ms``,
    ``latency_cv``, ... of :func:`time_runs`), ``peak_mem_mb``, ``op_sum_ms`` (the matched
    ops' times summed), ``n_ops`` / ``n_events`` / ``n_unmatched``; ``ops`` the traced op
    table with ``measured_ms``. With ``reference`` the row also has ``reference_ms``, the
    machine-speed probe timed among the runs (:class:`ReferenceProbe`), and
    ``ops_reference_ms``, the probe timed just before and after the profiled runs.
    """
    if not isinstance(module, nn.Module):
        raise ConfigError(
            f"measure_ops needs a torch.nn.Module: expected a module, got "
            f"{type(module).__name__}. Pass the model object."
        )
    proto = Protocol.named(protocol) if isinstance(protocol, str) else protocol
    module = module.eval()
    ops, _ = trace_ops(module, input_shape, "fp32", cache=False)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tuple(input_shape), generator=g)
    gc.collect()
    peak_mb = torch_cpu_peak_bytes(module, x) / 1e6

    def once() -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            module(x)
        return time.perf_counter() - t0

    timing = time_runs(once, proto, reference)
    if reference is not None:  # the probe again, around the profiled runs the op times are of
        reference.start()
        reference.run_burst()
    events = profiled_op_times(module, x, runs=profiled_runs)
    ops_reference_ms = None
    if reference is not None:
        reference.run_burst()
        ops_reference_ms = float(np.median(reference.samples_s)) * 1e3
    ops = match_ops(ops, events)
    matched = ops["measured_ms"].notna()
    row = {
        **timing.as_row(),
        "peak_mem_mb": peak_mb,
        "peak_mem_method": OPS_PEAK_METHOD,
        "op_sum_ms": float(ops.loc[matched, "measured_ms"].sum()),
        "n_ops": len(ops),
        "n_events": len(events),
        "n_unmatched": int((~matched).sum()),
        "ops_reference_ms": ops_reference_ms,
        "protocol": proto.name,
        "protocol_params": json.dumps(proto.params(), sort_keys=True),
    }
    return row, ops


def ops_fingerprint(protocol: Protocol, reference: bool = False) -> dict[str, Any]:
    """The platform of an ops campaign: CPU, threads, versions, protocol, fresh processes
    (and the machine-speed probe's workload when its rows time one)."""
    import platform as _platform

    from carb_nas.measure._profiler import allocator_fingerprint

    return {
        "platform": "cpu/torch/fp32",
        "device": "cpu",
        "device_name": cpu_model_name(),
        "cpu_model": cpu_model_name(),
        "cpu": cpu_identity(),
        "threads": torch.get_num_threads(),
        "runtime": "torch",
        "precision": "fp32",
        "python": _platform.python_version(),
        "torch": torch.__version__,
        "protocol": protocol.name,
        "protocol_params": protocol.params(),
        "meter": "none",
        "allocator": allocator_fingerprint(),
        "fresh_process": True,
        "per_op": "torch.profiler cpu_time_total of the record_function marker's children",
        **({"reference": REFERENCE_WORKLOAD} if reference else {}),
    }


def _done_keys(path: Path, fingerprint: str) -> set[str]:
    """Keys already measured in ``path``; refuses rows of another platform, so a campaign
    resumed on another machine (or torch, or protocol) never mixes two platforms' rows."""
    if not path.exists():
        return set()
    keys = set()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
                keys.add(rec["key"])
            except (json.JSONDecodeError, KeyError):
                continue  # a line torn by a kill: that spec is measured again
            if rec.get("fingerprint", fingerprint) != fingerprint:
                _refuse_resume(path, rec["fingerprint"], fingerprint)
    return keys


def _refuse_resume(path: Path, theirs: str, ours: str) -> None:
    a, b = json.loads(theirs), json.loads(ours)
    diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    raise ConfigError(
        f"{path.parent} was measured on another platform: expected rows with this platform's "
        f"fingerprint, got rows that differ in {', '.join(diff)} (e.g. {diff[0]}: "
        f"{a.get(diff[0])!r} there, {b.get(diff[0])!r} here). Continue it on the machine and "
        "setup that started it, or measure into a new directory."
    )


def _append(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    torn = False
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"  # a line cut by a kill: end it, so it stays alone
    with open(path, "a") as f:
        if torn:
            f.write("\n")
        for r in records:
            f.write(json.dumps(r, default=_jsonable) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


def _warm_up() -> None:
    """Like the fresh-process server's warm-up: raise glibc's mmap threshold once, JIT oneDNN
    and the profiler on a tiny model (see ``_fresh_server._warm_up``)."""
    buf = torch.ones((32 * 2**20 - 2**16) // 4)
    del buf
    tiny = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()
    quick = Protocol(warmup_runs=1, warmup_min_s=0.0, min_runs=1, max_runs=1, target_ci_rel=None)
    measure_ops(tiny, (1, 3, 16, 16), quick, profiled_runs=1)


def _measure_child(
    build: Callable[[Mapping[str, Any]], tuple[nn.Module, tuple[int, ...]]],
    spec: Mapping[str, Any],
    protocol: Protocol,
    profiled_runs: int,
    reference: ReferenceProbe | None,
) -> dict[str, Any]:
    torch.manual_seed(0)
    module, shape = build(spec)
    row, ops = measure_ops(module, shape, protocol, profiled_runs, reference=reference)
    return {"row": row, "ops": ops.to_dict(orient="records")}


def run_ops_campaign(
    specs: Iterable[Mapping[str, Any]],
    build: Callable[[Mapping[str, Any]], tuple[nn.Module, tuple[int, ...]]],
    out_dir: str | Path,
    protocol: Protocol | str = "adaptive",
    profiled_runs: int = 3,
    progress: Callable[[str], None] | None = None,
    reference: bool = False,
) -> int:
    """Measure every spec (a dict with a unique ``key``) not yet in ``out_dir``; returns how
    many were measured now.

    ``build(spec) -> (module, input_shape)`` runs in the forked child. Each result appends one
    line to ``rows.jsonl`` (the spec, the platform fingerprint, the network row, or
    ``status: error`` with the error) and the op rows to ``ops.jsonl``; interrupt it at any
    moment and call it again to continue. One thread (``torch.set_num_threads(1)``). With
    ``reference`` every row also times the machine-speed probe (``reference_ms``,
    :class:`ReferenceProbe`); the fingerprint says so, so such a campaign never continues in
    a directory of rows without it.
    """
    if not hasattr(os, "fork"):
        raise ConfigError(
            "an ops campaign measures each spec in a forked process: expected os.fork "
            "(Linux, macOS), got none. Run it on Linux or macOS."
        )
    proto = Protocol.named(protocol) if isinstance(protocol, str) else protocol
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    fp = json.dumps(ops_fingerprint(proto, reference), sort_keys=True)
    done = _done_keys(out / ROWS, fp)
    warmed = False
    probe: ReferenceProbe | None = None
    n = 0
    for spec in specs:
        key = str(spec["key"])
        if key in done:
            continue
        if not warmed:
            _warm_up()
            probe = ReferenceProbe() if reference else None  # built once; each child inherits it
            warmed = True
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                reply = _measure_child(build, spec, proto, profiled_runs, probe)
            except BaseException as e:  # noqa: BLE001 - every failure is a row
                reply = {"error": f"{type(e).__name__}: {e}"[:500]}
            with os.fdopen(write_end, "w") as f:
                f.write(json.dumps(reply, default=_jsonable))
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        reply = json.loads(data) if data else {"error": f"child died (wait status {status})"}
        base = {**spec, "fingerprint": fp, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if "error" in reply:
            _append(out / ROWS, [{**base, "status": "error", "error": reply["error"]}])
        else:
            _append(out / OPS, [{"key": key, **r} for r in reply["ops"]])
            _append(out / ROWS, [{**base, "status": "ok", **reply["row"]}])
        done.add(key)
        n += 1
        if progress is not None:
            row = reply.get("row", {})
            what = reply.get("error") or f"{row.get('latency_ms', 0.0):.2f} ms"
            progress(f"{key}: {what}")
    return n


def read_ops_campaign(
    out_dir: str | Path, with_ops: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows, ops)`` of an ops campaign directory (torn trailing lines skipped); with
    ``with_ops=False`` the ops table (the large file) is not read and comes back empty."""
    out = Path(out_dir)
    if not (out / ROWS).exists():
        raise ConfigError(
            f"not an ops campaign: expected {out / ROWS}, got no such file. Pass the "
            "directory run_ops_campaign wrote."
        )

    def read(p: Path) -> pd.DataFrame:
        recs = []
        if p.exists():
            with open(p) as f:
                for line in f:
                    try:
                        recs.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        return pd.DataFrame(recs)

    return read(out / ROWS), read(out / OPS) if with_ops else pd.DataFrame()
