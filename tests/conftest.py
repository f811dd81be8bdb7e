"""Shared fixtures. Helpers that a test needs at import time (``tiny`` for parametrize) live
in tests/synthetic.py and import as ``tests.synthetic`` (as tests.measure.fakes does)."""

from __future__ import annotations

import pytest

from tests.synthetic import TINY_PARAMS, synthetic_dataset, tiny


@pytest.fixture(scope="session")
def make_rows():
    """``make_rows(n, seed=0, space="resnet", energy=True, telemetry=False)``: SYNTHETIC rows."""
    return synthetic_dataset


@pytest.fixture(scope="session")
def tiny_model():
    """``tiny_model(**params)``: a CostModel with a few dozen trees per learner."""
    return tiny


@pytest.fixture
def model_cache(monkeypatch, tmp_path):
    """An empty default-model cache (``CARB_NAS_CACHE``) for this test only."""
    monkeypatch.setenv("CARB_NAS_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def tiny_default_params():
    """A cheap recipe for ``load_default_model(params=...)`` (the real default, the CARB
    preset, takes about a minute; the registry logic is the same)."""
    return dict(TINY_PARAMS)
