"""Accuracy of the default cost models of the zoo platforms (issue 15): OpenVINO fp32 and int8
(and the torch zoo rows they pair with), on a random split and leave-one-family-out.

    PYTHONPATH=$PWD python benchmarks/openvino_models.py [--platforms cpu/openvino/fp32,...]
        [--preset carb] [--seeds 0] [--max-cv 0.10] [--before ISO]
        [--recipe default|no-offsets|no-mem-offset|group] [--reference-normalized] [--json OUT]

The recipe is the default models' (``carb_nas.costmodel.DEFAULT_MODEL_PARAMS``: CARB preset,
physical offsets, seed 0) on the shipped dataset's ok rows and the built-in families'
architecture features (``carb_nas.costmodel.prepare_table``). ``no-offsets`` drops the
physical offsets (plain log targets), ``no-mem-offset`` only peak memory's (the torch tensor
peak, which an RSS high-water mark does not follow); ``group`` adds the family group
(``carb_nas.space.family_group``) as a categorical column, so the 20 variants' few rows
each share a label.

``--platforms`` takes dataset names too (``cpu/openvino/fp32/zoo-zen5``).
``--reference-normalized`` scales each row's latency to the machine's typical speed by its
speed-probe time (``datasets.reference_normalized``; rows without a probe time are left out),
so the figures read what the model learns apart from the machine's slow phases.

* random split: 20 % held out (``train_test_split``, per seed), R2 of latency and peak
  memory in their own units, and latency R2 of the logs and median |error| / measured;
* leave-one-family-out: per family group (ResNet, ResNeXt, VGG, DenseNet, MobileNetV2,
  MobileNetV3, EfficientNet, RegNet) a model trained on the other groups predicts it (unseen
  variant labels as missing); R2 over all rows pooled, and per group.

Last line: ``ov_fp32_r2=.. ov_int8_r2=.. ov_fp32_lofo_r2=.. ov_int8_lofo_r2=..
ov_fp32_mem_r2=.. ov_int8_mem_r2=..`` (latency R2 on the random split, seed median; pooled
leave-one-family-out latency R2; peak-memory R2 on the random split) and the row counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np
import pandas as pd

TAGS = {
    "cpu/openvino/fp32": "ov_fp32",
    "cpu/openvino/int8": "ov_int8",
    "cpu/torch/fp32/zoo": "torch_zoo",
    "cpu/openvino/fp32/zoo-zen5": "ov_fp32_zen5",
    "cpu/openvino/int8/zoo-zen5": "ov_int8_zen5",
    "cpu/torch/fp32/zoo-zen5": "torch_zoo_zen5",
}


def _data(
    platform: str,
    recipe: str,
    max_cv: float | None = None,
    before: str | None = None,
    normalized: bool = False,
) -> dict[str, Any]:
    from carb_nas.costmodel import prepare_table
    from carb_nas.datasets import load_dataset, reference_normalized
    from carb_nas.space import family_group

    rows = load_dataset(platform, ok_only=True)
    if normalized:
        rows = reference_normalized(rows, drop_unprobed=True)[0].reset_index(drop=True)
    if max_cv is not None:  # the calm rows only: what the recipe reaches on less noisy data
        rows = rows[rows["latency_cv"].astype(float) <= max_cv].reset_index(drop=True)
    if before is not None:  # the rows measured before the machine got busier
        ts = pd.to_datetime(rows["timestamp"])
        rows = rows[(ts < pd.Timestamp(before)).to_numpy()].reset_index(drop=True)
    data = prepare_table(rows, platform)
    if recipe == "group":
        data["X"] = data["X"].assign(group=[family_group(f) for f in data["X"]["family"]])
    data["rows"] = rows
    return data


def _model(data: dict[str, Any], recipe: str, preset: str):
    from carb_nas.costmodel import CostModel, physical_offsets
    from carb_nas.costmodel.registry import DEFAULT_MODEL_PARAMS

    offsets = None if recipe == "no-offsets" else physical_offsets(data["X"], data["targets"])
    if recipe == "no-mem-offset" and offsets:
        offsets.pop("peak_mem_mb", None)
    return CostModel(
        **{**DEFAULT_MODEL_PARAMS, "preset": preset, "target_offsets": offsets or None},
        handle_unknown="ignore",  # a variant label absent from a split's training rows
    )


def _r2(y: pd.Series, p: pd.Series) -> float:
    from sklearn.metrics import r2_score

    return float(r2_score(y.to_numpy(float), p.to_numpy(float)))


def evaluate(
    platform: str,
    recipe: str,
    preset: str,
    seeds: list[int],
    max_cv: float | None = None,
    before: str | None = None,
    normalized: bool = False,
) -> dict[str, Any]:
    from sklearn.model_selection import train_test_split

    from carb_nas.space import family_group

    data = _data(platform, recipe, max_cv, before, normalized)
    X, Y = data["X"], data["Y"]
    out: dict[str, Any] = {"platform": platform, "rows": int(len(X)), "random": []}
    cv = data["rows"]["latency_cv"].astype(float)
    out["latency_cv_median"] = float(cv.median())
    out["latency_cv_p90"] = float(cv.quantile(0.9))
    for seed in seeds:
        Xtr, Xte, Ytr, Yte = train_test_split(X, Y, test_size=0.2, random_state=seed)
        model = _model(data, recipe, preset).fit(Xtr, Ytr, platform=data["platform"])
        p = model.predict(Xte)
        p.index = Xte.index
        lat = Yte["latency_ms"]
        out["random"].append(
            {
                "seed": seed,
                "test_rows": int(len(Xte)),
                "latency_r2": _r2(lat, p["latency_ms"]),
                "latency_log_r2": _r2(np.log(lat), np.log(p["latency_ms"])),
                "latency_median_ape": float(np.median(np.abs(p["latency_ms"] / lat - 1))),
                "peak_mem_r2": _r2(Yte["peak_mem_mb"], p["peak_mem_mb"]),
            }
        )
    groups = np.array([family_group(str(f)) for f in X["family"]])
    pred = pd.DataFrame(index=X.index, columns=list(Y.columns), dtype=float)
    out["lofo"] = {}
    for g in sorted(set(groups)):
        test = groups == g
        model = _model(data, recipe, preset)
        model.fit(X[~test], Y[~test], platform=data["platform"])
        p = model.predict(X[test])
        pred.loc[test, list(Y.columns)] = p[list(Y.columns)].to_numpy()
        y = Y["latency_ms"][test]
        out["lofo"][g] = {
            "rows": int(test.sum()),
            "latency_r2": _r2(y, pred["latency_ms"][test]),
            "latency_median_ape": float(np.median(np.abs(pred["latency_ms"][test] / y - 1))),
            "peak_mem_r2": _r2(Y["peak_mem_mb"][test], pred["peak_mem_mb"][test]),
        }
    out["lofo_latency_r2"] = _r2(Y["latency_ms"], pred["latency_ms"])
    out["lofo_latency_log_r2"] = _r2(np.log(Y["latency_ms"]), np.log(pred["latency_ms"]))
    out["lofo_peak_mem_r2"] = _r2(Y["peak_mem_mb"], pred["peak_mem_mb"])
    return out


def _med(res: dict[str, Any], key: str) -> float:
    return statistics.median(r[key] for r in res["random"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--platforms", default="cpu/openvino/fp32,cpu/openvino/int8")
    ap.add_argument("--preset", default="carb")
    ap.add_argument("--seeds", default="0")
    ap.add_argument(
        "--recipe", choices=["default", "no-offsets", "no-mem-offset", "group"], default="default"
    )
    ap.add_argument("--max-cv", type=float, default=None, help="only rows with latency CV <= this")
    ap.add_argument("--before", default=None, help="only rows measured before this ISO time (UTC)")
    ap.add_argument(
        "--reference-normalized",
        action="store_true",
        help="latencies scaled by each row's speed-probe time (rows without one left out)",
    )
    ap.add_argument("--json", default=None, help="write the full report here")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    results = []
    for platform in [p for p in args.platforms.split(",") if p]:
        res = evaluate(
            platform,
            args.recipe,
            args.preset,
            seeds,
            args.max_cv,
            args.before,
            args.reference_normalized,
        )
        results.append(res)
        print(
            f"{platform}: {res['rows']} rows (latency CV median {res['latency_cv_median']:.1%}, "
            f"p90 {res['latency_cv_p90']:.1%}; max CV {args.max_cv}, before {args.before}, "
            f"reference-normalized {args.reference_normalized}); "
            "random split "
            f"({args.recipe}, {args.preset}, seeds {seeds}): latency R2 "
            f"{_med(res, 'latency_r2'):.4f} (logs "
            f"{_med(res, 'latency_log_r2'):.4f}, median |err| "
            f"{_med(res, 'latency_median_ape'):.1%}), peak memory R2 "
            f"{_med(res, 'peak_mem_r2'):.4f}; leave-one-family-out pooled latency R2 "
            f"{res['lofo_latency_r2']:.4f} (logs {res['lofo_latency_log_r2']:.4f}), peak "
            f"memory {res['lofo_peak_mem_r2']:.4f}"
        )
        for g, r in res["lofo"].items():
            print(
                f"  {g:<13} {r['rows']:>4} rows  latency R2 {r['latency_r2']:8.3f}  median "
                f"|err| {r['latency_median_ape']:6.1%}  peak memory R2 {r['peak_mem_r2']:8.3f}"
            )
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    parts = []
    for res in results:
        tag = TAGS.get(res["platform"], res["platform"].replace("/", "_"))
        parts += [f"{tag}_r2={_med(res, 'latency_r2'):.4f}"]
    for res in results:
        tag = TAGS.get(res["platform"], res["platform"].replace("/", "_"))
        parts += [f"{tag}_lofo_r2={res['lofo_latency_r2']:.4f}"]
    for res in results:
        tag = TAGS.get(res["platform"], res["platform"].replace("/", "_"))
        parts += [f"{tag}_mem_r2={_med(res, 'peak_mem_r2'):.4f}", f"{tag}_rows={res['rows']}"]
    print(" ".join(parts))


if __name__ == "__main__":
    main()
