"""The default module model (issue 14): trained on first use on the shipped zoo dataset,
cached, reloaded; what predict_costs and `predict --model-spec` use for any module."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from carb_nas import ModelSpec, predict_costs
from carb_nas.cli import cli
from carb_nas.costmodel import ModuleCostModel, _defaults
from carb_nas.costmodel.registry import (
    load_default_module_model,
    zoo_dataset_paths,
    zoo_kernel_samples_path,
)
from carb_nas.datasets import load_kernel_samples
from carb_nas.errors import ModelError
from carb_nas.predictors import load_predictor

#: the real recipe, read at import (the suite's session fixture swaps in a cheap one)
REAL_MODULE_PARAMS = dict(_defaults.DEFAULT_MODULE_PARAMS)


class _Upsampler(nn.Module):
    """A user's network, not from carb_nas's families, with an op the zoo never measured."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3, padding=1)
        self.act = nn.GELU()
        self.shuffle = nn.PixelShuffle(2)
        self.head = nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.shuffle(self.act(self.conv(x))))


@pytest.mark.parametrize(
    ("kind", "dataset", "n_samples"),
    [("amd-zen4", "zoo-zen4", 1599), ("amd-zen3", "zoo-zen3", 1599), ("intel-avx512", "zoo", 0)],
)
def test_zoo_dataset_is_shipped_for_torch_cpu_only(kind, dataset, n_samples):
    rows, ops = zoo_dataset_paths("cpu/torch/fp32", kind)
    assert rows.name == f"cpu_torch_fp32_{dataset}.csv" and ops.is_file()
    assert zoo_dataset_paths("cpu/onnxruntime/int8", kind) is None
    # its kernel samples (same machine kind) ship beside it and are in the recipe; the Intel
    # rows have none
    samples = zoo_kernel_samples_path("cpu/torch/fp32", kind)
    assert REAL_MODULE_PARAMS["kernel_samples"] is True
    if n_samples:
        assert samples is not None and samples.name == f"cpu_torch_fp32_{dataset}_kernels.csv.gz"
        assert len(load_kernel_samples(samples, None, pd.read_csv(rows, nrows=5))) >= n_samples
    else:
        assert samples is None
    with pytest.raises(ModelError, match="no shipped multi-family dataset"):
        load_default_module_model("cpu/onnxruntime/int8", verbose=False)
    with pytest.raises(ModelError, match="unknown default module-model parameters"):
        load_default_module_model(verbose=False, params={"n_trees": 3})


def test_the_module_model_follows_this_machines_cpu_kind():
    from carb_nas.costmodel.registry import module_cpu_kind
    from carb_nas.measure import cpu_identity

    assert module_cpu_kind(["avx2", "fma", "avx512f", "avx512_vnni"]) == "amd-zen4"
    assert module_cpu_kind(["avx2", "fma", "avx512f"], "AuthenticAMD") == "amd-zen4"
    assert module_cpu_kind(["avx2", "avx512f", "amx_tile"], "GenuineIntel") == "intel-avx512"
    assert module_cpu_kind(["avx2", "fma"], "GenuineIntel") == "amd-zen3"  # no AVX-512
    assert module_cpu_kind(["avx2", "fma"]) == module_cpu_kind([]) == "amd-zen3"
    identity = cpu_identity()
    here = module_cpu_kind(identity.get("isa", []), identity.get("vendor"))
    assert module_cpu_kind() == here
    assert zoo_dataset_paths() == zoo_dataset_paths("cpu/torch/fp32", here)
    with pytest.raises(ModelError, match="unknown CPU kind"):
        zoo_dataset_paths("cpu/torch/fp32", "avx3")


@pytest.mark.slow
def test_first_use_trains_caches_and_later_calls_load(tiny_module_defaults, monkeypatch, capsys):
    model = load_default_module_model()
    assert (
        isinstance(model, ModuleCostModel) and model.mode == "kernel" and model.memory == "physics"
    )
    assert model.default_origin_.startswith("trained on first use")
    err = capsys.readouterr().err
    assert "first use only; cached in" in err and "72 shipped networks" in err
    (entry,) = (tiny_module_defaults / "models").iterdir()
    assert entry.name.startswith("cpu_torch_fp32-module-")
    assert not list(entry.rglob("*.pkl"))  # no pickle

    def no_training(*args, **kwargs):
        raise AssertionError("the cached module model should have been loaded, not retrained")

    monkeypatch.setattr(ModuleCostModel, "fit", no_training)
    again = load_predictor("cpu/torch/fp32", calibrated=False).module_model
    assert isinstance(again, ModuleCostModel)
    assert again.default_origin_.startswith("loaded")
    # a damaged entry is retrained, not trusted
    monkeypatch.undo()
    monkeypatch.setenv("CARB_NAS_CACHE", str(tiny_module_defaults))
    from carb_nas.costmodel import _defaults

    monkeypatch.setattr(
        _defaults,
        "DEFAULT_MODULE_PARAMS",
        {**_defaults.DEFAULT_MODULE_PARAMS, "rows_per_family": 9},
    )
    (entry / "manifest.json").write_text("{")
    assert load_default_module_model(verbose=False).default_origin_.startswith("trained")


