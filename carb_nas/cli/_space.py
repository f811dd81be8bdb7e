"""``carb-nas space ...`` and ``carb-nas features``."""

from __future__ import annotations

from pathlib import Path

import click

from carb_nas.cli._common import echo_json
from carb_nas.errors import ConfigError
from carb_nas.space import configs_to_frame, load_space, write_table


@click.group("space")
def space_group() -> None:
    """Inspect and sample declared search spaces (TOML)."""


@space_group.command("count")
@click.argument("file")
@click.option("--json", "as_json", is_flag=True, help='Print {"count": N}.')
def space_count(file: str, as_json: bool) -> None:
    """Number of configurations in FILE (after its [limits])."""
    n = len(load_space(file))
    if as_json:
        echo_json({"count": n})
    else:
        click.echo(n)


@space_group.command("show")
@click.argument("file")
def space_show(file: str) -> None:
    """Knobs and values of FILE, per family."""
    click.echo(load_space(file).describe())


@space_group.command("sample")
@click.argument("file")
@click.option("-n", "n", type=int, required=True, help="Number of configs to draw.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--stratify", is_flag=True,
              help="Balance every knob's values instead of drawing uniformly.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="configs.csv or .parquet")
def space_sample(file: str, n: int, seed: int, stratify: bool, output: str) -> None:
    """Draw N distinct configs at random (uniform, or --stratify) into a configs table."""
    if n <= 0:
        raise ConfigError(f"invalid -n: expected a positive count, got {n}. Use -n 1 or more.")
    space = load_space(file)
    frame = configs_to_frame(space.sample(n, seed=seed, stratify=stratify))
    write_table(frame, Path(output))
    click.echo(f"wrote {len(frame)} configs to {output}", err=True)


COMMANDS = [space_group]
