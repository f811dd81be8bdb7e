"""``carb-nas space ...``: count, show, sample and the features of a space's configs."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd

from carb_nas.cli._options import echo_json, example, info, json_option, output_option, seed_option
from carb_nas.datasets import read_configs, write_table
from carb_nas.errors import ConfigError, InputFileError
from carb_nas.space import (
    CONFIG_COLUMNS,
    REQUIRED_COLUMNS,
    configs_to_frame,
    load_space,
)


@click.group("space")
def space_group() -> None:
    """Inspect and sample declared search spaces (TOML)."""


@space_group.command("count")
@click.argument("file")
@json_option('Print {"count": N}.')
@example("carb-nas space count cpu")
def space_count(file: str, as_json: bool) -> None:
    """Number of configurations in FILE (after its [limits])."""
    n = len(load_space(file))
    if as_json:
        echo_json({"count": n})
    else:
        click.echo(n)


@space_group.command("show")
@click.argument("file")
@json_option("Print the space (name, source, count, limits, knobs per family) as JSON.")
@example("carb-nas space show resnet")
def space_show(file: str, as_json: bool) -> None:
    """Knobs and values of FILE, per family."""
    space = load_space(file)
    if as_json:
        echo_json({**space.to_dict(), "source": space.source, "count": len(space)})
    else:
        click.echo(space.describe())


@space_group.command("sample")
@click.argument("file")
@click.option("-n", "n", type=int, required=True, help="Number of configs to draw.")
@seed_option()
@click.option(
    "--stratify", is_flag=True, help="Balance every knob's values instead of drawing uniformly."
)
@output_option("configs.csv or .parquet", required=True)
@json_option('Print {"requested": N, "count": K, "space_count": S, "output": PATH}.')
@example("carb-nas space sample resnet -n 200 --seed 0 -o configs.csv")
def space_sample(file: str, n: int, seed: int, stratify: bool, output: str, as_json: bool) -> None:
    """Draw N distinct configs at random (uniform, or --stratify) into a configs table.

    A space with fewer than N configs gives all of them (in random order), and says so.
    """
    if n <= 0:
        raise ConfigError(f"invalid -n: expected a positive count, got {n}. Use -n 1 or more.")
    space = load_space(file)
    frame = configs_to_frame(space.sample(n, seed=seed, stratify=stratify))
    write_table(frame, Path(output))
    info(f"wrote {len(frame)} configs to {output}")
    if len(frame) < n:
        info(
            f"note: {file} holds only {len(frame):,} configs, fewer than the {n:,} asked for: "
            "wrote all of them."
        )
    if as_json:
        echo_json(
            {"requested": n, "count": len(frame), "space_count": len(space), "output": output}
        )


_SHOWN = ("flops", "params", "param_mb", "act_mb_total", "tensor_peak_mb")
_TABLE_ROWS = 20


@space_group.command("features")
@click.argument("configs")
@output_option("Write config columns + features to this .csv or .parquet file.")
@json_option("Print a JSON list, one object per config in input order.")
@example("carb-nas space features resnet -o features.csv")
def features_command(configs: str, output: str | None, as_json: bool) -> None:
    """Architecture features of every config in CONFIGS.

    CONFIGS is a configs table (.csv/.parquet with columns family, depth, width, resolution,
    batch_size[, precision, runtime]) or a space (.toml or a bundled name such as resnet).
    Features per batch: flops (2 x MACs of conv + linear), params, param_mb, act_mb_total,
    act_mb_max, tensor_peak_mb (MB = 1e6 bytes), compute intensity and layer counts.
    """
    from carb_nas.features import compute_features

    frame = read_configs(configs)
    if frame.empty:
        raise InputFileError(
            f"{configs}: no configs: expected at least one data row under the header "
            f"{list(REQUIRED_COLUMNS)}[, precision, runtime], got none. Add configs to the file."
        )
    table = pd.concat(
        [
            frame[list(CONFIG_COLUMNS)].reset_index(drop=True),
            compute_features(frame).reset_index(drop=True),
        ],
        axis=1,
    )
    if output:
        write_table(table, Path(output))
        info(f"wrote features of {len(table)} configs to {output}")
    if as_json:
        echo_json(table.to_dict(orient="records"))
    elif not output:
        click.echo(_summary(table))


def _summary(table: pd.DataFrame) -> str:
    shown = table[[*CONFIG_COLUMNS, *_SHOWN]]
    if len(table) <= _TABLE_ROWS:
        return shown.to_string(index=False)
    head = shown.head(10).to_string(index=False)
    stats = table[list(_SHOWN)].describe(percentiles=[0.5]).loc[["min", "50%", "max"]]
    return (
        f"{head}\n... {len(table) - 10:,} more configs ({len(table):,} in all; "
        f"-o FILE or --json for every row)\n\nover all configs:\n{stats.to_string()}"
    )


COMMANDS = [space_group]
