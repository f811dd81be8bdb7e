"""``carb-nas model train``, ``carb-nas model evaluate`` and ``carb-nas predict`` (the
cost-model stage).

DATASET is a CSV/Parquet table: either measured rows following ``carb_nas.datasets.SCHEMA``
(config columns, targets, fingerprint; only ``status == ok`` rows are used, and rows from fake
meters or devices, from several platforms, or with implausible targets are refused) or any
generic table with target columns (e.g. a published benchmark with flops, params, batch_size
and resolution columns; name the targets with ``--target`` when they are not
``peak_mem_mb``/``energy_j``/``latency_ms``).

Every option is checked before any work; outputs are written atomically (a model directory
or a report directory appears whole or not at all; a failure leaves a previous one intact).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import click

from carb_nas.cli._options import (
    echo_json,
    example,
    info,
    json_option,
    load,
    output_option,
    renamed_option,
    report_option,
    say_provenance,
    seed_option,
    uncalibrated_option,
)
from carb_nas.errors import ConfigError, ModelError

_MARKER_MODEL = "manifest.json"
_MARKER_REPORT = "evaluation.json"


def _per_batch_budgets(items: tuple[str, ...]) -> dict[str, float]:
    """``--budget`` values by the shared rules (carb_nas.budgets.parse_budgets), per batch only:
    evaluation classifies the measured target columns themselves."""
    from carb_nas.budgets import parse_budgets
    from carb_nas.datasets import TARGETS

    budgets = parse_budgets(items)
    per_image = [t for t in budgets if t not in TARGETS]
    if per_image:
        raise ModelError(
            f"unsupported --budget target(s) {per_image} for evaluation: expected per-batch "
            f"targets among {list(TARGETS)}. Give the limit per batch."
        )
    return budgets


def _check_alpha(alpha: float | None) -> None:
    if alpha is not None and not 0 < alpha < 1:
        raise ModelError(
            f"invalid --alpha: expected a miscoverage in (0, 1) (alpha = 1 - confidence, e.g. "
            f"0.05 for 95% intervals), got {alpha:g}. Pass e.g. --alpha 0.05."
        )


def _check_threads(threads: int) -> None:
    if threads != -1 and not 1 <= threads <= 1024:
        raise ModelError(
            f"invalid --threads/--jobs: expected -1 (all cores) or a thread count in 1..1024, "
            f"got {threads}. Pass e.g. --threads 1 on a busy machine."
        )


def _check_test_fraction(test_fraction: float) -> None:
    if not 0 < test_fraction < 1:
        raise ModelError(
            f"invalid --test-fraction: expected a number in (0, 1), got {test_fraction:g}. Use 0.2."
        )


def _split(n: int, test_fraction: float, seed: int) -> tuple[Any, Any]:
    """Seeded train/test row indices (scikit-learn's ``train_test_split``), sorted."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    k = int(round(n * test_fraction))
    if k < 1 or n - k < 1:
        raise ModelError(
            f"too few rows for a test split: expected enough rows for a "
            f"{test_fraction:.0%} test split, got {n}. Measure more configs."
        )
    tr, te = train_test_split(np.arange(n), test_size=k, random_state=seed, shuffle=True)
    return np.sort(tr), np.sort(te)


def _parse_offsets(items: tuple[str, ...]) -> dict[str, str | list[str]]:
    out: dict[str, str | list[str]] = {}
    seen: dict[str, str] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        cols = [c.strip() for c in spec.split("+")]
        if not sep or not name.strip() or not all(cols):
            raise ModelError(
                f"invalid --offset: expected TARGET=COLUMN or TARGET=COL1+COL2+... (e.g. "
                f"latency_ms=flops or latency_ms=flops+param_mb), got {item!r}. Fix the option."
            )
        target = name.strip()
        if target in seen:
            raise ModelError(
                f"repeated --offset for {target!r}: expected one --offset per target, got "
                f"{seen[target]!r} and {item!r}. Give one; for a sum of columns use "
                f"{target}=COL1+COL2."
            )
        seen[target] = item
        out[target] = cols[0] if len(cols) == 1 else cols
    return out


def _summary(report: dict[str, Any]) -> list[str]:
    lines = []
    base = report.get("baselines", {}).get("flops_linear", {})
    for t, m in report["test"].items():
        b = base.get(t) if isinstance(base, dict) else None
        extra = f"  (FLOPs-only R2 {b['r2']:.3f})" if isinstance(b, dict) else ""
        lines.append(f"  {t:<12} R2 {m['r2']:.4f}  MAE {m['mae']:.4g}  MAPE {m['mape']:.2%}{extra}")
    cov = report.get("intervals")
    if cov:
        lines.append(
            "  interval coverage (nominal {:.0%}): ".format(cov["nominal"])
            + ", ".join(f"{t} {v['coverage']:.1%}" for t, v in cov.items() if isinstance(v, dict))
        )
    return lines


def _threads_option(f: Any) -> Any:
    # one option, two names: README and scripts spell it --jobs; -1 (all cores) is allowed
    return click.option(
        "--threads",
        "--jobs",
        "threads",
        type=int,
        default=-1,
        show_default=True,
        help="Threads per learner (-1: all cores; 1 is faster on a busy machine). "
        "--jobs is the same option.",
    )(f)


def _measured_table(dataset: str, command: str):
    """The rows file of DATASET; a published table (others' benchmarks) is refused."""
    from carb_nas.datasets import read_table, refuse_published

    refuse_published(dataset, command, "measured rows of carb_nas.datasets.SCHEMA")
    frame = read_table(dataset)
    refuse_published(frame, command, "measured rows of carb_nas.datasets.SCHEMA", label=dataset)
    return frame


@click.group("model")
def model_group() -> None:
    """Train a cost model on measured rows, or evaluate one (a directory or a platform)."""


@model_group.command("train")
@click.argument("dataset", type=click.Path(dir_okay=False))
@output_option(
    "Directory to write the model (and evaluation.json) into; a previous model there is "
    "replaced only once the new one is complete.",
    required=True,
    dir_okay=True,
    dest="model_dir",
)
@click.option("--preset", type=click.Choice(["carb", "fast"]), default="carb", show_default=True)
@seed_option("Seed of the test split and of the model (an integer >= 0).")
@click.option("--test-fraction", type=float, default=0.2, show_default=True)
@click.option(
    "--target",
    "targets",
    multiple=True,
    help="Target column (repeatable); default: the dataset targets present.",
)
@click.option("--architecture-only", is_flag=True, help="Ignore telemetry columns.")
@click.option(
    "--offset",
    "offsets",
    multiple=True,
    help="TARGET=COLUMN: fit the target's log-ratio to a positive feature column; "
    "TARGET=COL1+COL2+...: to a sum of columns with fitted non-negative costs "
    "(one per target; see CostModel target_offsets).",
)
@click.option(
    "--physical-offsets",
    is_flag=True,
    help="Offsets peak_mem_mb=tensor_peak_mb and, for latency_ms and energy_j, the fitted "
    "sum flops+native_conv_flops+param_mb+act_mb_total+mmap_mb+n_conv, for the targets "
    "present (not part of CARB; extrapolates better).",
)
@click.option(
    "--space",
    "space_file",
    default=None,
    help="Space file the rows sample (its fingerprint is recorded).",
)
@click.option(
    "--studies",
    is_flag=True,
    help="Also run leave-one-batch-tier-out and the telemetry ablation (retrains).",
)
@click.option(
    "--alpha",
    type=float,
    default=0.05,
    show_default=True,
    help="Miscoverage of the evaluated intervals (1 - confidence).",
)
@_threads_option
@json_option("Print evaluation.json to stdout.")
@example("carb-nas model train measured.csv -o models/torch --preset fast")
def train_cmd(
    dataset: str,
    model_dir: str,
    preset: str,
    seed: int,
    test_fraction: float,
    targets: tuple[str, ...],
    architecture_only: bool,
    space_file: str | None,
    studies: bool,
    alpha: float,
    threads: int,
    offsets: tuple[str, ...],
    physical_offsets: bool,
    as_json: bool,
) -> None:
    """Train a cost model on DATASET (holding out a seeded test split) and evaluate it."""
    from carb_nas._io import atomic_directory, atomic_write_json
    from carb_nas.costmodel import (
        CostModel,
        check_output_dir,
        evaluate,
        frame_sha256,
        prepare_table,
    )
    from carb_nas.costmodel import physical_offsets as find_physical_offsets
    from carb_nas.costmodel.evaluation import leave_one_batch_tier_out, telemetry_ablation
    from carb_nas.space import load_space

    # every option first: nothing is read, trained or written before they all pass
    _check_test_fraction(test_fraction)
    _check_alpha(alpha)
    _check_threads(threads)
    target_offsets = _parse_offsets(offsets)
    check_output_dir(model_dir, _MARKER_MODEL, "model")
    space_fp = load_space(space_file).fingerprint if space_file else None

    data = prepare_table(_measured_table(dataset, "train"), dataset, targets)
    X, Y = data["X"], data["Y"]
    tr, te = _split(len(X), test_fraction, seed)
    Xtr, Ytr, Xte, Yte = X.iloc[tr], Y.iloc[tr], X.iloc[te], Y.iloc[te]
    if physical_offsets:
        for t, spec in find_physical_offsets(X, data["targets"]).items():
            target_offsets.setdefault(t, spec)
    model = CostModel(
        preset=preset,
        architecture_only=architecture_only,
        random_state=seed,
        n_jobs=threads,
        target_offsets=target_offsets or None,
    )
    t0 = time.perf_counter()
    model.fit(Xtr, Ytr, platform=data["platform"], space_fingerprint=space_fp)
    train_s = time.perf_counter() - t0
    report = evaluate(model, Xte, Yte, alpha=alpha, baseline_train=(Xtr, Ytr))
    report = {
        "dataset": str(dataset),
        "dataset_sha256": frame_sha256(data["frame"]),
        "platform": model.platform_,
        "preset": preset,
        "seed": seed,
        "split": {
            "train": len(tr),
            "test": len(te),
            "test_fraction": test_fraction,
            "model_internal": {
                k: model.fit_info_[k] for k in ("n_train", "n_validation", "n_calibration")
            },
        },
        "train_seconds": train_s,
        "notes": data["notes"],
        **report,
    }
    if studies:
        report["leave_one_batch_tier_out"] = leave_one_batch_tier_out(
            model, X, Y, model.low_batch_threshold
        )
        report["telemetry_ablation"] = telemetry_ablation(model, Xtr, Ytr, Xte, Yte)
    # the model and its evaluation appear together, or the previous ones stay
    with atomic_directory(model_dir) as tmp:
        model.save(tmp)
        atomic_write_json(tmp / _MARKER_REPORT, report)
    out = Path(model_dir)
    for note in data["notes"]:
        info(f"note: {note}")
    info(f"wrote {out} (model and {_MARKER_REPORT})")
    if as_json:
        echo_json(report)
        return
    click.echo(f"trained {preset} model on {len(tr)} rows in {train_s:.1f} s -> {out}")
    click.echo(f"held-out test ({len(te)} rows):")
    for line in _summary(report):
        click.echo(line)


@model_group.command("evaluate")
@click.argument("model", metavar="MODEL")
@click.argument("dataset", type=click.Path(dir_okay=False), required=False)
@report_option("Write evaluation.json and parity plots (PNG) into this directory.")
@json_option("Print the evaluation as JSON.")
@click.option(
    "--alpha",
    type=float,
    default=0.05,
    show_default=True,
    help="Miscoverage of the evaluated intervals (1 - confidence).",
)
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    help="TARGET=LIMIT for the budget decisions (repeatable; default: medians).",
)
@click.option(
    "--studies",
    is_flag=True,
    help="Also run leave-one-batch-tier-out and the telemetry ablation (retrains).",
)
@click.option(
    "--leave-one-family-out",
    "lofo",
    is_flag=True,
    help="Train on all family groups but one and test on it, for each group: the "
    "kernel-level predictor on a multi-family dataset with its per-operator table. "
    "Then the only argument is that DATASET (e.g. carb_nas/data/datasets/"
    "cpu_torch_fp32_zoo.csv; its ops table beside it, or --ops). A dataset without one "
    "(the GPU rows, cuda_torch_fp16_zoo-h200.csv) is held out family by family by the "
    "network-level CostModel, energy too.",
)
@click.option(
    "--ops",
    "ops_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --leave-one-family-out: the per-operator table (default: DATASET's "
    "<stem>_ops.csv.gz).",
)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(["kernel", "network", "feature", "both"]),
    help="With --leave-one-family-out: the modelling choices to compare (repeatable; "
    "default all): kernel sum alone, network cascade alone, the sum as a feature, or as "
    "feature and offset (both).",
)
@click.option(
    "--reference-normalized",
    "normalized",
    is_flag=True,
    help="With --leave-one-family-out: only the rows that timed the speed probe, each "
    "scaled to the machine's typical speed (datasets.reference_normalized), so the test does "
    "not count the machine's own slow minutes as model error.",
)
@click.option(
    "--kernel-samples",
    "kernel_samples",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --leave-one-family-out: single-op measurements of the dataset's machine "
    "(an export of benchmarks/any_cnn_data.py kernels, e.g. docs/passes/kernels-zen4/"
    "kernels.csv.gz with cpu_torch_fp32_zoo-zen4.csv), added to every fold's per-op models.",
)
@click.option(
    "--no-anchor",
    "no_anchor",
    is_flag=True,
    help="With --leave-one-family-out: fit the per-op models on the op times as profiled, "
    "not scaled to each network's timed latency (costmodel.anchored_ops; anchoring helps "
    "where a row's latency is a median of several passes, not where it is one pass).",
)
@example("carb-nas model evaluate cpu/torch/fp32 configs_measured.csv --json")
def evaluate_cmd(
    model: str,
    dataset: str | None,
    report_dir: str | None,
    as_json: bool,
    alpha: float,
    budgets: tuple[str, ...],
    studies: bool,
    lofo: bool,
    ops_path: str | None,
    modes: tuple[str, ...],
    normalized: bool,
    kernel_samples: str | None,
    no_anchor: bool,
) -> None:
    """Score MODEL (a model directory or a shipped platform name such as cpu/torch/fp32) on
    the measured rows of DATASET; or, with --leave-one-family-out, the kernel-level
    predictor family by family on DATASET (the only argument).

    The model is scored as trained, without this machine's calibration (a calibration is
    scored where it applies: `carb-nas validate`)."""
    from carb_nas._io import atomic_directory, atomic_write_json
    from carb_nas.costmodel import check_output_dir, evaluate, prepare_table
    from carb_nas.costmodel.evaluation import leave_one_batch_tier_out

    if lofo:
        _evaluate_lofo(
            model, ops_path, modes, as_json, dataset, normalized, kernel_samples, no_anchor
        )
        return
    if dataset is None:
        raise ModelError(
            "missing DATASET: expected `carb-nas model evaluate MODEL DATASET` (or "
            "`carb-nas model evaluate --leave-one-family-out DATASET`), got only MODEL "
            f"{model!r}. Name the measured table to score on."
        )
    given = [name for name, value in (("--ops", ops_path), ("--mode", modes),
             ("--reference-normalized", normalized), ("--kernel-samples", kernel_samples),
             ("--no-anchor", no_anchor)) if value]  # fmt: skip
    if given:
        raise ModelError(
            f"{', '.join(given)} {'belongs' if len(given) == 1 else 'belong'} to "
            "--leave-one-family-out: expected them with that flag, got them without it. Add "
            "--leave-one-family-out or drop them."
        )
    _check_alpha(alpha)
    budget_limits = _per_batch_budgets(budgets) or None
    if report_dir:
        check_output_dir(report_dir, _MARKER_REPORT, "report", "--report")
    predictor = load(model, "MODEL", uncalibrated=True)
    # a dataset's rows are scored by the cascade itself (its low-batch correction included)
    cost_model = predictor.config_model if predictor.config_model is not None else predictor
    if budget_limits:
        from carb_nas.budgets import check_budgets

        check_budgets(budget_limits, cost_model, "MODEL")
    frame = _measured_table(dataset, "evaluate")
    wanted = [t for t in cost_model.targets_ if t in frame and frame[t].notna().any()]
    data = prepare_table(frame, dataset, wanted if wanted else ())

    def build(plot_dirs: tuple[Path, str] | None) -> dict[str, Any]:
        """``plot_dirs``: (the temporary directory the plots go to, the report directory)."""
        scored = evaluate(
            cost_model,
            data["X"],
            data["Y"],
            alpha=alpha,
            budgets=budget_limits,
            report_dir=None if plot_dirs is None else plot_dirs[0],
        )
        if plot_dirs is not None:  # name the plots where they will be, not in the temporary
            final = Path(plot_dirs[1])
            scored["plots"] = [str(final / Path(p).name) for p in scored["plots"]]
        report = _evaluation_doc(cost_model, model, dataset, data, scored)
        if studies:
            report["leave_one_batch_tier_out"] = leave_one_batch_tier_out(
                cost_model, data["X"], data["Y"], cost_model.low_batch_threshold
            )
        return report

    if report_dir:
        with atomic_directory(report_dir) as tmp:  # plots and evaluation.json appear together
            report = build((tmp, report_dir))
            atomic_write_json(tmp / _MARKER_REPORT, report)
        info(f"wrote {Path(report_dir) / _MARKER_REPORT} and parity plots")
    else:
        report = build(None)
    for note in report["notes"]:
        info(f"note: {note}")
    if as_json:
        echo_json(report)
        return
    click.echo(f"model {model} on {report['n_rows']} rows of {dataset}:")
    for line in _summary(report):
        click.echo(line)


