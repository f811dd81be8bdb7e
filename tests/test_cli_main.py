"""The CLI's error contract: every user error is one line on stderr and exit code 1."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from carb_nas.cli import cli


@pytest.mark.parametrize(
    "args, needle",
    [
        (["model", "train"], "Missing argument 'DATASET'"),
        (["search", "--pop-size", "x"], "'x' is not a valid integer"),
        (["no-such-verb"], "No such command 'no-such-verb'"),
        (["space", "count", "--no-such-flag", "cpu"], "--no-such-flag"),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_1(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and needle in lines[0]
    assert "--help" in lines[0]  # says where to look
    assert res.stdout == ""


def test_a_bare_group_shows_its_help_and_succeeds() -> None:
    res = CliRunner().invoke(cli, ["space"])
    assert res.exit_code == 0
    assert res.stdout.startswith("Usage: ") and "count" in res.stdout


def test_help_and_version_exit_0() -> None:
    assert CliRunner().invoke(cli, ["--help"]).exit_code == 0
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and "version" in res.stdout


def test_atomic_directory_leaves_nothing_behind_on_failure(tmp_path) -> None:
    from carb_nas._io import atomic_directory

    target = tmp_path / "new" / "nested" / "model"
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "half.json").write_text("{")
        raise RuntimeError("fails half-way")
    assert list(tmp_path.iterdir()) == []  # not even the parents it created
    old = tmp_path / "old"
    old.mkdir()
    (old / "keep.json").write_text("1")
    with pytest.raises(RuntimeError), atomic_directory(old) as tmp:
        raise RuntimeError("fails")
    assert [p.name for p in old.iterdir()] == ["keep.json"]
    with atomic_directory(old) as tmp:
        (tmp / "new.json").write_text("2")
    assert [p.name for p in old.iterdir()] == ["new.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]


def _leaf_commands(group, prefix=()):
    for name, cmd in sorted(group.commands.items()):
        if hasattr(cmd, "commands"):
            yield from _leaf_commands(cmd, (*prefix, name))
        else:
            yield (*prefix, name)


@pytest.mark.parametrize("verb", list(_leaf_commands(cli)), ids=" ".join)
def test_every_command_has_one_example_and_json(verb: tuple[str, ...]) -> None:
    res = CliRunner().invoke(cli, [*verb, "--help"])
    assert res.exit_code == 0
    assert res.stdout.count("Example:") == 1, res.stdout
    assert f"carb-nas {' '.join(verb)}" in res.stdout.split("Example:")[1]
    assert "--json" in res.stdout  # every command reports something


def test_storage_env_matches_the_library():
    from carb_nas.cli._options import STORAGE_ENV
    from carb_nas.storage import STORAGE_ENV as LIBRARY

    assert STORAGE_ENV == LIBRARY


def test_moved_verbs_name_their_new_spelling():
    for old, new in (("train", "model train"), ("features", "space features"),
                     ("transfer", "report transfer")):  # fmt: skip
        res = CliRunner().invoke(cli, [old, "x"])
        assert res.exit_code == 1 and f"`carb-nas {new}`" in res.output
        assert len(res.output.strip().splitlines()) == 1
