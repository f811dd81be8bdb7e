"""Typed errors. Each also inherits the matching builtin so callers can catch either.

Every message says what was wrong, what was expected, what was received and how to fix it.
The CLI prints ``str(error)`` on one line and exits with code 1 (tracebacks only with --debug).
"""

from __future__ import annotations

__all__ = [
    "CarbNasError",
    "SpaceError",
    "ConfigError",
    "InputFileError",
    "MissingFileError",
    "MeasurementError",
    "MeterUnavailableError",
    "DeviceUnavailableError",
    "CampaignError",
    "ModelError",
    "BudgetError",
    "StorageError",
    "RemovedNameError",
    "removed_name",
]


class CarbNasError(Exception):
    """Base of every error carb_nas raises on purpose."""


class SpaceError(CarbNasError, ValueError):
    """A search-space file is malformed or declares values outside what is allowed."""


class ConfigError(CarbNasError, ValueError):
    """A single configuration (or a configs table) holds an invalid value."""


class InputFileError(CarbNasError, ValueError):
    """An input file exists but its content is not what was expected."""


class MissingFileError(CarbNasError, FileNotFoundError):
    """An input file or directory does not exist."""


class MeasurementError(CarbNasError, RuntimeError):
    """A measurement could not be taken."""


class MeterUnavailableError(MeasurementError):
    """An energy meter was asked for but cannot be read on this machine."""


class DeviceUnavailableError(MeasurementError):
    """A device (e.g. CUDA) was asked for but is not present."""


class CampaignError(CarbNasError, ValueError):
    """A profiling campaign store does not match the request or is corrupted."""


class ModelError(CarbNasError, ValueError):
    """A cost model cannot be trained, loaded or applied to the given data."""


class BudgetError(CarbNasError, ValueError):
    """A budget names an unknown target or an invalid limit."""


class StorageError(CarbNasError, ValueError):
    """An Optuna storage URL does not open, or holds a study that does not match the request."""


class RemovedNameError(CarbNasError, ImportError):
    """A name of an earlier carb_nas version was asked for; the message names its 1.0 spelling.

    An ImportError, not an AttributeError: ``from module import name`` replaces an
    AttributeError by its own message, and this one says what to use instead."""


def removed_name(module: str, name: str, renamed: dict[str, str]) -> Exception:
    """What a module's ``__getattr__`` raises for ``name``: a :class:`RemovedNameError` naming
    the new spelling when ``renamed`` has it, Python's own AttributeError otherwise."""
    if name in renamed:
        return RemovedNameError(
            f"{module}.{name} was removed in carb_nas 1.0: expected {renamed[name]}, got the "
            f"old name {name!r}. Use the new spelling (CHANGELOG.md lists every change)."
        )
    return AttributeError(f"module {module!r} has no attribute {name!r}")


def describe(what: str, expected: str, got: object, fix: str) -> str:
    """Format the four parts every carb_nas error message carries."""
    return f"{what}: expected {expected}, got {got!r}. {fix}"