def _evaluate_lofo(
    dataset: str,
    ops_path: str | None,
    modes: tuple[str, ...],
    as_json: bool,
    second: str | None,
    normalized: bool = False,
    kernel_samples: str | None = None,
    no_anchor: bool = False,
) -> None:
    import pandas as pd

    from carb_nas.costmodel.evaluation import MODES, lofo_report
    from carb_nas.datasets import load_kernel_samples, reference_normalized

    if second is not None:
        raise ModelError(
            "--leave-one-family-out takes one argument: expected DATASET only (it trains its "
            f"own models), got MODEL {dataset!r}... and DATASET {second!r}. Drop MODEL."
        )
    path = Path(dataset)
    ops_file = Path(ops_path) if ops_path else path.with_name(f"{path.stem}_ops.csv.gz")
    if not ops_path and path.is_file() and not ops_file.is_file():
        _evaluate_lofo_network(dataset, modes, as_json, normalized, kernel_samples, no_anchor)
        return
    for p, what, fix in (
        (path, "DATASET", "Name a multi-family dataset such as cpu_torch_fp32_zoo.csv."),
        (ops_file, "per-operator table", "Pass it with --ops."),
    ):
        if not p.is_file():
            raise ModelError(f"{what} not found: expected a file, got {str(p)!r}. {fix}")
    try:
        rows, ops = pd.read_csv(path), pd.read_csv(ops_file)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise ModelError(
            f"unreadable table: expected CSV files, got {type(e).__name__}: {e}. Pass the "
            "dataset and its ops table as shipped."
        ) from e
    need = {"key", "family", "depth", "width", "resolution", "batch_size", "latency_ms"}
    missing = sorted(need - set(rows.columns)) + sorted(
        {"key", "index", "measured_ms"} - set(ops.columns)
    )
    if missing:
        raise ModelError(
            f"not a multi-family dataset with its ops table: expected the columns {sorted(need)}"
            f" and (key, index, measured_ms) in the ops table, got {missing} missing. Pass "
            "cpu_torch_fp32_zoo.csv and its _ops table (benchmarks/any_cnn_data.py export)."
        )
    if "status" in rows:
        rows = rows[rows["status"] == "ok"]
    note = ""
    typical: float | None = None
    if normalized:
        try:
            rows, scaled, typical = reference_normalized(rows, ops, drop_unprobed=True)
        except ConfigError as e:
            raise ModelError(
                f"--reference-normalized needs rows that timed the speed probe: {e} Or drop "
                "--reference-normalized."
            ) from e
        ops = scaled if scaled is not None else ops
        note = f" (the {len(rows)} that timed the speed probe, scaled to {typical:.4f} ms)"
    samples = None
    if kernel_samples:
        try:
            samples = load_kernel_samples(kernel_samples, typical, rows)
        except ConfigError as e:
            raise ModelError(f"--kernel-samples: {e}") from e
        note += f"; {len(samples)} kernel samples in every fold"
    if no_anchor:
        note += "; op times as profiled (not anchored)"
    report = lofo_report(
        rows, ops, modes=list(modes) or list(MODES), kernel_samples=samples,
        kernel_params={"kernel_anchor": False} if no_anchor else None,
    )  # fmt: skip
    if as_json:
        echo_json(report)
        return
    table = pd.DataFrame(report["per_family"])
    click.echo(f"leave-one-family-out over {report['n_rows']} networks of {dataset}{note}:")
    click.echo(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for mode, s in report["summary"].items():
        click.echo(
            f"{mode}: latency within 10 % median {s['lofo_latency_within10']:.3f}, worst "
            f"{s['lofo_latency_min_within10']:.3f}; memory within 10 % median "
            f"{s['lofo_mem_within10']:.3f}; 90 % latency interval holds a median "
            f"{s['lofo_latency_cover90']:.3f}"
        )


def _evaluate_lofo_network(
    dataset: str,
    modes: tuple[str, ...],
    as_json: bool,
    normalized: bool,
    kernel_samples: str | None,
    no_anchor: bool,
) -> None:
    """--leave-one-family-out on a dataset without a per-operator table (the GPU rows): the
    config-table CostModel family by family, energy too where measured."""
    import pandas as pd

    from carb_nas.costmodel.evaluation import network_lofo_report
    from carb_nas.datasets import load_dataset

    ops_only = [m for m in modes if m != "network"]
    ops_only += ["--reference-normalized"] if normalized else []
    ops_only += ["--kernel-samples"] if kernel_samples else []
    ops_only += ["--no-anchor"] if no_anchor else []
    if ops_only:
        stem = Path(dataset).stem
        raise ModelError(
            f"{', '.join(ops_only)} need the dataset's per-operator table: expected "
            f"{stem}_ops.csv.gz beside {dataset} (or --ops FILE), got none. Drop them to hold "
            "each family out of the network-level model, or pass the table with --ops."
        )
    report = network_lofo_report(load_dataset(dataset, ok_only=True))
    if as_json:
        echo_json(report)
        return
    table = pd.DataFrame(report["per_family"])
    click.echo(
        f"leave-one-family-out over {report['n_rows']} networks of {dataset} (no per-operator "
        f"table: {report['model']}):"
    )
    click.echo(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for t, s in report["summary"].items():
        click.echo(
            f"{t}: within 10 % median {s['within10_median']:.3f}, worst {s['within10_min']:.3f}; "
            f"MAPE median {100 * s['mape_median']:.1f} %"
        )


def _evaluation_doc(
    cost_model: Any, model: str, dataset: str, data: dict[str, Any], report: dict[str, Any]
) -> dict[str, Any]:
    notes = list(data["notes"])
    mp, dp = cost_model.platform_ or {}, data["platform"] or {}
    if mp.get("platform") and dp.get("platform") and mp["platform"] != dp["platform"]:
        notes.append(
            f"predictions of a {mp['platform']} model scored against measurements from "
            f"{dp['platform']}"
        )
    elif mp.get("device_name") and dp.get("device_name") and mp["device_name"] != dp["device_name"]:
        notes.append(
            f"model trained on {mp['device_name']!r}, rows measured on {dp['device_name']!r}"
        )
    return {
        "model": str(model),
        "dataset": str(dataset),
        "model_platform": mp or None,
        "notes": notes,
        **report,
    }


def model_spec_options(f):
    """--model-spec / --kwargs / --input-shape: a user factory instead of configs."""
    f = click.option(
        "--input-shape",
        default=None,
        help="With --model-spec: one input batch, batch first (e.g. 1,3,224,224).",
    )(f)
    f = click.option(
        "--kwargs",
        "factory_kwargs",
        default=None,
        help="With --model-spec: the factory's keyword arguments as a JSON object.",
    )(f)
    f = click.option(
        "--model-spec",
        default=None,
        metavar="PACKAGE.MODULE:FUNCTION",
        help="A function returning an nn.Module, instead of CONFIGS (with --input-shape).",
    )(f)
    return f


def resolve_model_spec(
    model_spec: str | None, factory_kwargs: str | None, input_shape: str | None, precision: str
):
    """The ModelSpec of --model-spec (None without it); one clear error for a bad spec."""
    from carb_nas.errors import ConfigError
    from carb_nas.models import ModelSpec

    if model_spec is None:
        if factory_kwargs is not None or input_shape is not None:
            raise ConfigError(
                "--kwargs/--input-shape without --model-spec: expected them only with "
                "--model-spec PACKAGE.MODULE:FUNCTION, got no --model-spec. Add it or drop them."
            )
        return None
    if input_shape is None:
        raise ConfigError(
            f"missing --input-shape: expected one input batch for {model_spec!r}, got none. "
            "Add e.g. --input-shape 1,3,224,224."
        )
    return ModelSpec.from_factory(model_spec, input_shape, factory_kwargs, precision)


@click.command("predict")
@click.argument("model", metavar="MODEL")
@click.argument("configs", required=False)
@output_option(
    "predictions.csv or .parquet (default: CSV on stdout, or JSON with --json)",
)
@click.option(
    "--alpha",
    type=float,
    default=None,
    help="Add <target>_lower/_upper conformal bounds at this miscoverage (1 - confidence).",
)
@json_option("Print the predictions as JSON records on stdout.")
@uncalibrated_option()
@renamed_option("--calibrated", "the default (--uncalibrated opts out)", is_flag=True)
@model_spec_options
@example("carb-nas predict cpu/torch/fp32 cpu -o predictions.csv")
def predict_cmd(
    model: str,
    configs: str | None,
    output: str | None,
    alpha: float | None,
    as_json: bool,
    uncalibrated: bool,
    model_spec: str | None,
    factory_kwargs: str | None,
    input_shape: str | None,
) -> None:
    """Predict costs for CONFIGS (CSV/Parquet of configs, or a space TOML: all its configs,
    any built-in family) with MODEL (a model directory or a shipped platform name such as
    cpu/torch/fp32), or for your own network: --model-spec pkg.mod:make_net --kwargs '{...}'
    --input-shape 1,3,224,224 (traced on the meta device, nothing is run). A platform name
    predicts configs of the families its data holds with its CARB cascade, any other network
    with its kernel-level module model where it has one; this machine's calibration is
    applied when it exists (--uncalibrated: not)."""
    import pandas as pd

    from carb_nas.costmodel import model_inputs
    from carb_nas.datasets import read_configs, read_table, write_table
    from carb_nas.errors import ConfigError, ModelError
    from carb_nas.scoring import (
        deployed_level,
        predict_frame,
        spec_inputs,
        trained_families_note,
        unseen_families,
    )
    from carb_nas.space import CONFIG_COLUMNS, REQUIRED_COLUMNS, Config

    _check_alpha(alpha)
    if (configs is None) == (model_spec is None):
        raise ConfigError(
            "nothing to predict: expected CONFIGS or --model-spec (one of them), got "
            f"{'both' if configs else 'neither'}. Pass a configs table/space or a factory."
        )
    spec = resolve_model_spec(model_spec, factory_kwargs, input_shape, "fp32")
    from carb_nas.predictors import check_predictor

    check_predictor(model, "MODEL")
    if spec is not None:
        spec_inputs(spec)  # traced (and cached) before the model loads: bad specs fail fast
        cost_model = load(model, "MODEL", uncalibrated, say=False)
        precision = deployed_level(cost_model, "precision", spec.precision)
        if precision != spec.precision:  # as deployed on a one-precision model, as
            # predict_costs does (cpu/openvino/int8)
            spec = resolve_model_spec(model_spec, factory_kwargs, input_shape, precision)
        pred, unseen = cost_model.predict_spec(spec, alpha if alpha is not None else 0.1)
        unmodelled = list(pred["unmodelled_ops"].iloc[0]) if "unmodelled_ops" in pred else []
        if unmodelled:
            warnings.warn(
                f"the model ({model}) never measured ops {unmodelled}: their estimate "
                "(by their kind's measured ops, or the roofline) is added and widens the "
                "latency interval by as much.",
                UserWarning,
                stacklevel=1,
            )
        elif unseen:
            warnings.warn(
                f"the model ({model}) never saw this architecture "
                f"({trained_families_note(cost_model)}): predicting it from its architecture "
                "features alone, expect poor accuracy; the kernel-level module model of "
                "MODEL=cpu/torch/fp32 is built for networks of your own.",
                UserWarning,
                stacklevel=1,
            )
        values = {k: float(v) for k, v in pred.iloc[0].items() if k != "unmodelled_ops"}
        row = {"key": spec.key, "model_spec": spec.factory,
               "input_shape": ",".join(map(str, spec.input_shape)), **values,
               "unmodelled_ops": " ".join(unmodelled)}  # fmt: skip
        if alpha is None:
            row = {k: v for k, v in row.items() if not k.endswith(("_lower", "_upper"))}
        out = pd.DataFrame([row])
        say_provenance(cost_model, "MODEL")
        if output:
            write_table(out, output)
            info(f"wrote 1 prediction to {output}")
        if as_json:
            echo_json({"model": str(model), "targets": list(cost_model.targets_),
                       "alpha": alpha, "calibrated": cost_model.calibrated, "n_rows": 1,
                       "output": output, "predictions": out.to_dict(orient="records")})  # fmt: skip
        elif not output:
            click.echo(out.to_csv(index=False), nl=False)
        return
    p = Path(configs)  # type: ignore[arg-type]
    generic = (
        p.suffix in (".csv", ".parquet")
        and p.exists()
        and not all(c in read_table(p).columns for c in REQUIRED_COLUMNS)
    )
    if generic:
        frame = read_table(p)
        X = frame
        base = frame
    else:
        frame = read_configs(configs)  # type: ignore[arg-type]
        X = model_inputs(frame)
        base = frame[list(CONFIG_COLUMNS)].copy()
        base.insert(0, "key", [Config(*r).key for r in base.itertuples(index=False)])
    cost_model = load(model, "MODEL", uncalibrated, say=False)
    if generic:
        try:
            pred = cost_model.predict(X, alpha=alpha)
        except (ModelError, KeyError) as e:
            schema = getattr(cost_model, "schema_", None)
            knobs = {*getattr(schema, "numeric", ()), *getattr(schema, "categorical", {})}
            if "family" in frame.columns and set(REQUIRED_COLUMNS) <= knobs:
                read_configs(p)  # a configs table short of a knob: its loader says which
            if isinstance(e, ModelError):
                raise
            names = list(getattr(cost_model, "feature_names_in_", None) or [])
            missing = [c for c in names if c not in frame.columns]
            raise ModelError(
                f"{configs}: missing model input column(s) {missing}: expected a configs table "
                f"({', '.join(REQUIRED_COLUMNS)}) or a table of the model's inputs, got "
                f"{list(frame.columns)}. Add the columns or pass configs."
            ) from None
    else:
        unseen_names = unseen_families(cost_model, frame["family"].unique())
        if unseen_names:
            warnings.warn(
                f"the model ({model}) never saw family {unseen_names} "
                f"({trained_families_note(cost_model)}): predicting them from their "
                "architecture features alone, expect poor accuracy.",
                UserWarning,
                stacklevel=1,
            )
        pred = predict_frame(cost_model, frame, alpha=alpha, X=X)
    out = pd.concat([base.reset_index(drop=True), pred.reset_index(drop=True)], axis=1)
    say_provenance(cost_model, "MODEL")
    if output:
        write_table(out, output)
        info(f"wrote {len(out)} predictions ({', '.join(cost_model.targets_)}) to {output}")
    if as_json:
        echo_json(
            {
                "model": str(model),
                "targets": list(cost_model.targets_),
                "alpha": alpha,
                "calibrated": cost_model.calibrated,
                "n_rows": len(out),
                "output": output,
                "predictions": out.to_dict(orient="records"),
            }
        )
    elif not output:
        click.echo(out.to_csv(index=False), nl=False)


COMMANDS: list = [model_group, predict_cmd]
