"""datasets.reference_normalized: dividing the machine's momentary speed out of rows."""

from __future__ import annotations

import pandas as pd
import pytest

from carb_nas.datasets import reference_normalized
from carb_nas.errors import ConfigError


def _rows(refs):
    return pd.DataFrame(
        {
            "key": ["a", "b", "c"],
            "status": ["ok", "ok", "error"],
            "latency_ms": [10.0, 30.0, None],
            "latency_p90_ms": [11.0, 33.0, None],
            "reference_ms": refs,
        }
    )


def test_rows_and_their_ops_scale_to_the_typical_probe_time_and_keep_the_raw_figures():
    ops = pd.DataFrame({"key": ["a", "a", "b"], "measured_ms": [4.0, 6.0, 30.0]})
    rows, nops, typical = reference_normalized(_rows([0.5, 1.0, None]), ops)
    assert typical == pytest.approx(0.75)  # median of the ok rows' probe times
    # a ran while the machine was fast (0.5 ms probe): 10 ms is 15 ms at typical speed
    assert rows["latency_ms"].tolist()[:2] == pytest.approx([15.0, 22.5])
    assert rows["latency_p90_ms"].tolist()[:2] == pytest.approx([16.5, 24.75])
    assert rows["latency_ms_raw"].tolist()[:2] == [10.0, 30.0]
    assert nops["measured_ms"].tolist() == pytest.approx([6.0, 9.0, 22.5])
    assert nops["measured_ms_raw"].tolist() == [4.0, 6.0, 30.0]
    # a test set takes the training set's typical time, not its own
    again, _, t = reference_normalized(_rows([0.5, 1.0, None]), typical_ms=1.0)
    assert t == 1.0 and again["latency_ms"].tolist()[:2] == pytest.approx([20.0, 30.0])


def test_ops_take_the_probe_timed_around_their_profiled_runs_where_a_row_has_it():
    rows = _rows([0.5, 1.0, None]).assign(ops_reference_ms=[1.5, None, None])
    ops = pd.DataFrame({"key": ["a", "b"], "measured_ms": [3.0, 30.0]})
    out, nops, typical = reference_normalized(rows, ops)
    assert out["latency_ms"].tolist()[:2] == pytest.approx([15.0, 22.5])  # the timing probe
    # a's ops were profiled at 1.5 ms probe time (slow): 3 ms is 1.5 ms at typical speed;
    # b has no ops probe and falls back to its timing probe
    assert nops["measured_ms"].tolist() == pytest.approx([1.5, 22.5])


def test_rows_without_the_probe_are_refused_not_mixed():
    with pytest.raises(ConfigError, match="without a positive reference_ms"):
        reference_normalized(_rows([0.5, None, None]))
    with pytest.raises(ConfigError, match="without a reference_ms column"):
        reference_normalized(_rows([0.5, 1.0, None]).drop(columns="reference_ms"))


def test_drop_unprobed_leaves_out_rows_without_the_probe_and_their_ops():
    ops = pd.DataFrame({"key": ["a", "b"], "measured_ms": [4.0, 30.0]})
    rows, nops, typical = reference_normalized(_rows([0.5, None, None]), ops, drop_unprobed=True)
    assert rows["key"].tolist() == ["a", "c"]  # b had no probe time; c is an error row
    assert typical == pytest.approx(0.5) and rows["latency_ms"].iloc[0] == pytest.approx(10.0)
    assert nops["key"].tolist() == ["a"]
    with pytest.raises(ConfigError, match="no row timed the machine-speed probe"):
        reference_normalized(_rows([None, None, None]), ops, drop_unprobed=True)
