"""``carb-nas screen``, ``carb-nas search`` and ``carb-nas validate``."""

from __future__ import annotations

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
    max_configs_option,
    model_option,
    output_option,
    precision_option,
    quantization_data_option,
    renamed_option,
    report_option,
    runtime_option,
    say_provenance,
    seed_option,
    source_target_options,
    storage_option,
    threads_option,
    uncalibrated_option,
)
from carb_nas.errors import ConfigError

# The embedded default of `carb-nas search` with no arguments: the default CPU models (trained
# on first use from the shipped datasets), the CPU space (whose [limits] cap keeps every config
# cheap to profile) and a budget that leaves a real trade-off inside that space: a response
# time of at most 20 ms and 100 MB per batch (the shipped CPU data has a median of ~13 ms and
# ~17 MB, a 90th percentile of ~31 ms and ~95 MB). The objectives are search's default: latency
# per image (throughput), memory per batch and quality, so the Pareto set spans batch sizes.
DEFAULT_SPACE = "cpu"
DEFAULT_MODEL = "cpu/torch/fp32"
DEFAULT_RESCORE = "cpu/onnxruntime/fp32"
DEFAULT_BUDGETS = ("latency_ms=20", "peak_mem_mb=100")
DEFAULT_VALIDATE_MAX = 6
CALIBRATE_ENV = "CARB_NAS_CALIBRATE"
TABLE_SUFFIXES = (".csv", ".parquet")


def platform_parts(model: Any) -> tuple[str, str, str]:
    """(device, runtime, precision) a model was trained for; cpu/torch/fp32 when unknown."""
    plat = getattr(model, "platform_", None) or {}
    parts = str(plat.get("platform", "")).split("/")
    parts = parts if len(parts) == 3 else ["cpu", "torch", "fp32"]
    return (
        str(plat.get("device") or parts[0]),
        str(plat.get("runtime") or parts[1]),
        str(plat.get("precision") or parts[2]),
    )


def _check_table_path(path: str | None, option: str) -> None:
    if path is not None and Path(path).suffix not in TABLE_SUFFIXES:
        raise ConfigError(
            f"unsupported {option} format: expected a path ending in .csv or .parquet, got "
            f"{path!r}. Rename the output."
        )


def _check_space_model(space: Any, model: Any, role: str) -> None:
    """A model trained on another space's knobs (family/precision) is a clear error."""
    import pandas as pd

    from carb_nas.scoring import align_to_platform

    grid = space.grid()
    align_to_platform(model, grid.head(1) if len(grid) else pd.DataFrame(), role)
    # a varying family/precision/runtime column is checked on the whole knob list, cheaply
    for knob in ("family", "precision", "runtime"):
        values = space.values(knob)
        if len(values) > 1:
            align_to_platform(model, pd.DataFrame({knob: values}), role)


def _spread_labels(frame: Any, column: str, n: int) -> list:
    """Index labels of ``n`` rows spread evenly over ``column`` (both extremes included)."""
    import numpy as np

    if len(frame) <= n:
        return list(frame.index)
    order = frame.sort_values(column, kind="stable")
    idx = np.unique(np.round(np.linspace(0, len(order) - 1, n)).astype(int))
    return list(order.index[idx])


def _progress(i: int, n: int, config: Any) -> None:
    info(
        f"  [{i + 1}/{n}] {config.family}-{config.depth} w{config.width:g} "
        f"r{config.resolution} b{config.batch_size}"
    )


