"""benchmarks/gpu_campaign.py end to end on this CPU with the tests' fake meter: rows appear as
they are measured, labelled fake, a second call resumes, a deadline stops it, export refuses
fake rows (the GPU run itself needs an NVIDIA GPU)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from tests.measure.fakes import FakeMeter

ROOT = Path(__file__).resolve().parents[2]
SPECS = [
    {
        "key": "a",
        "family": "mobilenet_v2",
        "depth": 10,
        "width": 0.25,
        "resolution": 32,
        "batch_size": 1,
    },
    {"key": "b", "family": "basic", "depth": 8, "width": 0.25, "resolution": 32, "batch_size": 2},
]


@pytest.fixture
def gc_mod(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "gpu_campaign", ROOT / "benchmarks/gpu_campaign.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(path: Path) -> list[dict]:
    return [json.loads(s) for s in path.read_text().splitlines()]


def test_measures_resumes_and_refuses_fake_export(gc_mod, tmp_path):
    kw = dict(
        precisions=("fp32",),
        device="cpu",
        meter_factory=FakeMeter,
        energy_min_window_s=0.01,
        idle_s=0.0,
    )
    t = gc_mod.measure(SPECS, tmp_path / "c", minutes=5, **kw)
    assert t["measured"] == 2 and t["ok"] == 2
    rows = _rows(tmp_path / "c" / "rows-fp32.jsonl")
    assert [r["family"] for r in rows] == ["mobilenet_v2", "basic"]
    assert {r["meter"] for r in rows} == {"fake-counter"}
    assert all(r["energy_j"] > 0 and r["latency_ms"] > 0 for r in rows)
    assert [r["spec_index"] for r in rows] == [0, 1]
    again = gc_mod.measure(SPECS, tmp_path / "c", minutes=5, **kw)  # resume: nothing left
    assert again["measured"] == 0 and len(_rows(tmp_path / "c" / "rows-fp32.jsonl")) == 2
    none = gc_mod.measure(SPECS, tmp_path / "d", minutes=0, **kw)  # deadline already passed
    assert none["measured"] == 0
    # a later sitting continues the draw from an earlier one's rows, gzipped as in
    # research/runs/passes
    kept = tmp_path / "kept"
    kept.mkdir()
    raw = (tmp_path / "c" / "rows-fp32.jsonl").read_bytes()
    (kept / "rows-fp32.jsonl.gz").write_bytes(gzip.compress(raw[: raw.index(b"\n") + 1]))
    later = gc_mod.measure(SPECS, tmp_path / "e", minutes=5, skip_in=(kept,), **kw)
    assert (
        later["measured"] == 1 and _rows(tmp_path / "e" / "rows-fp32.jsonl")[0]["family"] == "basic"
    )
    with pytest.raises(SystemExit, match="fake meter"):
        gc_mod.export([str(tmp_path / "c")], "here", out_dir=tmp_path)
    assert not list(tmp_path.glob("*.csv"))


def test_draw_interleaves_groups_under_the_flop_cap(gc_mod):
    specs = gc_mod.draw(per_family=2, resnet=2, max_gflops=50.0, seed=1)
    fams = {s["family"] for s in specs}
    assert {"basic", "bottleneck"} & fams and len(fams) >= 6
    assert len({s["key"] for s in specs}) == len(specs)
    assert all(s["batch_size"] in gc_mod.GPU_BATCHES for s in specs)


def test_no_gpu_exits_2(gc_mod, monkeypatch, tmp_path, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = gc_mod.main(["measure", "--out", str(tmp_path / "x"), "--specs", str(tmp_path / "s")])
    assert rc == 2 and "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_cli_first_n_specs_as_a_repeat_pass(gc_mod, tmp_path):
    """`measure --first 1` measures one spec (here on the CPU: no NVML, so no energy meter,
    and nvidia-smi's absence is written down, not fatal)."""
    specs = tmp_path / "specs.json.gz"
    specs.write_bytes(gzip.compress(json.dumps(SPECS).encode()))
    out = tmp_path / "rep"
    args = ["measure", "--out", str(out), "--specs", str(specs), "--minutes", "5",
            "--precisions", "fp32", "--device", "cpu", "--first", "1"]  # fmt: skip
    assert gc_mod.main(args) == 0
    rows = _rows(out / "rows-fp32.jsonl")
    assert [r["family"] for r in rows] == ["mobilenet_v2"] and rows[0]["energy_j"] is None
    assert (out / "nvidia_smi_before.csv").is_file()


def test_gpu_arrival_compares_the_same_configs_across_sittings(monkeypatch):
    """gpu_arrival's repeat comparison: sitting 2 / sitting 1 per target over the configs both
    measured (a config only one sitting has is left out)."""
    import pandas as pd

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("gpu_arrival", ROOT / "benchmarks/gpu_arrival.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    knobs = {"family": ["basic"] * 3, "depth": [8, 18, 34], "width": [1.0] * 3}
    knobs |= {"resolution": [32] * 3, "batch_size": [1] * 3}
    one = pd.DataFrame(knobs | {"latency_ms": [1.0, 2.0, 4.0], "energy_j": [1.0, 1.0, 1.0]})
    two = one.iloc[:2].assign(latency_ms=[1.5, 3.0], energy_j=[1.2, 1.4])
    one["peak_mem_mb"] = two["peak_mem_mb"] = 10.0
    got = mod.same_configs(two, one)
    assert got.loc["latency_ms", "rows"] == 2 and got.loc["latency_ms", "median"] == 1.5
    assert got.loc["energy_j", "median"] == pytest.approx(1.3)
    assert got.loc["peak_mem_mb", "median"] == 1.0
