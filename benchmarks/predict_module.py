"""Featurize + predict an arbitrary nn.Module (not a built-in config), warm.

Builds 24 distinct user CNNs (plain or depthwise convs, 2-6 layers, 16-96 channels, kernel 3
or 5) plus the built-in families at width 1, and times ``carb_nas.predict_costs`` on each
after one warm-up call (the cost model loaded, torch warmed). Every module is new to the
feature cache, so each call traces it on the meta device and predicts. Target: <= 50 ms.

Last line: ``ms_per_model=<median> p90_ms=<p90> cv=<cv> n=<n>``.
"""

from __future__ import annotations

import statistics
import time
import warnings

from torch import nn

from carb_nas import predict_costs
from carb_nas.models import build_model
from carb_nas.space import ZOO_FAMILIES, Config


def user_cnn(layers: int, channels: int, kernel: int, depthwise: bool) -> nn.Module:
    mods: list[nn.Module] = [nn.Conv2d(3, channels, 3, 2, 1), nn.BatchNorm2d(channels), nn.ReLU()]
    for _ in range(layers):
        if depthwise:
            mods += [nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels),
                     nn.Conv2d(channels, channels, 1)]  # fmt: skip
        else:
            mods.append(nn.Conv2d(channels, channels, kernel, padding=kernel // 2))
        mods += [nn.BatchNorm2d(channels), nn.ReLU()]
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10)]
    return nn.Sequential(*mods)


def main() -> None:
    warnings.simplefilter("ignore")
    predict_costs(user_cnn(2, 8, 3, False), (1, 3, 32, 32))  # warm-up: model load, torch
    users = [
        user_cnn(layers, ch, k, dw)
        for layers in (2, 4, 6)
        for ch in (16, 96)
        for k in (3, 5)
        for dw in (False, True)
    ]
    user_ms = []
    for m in users:
        t = time.perf_counter()
        predict_costs(m, (8, 3, 64, 64))
        user_ms.append((time.perf_counter() - t) * 1e3)
    family_ms = {}
    for family, depth in ZOO_FAMILIES.items():
        m = build_model(Config(family, depth, 1.0, 64, 1), "meta")
        t = time.perf_counter()
        predict_costs(m, (1, 3, 64, 64))
        family_ms[family] = (time.perf_counter() - t) * 1e3
    for family, ms in family_ms.items():
        print(f"{family:20} {ms:7.1f} ms")
    med = statistics.median(user_ms)
    p90 = sorted(user_ms)[int(0.9 * len(user_ms))]
    cv = statistics.pstdev(user_ms) / statistics.mean(user_ms)
    fam_med = statistics.median(family_ms.values())
    print(
        f"ms_per_model={med:.1f} p90_ms={p90:.1f} cv={cv:.2f} n={len(user_ms)} "
        f"family_ms_median={fam_med:.1f}"
    )


if __name__ == "__main__":
    main()
