"""Helpers shared by the CLI modules."""

from __future__ import annotations

import json
from typing import Any

import click

from carb_nas._json import jsonable as _jsonable


def echo_json(value: Any) -> None:
    """Print strict JSON (NaN and inf become null)."""
    click.echo(json.dumps(_jsonable(value), indent=None, allow_nan=False))
