"""The documentation stays documentation: a short README whose test command CI runs, a small
docs/ folder, no history in the product's words, and a generated accuracy page."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HISTORY = re.compile(r"stop [0-9]+|session [0-9]+|\blent\b|seed 00[0-9]", re.IGNORECASE)


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def _history_lines(paths: list[Path]) -> list[str]:
    hits = []
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    return hits


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; keep it at most 150"


def test_readme_test_command_is_what_ci_runs() -> None:
    blocks = _code_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 2
    command = [ln for ln in blocks[1].splitlines() if ln and not ln.startswith("#")]
    assert len(command) == 1 and "-m pytest -q -n 2" in command[0]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command[0] in ci, "README's test command must be a line of .ci/run"


def test_docs_folder_is_small() -> None:
    files = [p for p in (ROOT / "docs").rglob("*") if p.is_file()]
    assert len(files) <= 150, f"docs/ holds {len(files)} files; raw runs belong in research/"


def test_readme_and_docs_speak_of_the_product_only() -> None:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert _history_lines(paths) == []


def test_code_speaks_of_the_product_only() -> None:
    assert _history_lines(sorted((ROOT / "carb_nas").rglob("*.py"))) == []


def _accuracy_page():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "accuracy_page", ROOT / "benchmarks" / "accuracy_page.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_accuracy_page_is_generated() -> None:
    page = _accuracy_page()
    results = json.loads((ROOT / "benchmarks" / "results.json").read_text(encoding="utf-8"))
    expected = page.render(results)
    actual = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert actual == expected, "run `python benchmarks/accuracy_page.py` and commit the page"


def test_accuracy_page_parses_last_lines() -> None:
    page = _accuracy_page()
    assert page.parse_last_line("device=NVIDIA H200 r2=0.955 ± 0.007") == [
        ("device", "NVIDIA H200"),
        ("r2", "0.955 ± 0.007"),
    ]
    with pytest.raises(ValueError, match="key=value"):
        page.parse_last_line("no figures here")


def _python_blocks(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def test_readme_python_runs(monkeypatch) -> None:
    """README's Python blocks run as written (fewer Optuna trials)."""
    import warnings

    blocks = _python_blocks(ROOT / "README.md")
    assert len(blocks) >= 2 and "predict_costs" in blocks[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for block in blocks:
            scope: dict = {}
            exec(block.replace("n_trials=50", "n_trials=3"), scope)  # noqa: S102
    trials = scope["study"].trials
    assert len(trials) == 3
    assert all("carb_nas.predicted.latency_ms" in t.user_attrs for t in trials)


def _command_lines(text: str) -> list[str]:
    """Every ``carb-nas ...`` command line in Markdown (code blocks and inline code)."""
    text = re.sub(r"\\\n\s*", " ", text)  # continued lines
    lines = []
    for m in re.finditer(r"carb-nas ([^`\n]+)", text):
        lines.append(m.group(1).split(" #")[0].strip())
    return lines


def test_docs_name_only_options_that_exist() -> None:
    """Each ``--option`` a doc page gives a command is one of that command's own (not an
    old spelling kept only to say the new one)."""
    import shlex

    import click

    from carb_nas.cli import cli

    bad = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in _command_lines(path.read_text(encoding="utf-8")):
            try:
                words = shlex.split(line)
            except ValueError:
                continue
            cmd: click.Command = cli
            for word in words:
                if not isinstance(cmd, click.Group) or word not in cmd.commands:
                    break
                cmd = cmd.commands[word]
            if cmd is cli:
                continue
            known = {o for p in cmd.params if not getattr(p, "hidden", False) for o in p.opts}
            known |= {o for p in cmd.params for o in getattr(p, "secondary_opts", [])}
            known |= {"--help"}
            for word in words:
                option = word.split("=")[0]
                if option.startswith("--") and option not in known and option != "--debug":
                    bad.append(f"{path.name}: carb-nas {line[:60]}: {option}")
    assert not bad, "\n".join(bad)
