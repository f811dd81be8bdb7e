"""benchmarks/repeatability.py: two passes of the same configs, raw and probe-normalized
(hand-written FAKE campaign rows: the figures are made up, the arithmetic is checked)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def rep():
    spec = importlib.util.spec_from_file_location(
        "repeatability", ROOT / "benchmarks/repeatability.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pass(path: Path, rows: list[tuple[str, float, float]]) -> str:
    path.mkdir()
    with open(path / "rows.jsonl", "w") as f:
        for key, ms, ref in rows:
            rec = {"key": key, "family": "fake_net", "status": "ok", "latency_ms": ms,
                   "op_sum_ms": ms * 0.9, "reference_ms": ref}  # fmt: skip
            f.write(json.dumps(rec) + "\n")
    return str(path)


def test_a_slow_minute_the_probe_saw_is_divided_out(rep, tmp_path, monkeypatch, capsys):
    # c and d ran 30 % slower in the second pass, and so did the probe beside them; e moved
    # by itself (the probe did not), so normalizing cannot help it
    a = _pass(tmp_path / "a", [("c", 10.0, 1.0), ("d", 20.0, 1.0), ("e", 5.0, 1.0)])
    b = _pass(tmp_path / "b", [("c", 13.0, 1.3), ("d", 26.0, 1.3), ("e", 6.0, 1.0)])
    monkeypatch.setattr(sys, "argv", ["repeatability.py", a, b])
    rep.main()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    got = dict(kv.split("=") for kv in last.split())
    assert got["n"] == "3"
    assert float(got["repeat_within10_raw"]) == pytest.approx(0.0)  # +30 %, +30 %, +20 %
    # e stays +20 %: the probe did not see its slowdown
    assert float(got["repeat_within10_normalized"]) == pytest.approx(2 / 3, abs=1e-3)
    assert float(got["repeat_mape_raw"]) == pytest.approx(100 * (0.3 + 0.3 + 0.2) / 3, abs=0.01)


def test_passes_with_no_config_in_common_are_one_clear_line(rep, tmp_path, monkeypatch):
    a = _pass(tmp_path / "a", [("c", 10.0, 1.0)])
    b = _pass(tmp_path / "b", [("d", 10.0, 1.0)])
    monkeypatch.setattr(sys, "argv", ["repeatability.py", a, b])
    with pytest.raises(SystemExit, match="no config in both passes"):
        rep.main()


def test_a_pass_with_no_measured_row_is_one_clear_line(rep, tmp_path, monkeypatch):
    a = _pass(tmp_path / "a", [("c", 10.0, 1.0)])
    empty = tmp_path / "b"
    empty.mkdir()
    (empty / "rows.jsonl").write_text("")  # started, killed before its first row
    monkeypatch.setattr(sys, "argv", ["repeatability.py", a, str(empty)])
    with pytest.raises(SystemExit, match="holds no measured row"):
        rep.main()


def test_profile_campaigns_without_op_sums_are_compared_too(rep, tmp_path, monkeypatch, capsys):
    # `carb-nas profile` campaigns (OpenVINO, ...) hold no rows.jsonl and no op_sum_ms: read
    # through campaign_rows, the latency part alone
    import pandas as pd

    import carb_nas.measure.campaign as measure

    fake = {  # FAKE rows: the second pass ran 5 % and 40 % slower, its probe 40 % slower on f
        "a": [("f", 10.0, 1.0), ("g", 4.0, 1.0)],
        "b": [("f", 14.0, 1.4), ("g", 4.2, 1.0)],
    }

    def campaign_rows(path):
        rows = fake[Path(path).name]
        return pd.DataFrame(
            [
                {
                    "key": k,
                    "family": "fake_net",
                    "status": "ok",
                    "latency_ms": ms,
                    "reference_ms": ref,
                }
                for k, ms, ref in rows
            ]  # fmt: skip
        )

    monkeypatch.setattr(measure, "campaign_rows", campaign_rows)
    for name in fake:
        (tmp_path / name).mkdir()
    monkeypatch.setattr(sys, "argv", ["repeatability.py", str(tmp_path / "a"), str(tmp_path / "b")])
    rep.main()
    out = capsys.readouterr().out
    got = dict(kv.split("=") for kv in out.strip().splitlines()[-1].split())
    assert float(got["repeat_within10_raw"]) == pytest.approx(0.5)  # g within, f +40 %
    assert float(got["repeat_within10_normalized"]) == pytest.approx(1.0)
    assert "op_sum" not in out
