"""Validate predictions on real hardware: profile a shortlist, score the cost model.

``validate(pareto, device="cpu", runtime="torch", precision="fp32", model=model,
budgets={"latency_ms": 50})`` profiles every config with :class:`carb_nas.measure.Profiler`
(the same code as ``carb-nas profile``), and reports

- predicted vs measured per target: MAE (target unit) and MAPE (%);
- budget decisions: the model *accepts* a config when every predicted cost is within budget
  (with ``confidence``: the upper bound at ``alpha = 1 - confidence``); the measurement decides
  whether it truly is. True/false accepts and rejects are counted; a config that ran out of
  memory counts as measured over budget; a budget on a target this machine cannot measure
  (``energy_j`` without a meter) leaves the decision undecided, never guessed;
- a warning when the model's platform fingerprint (device name, runtime) differs from the
  machine and runtime the measurements come from: the model is then scored against another
  platform, and the report says so;
- a warning when an eager-PyTorch CPU measurement did not pay the per-call page faults that
  the ``mmap_mb`` feature counts (``minor_faults_per_run`` far below its ~244 pages per MB):
  the process reused freed heap memory, so that latency is lower than in a fresh process,
  which is what the shipped data and the model reflect;
- per target, the median measured/predicted ratio (``ValidationResult.ratios``), and a warning
  when it lies outside what the prediction intervals allow (the median over the configs of
  ``lower/predicted`` to ``upper/predicted`` at ``alpha = 1 - confidence``, 0.1 without one):
  the model is then off for this machine as a whole, which ``carb-nas calibrate`` (or
  ``validate --recalibrate``) corrects;
- the machine's speed now against when the model was calibrated (``machine_speed``: the
  speed probe's median here over the calibration rows' one), and a warning beyond
  ``SPEED_WARN_RATIO``: a shared VM can run convolution code slower for minutes at a time
  (docs/measurement.md), which moves every measured latency by as much.

``append=PATH`` adds the new measurement rows to a dataset CSV/Parquet (written atomically).
The file is checked *before* anything is measured (readable, writable, a carb_nas dataset of
this platform, no torn last row); a config measured again replaces its old row (same ``key``),
and ``result.replaced_keys`` says which. ``report_dir`` (checked writable before measuring) gets
``validation.json``, ``validation.csv`` and two PNG plots: the Pareto front as 2-D projections
(predicted, with the measured points) and predicted vs measured.

Predictions. ``scored=`` takes the predictions a search already made (its
:attr:`carb_nas.search.SearchResult.scored`: model inputs and predictions of exactly these
configs on the model's platform), so nothing is featurized or predicted again. Without it the
configs are featurized once and predicted here: a table read from a file may come from any
model, so its prediction columns are not trusted.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._io import atomic_write_json, check_writable_dir
from carb_nas.budgets import (
    accept_mask,
    base_target,
    check_budgets,
    check_confidence,
    confidence_alpha,
    model_targets,
    parse_budgets,
    platform_name,
)
from carb_nas.datasets import SCHEMA, append_rows, check_appendable, write_table
from carb_nas.errors import ConfigError, InputFileError, MeasurementError, ModelError
from carb_nas.scoring import Scored, candidate_frame, same_configs, score_configs
from carb_nas.space import ARCH_COLUMNS, CONFIG_COLUMNS, REQUIRED_COLUMNS, frame_to_configs

__all__ = [
    "validate",
    "ValidationResult",
    "fingerprint_mismatch",
    "descheduled_rows",
    "page_fault_shortfall",
    "write_report",
    "DECISIONS",
    "RATIO_ALPHA",
    "median_ratios",
    "machine_speed",
    "profile_spec",
    "validate_scenario",
    "ScenarioValidationResult",
    "check_calibration",
    "SCENARIO_PREDICTIONS",
]

RATIO_ALPHA = 0.1  # the intervals the ratio check uses without a confidence
DECISIONS = ("true_accept", "false_accept", "true_reject", "false_reject", "undecided")


@dataclass
class ValidationResult:
    """Per-config predictions and measurements, error metrics and budget decisions.

    ``rows``: one row per config: config columns, ``predicted_<t>``, ``measured_<t>`` (and
    ``predicted_<t>_upper`` with a confidence), ``status``, ``accept_predicted``,
    ``accept_measured`` and ``decision`` (one of DECISIONS). ``measurements``: the raw profiler
    rows (dataset.SCHEMA). ``metrics``: ``{target: {"n", "mae", "mape_pct"}}``.
    """

    rows: pd.DataFrame
    measurements: pd.DataFrame
    metrics: dict[str, dict[str, float]]
    decisions: dict[str, int]
    budgets: dict[str, float]
    confidence: float | None
    platform: str
    model_platform: str
    warnings: list[str] = field(default_factory=list)
    ratios: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the speed probe here against the calibration's (``machine_speed``); None without both
    speed: dict[str, Any] | None = None
    seconds: float = 0.0
    appended_to: str | None = None
    replaced_keys: list[str] = field(default_factory=list)
    report_files: list[str] = field(default_factory=list)

    @property
    def targets(self) -> list[str]:
        return [c.removeprefix("measured_") for c in self.rows.columns if c.startswith("measured_")]

    def validated_items(self) -> list[dict[str, Any]]:
        """One dict per config: config, predicted and measured values per target, decision."""
        items = []
        for _, r in self.rows.iterrows():
            item = {c: r[c] for c in CONFIG_COLUMNS}
            item["key"] = r["key"]
            item["status"] = r["status"]
            item["predicted"] = {t: _num(r[f"predicted_{t}"]) for t in self.targets}
            item["measured"] = {t: _num(r[f"measured_{t}"]) for t in self.targets}
            if self.confidence is not None:
                item["predicted_upper"] = {
                    t: _num(r.get(f"predicted_{t}_upper")) for t in self.targets
                }
            item["within_budget_predicted"] = bool(r["accept_predicted"])
            am = r["accept_measured"]
            item["within_budget_measured"] = None if pd.isna(am) else bool(am)
            item["decision"] = r["decision"]
            item["decision_correct"] = (
                None if r["decision"] == "undecided" else r["decision"].startswith("true_")
            )
            items.append(item)
        return items

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "model_platform": self.model_platform,
            "n": len(self.rows),
            "metrics": self.metrics,
            "decisions": self.decisions,
            "budgets": self.budgets,
            "confidence": self.confidence,
            "warnings": self.warnings,
            "ratios": self.ratios,
            "speed": self.speed,
            "seconds": self.seconds,
            "appended_to": self.appended_to,
            "replaced_keys": self.replaced_keys,
            "report_files": self.report_files,
            "validated": self.validated_items(),
        }

    def summary(self) -> str:
        lines = [
            f"validated {len(self.rows)} configs on {self.platform} "
            f"(model: {self.model_platform}) in {self.seconds:.1f} s"
        ]
        for w in self.warnings:
            lines.append(f"warning: {w}")
        for t, m in self.metrics.items():
            ratio = self.ratios.get(t) or {}
            band = ratio.get("allowed")
            extra = (
                f"  measured/predicted x{ratio['median']:.2f}"
                + (f" (intervals allow x{band[0]:.2f}-x{band[1]:.2f})" if band else "")
                if ratio.get("median") is not None
                else ""
            )
            lines.append(
                f"  {t:<12} n={m['n']:<3} MAE={m['mae']:.4g}  MAPE={m['mape_pct']:.1f}%{extra}"
                if m["n"]
                else f"  {t:<12} not measured on this platform"
            )
        if self.speed is not None:
            lines.append(
                f"  speed probe {self.speed['reference_ms']:.3f} ms here, "
                f"{self.speed['model_reference_ms']:.3f} ms when calibrated "
                f"(x{self.speed['ratio']:.2f})"
            )
        if self.budgets:
            d = self.decisions
            correct = d["true_accept"] + d["true_reject"]
            decided = correct + d["false_accept"] + d["false_reject"]
            lines.append(
                f"  budget decisions: {correct}/{decided} correct (true accepts "
                f"{d['true_accept']}, true rejects {d['true_reject']}, false accepts "
                f"{d['false_accept']}, false rejects {d['false_reject']}"
                + (f", undecided {d['undecided']}" if d["undecided"] else "")
                + ")"
            )
        cols = list(REQUIRED_COLUMNS)
        header = cols + [f"{t} pred/meas" for t in self.targets] + ["decision"]
        table = [header]
        for _, r in self.rows.iterrows():
            vals = [str(r[c]) for c in cols]
            for t in self.targets:
                vals.append(f"{_fmt(r[f'predicted_{t}'])}/{_fmt(r[f'measured_{t}'])}")
            vals.append(str(r["decision"]) if self.budgets else "-")
            table.append(vals)
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines += ["  " + "  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in table]
        return "\n".join(lines)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def _fmt(v: Any) -> str:
    f = _num(v)
    return "-" if f is None else f"{f:.3g}"


def fingerprint_mismatch(model: Any, device_name: str, runtime: str, device: str) -> list[str]:
    """Why the model's platform differs from the measuring one (empty when they agree)."""
    plat = getattr(model, "platform_", None)
    if not isinstance(plat, Mapping) or not plat:
        return [
            "the model records no platform fingerprint, so it cannot be checked that it was "
            "trained on this machine and runtime"
        ]
    out = []
    want = {"device_name": device_name, "runtime": runtime, "device": device}
    for key, here in want.items():
        there = plat.get(key)
        if there is not None and str(there) != str(here):
            out.append(
                f"the model was trained on {key}={there!r} but the measurements come from "
                f"{key}={here!r}: predictions for one platform are scored against another"
            )
    return out


