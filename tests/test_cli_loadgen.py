"""``carb-nas loadgen``: a tiny run, resume, and every bad input as one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli

pytest.importorskip("mlperf_loadgen")

CFG = "family=basic,depth=8,width=0.1,resolution=32"
FAST = ["--quick", "--min-duration-ms", "200", "--min-query-count", "16"]


def _run(*args):
    return CliRunner().invoke(cli, list(args), obj={"debug": False})


def test_loadgen_runs_resumes_and_reports_invalid(tmp_path):
    out = tmp_path / "lg"
    r = _run(
        "loadgen",
        "--config",
        CFG,
        "--scenario",
        "single-stream",
        "--scenario",
        "multi-stream",
        "--threads",
        "1",
        "-o",
        str(out),
        *FAST,
        "--json",
    )
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["done"] == 2 and summary["measured_now"] == 2
    assert "warning: LoadGen result is INVALID" in r.stderr  # multi-stream, 16 queries
    r2 = _run(
        "loadgen",
        "--config",
        CFG,
        "--scenario",
        "single-stream",
        "--threads",
        "1",
        "-o",
        str(out),
        *FAST,
        "--json",
    )
    assert r2.exit_code == 0 and json.loads(r2.stdout)["measured_now"] == 0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--runtime", "openvino", "--precision", "int8-dynamic"], "unsupported precision"),
        (["--runtime", "tensorrt"], "unknown runtime"),
        (["--min-duration-ms", "500", "--max-duration-ms", "10"], "max_duration_ms"),
        (["--samples-per-query", "3"], "only multi-stream"),
        (["--config", "family=basic,depth=8"], "incomplete --config"),
        (["--config", "nonsense"], "malformed --config"),
        (["--max-configs", "0"], "--max-configs"),
        (["--model-spec", "tests.user_nets:nope", "--input-shape", "1,3,8,8"], "cannot find"),
        (["--model-spec", "tests.user_nets:make_cnn"], "missing --input-shape"),
        (["--input-shape", "1,3,8,8"], "without --model-spec"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, match):
    out = tmp_path / "lg"
    base = ["loadgen", "--scenario", "single-stream", "-o", str(out)]
    if not any(a.startswith("--config") for a in args):
        base += ["--config", CFG]
    r = _run(*base, *args)
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and match in lines[0]
    assert "Traceback" not in r.output
    assert not out.exists()


def test_loadgen_of_a_users_own_network(tmp_path, monkeypatch):
    """`--model-spec`: a factory's network under the scenarios (issue 15: MODEL_SPEC|CONFIGS|
    SPACE); its batch dimension is the scenario's, its kwargs are in the row."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    out = tmp_path / "lg"
    spec = ["--model-spec", "tests.user_nets:make_cnn", "--kwargs", '{"channels": 8}',
            "--input-shape", "4,3,16,16"]  # fmt: skip
    r = _run("loadgen", *spec, "--scenario", "single-stream", "--threads", "1", "-o", str(out),
             *FAST, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["done"] == 1
    (row,) = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert row["status"] == "ok" and row["latency_p90_ms"] > 0
    assert row["model_spec"] == "tests.user_nets:make_cnn" and row["kwargs"] == '{"channels": 8}'
    assert row["input_shape"] == [3, 16, 16]
    # a factory that cannot build on the meta device is built for real, not refused
    r = _run("loadgen", "--model-spec", "tests.user_nets:needs_real_tensors", "--input-shape",
             "1,3,16,16", "--scenario", "single-stream", "--threads", "1", "-o", str(out),
             *FAST, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["done"] == 1


def test_calibration_of_the_wrong_shape_writes_nothing(tmp_path):
    calib = tmp_path / "c.npy"
    np.save(calib, np.zeros((4, 3, 16, 16), np.float32))
    before = calib.read_bytes()
    out = tmp_path / "lg"
    r = _run(
        "loadgen",
        "--config",
        CFG,
        "--runtime",
        "onnxruntime",
        "--precision",
        "int8",
        "--scenario",
        "offline",
        "--quantization-data",
        str(calib),
        "-o",
        str(out),
    )
    assert r.exit_code == 1 and "wrong shape" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not out.exists() and calib.read_bytes() == before


def test_help_has_one_example():
    r = _run("loadgen", "--help")
    assert r.exit_code == 0 and r.output.count("carb-nas loadgen") >= 1
