"""benchmarks/node_data.py's torch lines: what a real ops campaign of a ResNet config ships is
what costmodel.torch_measured_table reads, op for op the config's node table."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb_nas.costmodel._nodes import node_table, torch_measured_table
from carb_nas.errors import ConfigError
from carb_nas.measure.campaign import run_ops_campaign
from carb_nas.space import CONFIG_COLUMNS, Config
from tests.measure.test_ops_measure import QUICK

ROOT = Path(__file__).resolve().parents[2]


def _node_data():
    spec = importlib.util.spec_from_file_location("node_data", ROOT / "benchmarks/node_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shipped_torch_lines_read_back_as_the_configs_node_table(tmp_path):
    mod = _node_data()
    config = Config("basic", 8, 0.25, 32, 2, "fp32", "torch")
    spec = {"key": config.key, **{c: getattr(config, c) for c in CONFIG_COLUMNS}}
    assert run_ops_campaign([spec], mod._build, tmp_path, protocol=QUICK, profiled_runs=1) == 1
    lines = mod.torch_lines(tmp_path)
    assert len(lines) == 1 and lines[0]["key"] == config.key and lines[0]["latency_ms"] > 0
    measured = torch_measured_table(lines)
    cols = ["op", "n", "c", "h", "co", "ho", "k", "g"]
    expected = node_table([config], "cpu/torch/fp32")[cols]
    got = measured[cols]
    pd.testing.assert_frame_equal(
        got.sort_values(cols).reset_index(drop=True).astype(np.int64),
        expected.sort_values(cols).reset_index(drop=True).astype(np.int64),
    )
    assert (measured["us"] > 0).all()


def test_a_larger_draw_extends_a_smaller_one_and_leaves_the_pools_out():
    # a campaign grows in place (resumable by key) only if the first n configs stay the same
    mod = _node_data()
    small, large = mod.draw("onnxruntime", 30, 0), mod.draw("onnxruntime", 90, 0)
    pd.testing.assert_frame_equal(small, large.iloc[:30].reset_index(drop=True))
    stem = "cpu_onnxruntime_fp32"
    pooled = pd.concat([pd.read_parquet(p / f"{stem}_pass1.parquet") for p in mod.POOLS])
    seen = set(pooled[mod.KNOBS].astype(str).itertuples(index=False, name=None))
    drawn = set(large[mod.KNOBS].astype(str).itertuples(index=False, name=None))
    assert mod.POOLS and not drawn & seen


def test_a_draw_larger_than_the_dataset_and_an_empty_campaign_are_refused(tmp_path):
    mod = _node_data()
    with pytest.raises(ConfigError, match="invalid --n .* got 999999"):
        mod.draw("onnxruntime", 999999, 0)
    (tmp_path / "nodes.jsonl").write_text('{"key": "a", "status": "error"}\n')
    args = argparse.Namespace(what="ship", dir=tmp_path, runtime="onnxruntime", n=1, seed=0)
    with pytest.raises(ConfigError, match="nothing measured"):
        mod.run(args)