_PAGES_PER_MB = 1e6 / 4096
_PAID_FRACTION = 0.5  # fewer faults than half the counted pages: the buffers were reused


def page_fault_shortfall(
    configs: pd.DataFrame, measurements: pd.DataFrame, mmap_mb: Any = None
) -> list[str]:
    """Warnings for CPU rows that skipped the page faults ``mmap_mb`` prices (see module doc).

    ``configs`` holds the config columns (with ``runtime``), ``measurements`` the profiler's
    rows in the same order; ``mmap_mb`` the configs' ``mmap_mb`` feature when already computed.
    Rows without ``minor_faults_per_run`` are not judged.
    """
    if "minor_faults_per_run" not in measurements or len(configs) == 0:
        return []
    if mmap_mb is None:
        from carb_nas.features import compute_features

        mmap_mb = compute_features(configs)["mmap_mb"]
    expected = np.asarray(mmap_mb, dtype=float) * _PAGES_PER_MB
    faults = pd.to_numeric(measurements["minor_faults_per_run"], errors="coerce").to_numpy(float)
    judged = (measurements["status"] == "ok").to_numpy() & (
        measurements["device"] == "cpu"
    ).to_numpy()
    short = judged & (expected > 0) & np.isfinite(faults) & (faults < _PAID_FRACTION * expected)
    if not short.any():
        return []
    i = int(np.flatnonzero(short)[0])
    c = configs.iloc[i]
    return [
        f"{int(short.sum())} config(s) did not pay the per-call page faults that the mmap_mb "
        f"feature prices, e.g. {c['family']}-{c['depth']} width {c['width']} "
        f"r{c['resolution']} batch {c['batch_size']}: {faults[i]:.0f} minor faults per run, "
        f"about {expected[i]:.0f} expected. This process reused freed heap memory for their "
        "buffers of 32 MiB or more, so their measured latency is lower than in a fresh "
        "process, which is what the shipped data and the model reflect. Validate with "
        "fresh_process=True (carb-nas validate --fresh-process) to compare like with like."
    ]


def descheduled_rows(configs: pd.DataFrame, measurements: pd.DataFrame, threads: int) -> list[str]:
    """A warning when one-thread CPU rows were timed while other processes took their core.

    ``cpu_per_wall`` below ``measure.MIN_CPU_PER_WALL`` means the process was off the CPU for
    more than a tenth of its timing window, and that wait is inside its latency
    (``measure.lost_its_core``). Judged only at one thread; rows without the column are not.
    """
    from carb_nas.measure import MIN_CPU_PER_WALL, autogroup_hint, lost_its_core

    if threads != 1 or "cpu_per_wall" not in measurements or len(configs) == 0:
        return []
    rows = measurements.assign(threads=1).to_dict("records")
    low = np.array([lost_its_core(r) for r in rows], dtype=bool)
    if not low.any():
        return []
    share = pd.to_numeric(measurements["cpu_per_wall"], errors="coerce").to_numpy(float)
    i = int(np.argmin(np.where(low, share, np.inf)))
    c = configs.iloc[i]
    return [
        f"{int(low.sum())} config(s) were timed while other processes took the CPU, e.g. "
        f"{c['family']}-{c['depth']} width {c['width']} r{c['resolution']} batch "
        f"{c['batch_size']}: it ran {100 * share[i]:.0f} % of its timing window (expected "
        f"at least {100 * MIN_CPU_PER_WALL:.0f} % at one thread), so its latency includes "
        f"the wait. Validate again on a quiet machine.{autogroup_hint()}"
    ]


