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
    model_option,
    output_option,
    precision_option,
    report_option,
    runtime_option,
    seed_option,
    storage_option,
    threads_option,
)
from carb_nas.errors import ConfigError, MissingFileError, ModelError

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


def load_model(spec: str, role: str = "--model") -> Any:
    """A CostModel from a saved model directory or a shipped platform name (cpu/torch/fp32)."""
    from carb_nas.scoring import resolve_model

    return resolve_model(spec, role)


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


def _origin(model: Any) -> str:
    """Where a default model came from, as load_default_model recorded it."""
    return getattr(model, "default_origin_", None) or "a saved model"


def _shipped(platform: str) -> Any | None:
    """The shipped model of a platform, or None when it is not shipped."""
    from carb_nas.costmodel import load_default_model

    try:
        return load_default_model(platform)
    except (MissingFileError, ModelError, FileNotFoundError):
        return None


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


def _space_families(space: str) -> list[str]:
    """The families of SPACE (a space file, a bundled space name or a configs table)."""
    from carb_nas.scoring import candidate_frame
    from carb_nas.space import load_space

    if Path(space).suffix in TABLE_SUFFIXES:
        return sorted(set(candidate_frame(space)["family"].astype(str)))
    return [str(f) for f in load_space(space).values("family")]


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
@click.option(
    "--source-model",
    "--source",
    "source",
    required=True,
    help="Source-platform model (ranks every candidate): a model directory or a shipped "
    "platform name.",
)
@click.option(
    "--target-model",
    "--target",
    "target",
    required=True,
    help="Target-platform model (re-scores the shortlist): a model directory or a shipped "
    "platform name.",
)
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
    "carb-nas screen cpu --source-model cpu/torch/fp32 --target-model cpu/onnxruntime/fp32 "
    "--rank-by latency_ms --top-k 100 --budget latency_ms=20"
)
def screen_command(
    space: str,
    source: str,
    target: str,
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
    from carb_nas.costmodel import check_model

    check_model(source, "--source-model")  # both before training either default model
    check_model(target, "--target-model")
    from carb_nas.cli._calibrate import config_model

    families = _space_families(space)  # a platform name's module model for non-ResNet ones
    src = config_model(source, families, "--source-model")
    tgt = config_model(target, families, "--target-model")
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
@model_option(
    dest="model_spec",
    help=f"Search model: a model directory or a shipped platform (default {DEFAULT_MODEL}).",
)
@click.option(
    "--rescore",
    "rescore_spec",
    default=None,
    help="Target-platform model to re-score the final Pareto set with (default with "
    f"no --model: {DEFAULT_RESCORE} if shipped).",
)
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    metavar="TARGET=LIMIT",
    help=f"Budget, repeatable (default with no --model: {' '.join(DEFAULT_BUDGETS)}).",
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
@click.option(
    "--validate-max",
    type=int,
    default=DEFAULT_VALIDATE_MAX,
    show_default=True,
    help="Profile at most this many Pareto configs (spread over the front).",
)
@click.option(
    "--calibrate/--no-calibrate",
    "do_calibrate",
    default=True,
    envvar=CALIBRATE_ENV,
    show_default=True,
    help="With no --model: calibrate the default models to this machine first when it has no "
    f"calibration yet (once; ${CALIBRATE_ENV}=0 also skips).",
)
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
@example("carb-nas search cpu --budget latency_ms=20 --budget peak_mem_mb=100 --json")
def search_command(
    space: str | None,
    model_spec: str | None,
    rescore_spec: str | None,
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
    validate_max: int,
    do_calibrate: bool,
    time_budget_s: float,
    report_dir: str | None,
    output: str | None,
    seed: int,
    as_json: bool,
) -> None:
    """Budget-constrained multi-objective search of SPACE with a cost model as surrogate.

    With no arguments: the default CPU models calibrated to this machine (calibrating first,
    about a minute, when it has no calibration yet; --no-calibrate skips), the `cpu` space,
    the default budget, and the final Pareto set profiled on this machine. Without --model,
    a SPACE of families the default ResNet model never saw (zoo, mobilenet_v2) is searched
    with the kernel-level module model, scaled by this machine's calibration, not re-scored.
    """
    from click.core import ParameterSource

    from carb_nas._io import check_writable_dir
    from carb_nas.budgets import check_budgets, check_confidence, parse_budgets
    from carb_nas.costmodel import families_for_module_model
    from carb_nas.datasets import write_table
    from carb_nas.search import check_objectives, check_search_args, load_quality, search
    from carb_nas.space import load_space
    from carb_nas.storage import open_storage

    source = click.get_current_context().get_parameter_source("storage")
    if backend != "optuna" and source == ParameterSource.ENVIRONMENT:
        storage = None  # $CARB_NAS_STORAGE is the optuna backend's default, not an error
    embedded = model_spec is None
    parsed = parse_budgets(budgets if budgets or not embedded else DEFAULT_BUDGETS)
    confidence = check_confidence(confidence)
    n_trials = trials if trials is not None else (3000 if backend == "pymoo" else 1500)
    check_search_args(backend, n_trials, pop_size, sampler, storage)
    _check_table_path(output, "-o/--output")
    if validate_max < 1:
        raise ConfigError(
            f"invalid --validate-max: expected a whole number >= 1, got {validate_max}. "
            "Use e.g. --validate-max 6."
        )
    calibrating = embedded and do_calibrate
    if calibrating:
        from carb_nas.calibrate import check_time_budget_s

        check_time_budget_s(time_budget_s, fix=", or --no-calibrate")
    if report_dir is not None:
        check_writable_dir(report_dir)
    load_quality(quality)  # import errors before any work
    if storage is not None:
        open_storage(storage)  # a storage that does not open fails before the search
    space_obj = load_space(space or DEFAULT_SPACE)
    if rescore_spec is not None:  # both before training either default model
        from carb_nas.costmodel import check_model

        check_model(model_spec or DEFAULT_MODEL, "--model")
        check_model(rescore_spec, "--rescore")
    # a platform name's module model scores families its ResNet config model never saw
    families = families_for_module_model(model_spec or DEFAULT_MODEL, space_obj.values("family"))
    calibrated = calibrating
    if families:  # no ONNX Runtime model knows them: re-scored only with the user's --rescore
        model = source_model = _module_default(model_spec, families, calibrating, time_budget_s)
        rescore = source_rescore = (
            load_model(rescore_spec, "--rescore") if rescore_spec is not None else None
        )
    else:
        model = load_model(model_spec or DEFAULT_MODEL)
        if rescore_spec is not None:
            rescore = load_model(rescore_spec, "--rescore")
        elif embedded:
            rescore = _shipped(DEFAULT_RESCORE)
        else:
            rescore = None
        _check_space_model(space_obj, model, "search model")  # before a minute of calibration
        source_model, source_rescore = model, rescore
        if calibrating:
            model, rescore = _calibrated_defaults(model, rescore, time_budget_s)
    check_budgets(parsed, model, role="search model")
    objs = check_objectives(
        [o.strip() for o in objectives.split(",") if o.strip()] if objectives else None,
        model,
        space_obj,
    )
    if do_validate is None:
        do_validate = embedded
    if families:
        factors = ", ".join(f"{t} x{f:.2f}" for t, f in model.factors.items())
        info(
            ("embedded default" if embedded else f"--model {model_spec}")
            + f" for families the {model_spec or DEFAULT_MODEL} ResNet config model never saw "
            f"({', '.join(families)}): the kernel-level {model_spec or DEFAULT_MODEL} module "
            f"model ({_origin(model)}), "
            + (f"calibrated to this machine ({factors})" if calibrated else "not calibrated")
            + (
                f"; re-scored with {rescore_spec}"
                if rescore is not None
                else f"; not re-scored ({DEFAULT_RESCORE} is a ResNet model)"
            )
            + "; budgets "
            + " ".join(f"{k}={v:g}" for k, v in parsed.items())
        )
    elif embedded:
        origin = _origin(source_model)
        line = f"embedded default: the {DEFAULT_MODEL} model ({origin})"
        if rescore is not None:
            line += f", re-scored with the {DEFAULT_RESCORE} model ({_origin(source_rescore)})"
        if calibrated:
            line += ", both" if rescore is not None else ""
            line += " calibrated to this machine"
        info(f"{line}; budgets {' '.join(f'{k}={v:g}' for k, v in parsed.items())}")
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
        validation = _validate_front(result, model, rescore, parsed, validate_max, report_dir)
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


def _calibrated_defaults(model: Any, rescore: Any, time_budget_s: float) -> tuple[Any, Any]:
    """The default models calibrated to this machine: cached ones loaded, missing ones
    calibrated now (within ``time_budget_s`` together), saying so and how long it takes."""
    from carb_nas.calibrate import load_calibration
    from carb_nas.cli._calibrate import run_calibration

    sources = {DEFAULT_MODEL: model}
    if rescore is not None:
        sources[DEFAULT_RESCORE] = rescore
    cals = {}
    for p, m in sources.items():
        try:
            cals[p] = load_calibration(p, source_model=m)
        except ModelError as e:  # stale (another default model) or damaged: never used
            warnings.warn(f"{e} Calibrating again.", stacklevel=2)
            cals[p] = None
    missing = [p for p, c in cals.items() if c is None]
    if missing:
        info(
            f"this machine has no calibration of {', '.join(missing)} yet: calibrating first, "
            f"about {time_budget_s:.0f} s (once; cached; --no-calibrate skips)"
        )
        for p in missing:
            fresh = run_calibration(p, time_budget_s / len(missing))
            info(fresh.summary().splitlines()[0])
            cals[p] = fresh
    else:
        info(
            "using this machine's calibration of "
            + ", ".join(f"{p} ({c.n_rows} rows, {c.created})" for p, c in cals.items() if c)
        )
    calibrated = {p: c.model for p, c in cals.items() if c is not None}
    return calibrated[DEFAULT_MODEL], calibrated.get(DEFAULT_RESCORE, rescore)


def _module_default(
    model_spec: str | None, families: list[str], calibrating: bool, time_budget_s: float
) -> Any:
    """The platform's kernel-level module model over configs (``model_spec``, default the
    default platform), for a space of ``families`` its ResNet config model never saw; with
    ``calibrating`` (the embedded default) scaled by this machine's factors from its
    calibration of the default platform (made first when missing)."""
    from carb_nas.costmodel import load_config_model

    model = load_config_model(model_spec or DEFAULT_MODEL, families, "--model")
    if calibrating:
        from carb_nas.calibrate import scaled_to_this_machine

        _calibrated_defaults(load_model(DEFAULT_MODEL), None, time_budget_s)  # or cached
        model = scaled_to_this_machine(model, DEFAULT_MODEL)
    return model


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
@click.option(
    "--max-configs",
    type=int,
    default=None,
    help="Profile at most this many configs (spread over the batch size).",
)
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
@click.option(
    "--calibrated",
    is_flag=True,
    help="Validate this machine's calibrated model of the --model platform (made by "
    "`carb-nas calibrate PLATFORM`) instead of the default model.",
)
@click.option(
    "--calibration",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="--precision int8 (static): a .npy of shape (N, 3, H, W) instead of the seeded set.",
)
@click.option(
    "--scenario",
    type=click.Choice(["single-stream", "multi-stream", "offline"]),
    default=None,
    help="Measure under this MLPerf LoadGen scenario (real mlperf_loadgen) instead of the "
    "profiler; its budget: single-stream latency_p90_ms, multi-stream latency_p99_ms, offline "
    "throughput_sps (a lower limit). LoadGen's runs and logs go to --report DIR/loadgen.",
)
@click.option(
    "--quick", is_flag=True, help="--scenario: shorter runs (>= 1 s, >= 64 queries), recorded."
)
@click.option("--min-duration-ms", type=int, default=None, help="--scenario: rules' minimum.")
@click.option("--min-query-count", type=int, default=None, help="--scenario: rules' minimum.")
@click.option("--max-duration-ms", type=int, default=None, help="--scenario: stop a run then.")
@click.option(
    "--samples-per-query", type=int, default=None, help="multi-stream samples per query (8)."
)
@click.option("--batch-size", type=int, default=None, help="offline: samples per batch (8).")
@click.option("--sample-count", type=int, default=None, help="--scenario: QSL samples (64).")
@json_option()
@example("carb-nas validate pareto.csv --model cpu/torch/fp32 --budget latency_ms=20 --json")
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
    calibrated: bool,
    calibration: str | None,
    scenario: str | None,
    quick: bool,
    min_duration_ms: int | None,
    min_query_count: int | None,
    max_duration_ms: int | None,
    samples_per_query: int | None,
    batch_size: int | None,
    sample_count: int | None,
    as_json: bool,
) -> None:
    """Profile the configs of PARETO (.csv/.parquet) and score the model's predictions.

    Reports MAE, MAPE and the median measured/predicted ratio per target, and warns when that
    ratio lies outside what the prediction intervals allow; --recalibrate then folds the
    measured rows into this machine's calibration (see `carb-nas calibrate`). Any runtime and
    precision the profiler supports. With --scenario, each architecture is measured under that
    LoadGen scenario instead: per config LoadGen's figure, the budget, pass, VALID/INVALID and
    the model's prediction of the same quantity.
    """
    from carb_nas._io import check_writable_dir
    from carb_nas.budgets import check_budgets, check_confidence, parse_budgets
    from carb_nas.costmodel import families_for_module_model
    from carb_nas.datasets import check_appendable
    from carb_nas.measure import check_platform, check_runtime, platform_string
    from carb_nas.scoring import candidate_frame
    from carb_nas.validate import check_calibration, validate

    parsed = parse_budgets(budgets)
    confidence = check_confidence(confidence)
    if max_configs is not None and max_configs < 1:
        raise ConfigError(
            f"invalid --max-configs: expected a whole number >= 1, got {max_configs}. "
            "Use e.g. --max-configs 6."
        )
    device, runtime, precision = _platform_of_model(model_spec, device, runtime, precision)
    check_platform(device, runtime, precision)
    from carb_nas.measure.passes import check_passes

    check_passes(passes)
    loadgen = _scenario_settings(
        scenario,
        parsed,
        quick=quick,
        min_duration_ms=min_duration_ms,
        min_query_count=min_query_count,
        max_duration_ms=max_duration_ms,
        samples_per_query=samples_per_query,
        batch_size=batch_size,
        performance_sample_count=sample_count,
        conflicts={
            "--append": append is not None,
            "--confidence": confidence is not None,
            "--fresh-process": fresh_process,
            "--passes": passes != 1,
            "--recalibrate": recalibrate,
            "--device " + device: device != "cpu",
        },
    )
    check_runtime(device, runtime, precision)  # its extra installed, before the model loads
    if loadgen is not None:
        from carb_nas.measure.loadgen import import_loadgen

        import_loadgen()
    if append is not None:
        check_appendable(append, platform_string(device, runtime, precision))
    measuring = platform_string(device, runtime, precision)
    # the default model calibrated: the platform measured, or one of its qualified datasets'
    # (cpu/torch/fp32/zoo-zen5)
    default_of_measured = model_spec == measuring or (
        isinstance(model_spec, str)
        and model_spec.count("/") == 3
        and model_spec.rsplit("/", 1)[0] == measuring
    )
    if recalibrate and not default_of_measured:
        raise ConfigError(
            f"--recalibrate folds rows into the calibration of a default model: expected --model "
            f"{measuring} or {measuring}/DATASET (the platform measured), got {model_spec!r}. "
            f"Pass --model {measuring} or drop --recalibrate."
        )
    if calibrated and not default_of_measured:
        raise ConfigError(
            f"--calibrated validates this machine's calibration of a default model: expected "
            f"--model {measuring} or {measuring}/DATASET (the platform measured), got "
            f"{model_spec!r}. Pass --model {measuring} or drop --calibrated."
        )
    if recalibrate or calibrated:
        from carb_nas.calibrate import check_runnable

        check_runnable(model_spec)
    if report_dir is not None:
        check_writable_dir(report_dir)
    frame = candidate_frame(pareto)
    check_calibration(calibration, precision, frame)
    families = families_for_module_model(model_spec, frame["family"].unique())
    if families and recalibrate:
        raise ConfigError(
            f"--recalibrate folds rows into the calibration of {model_spec}'s ResNet config "
            f"model: expected configs of its families (basic, bottleneck), got "
            f"{', '.join(families)}, which its module model scores. Drop --recalibrate "
            f"(`carb-nas calibrate {model_spec}` sets this machine's factor)."
        )
    from carb_nas.cli._calibrate import config_model

    model = config_model(model_spec, frame["family"].unique(), "--model", calibrated, "validating")
    if loadgen is None:
        check_budgets(parsed, model)
    if max_configs is not None:
        frame = frame.loc[_spread_labels(frame, "batch_size", max_configs)]

    result: Any
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        if loadgen is not None:
            from carb_nas.validate import validate_scenario

            if report_dir is None:
                info("note: LoadGen's logs are not kept without --report DIR")
            result = validate_scenario(
                frame,
                loadgen,
                runtime=runtime,
                precision=precision,
                model=model,
                budgets=parsed,
                threads=threads,
                calibration=calibration,
                report_dir=report_dir,
                progress=None if as_json else info,
            )
            if as_json:  # the text summary carries them on stdout
                for line in result.warnings:
                    info(f"warning: {line}")
        else:
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
                calibration=calibration,
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

        source = getattr(model, "source_model", model)  # a calibration's default model
        recalibration = fold(model_spec, result.measurements, source_model=source)
        info(recalibration.summary())
    if as_json:
        out = result.to_dict()
        if calibrated:
            out["calibrated"] = True
        if recalibration is not None:
            out["recalibration"] = recalibration.to_dict()
        echo_json(out)
        return
    click.echo(result.summary())


