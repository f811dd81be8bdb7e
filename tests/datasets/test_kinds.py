"""Machine kinds: every shipped dataset belongs to exactly one complete kind, and names
written before the kinds load the same rows."""

from __future__ import annotations

import json

import pytest

from carb_nas.datasets import MACHINE_KINDS, list_datasets, load_dataset, shipped_names
from carb_nas.datasets._kinds import DEFAULT_DATASETS, SHIPPED_FILES

SHIPPED = list_datasets()


def test_every_shipped_dataset_is_in_the_table_with_exactly_one_kind():
    names = [d["name"] for d in SHIPPED]
    assert sorted(names) == sorted(SHIPPED_FILES)  # no file without a name, no name without a file
    for d in SHIPPED:
        owners = [k for k in MACHINE_KINDS.values() if d["name"] in k.datasets]
        assert [k.id for k in owners] == [d["machine_kind"]], d["name"]
        assert d["path"].endswith(SHIPPED_FILES[d["name"]].split("/", 1)[1] + ".csv")


@pytest.mark.parametrize("kind", list(MACHINE_KINDS.values()), ids=list(MACHINE_KINDS))
def test_each_kind_row_is_complete(kind):
    assert kind.id and kind.device in ("cpu", "cuda") and kind.vendor and kind.cpu_model
    assert kind.family_model and kind.description and kind.datasets
    assert bool(kind.isa) == (kind.device == "cpu")  # a GPU kind's rows do not time the CPU
    assert all(n.startswith(f"{kind.device}/") for n in kind.datasets)


@pytest.mark.parametrize("name", sorted(SHIPPED_FILES))
def test_the_rows_were_measured_on_their_kind(name):
    kind = MACHINE_KINDS[name.rsplit("@", 1)[1]]
    rows = load_dataset(name)
    fp = json.loads(rows["fingerprint"].iloc[0])
    assert set(rows["device_name"]) == {kind.cpu_model}
    cpu = fp.get("cpu") or {}
    if kind.device == "cpu" and cpu:  # rows with the CPU identity record: family/model, ISA
        assert f"{cpu['family']}/{cpu['model']}" == kind.family_model
        assert cpu["vendor"] == kind.vendor and tuple(cpu["isa"]) == kind.isa
    elif kind.device == "cpu":
        assert "not recorded" in kind.family_model


def test_file_spellings_and_bare_names_load_the_same_rows():
    for name, file in SHIPPED_FILES.items():
        old = file.split("/", 1)[1].replace("_", "/")
        assert load_dataset(old).attrs["source"] == load_dataset(name).attrs["source"]
        assert old in shipped_names(other_spellings=True)
    for bare, name in DEFAULT_DATASETS.items():
        assert bare in shipped_names() and name in shipped_names()
        assert load_dataset(bare).attrs["source"] == load_dataset(name).attrs["source"]
    assert "cpu/torch/fp32/zoo" not in shipped_names()  # listed once, by its kind's name
