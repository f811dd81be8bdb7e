"""CLI commands of this stage (filled in by the stage's issue)."""

from __future__ import annotations

COMMANDS: list = []
