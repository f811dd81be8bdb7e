"""Facts of the machine the tests run on (not test doubles)."""

from __future__ import annotations


def thp_always() -> bool:
    """Transparent huge pages for every mapping: large buffers then fault per 2 MiB, not 4 KiB."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[always]" in f.read()
    except OSError:
        return False
