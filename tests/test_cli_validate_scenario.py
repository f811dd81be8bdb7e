"""``carb-nas loadgen --model`` (a shortlist under one MLPerf LoadGen scenario) and
``carb-nas validate`` on any runtime and precision.

Tiny REAL CPU measurements (basic-8 w0.1 and mobilenet_v2 w0.35 at 32 px, LoadGen's quick
rules shortened further); the cost model is a fast fit on SYNTHETIC rows, so only the
bookkeeping is checked: LoadGen's figure, the budget, pass, VALID/INVALID, predicted vs
measured, kept logs, and one line per bad input with nothing left behind.
"""

from __future__ import annotations

import builtins
import importlib.util
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.budgets import SCENARIO_BUDGETS, check_scenario_budgets, parse_budgets
from carb_nas.cli import cli
from carb_nas.cli._options import PLATFORM_PRECISIONS
from carb_nas.errors import BudgetError, ConfigError
from carb_nas.measure import SUPPORTED

HAVE_LOADGEN = importlib.util.find_spec("mlperf_loadgen") is not None
needs_loadgen = pytest.mark.skipif(not HAVE_LOADGEN, reason="loadgen extra not installed")

BASIC = {"family": "basic", "depth": 8, "width": 0.1, "resolution": 32, "batch_size": 1}
MOBILE = {"family": "mobilenet_v2", "depth": 17, "width": 0.35, "resolution": 32, "batch_size": 2}
NO_ONNX = {"family": "vgg", "depth": 11, "width": 0.1, "resolution": 64, "batch_size": 1}
FAST = ["--quick", "--min-duration-ms", "200", "--min-query-count", "16", "--threads", "1"]


def _pareto(tmp_path, *rows):
    path = tmp_path / "pareto.csv"
    pd.DataFrame(list(rows)).to_csv(path, index=False)
    return path


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], obj={"debug": False})


def _one_line_error(r, match, progress=False):
    """Exit 1 and one ``error:`` line on stderr (after progress lines when ``progress``)."""
    assert r.exit_code == 1, r.output
    lines = r.stderr.strip().splitlines()
    if progress:
        assert not any(ln.startswith("error") for ln in lines[:-1]), r.stderr
        lines = lines[-1:]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert match in lines[0], lines[0]
    assert "Traceback" not in r.output


# -- help: what SUPPORTED holds ---------------------------------------------------------------
def test_help_lists_every_supported_runtime_and_precision():
    assert PLATFORM_PRECISIONS == SUPPORTED  # the CLI's copy (no torch import for --help)
    for command in ("profile", "validate", "loadgen"):
        text = " ".join(_run(command, "--help").output.split())
        for (kind, runtime), precisions in SUPPORTED.items():
            if command == "loadgen" and kind != "cpu":
                continue
            assert runtime in text
            assert f"{runtime} {'/'.join(precisions)}" in text, (command, runtime)


# -- which budget belongs to which scenario -------------------------------------------------
def test_each_scenario_takes_its_own_budget_only():
    for scenario, metric in SCENARIO_BUDGETS.items():
        check_scenario_budgets(parse_budgets([f"{metric}=5"]), scenario)
    with pytest.raises(BudgetError, match="use --scenario multi-stream") as e:
        check_scenario_budgets(parse_budgets(["latency_p99_ms=5"]), "single-stream")
    assert "\n" not in str(e.value)
    with pytest.raises(BudgetError, match="drop --scenario to check latency_ms"):
        check_scenario_budgets(parse_budgets(["latency_ms=5"]), "offline")


