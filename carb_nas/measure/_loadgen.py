"""MLPerf LoadGen scenarios with the real bindings (``mlcommons-loadgen``, ``mlperf_loadgen``).

A system under test (SUT) per (model, runtime, precision) answers LoadGen's queries with a
prepared :class:`~carb_nas.measure.Runtime` model; a query sample library (QSL) of seeded
N(0,1) inputs (sample ``i`` is ``torch.randn`` seeded ``10_000 + i`` at the model's input
shape) feeds it. LoadGen decides the queries, times them and judges the run; carb_nas only
answers. Scenarios:

- ``single-stream``: one sample per query, the next query when the last one completes;
  result: the 90th-percentile latency (``latency_p90_ms``).
- ``multi-stream``: 8 samples per query, run as one batch of 8; result: the 99th-percentile
  query latency (``latency_p99_ms``).
- ``offline``: all samples in one query, run in batches of ``batch_size`` (8; the tail one at a
  time); result: samples per second (``throughput_sps``).

Rules: ``loadgen-default`` keeps LoadGen's own ``TestSettings`` (at least 10 s and 100
queries, plus its early-stopping check); ``quick`` shortens runs for tests and smoke checks
(at least 1 s and 64 queries; recorded as ``rules: quick`` in every row). LoadGen's verdict --
``Result is : VALID`` or ``INVALID`` with its reasons -- is in every row (``result_validity``,
``valid``) and never dropped: an INVALID run is a row like any other. MultiStream under
``quick`` is INVALID by LoadGen's early-stopping rule (a p99 estimate needs >= 662 queries).

Each run writes LoadGen's own logs (summary, detail) into its directory; :func:`parse_detail_log`
and :func:`parse_summary` turn them into a row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform as _platform
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from carb_nas._io import atomic_directory, atomic_write_json
from carb_nas.errors import ConfigError, DeviceUnavailableError, MeasurementError
from carb_nas.measure._runtimes import (
    INSTALL_HINTS,
    MODEL_SEED,
    Runtime,
    _seeded_randn,
    get_runtime,
)
from carb_nas.space import Config

__all__ = [
    "SCENARIOS",
    "RULES",
    "LoadGenSettings",
    "Workload",
    "run_scenario",
    "run_loadgen_campaign",
    "loadgen_rows",
    "parse_detail_log",
    "parse_summary",
    "import_loadgen",
    "LoadGenSummary",
    "why_invalid",
]

SCENARIOS = ("single-stream", "multi-stream", "offline")
RULES = ("loadgen-default", "quick")
QSL_SEED = 10_000
#: LoadGen's name and the row's headline metric per scenario
_SCENARIO = {
    "single-stream": ("SingleStream", "latency_p90_ms"),
    "multi-stream": ("MultiStream", "latency_p99_ms"),
    "offline": ("Offline", "throughput_sps"),
}
QUICK = {"min_duration_ms": 1000, "min_query_count": 64}
LOGS = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")


def import_loadgen() -> Any:
    try:
        import mlperf_loadgen
    except ImportError as e:
        raise DeviceUnavailableError(
            f"MLPerf LoadGen unavailable: expected the `mlcommons-loadgen` package (module "
            f"mlperf_loadgen), got ImportError ({e}). Install the extra: "
            f"{INSTALL_HINTS['loadgen']}."
        ) from e
    return mlperf_loadgen


@dataclass(frozen=True)
class Workload:
    """Something LoadGen can run: a name, a stable key, an fp32 module builder, an input shape.

    ``Workload.from_config(config)`` wraps a ResNet (or any built-in) config; any other
    ``nn.Module`` comes in through ``Workload(name, key, build, input_shape)``.
    """

    name: str
    key: str
    build: Callable[[], torch.nn.Module]
    input_shape: tuple[int, ...]
    config: Config | None = None
    #: what else names it in its rows (a factory's ``model_spec`` and JSON ``kwargs``)
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Config) -> Workload:
        from carb_nas.measure._runtimes import _build_seeded

        base = config.replace(precision="fp32", runtime="torch", batch_size=1)
        name = f"{config.family}-{config.depth} w{config.width:g} r{config.resolution}"
        return cls(
            name,
            base.key,
            lambda: _build_seeded(base, "cpu"),
            (3, config.resolution, config.resolution),
            base,
        )

    @classmethod
    def from_spec(cls, spec: Any) -> Workload:
        """A :class:`carb_nas.models.ModelSpec` (a config, a user factory or a module): built
        in fp32 with seeded weights (the runtime converts and quantizes it); its input shape
        without the batch dimension, which each scenario sets (one sample per query in
        SingleStream, ``samples_per_query`` in MultiStream, ``batch_size`` offline)."""
        if spec.kind == "config":
            return cls.from_config(spec.config)
        fp32 = dataclasses.replace(spec, precision="fp32")

        def build() -> torch.nn.Module:
            torch.manual_seed(MODEL_SEED)
            return fp32.build("cpu")

        fields = {}
        if spec.kind == "factory":
            fields = {"model_spec": spec.factory, "kwargs": json.dumps(dict(spec.kwargs))}
        return cls(spec.name, fp32.key, build, tuple(spec.input_shape[1:]), None, fields)


@dataclass(frozen=True)
class LoadGenSettings:
    """A scenario and its rules; ``None`` fields keep the rules' value (see module doc)."""

    scenario: str
    rules: str = "loadgen-default"
    min_duration_ms: int | None = None
    min_query_count: int | None = None
    max_duration_ms: int | None = None
    samples_per_query: int = 8  # multi-stream
    batch_size: int = 8  # offline
    performance_sample_count: int = 64

    def __post_init__(self) -> None:
        check_settings(self)

    def effective(self) -> dict[str, Any]:
        """The settings LoadGen is given (rules resolved; expected latencies come later)."""
        d = dataclasses.asdict(self)
        if self.rules == "quick":
            for k, v in QUICK.items():
                if d[k] is None:
                    d[k] = v
        return d


