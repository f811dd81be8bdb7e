"""Validation on real hardware: tiny REAL CPU measurements of two tiny configs.

The cost model is a fast-preset fit on SYNTHETIC rows (see tests/synthetic.py), so its errors are
whatever they are; the tests check the bookkeeping (predicted vs measured, decisions, append,
plots, fingerprint warnings), which must be right for any model.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from carb_nas.errors import BudgetError, InputFileError, ModelError
from carb_nas.measure import Profiler, Protocol
from carb_nas.space import CONFIG_COLUMNS
from carb_nas.validate import (
    DECISIONS,
    descheduled_rows,
    fingerprint_mismatch,
    page_fault_shortfall,
    validate,
)

TINY = pd.DataFrame(
    [
        {"family": "basic", "depth": 8, "width": 0.1, "resolution": 32, "batch_size": 1},
        {"family": "basic", "depth": 8, "width": 0.1, "resolution": 32, "batch_size": 2},
    ]
)
QUICK = Protocol(
    name="adaptive", warmup_runs=1, warmup_min_s=0.0, min_runs=3, max_runs=20, time_cap_s=0.05
)


@pytest.fixture(scope="module")
def profiler():
    prof = Profiler("cpu", "torch", "fp32", threads=1, protocol=QUICK, meter="none", idle_s=0)
    yield prof
    prof.close()


@pytest.fixture(scope="module")
def measured(torch_model, profiler):
    """One real validation run shared by the tests below (budgets chosen around the truth)."""
    return validate(
        TINY, model=torch_model, budgets={"latency_ms": 1e3, "peak_mem_mb": 1e3}, profiler=profiler
    )


def test_validate_measures_and_scores(measured, torch_model):
    r = measured
    assert len(r.rows) == 2 and (r.rows["status"] == "ok").all()
    assert r.platform == "cpu/torch/fp32"
    for t in ("peak_mem_mb", "latency_ms"):
        m = r.rows[f"measured_{t}"].to_numpy()
        p = r.rows[f"predicted_{t}"].to_numpy()
        assert (m > 0).all()
        assert r.metrics[t]["n"] == 2
        assert r.metrics[t]["mae"] == pytest.approx(np.abs(p - m).mean())
        assert r.metrics[t]["mape_pct"] == pytest.approx(100 * np.mean(np.abs(p - m) / m))
    # batch 2 holds more activations than batch 1, measured to the byte
    assert r.rows["measured_peak_mem_mb"].iloc[1] > r.rows["measured_peak_mem_mb"].iloc[0]
    # the raw rows follow the dataset schema and carry this machine's fingerprint
    assert {"key", "platform", "fingerprint", "protocol"} <= set(r.measurements.columns)
    assert sum(r.decisions.values()) == 2


def test_budget_decisions_follow_the_measurements(torch_model, profiler, measured):
    meas = measured.rows["measured_latency_ms"].to_numpy()
    pred = measured.rows["predicted_latency_ms"].to_numpy()
    # a limit between the two configs' measured latencies: one truly in, one truly out
    limit = float(np.mean(meas))
    r = validate(TINY, model=torch_model, budgets={"latency_ms": limit}, profiler=profiler)
    m = r.rows["measured_latency_ms"].to_numpy()
    want = []
    for p_i, m_i in zip(r.rows["predicted_latency_ms"], m):
        ok_p, ok_m = p_i <= limit, m_i <= limit
        want.append(
            {
                (True, True): "true_accept",
                (True, False): "false_accept",
                (False, True): "false_reject",
                (False, False): "true_reject",
            }[(ok_p, ok_m)]
        )
    assert list(r.rows["decision"]) == want
    assert set(r.decisions) == set(DECISIONS) and sum(r.decisions.values()) == 2
    items = r.validated_items()
    assert items[0]["predicted"]["latency_ms"] == pytest.approx(
        r.rows["predicted_latency_ms"].iloc[0]
    )
    assert all(i["decision_correct"] == i["decision"].startswith("true_") for i in items)
    assert pred.shape == m.shape


def test_unmeasurable_budget_is_undecided(torch_model, profiler):
    class WithEnergy:
        """Test double: the real model plus a made-up energy column (not a prediction)."""

        def __init__(self, model):
            self.m = model
            self.targets_ = [*model.targets_, "energy_j"]
            self.feature_names_in_ = model.feature_names_in_
            self.platform_ = model.platform_
            self.schema_ = model.schema_

        def predict(self, X, alpha=None):
            out = self.m.predict(X, alpha=alpha)
            out["energy_j"] = 0.001
            return out

    r = validate(
        TINY.head(1), model=WithEnergy(torch_model), budgets={"energy_j": 1.0}, profiler=profiler
    )
    assert r.decisions["undecided"] == 1
    assert r.validated_items()[0]["decision_correct"] is None
    assert any("cannot be checked here" in w for w in r.warnings)


def test_fingerprint_mismatch_warns(torch_model, profiler):
    assert fingerprint_mismatch(torch_model, profiler.device_name, "torch", "cpu") == []
    msgs = fingerprint_mismatch(torch_model, profiler.device_name, "onnxruntime", "cpu")
    assert msgs and "runtime" in msgs[0]

    class Other:
        def __init__(self, m):
            self.__dict__.update(m.__dict__)
            self.platform_ = {
                **m.platform_,
                "device_name": "NVIDIA GeForce RTX 3080",
                "device": "cuda",
            }

        def predict(self, X, alpha=None):
            return torch_model.predict(X, alpha=alpha)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = validate(TINY.head(1), model=Other(torch_model), profiler=profiler)
    assert any("device_name" in str(w.message) for w in caught)  # warned, and reported:
    assert any("RTX 3080" in w for w in r.warnings)


def test_append_and_report(torch_model, profiler, tmp_path):
    data = tmp_path / "rows.csv"
    r = validate(
        TINY,
        model=torch_model,
        budgets=["latency_ms=100"],
        profiler=profiler,
        append=data,
        report_dir=tmp_path / "report",
    )
    first = pd.read_csv(data)
    assert len(first) == 2 and r.appended_to == str(data)
    r2 = validate(TINY.head(1), model=torch_model, profiler=profiler, append=data)
    again = pd.read_csv(data)  # the same config measured again replaces its row (by key)
    assert len(again) == 2 and again["key"].is_unique
    assert r2.replaced_keys == [first["key"].iloc[0]]
    assert again["key"].iloc[-1] == first["key"].iloc[0]  # the new measurement, appended
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write leaves no temporary behind
    for name in (
        "predicted_vs_measured.png",
        "pareto_projections.png",
        "validation.csv",
        "validation.json",
    ):
        assert (tmp_path / "report" / name).stat().st_size > 0
    doc = json.loads((tmp_path / "report" / "validation.json").read_text())
    assert len(doc["validated"]) == 2
    # a dataset of another platform is refused
    _other_platform_rows(tmp_path / "other.csv")
    with pytest.raises(InputFileError, match="another platform"):
        validate(TINY.head(1), model=torch_model, profiler=profiler, append=tmp_path / "other.csv")


def test_bad_input(torch_model, profiler):
    with pytest.raises(ModelError, match="no cost model"):
        validate(TINY, profiler=profiler)
    with pytest.raises(BudgetError, match="does not predict"):
        validate(TINY, model=torch_model, budgets=["energy_j=3"], profiler=profiler)
    with pytest.raises(BudgetError, match="finite number > 0"):
        validate(TINY, model=torch_model, budgets=["latency_ms=-1"], profiler=profiler)


def test_cli_validate_json(model_dirs, tmp_path):
    pareto = tmp_path / "pareto.csv"
    TINY.head(1).to_csv(pareto, index=False)
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            str(pareto),
            "--device",
            "cpu",
            "--runtime",
            "torch",
            "--precision",
            "fp32",
            "--model",
            str(model_dirs[0]),
            "--budget",
            "latency_ms=100",
            "--threads",
            "1",
            "--json",
            "--append",
            str(tmp_path / "new.csv"),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    item = doc["validated"][0]
    assert set(CONFIG_COLUMNS) <= set(item)
    assert item["measured"]["latency_ms"] > 0 and item["predicted"]["latency_ms"] > 0
    assert item["decision"] in DECISIONS
    assert len(pd.read_csv(tmp_path / "new.csv")) == 1


def test_cli_validate_bad_input(model_dirs, tmp_path):
    pareto = tmp_path / "pareto.csv"
    TINY.to_csv(pareto, index=False)
    base = ["validate", str(pareto), "--model", str(model_dirs[0])]
    for extra, words in (
        (["--budget", "latency_ms=0"], "finite number > 0"),
        (["--budget", "energy_j=1"], "does not predict"),
        (["--append", str(tmp_path / "x.txt")], "unsupported dataset format"),
    ):
        res = CliRunner().invoke(cli, base + extra)
        assert res.exit_code == 1 and res.output.startswith("error: ") and words in res.output
    res = CliRunner().invoke(
        cli, ["validate", str(tmp_path / "missing.csv"), "--model", str(model_dirs[0])]
    )
    assert res.exit_code == 1 and "not found" in res.output


def test_cpu_validation_defaults_to_the_models_thread_count(monkeypatch):
    # A model learned from 1-thread rows must be validated at 1 thread, not at all cores
    # (seen: ORT latency predictions looked ~2x pessimistic when measured at 2 threads).
    import types

    from carb_nas import validate as val

    assert val._model_threads(types.SimpleNamespace(platform_={"threads": 1})) == 1
    assert val._model_threads(types.SimpleNamespace(platform_={"threads": "x"})) is None
    assert val._model_threads(types.SimpleNamespace(platform_=None)) is None

    seen = {}

    class Stop(Exception):
        pass

    def fake_profiler(device, runtime, precision, threads, protocol, meter, fresh_process, **kw):
        seen["threads"], seen["fresh_process"] = threads, fresh_process
        raise Stop

    monkeypatch.setattr("carb_nas.measure.Profiler", fake_profiler)
    model = types.SimpleNamespace(platform_={"threads": 1}, targets_=["latency_ms"])
    monkeypatch.setattr(val, "check_budgets", lambda budgets, model: None)
    monkeypatch.setattr(val, "model_targets", lambda model: ["latency_ms"])
    monkeypatch.setattr(val, "_scores", lambda *a: None)  # the profiler is what is under test
    frame = pd.DataFrame([dict(family="basic", depth=8, width=0.1, resolution=32, batch_size=1)])
    with pytest.raises(Stop):
        val.validate(frame, "cpu", "torch", "fp32", model=model, budgets={"latency_ms": 5})
    assert seen == {"threads": 1, "fresh_process": False}
    with pytest.raises(Stop):
        val.validate(frame, model=model, budgets={"latency_ms": 5}, fresh_process=True)
    assert seen["fresh_process"] is True


def test_page_fault_shortfall_flags_runs_that_skipped_the_mmap_cost():
    # basic-50 width 2 r32 batch 2: 339.7 MB of buffers mapped anew per call in a fresh
    # process (~82,940 faults per run); the tiny config has none
    configs = pd.DataFrame(
        [
            {"family": "basic", "depth": 50, "width": 2.0, "resolution": 32, "batch_size": 2},
            {"family": "basic", "depth": 8, "width": 0.1, "resolution": 32, "batch_size": 1},
        ]
    ).assign(runtime="torch", precision="fp32")

    def rows(faults, device="cpu"):
        return pd.DataFrame({"status": "ok", "device": device, "minor_faults_per_run": faults})

    (msg,) = page_fault_shortfall(configs, rows([120.0, 0.0]))
    assert "1 config(s)" in msg and "basic-50 width 2.0 r32 batch 2" in msg and "120" in msg
    assert page_fault_shortfall(configs, rows([82_953.0, 0.0])) == []  # paid, as in the data
    assert page_fault_shortfall(configs, rows([0.0, 0.0], device="cuda")) == []
    assert page_fault_shortfall(configs.assign(runtime="onnxruntime"), rows([0.0, 0.0])) == []
    assert page_fault_shortfall(configs, rows([None, None])) == []  # not recorded: not judged
    assert (
        page_fault_shortfall(configs, rows([0.0, 0.0]).drop(columns="minor_faults_per_run")) == []
    )


def test_descheduled_rows_flag_one_thread_runs_that_lost_their_core(monkeypatch):
    import carb_nas.measure._quiet

    configs = pd.DataFrame(
        [
            {"family": "basic", "depth": 18, "width": 1.0, "resolution": 64, "batch_size": 4},
            {"family": "basic", "depth": 8, "width": 0.5, "resolution": 32, "batch_size": 1},
        ]
    )

    def rows(share, device="cpu", status="ok"):
        return pd.DataFrame({"status": status, "device": device, "cpu_per_wall": share})

    monkeypatch.setattr(carb_nas.measure._quiet, "autogroup_enabled", lambda: False)
    (msg,) = descheduled_rows(configs, rows([0.99, 0.41]), threads=1)
    assert "1 config(s)" in msg and "basic-8 width 0.5 r32 batch 1" in msg and "41 %" in msg
    assert "autogroup" not in msg
    assert descheduled_rows(configs, rows([0.99, 0.95]), threads=1) == []
    assert descheduled_rows(configs, rows([0.99, 0.41]), threads=2) == []  # not judged
    assert descheduled_rows(configs, rows([0.5, 0.4], device="cuda"), threads=1) == []
    assert descheduled_rows(configs, rows([0.5, 0.4], status="error"), threads=1) == []
    assert descheduled_rows(configs, rows([None, None]), threads=1) == []  # older rows
    assert descheduled_rows(configs, rows([0.4, 0.4]).drop(columns="cpu_per_wall"), 1) == []
    monkeypatch.setattr(carb_nas.measure._quiet, "autogroup_enabled", lambda: True)
    (msg,) = descheduled_rows(configs, rows([0.3, 0.4]), threads=1)
    assert "2 config(s)" in msg and "basic-18" in msg and "sched_autogroup_enabled" in msg


class FakeProfiler:
    """Stands in for the Profiler: returns given minor-fault counts (the bookkeeping of the
    page-fault check inside validate is under test, not the measurement)."""

    device_name, kind, platform = "test cpu", "cpu", "cpu/torch/fp32"
    runtime = type("R", (), {"name": "torch", "threads": 1})()

    def __init__(self, faults):
        self.faults = list(faults)
        self.profiled = 0

    def profile(self, config):
        self.profiled += 1
        return {
            "key": config.key, "status": "ok", "platform": self.platform, "device": "cpu",
            "latency_ms": 5.0, "peak_mem_mb": 50.0,
            "minor_faults_per_run": self.faults[self.profiled - 1],
        }  # fmt: skip


BIG = pd.DataFrame(  # basic-50 width 2 r32 batch 2: ~340 MB of buffers mapped per call
    [{"family": "basic", "depth": 50, "width": 2.0, "resolution": 32, "batch_size": 2}]
)


def test_validate_warns_when_a_big_config_skipped_its_page_faults(torch_model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = validate(BIG, model=torch_model, profiler=FakeProfiler([120.0]))
    assert [w for w in r.warnings if "did not pay the per-call page faults" in w]
    assert any("page faults" in str(w.message) for w in caught)
    paid = validate(BIG, model=torch_model, profiler=FakeProfiler([83_000.0]))
    assert not [w for w in paid.warnings if "page faults" in w]  # paid, as in the data


def test_validation_of_small_configs_raises_no_page_fault_warning(measured, torch_model):
    assert (measured.measurements["minor_faults_per_run"] >= 0).all()
    assert not [w for w in measured.warnings if "page faults" in w]
    # the same small configs with zero faults still do not warn: they map nothing per call
    r = validate(TINY, model=torch_model, profiler=FakeProfiler([0.0, 0.0]))
    assert not [w for w in r.warnings if "page faults" in w]


# -- --append / --report are checked before anything is measured (issue 19: 4 and 14) ---------
def _other_platform_rows(path):
    """A real dataset of another platform (two shipped ONNX Runtime rows)."""
    from carb_nas.datasets import load_dataset

    load_dataset("cpu/onnxruntime/fp32").head(2).to_csv(path, index=False)


def _dataset(tmp_path, torch_model, profiler):
    data = tmp_path / "rows.csv"
    validate(TINY, model=torch_model, profiler=profiler, append=data)
    return data


def test_append_target_is_checked_before_measuring(torch_model, profiler, tmp_path):
    data = _dataset(tmp_path, torch_model, profiler)
    original = data.read_bytes()
    other = tmp_path / "other.csv"
    _other_platform_rows(other)
    torn = tmp_path / "torn.csv"
    torn.write_bytes(original[:-25])  # a write cut short: the last row is incomplete
    short = tmp_path / "short.csv"
    lines = original.decode().splitlines()
    short.write_text("\n".join(lines[:-1] + [",".join(lines[-1].split(",")[:5])]) + "\n")
    cases = [
        (other, InputFileError, "another platform"),
        (torn, InputFileError, "torn last row.*does not end with a newline"),
        (short, InputFileError, "torn last row.*fields"),
        (tmp_path / "nodir" / "x.csv", InputFileError, "directory does not exist"),
        (tmp_path / "x.txt", InputFileError, "unsupported dataset format"),
    ]
    for path, err, words in cases:
        prof = FakeProfiler([0.0, 0.0])
        before = path.read_bytes() if path.exists() else None
        with pytest.raises(err, match=words):
            validate(TINY, model=torch_model, profiler=prof, append=path)
        assert prof.profiled == 0, path  # refused before measuring anything
        assert (path.read_bytes() if path.exists() else None) == before  # nothing damaged
    assert data.read_bytes() == original


def test_torn_row_is_never_parsed_as_an_ok_row(torch_model, profiler, tmp_path):
    data = _dataset(tmp_path, torch_model, profiler)
    raw = data.read_bytes()
    for cut in range(1, len(raw.splitlines()[-1]) + 1, 7):  # every 7th byte of the last row
        data.write_bytes(raw[:-cut])
        with pytest.raises(InputFileError, match="torn last row"):
            validate(TINY.head(1), model=torch_model, profiler=FakeProfiler([0.0]), append=data)
        assert data.read_bytes() == raw[:-cut]


def test_unwritable_dataset_is_refused_before_measuring(torch_model, profiler, tmp_path):
    import os

    prof = FakeProfiler([0.0, 0.0])
    with pytest.raises(InputFileError, match="not writable"):  # refused even for root
        validate(TINY, model=torch_model, profiler=prof, append="/proc/rows.csv")
    assert prof.profiled == 0
    data = _dataset(tmp_path, torch_model, profiler)
    data.chmod(0o444)
    try:
        if os.access(data, os.W_OK):
            pytest.skip("running as a user who can write read-only files (root)")
        prof = FakeProfiler([0.0, 0.0])
        with pytest.raises(InputFileError, match="not writable"):
            validate(TINY, model=torch_model, profiler=prof, append=data)
        assert prof.profiled == 0
    finally:
        data.chmod(0o644)


@pytest.mark.parametrize("where", ["/proc/x", "file"])
def test_unwritable_report_dir_is_refused_before_measuring(torch_model, tmp_path, where):
    report = tmp_path / "a_file" if where == "file" else where
    if where == "file":
        report.write_text("not a directory")
    prof = FakeProfiler([0.0, 0.0])
    with pytest.raises(InputFileError, match="report directory"):
        validate(TINY, model=torch_model, profiler=prof, report_dir=report)
    assert prof.profiled == 0


def test_cli_validate_refuses_bad_append_and_report_first(model_dirs, tmp_path, monkeypatch):
    import carb_nas.validate as val

    def no_profiling(*a, **k):
        raise AssertionError("profiled despite a bad input")

    monkeypatch.setattr(val, "validate", no_profiling)
    pareto = tmp_path / "pareto.csv"
    TINY.to_csv(pareto, index=False)
    other = tmp_path / "other.csv"
    _other_platform_rows(other)
    base = ["validate", str(pareto), "--model", str(model_dirs[0])]
    for extra, words in (
        (["--append", str(other)], "another platform"),
        (["--report", "/proc/x"], "cannot write report directory"),
    ):
        before = sorted(p.name for p in tmp_path.iterdir())
        res = CliRunner().invoke(cli, base + extra)
        assert res.exit_code == 1, res.output
        assert res.output.startswith("error: ") and words in res.output
        assert len(res.output.strip().splitlines()) == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_cli_validate_says_which_keys_were_replaced(model_dirs, tmp_path):
    pareto = tmp_path / "pareto.csv"
    TINY.head(1).to_csv(pareto, index=False)
    args = ["validate", str(pareto), "--model", str(model_dirs[0]), "--threads", "1"]
    args += ["--append", str(tmp_path / "d.csv")]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    assert "replaced" not in first.stderr
    second = CliRunner().invoke(cli, args + ["--json"])
    assert second.exit_code == 0, second.output
    key = json.loads(second.stdout)["replaced_keys"][0]
    assert f"replaced 1 earlier row(s) of the same configs (keys {key})" in second.stderr
    assert len(pd.read_csv(tmp_path / "d.csv")) == 1


def test_validate_passes_keep_each_configs_fastest_row(torch_model, profiler):
    seen = []
    r = validate(
        TINY, model=torch_model, profiler=profiler, passes=3,
        progress=lambda i, n, c: seen.append((i, n, c.key)),
    )  # fmt: skip
    # three interleaved rounds over the two configs
    assert [(i, n) for i, n, _ in seen] == [(i, 6) for i in range(6)]
    assert [k for _, _, k in seen] == [seen[0][2], seen[1][2]] * 3
    for lat, params in zip(r.measurements["latency_ms"], r.measurements["protocol_params"]):
        doc = json.loads(params)
        assert doc["passes"] == 3 and lat == pytest.approx(min(doc["pass_latency_ms"]), abs=1e-6)
    assert (r.rows["measured_latency_ms"] == r.measurements["latency_ms"].to_numpy()).all()


def test_bad_passes_is_refused_before_measuring(torch_model, model_dirs, tmp_path):
    from carb_nas.errors import ConfigError

    class Refuse:
        def profile(self, config):  # pragma: no cover - must not be reached
            raise AssertionError("measured despite a bad --passes")

    with pytest.raises(ConfigError, match="bad passes"):
        validate(TINY, model=torch_model, profiler=Refuse(), passes=0)
    pareto = tmp_path / "pareto.csv"
    TINY.to_csv(pareto, index=False)
    res = CliRunner().invoke(
        cli, ["validate", str(pareto), "--model", str(model_dirs[0]), "--passes", "0"]
    )
    assert res.exit_code == 1 and res.output.startswith("error: bad passes")
    res = CliRunner().invoke(
        cli, ["validate", str(pareto), "--model", str(model_dirs[0]), "--passes", "3",
              "--scenario", "single-stream"],
    )  # fmt: skip
    assert res.exit_code == 1 and "LoadGen validation is now `carb-nas loadgen" in res.output
    assert len(res.output.strip().splitlines()) == 1