def _platform_of_model(
    model_spec: str | None, device: str, runtime: str, precision: str
) -> tuple[str, str, str]:
    """--device/--runtime/--precision, or, when they were not given and --model names a
    shipped platform of another device, runtime or precision (cpu/openvino/int8,
    cuda/torch/fp16), that platform's: measuring torch fp32 against an OpenVINO INT8 model's
    predictions compared two platforms (x30), and a GPU model's on the CPU would too."""
    from click.core import ParameterSource

    ctx = click.get_current_context()

    def given(*names: str) -> bool:
        return any(ctx.get_parameter_source(p) not in (ParameterSource.DEFAULT, None)
                   for p in names)  # fmt: skip

    if model_spec is None:
        return device, runtime, precision  # the missing --model is reported by its own check
    parts = str(model_spec).split("/")
    if Path(model_spec).exists() or len(parts) not in (3, 4):
        return device, runtime, precision
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


def _scenario_settings(
    scenario: str | None, budgets: Any, *, conflicts: dict[str, bool], **given: Any
) -> Any:
    """The LoadGen settings of ``validate --scenario`` (None without one), every scenario
    option and budget checked before any work: one line per mistake."""
    from carb_nas.budgets import SCENARIO_BUDGETS, check_scenario_budgets
    from carb_nas.errors import BudgetError

    quick = given.pop("quick")
    named = {k: v for k, v in given.items() if v is not None}
    if scenario is None:
        used = ["--quick"] * quick + [
            "--" + ("sample-count" if k == "performance_sample_count" else k).replace("_", "-")
            for k in named
        ]
        if used:
            raise ConfigError(
                f"LoadGen options without a scenario: expected --scenario single-stream, "
                f"multi-stream or offline with {', '.join(used)}, got no --scenario. Add "
                "--scenario or drop them."
            )
        own = {m: sc for sc, m in SCENARIO_BUDGETS.items()}
        for name in budgets:
            if name in own:
                raise BudgetError(
                    f"budget {name} is measured under a LoadGen scenario: expected it with "
                    f"--scenario {own[name]}, got no --scenario. Add --scenario {own[name]}, or "
                    "budget latency_ms / peak_mem_mb for the profiler."
                )
        return None
    bad = [k for k, v in conflicts.items() if v]
    if bad:
        raise ConfigError(
            f"{bad[0]} does not apply under a LoadGen scenario: expected --scenario runs on the "
            f"CPU without --append, --confidence, --fresh-process, --passes or --recalibrate, got "
            f"--scenario {scenario} with {bad[0]}. LoadGen rows stay in --report DIR/loadgen and "
            "are decided on measurements; drop it or drop --scenario."
        )
    check_scenario_budgets(budgets, scenario)
    from carb_nas.measure.loadgen import LoadGenSettings

    if "samples_per_query" in named and scenario != "multi-stream":
        raise ConfigError(
            f"--samples-per-query applies to multi-stream only: expected it with --scenario "
            f"multi-stream, got --scenario {scenario}. Drop it."
        )
    if "batch_size" in named and scenario != "offline":
        raise ConfigError(
            f"--batch-size applies to offline only: expected it with --scenario offline, got "
            f"--scenario {scenario} (which measures {SCENARIO_BUDGETS[scenario]}). Drop it."
        )
    return LoadGenSettings(scenario, "quick" if quick else "loadgen-default", **named)


COMMANDS = [screen_command, search_command, validate_command]
