"""``carb-nas model train / model evaluate / predict`` through click's CliRunner, on
SYNTHETIC tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from tests.synthetic import synthetic_dataset


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    df = synthetic_dataset(330, seed=21, space="cpu")
    df.loc[df.index[:5], "status"] = "error"  # only ok rows are used
    df.loc[df.index[:5], ["latency_ms", "peak_mem_mb", "energy_j"]] = np.nan
    df = df.drop(columns=["energy_j"]).assign(energy_j=np.nan)  # a CPU: no energy meter
    data = d / "rows.csv"
    df.to_csv(data, index=False)
    res = run(
        "model",
        "train",
        str(data),
        "-o",
        str(d / "model"),
        "--preset",
        "fast",
        "--seed",
        "3",
        "--jobs",
        "1",
    )
    assert res.exit_code == 0, res.output
    return d, data, res


def test_train_writes_model_and_evaluation(trained):
    d, _, res = trained
    ev = json.loads((d / "model" / "evaluation.json").read_text())
    assert set(ev["test"]) == {"peak_mem_mb", "latency_ms"}  # energy empty -> not modelled
    for t in ("peak_mem_mb", "latency_ms"):
        assert set(ev["test"][t]) >= {"r2", "mae", "mape"}
        assert set(ev["baselines"]["flops_linear"][t]) >= {"r2", "mae"}
    assert ev["train_seconds"] > 0
    assert ev["split"]["train"] + ev["split"]["test"] == 325
    assert ev["split"]["test"] == 65
    assert ev["platform"]["platform"] == "synthetic/torch/fp32"
    assert any("status != ok" in n for n in ev["notes"])
    assert "R2" in res.output
    assert (d / "model" / "manifest.json").is_file()


def test_train_is_seeded(trained, tmp_path):
    _, data, _ = trained
    a = run(
        "model",
        "train",
        str(data),
        "-o",
        str(tmp_path / "a"),
        "--preset",
        "fast",
        "--seed",
        "3",
        "--jobs",
        "1",
        "--json",
    )
    assert a.exit_code == 0, a.output
    ja = json.loads(a.stdout)
    first = json.loads((trained[0] / "model" / "evaluation.json").read_text())
    for t, m in first["test"].items():
        assert ja["test"][t] == pytest.approx(m, rel=1e-9)


def test_train_with_physical_offsets(trained, tmp_path):
    _, data, _ = trained
    res = run(
        "model",
        "train",
        str(data),
        "-o",
        str(tmp_path / "m"),
        "--preset",
        "fast",
        "--jobs",
        "1",
        "--physical-offsets",
        "--offset",
        "latency_ms=act_mb_total",
    )
    assert res.exit_code == 0, res.output
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert man["offsets"] == {"peak_mem_mb": "tensor_peak_mb", "latency_ms": "act_mb_total"}
    bad = CliRunner().invoke(
        cli, ["model", "train", str(data), "-o", str(tmp_path / "n"), "--offset", "latency_ms"]
    )
    assert bad.exit_code == 1 and "TARGET=COLUMN" in bad.output
    res = run(
        "model",
        "train",
        str(data),
        "-o",
        str(tmp_path / "s"),
        "--preset",
        "fast",
        "--jobs",
        "1",
        "--target",
        "latency_ms",
        "--offset",
        "latency_ms=flops+param_mb",
    )
    assert res.exit_code == 0, res.output
    man = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert man["offsets"] == {"latency_ms": ["flops", "param_mb"]}
    assert set(man["offset_coefs"]["latency_ms"]) == {"flops", "param_mb"}
    bad = CliRunner().invoke(
        cli,
        ["model", "train", str(data), "-o", str(tmp_path / "t"), "--offset", "latency_ms=flops+"],
    )
    assert bad.exit_code == 1 and "COL1+COL2" in bad.output


def test_evaluate_json_and_report(trained, tmp_path):
    d, data, _ = trained
    res = run(
        "model",
        "evaluate",
        str(d / "model"),
        str(data),
        "--json",
        "--report",
        str(tmp_path / "r"),
        "--budget",
        "latency_ms=20",
    )
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["budget"]["point"]["budgets"] == {"latency_ms": 20.0}
    assert rep["n_rows"] == 325
    assert (tmp_path / "r" / "parity_latency_ms.png").is_file()
    assert (tmp_path / "r" / "evaluation.json").is_file()
    human = run("model", "evaluate", str(d / "model"), str(data))
    assert human.exit_code == 0 and "latency_ms" in human.output


def test_predict_configs_csv_and_space(trained, tmp_path):
    d, data, _ = trained
    cfg = pd.read_csv(data)[
        ["family", "depth", "width", "resolution", "batch_size", "precision", "runtime"]
    ].head(7)
    cfg.to_csv(tmp_path / "c.csv", index=False)
    res = run(
        "predict",
        str(d / "model"),
        str(tmp_path / "c.csv"),
        "-o",
        str(tmp_path / "p.csv"),
        "--alpha",
        "0.1",
    )
    assert res.exit_code == 0, res.output
    out = pd.read_csv(tmp_path / "p.csv")
    assert len(out) == 7 and {"key", "latency_ms", "latency_ms_upper"} <= set(out.columns)
    assert (out["latency_ms_lower"] <= out["latency_ms"]).all()
    space = tmp_path / "s.toml"
    space.write_text(
        'name = "s"\n[knobs]\nfamily = ["basic"]\ndepth = [10, 18]\nwidth = [0.5]\n'
        "resolution = [32]\nbatch_size = [1, 4]\n"
    )
    res = run("predict", str(d / "model"), str(space), "-o", str(tmp_path / "q.csv"))
    assert res.exit_code == 0, res.output
    assert len(pd.read_csv(tmp_path / "q.csv")) == 4


def test_predict_a_configs_table_short_of_a_knob_names_it(trained, tmp_path):
    """A configs table without batch_size reads as a table of model inputs; its error names
    the missing config column, not the model's feature schema, and nothing is written."""
    d, data, _ = trained
    cfg = pd.read_csv(data)[["family", "depth", "width", "resolution"]].head(3)
    cfg.to_csv(tmp_path / "c.csv", index=False)
    out = tmp_path / "p.csv"
    res = run("predict", str(d / "model"), str(tmp_path / "c.csv"), "-o", str(out))
    assert res.exit_code == 1 and not out.exists(), res.output
    line = res.stderr.strip().splitlines()
    assert len(line) == 1 and "missing column(s) ['batch_size']" in line[0], res.stderr
    assert "schema" not in line[0]


