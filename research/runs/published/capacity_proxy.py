"""What the published ResNet accuracies say about the built-in capacity proxy.

The ResNet space's default quality, ``carb_nas.search.capacity_proxy``, is
``log10(params) + log10(FLOPs per image)``. timm publishes ImageNet-1k top-1 of ResNets at
depths 18-200, wide variants and several resolutions, under many training recipes
(``results-imagenet.csv``, shipped as ``published/accuracy/imagenet``). This script computes
Spearman's rank correlation between the proxy and the published top-1:

* ``space``: the models the space builds exactly (torchvision-layout ResNets: basic 18/34,
  bottleneck 26/50/101/152 at width 1.0), the proxy from carb_nas's closed-form features of
  the matching config at the evaluated resolution; every published weight (recipe) counts;
* ``space, one recipe``: the same within one training recipe at a time;
* ``resnet family``: every plain/wide/d/c/s ResNet timm lists (depths 10-200, wide 50/101),
  the proxy from timm's own parameter count and GMACs (scaled by resolution squared from the
  benchmark's size, exact for these convnets up to rounding).

    python research/runs/published/capacity_proxy.py        # the figures; JSON on the last line
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from carb_nas.datasets import load_published, load_published_accuracy
from carb_nas.features import compute_features

SPACE_MODELS = {
    "resnet18": ("basic", 18),
    "resnet34": ("basic", 34),
    "resnet26": ("bottleneck", 26),
    "resnet50": ("bottleneck", 50),
    "resnet101": ("bottleneck", 101),
    "resnet152": ("bottleneck", 152),
}
FAMILY = re.compile(r"^(wide_)?resnet(\d+)(_2|[cdst])?$")


def proxy(params: np.ndarray, flops_per_image: np.ndarray) -> np.ndarray:
    return np.log10(params) + np.log10(flops_per_image)


def rho(a, b) -> tuple[float, int]:
    return float(spearmanr(a, b).statistic), int(len(a))


def main() -> dict:
    acc = load_published_accuracy("imagenet")
    acc["recipe"] = acc["model"].str.split(".").str[1]
    space = acc[acc["arch"].isin(SPACE_MODELS)].copy()
    cfg = pd.DataFrame(
        {
            "family": space["arch"].map(lambda a: SPACE_MODELS[a][0]),
            "depth": space["arch"].map(lambda a: SPACE_MODELS[a][1]),
            "width": 1.0,
            "resolution": space["resolution"].astype(int),
            "batch_size": 1,
        }
    )
    f = compute_features(cfg.reset_index(drop=True))
    space["proxy"] = proxy(f["params"].to_numpy(float), f["flops"].to_numpy(float))
    space["params_ours_m"] = f["params"].to_numpy(float) / 1e6
    out = {"space": {}, "space_by_recipe": {}, "resnet_family": {}}
    out["space"]["spearman"], out["space"]["n"] = rho(space["proxy"], space["top1"])
    out["space"]["params_max_abs_diff_m"] = float(
        (space["params_ours_m"] - space["params_m"]).abs().max()
    )
    best = space.sort_values("top1").drop_duplicates(["arch", "resolution"], keep="last")
    out["space"]["best_weights"] = dict(zip(("spearman", "n"), rho(best["proxy"], best["top1"])))
    for recipe, g in space.groupby("recipe"):
        if len(g) >= 4 and g["arch"].nunique() >= 3:
            out["space_by_recipe"][recipe] = dict(
                zip(("spearman", "n"), rho(g["proxy"], g["top1"]))
            )
    bench = load_published("published/rtx4090")
    bench = bench.drop_duplicates("model")[["model", "gmacs", "resolution"]]
    fam = acc[acc["arch"].str.match(FAMILY)].merge(
        bench.rename(columns={"model": "arch", "resolution": "bench_res"}), on="arch"
    )
    fam = fam[fam["arch"] != "test_resnet"]
    fpi = 2e9 * fam["gmacs"] * (fam["resolution"] / fam["bench_res"]) ** 2
    fam["proxy"] = proxy(1e6 * fam["params_m"].to_numpy(float), fpi.to_numpy(float))
    out["resnet_family"]["spearman"], out["resnet_family"]["n"] = rho(fam["proxy"], fam["top1"])
    out["resnet_family"]["archs"] = sorted(fam["arch"].unique())
    for recipe in ("a1_in1k", "tv_in1k", "tv2_in1k", "gluon_in1k", "ra2_in1k"):
        g = fam[fam["recipe"] == recipe]
        if len(g) >= 4:
            out["resnet_family"][recipe] = dict(zip(("spearman", "n"), rho(g["proxy"], g["top1"])))
    spread = space[(space["arch"] == "resnet50") & (space["resolution"] == 224)]["top1"]
    out["resnet50_224_top1_range"] = [float(spread.min()), float(spread.max())]
    print(
        space.sort_values(["arch", "resolution"])[
            ["model", "resolution", "top1", "proxy"]
        ].to_string(index=False)
    )
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
