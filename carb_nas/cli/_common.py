"""Helpers shared by the CLI modules."""

from __future__ import annotations

import json
import math
from typing import Any

import click
import numpy as np


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def echo_json(value: Any) -> None:
    """Print strict JSON (NaN and inf become null)."""
    click.echo(json.dumps(_jsonable(value), indent=None, allow_nan=False))