def test_generic_table_with_named_target(tmp_path):
    rng = np.random.default_rng(2)
    n = 150
    tab = pd.DataFrame(
        {
            "flops": 10 ** rng.uniform(6, 9, n),
            "params": 10 ** rng.uniform(4, 7, n),
            "batch_size": rng.choice([1, 4, 32], n),
        }
    )
    tab["throughput_ips"] = 1e9 / tab["flops"] * tab["batch_size"] ** 0.3
    tab.to_csv(tmp_path / "bench.csv", index=False)
    res = run(
        "model",
        "train",
        str(tmp_path / "bench.csv"),
        "-o",
        str(tmp_path / "m"),
        "--preset",
        "fast",
        "--target",
        "throughput_ips",
        "--jobs",
        "1",
    )
    assert res.exit_code == 0, res.output
    ev = json.loads((tmp_path / "m" / "evaluation.json").read_text())
    assert list(ev["test"]) == ["throughput_ips"] and ev["test"]["throughput_ips"]["r2"] > 0.8
    res = run(
        "predict", str(tmp_path / "m"), str(tmp_path / "bench.csv"), "-o", str(tmp_path / "p.csv")
    )
    assert res.exit_code == 0, res.output


def test_refuses_fake_rows_and_tables_without_targets(tmp_path):
    df = synthetic_dataset(60, seed=1, space="cpu")
    df.loc[df.index[3], "meter"] = "fake"
    df.to_csv(tmp_path / "fake.csv", index=False)
    res = CliRunner().invoke(
        cli, ["model", "train", str(tmp_path / "fake.csv"), "-o", str(tmp_path / "m")]
    )
    assert res.exit_code == 1
    assert "error:" in res.output and "fake" in res.output and "row 4" in res.output
    df.drop(columns=["latency_ms", "peak_mem_mb", "energy_j"]).assign(meter="none").to_csv(
        tmp_path / "nt.csv", index=False
    )
    res = CliRunner().invoke(
        cli, ["model", "train", str(tmp_path / "nt.csv"), "-o", str(tmp_path / "m")]
    )
    assert res.exit_code == 1 and "no target column" in res.output
    res = CliRunner().invoke(
        cli, ["model", "evaluate", str(tmp_path / "nowhere"), str(tmp_path / "nt.csv")]
    )
    assert (
        res.exit_code == 1 and "not found" in res.output and "`carb-nas model train`" in res.output
    )


