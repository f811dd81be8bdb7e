"""The runtime x precision x scenario table (arXiv:2303.05016) from a real (tiny) LoadGen run
directory; the CLI's --loadgen."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from carb_nas.errors import InputFileError
from carb_nas.measure.loadgen import LoadGenSettings, Workload, run_loadgen_campaign
from carb_nas.reports import characterize_loadgen, loadgen_markdown
from carb_nas.space import Config

pytest.importorskip("mlperf_loadgen")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("lg")
    w = Workload.from_config(Config("basic", 8, 0.1, 32, 1))
    fast = {"min_duration_ms": 150, "min_query_count": 16}
    for precision in ("fp32", "int8"):
        run_loadgen_campaign(
            [w],
            out,
            "onnxruntime",
            precision,
            [LoadGenSettings(s, "quick", **fast) for s in ("single-stream", "offline")],
            threads=1,
        )
    return out


def test_table_speedups_and_fastest(run_dir):
    r = characterize_loadgen(run_dir)
    assert r["runs"] == 4 and r["ok"] == 4
    (model,) = r["table"]
    cell = r["table"][model]["onnxruntime/int8"]
    assert cell["single-stream"]["value"] > 0 and cell["offline"]["value"] > 0
    assert 0 <= cell["top1_agreement"] <= 1
    (sp,) = r["speedups"]
    assert sp["precision"] == "int8" and sp["offline_speedup"] > 0
    assert {f["scenario"] for f in r["fastest"]} == {"single-stream", "offline"}
    md = loadgen_markdown(r, "## Reading\n\ntext")
    assert "| onnxruntime/int8 |" in md and md.rstrip().endswith("text")


def test_cli_writes_markdown_png_json(run_dir, tmp_path):
    md = tmp_path / "docs" / "seed.md"
    res = CliRunner().invoke(
        cli,
        ["report", "characterize", "--loadgen", str(run_dir), "--markdown", str(md)],
        obj={"debug": False},
    )
    assert res.exit_code == 0, res.output
    assert md.exists() and md.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads(md.with_suffix(".json").read_text())["ok"] == 4


def test_empty_directory_is_one_line(tmp_path):
    with pytest.raises(InputFileError, match="no LoadGen results"):
        characterize_loadgen(tmp_path)
    res = CliRunner().invoke(
        cli,
        ["report", "characterize", "--loadgen", str(tmp_path), "cpu/torch/fp32"],
        obj={"debug": False},
    )
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1
