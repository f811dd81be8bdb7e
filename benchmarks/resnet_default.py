"""Which default predictor for ResNet-space configs (issue 14): the platform's ResNet
CostModel (trained on the shipped cpu/torch/fp32 ResNet rows) or the kernel-level module
model (trained on the zoo dataset), scored on the zoo's ResNet rows measured on this machine.

    PYTHONPATH=$PWD python benchmarks/resnet_default.py [--folds 3]

The module model is scored out of fold: ``--folds`` splits of the zoo's ResNet rows, each
predicted by a model trained on every other zoo row (the other families and the other folds'
ResNets), never on itself. The ResNet CostModel never saw the zoo rows (it is trained on the
shipped dataset, measured on another machine of the same platform name).
Last line: ``resnet_model_within10=<share> module_model_within10=<share>
resnet_model_mape=<m> module_model_mape=<m> n=<rows>``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import mean_absolute_percentage_error as mape
from sklearn.model_selection import KFold

from carb_nas.costmodel import ModuleCostModel, load_default_model
from carb_nas.costmodel.registry import zoo_dataset_paths

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))  # research helpers
from carb_nas_research.costmodel_extras import family_groups, network_tables  # noqa: E402

from carb_nas.costmodel._kernels import within
from carb_nas.scoring import predict_frame


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folds", type=int, default=3)
    p.add_argument(
        "--first-fold-only", action="store_true", help="score one fold (1/folds of the rows)"
    )
    p.add_argument("--save-tables", default=None, help="also write PREFIX_net/_ops.parquet")
    args = p.parse_args()
    rows_csv, ops_csv = zoo_dataset_paths("cpu/torch/fp32")
    rows = pd.read_csv(rows_csv)
    rows = rows[(rows.status == "ok") & rows.latency_ms.notna() & rows.peak_mem_mb.notna()]
    rows = rows.sort_values("key").reset_index(drop=True)
    ops = pd.read_csv(ops_csv)
    net, tab = network_tables(rows, ops)
    if args.save_tables:
        net.to_parquet(f"{args.save_tables}_net.parquet")
        tab.to_parquet(f"{args.save_tables}_ops.parquet")
    resnet = family_groups(net["family"]) == "resnet"
    res = net[resnet].reset_index(drop=True)
    y = res["latency_ms"].to_numpy(float)

    carb = load_default_model("cpu/torch/fp32")
    p_carb = predict_frame(carb, res[["family", "depth", "width", "resolution", "batch_size",
                                      "precision"]])["latency_ms"].to_numpy(float)  # fmt: skip
    p_mod = np.full(len(res), np.nan)
    others = net[~resnet]
    splits = list(KFold(args.folds, shuffle=True, random_state=0).split(res))
    for tr, te in splits[:1] if args.first_fold_only else splits:
        train = pd.concat([others, res.iloc[tr]], ignore_index=True)
        m = ModuleCostModel().fit(train, tab[tab["key"].isin(set(train["key"]))])
        test = res.iloc[te]
        p_mod[te] = m.predict(test, tab[tab["key"].isin(set(test["key"]))], alpha=None)[
            "latency_ms"
        ].to_numpy(float)
    scored = ~np.isnan(p_mod)
    y, p_carb, p_mod = y[scored], p_carb[scored], p_mod[scored]
    for name, pr in (("resnet CostModel", p_carb), ("module model (out of fold)", p_mod)):
        r = pr / y
        print(f"{name:28} within10 {within(y, pr):.3f}  MAPE {mape(y, pr):.3f}  "
              f"ratio p10/p50/p90 {np.quantile(r, .1):.2f}/{np.median(r):.2f}/"
              f"{np.quantile(r, .9):.2f}")  # fmt: skip
    print(
        f"resnet_model_within10={within(y, p_carb):.3f} module_model_within10="
        f"{within(y, p_mod):.3f} resnet_model_mape={mape(y, p_carb):.3f} "
        f"module_model_mape={mape(y, p_mod):.3f} n={len(y)}"
    )


if __name__ == "__main__":
    main()
