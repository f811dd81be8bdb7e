"""``carb-nas train``, ``carb-nas evaluate`` and ``carb-nas predict`` (the cost-model stage).

DATASET is a CSV/Parquet table: either measured rows following ``carb_nas.dataset.SCHEMA``
(config columns, targets, fingerprint; only ``status == ok`` rows are used and rows from fake
meters or devices are refused) or any generic table with target columns (e.g. a published
benchmark with flops, params, batch_size and resolution columns; name the targets with
``--target`` when they are not ``peak_mem_mb``/``energy_j``/``latency_ms``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd

from carb_nas._json import jsonable as _jsonable
from carb_nas.cli._options import echo_json
from carb_nas.costmodel import physical_offsets as _physical_offsets
from carb_nas.costmodel import prepare_table
from carb_nas.dataset import TARGETS
from carb_nas.errors import ModelError


def _per_batch_budgets(items: tuple[str, ...]) -> dict[str, float]:
    """``--budget`` values by the shared rules (carb_nas.screen.parse_budgets), per batch only:
    evaluation classifies the measured target columns themselves."""
    from carb_nas.budgets import parse_budgets

    budgets = parse_budgets(items)
    per_image = [t for t in budgets if t not in TARGETS]
    if per_image:
        raise ModelError(
            f"unsupported --budget target(s) {per_image} for evaluation: expected per-batch "
            f"targets among {list(TARGETS)}. Give the limit per batch."
        )
    return budgets


def _split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if not 0 < test_fraction < 1:
        raise ModelError(
            f"invalid --test-fraction: expected a number in (0, 1), got {test_fraction}. Use 0.2."
        )
    perm = np.random.default_rng(seed).permutation(n)
    k = int(round(n * test_fraction))
    if k < 1 or n - k < 1:
        raise ModelError(
            f"too few rows for a test split: expected enough rows for a "
            f"{test_fraction:.0%} test split, got {n}. Measure more configs."
        )
    return np.sort(perm[k:]), np.sort(perm[:k])


def _parse_offsets(items: tuple[str, ...]) -> dict[str, str | list[str]]:
    out: dict[str, str | list[str]] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        cols = [c.strip() for c in spec.split("+")]
        if not sep or not name.strip() or not all(cols):
            raise ModelError(
                f"invalid --offset: expected TARGET=COLUMN or TARGET=COL1+COL2+... (e.g. "
                f"latency_ms=flops or latency_ms=flops+param_mb), got {item!r}. Fix the option."
            )
        out[name.strip()] = cols[0] if len(cols) == 1 else cols
    return out


def _write_json(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_jsonable(doc), indent=1, allow_nan=False))
    tmp.replace(path)


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


@click.command("train")
@click.argument("dataset", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    "model_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write the model (and evaluation.json) into.",
)
@click.option("--preset", type=click.Choice(["carb", "fast"]), default="carb", show_default=True)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the test split and of the model.",
)
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
    "(repeatable; see CostModel target_offsets).",
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
    help="Miscoverage of the evaluated intervals.",
)
@click.option(
    "--jobs",
    type=int,
    default=-1,
    show_default=True,
    help="Threads per learner (-1: all cores; 1 is faster on a busy machine).",
)
@click.option("--json", "as_json", is_flag=True, help="Print evaluation.json to stdout.")
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
    jobs: int,
    offsets: tuple[str, ...],
    physical_offsets: bool,
    as_json: bool,
) -> None:
    """Train a cost model on DATASET (holding out a seeded test split) and evaluate it."""
    from carb_nas import evaluation as ev
    from carb_nas.costmodel import CostModel, frame_sha256
    from carb_nas.space import load_space, read_table

    data = prepare_table(read_table(dataset), dataset, targets)
    X, Y = data["X"], data["Y"]
    tr, te = _split(len(X), test_fraction, seed)
    Xtr, Ytr, Xte, Yte = X.iloc[tr], Y.iloc[tr], X.iloc[te], Y.iloc[te]
    space_fp = load_space(space_file).fingerprint if space_file else None
    target_offsets = _parse_offsets(offsets)
    if physical_offsets:
        for t, spec in _physical_offsets(X, data["targets"]).items():
            target_offsets.setdefault(t, spec)
    model = CostModel(
        preset=preset,
        architecture_only=architecture_only,
        random_state=seed,
        n_jobs=jobs,
        target_offsets=target_offsets or None,
    )
    t0 = time.perf_counter()
    model.fit(Xtr, Ytr, platform=data["platform"], space_fingerprint=space_fp)
    train_s = time.perf_counter() - t0
    out = model.save(model_dir)
    report = ev.evaluate(model, Xte, Yte, alpha=alpha, baseline_train=(Xtr, Ytr))
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
        report["leave_one_batch_tier_out"] = ev.leave_one_batch_tier_out(
            model, X, Y, model.low_batch_threshold
        )
        report["telemetry_ablation"] = ev.telemetry_ablation(model, Xtr, Ytr, Xte, Yte)
    _write_json(out / "evaluation.json", report)
    if as_json:
        echo_json(report)
        return
    click.echo(f"trained {preset} model on {len(tr)} rows in {train_s:.1f} s -> {out}")
    click.echo(f"held-out test ({len(te)} rows):")
    for line in _summary(report):
        click.echo(line)
    for note in data["notes"]:
        click.echo(f"note: {note}", err=True)
    click.echo(f"wrote {out / 'evaluation.json'}")


@click.command("evaluate")
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.argument("dataset", type=click.Path(dir_okay=False))
@click.option(
    "--report",
    "report_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Write evaluation.json and parity plots (PNG) here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the evaluation as JSON.")
@click.option("--alpha", type=float, default=0.05, show_default=True)
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
def evaluate_cmd(
    model_dir: str,
    dataset: str,
    report_dir: str | None,
    as_json: bool,
    alpha: float,
    budgets: tuple[str, ...],
    studies: bool,
) -> None:
    """Score the model in MODEL_DIR on the measured rows of DATASET."""
    from carb_nas import evaluation as ev
    from carb_nas.costmodel import CostModel
    from carb_nas.space import read_table

    model = CostModel.load(model_dir)
    frame = read_table(dataset)
    wanted = [t for t in model.targets_ if t in frame and frame[t].notna().any()]
    data = prepare_table(frame, dataset, wanted if wanted else ())
    report = ev.evaluate(
        model,
        data["X"],
        data["Y"],
        alpha=alpha,
        budgets=_per_batch_budgets(budgets) or None,
        report_dir=report_dir,
    )
    notes = list(data["notes"])
    mp, dp = model.platform_ or {}, data["platform"] or {}
    if mp.get("platform") and dp.get("platform") and mp["platform"] != dp["platform"]:
        notes.append(
            f"predictions of a {mp['platform']} model scored against measurements from "
            f"{dp['platform']}"
        )
    elif mp.get("device_name") and dp.get("device_name") and mp["device_name"] != dp["device_name"]:
        notes.append(
            f"model trained on {mp['device_name']!r}, rows measured on {dp['device_name']!r}"
        )
    report = {
        "model": str(model_dir),
        "dataset": str(dataset),
        "model_platform": mp or None,
        "notes": notes,
        **report,
    }
    if studies:
        report["leave_one_batch_tier_out"] = ev.leave_one_batch_tier_out(
            model, data["X"], data["Y"], model.low_batch_threshold
        )
    if report_dir:
        _write_json(Path(report_dir) / "evaluation.json", report)
    if as_json:
        echo_json(report)
        return
    click.echo(f"model {model_dir} on {report['n_rows']} rows of {dataset}:")
    for line in _summary(report):
        click.echo(line)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if report_dir:
        click.echo(f"wrote {Path(report_dir) / 'evaluation.json'} and parity plots")


@click.command("predict")
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.argument("configs")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="predictions.csv or .parquet",
)
@click.option(
    "--alpha",
    type=float,
    default=None,
    help="Add <target>_lower/_upper conformal bounds at this miscoverage.",
)
def predict_cmd(model_dir: str, configs: str, output: str, alpha: float | None) -> None:
    """Predict costs for CONFIGS (CSV/Parquet of configs, or a space TOML: all its configs)."""
    from carb_nas.costmodel import CostModel, model_inputs
    from carb_nas.space import CONFIG_COLUMNS, Config, read_configs, read_table, write_table

    model = CostModel.load(model_dir)
    p = Path(configs)
    generic = (
        p.suffix in (".csv", ".parquet")
        and p.exists()
        and not all(
            c in read_table(p).columns
            for c in ("family", "depth", "width", "resolution", "batch_size")
        )
    )
    if generic:
        frame = read_table(p)
        X = frame
        base = frame
    else:
        frame = read_configs(configs)
        X = model_inputs(frame)
        base = frame[list(CONFIG_COLUMNS)].copy()
        base.insert(0, "key", [Config(*r).key for r in base.itertuples(index=False)])
    pred = model.predict(X, alpha=alpha)
    out = pd.concat([base.reset_index(drop=True), pred.reset_index(drop=True)], axis=1)
    write_table(out, output)
    click.echo(f"wrote {len(out)} predictions ({', '.join(model.targets_)}) to {output}", err=True)


COMMANDS: list = [train_cmd, evaluate_cmd, predict_cmd]