# -- measured under a scenario ----------------------------------------------------------------
@needs_loadgen
@pytest.mark.slow  # ~6-11 s here: two networks prepared and run, then resumed twice
def test_single_stream_reports_figure_budget_pass_validity_and_prediction(model_dirs, tmp_path):
    pareto = _pareto(tmp_path, BASIC, {**BASIC, "batch_size": 4}, MOBILE)
    out = tmp_path / "lg"
    args = ["loadgen", pareto, "--model", model_dirs[0], "--scenario", "single-stream"]
    args += ["--budget", "latency_p90_ms=1000", "-o", out, *FAST]
    r = _run(*args, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["scenario"] == "single-stream" and doc["metric"] == "latency_p90_ms"
    assert doc["settings"]["rules"] == "quick" and doc["n"] == 2  # batch 1 and 4: one network
    for item in doc["validated"]:
        assert item["status"] == "ok" and item["batch_size"] == 1
        assert item["measured"] > 0 and item["predicted"] > 0
        assert item["ratio"] == pytest.approx(item["measured"] / item["predicted"])
        assert item["budget"] == 1000 and item["within_budget"] is True
        assert item["result_validity"] in ("VALID", "INVALID")
        assert item["valid"] == (item["result_validity"] == "VALID")
    assert doc["passed"] == 2
    runs = sorted((out / "loadgen" / "logs").iterdir())  # LoadGen's own logs, kept
    assert len(runs) == 2 and (runs[0] / "mlperf_log_detail.txt").is_file()
    assert {"validation.json", "validation.csv", "predicted_vs_measured.png"} <= {
        p.name for p in out.iterdir()
    }
    # the same command resumes: nothing is measured again, the same figures come back
    again = json.loads(_run(*args, "--json").stdout)
    assert [i["measured"] for i in again["validated"]] == [i["measured"] for i in doc["validated"]]
    # a budget below the measured figure fails, and the text report says so per config
    low = min(i["measured"] for i in doc["validated"]) / 2
    args[args.index("latency_p90_ms=1000")] = f"latency_p90_ms={low}"
    text = _run(*args).stdout
    assert "budget latency_p90_ms <=" in text and "0/2 pass" in text
    assert text.count(" NO ") >= 2


@needs_loadgen
def test_invalid_run_is_a_warning_and_a_column_and_keeps_its_row(model_dirs, tmp_path):
    pareto = _pareto(tmp_path, BASIC)
    out = tmp_path / "lg"
    r = _run(
        "loadgen", pareto, "--model", model_dirs[0], "--scenario", "multi-stream",
        "--budget", "latency_p99_ms=1000", "-o", out, *FAST,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "warning: LoadGen result is INVALID for basic-8" in r.stdout  # p99 needs >= 662
    assert "early stopping" in r.stdout
    row = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("basic")]
    assert len(row) == 1 and row[0].rstrip().endswith("INVALID")
    [run] = (out / "loadgen" / "logs").iterdir()  # the INVALID run's logs are kept too
    assert (run / "mlperf_log_summary.txt").is_file()


@needs_loadgen
def test_offline_throughput_is_a_lower_limit(model_dirs, tmp_path):
    pareto = _pareto(tmp_path, BASIC)
    args = ["loadgen", pareto, "--model", model_dirs[0], "--scenario", "offline", *FAST]
    r = _run(*args, "--budget", "throughput_sps=1e9", "--batch-size", "4", "-o",
             tmp_path / "lg", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    item = json.loads(r.stdout)["validated"][0]
    assert item["batch_size"] == 4 and item["measured"] > 0
    assert item["within_budget"] is False  # a billion samples per second is not reached


@needs_loadgen
def test_library_refuses_profiler_options_with_a_scenario(torch_model):
    from carb_nas.validate import validate

    with pytest.raises(ConfigError, match="confidence") as e:
        validate(pd.DataFrame([BASIC]), model=torch_model, scenario="offline", confidence=0.9)
    assert "\n" not in str(e.value)


@needs_loadgen
def test_library_scenario_result_and_kept_runs(torch_model, tmp_path):
    from carb_nas.measure.loadgen import LoadGenSettings
    from carb_nas.validate import ScenarioValidationResult, validate

    settings = LoadGenSettings("offline", "quick", min_duration_ms=200, min_query_count=16)
    res = validate(
        pd.DataFrame([MOBILE]), model=torch_model, scenario=settings, threads=1,
        budgets={"throughput_sps": 1.0}, loadgen_dir=tmp_path / "lg",
    )  # fmt: skip
    assert isinstance(res, ScenarioValidationResult) and res.metric == "throughput_sps"
    row = res.rows.iloc[0]
    assert row["family"] == "mobilenet_v2" and row["batch_size"] == 8  # offline's batches
    assert row["within_budget"] is True and row["measured_throughput_sps"] > 1
    assert res.settings["rules"] == "quick" and res.settings["min_duration_ms"] == 200
    [run] = res.rows["run"]
    assert (tmp_path / "lg" / "logs" / run / "mlperf_log_summary.txt").is_file()
    assert res.loadgen_dir == str(tmp_path / "lg")
    assert res.measurements.iloc[0]["rules"] == "quick"


# -- any runtime, with the profiler -----------------------------------------------------------
def test_static_int8_takes_a_calibration_set_and_records_it(model_dirs, tmp_path):
    if importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("onnxruntime not installed")
    calib = tmp_path / "calib.npy"
    np.save(calib, np.random.default_rng(0).standard_normal((4, 3, 32, 32), np.float32))
    data = tmp_path / "rows.csv"
    r = _run(
        "validate", _pareto(tmp_path, BASIC), "--model", model_dirs[0], "--runtime",
        "onnxruntime", "--precision", "int8", "--quantization-data", calib, "--threads", "1",
        "--protocol", "carb", "--append", data,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    row = pd.read_csv(data).iloc[0]
    assert row["status"] == "ok" and row["precision"] == "int8"
    fingerprint = json.loads(row["fingerprint"])
    assert fingerprint["calibration"] == {"inputs": "user file calib.npy"}
    # (onnxruntime int8's fingerprint predates ``scheme``: its calibration set is this field)


@pytest.mark.parametrize(
    ("runtime", "precision", "module"),
    [
        ("onnxruntime", "int8-dynamic", "onnxruntime"),
        pytest.param("openvino", "fp32", "openvino", marks=pytest.mark.slow),  # ~10 s
        ("torch", "bf16", "torch"),
    ],
)
def test_profiler_validation_on_other_runtimes(model_dirs, tmp_path, runtime, precision, module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed")
    pareto = _pareto(tmp_path, MOBILE if runtime == "torch" else BASIC)  # a zoo family too
    r = _run(
        "validate", pareto, "--model", model_dirs[0], "--runtime", runtime,
        "--precision", precision, "--threads", "1", "--protocol", "carb", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["platform"] == f"cpu/{runtime}/{precision}"
    assert doc["validated"][0]["measured"]["latency_ms"] > 0


def test_validate_measures_on_the_platform_the_model_names(tmp_path):
    """`validate --model cpu/onnxruntime/int8` without --runtime/--precision measured torch
    fp32 and scored it against INT8 predictions (a screen's OpenVINO INT8 shortlist: x30)."""
    pareto = _pareto(tmp_path, BASIC)
    base = ["validate", pareto, "--model", "cpu/onnxruntime/int8", "--threads", "1",
            "--protocol", "carb", "--json"]  # fmt: skip
    r = _run(*base)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["platform"] == "cpu/onnxruntime/int8"
    assert "measuring on cpu/onnxruntime/int8, the --model's platform" in r.stderr
    r = _run(*base, "--runtime", "torch")  # asked for: measured there, with the warning
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["platform"] == "cpu/torch/fp32"
    assert any("trained on runtime='onnxruntime'" in w for w in doc["warnings"])


def test_a_config_that_fails_conversion_is_a_warning_and_the_rest_is_kept(model_dirs, tmp_path):
    pareto = _pareto(tmp_path, BASIC, NO_ONNX)
    r = _run(
        "validate", pareto, "--model", model_dirs[0], "--runtime", "onnxruntime",
        "--threads", "1", "--protocol", "carb", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    status = {i["family"]: i["status"] for i in doc["validated"]}
    assert status == {"basic": "ok", "vgg": "error"}
    [w] = [w for w in doc["warnings"] if w.startswith("not measured")]
    assert "vgg-11" in w and "adaptive_avg_pool2d" in w  # the op the exporter refused


# -- bad input: one line, before any work, nothing left behind --------------------------------
BAD = [
    (["--scenario", "single-stream", "--budget", "latency_p99_ms=5"], "does not belong"),
    (["--scenario", "offline", "--budget", "latency_ms=5"], "does not belong to scenario"),
    (["--budget", "latency_p90_ms=5"], "Missing option '--scenario'"),
    (["--scenario", "single-stream", "--scenario", "offline"], "expected one --scenario, got 2"),
    (["--scenario", "single-stream", "--budget", "latency_p90_ms=-3"], "finite number > 0"),
    (["--scenario", "multi-stream", "--samples-per-query", "0"], "samples per query"),
    (["--scenario", "single-stream", "--min-duration-ms", "0"], "min_duration_ms"),
    (["--scenario", "offline", "--min-query-count", "-1"], "min_query_count"),
    (["--scenario", "single-stream", "--samples-per-query", "4"], "only multi-stream uses it"),
    (["--scenario", "offline", "--runtime", "openvino", "--precision", "int8-dynamic"],
     "unsupported precision"),
    (["--scenario", "offline", "--runtime", "torch", "--precision", "int8"],
     "unsupported precision for cpu/torch"),
    (["--scenario", "offline", "--runtime", "tensorrt"], "unknown runtime"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "match"), BAD)
def test_bad_input_is_one_line_and_writes_nothing(model_dirs, tmp_path, args, match):
    pareto = _pareto(tmp_path, BASIC)
    before = pareto.read_bytes()
    out = tmp_path / "lg"
    r = _run("loadgen", pareto, "--model", model_dirs[0], "-o", out, *args)
    _one_line_error(r, match)
    assert not out.exists() and pareto.read_bytes() == before


def test_budget_without_model_is_one_line(tmp_path):
    out = tmp_path / "lg"
    r = _run("loadgen", _pareto(tmp_path, BASIC), "--scenario", "single-stream",
             "--budget", "latency_p90_ms=5", "-o", out)  # fmt: skip
    _one_line_error(r, "--budget without --model")
    assert not out.exists()


def test_output_in_the_way_names_the_option(model_dirs, tmp_path):
    in_the_way = tmp_path / "file"
    in_the_way.write_text("x")
    r = _run("loadgen", _pareto(tmp_path, BASIC), "--model", model_dirs[0], "--scenario",
             "single-stream", "-o", in_the_way / "lg")  # fmt: skip
    _one_line_error(r, "Choose another -o/--output path")
    assert in_the_way.read_text() == "x"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--scenario", "single-stream"], "LoadGen validation is now `carb-nas loadgen"),
        (["--budget", "latency_p90_ms=5"], "`carb-nas loadgen PARETO --scenario single-stream"),
    ],
)
def test_validate_sends_scenarios_to_loadgen(model_dirs, tmp_path, args, match):
    report = tmp_path / "report"
    r = _run("validate", _pareto(tmp_path, BASIC), "--model", model_dirs[0], "--report",
             report, *args)  # fmt: skip
    _one_line_error(r, match)
    assert not report.exists()


def test_calibration_checks(model_dirs, tmp_path):
    pareto = _pareto(tmp_path, BASIC)
    calib = tmp_path / "c.npy"
    np.save(calib, np.zeros((4, 3, 16, 16), np.float32))
    before = calib.read_bytes()
    report = tmp_path / "report"
    base = ["validate", pareto, "--model", model_dirs[0], "--report", report]
    base += ["--quantization-data", calib]
    _one_line_error(_run(*base), "calibration set was given for precision 'fp32'")
    if importlib.util.find_spec("onnxruntime") is not None:
        r = _run(*base, "--runtime", "onnxruntime", "--precision", "int8")
        _one_line_error(r, "wrong shape: expected (N, 3, 32, 32)")
        assert "(4, 3, 16, 16)" in r.stderr
    assert not report.exists() and calib.read_bytes() == before


@pytest.mark.parametrize(
    ("command", "hidden", "args", "hint"),
    [
        ("validate", "openvino", ["--runtime", "openvino"], "pip install 'carb-nas[openvino]'"),
        ("validate", "onnxruntime", ["--runtime", "onnxruntime"], "pip install 'carb-nas[onnx]'"),
        ("loadgen", "mlperf_loadgen", ["--scenario", "single-stream"],
         "pip install 'carb-nas[loadgen]'"),
    ],
)  # fmt: skip
def test_missing_extra_is_one_line_before_the_model_loads(
    model_dirs, tmp_path, monkeypatch, command, hidden, args, hint
):
    real = builtins.__import__

    def without(name, *a, **k):
        if name == hidden or name.startswith(hidden + "."):
            raise ImportError(f"No module named {hidden!r}")
        return real(name, *a, **k)

    import carb_nas.cli._loadgen as loadgen_cli
    import carb_nas.cli._search as search_cli

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the extra was checked")

    monkeypatch.setattr(builtins, "__import__", without)
    monkeypatch.setattr(search_cli, "load", no_model)
    monkeypatch.setattr(loadgen_cli, "load", no_model)
    pareto = _pareto(tmp_path, BASIC)
    out = tmp_path / "report"
    where = ["--report", out] if command == "validate" else ["-o", out]
    r = _run(command, pareto, "--model", model_dirs[0], *where, *args)
    _one_line_error(r, hint)
    assert not out.exists()


@pytest.mark.parametrize(
    "command", [["validate", "--report"], ["loadgen", "--scenario", "single-stream", *FAST, "-o"]]
)
def test_nothing_converts_is_one_line_naming_the_op(model_dirs, tmp_path, command):
    if importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("onnxruntime not installed")
    if command[0] == "loadgen" and not HAVE_LOADGEN:
        pytest.skip("loadgen extra not installed")
    pareto = _pareto(tmp_path, NO_ONNX)
    out = tmp_path / "out" / "report"
    r = _run(
        command[0], pareto, "--model", model_dirs[0], "--runtime", "onnxruntime",
        "--threads", "1", *(["--protocol", "carb"] if command[0] == "validate" else []),
        *command[1:], out,
    )  # fmt: skip
    _one_line_error(r, "nothing measured", progress=True)
    assert "adaptive_avg_pool2d" in r.stderr and "vgg-11" in r.stderr
    assert not (tmp_path / "out").exists()  # the run directory this call made is gone
