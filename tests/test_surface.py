"""The public surface stays small, and platform names are resolved in one place."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "carb_nas"

#: each package's public names (``__all__``) at most this many
MAX_PUBLIC = 25
#: packages still above it: a ceiling that may only go down as their names move
CEILINGS = {"carb_nas.datasets": 26}

PACKAGES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts[:-1])
    for p in PKG.rglob("__init__.py")
    if "data" not in p.parts
)


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_exports_few_names(name):
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", []))
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    assert all(hasattr(module, n) for n in exported), f"{name}.__all__ names a missing attribute"
    assert len(exported) <= CEILINGS.get(name, MAX_PUBLIC), (
        f"{name} exports {len(exported)} names; keep at most {MAX_PUBLIC}: make helpers "
        "private or move research-only ones to research/"
    )


# what turns a platform name into a model: only the loader and the registry under it do it
_RESOLVES = re.compile(
    r"\bload_default_model\(|\bload_default_module_model\(|\bCostModel\.load\(|"
    r"count\(\"/\"\)|\.count\('/'\)"
)
_ALLOWED = ("carb_nas/predictors/", "carb_nas/costmodel/", "carb_nas/datasets/")


def test_only_the_loader_resolves_a_platform_name():
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(_ALLOWED):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _RESOLVES.search(code):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "resolve names with carb_nas.load_predictor:\n" + "\n".join(offenders)


def test_the_same_name_is_the_same_predictor_everywhere(torch_model, monkeypatch):
    """Python, the plugin and predict_costs get one object for one name."""
    from carb_nas import load_predictor
    from carb_nas.integrations import CostConstraints
    from carb_nas.predictors import Predictor, _load

    monkeypatch.setattr(_load, "load_default_model", lambda p, **k: torch_model)
    first = load_predictor("cpu/onnxruntime/fp32")
    assert isinstance(first, Predictor) and first.config_model is torch_model
    assert CostConstraints("cpu/onnxruntime/fp32").predictor is first
    assert load_predictor(first) is first


@pytest.mark.parametrize(
    ("module", "name", "new"),
    [
        ("carb_nas.costmodel", "load_model", "carb_nas.load_predictor"),
        ("carb_nas.calibrate", "load_calibrated_model", "carb_nas.load_predictor"),
        ("carb_nas.calibrate", "calibrated_costs", "carb_nas.predict_costs"),
        ("carb_nas.scoring", "predict_costs", "carb_nas.predict_costs"),
    ],
)
def test_a_name_of_0_1_fails_naming_its_new_spelling(module, name, new):
    from carb_nas.errors import RemovedNameError

    with pytest.raises(RemovedNameError, match=f"removed in carb_nas 1.0: expected {new}"):
        exec(f"from {module} import {name}", {})
    assert not hasattr(importlib.import_module(module), "no_such_name")  # others: plain


def test_a_published_benchmark_is_not_a_predictor_and_says_where_it_is_served():
    from carb_nas import load_predictor
    from carb_nas.errors import ModelError

    with pytest.raises(ModelError, match="carb-nas published evaluate"):
        load_predictor("published/rtx4090")
