"""``carb-nas loadgen``: MLPerf LoadGen scenarios on a runtime and precision, resumable; with
``--model``, the model's predictions validated against them (``validate.validate_scenario``)."""

from __future__ import annotations

import click

from carb_nas.cli._model import model_spec_options, resolve_model_spec
from carb_nas.cli._options import (
    echo_json,
    example,
    info,
    json_option,
    load,
    max_configs_option,
    model_option,
    precision_option,
    quantization_data_option,
    renamed_option,
    runtime_option,
    threads_option,
    uncalibrated_option,
)

__all__ = ["COMMANDS"]


def _parse_config(text: str):
    from carb_nas.errors import ConfigError
    from carb_nas.space import Config

    pairs = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if not sep:
            raise ConfigError(
                f"malformed --config: expected KEY=VALUE pairs separated by commas such as "
                f"family=mobilenet_v2,depth=17,width=1,resolution=160, got {text!r}. Fix it."
            )
        pairs[k.strip()] = v.strip()
    try:
        return Config(
            pairs.pop("family"),
            int(pairs.pop("depth")),
            float(pairs.pop("width", 1.0)),
            int(pairs.pop("resolution")),
            int(pairs.pop("batch_size", 1)),
            **pairs,
        )
    except KeyError as e:
        raise ConfigError(
            f"incomplete --config: expected family, depth and resolution (width, batch_size "
            f"optional), got {text!r} without {e}. Add it."
        ) from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"invalid --config {text!r}: {e}") from None


