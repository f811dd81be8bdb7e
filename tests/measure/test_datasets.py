"""Shipped datasets: listing, validation of every shipped file, and the validator itself."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from carb_nas.datasets import MACHINE_KINDS, list_datasets, load_dataset
from carb_nas.datasets._validate import validate_rows
from carb_nas.errors import InputFileError, MissingFileError
from carb_nas.measure import Profiler, Protocol, cpu_identity, cpu_model_name
from carb_nas.space import CONFIG_COLUMNS, Config

SHIPPED = list_datasets()


@pytest.fixture(scope="module")
def real_rows() -> pd.DataFrame:
    """Two real rows measured now (tiny configs, short protocol)."""
    prof = Profiler(
        "cpu",
        "torch",
        "fp32",
        threads=1,
        meter="none",
        protocol=Protocol(time_cap_s=0.1, warmup_min_s=0.0),
    )
    try:
        rows = [prof.profile(Config("basic", 8, 0.1, 32, b)) for b in (1, 2)]
    finally:
        prof.close()
    return pd.DataFrame(rows)


def test_real_rows_validate_and_round_trip_csv(real_rows, tmp_path):
    out = validate_rows(real_rows, "now")
    assert out["batch_size"].dtype.name == "Int64"
    path = tmp_path / "cpu_torch_fp32.csv"
    real_rows.to_csv(path, index=False)
    again = load_dataset(path)
    assert len(again) == 2 and again["key"].is_unique


@pytest.mark.parametrize(
    ("column", "value", "match"),
    [
        ("status", "great", "status"),
        ("meter", "fake-counter", "meter"),
        ("device", "fake", "device"),
        ("device_name", "FakeCPU 9000", "device_name"),
        ("latency_ms", -1.0, "latency_ms"),
        ("batch_size", 1.5, "batch_size"),
        ("energy_j", 3.0, "energy_j"),  # energy with meter none: never estimated
        ("key", "0000000000000000", "key mismatch"),
        ("fingerprint", "{not json", "JSON"),
        ("platform", "cpu/torch/int8", "platform"),
    ],
)
def test_validator_rejects(real_rows, column, value, match):
    bad = real_rows.copy()
    bad[column] = bad[column].astype(object)
    bad.loc[1, column] = value
    with pytest.raises(InputFileError, match=match) as info:
        validate_rows(bad, "bad.csv")
    assert "bad.csv" in str(info.value) and "data row" in str(info.value)


def test_validator_rejects_duplicates_and_missing_columns(real_rows):
    with pytest.raises(InputFileError, match="unique keys"):
        validate_rows(pd.concat([real_rows, real_rows.iloc[:1]]), "dup.csv")
    with pytest.raises(InputFileError, match="missing column"):
        validate_rows(real_rows.drop(columns=["meter"]), "cols.csv")


def test_unknown_platform_is_a_clear_error():
    with pytest.raises(MissingFileError, match="dataset list"):
        load_dataset("tpu/jax/fp8")


def test_dataset_list_json_cli():
    r = CliRunner().invoke(cli, ["dataset", "list", "--json"])
    assert r.exit_code == 0, r.output
    items = json.loads(r.output)
    measured = [d for d in items if d.pop("source") == "measured"]
    assert measured == json.loads(json.dumps(SHIPPED))
    items = measured
    for d in items:
        assert {
            "name",
            "platform",
            "device",
            "device_name",
            "runtime",
            "precision",
            "path",
            "rows",
            "energy_j",
        } <= set(d)


@pytest.mark.parametrize("info", SHIPPED, ids=[d["name"] for d in SHIPPED])
def test_every_shipped_dataset_is_valid(info):
    frame = load_dataset(info["name"])
    assert len(frame) == info["rows"] > 0
    assert (frame["platform"] == info["platform"]).all()
    assert info["energy_j"] == bool(frame["energy_j"].notna().any())


@pytest.mark.slow
@pytest.mark.parametrize(
    "info",
    [d for d in SHIPPED if d["device"] == "cpu"],
    ids=[d["name"] for d in SHIPPED if d["device"] == "cpu"],
)
def test_shipped_rows_remeasure_close_on_this_machine(info):
    """Re-measure a few shipped configs; medians within 25% (different days, shared box) on a
    machine of the dataset's kind."""
    if info["device_name"] != cpu_model_name():
        pytest.skip(
            f"dataset measured on {info['device_name']!r}, this CPU is {cpu_model_name()!r}"
        )
    kind = MACHINE_KINDS[info["name"].rsplit("@", 1)[1]]
    here = cpu_identity()
    if kind.family_model[0].isdigit() and kind.family_model != f"{here['family']}/{here['model']}":
        pytest.skip(f"dataset of kind {kind.id} ({kind.family_model}), this CPU is another kind")
    frame = load_dataset(info["name"], ok_only=True)
    frame = frame[frame["latency_ms"] > 1.0].sample(4, random_state=0)
    threads = int(frame["threads"].iloc[0])
    prof = Profiler("cpu", info["runtime"], info["precision"], threads=threads, meter="none")
    try:
        for row in frame.itertuples():
            cfg = Config(
                row.family,
                int(row.depth),
                row.width,
                int(row.resolution),
                int(row.batch_size),
                row.precision,
                row.runtime,
            )
            new = prof.profile(cfg)
            assert new["status"] == "ok", new["error"]
            assert new["latency_ms"] == pytest.approx(row.latency_ms, rel=0.25)
            assert new["peak_mem_mb"] == pytest.approx(row.peak_mem_mb, rel=0.05)
    finally:
        prof.close()


