"""The ``carb-nas`` command line: one verb per pipeline stage, twelve in all.

Each stage's commands live in their own module here and are registered below; the modules
import the library inside the commands, so ``carb-nas --help`` loads none of it. A verb that
moved into a group (``carb-nas train`` -> ``carb-nas model train``) fails in one line naming
its new spelling. Every user error
-- a ``CarbNasError`` from the library or a usage error click finds in the arguments -- prints
one line on stderr and exits with code 1; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import click

from carb_nas.errors import CarbNasError

__all__ = ["main", "cli"]


def _one_line(e: click.ClickException) -> str:
    """A click error as one line: the message plus where to look for the usage."""
    msg = " ".join(e.format_message().split())
    ctx = getattr(e, "ctx", None)
    if isinstance(e, click.UsageError) and ctx is not None:
        msg += f" See '{ctx.command_path} --help'."
    return msg


def _warning_printer() -> Any:
    """``warnings.showwarning`` for one command: a warning is a note to the user, one line on
    stderr (not Python's two-line source echo), and the same note once."""
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        line = f"warning: {' '.join(str(message).split())}"
        if line not in shown:
            shown.add(line)
            click.echo(line, err=True)

    return show


#: verbs that moved into a group: old spelling -> new
MOVED = {
    "train": "model train",
    "evaluate": "model evaluate",
    "features": "space features",
    "characterize": "report characterize",
    "transfer": "report transfer",
}


class _Group(click.Group):
    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:  # noqa: D102
        if args and args[0] in MOVED and args[0] not in self.commands:
            raise click.UsageError(
                f"`carb-nas {args[0]}` is now `carb-nas {MOVED[args[0]]}`.", ctx=ctx
            )
        return super().resolve_command(ctx, args)

    def main(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D102 - click API
        # click's own handling prints three lines and exits 2 for a usage error; ours is the
        # one-line, exit-code-1 contract every carb_nas error keeps.
        kwargs["standalone_mode"] = False
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _warning_printer()
                rv = super().main(*args, **kwargs)
        except click.exceptions.Exit as e:  # --help, --version, ctx.exit(n)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except click.exceptions.NoArgsIsHelpError as e:  # a group called bare: show its help
            click.echo(e.format_message())
            sys.exit(0)
        except click.ClickException as e:
            click.echo(f"error: {_one_line(e)}", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context):  # noqa: D102 - click API
        try:
            return super().invoke(ctx)
        except CarbNasError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {e}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="carb-nas")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """carb_nas: predict CNN inference costs, search under budgets, validate on hardware."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    from carb_nas.cli import (
        _calibrate,
        _data,
        _loadgen,
        _model,
        _profile,
        _published,
        _report,
        _search,
        _space,
    )

    for module in (
        _search,
        _model,
        _calibrate,
        _profile,
        _loadgen,
        _space,
        _data,
        _report,
        _published,
    ):
        for command in module.COMMANDS:
            _full_short_help(command)
            cli.add_command(command)


def _full_short_help(command: click.Command) -> None:
    """Each command's first sentence as its listed help, whole: click would cut it at 45
    characters with '...'."""
    for sub in getattr(command, "commands", {}).values():
        _full_short_help(sub)
    if command.short_help is None and command.help:
        first = command.help.split("\n\n")[0]
        sentence = first.split(". ")[0].rstrip(".")
        command.short_help = " ".join(sentence.split()) + "."


_register()


def main() -> None:
    cli(prog_name="carb-nas", obj={"debug": "--debug" in sys.argv[1:2]})