# -- screen ----------------------------------------------------------------------------------
@click.command("screen")
@click.argument("space")
@source_target_options(
    required=True,
    source_help="Source-platform model (ranks every candidate): a model directory or a "
    "shipped platform name.",
    target_help="Target-platform model (re-scores the shortlist): a model directory or a "
    "shipped platform name.",
)
@renamed_option("--source-model", "--source")
@renamed_option("--target-model", "--target")
@uncalibrated_option()
@click.option(
    "--rank-by",
    "rank_by",
    required=True,
    help="Target to rank candidates by with the source model (smallest first).",
)
@click.option("--top-k", "top_k", type=int, default=100, show_default=True, help="Shortlist size.")
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    metavar="TARGET=LIMIT",
    help="Deployment budget, repeatable: latency_ms=50, peak_mem_mb=200, energy_j=75.",
)
@click.option(
    "--confidence",
    type=float,
    default=None,
    help="Accept only if the upper bound at alpha = 1 - C is within budget (e.g. 0.99).",
)
@click.option(
    "--objectives",
    default=None,
    help="Comma-separated Pareto objectives (default: every target of the target model).",
)
@output_option("Write the shortlist (.csv/.parquet) with within_budget and pareto columns.")
@click.option(
    "--pareto-out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write only the Pareto configs here (input for `carb-nas validate`).",
)
@click.option(
    "--stage1",
    type=click.Choice(["auto", "exact", "distilled"]),
    default="auto",
    show_default=True,
    help="Stage 1 ranking: exact scores every candidate with the source model; distilled "
    "scores a sample, fits a surrogate and re-scores all it cannot rule out; auto is exact "
    "below 200,000 candidates.",
)
@seed_option("Seed of the distilled stage 1's sample (an integer >= 0).")
@json_option("Print counts and the Pareto set as JSON.")
@example(
    "carb-nas screen cpu --source cpu/torch/fp32 --target cpu/onnxruntime/fp32 "
    "--rank-by latency_ms --top-k 100 --budget latency_ms=20"
)
def screen_command(
    space: str,
    source: str,
    target: str,
    uncalibrated: bool,
    rank_by: str,
    top_k: int,
    budgets: tuple[str, ...],
    confidence: float | None,
    objectives: str | None,
    output: str | None,
    pareto_out: str | None,
    stage1: str,
    seed: int,
    as_json: bool,
) -> None:
    """Two-stage screening of SPACE (a space TOML, a bundled space name or a configs table).

    Stage 1 ranks every candidate by the source model's RANK_BY and keeps the top K; stage 2
    re-scores the shortlist with the target model, keeps the configs within every budget and
    extracts their Pareto set.
    """
    from carb_nas.budgets import check_confidence, parse_budgets
    from carb_nas.datasets import write_table
    from carb_nas.screen import check_rank, screen
    from carb_nas.space import CONFIG_COLUMNS

    parsed = parse_budgets(budgets)  # validate before loading anything heavy
    confidence = check_confidence(confidence)
    check_rank(rank_by, top_k)
    _check_table_path(output, "-o/--output")
    _check_table_path(pareto_out, "--pareto-out")
    from carb_nas.predictors import check_predictor

    check_predictor(source, "--source")  # both before training either default model
    check_predictor(target, "--target")
    src = load(source, "--source", uncalibrated, say=False)
    tgt = load(target, "--target", uncalibrated, say=False)
    objs = [o.strip() for o in objectives.split(",") if o.strip()] if objectives else None
    result = screen(
        space,
        src,
        tgt,
        rank_by=rank_by,
        top_k=top_k,
        budgets=parsed,
        confidence=confidence,
        objectives=objs,
        stage1=stage1,
        seed=seed,
    )
    # said once screening has accepted both (a refused input stays one line)
    say_provenance(src, "--source")
    say_provenance(tgt, "--target")
    shortlist = result.shortlist.copy()
    cols = list(CONFIG_COLUMNS)
    keys = set(result.pareto[cols].itertuples(index=False))
    shortlist["pareto"] = [tuple(r) in keys for r in shortlist[cols].itertuples(index=False)]
    if output:
        write_table(shortlist, output)
        info(f"wrote the shortlist ({len(shortlist)} configs) to {output}")
    if pareto_out:
        write_table(result.pareto, pareto_out)
        info(f"wrote the Pareto set ({len(result.pareto)} configs) to {pareto_out}")
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(result.summary())
        if not result.feasible:
            click.echo(result.least_violating.head(5).to_string(index=False))


