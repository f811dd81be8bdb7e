"""Stop 39's check of the default module model (docs/costmodel.md, "Stop 39"): 32 zoo networks
measured on a Zen 4 VM (docs/checks/module_default_zen4_32.csv: 4 per family group, drawn from
zoo-epyc's rows outside its first 110 per group and outside zoo-zen4, so neither model saw them;
`benchmarks/any_cnn_data.py measure --specs <them> --reference`), predicted by the default
module model (zoo-zen4) and by the previous default's recipe (zoo-epyc, 110 per group, not
anchored; ~75 s of training). Latency MAPE raw, then after a machine factor (the median
measured / predicted ratio of the other 31 networks), and the share within 15 % after it.

    PYTHONPATH=$PWD python docs/checks/module_default_zen4.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from carb_nas.costmodel import ModuleCostModel, load_default_module_model, network_tables
from carb_nas.datasets import zoo_dir
from carb_nas.space import family_group


def report(name: str, y: np.ndarray, p: np.ndarray) -> None:
    r = y / p
    factor = np.array([np.median(np.delete(r, i)) for i in range(len(r))])
    err = np.abs(p * factor / y - 1)
    print(f"{name}: MAPE raw {np.mean(np.abs(p / y - 1)) * 100:.1f} %, factor "
          f"{np.median(r):.2f}, calibrated {err.mean() * 100:.1f} %, within 15 % "
          f"{np.mean(err <= 0.15) * 100:.0f} %")  # fmt: skip


rows = pd.read_csv("docs/checks/module_default_zen4_32.csv")
net, ops = network_tables(rows)
y = net["latency_ms"].to_numpy(float)
report("default (zoo-zen4)", y, load_default_module_model(verbose=False).predict(net, ops, None)[
    "latency_ms"].to_numpy())  # fmt: skip
epyc = pd.read_csv(zoo_dir() / "cpu_torch_fp32_zoo-epyc.csv")
epyc = epyc.assign(_g=[family_group(f) for f in epyc["family"]]).sort_values("key")
epyc = epyc.groupby("_g").head(110).drop(columns="_g")
e_net, e_ops = network_tables(epyc, pd.read_csv(zoo_dir() / "cpu_torch_fp32_zoo-epyc_ops.csv.gz"))
old = ModuleCostModel(kernel_anchor=False).fit(e_net, e_ops)
report("previous default (zoo-epyc, 880)", y, old.predict(net, ops, None)["latency_ms"].to_numpy())
