"""``carb-nas report characterize`` and ``carb-nas report transfer``: reports on measured
datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from carb_nas.cli._options import (
    echo_json,
    example,
    info,
    json_option,
    renamed_option,
    report_option,
    seed_option,
)
from carb_nas.errors import ConfigError

__all__ = ["COMMANDS"]


def _parse_sizes(text: str) -> list[int]:
    if text.strip().lower() in ("", "0", "none", "off"):
        return []
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"invalid --few-shot: expected comma-separated whole numbers such as 10,25,50,100 "
            f"(or 'none'), got {text!r}. Fix the list."
        ) from None
    if any(n < 1 for n in sizes):
        raise ConfigError(
            f"invalid --few-shot: expected sizes >= 1, got {sizes}. Use e.g. 10,25,50,100."
        )
    return sizes


@click.group("report")
def report_group() -> None:
    """Reports on measured datasets: characterize platforms, transfer between them."""


@report_group.command("characterize")
@click.argument("datasets", nargs=-1)
@report_option("Write README.md, characterization.json and PNG plots into this directory.")
@click.option(
    "--loadgen",
    "loadgen_dir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Instead of DATASETS: the quantization study's runtime x precision x scenario table "
    "from a `carb-nas loadgen` directory.",
)
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --loadgen: write NAME.md, NAME.png and NAME.json here.",
)
@click.option(
    "--reading",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="With --loadgen: a Markdown file appended as the reading.",
)
@json_option()
@example("carb-nas report characterize cpu/torch/fp32 cpu/onnxruntime/int8 --report out/char")
def characterize_command(
    datasets: tuple[str, ...],
    report_dir: str | None,
    loadgen_dir: str | None,
    markdown_path: str | None,
    reading: str | None,
    as_json: bool,
) -> None:
    """How cost scales with each knob in measured DATASETS.

    Each DATASET is a .csv/.parquet rows file or a shipped platform name (cpu/torch/fp32; see
    `carb-nas dataset list`). Only rows with status ok count. Give several datasets (e.g.
    cpu/torch/fp32 and cpu/onnxruntime/int8) to get precision/runtime ratios on the configs
    they share. Without --report or --json the Markdown summary is printed. With --loadgen
    DIR: latency, throughput, speedups and agreement per runtime x precision x MLPerf scenario.
    """
    from carb_nas import reports

    if loadgen_dir is not None:
        if datasets or report_dir:
            raise ConfigError(
                "--loadgen reads a LoadGen directory: expected no DATASETS and no --report, "
                f"got {list(datasets)} / {report_dir!r}. Use --markdown for its output."
            )
        if markdown_path:
            result = reports.write_loadgen_characterization(loadgen_dir, markdown_path, reading)
        else:
            result = reports.characterize_loadgen(loadgen_dir)
        if as_json:
            echo_json(result)
        elif markdown_path:
            info(f"wrote {', '.join(result['files'])} next to {markdown_path}")
        else:
            text = Path(reading).read_text() if reading else None
            click.echo(reports.loadgen_markdown(result, text))
        return
    if not datasets:
        raise ConfigError(
            "missing DATASETS: expected at least one rows file or platform name (or --loadgen "
            "DIR), got none. Give e.g. cpu/torch/fp32."
        )

    if report_dir:
        result = reports.write_characterization_report(list(datasets), report_dir)
    else:
        result = reports.characterize(list(datasets))
    if as_json:
        echo_json(result)
    elif report_dir:
        info(f"wrote {len(result['files'])} files to {report_dir}")
    else:
        click.echo(reports.characterization_markdown(result))


@report_group.command("transfer")
@click.argument("dataset_a")
@click.argument("dataset_b")
@report_option("Write README.md, transfer.json and PNG plots into this directory.")
@json_option()
@click.option(
    "--few-shot",
    "few_shot",
    default="10,25,50,100",
    show_default=True,
    help="Target-measurement counts N for few-shot calibration ('none' to skip).",
)
@click.option(
    "--repeats",
    "--seeds",
    "repeats",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Random draws of the N calibration rows per size (--seeds: the old name).",
)
@seed_option("Seed of the first draw (draw i uses seed + i) and of the models trained here.")
@click.option(
    "--method",
    type=click.Choice(["auto", "scale", "loglinear", "features"]),
    default="auto",
    show_default=True,
    help="Calibration map (see carb_nas.costmodel.calibrate).",
)
@renamed_option("--source-model", "--source")
@click.option(
    "--source",
    "source_model",
    type=click.Path(file_okay=False, exists=True),
    help="A saved CostModel directory for platform A (default: train one on A).",
)
@click.option(
    "--preset",
    default="fast",
    show_default=True,
    help="CostModel preset for the models trained here.",
)
@click.option(
    "--prior",
    default="auto",
    show_default=True,
    help="Platform pairs the few-shot map's transfer prior is learned on: 'auto' (shipped "
    "pairs of B's runtime at another precision on B's machine, or at B's precision on another "
    "machine), 'none', or A:B dataset pairs, comma-separated.",
)
@example(
    "carb-nas report transfer cpu/torch/fp32 cpu/onnxruntime/fp32 --few-shot 10,25 --repeats 3"
)
def transfer_command(
    dataset_a: str,
    dataset_b: str,
    report_dir: str | None,
    as_json: bool,
    few_shot: str,
    repeats: int,
    seed: int,
    method: str,
    source_model: str | None,
    preset: str,
    prior: str,
) -> None:
    """How well platform A's costs predict platform B's, on the configs both measured.

    DATASET_A and DATASET_B are .csv/.parquet rows files or shipped platform names. Per
    target: linear fit B = slope*A + intercept with R2, Spearman rank correlation and the
    overlap of the two top-100 (cheapest) lists; then few-shot calibration of A's cost model
    with N measurements of B against a model trained on those N rows alone; the map uses a
    transfer prior learned on other platform pairs (--prior, see
    carb_nas.costmodel.calibration.fit_transfer_prior) and reports the same draws without it.

    Two published platforms (``published/rtx4090 published/rtx3090``, see ``carb-nas dataset
    list --source published``) compare latency per image on the models both published.
    """
    from carb_nas import reports
    from carb_nas._io import check_writable_dir
    from carb_nas.datasets import is_published

    sizes = _parse_sizes(few_shot)
    if report_dir:
        check_writable_dir(report_dir)
    if is_published(dataset_a) or is_published(dataset_b):
        _published_transfer(
            dataset_a,
            dataset_b,
            report_dir,
            as_json,
            sizes,
            repeats,
            seed,
            method,
            source_model,
            preset,
            prior,
        )
        return
    if reports.same_dataset(dataset_a, dataset_b):
        info(f"warning: A and B are the same dataset ({dataset_a}): every fit is trivially perfect")
    model = None
    if source_model:
        from carb_nas.predictors import load_predictor

        # the transfer report fits maps on a CARB cascade: the predictor's, uncalibrated
        model = load_predictor(source_model, calibrated=False, role="--source").config_model
    kwargs: dict[str, Any] = dict(
        few_shot=sizes,
        repeats=repeats,
        seed=seed,
        method=method,
        source_model=model,
        preset=preset,
        progress=info,
        prior=prior,
    )
    if report_dir:
        result = reports.write_transfer_report(dataset_a, dataset_b, report_dir, **kwargs)
    else:
        result = reports.transfer(dataset_a, dataset_b, **kwargs)
    if as_json:
        echo_json(result)
    elif report_dir:
        info(f"wrote {len(result['meta']['files'])} files to {report_dir}")
    else:
        click.echo(reports.transfer_markdown(result))


def _published_transfer(
    a: str,
    b: str,
    report_dir: str | None,
    as_json: bool,
    sizes: list[int],
    repeats: int,
    seed: int,
    method: str,
    source_model: str | None,
    preset: str,
    prior: str,
) -> None:
    from carb_nas import reports
    from carb_nas.datasets import PublishedDatasetError, resolve_published

    if prior not in ("auto", "none"):
        raise PublishedDatasetError(
            f"published transfer: expected --prior auto or none (published tables carry no "
            f"config knobs for a prior's shape), got --prior {prior!r}. Drop --prior."
        )
    if source_model or method != "auto":
        raise PublishedDatasetError(
            "published transfer: expected the default calibration (a CostModel of A trained "
            "here, method auto), got "
            + ("--source" if source_model else f"--method {method}")
            + ". Drop that option for published platforms."
        )
    for name in (a, b):
        if name.startswith("published/"):
            resolve_published(name)  # an unknown platform: one line before any work
    kwargs: dict[str, Any] = dict(
        few_shot=sizes, repeats=repeats, seed=seed, preset=preset, progress=info
    )
    if report_dir:
        result = reports.write_published_transfer_report(a, b, report_dir, **kwargs)
    else:
        result = reports.published_transfer(a, b, **kwargs)
    if as_json:
        echo_json(result)
    elif report_dir:
        info(f"wrote {len(result['meta']['files'])} files to {report_dir}")
    else:
        click.echo(reports.published_transfer_markdown(result))


COMMANDS: list = [report_group]