# -- search ----------------------------------------------------------------------------------
@click.command("search")
@click.argument("space", required=False)
@source_target_options(
    source_help="Search model: a model directory or a shipped platform name (default "
    f"{DEFAULT_MODEL}).",
    target_help="Target-platform model that re-scores the final Pareto set (default with no "
    f"--source: {DEFAULT_RESCORE} when it predicts every family of SPACE).",
)
@renamed_option("--model", "--source")
@renamed_option("--rescore", "--target")
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    metavar="TARGET=LIMIT",
    help=f"Budget, repeatable (default with no --source: {' '.join(DEFAULT_BUDGETS)}).",
)
@click.option(
    "--objectives",
    default=None,
    help="Comma-separated objectives: targets, <target>_per_image, quality (default: every "
    "target of the model + quality, latency per image when the space varies batch size).",
)
@click.option(
    "--quality",
    "quality",
    default=None,
    metavar="MODULE:FUNCTION",
    help="Quality to maximize (default: built-in capacity proxy, NOT accuracy).",
)
@click.option(
    "--backend", type=click.Choice(["pymoo", "optuna"]), default="pymoo", show_default=True
)
@click.option(
    "--sampler",
    type=click.Choice(["nsga2", "tpe"]),
    default="nsga2",
    show_default=True,
    help="Optuna sampler (optuna backend).",
)
@click.option(
    "--trials", type=int, default=None, help="Evaluations (default: 3000 pymoo, 1500 optuna)."
)
@click.option(
    "--pop-size",
    type=int,
    default=64,
    show_default=True,
    help="Population size (>= 1; >= 2 for Optuna's NSGA-II).",
)
@storage_option(
    "Optuna storage URL (journal:PATH, sqlite:///x.db, postgresql://...); optuna backend "
    "only; default $CARB_NAS_STORAGE there, else in memory."
)
@click.option("--study-name", default=None, help="Optuna study name (with --storage).")
@click.option(
    "--confidence", type=float, default=None, help="Budgets on the upper bound at alpha = 1 - C."
)
@click.option(
    "--validate/--no-validate",
    "do_validate",
    default=None,
    help="Profile the final Pareto set on this machine (default: on with the "
    "default models, off otherwise).",
)
@max_configs_option(
    "Profile at most this many Pareto configs (spread over the front).",
    default=DEFAULT_VALIDATE_MAX,
)
@renamed_option("--validate-max", "--max-configs")
@click.option(
    "--calibrate/--no-calibrate",
    "do_calibrate",
    default=True,
    envvar=CALIBRATE_ENV,
    show_default=True,
    help="With no --source: calibrate the default models to this machine first when it has "
    f"no calibration yet (once; ${CALIBRATE_ENV}=0 also skips). An existing calibration is "
    "applied either way (--uncalibrated: not).",
)
@uncalibrated_option()
@click.option(
    "--time-budget-s",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds the first calibration may measure (all default models together).",
)
@report_option("Write validation plots and tables here (checked writable before searching).")
@output_option("Write the Pareto set (.csv/.parquet).")
@seed_option()
@json_option('Print {"pareto": [...], "validated": [...], ...} as JSON.')
@example(
    "carb-nas search cpu --budget latency_ms=20 --budget peak_mem_mb=100 --trials 200 "
    "--no-validate --no-calibrate --json"
)
def search_command(
    space: str | None,
    source: str | None,
    target: str | None,
    budgets: tuple[str, ...],
    objectives: str | None,
    quality: str | None,
    backend: str,
    sampler: str,
    trials: int | None,
    pop_size: int,
    storage: str | None,
    study_name: str | None,
    confidence: float | None,
    do_validate: bool | None,
    max_configs: int,
    do_calibrate: bool,
    uncalibrated: bool,
    time_budget_s: float,
    report_dir: str | None,
    output: str | None,
    seed: int,
    as_json: bool,
) -> None:
    """Budget-constrained multi-objective search of SPACE with a cost model as surrogate.

    With no arguments: the default CPU models calibrated to this machine (calibrating first,
    about a minute, when it has no calibration yet; --no-calibrate skips), the `cpu` space,
    the default budget, and the final Pareto set profiled on this machine. A platform name
    predicts configs of the families its data holds with its CARB cascade and any other
    family with its kernel-level module model (`carb_nas.load_predictor`); the same call in
    Python is `carb_nas.search.search(SPACE, "cpu/torch/fp32", ...)`.
    """
    from click.core import ParameterSource

    from carb_nas._io import check_writable_dir
    from carb_nas.budgets import check_budgets, check_confidence, parse_budgets
    from carb_nas.datasets import write_table
    from carb_nas.predictors import check_predictor
    from carb_nas.search import check_objectives, check_search_args, load_quality, search
    from carb_nas.space import load_space
    from carb_nas.storage import open_storage

    ctx = click.get_current_context()
    if backend != "optuna" and ctx.get_parameter_source("storage") == ParameterSource.ENVIRONMENT:
        storage = None  # $CARB_NAS_STORAGE is the optuna backend's default, not an error
    embedded = source is None
    parsed = parse_budgets(budgets if budgets or not embedded else DEFAULT_BUDGETS)
    confidence = check_confidence(confidence)
    n_trials = trials if trials is not None else (3000 if backend == "pymoo" else 1500)
    check_search_args(backend, n_trials, pop_size, sampler, storage)
    _check_table_path(output, "-o/--output")
    calibrating = embedded and do_calibrate and not uncalibrated
    if calibrating:
        from carb_nas.calibrate import check_time_budget_s

        check_time_budget_s(time_budget_s, fix=", or --no-calibrate")
    if report_dir is not None:
        check_writable_dir(report_dir)
    load_quality(quality)  # import errors before any work
    if storage is not None:
        open_storage(storage)  # a storage that does not open fails before the search
    space_obj = load_space(space or DEFAULT_SPACE)
    source = source or DEFAULT_MODEL
    check_predictor(source, "--source")  # both before training either default model
    if target is not None:
        check_predictor(target, "--target")
    if calibrating:
        platforms = [DEFAULT_MODEL] if target is not None else [DEFAULT_MODEL, DEFAULT_RESCORE]
        _calibrate_first(platforms, time_budget_s)
    model = load(source, "--source", uncalibrated, say=False)
    _check_space_model(space_obj, model, "search model")
    families = [str(f) for f in space_obj.values("family")]
    rescore = None
    if target is not None:
        rescore = load(target, "--target", uncalibrated, say=False)
    elif embedded:
        default = load(DEFAULT_RESCORE, "--target", uncalibrated, say=False)
        if _covers(default, families):
            rescore = default
        else:
            info(f"not re-scored: {DEFAULT_RESCORE} predicts no {', '.join(families)}")
    check_budgets(parsed, model, role="search model")
    objs = check_objectives(
        [o.strip() for o in objectives.split(",") if o.strip()] if objectives else None,
        model,
        space_obj,
    )
    if do_validate is None:
        do_validate = embedded
    say_provenance(model, "--source")
    if rescore is not None:
        say_provenance(rescore, "--target")
    if embedded:
        info(f"embedded default: budgets {' '.join(f'{k}={v:g}' for k, v in parsed.items())}")
    n_make = min(n_trials, len(space_obj))
    info(
        f"searching {space_obj.name!r} ({len(space_obj):,} configs) with {backend} for "
        f"{', '.join(objs)}: "
        + (
            f"{n_make:,} distinct configs to evaluate ..."
            if backend == "pymoo"
            else f"{n_trials:,} trials (a repeated config is predicted once) ..."
        )
    )
    result = search(
        space_obj,
        model,
        budgets=parsed,
        objectives=objs,
        quality=quality,
        backend=backend,
        trials=n_trials,
        pop_size=pop_size,
        sampler=sampler,
        seed=seed,
        confidence=confidence,
        rescore=rescore,
        storage=storage,
        study_name=study_name,
    )
    if output:
        write_table(result.pareto, output)
        info(f"wrote the Pareto set ({len(result.pareto)} configs) to {output}")
    validation = None
    if do_validate and result.feasible:
        validation = _validate_front(result, model, rescore, parsed, max_configs, report_dir)
    if as_json:
        out = result.to_dict()
        out["validated"] = validation.validated_items() if validation else []
        if validation:
            out["validation"] = {k: v for k, v in validation.to_dict().items() if k != "validated"}
        echo_json(out)
        return
    click.echo(result.summary())
    if validation is not None:
        click.echo("")
        click.echo(validation.summary())
    elif do_validate and not result.feasible:
        click.echo("nothing to validate: no feasible config was found")


