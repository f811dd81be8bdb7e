"""``carb-nas published``: cost models and GPU->GPU screening on published measurements."""

from __future__ import annotations

import click

from carb_nas.cli._options import echo_json, example, info, json_option, output_option, seed_option

__all__ = ["COMMANDS"]


def _check_platform(name: str) -> None:
    from carb_nas.datasets import resolve_published

    resolve_published(name)  # an unknown platform is one line before any work


@click.group("published")
def published_group() -> None:
    """Published GPU/CPU platforms (timm's benchmarks, read-only): models, screening."""


@published_group.command("evaluate")
@click.argument("platform")
@click.option(
    "--folds",
    type=click.IntRange(min=2),
    default=5,
    show_default=True,
    help="Folds of the random and of the by-family split.",
)
@click.option(
    "--preset",
    type=click.Choice(["fast", "carb"]),
    default="fast",
    show_default=True,
    help="CostModel preset.",
)
@seed_option()
@json_option()
@example("carb-nas published evaluate published/rtx4090 --json")
def evaluate_command(platform: str, folds: int, preset: str, seed: int, as_json: bool) -> None:
    """R2 of a CostModel of PLATFORM's step time from the published architecture columns.

    Out-of-fold on a random split and on a split by model family (GroupKFold: no network of
    a held-out family is seen in training), beside the FLOPs-only baselines.
    """
    from carb_nas.published import evaluate_published

    _check_platform(platform)
    r = evaluate_published(platform, folds=folds, preset=preset, seed=seed)
    if as_json:
        echo_json(r)
        return
    click.echo(f"{r['platform']}: {r['rows']} models, {r['families']} families, {folds} folds")
    click.echo(f"{'split':<8} {'model':<14} {'R2':>7} {'R2/image':>9} {'R2 log':>7} {'MdAPE':>7}")
    for split in ("random", "family"):
        for name, m in r[split].items():
            click.echo(
                f"{split:<8} {name:<14} {m['r2']:>7.3f} {m['r2_per_image']:>9.3f} "
                f"{m['r2_log']:>7.3f} {m['mdape_pct']:>6.1f}%"
            )


@published_group.command("screen")
@click.option(
    "--source",
    default="published/rtx4090",
    show_default=True,
    help="Published platform whose model ranks every model of the zoo.",
)
@click.option(
    "--target",
    default="published/rtx3090",
    show_default=True,
    help="Published platform whose model re-scores the shortlist.",
)
@click.option(
    "--top-k",
    "top_k",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="Shortlist size.",
)
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    metavar="TARGET=LIMIT",
    help="Latency budget on the target, repeatable (default latency_ms_per_image=0.25).",
)
@click.option(
    "--quality",
    "quality",
    default="imagenet",
    show_default=True,
    help="Quality (maximized): 'imagenet' (the shipped published ImageNet top-1) or a path "
    "to a timm-format results CSV (model,img_size,top1,...).",
)
@click.option(
    "--folds",
    type=click.IntRange(min=2),
    default=5,
    show_default=True,
    help="Each model is predicted by models fitted without its family (GroupKFold).",
)
@seed_option()
@output_option("Write the Pareto set (CSV or Parquet).")
@json_option()
@example(
    "carb-nas published screen --source published/rtx4090 --target published/rtx3090 "
    "--budget latency_ms_per_image=0.25 --top-k 300"
)
def screen_command(
    source: str,
    target: str,
    top_k: int,
    budgets: tuple[str, ...],
    quality: str,
    folds: int,
    seed: int,
    output: str | None,
    as_json: bool,
) -> None:
    """Two-stage GPU->GPU screening of the published zoo, checked against the target's
    published measurements: counts at every stage, decisions right and wrong."""
    from carb_nas.budgets import parse_budgets
    from carb_nas.datasets import write_table
    from carb_nas.published import published_quality, screen_published

    _check_platform(source)
    _check_platform(target)
    parsed = parse_budgets(list(budgets)) if budgets else None
    published_quality(quality)  # a missing or malformed table: one line before any work
    if output:
        from pathlib import Path

        from carb_nas.datasets import TABLE_SUFFIXES
        from carb_nas.errors import InputFileError

        if Path(output).suffix not in TABLE_SUFFIXES:
            raise InputFileError(
                f"unsupported output format for {output!r}: expected a .csv or .parquet path. "
                "Use -o pareto.csv."
            )
        if not Path(output).parent.is_dir():
            raise InputFileError(
                f"output directory does not exist: expected an existing directory for "
                f"{output!r}. Create it first or choose another -o path."
            )
    r = screen_published(
        source, target, top_k=top_k, budgets=parsed, quality=quality, folds=folds, seed=seed
    )
    if output:
        write_table(r.pareto.reset_index(drop=True), output)
        info(f"wrote {len(r.pareto)} Pareto models to {output}")
    if as_json:
        echo_json(r.to_dict())
        return
    click.echo(r.summary())


COMMANDS: list = [published_group]
