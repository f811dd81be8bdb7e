"""How cpu/onnxruntime/fp32 was curated: rows measured under heavy CPU contention replaced.

During the first campaign pass the 2-core machine was shared with development work; rows of
cpu/onnxruntime/fp32 measured before 13:50 UTC (90) were re-measured in a separate campaign of
the same platform and protocol (cpu/torch/fp32 went through the same step for 822 rows, and was
later re-measured in full, in one quiet pass, which superseded it):

    carb-nas profile campaigns/fix_cpu_onnxruntime_fp32.csv --device cpu --runtime onnxruntime \
        --precision fp32 --threads 1 -o campaigns/fix_cpu_onnxruntime_fp32
    carb-nas dataset export campaigns/fix_cpu_onnxruntime_fp32 -o /tmp/fix_cpu_onnxruntime_fp32.csv
    (same for torch)

and this script replaced the old rows by key (about 10 % of the 90 ORT rows had been ~4x
inflated with a low CV, so --remeasure-cv-above could not catch them). A second pass ("fix2")
did the same for the 27 ORT rows measured between 13:50 and 14:02 UTC, when the campaign still
shared its core. Run from the repo root:

    python research/runs/replace_contended_rows.py fix cpu_onnxruntime_fp32 cpu_torch_fp32
    python research/runs/replace_contended_rows.py fix2 cpu_onnxruntime_fp32
"""

import sys

import pandas as pd

from carb_nas.datasets import write_table

prefix, platforms = sys.argv[1], sys.argv[2:]
for p in platforms:
    path = f"carb_nas/data/datasets/{p}.csv"
    d = pd.read_csv(path)
    new = pd.read_csv(f"/tmp/{prefix}_{p}.csv")
    new = new[new.status == "ok"]
    if not (new.key.is_unique and set(new.key) <= set(d.key)):
        raise SystemExit(f"{p}: re-measured keys must be unique and already in the dataset")
    before = d.set_index("key").loc[new.key, "latency_ms"].to_numpy()
    ratio = pd.Series(before / new.set_index("key").loc[new.key, "latency_ms"].to_numpy())
    out = pd.concat([d[~d.key.isin(new.key)], new[d.columns]], ignore_index=True)
    out = out.sort_values("timestamp", kind="stable").reset_index(drop=True)
    write_table(out, path)
    print(
        f"{p}: replaced {len(new)} rows; old/new latency median {ratio.median():.3f}, "
        f"p90 {ratio.quantile(0.9):.3f}"
    )
