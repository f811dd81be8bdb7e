"""The ``carb-nas`` command line: one verb per pipeline stage.

Each stage's commands live in their own module here and are registered below. A user error
(any ``CarbNasError``) prints one line and exits with code 1; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys

import click

from carb_nas.errors import CarbNasError

__all__ = ["main", "cli"]


class _Group(click.Group):
    def invoke(self, ctx: click.Context):  # noqa: D102 - click API
        try:
            return super().invoke(ctx)
        except CarbNasError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {e}", err=True)
            ctx.exit(1)


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="carb-nas")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """carb_nas: predict CNN inference costs, search under budgets, validate on hardware."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    from carb_nas.cli import (
        _data,
        _model,
        _profile,
        _report,
        _search,
        _space,
    )

    for module in (_space, _profile, _data, _model, _search, _report):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    cli(prog_name="carb-nas", obj={"debug": "--debug" in sys.argv[1:2]})