def median_ratios(
    pred: pd.DataFrame, measured: Mapping[str, np.ndarray], targets: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """Per target: ``n``, the ``median`` measured/predicted ratio and the band ``allowed`` by
    the intervals (median of lower/predicted and upper/predicted; None without bounds) and
    ``outside`` (True when the median ratio lies outside that band)."""
    out: dict[str, dict[str, Any]] = {}
    for t in targets:
        p = pred[t].to_numpy(dtype=float)
        m = np.asarray(measured[t], dtype=float)
        have = np.isfinite(m) & np.isfinite(p) & (p > 0) & (m > 0)
        if not have.any():
            out[t] = {"n": 0, "median": None, "allowed": None, "outside": None}
            continue
        median = float(np.median(m[have] / p[have]))
        allowed = None
        if f"{t}_lower" in pred and f"{t}_upper" in pred:
            lo = pred[f"{t}_lower"].to_numpy(dtype=float)[have] / p[have]
            hi = pred[f"{t}_upper"].to_numpy(dtype=float)[have] / p[have]
            if np.isfinite(lo).all() and np.isfinite(hi).all():
                allowed = [float(np.median(lo)), float(np.median(hi))]
        outside = None if allowed is None else not allowed[0] <= median <= allowed[1]
        out[t] = {"n": int(have.sum()), "median": median, "allowed": allowed, "outside": outside}
    return out


#: a validation whose speed probe ran this much slower or faster than the model's own rows
#: did says so (the machine's momentary speed moves measured/predicted by about as much)
SPEED_WARN_RATIO = 1.10


def machine_speed(model: Any, measurements: pd.DataFrame) -> dict[str, Any] | None:
    """The speed probe here against the model's: ``model_reference_ms`` (the median probe
    time of the rows a calibration was fitted on, ``platform_["reference_ms"]``),
    ``reference_ms`` (this validation's median) and ``ratio`` (here / model's: above 1 the
    machine runs convolution code slower now than when the model was calibrated). None
    when either side has no probe time (shipped models' rows predate it)."""
    theirs = _num((getattr(model, "platform_", None) or {}).get("reference_ms"))
    if theirs is None or not theirs > 0 or "reference_ms" not in measurements:
        return None
    here = pd.to_numeric(measurements["reference_ms"], errors="coerce")
    if "status" in measurements:
        here = here[measurements["status"] == "ok"]
    here = here[here > 0]
    if len(here) == 0:
        return None
    mine = float(here.median())
    return {"model_reference_ms": theirs, "reference_ms": mine, "ratio": mine / theirs}


def _speed_warnings(speed: Mapping[str, Any] | None) -> list[str]:
    if speed is None or 1 / SPEED_WARN_RATIO <= speed["ratio"] <= SPEED_WARN_RATIO:
        return []
    from carb_nas.measure import REFERENCE_WORKLOAD  # torch: only when there is a warning

    word = "slower" if speed["ratio"] > 1 else "faster"
    return [
        f"this machine ran convolution code x{speed['ratio']:.2f} {word} during this validation "
        f"than when the model was calibrated (speed probe {speed['reference_ms']:.3f} ms "
        f"against {speed['model_reference_ms']:.3f} ms; {REFERENCE_WORKLOAD}, timed beside "
        "each config): measured "
        "latencies move by about as much from that alone (a shared or throttled machine); "
        "validate again when it is quiet, or calibrate again"
    ]


def model_name(model: Any) -> str:
    """The name a summary gives ``model`` and that ``carb-nas calibrate`` takes: a default
    model's own (``cpu/torch/fp32/zoo@amd-zen5``, also through a calibration of it), else its
    platform's."""
    source = getattr(model, "source_model", model)
    return str(getattr(source, "default_name_", None) or platform_name(model))


def _ratio_warnings(ratios: Mapping[str, Mapping[str, Any]], platform: str) -> list[str]:
    out = []
    for t, r in ratios.items():
        if r.get("outside"):
            lo, hi = r["allowed"]
            out.append(
                f"measured {t} is x{r['median']:.2f} the prediction (median of {r['n']} "
                f"configs), outside what the intervals allow (x{lo:.2f} to x{hi:.2f}): the "
                f"model is off for this machine; run carb-nas calibrate {platform} again (or "
                "validate --recalibrate) to correct it"
            )
    return out


def _decision(pred_ok: bool, meas_ok: Any) -> str:
    if meas_ok is None or (isinstance(meas_ok, float) and np.isnan(meas_ok)):
        return "undecided"
    if pred_ok:
        return "true_accept" if meas_ok else "false_accept"
    return "false_reject" if meas_ok else "true_reject"


def _model_threads(model: Any) -> int | None:
    platform = getattr(model, "platform_", None) or {}
    value = platform.get("threads") if isinstance(platform, dict) else None
    try:
        return int(value) if value is not None and int(value) > 0 else None
    except (TypeError, ValueError):
        return None


def validate(
    pareto_frame: pd.DataFrame | str | Path,
    device: str = "cpu",
    runtime: str = "torch",
    precision: str = "fp32",
    model: Any = None,
    budgets: Iterable[str] | Mapping[str, Any] | None = None,
    append: str | Path | None = None,
    confidence: float | None = None,
    threads: int | None = None,
    protocol: Any = "adaptive",
    meter: str = "auto",
    report_dir: str | Path | None = None,
    profiler: Any = None,
    progress: Any = None,
    fresh_process: bool = False,
    scored: Scored | None = None,
    quantization_data: Any = None,
    scenario: Any = None,
    loadgen_dir: str | Path | None = None,
    passes: int = 1,
) -> ValidationResult | ScenarioValidationResult:
    """Profile every config of ``pareto_frame`` and score ``model``'s predictions.

    With ``scenario`` (a name of ``measure.SCENARIOS`` or a ``measure.LoadGenSettings``) every
    config is measured under that MLPerf LoadGen scenario instead: see
    :func:`validate_scenario`, which gets the arguments and returns its result.

    Args:
        pareto_frame: configs (a DataFrame or a CSV/Parquet/TOML path); extra columns ignored.
        device / runtime / precision: the platform to measure on (the profiler's arguments).
        model: the fitted CostModel whose predictions are validated.
        budgets: ``["latency_ms=50"]`` or ``{"latency_ms": 50}`` (per batch).
        append: dataset CSV/Parquet to append the new measurement rows to (created if absent;
            checked before anything is measured).
        confidence: budgets checked on the upper bound at ``alpha = 1 - confidence``.
        threads / protocol / meter: passed to :class:`carb_nas.measure.Profiler`; on CPU,
            ``threads=None`` means the thread count recorded in the model's platform.
        report_dir: where to write validation.json/.csv and the PNG plots (checked first).
        profiler: an existing Profiler (tests pass one with a short protocol).
        progress: optional callable(i, n, config) called before each measurement (with a
            scenario: callable(message), see :func:`validate_scenario`).
        fresh_process: CPU: measure each config in a process of its own (``Profiler``), as
            fresh as the processes that measured the shipped data.
        scored: the predictions a search made for exactly these configs (row for row, e.g.
            ``SearchResult.scored``): used as they are instead of predicting again.
        quantization_data: static int8 only: the inputs the quantizer calibrates its ranges
            on, an ``(N, 3, H, W)`` array or a ``.npy`` path, checked against every config's
            resolution before any work (None: the runtime's seeded set).
        scenario / loadgen_dir: measure under an MLPerf LoadGen scenario
            (:func:`validate_scenario`).
        passes: measure the shortlist this many times, in interleaved rounds, and keep each
            config's fastest row (:func:`carb_nas.measure.profile_passes`; for shared machines,
            where contention only adds time). 1: one measurement per config.
    """
    from carb_nas.measure.passes import check_passes, profile_passes

    passes = check_passes(passes)
    if scenario is not None:
        conflicts = (
            ("append", append),
            ("confidence", confidence),
            ("fresh_process", fresh_process or None),
            ("scored", scored),
            ("passes", passes if passes > 1 else None),
        )
        given = [n for n, v in conflicts if v is not None]
        if given:
            raise ConfigError(
                f"options of the profiler's validation given with a LoadGen scenario: expected "
                f"none of append, confidence, fresh_process, scored, passes with scenario=, got "
                f"{given}. LoadGen rows are kept in the run directory, decided on measurements "
                "only and predicted here; drop those options (or the scenario)."
            )
        return validate_scenario(
            pareto_frame,
            scenario,
            runtime=runtime,
            precision=precision,
            model=model,
            budgets=budgets,
            threads=threads,
            quantization_data=quantization_data,
            device=device,
            report_dir=report_dir,
            loadgen_dir=loadgen_dir,
            progress=progress,
        )
    t0 = time.perf_counter()
    if model is None:
        raise ModelError(
            "no cost model: expected a fitted CostModel (or --model DIR) whose predictions are "
            "validated, got None. Pass the model trained for this platform."
        )
    budgets = parse_budgets(budgets)
    check_budgets(budgets, model)
    confidence = check_confidence(confidence)
    targets = model_targets(model)
    frame = candidate_frame(pareto_frame)
    if len(frame) == 0:
        raise InputFileError(
            "nothing to validate: expected at least one config, got an empty table. Run "
            "carb-nas search or screen first."
        )
    frame["runtime"] = runtime
    frame["precision"] = precision
    frame = frame.drop_duplicates().reset_index(drop=True)
    if profiler is None:
        from carb_nas.measure import check_runtime

        check_runtime(device, runtime, precision)  # supported, and its extra installed
    calibration = quantization_data  # the runtimes' own name for the quantizer's inputs
    check_calibration(calibration, precision, frame)
    if report_dir is not None:
        check_writable_dir(report_dir)
    old_rows = None
    if append is not None:
        from carb_nas.measure import platform_string

        old_rows = check_appendable(append, platform_string(device, runtime, precision))
    scored = _scores(model, frame, confidence, scored)

    from carb_nas.measure import Profiler

    if threads is None and device == "cpu":
        # Measure under the thread count the model's data was measured with: a model learned
        # at 1 thread validated at all cores would look ~2x pessimistic on latency.
        threads = _model_threads(model)
    prof = profiler or Profiler(
        device,
        runtime,
        precision,
        threads,
        protocol,
        meter,
        fresh_process=fresh_process,
        calibration=calibration,
    )
    try:
        warn = fingerprint_mismatch(model, prof.device_name, prof.runtime.name, prof.kind)
        for w in warn:
            warnings.warn(w, stacklevel=2)
        measured = profile_passes(prof, frame_to_configs(frame), passes, progress)
        platform = prof.platform
    finally:
        if profiler is None:
            prof.close()
    meas = pd.DataFrame(measured, columns=list(SCHEMA))
    warn += _not_measured(frame_to_configs(frame), measured)  # raises when nothing was
    # the features of the configs as measured; the scored ones when the model ran them so
    mmap_mb = scored.X["mmap_mb"] if same_configs(scored.configs, frame) else None
    from carb_nas.features import ELEMENT_BYTES

    # the mmap_mb page faults are eager PyTorch's; int8-dynamic has no element size to price
    eager = prof.runtime.name == "torch" and precision in ELEMENT_BYTES
    for w in page_fault_shortfall(frame, meas, mmap_mb) if eager else []:
        warnings.warn(w, stacklevel=2)
        warn.append(w)
    for w in descheduled_rows(frame, meas, prof.runtime.threads or 0) if device == "cpu" else []:
        warnings.warn(w, stacklevel=2)
        warn.append(w)

    pred = scored.pred
    rows = frame.copy()
    rows["key"] = meas["key"].to_numpy()
    rows["status"] = meas["status"].to_numpy()
    metrics: dict[str, dict[str, float]] = {}
    ok = (meas["status"] == "ok").to_numpy()
    for t in targets:
        p = pred[t].to_numpy(dtype=float)
        m = pd.to_numeric(meas[t], errors="coerce").to_numpy(dtype=float)
        m = np.where(ok, m, np.nan)
        rows[f"predicted_{t}"] = p
        if confidence is not None and f"{t}_upper" in pred:
            rows[f"predicted_{t}_upper"] = pred[f"{t}_upper"].to_numpy()
        rows[f"measured_{t}"] = m
        have = np.isfinite(m) & np.isfinite(p)
        metrics[t] = _errors(p[have], m[have])
    batch = frame["batch_size"].to_numpy()
    accept_pred = accept_mask(pred, batch, budgets, upper=confidence is not None)
    # measured decision per config: False once any budget is exceeded (or OOM), None while a
    # budgeted target is unmeasured, True only when every budget is measured and met
    accept_meas: list[bool | None] = [True] * len(frame)
    status = rows["status"].tolist()
    measured_frame = pd.DataFrame({t: rows[f"measured_{t}"] for t in targets})
    for name, limit in budgets.items():
        mvals = measured_frame[base_target(name)].to_numpy(dtype=float)
        if name.endswith("_per_image"):
            mvals = mvals / batch
        for i in range(len(frame)):
            if status[i] == "oom" or (np.isfinite(mvals[i]) and mvals[i] > limit):
                accept_meas[i] = False
            elif not np.isfinite(mvals[i]) and accept_meas[i] is not False:
                accept_meas[i] = None
    rows["accept_predicted"] = accept_pred
    rows["accept_measured"] = pd.Series(
        accept_meas if budgets else [None] * len(rows), dtype=object
    ).to_numpy()
    rows["decision"] = (
        [_decision(a, b) for a, b in zip(accept_pred, accept_meas)]
        if budgets
        else ["undecided"] * len(rows)
    )
    decisions = {d: int((rows["decision"] == d).sum()) for d in DECISIONS}
    ratios = median_ratios(pred, {t: rows[f"measured_{t}"].to_numpy() for t in targets}, targets)
    for w in _ratio_warnings(ratios, model_name(model)):
        warnings.warn(w, stacklevel=2)
        warn.append(w)
    speed = machine_speed(model, meas)
    for w in _speed_warnings(speed):
        warnings.warn(w, stacklevel=2)
        warn.append(w)
    if budgets and decisions["undecided"]:
        unmeasured = [b for b in budgets if metrics[base_target(b)]["n"] == 0]
        if unmeasured:
            warn.append(
                f"budgets on {unmeasured} cannot be checked here: this platform did not measure "
                "them (e.g. no energy meter); those decisions are left undecided"
            )

    result = ValidationResult(
        rows=rows,
        measurements=meas,
        metrics=metrics,
        decisions=decisions,
        budgets=budgets,
        confidence=confidence,
        platform=platform,
        model_platform=model_name(model),
        warnings=warn,
        ratios=ratios,
        speed=speed,
    )
    if append is not None:
        path, result.replaced_keys = append_rows(meas, append, old=old_rows)
        result.appended_to = str(path)
    if report_dir is not None:
        result.report_files = write_report(result, report_dir, pareto_frame)
    result.seconds = time.perf_counter() - t0
    if report_dir is not None:
        atomic_write_json(Path(report_dir) / "validation.json", result.to_dict(), indent=2)
    return result


def _config_name(c: Any) -> str:
    return f"{c.family}-{c.depth} w{c.width:g} r{c.resolution} b{c.batch_size}"


def _not_measured(configs: list, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One warning per config the runtime could not run (status ``error``: a failed
    conversion names its op); MeasurementError when no config was measured at all."""
    failed = [(c, r) for c, r in zip(configs, rows) if r.get("status") == "error"]
    if failed and len(failed) == len(rows):
        c, r = failed[0]
        raise MeasurementError(
            f"nothing measured: expected at least one config to run, got {len(rows)} "
            f"failure(s), e.g. {_config_name(c)}: {r.get('error')}"
        )
    return [f"not measured: {_config_name(c)}: {r.get('error')}" for c, r in failed]


#: int8 (static) is the only precision a calibration set applies to
CALIBRATED_PRECISIONS = ("int8",)


def check_calibration(calibration: Any, precision: str, frame: pd.DataFrame) -> None:
    """ConfigError, before any work, for a calibration set given to a precision that takes
    none or whose sample shape is not every config's ``(3, resolution, resolution)``."""
    if calibration is None:
        return
    if precision not in CALIBRATED_PRECISIONS:
        raise ConfigError(
            f"a calibration set was given for precision {precision!r}: expected one only with "
            f"static quantization ({', '.join(CALIBRATED_PRECISIONS)}), got "
            f"{str(calibration) if isinstance(calibration, (str, Path)) else 'an array'}. Drop "
            "--calibration or use --precision int8."
        )
    from carb_nas.measure import calibration_batches

    for r in sorted({int(v) for v in frame["resolution"]}):
        calibration_batches(calibration, (3, r, r))


# -- under a LoadGen scenario ----------------------------------------------------------------
#: what the model predicts for each scenario's figure: the median latency of the batch the
#: scenario runs (single-stream 1 sample, multi-stream one query of samples_per_query,
#: offline batch_size samples per batch -> samples per second)
SCENARIO_PREDICTIONS = {
    "single-stream": "latency_ms at batch 1 (a median; LoadGen reports the 90th percentile)",
    "multi-stream": "latency_ms at batch samples_per_query (a median; LoadGen: the 99th "
    "percentile of a query)",
    "offline": "batch_size * 1000 / latency_ms at batch batch_size (samples per second)",
}


@dataclass
class ScenarioValidationResult:
    """Per config: LoadGen's figure of the scenario, the budget, pass, VALID/INVALID, and the
    model's prediction of the same quantity (:data:`SCENARIO_PREDICTIONS`).

    ``rows``: one row per architecture (config columns, ``batch_size`` = the batch the
    scenario runs), ``key``, ``status``, ``measured_<metric>``, ``predicted_<metric>``,
    ``ratio`` (measured / predicted), ``budget``, ``within_budget`` (None: no budget or not
    measured), ``result_validity``, ``valid``, ``error``, ``run``. ``measurements``: LoadGen's
    rows as :func:`carb_nas.measure.run_loadgen_campaign` wrote them. Same reporting interface
    as :class:`ValidationResult`.
    """

    rows: pd.DataFrame
    measurements: pd.DataFrame
    scenario: str
    metric: str
    settings: dict[str, Any]
    budgets: dict[str, float]
    platform: str
    model_platform: str
    metrics: dict[str, dict[str, float]]
    ratio_median: float | None
    warnings: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    loadgen_dir: str | None = None
    seconds: float = 0.0
    appended_to: str | None = None
    replaced_keys: list[str] = field(default_factory=list)
    report_files: list[str] = field(default_factory=list)

    @property
    def targets(self) -> list[str]:
        return [self.metric]

    def validated_items(self) -> list[dict[str, Any]]:
        items = []
        for _, r in self.rows.iterrows():
            item = {c: r[c] for c in CONFIG_COLUMNS}
            for k in ("key", "status", "result_validity", "error", "run"):
                item[k] = None if pd.isna(r.get(k)) else r.get(k)
            item["scenario"] = self.scenario
            item["metric"] = self.metric
            item["measured"] = _num(r[f"measured_{self.metric}"])
            item["predicted"] = _num(r[f"predicted_{self.metric}"])
            item["ratio"] = _num(r["ratio"])
            item["budget"] = _num(r["budget"])
            wb = r["within_budget"]
            item["within_budget"] = None if wb is None or pd.isna(wb) else bool(wb)
            v = r["valid"]
            item["valid"] = None if v is None or pd.isna(v) else bool(v)
            items.append(item)
        return items

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "model_platform": self.model_platform,
            "scenario": self.scenario,
            "metric": self.metric,
            "prediction": SCENARIO_PREDICTIONS[self.scenario],
            "settings": self.settings,
            "n": len(self.rows),
            "metrics": self.metrics,
            "ratio_median": self.ratio_median,
            "budgets": self.budgets,
            "passed": int((self.rows["within_budget"] == True).sum()),  # noqa: E712
            "invalid": self.invalid,
            "warnings": self.warnings,
            "loadgen_dir": self.loadgen_dir,
            "seconds": self.seconds,
            "report_files": self.report_files,
            "validated": self.validated_items(),
        }

    def summary(self) -> str:
        rules = self.settings.get("rules")
        lines = [
            f"validated {len(self.rows)} configs under LoadGen {self.scenario} (rules {rules}) "
            f"on {self.platform} (model: {self.model_platform}) in {self.seconds:.1f} s"
        ]
        lines += [f"warning: {w}" for w in self.warnings]
        m = self.metrics[self.metric]
        lines.append(
            f"  {self.metric}: measured by LoadGen; predicted = "
            f"{SCENARIO_PREDICTIONS[self.scenario]}"
        )
        if m["n"]:
            ratio = f"  measured/predicted x{self.ratio_median:.2f}" if self.ratio_median else ""
            lines.append(
                f"  predicted vs measured: n={m['n']} MAE={m['mae']:.4g}  "
                f"MAPE={m['mape_pct']:.1f}%{ratio}"
            )
        if self.budgets:
            limit = self.budgets[self.metric]
            sense = ">=" if self.metric == "throughput_sps" else "<="
            ok = int((self.rows["within_budget"] == True).sum())  # noqa: E712
            lines.append(f"  budget {self.metric} {sense} {limit:g}: {ok}/{len(self.rows)} pass")
        cols = list(ARCH_COLUMNS) + ["batch_size"]
        header = cols + ["measured", "predicted", "budget", "pass", "LoadGen"]
        table = [header]
        for _, r in self.rows.iterrows():
            wb = r["within_budget"]
            vals = [str(r[c]) for c in cols] + [
                _fmt(r[f"measured_{self.metric}"]),
                _fmt(r[f"predicted_{self.metric}"]),
                _fmt(r["budget"]),
                "-" if wb is None or pd.isna(wb) else ("yes" if wb else "NO"),
                str(r["result_validity"]) if r["status"] == "ok" else "error",
            ]
            table.append(vals)
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines += ["  " + "  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in table]
        return "\n".join(lines)


def _scenario_settings(scenario: Any) -> Any:
    from carb_nas.measure.loadgen import LoadGenSettings

    if isinstance(scenario, LoadGenSettings):
        return scenario
    return LoadGenSettings(scenario)  # checks the name: one line for an unknown one


def _scenario_batch(settings: Any) -> int:
    if settings.scenario == "multi-stream":
        return int(settings.samples_per_query)
    if settings.scenario == "offline":
        return int(settings.batch_size)
    return 1


def validate_scenario(
    pareto_frame: pd.DataFrame | str | Path,
    scenario: Any,
    runtime: str = "torch",
    precision: str = "fp32",
    model: Any = None,
    budgets: Iterable[str] | Mapping[str, Any] | None = None,
    threads: int | None = None,
    quantization_data: Any = None,
    device: str = "cpu",
    report_dir: str | Path | None = None,
    loadgen_dir: str | Path | None = None,
    progress: Any = None,
) -> ScenarioValidationResult:
    """Measure every architecture of ``pareto_frame`` under an MLPerf LoadGen scenario (the real
    ``mlperf_loadgen``, through :func:`carb_nas.measure.run_loadgen_campaign`) and compare with
    ``model``'s prediction of the same quantity.

    ``scenario``: ``"single-stream"``, ``"multi-stream"``, ``"offline"`` or a
    ``measure.LoadGenSettings`` (``rules="quick"`` for short runs, recorded as such). The
    scenario sets the batches, so configs that differ only in batch size are one architecture,
    measured once. Budgets: only the scenario's own (``budgets.SCENARIO_BUDGETS``:
    single-stream ``latency_p90_ms``, multi-stream ``latency_p99_ms``, offline
    ``throughput_sps``, a lower limit), decided on the measurement alone; any other budget is
    refused before anything runs. LoadGen's INVALID is a warning and a column, never dropped.

    The runs (one JSON row and LoadGen's summary and detail logs each) go to ``loadgen_dir``,
    else ``report_dir/loadgen``, else a temporary directory removed afterwards; a kept
    directory resumes: a run already there is not measured again. When no architecture could
    be run (e.g. every conversion failed) it raises MeasurementError naming the first failure,
    and a run directory this call created is removed. ``progress``: optional callable(message)
    called before each architecture is run.

    Raises ConfigError / BudgetError / DeviceUnavailableError before any work for an unknown
    scenario, impossible settings, a budget of another scenario, a platform the runtime cannot
    run, a missing extra (the runtime's or LoadGen's) or a calibration set of the wrong shape.
    """
    import shutil
    import tempfile

    from carb_nas.budgets import SCENARIO_BUDGETS, accept_measured, check_scenario_budgets
    from carb_nas.measure import check_runtime, cpu_model_name, platform_string, usable_cpus
    from carb_nas.measure.loadgen import Workload, import_loadgen, run_loadgen_campaign, why_invalid

    t0 = time.perf_counter()
    settings = _scenario_settings(scenario)
    metric = SCENARIO_BUDGETS[settings.scenario]
    if model is None:
        raise ModelError(
            "no cost model: expected a fitted CostModel (or --model DIR) whose predictions are "
            "compared with LoadGen's figures, got None. Pass the model trained for this platform."
        )
    budgets = parse_budgets(budgets)
    check_scenario_budgets(budgets, settings.scenario)
    model_targets(model)
    if device != "cpu":
        raise ConfigError(
            f"LoadGen scenarios run on the CPU here: expected --device cpu with --scenario, got "
            f"{device!r}. Drop --scenario to profile on {device}."
        )
    check_runtime(device, runtime, precision)
    import_loadgen()
    frame = candidate_frame(pareto_frame)
    if len(frame) == 0:
        raise InputFileError(
            "nothing to validate: expected at least one config, got an empty table. Run "
            "carb-nas search or screen first."
        )
    check_calibration(quantization_data, precision, frame)
    if report_dir is not None:
        check_writable_dir(report_dir)
    if loadgen_dir is not None:
        check_writable_dir(loadgen_dir, "LoadGen run directory", "loadgen_dir=")
    if threads is None:
        threads = _model_threads(model)
    if threads is not None and not 1 <= threads <= usable_cpus():
        raise ConfigError(
            f"invalid threads: expected 1 to {usable_cpus()} (the CPUs this process may use), "
            f"got {threads!r}. More intra-op threads than cores measure oversubscription."
        )

    # one architecture per workload, at the batch the scenario runs
    batch = _scenario_batch(settings)
    frame = frame.assign(batch_size=batch, runtime=runtime, precision=precision)
    frame = frame.drop_duplicates().reset_index(drop=True)
    configs = frame_to_configs(frame)
    workloads = [Workload.from_config(c) for c in configs]
    pred = None
    if "latency_ms" in model_targets(model):
        pred = score_configs(model, frame, role="model").pred["latency_ms"].to_numpy(float)

    tmp = None
    if loadgen_dir is not None:
        run_dir = Path(loadgen_dir)
    elif report_dir is not None:
        run_dir = Path(report_dir) / "loadgen"
    else:
        tmp = tempfile.TemporaryDirectory(prefix="carb-nas-loadgen-")
        run_dir = Path(tmp.name)
    created = [d for d in (run_dir, *run_dir.parents) if not d.exists()]
    try:
        summary = run_loadgen_campaign(
            workloads,
            run_dir,
            runtime,
            precision,
            settings,
            threads=threads,
            calibration=quantization_data,
            progress=progress,
        )
        results = [
            json.loads((run_dir / "results" / f"{run}.json").read_text()) for run in summary.runs
        ]
        try:
            warn = _not_measured(configs, results)
        except MeasurementError:
            if tmp is None:
                for d in created:  # innermost first: only what this call made
                    shutil.rmtree(d, ignore_errors=True)
            raise
    finally:
        if tmp is not None:
            tmp.cleanup()
    meas = pd.DataFrame(results)
    measured = np.array(
        [_num(r.get(metric)) if r.get("status") == "ok" else None for r in results], dtype=float
    )
    if pred is None:
        predicted = np.full(len(frame), np.nan)
    elif settings.scenario == "offline":
        predicted = batch * 1000.0 / pred
    else:
        predicted = pred
    rows = frame.copy()
    rows["key"] = [w.key for w in workloads]
    rows["status"] = [r.get("status") for r in results]
    rows["scenario"] = settings.scenario
    rows["rules"] = settings.rules
    rows[f"measured_{metric}"] = measured
    rows[f"predicted_{metric}"] = predicted
    with np.errstate(divide="ignore", invalid="ignore"):
        rows["ratio"] = np.where(predicted > 0, measured / predicted, np.nan)
    limit = budgets.get(metric)
    rows["budget"] = np.nan if limit is None else limit
    rows["within_budget"] = pd.Series(
        [
            None if limit is None or not np.isfinite(v) else accept_measured({metric: v}, budgets)
            for v in measured
        ],
        dtype=object,
    ).to_numpy()
    rows["result_validity"] = [r.get("result_validity") for r in results]
    rows["valid"] = pd.Series([r.get("valid") for r in results], dtype=object).to_numpy()
    rows["error"] = [r.get("error") for r in results]
    rows["run"] = summary.runs
    invalid = []
    for c, r in zip(configs, results):
        if r.get("status") == "ok" and not r.get("valid"):
            line = (
                f"LoadGen result is INVALID for {_config_name(c)} ({settings.scenario}, rules "
                f"{settings.rules}): {why_invalid(r)}; its figure is kept and marked INVALID"
            )
            invalid.append(line)
    have = np.isfinite(measured) & np.isfinite(predicted)
    metrics = {metric: _errors(predicted[have], measured[have])}
    ratio = float(np.median(measured[have] / predicted[have])) if have.any() else None
    mismatch = fingerprint_mismatch(model, cpu_model_name(), runtime, "cpu")
    result = ScenarioValidationResult(
        rows=rows,
        measurements=meas,
        scenario=settings.scenario,
        metric=metric,
        settings=settings.effective(),
        budgets=dict(budgets),
        platform=platform_string("cpu", runtime, precision),
        model_platform=model_name(model),
        metrics=metrics,
        ratio_median=ratio,
        warnings=mismatch + invalid + warn,
        invalid=invalid,
        loadgen_dir=None if tmp is not None else str(run_dir),
    )
    if report_dir is not None:
        result.report_files = _write_scenario_report(result, report_dir)
    result.seconds = time.perf_counter() - t0
    if report_dir is not None:
        atomic_write_json(Path(report_dir) / "validation.json", result.to_dict(), indent=2)
    return result


def _write_scenario_report(result: ScenarioValidationResult, report_dir: str | Path) -> list[str]:
    """validation.csv + one PNG (LoadGen's figure against the prediction) in report_dir."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [str(write_table(result.rows, out / "validation.csv"))]
    t = result.metric
    fig, ax = plt.subplots(figsize=(4.6, 4))
    m = result.rows[f"measured_{t}"].to_numpy(dtype=float)
    p = result.rows[f"predicted_{t}"].to_numpy(dtype=float)
    valid = result.rows["valid"].to_numpy() == True  # noqa: E712
    have = np.isfinite(m) & np.isfinite(p)
    for mask, label, marker in ((have & valid, "VALID", "o"), (have & ~valid, "INVALID", "x")):
        if mask.any():
            ax.scatter(m[mask], p[mask], s=22, marker=marker, label=label)
    if have.any():
        lo, hi = float(min(p[have].min(), m[have].min())), float(max(p[have].max(), m[have].max()))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
        if t in result.budgets:
            ax.axvline(result.budgets[t], color="r", lw=0.8, label="budget")
        ax.legend(fontsize=8)
    ax.set_xlabel(f"measured {t} (LoadGen {result.scenario})")
    ax.set_ylabel(f"predicted ({result.model_platform})")
    ax.set_title(f"{result.platform}, rules {result.settings.get('rules')}", fontsize=9)
    fig.tight_layout()
    path = out / "predicted_vs_measured.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    files += [str(path), str(out / "validation.json")]
    return files


def _errors(p: np.ndarray, m: np.ndarray) -> dict[str, float]:
    """n, MAE (target unit) and MAPE (%) of predictions ``p`` against measurements ``m``."""
    if len(m) == 0:
        return {"n": 0, "mae": float("nan"), "mape_pct": float("nan")}
    from sklearn.metrics import mean_absolute_error, mean_absolute_percentage_error

    return {
        "n": int(len(m)),
        "mae": float(mean_absolute_error(m, p)),
        "mape_pct": float(100 * mean_absolute_percentage_error(m, p)),
    }


def _scores(model: Any, frame: pd.DataFrame, confidence: float | None, scored: Any) -> Scored:
    """The predictions to validate: ``scored`` when given (checked to be these configs with
    every column needed), else featurized and predicted here, once."""
    if scored is None:
        # intervals also without a confidence: the median-ratio check compares with them
        alpha = confidence_alpha(confidence) if confidence is not None else RATIO_ALPHA
        return score_configs(model, frame, alpha=alpha, role="model")
    targets = model_targets(model)
    need = targets + ([f"{t}_upper" for t in targets] if confidence is not None else [])
    missing = [c for c in need if c not in scored.pred.columns]
    if missing:
        raise ModelError(
            f"the given predictions lack columns {missing}: expected {need} (with a confidence,"
            " the upper bounds). Score the configs with the same model and confidence, or pass "
            "scored=None to predict here."
        )
    if len(scored.pred) != len(frame) or not same_configs(
        scored.configs.assign(
            runtime=frame["runtime"].to_numpy(), precision=frame["precision"].to_numpy()
        ),
        frame,
    ):
        raise ModelError(
            f"the given predictions are for other configs: expected one row per config to "
            f"validate ({len(frame)}, same order, no duplicates), got {len(scored.pred)} rows. "
            "Pass the configs the predictions were made for, or scored=None."
        )
    pred = scored.pred.set_axis(frame.index)
    return Scored(
        scored.configs.set_axis(frame.index), scored.X.set_axis(frame.index), pred, scored.platform
    )


def write_report(
    result: ValidationResult, report_dir: str | Path, pareto_frame: Any = None
) -> list[str]:
    """validation.csv + PNG plots (Pareto projections, predicted vs measured) in report_dir."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [str(write_table(result.rows, out / "validation.csv"))]
    targets = result.targets

    # predicted vs measured, one panel per target
    fig, axes = plt.subplots(1, len(targets), figsize=(4.2 * len(targets), 4), squeeze=False)
    for ax, t in zip(axes[0], targets):
        p = result.rows[f"predicted_{t}"].to_numpy(dtype=float)
        m = result.rows[f"measured_{t}"].to_numpy(dtype=float)
        have = np.isfinite(p) & np.isfinite(m)
        if have.any():
            ax.scatter(m[have], p[have], s=22)
            lo = float(min(p[have].min(), m[have].min()))
            hi = float(max(p[have].max(), m[have].max()))
            ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
            lim = result.budgets.get(t)
            if lim is not None:
                ax.axvline(lim, color="r", lw=0.8, label="budget")
                ax.axhline(lim, color="r", lw=0.8)
            ax.legend(loc="upper left", fontsize=8)
            mt = result.metrics[t]
            ax.set_title(f"{t}: MAE {mt['mae']:.3g}, MAPE {mt['mape_pct']:.1f}%", fontsize=9)
        else:
            ax.set_title(f"{t}: not measured on {result.platform}", fontsize=9)
        ax.set_xlabel(f"measured {t}")
        ax.set_ylabel(f"predicted {t}")
    fig.suptitle(
        f"predicted ({result.model_platform}) vs measured ({result.platform})", fontsize=10
    )
    fig.tight_layout()
    path = out / "predicted_vs_measured.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    files.append(str(path))

    # Pareto front, 2-D projections of the predicted targets, measured points overlaid
    pairs = [(a, b) for i, a in enumerate(targets) for b in targets[i + 1 :]]
    if "quality" in getattr(pareto_frame, "columns", []):
        pairs += [(t, "quality") for t in targets]
    if pairs:
        fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 4), squeeze=False)
        pf = pareto_frame if isinstance(pareto_frame, pd.DataFrame) else None
        for ax, (a, b) in zip(axes[0], pairs):
            if b == "quality" and pf is not None:
                ax.scatter(pf[a], pf[b], s=18, label="Pareto (predicted)")
                ax.set_ylabel("quality (higher is better)")
            else:
                ax.scatter(
                    result.rows[f"predicted_{a}"],
                    result.rows[f"predicted_{b}"],
                    s=18,
                    label="predicted",
                )
                ax.scatter(
                    result.rows[f"measured_{a}"],
                    result.rows[f"measured_{b}"],
                    s=18,
                    marker="x",
                    label="measured",
                )
                for _, r in result.rows.iterrows():  # each config: predicted -> measured
                    ax.plot(
                        [r[f"predicted_{a}"], r[f"measured_{a}"]],
                        [r[f"predicted_{b}"], r[f"measured_{b}"]],
                        color="0.7",
                        lw=0.6,
                        zorder=0,
                    )
                ax.set_ylabel(b)
            ax.set_xlabel(a)
            ax.legend(fontsize=8)
        fig.suptitle("Pareto front, 2-D projections", fontsize=10)
        fig.tight_layout()
        path = out / "pareto_projections.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(str(path))
    files.append(str(out / "validation.json"))
    return files


