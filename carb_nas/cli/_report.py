"""``carb-nas characterize`` and ``carb-nas transfer``: reports on measured datasets."""

from __future__ import annotations

import click

from carb_nas.cli._options import echo_json
from carb_nas.errors import ConfigError


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


@click.command("characterize")
@click.argument("datasets", nargs=-1, required=True)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    help="Write README.md, characterization.json and PNG plots into this directory.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def characterize_command(datasets: tuple[str, ...], report_dir: str | None, as_json: bool) -> None:
    """How cost scales with each knob in measured DATASETS (.csv/.parquet).

    Only rows with status ok count. Give several datasets (e.g. cpu/torch/fp32 and
    cpu/onnxruntime/int8) to get precision/runtime ratios on the configs they share.
    Without --report or --json the Markdown summary is printed.
    """
    from carb_nas import report

    if report_dir:
        result = report.write_characterization_report(list(datasets), report_dir)
    else:
        result = report.characterize(list(datasets))
    if as_json:
        echo_json(result)
    elif report_dir:
        click.echo(f"wrote {len(result['files'])} files to {report_dir}")
    else:
        click.echo(report.characterization_markdown(result))


@click.command("transfer")
@click.argument("dataset_a")
@click.argument("dataset_b")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    help="Write README.md, transfer.json and PNG plots into this directory.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--few-shot",
    "few_shot",
    default="10,25,50,100",
    show_default=True,
    help="Target-measurement counts N for few-shot calibration ('none' to skip).",
)
@click.option(
    "--seeds",
    type=int,
    default=5,
    show_default=True,
    help="Random draws of the N calibration rows per size.",
)
@click.option(
    "--method",
    type=click.Choice(["auto", "scale", "loglinear", "features"]),
    default="auto",
    show_default=True,
    help="Calibration map (see calibrate()).",
)
@click.option(
    "--source-model",
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
def transfer_command(
    dataset_a: str,
    dataset_b: str,
    report_dir: str | None,
    as_json: bool,
    few_shot: str,
    seeds: int,
    method: str,
    source_model: str | None,
    preset: str,
) -> None:
    """How well platform A's costs predict platform B's, on the configs both measured.

    Per target: linear fit B = slope*A + intercept with R2, Spearman rank correlation and
    the overlap of the two top-100 (cheapest) lists; then few-shot calibration of A's cost
    model with N measurements of B against a model trained on those N rows alone.
    """
    from carb_nas import report

    model = None
    if source_model:
        from carb_nas.costmodel import CostModel

        model = CostModel.load(source_model)
    progress = None if as_json else (lambda msg: click.echo(msg, err=True))
    kwargs = dict(
        few_shot=_parse_sizes(few_shot),
        seeds=seeds,
        method=method,
        source_model=model,
        preset=preset,
        progress=progress,
    )
    if report_dir:
        result = report.write_transfer_report(dataset_a, dataset_b, report_dir, **kwargs)
    else:
        result = report.transfer(dataset_a, dataset_b, **kwargs)
    if as_json:
        echo_json(result)
    elif report_dir:
        click.echo(f"wrote {len(result['meta']['files'])} files to {report_dir}")
    else:
        click.echo(report.transfer_markdown(result))


COMMANDS: list = [characterize_command, transfer_command]