def test_median_of_passes_keeps_the_middle_real_row(real_rows, tmp_path):
    from carb_nas.datasets import median_of_passes

    base = validate_rows(real_rows, "now")
    lat = base["latency_ms"].to_numpy()
    p1 = base.assign(latency_ms=lat, timestamp="pass-1")
    p2 = base.assign(latency_ms=lat * 1.3, timestamp="pass-2")
    p3 = base.assign(latency_ms=lat * 0.8, timestamp="pass-3")
    # the second config failed in pass 1: its ok rows are passes 2 and 3 (lower middle: 3)
    p1.loc[1, ["status", "error", "latency_ms"]] = ["error", "RuntimeError: boom", None]
    out = median_of_passes([p1, p2, p3])
    assert list(out["key"]) == list(base["key"]) and list(out.columns) == list(base.columns)
    assert list(out["timestamp"]) == ["pass-1", "pass-3"]
    assert out.loc[0, "latency_ms"] == pytest.approx(lat[0])
    assert (out["status"] == "ok").all()
    # CLI: the same from files
    paths = []
    for i, f in enumerate((p1, p2, p3)):
        paths.append(str(tmp_path / f"p{i}.csv"))
        f.to_csv(paths[-1], index=False)
    res = CliRunner().invoke(
        cli, ["dataset", "merge", *paths, "-o", str(tmp_path / "m.csv"), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert list(pd.read_csv(tmp_path / "m.csv")["timestamp"]) == ["pass-1", "pass-3"]
    assert json.loads(res.stdout) == {"rows": 2, "passes": 3, "output": str(tmp_path / "m.csv")}
    assert res.stderr.startswith("wrote 2 rows")  # progress on stderr, the result on stdout
    with pytest.raises(InputFileError, match="at least two"):
        median_of_passes([p1])
    with pytest.raises(InputFileError, match="one source name per pass"):
        median_of_passes([p1, p2], ["only one"])
    with pytest.raises(InputFileError, match="different platforms"):
        median_of_passes([p1, p2.assign(platform="cuda/torch/fp32", device="cuda")])


def test_shipped_torch_dataset_is_the_median_of_its_stored_passes():
    """Provenance: the shipped rows are exactly `carb-nas dataset merge` of the stored passes
    (research/runs/passes/)."""
    pytest.importorskip("pyarrow")
    from pathlib import Path

    from carb_nas.datasets import median_of_passes, read_table

    d = Path(__file__).resolve().parents[2] / "research" / "runs" / "passes" / "cpu_torch_fp32"
    paths = sorted(d.glob("*.parquet"))
    assert len(paths) == 4
    merged = median_of_passes([read_table(p) for p in paths], [p.name for p in paths])
    shipped = load_dataset("cpu/torch/fp32")
    assert list(merged["key"]) == list(shipped["key"])
    for col in ("latency_ms", "latency_cv", "peak_mem_mb", "timestamp"):
        assert list(merged[col]) == list(shipped[col]), col
    # every config has three independent ok passes
    counts = pd.concat([read_table(p)[["key"]] for p in paths])["key"].value_counts()
    assert (counts == 3).all()


def _one_line_error(run, *fragments: str) -> None:
    assert run.exit_code == 1, run.output
    lines = run.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.output
    assert "Traceback" not in run.output and "np.float64" not in run.output
    for f in fragments:
        assert f in lines[0], lines[0]


def test_messages_show_plain_numbers(real_rows):
    bad = real_rows.copy()
    bad.loc[1, "latency_ms"] = -2.5
    with pytest.raises(InputFileError) as info:
        validate_rows(bad, "bad.csv")
    assert "got -2.5." in str(info.value) and "np.float64" not in str(info.value)


def test_merge_refuses_passes_of_different_platforms(real_rows, tmp_path):
    """Issue 19 #7: passes of two platforms (no key in common) are refused, naming both."""
    cuda = real_rows.assign(platform="cuda/torch/fp32", device="cuda")
    cuda["key"] = [
        Config("basic", 10, 0.1, 32, b).key for b in (1, 2)
    ]  # other configs: the per-key check alone would not see the mix
    cuda[["depth"]] = 10
    paths = [tmp_path / "cpu.csv", tmp_path / "cuda.csv"]
    real_rows.to_csv(paths[0], index=False)
    cuda.to_csv(paths[1], index=False)
    out = tmp_path / "merged.csv"
    run = CliRunner().invoke(cli, ["dataset", "merge", *map(str, paths), "-o", str(out)])
    _one_line_error(run, "different platforms", "cpu/torch/fp32", "cuda/torch/fp32")
    assert not out.exists()


def test_dataset_list_skips_a_stray_file_with_a_warning(real_rows, tmp_path, monkeypatch):
    """Issue 19 #17: one bad file in the data folder does not break the list."""
    import carb_nas.datasets._shipped as shipped
    from carb_nas.datasets._shipped import DatasetWarning

    real_rows.to_csv(tmp_path / "cpu_torch_fp32.csv", index=False)
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")
    monkeypatch.setattr(shipped, "datasets_dir", lambda: tmp_path)
    monkeypatch.setattr(shipped, "zoo_dir", lambda: tmp_path / "no-zoo")
    with pytest.warns(DatasetWarning, match="notes.csv"):
        items = list_datasets()
    assert [d["platform"] for d in items] == ["cpu/torch/fp32"]
    run = CliRunner().invoke(cli, ["dataset", "list", "--json"])
    assert run.exit_code == 0, run.output
    (line,) = run.stderr.splitlines()  # the CLI shows a warning as one line
    assert line.startswith("warning: ") and "notes.csv: not a dataset" in line
    listed = [d["platform"] for d in json.loads(run.stdout) if d["source"] == "measured"]
    assert listed == ["cpu/torch/fp32"]


def test_one_loader_partial_rule(real_rows):
    """Analysis inputs: the same value checks, no provenance or completeness requirement."""
    synthetic = real_rows[[*CONFIG_COLUMNS[:5], "latency_ms"]]
    synthetic = synthetic.assign(device="synthetic", status="ok")
    out = load_dataset(synthetic, partial=True, name="mine")
    assert list(out.columns) == list(synthetic.columns) + ["precision", "runtime"]
    assert out.attrs["source"] == "mine" and out["depth"].dtype.kind == "i"
    with pytest.raises(InputFileError, match="device"):
        load_dataset(synthetic)  # a dataset: required columns and real devices
    bad = synthetic.assign(latency_ms=[1.0, 0.0])
    with pytest.raises(InputFileError, match="mine: bad value in column 'latency_ms'"):
        load_dataset(bad, partial=True, name="mine")


def test_append_rows_replaces_duplicates_and_refuses_other_platforms(real_rows, tmp_path):
    from carb_nas.datasets import append_rows, check_appendable, read_table

    path = tmp_path / "rows.csv"
    assert append_rows(real_rows.iloc[:1], path) == (path, [])
    first = str(real_rows["key"].iloc[0])
    assert append_rows(real_rows, path) == (path, [first])  # the first config again: replaced
    again = read_table(path)
    assert len(again) == 2 and again["key"].is_unique
    before = path.read_bytes()
    with pytest.raises(InputFileError, match="another platform"):
        check_appendable(path, "cuda/torch/fp32")
    # a torn last row (truncated write) is never parsed as data
    torn = tmp_path / "torn.csv"
    torn.write_bytes(before[: before.rindex(b",") - 1])
    with pytest.raises(InputFileError, match="torn.csv"):
        append_rows(real_rows, torn)
    with pytest.raises(InputFileError, match="existing directory"):
        check_appendable(tmp_path / "nowhere" / "rows.csv", "cpu/torch/fp32")
    assert path.read_bytes() == before
