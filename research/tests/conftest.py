"""The research tests run with the product's shared fixtures (tests/conftest.py): the cheap
default models in a cache of the run's own, no calibration on arrival.

    PYTHONPATH=$PWD python -m pytest research/tests
"""

from __future__ import annotations

import sys
from pathlib import Path

RESEARCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(RESEARCH))  # carb_nas_research
sys.path.insert(0, str(RESEARCH.parent))  # tests.conftest, tests.measure.fakes

from tests.conftest import (  # noqa: E402, F401
    _cheap_default_models,
    _no_calibration_on_arrival,
    torch_model,
)
