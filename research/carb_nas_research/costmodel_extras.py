"""Research helpers of the cost model, outside the shipped package.

Used by ``benchmarks/`` (and their tests); not part of ``carb_nas``'s public surface. They
read the cost model's private modules on purpose: a study may look inside what it studies.
A benchmark puts the repository's ``research/`` on ``sys.path`` and imports from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from carb_nas.costmodel._common import err as _err
from carb_nas.costmodel._evaluation import (
    _regime,
    flops_linear_baseline_cv,
    regression_metrics,
)
from carb_nas.costmodel._kernels import (
    KernelCostModel,
    _kernel_samples,
    _with_samples,
    anchored_ops,
    family_groups,
    network_tables,
)
from carb_nas.costmodel._nodes import node_rows_path

__all__ = [
    "anchored_ops",
    "corrector_effect",
    "family_groups",
    "flops_linear_baseline_cv",
    "lofo_kind_breakdown",
    "network_tables",
    "node_rows_path",
]


def corrector_effect(model: Any, X: pd.DataFrame, Y: pd.DataFrame) -> dict[str, Any]:
    """On the low-batch rows: metrics with and without the low-batch corrector."""
    low = _regime(X, getattr(model, "low_batch_threshold", 8))
    if low is None or not low.any():
        return {"skipped": "no low-batch rows"}
    with_c = model.predict(X[low])
    without = model.predict(X[low], low_batch_correction=False)
    return {
        t: {
            "with_corrector": regression_metrics(Y[t][low], with_c[t]),
            "without_corrector": regression_metrics(Y[t][low], without[t]),
            "corrector_fitted": model.correctors_.get(t) is not None,
        }
        for t in model.targets_
        if t in Y
    }


def lofo_kind_breakdown(
    ops: pd.DataFrame,
    groups_of: Mapping[str, str],
    kernel_params: Mapping[str, Any] | None = None,
    random_state: int = 0,
    kernel_samples: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Where the per-op predictions of a held-out family err: per family group (``groups_of``:
    network ``key`` -> group), one :class:`KernelCostModel` trained on the other groups'
    measured ops (and ``kernel_samples``) predicts this group's; per op kind (the traced
    kind: dense, depthwise and grouped convs apart), the predicted / measured time summed over
    the group's networks (``sum_ratio``), the median of that ratio per network
    (``net_median_ratio``), the kind's share of the group's measured op time and the op names
    never measured by name (``unmeasured``; ``by_kind``: those of them predicted by their
    kind's model)."""
    ops = ops[ops["measured_ms"].notna()]
    extra = _kernel_samples(kernel_samples, pd.DataFrame({"key": list(groups_of)}))
    group = ops["key"].map(dict(groups_of))
    if group.isna().any():
        missing = sorted(set(ops.loc[group.isna(), "key"]))[:3]
        raise _err("op rows of unknown networks", "a group for every key", f"none for {missing}",
                  "Pass groups_of for every network of ops.")  # fmt: skip
    kp = dict(kernel_params or {})
    out = []
    for fam in sorted(set(group)):
        km = KernelCostModel(random_state=random_state, **kp).fit(
            _with_samples(ops[group != fam], extra)
        )
        te = ops[group == fam]
        ms, seen = km.predict_ops(te)
        kinds, names, _, logged = km._arrays(te)
        by_kind = km._by_kind_of(kinds, names, logged, seen)
        te = te.assign(_pred=ms, _seen=seen, _by_kind=by_kind)
        total = float(te["measured_ms"].sum())
        for kind, t in te.groupby("kind"):
            per_net = t.groupby("key")[["_pred", "measured_ms"]].sum()
            out.append(
                {
                    "family": fam,
                    "kind": kind,
                    "share": float(t["measured_ms"].sum()) / total,
                    "sum_ratio": float(t["_pred"].sum() / t["measured_ms"].sum()),
                    "net_median_ratio": float((per_net["_pred"] / per_net["measured_ms"]).median()),
                    "unmeasured": sorted(set(t.loc[~t["_seen"], "op"])),
                    "by_kind": sorted(set(t.loc[t["_by_kind"], "op"])),
                }
            )
    return pd.DataFrame(out)