def check_settings(s: LoadGenSettings) -> None:
    """ConfigError for an unknown scenario or settings LoadGen could never satisfy."""

    def bad(what: str, expected: str, got: Any, fix: str) -> ConfigError:
        return ConfigError(f"invalid {what}: expected {expected}, got {got!r}. {fix}")

    if s.scenario not in SCENARIOS:
        raise bad(
            "scenario",
            f"one of {list(SCENARIOS)}",
            s.scenario,
            "Use --scenario single-stream, multi-stream or offline.",
        )
    if s.rules not in RULES:
        raise bad("LoadGen rules", f"one of {list(RULES)}", s.rules, "Use --quick or drop it.")
    # a run needs some time and some queries to measure; max_duration_ms 0 means no maximum
    for name, low in (("min_duration_ms", 1), ("min_query_count", 1), ("max_duration_ms", 0)):
        v = getattr(s, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
            raise bad(
                name,
                f"a whole number >= {low}" + (" (0: no maximum)" if low == 0 else ""),
                v,
                f"Fix --{name.replace('_', '-')}"
                + (" (a run of no time or no queries measures nothing)." if low else "."),
            )
    if (
        s.max_duration_ms
        and s.min_duration_ms is not None
        and s.max_duration_ms < s.min_duration_ms
    ):
        raise bad(
            "LoadGen durations",
            "max_duration_ms >= min_duration_ms (or 0: no maximum)",
            f"min {s.min_duration_ms} ms > max {s.max_duration_ms} ms",
            "Raise --max-duration-ms or lower --min-duration-ms.",
        )
    if not isinstance(s.samples_per_query, int) or s.samples_per_query < 1:
        raise bad(
            "samples per query", "a whole number >= 1", s.samples_per_query, "MultiStream uses 8."
        )
    if s.scenario != "multi-stream" and s.samples_per_query != 8:
        raise bad(
            f"samples per query for {s.scenario}",
            "8 (the default: only multi-stream uses it)",
            s.samples_per_query,
            "Drop --samples-per-query or use --scenario multi-stream.",
        )
    if not isinstance(s.batch_size, int) or s.batch_size < 1:
        raise bad("offline batch size", "a whole number >= 1", s.batch_size, "Use 8.")
    if not isinstance(s.performance_sample_count, int) or s.performance_sample_count < 1:
        raise bad(
            "performance sample count", "a whole number >= 1", s.performance_sample_count, "Use 64."
        )
    if s.scenario == "multi-stream" and s.samples_per_query > s.performance_sample_count:
        raise bad(
            "multi-stream settings",
            f"samples per query <= the {s.performance_sample_count} samples in the library",
            s.samples_per_query,
            "Lower --samples-per-query or raise --sample-count.",
        )


# -- logs -----------------------------------------------------------------------------------
def parse_detail_log(path: str | Path) -> dict[str, Any]:
    """``{key: value}`` of LoadGen's detail log (``:::MLLOG {json}`` lines; the last value of a
    repeated key wins), plus ``_errors`` / ``_warnings``: the messages LoadGen flagged."""
    out: dict[str, Any] = {"_errors": [], "_warnings": []}
    for line in Path(path).read_text(errors="replace").splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        try:
            rec = json.loads(line[len(":::MLLOG ") :])
        except json.JSONDecodeError:
            continue
        out[rec.get("key")] = rec.get("value")
        meta = rec.get("metadata") or {}
        if meta.get("is_error"):
            out["_errors"].append(str(rec.get("value"))[:300])
        elif meta.get("is_warning"):
            out["_warnings"].append(str(rec.get("value"))[:300])
    return out


def parse_summary(path: str | Path) -> dict[str, Any]:
    """The verdict lines of LoadGen's summary log: ``Result is``, the three checks."""
    out: dict[str, Any] = {}
    keys = {
        "Result is": "result_is",
        "Min duration satisfied": "min_duration_satisfied",
        "Min queries satisfied": "min_queries_satisfied",
        "Early stopping satisfied": "early_stopping_satisfied",
    }
    for line in Path(path).read_text(errors="replace").splitlines():
        head, sep, value = line.partition(":")
        if sep and head.strip() in keys:
            out[keys[head.strip()]] = value.strip()
    return out


def _ns_ms(v: Any) -> float | None:
    return None if v is None else float(v) / 1e6


def _row_from_logs(log_dir: Path, scenario: str) -> dict[str, Any]:
    detail = parse_detail_log(log_dir / LOGS[1])
    summary = parse_summary(log_dir / LOGS[0])
    per_query = scenario == "multi-stream"

    def pct(p: str) -> float | None:
        key = f"result_{p}_percentile_per_query_latency_ns" if per_query else None
        if key and key in detail:
            return _ns_ms(detail[key])
        return _ns_ms(detail.get(f"result_{p}_percentile_latency_ns"))

    validity = detail.get("result_validity") or summary.get("result_is")
    row = {
        "result_validity": validity,
        "valid": validity == "VALID",
        "result_is": summary.get("result_is"),
        "min_duration_met": detail.get("result_min_duration_met"),
        "min_queries_met": detail.get("result_min_queries_met"),
        "early_stopping_met": detail.get("early_stopping_met"),
        "early_stopping_result": " ".join(str(detail.get("early_stopping_result", "")).split())
        or None,
        "invalid_reason": detail.get("result_invalid_reason") or None,
        "query_count": detail.get("result_query_count"),
        "latency_p50_ms": pct("50.00"),
        "latency_p90_ms": pct("90.00"),
        "latency_p99_ms": pct("99.00"),
        "latency_mean_ms": _ns_ms(
            detail.get("result_mean_query_latency_ns" if per_query else "result_mean_latency_ns")
        ),
        "qps": detail.get("result_qps_with_loadgen_overhead"),
        "throughput_sps": detail.get("result_samples_per_second"),
        "loadgen_version": detail.get("loadgen_version"),
        "loadgen_errors": detail["_errors"],
        "loadgen_warnings": detail["_warnings"],
        "effective_min_duration_ms": detail.get("effective_min_duration_ms"),
        "effective_min_query_count": detail.get("effective_min_query_count"),
    }
    if scenario == "single-stream" and row["qps"] is not None:
        row["throughput_sps"] = float(row["qps"])
    elif scenario == "multi-stream" and row["qps"] is not None:
        row["throughput_sps"] = float(row["qps"]) * int(
            detail.get("effective_samples_per_query") or 8
        )
    return row


# -- one run --------------------------------------------------------------------------------
def _estimate_s(runtime: Runtime, prepared: Any, batch: int, reps: int = 3) -> float:
    x = runtime.make_batch(prepared, batch)
    runtime.run(prepared, x)  # warm-up (compilation, first-touch pages)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        runtime.run(prepared, x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _as_input(runtime: Runtime, prepared: Any, arr: np.ndarray) -> Any:
    template = runtime.make_batch(prepared, 1)
    if isinstance(template, torch.Tensor):
        return torch.from_numpy(arr).to(template.device, template.dtype)
    return arr


def run_scenario(
    runtime: Runtime,
    prepared: Any,
    settings: LoadGenSettings,
    log_dir: str | Path,
) -> dict[str, Any]:
    """Run one LoadGen test of ``prepared`` on ``runtime``; LoadGen's logs go to ``log_dir``.

    Returns the row parsed from those logs plus the settings given to LoadGen.
    """
    lg = import_loadgen()
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    scenario_name, _ = _SCENARIO[settings.scenario]
    eff = settings.effective()
    shape = tuple(prepared.info["input_shape"])
    samples: dict[int, np.ndarray] = {}

    def load(indices: Iterable[int]) -> None:
        for i in indices:
            samples[i] = _seeded_randn((1, *shape), QSL_SEED + i).numpy()

    def unload(indices: Iterable[int]) -> None:
        for i in indices:
            samples.pop(i, None)

    spq = settings.samples_per_query if settings.scenario == "multi-stream" else 1
    batch = settings.batch_size if settings.scenario == "offline" else spq
    # compile/allocate every batch size LoadGen's queries will need, outside its clock
    t1 = _estimate_s(runtime, prepared, 1)
    tb = _estimate_s(runtime, prepared, batch) if batch != 1 else t1
    failure: list[BaseException] = []

    def run_batch(idx: list[int]) -> None:
        x = np.concatenate([samples[i] for i in idx])
        runtime.run(prepared, _as_input(runtime, prepared, x))

    def issue(queries: list) -> None:
        try:
            n = len(queries)
            step = batch if settings.scenario != "single-stream" else 1
            start = 0
            while start < n:
                size = step if n - start >= step else 1  # the tail one by one (compiled sizes)
                chunk = queries[start : start + size]
                if not failure:
                    run_batch([q.index for q in chunk])
                lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in chunk])
                start += size
        except BaseException as e:  # noqa: BLE001 - must answer LoadGen or it waits forever
            failure.append(e)
            lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in queries])

    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, scenario_name)
    ts.mode = lg.TestMode.PerformanceOnly
    for name in ("min_duration_ms", "min_query_count", "max_duration_ms"):
        if eff[name] is not None:
            setattr(ts, name, int(eff[name]))
    ts.single_stream_expected_latency_ns = max(int(t1 * 1e9), 1)
    ts.multi_stream_samples_per_query = spq
    ts.multi_stream_expected_latency_ns = max(int(tb * 1e9), 1)
    ts.offline_expected_qps = max(batch / tb, 1e-3)
    ls = lg.LogSettings()
    ls.log_output.outdir = str(log_dir)
    ls.log_output.copy_summary_to_stdout = False
    ls.enable_trace = False
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(
        settings.performance_sample_count, settings.performance_sample_count, load, unload
    )
    t0 = time.perf_counter()
    try:
        lg.StartTestWithLogSettings(sut, qsl, ts, ls)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    wall_s = time.perf_counter() - t0
    (log_dir / "mlperf_log_trace.json").unlink(missing_ok=True)
    (log_dir / "mlperf_log_accuracy.json").unlink(missing_ok=True)
    if failure:
        e = failure[0]
        raise MeasurementError(
            f"the system under test failed during LoadGen's {settings.scenario} run: "
            f"{type(e).__name__}: {str(e)[:300]}. Its logs are in {log_dir}."
        ) from e
    row = _row_from_logs(log_dir, settings.scenario)
    row.update(
        scenario=settings.scenario,
        rules=settings.rules,
        quick=settings.rules == "quick",
        settings=json.dumps(
            {
                **eff,
                "single_stream_expected_latency_ns": ts.single_stream_expected_latency_ns,
                "multi_stream_expected_latency_ns": ts.multi_stream_expected_latency_ns,
                "offline_expected_qps": ts.offline_expected_qps,
            },
            sort_keys=True,
        ),
        wall_s=wall_s,
        estimate_latency_ms=t1 * 1e3,
    )
    return row


