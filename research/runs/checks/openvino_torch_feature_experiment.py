"""Experiment (stop 31, docs/datasets.md "OpenVINO fp32 on an AMD Zen 4"): OpenVINO latency R2 on a
random split with the default recipe, with and without the paired torch latency (measured, or
predicted by a torch model that never saw the test configs) as a feature.

    PYTHONPATH=. python research/runs/checks/openvino_torch_feature_experiment.py OV_CSV_OR_NAME \\
        TORCH_DATASET [SEEDS] [PRESET]
"""

import sys

import numpy as np
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split

from carb_nas.costmodel import CostModel, physical_offsets, prepare_table
from carb_nas.costmodel.registry import DEFAULT_MODEL_PARAMS
from carb_nas.datasets import load_dataset

ov_src, torch_name = sys.argv[1], sys.argv[2]
seeds = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "0,1,2").split(",")]
preset = sys.argv[4] if len(sys.argv) > 4 else "carb"
# a shipped name, a rows file or a pass (research/runs/passes/...): load_dataset reads and
# checks each
ov = load_dataset(ov_src, ok_only=True).reset_index(drop=True)
tz = load_dataset(torch_name, ok_only=True)
PAIR = ["family", "depth", "width", "resolution", "batch_size"]


def pk(f):
    return f[PAIR].astype(str).agg("|".join, axis=1)


tz = tz.assign(_pk=pk(tz)).drop_duplicates("_pk")
ov = ov.assign(_pk=pk(ov))
torch_lat = ov["_pk"].map(tz.set_index("_pk")["latency_ms"])
print("paired", torch_lat.notna().sum(), "of", len(ov))
data = prepare_table(ov, "ov")
X, Y = data["X"].reset_index(drop=True), data["Y"].reset_index(drop=True)

# out-of-fold torch predictions: a torch model trained on the torch rows NOT among the OV test rows
tdata = prepare_table(tz.drop(columns="_pk"), "torch")
tX, tY = tdata["X"].reset_index(drop=True), tdata["Y"].reset_index(drop=True)
tpk = pk(tz).reset_index(drop=True)


def model(Xa):
    o = physical_offsets(Xa, data["targets"])
    return CostModel(
        **{**DEFAULT_MODEL_PARAMS, "preset": preset, "target_offsets": o or None},
        handle_unknown="ignore",
    )


res = {k: [] for k in ("base", "torch_meas", "torch_pred")}
for seed in seeds:
    idx = np.arange(len(X))
    tr, te = train_test_split(idx, test_size=0.2, random_state=seed)
    y = Y["latency_ms"].to_numpy()
    m = model(X).fit(X.iloc[tr], Y.iloc[tr], platform=data["platform"])
    res["base"].append(r2_score(y[te], m.predict(X.iloc[te])["latency_ms"]))
    Xm = X.assign(log_torch_ms=np.log(torch_lat.to_numpy(float)))
    m = model(Xm).fit(Xm.iloc[tr], Y.iloc[tr], platform=data["platform"])
    res["torch_meas"].append(r2_score(y[te], m.predict(Xm.iloc[te])["latency_ms"]))
    # torch model without the test configs: predictions for all OV rows
    test_pk = set(ov["_pk"].iloc[te])
    keep = ~tpk.isin(test_pk).to_numpy()
    tm = CostModel(
        **{
            **DEFAULT_MODEL_PARAMS,
            "preset": "fast",
            "target_offsets": physical_offsets(tX, tdata["targets"]) or None,
        },
        handle_unknown="ignore",
    ).fit(tX[keep], tY[keep], platform=tdata["platform"])
    tp = tm.predict(X)["latency_ms"].to_numpy(float)
    Xp = X.assign(log_torch_ms=np.log(tp))
    m = model(Xp).fit(Xp.iloc[tr], Y.iloc[tr], platform=data["platform"])
    res["torch_pred"].append(r2_score(y[te], m.predict(Xp.iloc[te])["latency_ms"]))
    print(seed, {k: round(v[-1], 4) for k, v in res.items()}, flush=True)
print({k: (round(float(np.median(v)), 4), round(float(np.min(v)), 4)) for k, v in res.items()})