def _covers(predictor: Any, families: list[str]) -> bool:
    """Whether ``predictor`` predicts every one of ``families`` from data of it (its cascade
    knows them or it has a kernel-level module model for any network)."""
    if getattr(predictor, "module_model", None) is not None:
        return True
    known = predictor.config_families()
    return known is None or set(families) <= set(known)


def _calibrate_first(platforms: list[str], time_budget_s: float) -> None:
    """The default models' calibrations made now where this machine has none (the embedded
    default's policy: :func:`carb_nas.calibrate.ensure_calibrated`), saying so on stderr."""
    from carb_nas.calibrate import ensure_calibrated
    from carb_nas.cli._calibrate import progress_bar
    from carb_nas.predictors.calibrations import has_calibration

    missing = [p for p in platforms if not has_calibration(p)]
    if missing:
        info(
            f"this machine has no calibration of {', '.join(missing)} yet: calibrating first, "
            f"about {time_budget_s:.0f} s (once; cached; --no-calibrate skips)"
        )
    for p, cal in ensure_calibrated(platforms, time_budget_s, progress_for=progress_bar).items():
        if p in missing:
            info(cal.summary().splitlines()[0])


def _validate_front(
    result: Any, model: Any, rescore: Any, budgets: Any, validate_max: int, report_dir: Any
) -> Any:
    """Profile up to ``validate_max`` Pareto configs, compared with the predictions the search
    made for them (``result.scored``: nothing is featurized or predicted again)."""
    from carb_nas.validate import validate

    vmodel = rescore if result.rescored else model
    device, runtime, precision = platform_parts(vmodel)
    shortlist = result.pareto
    if result.rescored:
        ok = shortlist[shortlist["target_within_budget"]]
        shortlist = ok if len(ok) else shortlist
    column = result.objectives[0] if result.objectives[0] in shortlist else "latency_ms"
    labels = _spread_labels(shortlist, column, validate_max)
    info(
        f"profiling {len(labels)} of {len(result.pareto)} Pareto configs on this machine "
        f"({device}/{runtime}/{precision}) ..."
    )
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        return validate(
            shortlist.loc[labels],
            device=device,
            runtime=runtime,
            precision=precision,
            model=vmodel,
            budgets=budgets,
            confidence=result.confidence,
            report_dir=report_dir,
            progress=_progress,
            scored=result.scored.take(labels),
        )


