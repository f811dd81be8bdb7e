"""One notion of "the same machine" (carb_nas.datasets.machines), used by kernel samples, the
auto prior pairs and the dataset exports."""

import json

import pandas as pd

from carb_nas.datasets import load_dataset, machines
from carb_nas.datasets._machine import machine_identity


def _with(rows: pd.DataFrame, **changes) -> pd.DataFrame:
    fp = json.loads(rows["fingerprint"].iloc[0])
    for k, v in changes.items():
        if k in fp and isinstance(fp[k], dict) and isinstance(v, dict):
            fp[k] = {**fp[k], **v}
        else:
            fp[k] = v
    return rows.assign(fingerprint=json.dumps(fp, sort_keys=True))


def test_the_software_stack_is_not_the_machine_but_the_cpu_record_is():
    rows = load_dataset("cpu/torch/fp32/zoo-zen4").head(5)
    assert len(machines(rows)) == 1
    assert machines(_with(rows, torch="9.9.9", threads=4)) == machines(rows)
    assert machines(_with(rows, cpu={"microcode": "0xdead"})) != machines(rows)
    assert machines(_with(rows, device_name="Another CPU")) != machines(rows)
    mixed = pd.concat([rows, _with(rows, cpu={"model": "99"})], ignore_index=True)
    assert len(machines(mixed)) == 2


def test_a_row_without_a_readable_fingerprint_counts_by_its_device_name():
    rows = load_dataset("cpu/torch/fp32/zoo-zen4").head(3)
    damaged = rows.assign(fingerprint="{not json")
    assert machines(damaged) == {machine_identity({"device_name": "AMD EPYC"})}
    assert machines(damaged) != machines(rows)  # a name alone never equals a full identity
    bare = pd.DataFrame({"latency_ms": [1.0]})
    assert machines(bare) == {machine_identity(None)}
