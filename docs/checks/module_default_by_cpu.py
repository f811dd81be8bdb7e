"""Which machine kind's module model predicts a machine best: 32 zoo networks neither model
saw (4 per family group, drawn from zoo-epyc's rows outside its first 110 per group and outside
zoo-zen4), measured on one machine (``benchmarks/any_cnn_data.py measure --specs <them>
--reference``), predicted by the default module model (zoo-zen4, AVX-512 Zen 4) and by a model
of zoo-epyc (AVX2 Zen 3; 110 per group, not anchored, the default before stop 39; ~20-75 s of
training). Latency MAPE raw, then after a machine factor (the median measured / predicted ratio
of the other 31 networks, as a calibration's would give), the share within 10 and 15 % after
it, and the calibrated MAPE per family group.

- ``docs/checks/module_default_zen4_32.csv`` (the default): on a Zen 4 VM, stop 39
  (docs/costmodel.md, "Stop 39" and "Stop 40").
- ``docs/checks/module_default_zen3_32.csv``: on a Zen 3 VM (zoo-epyc's kind), stop 41.

    PYTHONPATH=$PWD python docs/checks/module_default_by_cpu.py [ROWS.csv]
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from carb_nas.costmodel import ModuleCostModel, load_default_module_model, network_tables
from carb_nas.datasets import zoo_dir
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


path = sys.argv[1] if len(sys.argv) > 1 else "docs/checks/module_default_zen4_32.csv"
rows = pd.read_csv(path)
net, ops = network_tables(rows)
y = net["latency_ms"].to_numpy(float)
zen4 = report("default (zoo-zen4)", y, load_default_module_model(verbose=False).predict(
    net, ops, None)["latency_ms"].to_numpy())  # fmt: skip
epyc = pd.read_csv(zoo_dir() / "cpu_torch_fp32_zoo-epyc.csv")
epyc = epyc.assign(_g=[family_group(f) for f in epyc["family"]]).sort_values("key")
epyc = epyc.groupby("_g").head(110).drop(columns="_g")
e_net, e_ops = network_tables(epyc, pd.read_csv(zoo_dir() / "cpu_torch_fp32_zoo-epyc_ops.csv.gz"))
old = ModuleCostModel(kernel_anchor=False).fit(e_net, e_ops)
zen3 = report("zoo-epyc, 880", y, old.predict(net, ops, None)["latency_ms"].to_numpy())
groups = [family_group(f) for f in net["family"]]
table = pd.DataFrame({"group": groups, "zoo-zen4": zen4, "zoo-epyc": zen3}).groupby("group")
print((table.mean() * 100).round(1).to_string())
