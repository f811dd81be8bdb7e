"""Interleaved passes: the fastest of K measurements of each config, for shared machines.

On a shared machine the slowdown that other tenants cause comes and goes over seconds to
minutes and only ever adds time, so one measurement of a config (the median of its timed runs)
moves a lot from one pass to the next while the fastest of a few passes, spread out in time,
does not; the fastest of 3 repeats far better than one pass, or the median or mean of 3
(docs/measurement.md, "How well the machine repeats itself"). :func:`profile_passes` measures
the configs in ``passes`` rounds (each config once per round, so the repeats of a config are
spread over the whole job) and keeps, per config, its fastest ok row: a real row, whose
``protocol_params`` records the passes and every pass's latency.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from carb_nas.errors import ConfigError
from carb_nas.measure._profiler import frozen_heap

__all__ = ["check_passes", "fastest_of_passes", "pass_spread_pct", "profile_passes"]


def check_passes(passes: Any) -> int:
    """``passes`` as an int >= 1, or ConfigError."""
    if isinstance(passes, bool) or not isinstance(passes, (int, np.integer)) or passes < 1:
        raise ConfigError(
            f"bad passes: expected an integer >= 1 (measurements of each config, the fastest "
            f"kept), got {passes!r}. Use 1 on a quiet machine, 3 on a shared one."
        )
    return int(passes)


def fastest_of_passes(rows_by_pass: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per config (position ``i`` in every pass), its ok row with the lowest ``latency_ms``
    (the first pass's row when none is ok; a config missing from later passes keeps what it
    has). ``protocol_params`` of the kept row gains ``passes`` and ``pass_latency_ms``."""
    if not rows_by_pass:
        return []
    out = []
    for i in range(len(rows_by_pass[0])):
        got = [p[i] for p in rows_by_pass if i < len(p)]
        lat = [_latency(r) for r in got]
        ok = [j for j, r in enumerate(got) if r.get("status") == "ok" and np.isfinite(lat[j])]
        best = dict(got[min(ok, key=lambda j: lat[j])] if ok else got[0])
        params = best.get("protocol_params")
        try:
            doc = json.loads(params) if isinstance(params, str) and params else {}
        except ValueError:
            doc = {}
        doc = doc if isinstance(doc, dict) else {"protocol_params": doc}
        doc["passes"] = len(got)
        doc["pass_latency_ms"] = [None if not np.isfinite(v) else round(v, 6) for v in lat]
        best["protocol_params"] = json.dumps(doc, sort_keys=True)
        out.append(best)
    return out


def pass_spread_pct(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """``100 * |second / first - 1|`` of every row kept by :func:`fastest_of_passes` whose
    first two passes were measured ok: how far this machine's timings move on their own."""
    out = []
    for r in rows:
        try:
            lat = json.loads(r.get("protocol_params") or "{}").get("pass_latency_ms") or []
        except (ValueError, AttributeError):
            continue
        if len(lat) >= 2 and lat[0] and lat[1]:
            out.append(100 * abs(float(lat[1]) / float(lat[0]) - 1))
    return np.asarray(out, dtype=float)


def profile_passes(
    profiler: Any,
    configs: Sequence[Any],
    passes: int = 3,
    progress: Callable[[int, int, Any], None] | None = None,
) -> list[dict[str, Any]]:
    """Measure ``configs`` in ``passes`` interleaved rounds with ``profiler.profile`` and keep
    each config's fastest ok row (:func:`fastest_of_passes`). ``progress(i, total, config)``
    before each measurement (``i`` counts from 0 over all rounds). ``passes=1`` is one plain
    measurement per config."""
    passes = check_passes(passes)
    configs = list(configs)
    total = passes * len(configs)
    rounds: list[list[dict[str, Any]]] = []
    with frozen_heap():
        for p in range(passes):
            rows = []
            for i, config in enumerate(configs):
                if progress is not None:
                    progress(p * len(configs) + i, total, config)
                rows.append(profiler.profile(config))
            rounds.append(rows)
    return fastest_of_passes(rounds) if passes > 1 else rounds[0]


def _latency(row: dict[str, Any]) -> float:
    try:
        v = float(row.get("latency_ms"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")
    return v if v > 0 else float("nan")
