"""Which machine measured a row: one notion for every check that pairs or mixes measurements.

Per-op costs, prior pairs and passes only combine when they describe the same CPU/GPU. A
row's platform fingerprint records the device name and, for CPUs, an identity record (vendor,
family, model, stepping, microcode, cache, ISA); the software stack and the protocol are not
the machine. (A calibration's cache key, ``carb_nas.calibrate.machine_key``, hashes machine and
stack together on purpose: a new torch needs a new calibration, not a new CPU.)
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

__all__ = ["machine_identity", "machines"]


def machine_identity(fingerprint: Any) -> str:
    """The machine one fingerprint (a dict or its JSON text) names, as a comparable string:
    its device name and CPU identity record. A damaged or missing fingerprint names nothing
    (``[null, null]``), so it never matches a real machine by accident."""
    fp = fingerprint
    if isinstance(fp, str):
        try:
            fp = json.loads(fp)
        except ValueError:
            fp = None
    fp = fp if isinstance(fp, dict) else {}
    return json.dumps([fp.get("device_name"), fp.get("cpu")], sort_keys=True)


def machines(rows: pd.DataFrame) -> set[str]:
    """The machines a rows table was measured on (``machine_identity`` of each distinct
    fingerprint). A row without a readable fingerprint counts by its ``device_name`` column,
    the only machine fact a user's hand-made table may carry."""
    prints = rows["fingerprint"] if "fingerprint" in rows else pd.Series(None, index=rows.index)
    names = rows["device_name"] if "device_name" in rows else pd.Series(None, index=rows.index)
    out = set()
    for text, name in set(zip(prints.astype(object), names.astype(object))):
        ident = machine_identity(text)
        if ident == machine_identity(None):
            ident = machine_identity({"device_name": None if pd.isna(name) else str(name)})
        out.add(ident)
    return out