@pytest.mark.parametrize(
    "budget, message",
    [
        ("latency_ms=-1", "expected a finite number > 0"),
        ("bogus=3", "unknown budget target"),
        ("latency_ms_per_image=1", "expected per-batch targets"),
    ],
)
def test_evaluate_rejects_bad_budgets_with_one_line(trained, budget, message):
    d, data, _ = trained
    res = CliRunner().invoke(
        cli, ["model", "evaluate", str(d / "model"), str(data), "--budget", budget]
    )
    assert res.exit_code == 1
    assert message in res.output and "Traceback" not in res.output


# -- conventions and the faults of issue 19 ------------------------------------------------
def _one_line_error(res, *needles):
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert "Traceback" not in res.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def _snapshot(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_results_on_stdout_progress_on_stderr(trained, tmp_path):
    _, data, _ = trained
    res = CliRunner().invoke(
        cli,
        [
            "model",
            "train",
            str(data),
            "-o",
            str(tmp_path / "m"),
            "--preset",
            "fast",
            "--threads",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "R2" in res.stdout and "wrote" not in res.stdout
    assert "wrote" in res.stderr and "note:" in res.stderr
    res = run("predict", str(tmp_path / "m"), str(data), "--json")
    doc = json.loads(res.stdout)
    assert doc["n_rows"] == 330 and doc["output"] is None  # every config, ok or not
    assert {"key", "latency_ms"} <= set(doc["predictions"][0])
    res = run("predict", str(tmp_path / "m"), str(data))  # no -o: the table on stdout
    assert res.stdout.splitlines()[0].startswith("key,family")
    assert len(res.stdout.splitlines()) == 1 + 330


@pytest.mark.parametrize("command", [("model", "train"), ("model", "evaluate"), ("predict",)])
def test_help_shows_one_example(command):
    res = run(*command, "--help")
    assert res.output.count("Example:") == 1 and f"carb-nas {' '.join(command)} " in res.output


def test_train_checks_every_option_before_touching_an_existing_model(trained):
    d, data, _ = trained
    before = _snapshot(d / "model")
    for bad, needle in (
        (["--alpha", "2"], "--alpha"),
        (["--jobs", "0"], "--threads/--jobs"),
        (["--threads", "-3"], "--threads/--jobs"),
        (["--test-fraction", "1.5"], "--test-fraction"),
        (["--offset", "latency_ms=flops", "--offset", "latency_ms=n_conv"], "repeated --offset"),
    ):
        res = CliRunner().invoke(cli, ["model", "train", str(data), "-o", str(d / "model"), *bad])
        _one_line_error(res, needle)
        assert _snapshot(d / "model") == before  # model and evaluation.json untouched


def test_train_failure_after_training_leaves_the_previous_model_intact(trained, monkeypatch):
    import carb_nas.costmodel._persist as persist

    d, data, _ = trained
    before = _snapshot(d / "model")
    real = persist._write_files

    def half_then_fail(model, directory):
        real(model, directory)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(persist, "_write_files", half_then_fail)
    res = CliRunner().invoke(
        cli,
        ["model", "train", str(data), "-o", str(d / "model"), "--preset", "fast", "--jobs", "1"],
    )
    assert res.exit_code != 0
    assert _snapshot(d / "model") == before
    assert not [p for p in d.iterdir() if p.name.startswith(".")]  # no temporary left


def test_train_refuses_seed_below_zero(trained, tmp_path):
    _, data, _ = trained
    res = CliRunner().invoke(
        cli, ["model", "train", str(data), "-o", str(tmp_path / "m"), "--seed", "-1"]
    )
    assert res.exit_code != 0 and "--seed" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "m").exists()


def test_train_refuses_a_directory_of_other_files(trained, tmp_path):
    _, data, _ = trained
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("keep")
    res = CliRunner().invoke(cli, ["model", "train", str(data), "-o", str(tmp_path / "out")])
    _one_line_error(res, "holds other files")
    assert _snapshot(tmp_path / "out") == {"notes.txt": b"keep"}


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda df: df.assign(latency_ms=df["latency_ms"].where(df.index != 7, 0.0)), "row 8"),
        (lambda df: df.assign(peak_mem_mb=-df["peak_mem_mb"]), "implausible peak_mem_mb"),
        (lambda df: df.assign(latency_ms=df["latency_ms"].where(df.index != 3, 1e30)), "1e+30"),
        (
            lambda df: df.assign(platform=np.where(df.index % 2, "cpu/torch/fp32", "cpu/x/y")),
            "rows from 2 platforms",
        ),
    ],
    ids=["zero", "negative", "huge", "mixed_platforms"],
)
def test_train_refuses_implausible_targets_and_mixed_platforms(tmp_path, edit, needle):
    df = edit(synthetic_dataset(120, seed=2, space="cpu"))
    df.to_csv(tmp_path / "rows.csv", index=False)
    before = (tmp_path / "rows.csv").read_bytes()
    res = CliRunner().invoke(
        cli, ["model", "train", str(tmp_path / "rows.csv"), "-o", str(tmp_path / "m")]
    )
    _one_line_error(res, needle)
    assert not (tmp_path / "m").exists() and (tmp_path / "rows.csv").read_bytes() == before


