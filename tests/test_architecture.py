"""The layout in docs/ARCHITECTURE.md holds in the code.

The layer table is read from the document itself, so the map and the code cannot drift apart:
a module may import only from its own stage or from layers below it, never another stage's
underscore names or private modules, and the library never imports the CLI. Lazy imports
inside functions count too: a cycle hidden in a function body is still a cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "carb_nas"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

_ROW = re.compile(r"^\|\s*(\d+)\s*\|(.+?)\|")


def layers(doc: str) -> dict[str, int]:
    """``{"carb_nas.space": 1, ...}`` from the layer table's first two columns."""
    out: dict[str, int] = {}
    for line in doc.splitlines():
        m = _ROW.match(line)
        if m:
            for name in re.findall(r"`(carb_nas[\w.]*)`", m.group(2)):
                out[name] = int(m.group(1))
    return out


def stage_of(module: str, table: dict[str, int]) -> str | None:
    """The longest table entry that is ``module`` or a package containing it."""
    if module == "carb_nas":  # the facade: only the package's own __init__
        return "carb_nas" if "carb_nas" in table else None
    best = None
    for name in table:
        if name == "carb_nas":
            continue
        if (module == name or module.startswith(name + ".")) and (
            best is None or len(name) > len(best)
        ):
            best = name
    return best


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(source: str, module: str, is_package: bool) -> list[tuple[int, str, list[str]]]:
    """``(line, imported module, names)`` for every carb_nas import, relative ones resolved."""
    out = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.startswith("carb_nas")]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([target] if target else []))
            if target.startswith("carb_nas"):
                out.append((node.lineno, target, [a.name for a in node.names]))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def violations(module: str, source: str, is_package: bool, table: dict[str, int]) -> list[str]:
    """Every import of ``module`` that breaks the layout, as readable lines."""
    own = stage_of(module, table)
    found = []
    if own is None:
        return [f"{module}: not in the layer table of docs/ARCHITECTURE.md"]
    for line, target, names in imports(source, module, is_package):
        where = f"{module}:{line}"
        if target.startswith("carb_nas.cli") and own != "carb_nas.cli":
            found.append(f"{where} imports the CLI ({target})")
            continue
        other = stage_of(target, table)
        if other is None:
            if target != "carb_nas":
                found.append(f"{where} imports {target}, which is not in the layer table")
            continue
        if other != own and table[other] >= table[own]:
            found.append(
                f"{where} imports {target} (layer {table[other]}) from layer {table[own]}: "
                "a module may import only from layers below it"
            )
        if other != own:
            private_parts = [p for p in target[len(other) :].split(".") if _private(p)]
            if private_parts and not target.startswith(own + "."):
                found.append(f"{where} imports the private module {target} of {other}")
            found += [f"{where} imports {other}'s private name {n}" for n in names if _private(n)]
    return found


def test_every_module_follows_the_layer_order() -> None:
    table = layers(DOC.read_text())
    assert len(table) >= 10, "the layer table of docs/ARCHITECTURE.md was not found"
    found = []
    for path in sorted(PKG.rglob("*.py")):
        found += violations(module_name(path), path.read_text(), path.name == "__init__.py", table)
    assert not found, "\n".join(found)


def test_no_optuna_internals() -> None:
    pattern = re.compile(r"\._storage\b|\b_study_id\b|\._trial_id\b|_pop_waiting")
    hits = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in PKG.rglob("*.py")
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
    ]
    assert not hits, f"Optuna internals used at {hits}: use Optuna's public API"


TABLE = {"carb_nas.errors": 0, "carb_nas.space": 2, "carb_nas.features": 4, "carb_nas.cli": 16}


@pytest.mark.parametrize(
    "module, source, expected",
    [
        ("carb_nas.space", "from carb_nas.features import compute_features", "layers below"),
        ("carb_nas.space", "def f():\n    import carb_nas.features\n", "layers below"),
        ("carb_nas.features", "from carb_nas.space import _canonical", "private name"),
        ("carb_nas.features", "from carb_nas.space._io import x", "private module"),
        ("carb_nas.features._trace", "from ._closed import y", None),
        ("carb_nas.features", "from carb_nas.cli import main", "imports the CLI"),
        ("carb_nas.features", "from carb_nas.nowhere import x", "not in the layer table"),
        ("carb_nas.features", "from carb_nas.space import Config\nimport carb_nas.errors", None),
    ],
)
def test_the_checker_catches_each_kind_of_violation(
    module: str, source: str, expected: str | None
) -> None:
    found = violations(module, source, False, TABLE)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found