def profile_spec(
    spec: Any,
    device: str = "cpu",
    threads: int | None = None,
    protocol: Any = "adaptive",
) -> dict[str, Any]:
    """Measure any :class:`carb_nas.models.ModelSpec` for real on this machine (eager
    PyTorch): latency under the timing protocol and the tensor peak, with this platform's
    fingerprint. The way out for a module that cannot be traced on the meta device.
    Raises ConfigError when the module rejects its input shape (before any timing)."""
    from carb_nas.errors import ConfigError
    from carb_nas.measure import Prepared, Profiler, time_runs

    prof = Profiler(device, "torch", spec.precision, threads, protocol, "none", idle_s=0.0)
    try:
        model = spec.build(device)
        x = spec.example_input(device)
        prepared = Prepared(("model_spec", spec.key), model)
        runtime = prof.runtime
        try:
            peak_mb, method = runtime.peak_memory_mb(prepared, x)
        except Exception as e:  # noqa: BLE001 - the user's forward: one clear line
            shape = ",".join(map(str, spec.input_shape))
            text = " ".join(str(e).split())[:200]
            raise ConfigError(
                f"{spec.name} rejects input shape ({shape}): expected a shape its forward "
                f"accepts, got {type(e).__name__}: {text}. Pass the input shape it takes."
            ) from None
        timing = time_runs(lambda: runtime.run_timed(prepared, x), prof.protocol)
        return {
            "key": spec.key,
            "name": spec.name,
            "kind": spec.kind,
            "model_spec": spec.factory,
            "kwargs": dict(spec.kwargs),
            "input_shape": list(spec.input_shape),
            "precision": spec.precision,
            "device": device,
            "peak_mem_mb": peak_mb,
            "peak_mem_method": method,
            **timing.as_row(),
            "protocol": prof.protocol.name,
            "fingerprint": prof.fingerprint,
        }
    finally:
        prof.close()