@click.command("loadgen")
@click.argument("configs", required=False, metavar="[CONFIGS.csv|SPACE.toml]")
@click.option(
    "--config",
    "config_texts",
    multiple=True,
    help="One config as KEY=VALUE,... (family, depth, width, resolution); repeatable.",
)
@model_spec_options
@runtime_option("torch | onnxruntime | openvino | litert (the CPU runtimes).")
@precision_option()
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    type=click.Choice(["single-stream", "multi-stream", "offline"]),
    required=True,
    help="MLPerf scenario; repeatable (a model is prepared once for all of them).",
)
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Run directory (created; the same command resumes it).",
)
@renamed_option("--out", "-o/--output")
@model_option(
    help="Validate this cost model's predictions (a directory or a shipped platform name) "
    "against LoadGen's figures: one --scenario; CONFIGS is then e.g. a Pareto set.",
)
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    metavar="TARGET=LIMIT",
    help="With --model: the scenario's own budget (single-stream latency_p90_ms, multi-stream "
    "latency_p99_ms, offline throughput_sps, a lower limit), decided on the measurements.",
)
@uncalibrated_option()
@click.option(
    "--quick", is_flag=True, help="Shorter runs (>= 1 s, >= 64 queries), recorded as rules=quick."
)
@click.option("--min-duration-ms", type=int, default=None, help="Override the rules' minimum.")
@click.option("--min-query-count", type=int, default=None, help="Override the rules' minimum.")
@click.option("--max-duration-ms", type=int, default=None, help="Stop a run after this long.")
@click.option(
    "--samples-per-query",
    type=int,
    default=8,
    show_default=True,
    help="multi-stream samples per query.",
)
@click.option(
    "--batch-size", type=int, default=8, show_default=True, help="offline: samples run per batch."
)
@click.option(
    "--sample-count",
    type=int,
    default=64,
    show_default=True,
    help="Samples in the query sample library (seeded inputs).",
)
@quantization_data_option()
@renamed_option("--calibration", "--quantization-data")
@max_configs_option("Only the first N configs.")
@renamed_option("--limit", "--max-configs")
@threads_option("Intra-op threads of the runtime (default: all this process may use).")
@json_option("Print the summary as JSON on stdout.")
@example(
    "carb-nas loadgen --config family=mobilenet_v2,depth=17,width=1,resolution=160 "
    "--runtime openvino --precision int8 --scenario single-stream --quick -o runs/lg"
)
def loadgen_cmd(
    configs: str | None,
    config_texts: tuple[str, ...],
    model_spec: str | None,
    factory_kwargs: str | None,
    input_shape: str | None,
    runtime: str,
    precision: str,
    scenarios: tuple[str, ...],
    out_dir: str,
    model: str | None,
    budgets: tuple[str, ...],
    uncalibrated: bool,
    quick: bool,
    min_duration_ms: int | None,
    min_query_count: int | None,
    max_duration_ms: int | None,
    samples_per_query: int,
    batch_size: int,
    sample_count: int,
    quantization_data: str | None,
    max_configs: int | None,
    threads: int | None,
    as_json: bool,
) -> None:
    """Run MLPerf LoadGen scenarios (the real mlperf_loadgen) on CONFIGS, --config and/or
    your own network (--model-spec pkg.mod:make_net --input-shape 1,3,224,224: its batch
    dimension is ignored, each scenario sets the batches).

    One system under test per (config, runtime, precision); LoadGen decides the queries and
    judges the run. Every run keeps LoadGen's summary and detail logs (-o/logs/) and one row
    (-o/results/); LoadGen's INVALID is reported, never dropped. Killed, the same command
    continues where it stopped. Everything is checked before anything is created.

    With --model, one --scenario validates the model: per config LoadGen's figure, the
    budget, pass, VALID/INVALID and the model's prediction of the same quantity.
    """
    from carb_nas._io import check_writable_dir
    from carb_nas.budgets import check_scenario_budgets, parse_budgets
    from carb_nas.datasets import read_configs
    from carb_nas.errors import ConfigError
    from carb_nas.measure import calibration_batches, check_platform, usable_cpus
    from carb_nas.measure.loadgen import (
        LoadGenSettings,
        Workload,
        import_loadgen,
        run_loadgen_campaign,
    )
    from carb_nas.space import frame_to_configs

    check_platform("cpu", runtime, precision)
    parsed = parse_budgets(budgets)
    if model is None and parsed:
        raise ConfigError(
            "--budget without --model: expected a cost model to validate against the budget, "
            "got none. Add --model PLATFORM or drop --budget."
        )
    if model is not None and len(scenarios) != 1:
        raise ConfigError(
            f"--model validates under one scenario: expected one --scenario, got "
            f"{len(scenarios)}. Run one command per scenario."
        )
    if model is not None:
        check_scenario_budgets(parsed, scenarios[0])
    rules = "quick" if quick else "loadgen-default"
    settings = [
        LoadGenSettings(
            s,
            rules,
            min_duration_ms,
            min_query_count,
            max_duration_ms,
            samples_per_query,
            batch_size,
            sample_count,
        )
        for s in scenarios
    ]
    if threads is not None and not 1 <= threads <= usable_cpus():
        raise ConfigError(
            f"invalid --threads: expected 1 to {usable_cpus()} (the CPUs this process may use), "
            f"got {threads}. More threads than cores measure oversubscription."
        )
    spec = resolve_model_spec(model_spec, factory_kwargs, input_shape, "fp32")
    if spec is not None:
        try:  # the factory imports and builds a module (cheaply, on the meta device)
            spec.build("meta")
        except ConfigError:  # some factories cannot build on meta: the real build decides
            spec.build("cpu")
    import_loadgen()
    found = list(frame_to_configs(read_configs(configs))) if configs else []
    found += [_parse_config(t) for t in config_texts]
    if not found and spec is None:
        raise ConfigError(
            "no configs: expected CONFIGS (a table or a space file), --config or --model-spec, "
            "got none. Give one, e.g. --config family=basic,depth=18,width=0.5,resolution=64."
        )
    found = found[:max_configs] if max_configs else found
    workloads, seen = [], set()
    for w in [Workload.from_config(c) for c in found] + (
        [Workload.from_spec(spec)] if spec is not None else []
    ):
        if w.key not in seen:  # batch size does not matter: the scenario sets the batches
            seen.add(w.key)
            workloads.append(w)
    if quantization_data is not None:
        for w in workloads:
            calibration_batches(quantization_data, w.input_shape)
    # creatable and writable, before anything is measured
    check_writable_dir(out_dir, "run directory", "-o/--output")
    if model is not None:
        _validate(found, spec, model, uncalibrated, settings[0], runtime, precision, parsed,
                  threads, quantization_data, out_dir, as_json)  # fmt: skip
        return
    summary = run_loadgen_campaign(
        workloads,
        out_dir,
        runtime,
        precision,
        settings,
        threads=threads,
        calibration=quantization_data,
        progress=info,
    )
    for line in summary.invalid:
        info(f"warning: LoadGen result is INVALID: {line}")
    for line in summary.errors:
        info(f"warning: not measured: {line}")
    if as_json:
        echo_json(summary.as_dict())
        return
    click.echo(
        f"cpu/{runtime}/{precision}: {summary.done}/{summary.total} runs done "
        f"({summary.measured_now} now; {len(summary.invalid)} INVALID, {len(summary.errors)} "
        f"failed), rules {rules}. Rows: {out_dir}/results, LoadGen logs: {out_dir}/logs"
    )


def _validate(
    configs, spec, model, uncalibrated, settings, runtime, precision, budgets, threads,
    quantization_data, out_dir, as_json,
) -> None:  # fmt: skip  # noqa: ANN001
    """``loadgen --model``: the configs measured under one scenario against the model."""
    import warnings

    from carb_nas.errors import ConfigError
    from carb_nas.space import configs_to_frame
    from carb_nas.validate import validate_scenario

    if spec is not None:
        raise ConfigError(
            "--model-spec with --model: expected configs to validate the model on (CONFIGS or "
            "--config), got a factory. Predict it with `carb-nas predict` instead."
        )
    predictor = load(model, "--model", uncalibrated)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        result = validate_scenario(
            configs_to_frame(configs),
            settings,
            runtime=runtime,
            precision=precision,
            model=predictor,
            budgets=budgets,
            threads=threads,
            quantization_data=quantization_data,
            report_dir=out_dir,
            progress=None if as_json else info,
        )
    if as_json:
        for line in result.warnings:  # the text summary carries them on stdout
            info(f"warning: {line}")
        echo_json(result.to_dict())
        return
    click.echo(result.summary())


COMMANDS: list = [loadgen_cmd]
