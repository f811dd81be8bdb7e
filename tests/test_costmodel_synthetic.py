"""The synthetic-table generator (tests/synthetic.py) is itself sane."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.synthetic import SYNTHETIC_LABEL, _standin_features, synthetic_dataset


def test_synthetic_rows_are_labelled_and_plausible():
    df = synthetic_dataset(300, seed=1)
    assert (df["meter"] == SYNTHETIC_LABEL).all()
    assert (df[["peak_mem_mb", "latency_ms", "energy_j"]] > 0).all().all()
    # bigger batches cost more for the same architecture
    r = df.groupby("batch_size")["latency_ms"].median()
    assert r.iloc[-1] > r.iloc[0]


def test_standin_features_scale_with_batch():
    cfg = pd.DataFrame(
        [
            {
                "family": "basic",
                "depth": 18,
                "width": 1.0,
                "resolution": 224,
                "batch_size": b,
                "precision": "fp32",
                "runtime": "torch",
            }
            for b in (1, 2)
        ]
    )
    f = _standin_features(cfg)
    # resnet18 at 224 px: 1.82 GMACs, 11.7 M params (torchvision)
    assert f["flops"].iloc[0] / 2 == pytest.approx(1.82e9, rel=0.01)
    assert f["params"].iloc[0] == pytest.approx(11.69e6, rel=0.01)
    assert f["flops"].iloc[1] == pytest.approx(2 * f["flops"].iloc[0])
