"""``carb-nas calibrate``: adapt a default model to this machine (``carb_nas.calibrate``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from carb_nas.cli._options import echo_json, example, info, json_option

DEFAULT_TIME_BUDGET_S = 60.0
BAR_WIDTH = 24


def progress_bar(platform: str) -> Callable[[int, float, float], None]:
    """A stderr progress bar with an ETA for ``calibrate_on_arrival(progress=...)``."""
    tty = sys.stderr.isatty()

    def show(n: int, elapsed_s: float, budget_s: float) -> None:
        done = min(1.0, elapsed_s / budget_s) if budget_s > 0 else 1.0
        filled = int(round(done * BAR_WIDTH))
        eta = max(0.0, budget_s - elapsed_s)
        line = (
            f"  calibrating {platform} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
            f"{n} configs, {elapsed_s:.0f}/{budget_s:.0f} s, ETA {eta:.0f} s"
        )
        click.echo(("\r" + line) if tty else line, err=True, nl=not tty)

    return show


def run_calibration(
    platform: str, time_budget_s: float, quiet: bool = False, passes: int | None = None
) -> Any:
    """Calibrate ``platform`` here with a progress bar; says what it replaced (stderr)."""
    from carb_nas.calibrate import PASSES, calibrate_on_arrival

    bar = None if quiet else progress_bar(platform)
    cal = calibrate_on_arrival(
        platform, time_budget_s, progress=bar, passes=PASSES if passes is None else passes
    )
    if bar is not None and sys.stderr.isatty():
        click.echo("", err=True)
    if cal.replaced:
        info(f"replaced {cal.replaced} in {cal.directory}")
    return cal


def time_budget_option() -> Callable[[Any], Any]:
    return click.option(
        "--time-budget-s",
        type=float,
        default=DEFAULT_TIME_BUDGET_S,
        show_default=True,
        help="Seconds to spend measuring (set-up included); at least 5.",
    )


@click.command("calibrate")
@click.argument("platform")
@time_budget_option()
@click.option(
    "--passes",
    type=int,
    default=None,
    help="Rounds per config, the fastest kept (default 1; 3 on a shared machine, where "
    "contention only adds time: the summary then says how far this machine repeats itself).",
)
@json_option("Print the calibration (rows, methods, factors, cache directory) as JSON.")
@example("carb-nas calibrate cpu/torch/fp32 --time-budget-s 60")
def calibrate_command(
    platform: str, time_budget_s: float, passes: int | None, as_json: bool
) -> None:
    """Calibrate the default PLATFORM model (e.g. cpu/torch/fp32) to this machine.

    Measures a spread of the shipped configs (more where the model is least sure) for about
    --time-budget-s seconds, each in --passes interleaved rounds (the fastest kept), fits the
    few-shot calibration and caches it keyed by this machine's fingerprint; every command that
    predicts with PLATFORM then applies it (--uncalibrated: not). The summary says how far
    this machine repeats itself. A recalibration says what it replaces.
    """
    from carb_nas.calibrate import check_time_budget_s
    from carb_nas.datasets import refuse_published
    from carb_nas.predictors.calibrations import check_runnable, split_platform

    refuse_published(platform, "calibrate", "a platform this machine can measure")
    split_platform(platform)
    check_time_budget_s(time_budget_s)
    if passes is not None:
        from carb_nas.measure.passes import check_passes

        check_passes(passes)
    check_runnable(platform)
    cal = run_calibration(platform, time_budget_s, passes=passes)
    if as_json:
        echo_json(cal.to_dict())
        return
    click.echo(cal.summary())


COMMANDS = [calibrate_command]