@pytest.mark.slow
def test_predict_costs_of_a_user_module_lists_unmodelled_ops(tiny_module_defaults):
    with pytest.warns(UserWarning, match="never measured ops.*pixel_shuffle"):
        costs = predict_costs(_Upsampler(), (2, 3, 32, 32))
    assert "module model trained on first use" in costs.model
    assert "pixel_shuffle" in costs.unmodelled_ops and costs.unseen
    for target in ("latency_ms", "peak_mem_mb"):
        v, (lo, hi) = costs[target], costs.interval(target)
        assert 0 < lo <= v <= hi
    assert costs.as_dict()["unmodelled_ops"] == list(costs.unmodelled_ops)
    # a plain CNN of common ops: nothing unmodelled, no warning; the cache is reused
    plain = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))  # fmt: skip
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small = predict_costs(plain, (1, 3, 32, 32))
        big = predict_costs(plain, (8, 3, 128, 128))
    assert small.unmodelled_ops == () and not small.unseen
    assert "module model trained" in small.model and big.model == small.model  # one load
    assert big["latency_ms"] > small["latency_ms"]
    assert len(list((tiny_module_defaults / "models").glob("cpu_torch_fp32-module-*"))) == 1


@pytest.mark.slow
def test_cli_predict_model_spec_uses_the_module_model(tiny_module_defaults, monkeypatch):
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    sys.modules.pop("tests.user_nets", None)
    args = ["predict", "cpu/torch/fp32", "--model-spec", "tests.user_nets:make_cnn",
            "--kwargs", '{"channels": 24}', "--input-shape", "2,3,32,32", "--json",
            "--alpha", "0.1"]  # fmt: skip
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    (row,) = out["predictions"]
    assert row["latency_ms_lower"] <= row["latency_ms"] <= row["latency_ms_upper"]
    assert row["unmodelled_ops"] == "" and "kernel_sum_ms" in row
    assert "module model trained on first use" in r.stderr
    monkeypatch.setattr("carb_nas.predictors._load._CACHE", {})  # as a new process would
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0 and "module model loaded" in again.stderr


def test_the_shipped_module_model_is_todays_recipe_and_loads_without_training(
    monkeypatch, model_cache
):
    """carb_nas/data/models holds the default module model of today's dataset and recipe, so
    users load it (~1 s) instead of training it (75 s). Fails when the zoo dataset, the recipe
    or carb_nas's version changed without `costmodel.ship_default_module_model()`."""
    from carb_nas.costmodel.registry import MODULE_CPU_KINDS, shipped_module_model_dir

    monkeypatch.setattr(_defaults, "DEFAULT_MODULE_PARAMS", REAL_MODULE_PARAMS)
    dirs = {kind: shipped_module_model_dir(cpu_kind=kind) for kind in MODULE_CPU_KINDS}
    for kind, d in dirs.items():
        assert (d / "manifest.json").is_file(), (
            f"no {kind} module model shipped for today's recipe ({d.name}): run python -c "
            f"'from carb_nas.costmodel import ship_default_module_model as s; "
            f's(cpu_kind="{kind}")\' and commit carb_nas/data/models (remove the stale one)'
        )
    shipped = sorted(p.name for p in _defaults._SHIPPED_MODELS.glob("cpu_torch_fp32-module-*"))
    assert shipped == sorted(d.name for d in dirs.values())  # one per kind, no stale one
    d = shipped_module_model_dir()  # this machine's kind
    model = load_default_module_model(verbose=False)
    assert model.default_origin_ == _defaults.DEFAULT_ORIGINS["shipped"]
    assert not (model_cache / "models").exists() or not any((model_cache / "models").iterdir())
    assert not list(d.rglob("*.pkl"))  # no pickle
    pred, _ = model.predict_spec(ModelSpec.from_module(_Upsampler(), (1, 3, 16, 16)), 0.1)
    assert 0 < pred["latency_ms_lower"].iloc[0] <= pred["latency_ms"].iloc[0]
