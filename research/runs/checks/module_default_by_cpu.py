"""Which machine kind's module model predicts a machine best: 32 zoo networks (4 per family
group, drawn from zoo-epyc's rows outside its first 110 per group and outside zoo-zen4),
measured on one machine (``benchmarks/any_cnn_data.py measure --specs <them> --reference``),
predicted by the default module model of each CPU kind (``costmodel.MODULE_CPU_KINDS``:
``avx512`` zoo-zen4, AMD Zen 4; ``avx2`` zoo-zen3, AMD Zen 3; ``intel-avx512`` zoo, the Intel
Xeon rows). Networks a model trained on are left out of every model's score (8 of the 32 are
in the Intel rows), so all are scored on the same networks. Latency MAPE raw, then after a
machine factor (the median measured / predicted ratio of the other networks, as a
calibration's would give), the share within 10 and 15 % after it, and the calibrated MAPE per
family group.

- ``research/runs/checks/module_default_zen4_32.csv``: on a Zen 4 VM, stop 39
  (research/notes/costmodel.md).
- ``research/runs/checks/module_default_zen3_32.csv``: on a Zen 3 VM, stop 41.
- ``research/runs/checks/module_default_intel_32.csv``: on an Intel Xeon VM with AVX-512 and AMX
  (family 6 model 167), stop 49.

    PYTHONPATH=$PWD python research/runs/checks/module_default_by_cpu.py [ROWS.csv]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from carb_nas.costmodel.registry import (
    MODULE_CPU_KINDS,
    load_default_module_model,
    zoo_dataset_paths,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "research"))  # research helpers
from carb_nas_research.costmodel_extras import network_tables  # noqa: E402

from carb_nas.space import family_group


def report(name: str, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    r = y / p
    factor = np.array([np.median(np.delete(r, i)) for i in range(len(r))])
    err = np.abs(p * factor / y - 1)
    print(f"{name}: MAPE raw {np.mean(np.abs(p / y - 1)) * 100:.1f} %, factor "
          f"{np.median(r):.2f}, calibrated {err.mean() * 100:.1f} %, within 10 % "
          f"{np.mean(err <= 0.10) * 100:.0f} %, within 15 % "
          f"{np.mean(err <= 0.15) * 100:.0f} %")  # fmt: skip
    return err


path = sys.argv[1] if len(sys.argv) > 1 else "research/runs/checks/module_default_zen4_32.csv"
rows = pd.read_csv(path)
seen: set[str] = set()
for kind in MODULE_CPU_KINDS:
    paths = zoo_dataset_paths("cpu/torch/fp32", kind)
    assert paths is not None
    seen |= set(pd.read_csv(paths[0], usecols=["key"])["key"])
rows = rows[~rows["key"].isin(seen)].reset_index(drop=True)
print(f"{path}: {len(rows)} networks no model trained on")
net, ops = network_tables(rows)
y = net["latency_ms"].to_numpy(float)
errors = {}
for kind in MODULE_CPU_KINDS:
    model = load_default_module_model(verbose=False, cpu_kind=kind)
    p = model.predict(net, ops, None)["latency_ms"].to_numpy()
    errors[kind] = report(f"{kind} model", y, p)
groups = [family_group(f) for f in net["family"]]
table = pd.DataFrame({"group": groups, **errors}).groupby("group")
print((table.mean() * 100).round(1).to_string())
