"""Every command's ``--help`` example runs (tests/ holds the small inputs they name)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import carb_nas.cli
from carb_nas.cli._options import EXAMPLES

DATA = Path(carb_nas.cli.__file__).resolve().parents[1] / "data" / "datasets"

#: examples that measure for a minute: the rest (a few seconds each) run by default
SLOW = {"calibrate"}


def _verb(text: str) -> str:
    words = shlex.split(text)[1:]
    return (
        " ".join(words[:2])
        if words[0] in carb_nas.cli.cli.commands
        and hasattr(carb_nas.cli.cli.commands[words[0]], "commands")
        else words[0]
    )


def _inputs(work: Path) -> None:
    """The small files the examples name, written into the working directory."""
    rows = pd.read_csv(DATA / "cpu_torch_fp32.csv").head(120)
    for name in ("pass1.csv", "pass2.csv", "pass3.csv", "measured.csv", "configs_measured.csv"):
        rows.to_csv(work / name, index=False)
    rows.head(4).to_csv(work / "pareto.csv", index=False)


def test_every_command_has_an_example():
    def walk(group, prefix=""):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                yield from walk(cmd, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", cmd

    missing = [name for name, cmd in walk(carb_nas.cli.cli) if "Example:" not in (cmd.help or "")]
    assert not missing
    assert len(carb_nas.cli.cli.commands) <= 12


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(t, marks=[pytest.mark.slow] if _verb(t) in SLOW else [], id=_verb(t))
        for t in EXAMPLES.values()
    ],
)
def test_help_example_runs(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _inputs(tmp_path)
    if _verb(text) in ("dataset export", "dataset status"):  # the campaign profile's example makes
        profile = next(t for t in EXAMPLES.values() if _verb(t) == "profile")
        made = CliRunner().invoke(carb_nas.cli.cli, shlex.split(profile)[1:], obj={"debug": False})
        assert made.exit_code == 0, made.output
    res = CliRunner().invoke(carb_nas.cli.cli, shlex.split(text)[1:], obj={"debug": False})
    assert res.exit_code == 0, res.output