def _scenario_moved(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value:
        raise click.UsageError(
            "LoadGen validation is now `carb-nas loadgen PARETO --scenario "
            f"{value} --model MODEL --budget ... -o DIR`.",
            ctx=ctx,
        )


# -- validate --------------------------------------------------------------------------------
@click.command("validate")
@click.argument("pareto")
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="cpu or cuda[:N]; without it, a --model naming a shipped platform (cuda/torch/fp16) "
    "sets it.",
)
@runtime_option(
    "Runtime to measure on; without --runtime/--precision, a --model naming a shipped "
    "platform (cpu/openvino/int8) sets both."
)
@precision_option()
@model_option(
    dest="model_spec",
    required=True,
    help="The cost model whose predictions are validated (directory or platform; "
    "cpu/torch/fp32 scores families other than ResNet's with its module model).",
)
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    metavar="TARGET=LIMIT",
    help="Budget, repeatable; decisions are scored against the measurements.",
)
@click.option(
    "--confidence", type=float, default=None, help="Decide on the upper bound at alpha = 1 - C."
)
@threads_option("CPU threads for the profiler (default: the model's recorded thread count).")
@click.option(
    "--protocol", type=click.Choice(["adaptive", "carb"]), default="adaptive", show_default=True
)
@max_configs_option("Profile at most this many configs (spread over the batch size).")
@renamed_option("--limit", "--max-configs")
@report_option("Write validation.json/.csv and PNG plots here (checked before measuring).")
@click.option(
    "--append",
    "append",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append the new measurement rows to this dataset (.csv/.parquet); checked before "
    "measuring; a config measured again replaces its old row.",
)
@click.option(
    "--fresh-process",
    is_flag=True,
    help="CPU: measure each config in a new forked process (as fresh as the processes that "
    "measured the shipped data; see mmap_mb).",
)
@click.option(
    "--passes",
    type=int,
    default=1,
    show_default=True,
    help="Measure the shortlist this many times in interleaved rounds and keep each config's "
    "fastest row (shared machines: contention only adds time; 3 is a good choice there).",
)
@click.option(
    "--recalibrate",
    is_flag=True,
    help="Fold the measured rows into this machine's calibration of the --model platform "
    "(a shipped platform name that matches --device/--runtime/--precision).",
)
@uncalibrated_option()
@renamed_option("--calibrated", "the default (--uncalibrated opts out)", is_flag=True)
@quantization_data_option()
@renamed_option("--calibration", "--quantization-data")
@click.option(
    "--scenario",
    hidden=True,
    expose_value=False,
    callback=_scenario_moved,
    help="Moved: `carb-nas loadgen CONFIGS --scenario ... --model ...`.",
)
@json_option()
@example(
    "carb-nas validate pareto.csv --model cpu/torch/fp32 --budget latency_ms=20 "
    "--max-configs 2 --json"
)
def validate_command(
    pareto: str,
    device: str,
    runtime: str,
    precision: str,
    model_spec: str,
    budgets: tuple[str, ...],
    confidence: float | None,
    threads: int | None,
    protocol: str,
    max_configs: int | None,
    report_dir: str | None,
    append: str | None,
    fresh_process: bool,
    passes: int,
    recalibrate: bool,
    uncalibrated: bool,
    quantization_data: str | None,
    as_json: bool,
) -> None:
    """Profile the configs of PARETO (.csv/.parquet) and score the model's predictions.

    Reports MAE, MAPE and the median measured/predicted ratio per target, and warns when that
    ratio lies outside what the prediction intervals allow; --recalibrate then folds the
    measured rows into this machine's calibration (see `carb-nas calibrate`). Any runtime and
    precision the profiler supports. A platform name's predictions are this machine's
    calibrated ones when it has a calibration (--uncalibrated: the shipped model's). Under an
    MLPerf LoadGen scenario: `carb-nas loadgen PARETO --scenario ... --model ...`.
    """
    from carb_nas._io import check_writable_dir
    from carb_nas.budgets import check_budgets, check_confidence, parse_budgets
    from carb_nas.datasets import check_appendable
    from carb_nas.measure import check_platform, check_runtime, platform_string
    from carb_nas.measure.passes import check_passes
    from carb_nas.predictors import check_predictor, is_platform_name
    from carb_nas.predictors.calibrations import check_runnable
    from carb_nas.scoring import candidate_frame
    from carb_nas.validate import check_calibration, validate

    parsed = parse_budgets(budgets)
    confidence = check_confidence(confidence)
    _check_profiler_budgets(parsed)
    device, runtime, precision = _platform_of_model(model_spec, device, runtime, precision)
    check_platform(device, runtime, precision)
    check_passes(passes)
    check_runtime(device, runtime, precision)  # its extra installed, before the model loads
    if append is not None:
        check_appendable(append, platform_string(device, runtime, precision))
    measuring = platform_string(device, runtime, precision)
    check_predictor(model_spec, "--model")
    if recalibrate:
        # a default model of the platform measured, or of one of its qualified datasets
        # (cpu/torch/fp32/zoo@amd-zen5)
        if not (is_platform_name(model_spec) and model_spec.startswith(measuring)):
            raise ConfigError(
                f"--recalibrate folds rows into the calibration of a default model: expected "
                f"--model {measuring} or {measuring}/DATASET (the platform measured), got "
                f"{model_spec!r}. Pass --model {measuring} or drop --recalibrate."
            )
        check_runnable(model_spec)
    if report_dir is not None:
        check_writable_dir(report_dir)
    frame = candidate_frame(pareto)
    check_calibration(quantization_data, precision, frame)
    model = load(model_spec, "--model", uncalibrated, say=False)
    if recalibrate:
        known = model.config_families()
        beyond = sorted(set(map(str, frame["family"].unique())) - set(known or []))
        if known is not None and beyond:
            raise ConfigError(
                f"--recalibrate folds rows into the calibration of {model_spec}'s config model: "
                f"expected configs of its families ({', '.join(known)}), got "
                f"{', '.join(beyond)}, which its module model scores. Drop --recalibrate "
                f"(`carb-nas calibrate {model_spec}` sets this machine's factor)."
            )
    check_budgets(parsed, model)
    say_provenance(model, "--model")
    if max_configs is not None:
        frame = frame.loc[_spread_labels(frame, "batch_size", max_configs)]

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        result = validate(
            frame,
            device=device,
            runtime=runtime,
            precision=precision,
            model=model,
            budgets=parsed,
            append=append,
            confidence=confidence,
            threads=threads,
            protocol=protocol,
            report_dir=report_dir,
            progress=None if as_json else _progress,
            fresh_process=fresh_process,
            quantization_data=quantization_data,
            passes=passes,
        )
    if result.appended_to:
        info(f"appended {len(result.measurements)} rows to {result.appended_to}")
    if result.replaced_keys:
        info(
            f"replaced {len(result.replaced_keys)} earlier row(s) of the same configs (keys "
            f"{', '.join(result.replaced_keys)})"
        )
    if result.report_files:
        info(f"wrote {len(result.report_files)} report files to {report_dir}")
    recalibration = None
    if recalibrate:
        from carb_nas.calibrate import recalibrate as fold

        config_model = model.config_model
        source = getattr(config_model, "source_model", config_model)  # a calibration's default
        recalibration = fold(model_spec, result.measurements, source_model=source)
        info(recalibration.summary())
    if as_json:
        out = result.to_dict()
        out["model"] = model.provenance.as_dict()
        if recalibration is not None:
            out["recalibration"] = recalibration.to_dict()
        echo_json(out)
        return
    click.echo(result.summary())


