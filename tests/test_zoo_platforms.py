"""The zoo platforms (issue 15): the shipped OpenVINO fp32/int8 datasets paired with the torch
zoo rows, their default models by name, and screen/search ranking on PyTorch and re-scoring
on OpenVINO INT8."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import MappingProxyType

import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from carb_nas.datasets import list_datasets, load_dataset, shipped_names
from tests.synthetic import TINY_PARAMS

PAIR = ["family", "depth", "width", "resolution", "batch_size"]
OV = ("cpu/openvino/fp32", "cpu/openvino/int8")


@pytest.fixture
def tiny_recipe(model_cache, monkeypatch):
    """Default models trained with the tiny recipe into an empty cache (the CARB preset is
    the same registry logic, only slower)."""
    import carb_nas.costmodel._defaults as defaults

    # no validation/calibration split: the tiny subset (and a partial int8 campaign) has
    # fewer rows than the default split needs; screen/search without --confidence need no
    # intervals
    tiny = {**TINY_PARAMS, "validation_fraction": 0.0, "calibration_fraction": 0.0}
    recipe = MappingProxyType({**defaults.DEFAULT_MODEL_PARAMS, **tiny})
    monkeypatch.setattr(defaults, "DEFAULT_MODEL_PARAMS", recipe)
    return model_cache


SUBSET_ROWS = 24


@pytest.fixture(scope="module")
def zoo_subset(tmp_path_factory):
    """The shipped zoo datasets cut to the configs of SUBSET_ROWS OpenVINO INT8 rows measured
    in fp32 too (and their torch rows): real rows, few architectures to trace, so a default
    model trains in seconds. Plus a space of three of their families."""
    root = tmp_path_factory.mktemp("zoo")
    frames = {p: load_dataset(f"{p}/zoo") for p in ("cpu/torch/fp32", *OV)}
    keys = [frames[p].set_index(PAIR).index for p in frames]
    common = keys[0].intersection(keys[1]).intersection(keys[2])
    int8 = frames["cpu/openvino/int8"].set_index(PAIR).loc[common].reset_index()
    picked = int8.sort_values("key").head(SUBSET_ROWS)[PAIR]
    for platform, frame in frames.items():
        part = frame.merge(picked, on=PAIR)
        part.to_csv(root / f"{platform.replace('/', '_')}_zoo.csv", index=False)
    families = picked["family"].value_counts().index[:3].tolist()
    space = root / "tiny_zoo.toml"
    space.write_text(
        'name = "tiny_zoo"\n[knobs]\n'
        f"family = {json.dumps(families)}\nwidth = [0.5]\nresolution = [32]\n"
        'batch_size = [1, 4]\nprecision = ["fp32"]\n'
        + "".join(
            f"[family.{f}]\ndepth = [{int(picked[picked.family == f].depth.min())}]\n"
            for f in families
        )
    )
    return root, space


@pytest.fixture
def tiny_zoo(zoo_subset, tiny_recipe, monkeypatch):
    """The registry reading the subset as the shipped zoo datasets; returns the space."""
    import carb_nas.datasets._shipped as shipped

    monkeypatch.setattr(shipped, "zoo_dir", lambda: zoo_subset[0])
    return zoo_subset[1]


def _one_line_error(run, *needles):
    assert run.exit_code == 1, run.output
    assert "Traceback" not in run.output
    (line,) = run.stderr.strip().splitlines()
    for n in needles:
        assert n in line, line


# -- datasets --------------------------------------------------------------------------------
OV_DATASETS = [(f"{p}/{q}", f"cpu/torch/fp32/{q}") for q in ("zoo", "zoo-zen5") for p in OV]


@pytest.mark.parametrize(("name", "torch_name"), OV_DATASETS)
def test_openvino_dataset_loads_and_pairs_with_torch_rows_of_its_machine(name, torch_name):
    rows = load_dataset(name)
    platform = name.rsplit("/", 1)[0]
    assert rows.attrs["source"].endswith(f"{name.replace('/', '_')}.csv")
    assert len(rows) > 0
    assert (rows["platform"] == platform).all() and (rows["runtime"] == "openvino").all()
    torch = load_dataset(torch_name)
    paired = rows.merge(torch[PAIR], on=PAIR, how="left", indicator=True)
    assert (paired["_merge"] == "both").all()  # every OpenVINO row has its torch row
    assert set(rows["family"]) - {"basic", "bottleneck"}  # not ResNets only
    fp = json.loads(rows["fingerprint"].iloc[0])
    torch_fp = json.loads(torch["fingerprint"].iloc[0])
    same = ("cpu_model", "cpu")  # the same machine kind (family, model, ISA where recorded)
    assert [fp.get(k) for k in same] == [torch_fp.get(k) for k in same]
    assert fp["openvino"] and fp["scheme"]["conversion"].startswith("openvino.convert_model")
    if platform.endswith("int8"):
        assert fp["nncf"] and fp["scheme"]["calibration"] and "nncf" in fp["scheme"]["quantization"]
    else:
        assert fp["scheme"]["calibration"] is None


@pytest.mark.parametrize("platform", OV)
def test_a_bare_openvino_name_means_its_zen5_dataset(platform):
    source = load_dataset(platform).attrs["source"]
    assert source.endswith(f"{platform.replace('/', '_')}_zoo-zen5.csv")
    assert (load_dataset(f"{platform}/zoo-zen5")["reference_ms"] > 0).all()  # probe-timed rows


def test_dataset_list_names_the_zoo_datasets_and_bare_names_keep_their_meaning():
    names = {d["name"]: d for d in list_datasets()}
    zoo = "cpu/torch/fp32/zoo@intel-avx512"
    assert {
        "cpu/torch/fp32/resnet@amd-epyc-avx512",
        zoo,
        *(f"{p}/zoo@intel-avx512" for p in OV),
    } <= set(names)
    assert names[zoo]["platform"] == "cpu/torch/fp32"
    assert set(OV) <= set(shipped_names())  # the bare name picks the only dataset
    # the bare torch name still means the shipped AMD rows, not the zoo ones
    assert (
        len(load_dataset("cpu/torch/fp32"))
        == names["cpu/torch/fp32/resnet@amd-epyc-avx512"]["rows"]
        != len(load_dataset("cpu/torch/fp32/zoo"))
    )
    run = CliRunner().invoke(cli, ["dataset", "list", "--source", "measured"])
    assert run.exit_code == 0, run.output
    assert any(
        line.startswith("cpu/openvino/int8/zoo@intel-avx512 ") for line in run.stdout.splitlines()
    )


def test_a_misnamed_dataset_file_is_skipped_with_a_warning(tmp_path, monkeypatch):
    import carb_nas.datasets._shipped as shipped
    from carb_nas.datasets._shipped import DatasetWarning

    rows = load_dataset("cpu/openvino/fp32").head(3)
    rows.to_csv(tmp_path / "cpu_torch_int8_zoo.csv", index=False)  # rows of another platform
    monkeypatch.setattr(shipped, "zoo_dir", lambda: tmp_path)
    with pytest.warns(DatasetWarning, match="misnamed dataset"):
        items = list_datasets()
    assert "cpu/torch/int8/zoo" not in {d["name"] for d in items}


def test_a_bare_name_of_several_datasets_means_the_default_qualifier_or_none(tmp_path, monkeypatch):
    import carb_nas.datasets._shipped as shipped
    from carb_nas.errors import MissingFileError

    rows = load_dataset("cpu/openvino/fp32/zoo").head(3)
    monkeypatch.setattr(shipped, "zoo_dir", lambda: tmp_path)
    for qualifier in ("zoo", "xeon"):
        rows.to_csv(tmp_path / f"cpu_openvino_fp32_{qualifier}.csv", index=False)
    with pytest.raises(MissingFileError, match="no shipped dataset for platform"):
        load_dataset("cpu/openvino/fp32")  # two, neither the default: ambiguous, refused
    assert "cpu/openvino/fp32" not in shipped_names()
    default = tmp_path / "cpu_openvino_fp32_zoo-zen5.csv"  # the default's file
    rows.head(2).to_csv(default, index=False)
    assert load_dataset("cpu/openvino/fp32").attrs["source"] == str(default)
    assert "cpu/openvino/fp32" in shipped_names()
    assert len(load_dataset("cpu/openvino/fp32/zoo")) == 3  # a qualified name is unchanged


# -- models by name --------------------------------------------------------------------------
def test_a_platform_without_a_dataset_is_one_line_before_any_training(tiny_zoo, tmp_path):
    space = str(tiny_zoo)
    for args in (
        f"screen {space} --source cpu/torch/fp32/zoo --target cpu/litert/int8 --rank-by latency_ms",
        f"search {space} --source cpu/torch/fp32/zoo --target cpu/openvino/fp16 --trials 8 "
        f"-o {tmp_path / 'p.csv'}",
        f"screen {space} --source cpu/torch/fp32/nowhere --target "
        "cpu/openvino/int8 --rank-by latency_ms",
    ):
        run = CliRunner().invoke(cli, args.split())
        _one_line_error(run, "no shipped dataset or model for platform", "expected one of")
    assert not (tmp_path / "p.csv").exists()
    assert not list(tmp_path.iterdir())
    from carb_nas.costmodel.registry import check_model

    check_model("cpu/openvino/int8")  # a shipped name passes without training
    assert not any(Path(os.environ["CARB_NAS_CACHE"]).rglob("manifest.json"))


def test_bare_and_qualified_names_share_one_cached_model(tiny_zoo, tiny_recipe):
    from carb_nas.predictors import load_predictor

    first = load_predictor("cpu/openvino/int8", calibrated=False).config_model
    again = load_predictor("cpu/openvino/int8/zoo", calibrated=False).config_model
    assert first.default_origin_.startswith("trained")
    assert again.default_origin_.startswith("loaded")
    (entry,) = (tiny_recipe / "models").iterdir()
    assert entry.name.startswith("cpu_openvino_int8_zoo-")
    assert first.platform_["platform"] == "cpu/openvino/int8"
    assert first.platform_["nncf"]  # the rows' fingerprint travels with the model


# -- rank on PyTorch, re-score on OpenVINO INT8 ----------------------------------------------
def _screen(space, tmp_path, top_k):
    out = tmp_path / "shortlist.csv"
    run = CliRunner().invoke(
        cli,
        f"screen {space} --source cpu/torch/fp32/zoo --target cpu/openvino/int8 "
        f"--rank-by latency_ms --top-k {top_k} --budget latency_ms=200 -o {out} --json".split(),
    )
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    short = pd.read_csv(out)
    assert len(short) == top_k and doc["shortlisted"] == top_k and doc["pareto_configs"]
    # stage 1's figures are the torch model's, stage 2's the OpenVINO INT8 model's (on the
    # same configs as OpenVINO INT8 runs them)
    from carb_nas.predictors import load_predictor
    from carb_nas.scoring import predict_frame

    # the shortlist's configs as deployed on the target, ranked as deployed on the source
    assert set(short["runtime"]) == {"openvino"} and set(short["precision"]) == {"int8"}
    assert set(short["source_runtime"]) == {"torch"} and set(short["source_precision"]) == {"fp32"}
    ov = short[[*PAIR, "precision", "runtime"]]
    configs = ov.assign(runtime=short["source_runtime"], precision=short["source_precision"])
    torch_pred = predict_frame(
        load_predictor("cpu/torch/fp32/zoo", calibrated=False).config_model, configs
    )
    ov_pred = predict_frame(load_predictor("cpu/openvino/int8", calibrated=False).config_model, ov)
    assert short["source_latency_ms"].to_numpy() == pytest.approx(torch_pred["latency_ms"])
    assert short["latency_ms"].to_numpy() == pytest.approx(ov_pred["latency_ms"])
    assert not short["latency_ms"].to_numpy() == pytest.approx(torch_pred["latency_ms"])
    return short


def test_screen_ranks_on_torch_and_rescores_on_openvino_int8(tiny_zoo, tmp_path):
    short = _screen(tiny_zoo, tmp_path, top_k=4)
    assert short["family"].nunique() >= 2


def _search(space, tmp_path, trials):
    out = tmp_path / "pareto.csv"
    run = CliRunner().invoke(
        cli,
        f"search {space} --source cpu/torch/fp32/zoo --target cpu/openvino/int8 --budget "
        f"latency_ms=200 --trials {trials} --pop-size 4 --no-validate -o {out} --json".split(),
    )
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    assert doc["pareto"]
    assert doc["rescored"] is True and doc["rescore_platform"] == "cpu/openvino/int8"
    return doc, pd.read_csv(out)


def test_search_rescores_the_pareto_set_on_openvino_int8(tiny_zoo, tmp_path):
    doc, pareto = _search(tiny_zoo, tmp_path, trials=6)
    from carb_nas.predictors import load_predictor
    from carb_nas.scoring import predict_frame

    ov = pareto[[*PAIR, "precision", "runtime"]].assign(runtime="openvino", precision="int8")
    ov_pred = predict_frame(load_predictor("cpu/openvino/int8", calibrated=False).config_model, ov)
    assert pareto["target_latency_ms"].to_numpy() == pytest.approx(ov_pred["latency_ms"])
    assert pareto["target_within_budget"].dtype == bool


@pytest.mark.slow
def test_zoo_space_screen_and_search_on_the_full_datasets(tiny_recipe, tmp_path):
    """The README's commands on search_spaces/zoo.toml and the whole shipped datasets (tiny
    recipe; the architectures of 1,200 rows and 332 configs are traced: minutes)."""
    short = _screen("zoo", tmp_path, top_k=20)
    assert short["family"].nunique() > 2
    _search("zoo", tmp_path, trials=48)
