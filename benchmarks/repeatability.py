"""How well this machine repeats itself: two fresh-process passes of the same configs.

A cost model cannot be checked closer than the machine repeats a measurement, so this is the
floor under every "within +-10 %" target (issue 14's leave-one-family-out, issue 18's
calibration). Give two ops campaigns (``benchmarks/any_cnn_data.py measure``) that hold the
same configs (or two ``carb-nas profile`` campaigns of one platform), e.g. a pass and its
repeat:

    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py measure --reference --out A ...
    PYTHONPATH=$PWD python benchmarks/any_cnn_data.py measure --reference --out B \\
        --remeasure-from A --cv-above -1 [--sample 200]
    PYTHONPATH=$PWD python benchmarks/repeatability.py A B

Prints, per family and in all, the share of configs whose two latencies agree within +-10 %,
raw and with each row scaled to the machine's typical speed by its speed probe
(``datasets.reference_normalized``; both passes need ``--reference``), and the same for the
summed per-op times (the per-op table's own repeatability).

Last line: ``repeat_within10_raw=<..> repeat_within10_normalized=<..> repeat_mape_raw=<..>
repeat_mape_normalized=<..> n=<..>`` (shares, MAPE in %; latency of pass B against pass A).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd


def _rows(path: str) -> pd.DataFrame:
    from carb_nas.errors import CarbNasError, ConfigError
    from carb_nas.measure.campaign import campaign_rows, read_ops_campaign

    try:
        try:
            rows, _ = read_ops_campaign(path, with_ops=False)
        except ConfigError:  # not an ops campaign: a `carb-nas profile` one (any runtime)
            rows = campaign_rows(path)
    except CarbNasError as e:
        sys.exit(f"error: {e}")
    ok = rows[rows["status"] == "ok"] if "status" in rows else rows.iloc[:0]
    if ok.empty:  # an empty rows.jsonl has no columns at all: say so, no KeyError
        sys.exit(
            f"error: {path} holds no measured row: expected a campaign with at least one ok "
            f"row, got {len(rows)} rows and none ok. Measure it first, or pass another pass."
        )
    return ok.drop_duplicates("key", keep="last")


def agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(share with |b / a - 1| <= 10 %, MAPE in %) of two measurements of the same configs."""
    r = np.abs(b / a - 1)
    return float(np.mean(r <= 0.10)), float(100 * np.mean(r))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", help="an ops campaign directory (or a carb-nas profile campaign)")
    p.add_argument("second", help="another pass over (some of) the same configs")
    args = p.parse_args()
    a, b = _rows(args.first), _rows(args.second)
    m = a.merge(b, on="key", suffixes=("_a", "_b"))
    if len(m) == 0:
        sys.exit(
            f"no config in both passes: expected two campaigns of the same configs, got "
            f"{len(a)} and {len(b)} rows with no key in common. Measure the second with "
            f"--remeasure-from {args.first}."
        )
    probe = {"reference_ms_a", "reference_ms_b"} <= set(m.columns) and bool(
        (m["reference_ms_a"] > 0).all() and (m["reference_ms_b"] > 0).all()
    )
    typical = float(pd.concat([a["reference_ms"], b["reference_ms"]]).median()) if probe else 1.0

    def scaled(col: str, side: str) -> np.ndarray:
        v = m[f"{col}_{side}"].to_numpy(float)
        return v * typical / m[f"reference_ms_{side}"].to_numpy(float) if probe else v

    has_ops = {"op_sum_ms_a", "op_sum_ms_b"} <= set(m.columns)  # ops campaigns only
    fam = m["family_a"].map(lambda f: str(f).split("_")[0])
    pd.set_option("display.width", 200)
    table = []
    for name, sel in [*((f, fam == f) for f in sorted(fam.unique())), ("all", fam == fam)]:
        s = sel.to_numpy()
        raw = agreement(m["latency_ms_a"].to_numpy(float)[s], m["latency_ms_b"].to_numpy(float)[s])
        row = {"family": name, "n": int(s.sum()), "within10_raw": raw[0], "mape_raw": raw[1]}
        if has_ops:
            a_ops, b_ops = (m[f"op_sum_ms_{x}"].to_numpy(float)[s] for x in "ab")
            row["op_sum_within10_raw"] = agreement(a_ops, b_ops)[0]
        if probe:
            norm = agreement(scaled("latency_ms", "a")[s], scaled("latency_ms", "b")[s])
            row.update(within10_normalized=norm[0], mape_normalized=norm[1])
            if has_ops:
                opn = agreement(scaled("op_sum_ms", "a")[s], scaled("op_sum_ms", "b")[s])
                row["op_sum_within10_normalized"] = opn[0]
        table.append(row)
    print(pd.DataFrame(table).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    lat = np.log(m["latency_ms_b"] / m["latency_ms_a"]).to_numpy(float)
    if probe:
        ref = np.log(m["reference_ms_b"] / m["reference_ms_a"]).to_numpy(float)
        corr, slope = np.corrcoef(lat, ref)[0, 1], np.polyfit(ref, lat, 1)[0]
        print(
            f"log latency ratio against log probe ratio: correlation {corr:.2f}, slope "
            f"{slope:.2f}; probe typical {typical:.4f} ms"
        )
    every = table[-1]
    print(
        f"repeat_within10_raw={every['within10_raw']:.3f} "
        f"repeat_within10_normalized={every.get('within10_normalized', float('nan')):.3f} "
        f"repeat_mape_raw={every['mape_raw']:.2f} "
        f"repeat_mape_normalized={every.get('mape_normalized', float('nan')):.2f} n={len(m)}"
    )


if __name__ == "__main__":
    main()