def test_predict_and_evaluate_accept_a_shipped_platform_name(trained, tmp_path, monkeypatch):
    import carb_nas.costmodel._defaults as defaults

    d, data, _ = trained
    monkeypatch.setattr(
        defaults,
        "default_model_dir",
        lambda platform="cpu/torch/fp32": d / "model" if platform == "cpu/torch/fp32" else tmp_path,
    )
    res = run("predict", "cpu/torch/fp32", str(data), "-o", str(tmp_path / "p.csv"))
    assert res.exit_code == 0 and len(pd.read_csv(tmp_path / "p.csv")) == 330
    res = run("model", "evaluate", "cpu/torch/fp32", str(data), "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["n_rows"] == 325
    bad = CliRunner().invoke(cli, ["predict", str(tmp_path / "nowhere"), str(data)])
    _one_line_error(bad, "MODEL not found")


def test_evaluate_report_is_atomic_and_checked_first(trained, tmp_path):
    d, data, _ = trained
    res = run(
        "model", "evaluate", str(d / "model"), str(data), "--report", str(tmp_path / "r"), "--json"
    )
    doc = json.loads(res.stdout)
    assert all(Path(p).parent == tmp_path / "r" and Path(p).is_file() for p in doc["plots"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("keep")
    res = CliRunner().invoke(
        cli, ["model", "evaluate", str(d / "model"), str(data), "--report", str(tmp_path / "mine")]
    )
    _one_line_error(res, "holds other files")
    res = CliRunner().invoke(
        cli, ["model", "evaluate", str(d / "model"), str(data), "--report", "/proc/carb_nas_x"]
    )
    _one_line_error(res, "/proc/carb_nas_x")
    res = CliRunner().invoke(
        cli, ["model", "evaluate", str(d / "model"), str(data), "--alpha", "5"]
    )
    _one_line_error(res, "--alpha", "confidence")
