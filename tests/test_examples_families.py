"""The family examples run (fast settings) and print their last line."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MINI = """[knobs]
family = ["basic", "mobilenet_v2", "vgg", "regnet_y_400mf"]
width = [0.25, 0.5]
resolution = [32]
batch_size = [1, 4]
[family.basic]
depth = [10]
[family.mobilenet_v2]
depth = [7, 9]
[family.vgg]
depth = [11]
[family.regnet_y_400mf]
depth = [8]
"""


def _run(name: str, args: list[str], monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", [name, *args])
    runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_mixed_family_screening_prints_every_stage(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "mini.toml").write_text(MINI)
    args = ["--space", str(tmp_path / "mini.toml"), "--top-k", "8"]
    last = _run("mixed_family_screening.py", args, monkeypatch, capsys)
    m = re.fullmatch(
        r"candidates=(\d+) shortlisted=(\d+) within_budget=(\d+) pareto=(\d+) families=(\d+)", last
    )
    assert m, last
    candidates, shortlisted, within, pareto, families = map(int, m.groups())
    assert candidates == 20 and shortlisted == 8
    assert 1 <= pareto <= within <= shortlisted and families >= 2


def test_family_search_finds_a_pareto_set(tmp_path, monkeypatch, capsys) -> None:
    space = tmp_path / "mnv2.toml"
    space.write_text('[knobs]\nfamily = ["mobilenet_v2"]\ndepth = [7, 9]\nwidth = [0.35, 0.5]\n'
                     "resolution = [32]\nbatch_size = [1, 2, 4]\n")  # fmt: skip
    last = _run("family_search.py", ["--space", str(space), "--trials", "16", "--pop-size", "8"],
                monkeypatch, capsys)  # fmt: skip
    m = re.fullmatch(r"space=(\S+) evaluated=(\d+) pareto=(\d+) feasible=([01])", last)
    assert m, last
    assert m.group(1) == "mnv2" and 1 <= int(m.group(3)) <= int(m.group(2)) <= 12
    assert m.group(4) == "1"
