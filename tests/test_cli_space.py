"""``carb-nas space ...`` and ``carb-nas space features``, including every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result

from carb_nas.cli import cli
from carb_nas.errors import MissingFileError
from carb_nas.features import FEATURE_COLUMNS, compute_features
from carb_nas.space import CONFIG_COLUMNS, configs_to_frame, load_space

GOOD_TOML = """
name = "tiny"
carb_ranges = true
[knobs]
family = ["basic", "bottleneck"]
width = [0.25, 0.5]
resolution = {start = 32, stop = 64, step = 32}
batch_size = {start = 1, stop = 4, factor = 2}
precision = ["fp32", "fp16"]
[family.basic]
depth = [10, 18]
[family.bottleneck]
depth = [50]
"""
GOOD_CSV = (
    "family,depth,width,resolution,batch_size,precision\n"
    "basic,18,1.0,64,4,fp32\n"
    "bottleneck,50,0.5,32,1,fp16\n"
    "basic,10,0.25,96,2,fp32\n"
)


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), obj={"debug": False})


@pytest.fixture
def good_toml(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(GOOD_TOML)
    return path


@pytest.fixture
def good_csv(tmp_path: Path) -> Path:
    path = tmp_path / "configs.csv"
    path.write_text(GOOD_CSV)
    return path


# -- happy paths -------------------------------------------------------------------------------
def test_space_count_json_and_plain(good_toml: Path) -> None:
    result = _run("space", "count", str(good_toml), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"count": (2 * 2 + 1 * 2) * 2 * 3 * 2}
    assert _run("space", "count", "carb_screening", "--json").stdout.strip() == '{"count": 3072}'
    assert _run("space", "count", "resnet").stdout.strip() == "14688"


def test_space_show_lists_every_knob(good_toml: Path) -> None:
    result = _run("space", "show", str(good_toml))
    assert result.exit_code == 0
    for word in ("tiny", "basic", "bottleneck", "width", "resolution", "batch_size", "72 configs"):
        assert word in result.stdout


def test_space_sample_writes_the_api_sample(good_toml: Path, tmp_path: Path) -> None:
    out = tmp_path / "sample.csv"
    result = _run("space", "sample", str(good_toml), "-n", "7", "--seed", "3", "-o", str(out))
    assert result.exit_code == 0, result.output
    written = pd.read_csv(out)
    expected = configs_to_frame(load_space(good_toml).sample(7, seed=3))
    pd.testing.assert_frame_equal(written, expected, check_dtype=False)


def test_features_json_in_input_order(good_csv: Path) -> None:
    result = _run("space", "features", str(good_csv), "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    frame = pd.read_csv(good_csv)
    assert [(r["family"], r["depth"], r["resolution"]) for r in rows] == list(
        zip(frame["family"], frame["depth"], frame["resolution"])
    )
    expected = compute_features(frame)
    for row, (_, exp) in zip(rows, expected.iterrows()):
        assert set(CONFIG_COLUMNS) | set(FEATURE_COLUMNS) <= set(row)
        assert row["flops"] == exp["flops"] and row["params"] == exp["params"]
        assert row["tensor_peak_mb"] == exp["tensor_peak_mb"]
    assert rows[0]["runtime"] == "torch"  # defaulted


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_features_output_file(good_toml: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"features.{suffix}"
    result = _run("space", "features", str(good_toml), "-o", str(out))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out) if suffix == "csv" else pd.read_parquet(out)
    grid = load_space(good_toml).grid()
    assert len(table) == len(grid) == 72
    assert list(table.columns) == [*CONFIG_COLUMNS, *FEATURE_COLUMNS]
    assert table["flops"].tolist() == compute_features(grid)["flops"].tolist()
    assert result.stdout == ""  # the table went to the file, the note to stderr
    assert "wrote features of 72 configs" in result.stderr


def test_features_readable_table_and_summary(good_csv: Path) -> None:
    small = _run("space", "features", str(good_csv))
    assert small.exit_code == 0
    lines = small.stdout.strip().splitlines()
    assert len(lines) == 4 and "flops" in lines[0] and "tensor_peak_mb" in lines[0]
    big = _run("space", "features", "carb_screening")
    assert big.exit_code == 0
    assert "3,072 in all" in big.stdout and "max" in big.stdout


# -- bad input: one clear line, exit code 1, no traceback, no output file --------------------
TOML_CASES = {
    "malformed TOML": ("name = [\n", ["malformed TOML"]),
    "unknown knob": (GOOD_TOML.replace("[knobs]", "[knobs]\ncolour = [1]"), ["colour", "knob"]),
    "empty list": (GOOD_TOML.replace("width = [0.25, 0.5]", "width = []"), ["width", "empty"]),
    "empty range table": (
        GOOD_TOML.replace("width = [0.25, 0.5]", "width = {start = 0.25}"),
        ["width", "range"],
    ),
    "inverted range": (
        GOOD_TOML.replace("stop = 64, step = 32", "stop = 16, step = 32").replace(
            "start = 32", "start = 64"
        ),
        ["resolution", "start=64", "stop=16"],
    ),
    "zero step": (GOOD_TOML.replace("step = 32", "step = 0"), ["resolution", "step"]),
    "outside CARB width": (
        GOOD_TOML.replace("width = [0.25, 0.5]", "width = [0.25, 8.0]"),
        ["width", "8.0", "CARB", "4.0"],
    ),
    "outside CARB depth": (
        GOOD_TOML.replace("depth = [10, 18]", "depth = [10, 202]"),
        ["depth", "202", "152"],
    ),
    "unknown family": (GOOD_TOML.replace('"bottleneck"]', '"dense"]'), ["family", "dense"]),
    "unknown family table": (
        GOOD_TOML + "[family.wide]\ndepth = [10]\n",
        ["family", "wide"],
    ),
    "zero batch": (
        GOOD_TOML.replace("batch_size = {start = 1, stop = 4, factor = 2}", "batch_size = [0, 1]"),
        ["batch_size", "0"],
    ),
    "negative batch": (
        GOOD_TOML.replace("batch_size = {start = 1, stop = 4, factor = 2}", "batch_size = [-4]"),
        ["batch_size", "-4"],
    ),
    "unsupported precision": (
        GOOD_TOML.replace('["fp32", "fp16"]', '["fp32", "fp8"]'),
        ["precision", "fp8"],
    ),
    "invalid depth": (GOOD_TOML.replace("depth = [50]", "depth = [51]"), ["depth", "51"]),
    "non-numeric width": (
        GOOD_TOML.replace("width = [0.25, 0.5]", 'width = [0.25, "wide"]'),
        ["width", "wide"],
    ),
    "nan width": (
        GOOD_TOML.replace("carb_ranges = true", "carb_ranges = false").replace(
            "width = [0.25, 0.5]", "width = [nan]"
        ),
        ["width", "nan", "16"],
    ),
    "huge width": (
        GOOD_TOML.replace("carb_ranges = true", "carb_ranges = false").replace(
            "width = [0.25, 0.5]", "width = [1e30]"
        ),
        ["width", "1e+30", "0.0001 to 16"],
    ),
    "depth above the maximum": (
        GOOD_TOML.replace("carb_ranges = true", "carb_ranges = false").replace(
            "depth = [10, 18]", "depth = [10, 2000000]"
        ),
        ["depth", "2000000", "1202"],
    ),
    "huge resolution range": (
        GOOD_TOML.replace(
            "start = 32, stop = 64, step = 32", "start = 1, stop = 100000000, step = 1"
        ),
        ["resolution", "32"],
    ),
}
CSV_CASES = {
    "missing columns": (
        "family,depth,width,batch_size\nbasic,18,1.0,4\n",
        ["resolution", "missing column"],
    ),
    "non-numeric value": (
        GOOD_CSV.replace("basic,10,0.25,96", "basic,10,0.25,big"),
        ["resolution", "big", "row 3"],
    ),
    "non-integer depth": (GOOD_CSV.replace("basic,18,", "basic,18.5,"), ["depth", "18.5"]),
    "unknown family": (GOOD_CSV.replace("basic,18", "dense,18"), ["family", "dense"]),
    "zero batch": (GOOD_CSV.replace(",64,4,", ",64,0,"), ["batch_size", "0"]),
    "unsupported precision": (GOOD_CSV.replace("fp16", "fp8"), ["precision", "fp8"]),
    "invalid depth": (GOOD_CSV.replace("basic,18", "basic,19"), ["depth", "19"]),
    "empty file": ("", ["configs.csv"]),
    "header only": (GOOD_CSV.splitlines()[0] + "\n", ["configs.csv", "no configs"]),
    "huge width": (GOOD_CSV.replace("basic,18,1.0,", "basic,18,1e30,"), ["width", "1e+30", "16"]),
    "huge resolution": (GOOD_CSV.replace(",96,", ",1e30,"), ["resolution", "1024", "row 3"]),
    "nan width": (GOOD_CSV.replace("basic,18,1.0,", "basic,18,nan,"), ["width", "row 1"]),
}


def _assert_clean_failure(result: Result, words: list[str], out: Path | None) -> None:
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: ") and "Traceback" not in result.output
    assert "expected" in line, line
    for word in words:
        assert word in line, (word, line)
    if out is not None:
        assert not out.exists()
        assert not list(out.parent.glob(f".{out.name}*"))  # no temporary left either


@pytest.mark.parametrize("case", sorted(TOML_CASES))
def test_bad_space_files(case: str, tmp_path: Path) -> None:
    text, words = TOML_CASES[case]
    space = tmp_path / "bad.toml"
    space.write_text(text)
    out = tmp_path / "out.csv"
    _assert_clean_failure(_run("space", "count", str(space)), words, None)
    _assert_clean_failure(_run("space", "show", str(space)), words, None)
    _assert_clean_failure(
        _run("space", "sample", str(space), "-n", "3", "-o", str(out)), words, out
    )
    _assert_clean_failure(_run("space", "features", str(space), "-o", str(out)), words, out)


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_bad_configs_files(case: str, tmp_path: Path) -> None:
    text, words = CSV_CASES[case]
    configs = tmp_path / "configs.csv"
    configs.write_text(text)
    out = tmp_path / "features.parquet"
    _assert_clean_failure(_run("space", "features", str(configs), "-o", str(out)), words, out)
    _assert_clean_failure(_run("space", "features", str(configs), "--json"), words, None)


def test_configs_as_parquet_with_bad_values(tmp_path: Path) -> None:
    configs = tmp_path / "configs.parquet"
    pd.DataFrame(
        {"family": ["basic"], "depth": [18], "width": [1.0], "resolution": [64], "batch_size": [-1]}
    ).to_parquet(configs)
    _assert_clean_failure(_run("space", "features", str(configs)), ["batch_size", "-1"], None)


@pytest.mark.parametrize(
    "args",
    [
        ("space", "count", "{dir}/nowhere.toml"),
        ("space", "show", "{dir}/nowhere.toml"),
        ("space", "sample", "{dir}/nowhere.toml", "-n", "2", "-o", "{dir}/out.csv"),
        ("space", "features", "{dir}/nowhere.toml", "-o", "{dir}/out.csv"),
        ("space", "features", "{dir}/nowhere.csv", "-o", "{dir}/out.csv"),
        ("space", "features", "{dir}/nowhere.parquet", "--json"),
    ],
)
def test_missing_files(args: tuple, tmp_path: Path) -> None:
    argv = [a.format(dir=tmp_path) for a in args]
    _assert_clean_failure(_run(*argv), ["not found", "nowhere"], tmp_path / "out.csv")


def test_bad_outputs(good_csv: Path, tmp_path: Path) -> None:
    txt = tmp_path / "features.txt"
    _assert_clean_failure(_run("space", "features", str(good_csv), "-o", str(txt)), [".csv"], txt)
    deep = tmp_path / "no" / "such" / "dir" / "f.csv"
    _assert_clean_failure(
        _run("space", "features", str(good_csv), "-o", str(deep)), ["directory"], deep
    )
    bad_n = tmp_path / "s.csv"
    _assert_clean_failure(
        _run("space", "sample", "resnet", "-n", "0", "-o", str(bad_n)), ["-n", "0"], bad_n
    )


def test_failed_write_leaves_no_partial_file(
    good_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "features.csv"

    def half_written(self: pd.DataFrame, path: Path, **kwargs: object) -> None:
        Path(path).write_text("family,depth\nbasic,")  # a partial file, then the disk fills up
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_written)
    _assert_clean_failure(
        _run("space", "features", str(good_csv), "-o", str(out)), ["No space left"], out
    )


def test_debug_shows_the_exception(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--debug", "space", "features", str(tmp_path / "nowhere.csv")]
    )
    assert result.exit_code == 1
    assert isinstance(result.exception, MissingFileError)


# -- issue 13 (shared options, --json, one example each) and issue 19 ---------------------------
def test_space_show_json(good_toml: Path) -> None:
    result = _run("space", "show", str(good_toml), "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["count"] == 72 and shown["name"] == "tiny"
    assert shown["knobs"]["bottleneck"]["depth"] == [50]
    assert shown["knobs"]["basic"]["resolution"] == [32, 64]


def test_space_sample_says_when_the_space_holds_fewer_configs(
    good_toml: Path, tmp_path: Path
) -> None:
    out = tmp_path / "all.csv"
    result = _run("space", "sample", str(good_toml), "-n", "100000", "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "requested": 100000,
        "count": 72,
        "space_count": 72,
        "output": str(out),
    }
    assert "holds only 72 configs, fewer than the 100,000 asked for" in result.stderr
    assert len(pd.read_csv(out)) == 72


@pytest.mark.parametrize("seed", ["-1", "1.5", "2e40"])
def test_space_sample_refuses_bad_seeds(good_toml: Path, tmp_path: Path, seed: str) -> None:
    out = tmp_path / "s.csv"
    before = good_toml.read_bytes()
    result = _run("space", "sample", str(good_toml), "-n", "3", "--seed", seed, "-o", str(out))
    # a click usage error (the CLI's usage-error policy decides 1 or 2; never a traceback)
    assert result.exit_code in (1, 2) and isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and "--seed" in result.output
    assert not out.exists() and good_toml.read_bytes() == before


@pytest.mark.parametrize(
    "command", [("space", "count"), ("space", "show"), ("space", "sample"), ("space", "features")]
)
def test_every_command_has_one_example_and_json(command: tuple) -> None:
    result = _run(*command, "--help")
    assert result.exit_code == 0
    assert result.stdout.count("Example:") == 1 and "carb-nas " + " ".join(command) in result.stdout
    assert "--json" in result.stdout


def test_features_of_a_header_only_csv_is_one_clear_line(tmp_path: Path) -> None:
    configs = tmp_path / "configs.csv"
    configs.write_text("family,depth,width,resolution,batch_size\n")
    result = _run("space", "features", str(configs))
    _assert_clean_failure(result, ["no configs", "data row"], None)
    assert "Empty DataFrame" not in result.output