def _check_profiler_budgets(budgets: Any) -> None:
    """A budget only a LoadGen scenario measures, refused with the command that does."""
    from carb_nas.budgets import SCENARIO_BUDGETS
    from carb_nas.errors import BudgetError

    own = {m: sc for sc, m in SCENARIO_BUDGETS.items()}
    for name in budgets:
        if name in own:
            raise BudgetError(
                f"budget {name} is measured under a LoadGen scenario: expected latency_ms / "
                f"peak_mem_mb / energy_j for the profiler, got {name}. Measure it with "
                f"`carb-nas loadgen PARETO --scenario {own[name]} --model MODEL --budget "
                f"{name}=...`."
            )


def _platform_of_model(
    model_spec: str | None, device: str, runtime: str, precision: str
) -> tuple[str, str, str]:
    """--device/--runtime/--precision, or, when they were not given and --model names a
    shipped platform of another device, runtime or precision (cpu/openvino/int8,
    cuda/torch/fp16), that platform's: measuring torch fp32 against an OpenVINO INT8 model's
    predictions compared two platforms, and a GPU model's on the CPU would too."""
    from click.core import ParameterSource

    ctx = click.get_current_context()

    def given(*names: str) -> bool:
        return any(ctx.get_parameter_source(p) not in (ParameterSource.DEFAULT, None)
                   for p in names)  # fmt: skip

    from carb_nas.predictors import is_platform_name
    from carb_nas.predictors.calibrations import split_platform

    if model_spec is None or not is_platform_name(model_spec):
        return device, runtime, precision  # a model directory says nothing of where it ran
    parts = split_platform(model_spec)
    if parts[0] != device.split(":")[0]:
        if given("device"):
            return device, runtime, precision  # the platform check says what is compared
        device = parts[0]
    if given("runtime", "precision"):
        return device, runtime, precision
    if tuple(parts[:3]) != (device.split(":")[0], runtime, precision):
        info(f"measuring on {'/'.join(parts[:3])}, the --model's platform (--device/--runtime/"
             "--precision to measure another)")  # fmt: skip
    return device, parts[1], parts[2]


COMMANDS = [screen_command, search_command, validate_command]