# -- resumable runs -------------------------------------------------------------------------
def _run_id(workload: Workload, runtime: str, precision: str, settings: LoadGenSettings) -> str:
    doc = json.dumps([workload.key, runtime, precision, dataclasses.asdict(settings)])
    digest = hashlib.sha256(doc.encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "-." else "_" for c in workload.name)[:60]
    return f"{safe}__{runtime}-{precision}__{settings.scenario}__{digest}"


@dataclass
class LoadGenSummary:
    out_dir: str
    total: int
    done: int
    measured_now: int
    invalid: list[str]
    errors: list[str]
    #: the run ids of this call, workload by workload (``out_dir/results/<run>.json``)
    runs: list[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _fingerprint(runtime: Runtime) -> dict[str, Any]:
    from carb_nas.measure._profiler import cpu_identity, cpu_model_name

    return {
        "platform": f"cpu/{runtime.name}/{runtime.precision}",
        "cpu_model": cpu_model_name(),
        "cpu": cpu_identity(),
        "threads": runtime.threads,
        "python": _platform.python_version(),
        **runtime.versions(),
        **{f"scheme_{k}": v for k, v in runtime.scheme().items()},
    }


def run_loadgen_campaign(
    workloads: list[Workload],
    out_dir: str | Path,
    runtime: str,
    precision: str,
    settings: LoadGenSettings | list[LoadGenSettings],
    threads: int | None = None,
    calibration: Any = None,
    progress: Callable[[str], None] | None = None,
) -> LoadGenSummary:
    """Run ``settings`` (one scenario or several) on every workload into ``out_dir``; resumable.

    A workload is prepared (converted, quantized, checked for agreement) once for all its
    scenarios.

    ``out_dir/results/<run>.json`` (one row, written atomically) and ``out_dir/logs/<run>/``
    (LoadGen's summary and detail logs, moved in whole) per run; a run whose result exists is
    skipped, so the same call continues after an interruption. A workload that cannot be
    prepared (conversion failure, unsupported op) is a row with ``status: error``; it is
    retried on the next call.
    """
    import_loadgen()
    out = Path(out_dir)
    rt = get_runtime("cpu", runtime, precision, threads, calibration=calibration)
    fp = _fingerprint(rt)
    results, logs = out / "results", out / "logs"
    results.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    done = measured = 0
    invalid: list[str] = []
    errors: list[str] = []
    all_settings = [settings] if isinstance(settings, LoadGenSettings) else list(settings)
    runs: list[str] = []
    for w in workloads:
        todo = []
        for st in all_settings:
            run = _run_id(w, runtime, precision, st)
            runs.append(run)
            res = results / f"{run}.json"
            if res.exists() and json.loads(res.read_text()).get("status") == "ok":
                done += 1
            else:
                todo.append((st, run, res))
        if not todo:
            continue
        if progress:
            progress(f"{w.name} {runtime}/{precision}: {', '.join(t[0].scenario for t in todo)}")
        try:
            prepared = rt.prepare_module(w.build(), w.input_shape, (w.key, precision))
            prepare_error = None
        except (KeyboardInterrupt, ConfigError):
            raise
        except Exception as e:  # noqa: BLE001 - a failed workload is a row, the rest go on
            prepared, prepare_error = None, f"{type(e).__name__}: {e}"[:500]
        try:
            for st, run, res in todo:
                base = {
                    "run": run,
                    "model": w.name,
                    "key": w.key,
                    "input_shape": list(w.input_shape),
                    "runtime": runtime,
                    "precision": precision,
                    "platform": fp["platform"],
                    "device": "cpu",
                    "threads": rt.threads,
                    "fingerprint": json.dumps(fp, sort_keys=True),
                    "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
                    "scenario": st.scenario,
                    "rules": st.rules,
                }
                if w.config is not None:  # the config's knobs; the platform's names win
                    base = {**w.config.as_dict(), **base}
                base = {**w.fields, **base}
                if prepared is None:
                    row = {"status": "error", "error": prepare_error}
                else:
                    try:
                        with atomic_directory(logs / run) as tmp:
                            row = run_scenario(rt, prepared, st, tmp)
                        row.update(
                            {
                                k: prepared.info.get(k)
                                for k in ("output_rel_error", "top1_agreement")
                            },
                            log_dir=str((logs / run).relative_to(out)),
                            status="ok",
                        )
                    except (KeyboardInterrupt, ConfigError):
                        raise
                    except Exception as e:  # noqa: BLE001
                        row = {"status": "error", "error": f"{type(e).__name__}: {e}"[:500]}
                row = {**base, **row}
                atomic_write_json(res, row)
                measured += 1
                if row["status"] == "ok":
                    done += 1
                    if not row.get("valid"):
                        invalid.append(f"{w.name} {st.scenario}: " + why_invalid(row))
                else:
                    errors.append(f"{w.name} {st.scenario}: {row['error']}")
        finally:
            if prepared is not None:
                rt.release(prepared)
    total = len(workloads) * len(all_settings)
    return LoadGenSummary(str(out), total, done, measured, invalid, errors, runs)


def why_invalid(row: dict) -> str:
    """Why LoadGen judged a result row INVALID, in words (its failed checks)."""
    reasons = []
    if row.get("min_duration_met") is False:
        reasons.append("min duration not met")
    if row.get("min_queries_met") is False:
        reasons.append("min queries not met")
    if row.get("early_stopping_met") is False:
        reasons.append(f"early stopping not met ({row.get('early_stopping_result')})")
    if row.get("invalid_reason"):
        reasons.append(str(row["invalid_reason"]))
    return "; ".join(reasons) or "LoadGen says INVALID (see its summary log)"


def loadgen_rows(out_dir: str | Path) -> list[dict[str, Any]]:
    """Every result row of one or more LoadGen run directories (sorted by run id)."""
    rows = []
    for p in sorted((Path(out_dir) / "results").glob("*.json")):
        rows.append(json.loads(p.read_text()))
    return rows
