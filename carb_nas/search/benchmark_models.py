"""Training rows and cost models for the screening and search benchmarks.

Used by ``benchmarks/screening.py`` and ``benchmarks/search_quality.py`` (which import only the
package); a benchmark of your own can use the same models.

Training rows come from the first source that has them, and every run says which:

1. the dataset shipped for the platform (``carb_nas.datasets.load_dataset``);
2. a profiling campaign under ``campaigns/<platform with / -> _>/`` (real measurements);
3. SYNTHETIC rows: a closed-form CPU-like formula over the real architecture features plus
   seeded noise, labelled ``meter="synthetic"`` -- never measurements, only so the benchmark
   runs on a fresh checkout.

Trained models are cached under ``ROOT/out/benchmark_models/`` (``ROOT``: the checkout the
benchmark runs from, the working directory by default) keyed by platform, preset and a hash of
the training rows, so reruns skip training.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["be_nice", "synthetic_rows", "training_rows", "trained_model", "TARGET_COLUMNS"]

TARGET_COLUMNS = ("peak_mem_mb", "energy_j", "latency_ms")


def be_nice(level: int = 10) -> None:
    """Lower this process's CPU priority (the machine is shared with profiling campaigns)."""
    try:
        os.nice(level)
    except OSError:
        pass


def synthetic_rows(platform: str, n: int = 3000, seed: int = 0, space: str = "cpu") -> pd.DataFrame:
    """SYNTHETIC rows (not measurements) for ``platform``: latency and peak memory from a
    CPU-like formula (ONNX Runtime ~1.6x faster) with multiplicative noise."""
    from carb_nas.features import compute_features
    from carb_nas.space import load_space

    device, runtime, precision = platform.split("/")
    rng = np.random.default_rng(seed)
    grid = load_space(space).grid()
    cfg = grid.iloc[np.sort(rng.choice(len(grid), size=min(n, len(grid)), replace=False))]
    cfg = cfg.reset_index(drop=True).assign(runtime=runtime, precision=precision)
    f = compute_features(cfg)
    b = cfg["batch_size"].to_numpy(dtype=float)
    speed = 25e9 * (1 - 0.6 * np.exp(-b / 8)) * (1.6 if runtime == "onnxruntime" else 1.0)
    lat = 0.1 + 1e3 * f["flops"].to_numpy() / speed + f["act_mb_total"].to_numpy() / 40
    noise = np.where(b <= 8, 0.05, 0.02)
    out = cfg.copy()
    out["latency_ms"] = lat * np.exp(rng.normal(0, noise))
    out["peak_mem_mb"] = (2 + f["tensor_peak_mb"].to_numpy()) * np.exp(
        rng.normal(0, 0.01, len(cfg))
    )
    out["status"] = "ok"
    out["meter"] = "synthetic"
    out["platform"] = platform
    return out


def training_rows(
    platform: str, min_rows: int = 300, root: Path | None = None
) -> tuple[pd.DataFrame, str]:
    """(rows with status ok, where they came from) for ``platform``; campaigns are looked for
    under ``root/campaigns`` (``root``: the working directory by default)."""
    root = Path.cwd() if root is None else Path(root)
    try:
        from carb_nas.datasets import load_dataset

        rows = load_dataset(platform, ok_only=True)
        if len(rows) >= min_rows:
            return rows, f"shipped dataset {platform} ({len(rows)} measured rows)"
    except Exception:  # noqa: BLE001 - not shipped (yet)
        pass
    camp = root / "campaigns" / platform.replace("/", "_")
    if (camp / "journal.log").exists():
        try:
            from carb_nas.measure import campaign_rows

            rows = campaign_rows(camp, statuses=["ok"])
            if len(rows) >= min_rows:
                return rows, f"campaign {camp.relative_to(root)} ({len(rows)} measured rows)"
        except Exception:  # noqa: BLE001 - a campaign being written may not open yet
            pass
    rows = synthetic_rows(platform)
    return rows, f"SYNTHETIC rows for {platform} ({len(rows)} rows; no measurements found)"


def trained_model(
    platform: str, preset: str = "carb", log: Callable[[str], Any] = print, root: Path | None = None
) -> tuple[Any, str]:
    """(a CostModel for ``platform`` trained on ``training_rows``, where its rows came from),
    cached under ``root/out/benchmark_models`` (``root``: the working directory by default)."""
    from carb_nas.costmodel import CostModel, frame_sha256, model_inputs
    from carb_nas.space import REQUIRED_COLUMNS

    root = Path.cwd() if root is None else Path(root)
    rows, source = training_rows(platform, root=root)
    targets = [
        t
        for t in TARGET_COLUMNS
        if t in rows and pd.to_numeric(rows[t], errors="coerce").notna().all()
    ]
    key = frame_sha256(rows[[*REQUIRED_COLUMNS, *targets]].reset_index(drop=True))[:12]
    path = root / "out" / "benchmark_models" / f"{platform.replace('/', '_')}_{preset}_{key}"
    if (path / "manifest.json").exists():
        log(f"  {platform}: cached {preset} model ({source})")
        return CostModel.load(path), source
    log(f"  {platform}: training the {preset} preset on {source} ...")
    t0 = time.perf_counter()
    model = CostModel(preset=preset, n_jobs=1).fit(  # 1 thread: OpenMP spins on busy cores
        model_inputs(rows), rows[targets].astype(float), platform=platform
    )
    model.save(path)
    log(f"  {platform}: trained in {time.perf_counter() - t0:.0f} s")
    return model, source
