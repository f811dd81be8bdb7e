"""The kernel-level predictor: per-operator cost models summed per network, then corrected by
the network-level CARB cascade.

:class:`KernelCostModel` learns the time of one operator (a row of
:func:`carb_nas.features.trace_ops`' table) from real per-operator measurements
(:mod:`carb_nas.measure`'s profiler events of whole-network runs): one XGBoost regressor on
``log(ms)`` over the op's kind and aten name (one-hot) and its geometry and traffic (log FLOPs,
log bytes read / written / of weights, channels, spatial size, kernel, stride, groups, the
native-kernel flag; with ``geometry`` (default) also channels per group, elements per channel,
the GEMM depth and oneDNN's 16-lane channel padding). With ``shared_conv`` (default) dense,
grouped and depthwise convolutions are one kind (one prior, one range, told apart by groups
and the geometry): a grouped conv measured in one family only (ResNeXt's, RegNet's) is learned
from every family's convolutions. ``prior="loglinear"`` replaces the linear per-kind prior by
a power law with a floor (it extrapolates power-law ops; measured worse leave-one-family-out,
docs/costmodel.md). Training rows are the median time of each op *signature* (identical ops
of many networks count once, so the thousands of repeated blocks of a dataset cost nothing).
An op whose (kind, name) was never measured is never dropped: it is listed in the result as
unmodelled and widens the network's interval by its estimate. With ``unseen="kind"`` (default)
an op of a measured kind is estimated by that kind's model: the trees' median correction with
each measured name of its kind and cost class (piecewise-linear or transcendental
activations, :func:`_op_class`) whose measured ops reach its size in its place, e.g.
MobileNetV2's ``hardtanh`` (ReLU6) like ``relu`` and ``hardswish``; an op with no such stand-in
(a kind never measured, a ``silu`` larger than every measured ``sigmoid``) gets a roofline
estimate (the training ops' median milliseconds per MB moved and per GFLOP). An op larger than every
measured op of its kind (FLOPs, weight or activation bytes) gets its kind's prior times the
prior's bias at the edge of the measured range (the median measured / prior ratio of the
kind's largest tenth of measured ops), as the trees cannot extrapolate. With ``simd_lanes``
> 0 (off by default) the linear prior has a fifth column, the GFLOPs of a grouped conv times
the halvings of the SIMD vector its channels per group force (:func:`lane_waste`), fitted
alone on what the four-term prior leaves: it helps narrow-group families the training rows
lack and hurts others (docs/accuracy.md).

:class:`ModuleCostModel` is the network-level part: a :class:`~carb_nas.costmodel.CostModel`
over the network features (:data:`FEATURE_COLUMNS` + :data:`OP_AGGREGATE_COLUMNS`) with the
kernel sum ``kernel_sum_ms`` as a feature (``mode="feature"``),
or as a feature and the latency offset through ``target_offsets`` (``mode="both"``: the
offset is the fitted non-negative sum of ``kernel_sum_ms`` and ``n_ops``, a per-op framework
overhead; a ``target_offsets`` column is always a feature of ``X`` too, so "offset alone" is
not a separate choice); ``mode="network"`` ignores the kernel sum (the CARB cascade alone, on the
physical offsets plus ``n_ops``) and ``mode="kernel"`` is the fitted non-negative
``a x kernel sum + b x n_ops`` (the per-operator models alone; the default since ops beyond
the measured range get the prior alone, which held out best family by family: see
docs/accuracy.md; its interval from the out-of-fold relative residuals). Peak memory
(``memory="physics"``, the default) is the fitted non-negative sum of :data:`MEMORY_TERMS`
(the traced ``tensor_peak_mb``, oneDNN's reordered weights ``onednn_weight_mb`` and the
largest oneDNN conv weight reordered per call at batch >= 2, ``onednn_reorder_mb``), with an
interval from its relative residuals; ``memory="cascade"`` lets the cascade's trees correct
it (they fit the log-ratio to that sum, and do not extrapolate to wider families: VGG).
Training rows get the kernel sums of a kernel model
that never saw their network (grouped K-fold), as the cascade's own downstream features are
out-of-fold, so the network model does not over-trust the sum.

Both persist without pickle: XGBoost JSON plus a manifest with the feature levels, the
roofline costs, the format version and the SHA-256 of every file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from carb_nas._io import atomic_directory
from carb_nas.costmodel._common import err, package_version, sha256_file
from carb_nas.costmodel._estimator import CostModel
from carb_nas.costmodel._prepare import PHYSICAL_OFFSETS
from carb_nas.errors import ModelError
from carb_nas.features import (
    FEATURE_COLUMNS,
    OP_AGGREGATE_COLUMNS,
    trace_op_arrays,
    trace_ops,
)

__all__ = [
    "MEMORY_MODES",
    "MEMORY_TERMS",
    "KernelCostModel",
    "ModuleCostModel",
    "MODES",
    "NETWORK_COLUMNS",
    "KERNEL_SUM",
    "network_tables",
    "anchored_ops",
    "leave_one_family_out",
    "lofo_report",
    "family_groups",
]

KERNEL_FORMAT = "carb-nas-kernel-model"
MODULE_FORMAT = "carb-nas-module-model"
FORMAT_VERSION = 1
MODES = ("kernel", "network", "feature", "both")
#: the per-kind prior of :class:`KernelCostModel` the trees correct: ``"linear"`` the
#: non-negative sum of overhead + GFLOPs + MB moved + weight MB (relative least squares),
#: ``"loglinear"`` a power law with a floor (:func:`_loglinear_terms`, least squares in logs)
PRIORS = ("linear", "loglinear")
KERNEL_SUM = "kernel_sum_ms"
#: peak memory: ``"physics"`` (default) the fitted non-negative sum of :data:`MEMORY_TERMS`
#: alone (relative error), ``"cascade"`` the network cascade's trees on the log-ratio to it
MEMORY_MODES = ("physics", "cascade")
#: the intervals of networks of families the model never saw (a user's own CNN):
#: ``"family"`` (default) calibrated on the residuals of each training family group held out
#: in turn; ``"network"`` on those of networks held out by a grouped K-fold (their families
#: seen), the interval of a trained family's networks either way. ``"family"`` covers unseen
#: families closer to the nominal rate (docs/accuracy.md)
INTERVALS = ("family", "network")
#: family groups a "family" interval needs (fewer: the networks' residuals)
_MIN_INTERVAL_FAMILIES = 3
#: the traced tensor peak, oneDNN's reordered weight copies, the largest oneDNN conv weight
#: reordered per call at batch >= 2 (``features.op_aggregates``)
MEMORY_TERMS = ("tensor_peak_mb", "onednn_weight_mb", "onednn_reorder_mb")
NETWORK_COLUMNS = (*FEATURE_COLUMNS, *OP_AGGREGATE_COLUMNS)
_NUMERIC = (
    "batch",
    "c_in",
    "h_in",
    "w_in",
    "c_out",
    "h_out",
    "w_out",
    "kernel",
    "stride",
    "groups",
    "native",
)
_LOGGED = ("flops", "read_bytes", "write_bytes", "weight_bytes")
#: what a measured op table needs (the trace_ops columns a per-op fit reads, measured_ms)
_OP_TABLE_COLUMNS = ("kind", "op", "measured_ms", *_NUMERIC, *_LOGGED)
_CONV = ("conv", "dwconv", "gconv", "linear")
_RANGE = ("flops", "weight_bytes", "read_bytes", "write_bytes")
_RANGE_IN_LOGGED = [_LOGGED.index(c) for c in _RANGE]
#: how an op of a measured kind but a never-measured aten name is predicted: ``"kind"`` by
#: its kind's model (:meth:`KernelCostModel._stand_ins`), ``"roofline"`` as an op of a kind
#: never measured
UNSEEN = ("kind", "roofline")
#: the share of a kind's largest measured ops whose median measured / prior ratio scales the
#: prior of ops beyond the measured range (``KernelCostModel.edge_``)
_EDGE_SHARE = 0.10
#: distinct op rows whose prediction a KernelCostModel keeps (cleared when full)
_PREDICT_CACHE_MAX = 65536
_XGB = {
    "n_estimators": 300,
    "max_depth": 8,
    "learning_rate": 0.05,
    "subsample": 0.9,
    "colsample_bytree": 0.9,
    "min_child_weight": 2,
}


def _signature_table(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per op signature: its features and the median measured time."""
    keep = ops[ops["measured_ms"].notna() & (ops["measured_ms"] > 0)]
    agg = {c: "first" for c in ("kind", "op", *_NUMERIC, *_LOGGED)}
    agg["measured_ms"] = "median"
    return keep.groupby("signature", sort=True).agg(agg).reset_index()


class KernelCostModel:
    """Per-operator latency of eager PyTorch ops (see the module docstring).

    ``fit(ops)`` takes op rows (:data:`carb_nas.features.OP_COLUMNS` plus ``measured_ms``);
    ``predict_ops(ops)`` returns ``(ms, modelled)`` per row. Learned attributes end in ``_``.
    """

    def __init__(
        self,
        xgb_params: Mapping[str, Any] | None = None,
        random_state: int = 0,
        prior: str = "linear",
        geometry: bool = True,
        shared_conv: bool = True,
        unseen: str = "kind",
        simd_lanes: int = 0,
    ) -> None:
        self.xgb_params = xgb_params
        self.simd_lanes = simd_lanes
        self.unseen = unseen
        self.random_state = random_state
        self.prior = prior
        self.geometry = geometry
        self.shared_conv = shared_conv

    def _arrays(self, table: pd.DataFrame) -> tuple[np.ndarray, ...]:
        """:func:`_op_arrays` with the kinds this model learns (``shared_conv``: dense,
        grouped and depthwise convolutions are one kind)."""
        kinds, names, num, logged = _op_arrays(table)
        return self._kinds(kinds), names, num, logged

    def _kinds(self, kinds: np.ndarray) -> np.ndarray:
        if not self.shared_conv:
            return kinds
        return np.where((kinds == "gconv") | (kinds == "dwconv"), "conv", kinds).astype(object)

    # -- features ---------------------------------------------------------------------------
    def _matrix(self, table: pd.DataFrame) -> np.ndarray:
        return self._matrix_of(*self._arrays(table))

    def _matrix_of(
        self, kinds: np.ndarray, names: np.ndarray, num: np.ndarray, logged: np.ndarray
    ) -> np.ndarray:
        """The booster's input of op rows given as :func:`_op_arrays` (one float64 matrix)."""
        moved = logged[:, 1] + logged[:, 2]
        extra = [_geometry_of(num)] if self.geometry else []
        return np.hstack(
            [
                *extra,
                np.log1p(logged),
                num,
                np.log1p(moved)[:, None],
                (np.log1p(logged[:, 0]) - np.log1p(moved))[:, None],
                (kinds[:, None] == np.array(self.kinds_, dtype=object)[None, :]).astype(float),
                (names[:, None] == np.array(self.ops_, dtype=object)[None, :]).astype(float),
            ]
        )

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, ops: pd.DataFrame) -> KernelCostModel:
        import xgboost as xgb

        if self.prior not in PRIORS:
            raise err(
                "invalid kernel prior", f"one of {list(PRIORS)}", repr(self.prior),
                "Use 'linear' or 'loglinear'.",
            )  # fmt: skip
        lanes = self.simd_lanes
        if not (isinstance(lanes, int) and lanes >= 0 and lanes & (lanes - 1) == 0):
            raise err(
                "invalid SIMD lane count", "0 (no lane-waste prior term) or a power of two",
                repr(self.simd_lanes), "Use 16 (AVX-512 fp32), 8 (AVX2) or 0.",
            )  # fmt: skip
        if self.unseen not in UNSEEN:
            raise err(
                "invalid unseen-op rule", f"one of {list(UNSEEN)}", repr(self.unseen),
                "Use 'kind' or 'roofline'.",
            )  # fmt: skip
        missing = [c for c in _OP_TABLE_COLUMNS if c not in ops]
        if missing:
            raise err(
                "op rows lack columns",
                "the trace_ops columns plus measured_ms",
                f"missing {missing}",
                "Pass the op table of a measured campaign (measure_ops / run_ops_campaign).",
            )
        if "signature" not in ops:
            ops = ops.assign(signature=_row_signatures(ops))
        table = _signature_table(ops)
        # shared_conv: one conv kind (prior, trees, range), told apart by groups and the
        # geometry features: a grouped conv measured in one family only is learned from every
        # family's convolutions
        table["kind"] = self._kinds(table["kind"].to_numpy(dtype=object))
        if len(table) < 10:
            raise err(
                "too few measured ops",
                "at least 10 distinct measured op signatures",
                f"{len(table)}",
                "Measure more networks (run_ops_campaign).",
            )
        self._clear_cache()
        self.kinds_ = sorted(table["kind"].unique())
        self.ops_ = sorted(table["op"].unique())
        self.seen_ = sorted({f"{k}:{o}" for k, o in zip(table["kind"], table["op"])})
        # per kind, a physical prior fitted by non-negative least squares of the relative
        # error (ms per op, per GFLOP, per MB moved, per weight MB); the trees fit the log-ratio
        # to it, so a larger op than any measured one extrapolates along the prior
        self.prior_ = {}
        ms_all = table["measured_ms"].to_numpy(float)
        for k in self.kinds_:
            sel = (table["kind"] == k).to_numpy()
            if self.prior == "loglinear":
                coef = _loglinear_fit(table[list(_LOGGED)].to_numpy(float)[sel], ms_all[sel])
                self.prior_[k] = [float(v) for v in coef]
                continue
            A = self._terms(table[sel])
            w = 1.0 / ms_all[sel]
            coef, _ = nnls(A[:, :4] * w[:, None], np.ones(sel.sum()))
            if not (A[:, :4] @ coef > 0).all():
                coef = np.array([float(np.median(ms_all[sel])), 0.0, 0.0, 0.0])
            if A.shape[1] > 4:
                # the lane-waste term (``simd_lanes``) alone on what the base prior leaves,
                # relative least squares, non-negative: the base prior, and with it every op
                # that wastes no lanes, stays what it is without the term
                x, r = A[:, 4] * w, 1.0 - (A[:, :4] @ coef) * w
                c = float((x * r).sum() / (x * x).sum()) if (x > 0).any() else 0.0
                coef = np.append(coef, max(c, 0.0))
            self.prior_[k] = [float(v) for v in coef]
        # per kind, the largest op measured: beyond it (in FLOPs, weight or activation bytes)
        # the trees' correction is that of the largest ops they saw, not a trend, so such an
        # op gets the prior (times its bias at the range's edge, below: ``edge_``) and not the
        # trees (e.g. VGG's linear layers, far larger than any other family's)
        self.range_ = {
            k: [float(v) for v in table.loc[table["kind"] == k, list(_RANGE)].max()]
            for k in self.kinds_
        }
        # per measured (kind, name), its largest op (read + write bytes): an unmeasured name
        # of the kind is predicted like the names that reach its size (``_stand_ins``)
        moved = table["read_bytes"] + table["write_bytes"]
        self.name_range_ = {
            f"{k}:{o}": float(v)
            for (k, o), v in moved.groupby([table["kind"], table["op"]]).max().items()
        }
        y = np.log(table["measured_ms"].to_numpy(float)) - np.log(self._prior(table))
        # per kind, the prior's bias at the edge of the measured range: the median
        # measured / prior ratio of its largest ops (top _EDGE_SHARE by bytes moved + weight
        # bytes); an op beyond the range gets the prior times it (the relative fit of the prior
        # favours the many small ops, so alone it underestimates the largest)
        size = (table["read_bytes"] + table["write_bytes"] + table["weight_bytes"]).to_numpy(float)
        kind_col = table["kind"].to_numpy(dtype=object)
        self.edge_ = {}
        for k in self.kinds_:
            sel = kind_col == k
            top = sel & (size >= np.quantile(size[sel], 1 - _EDGE_SHARE))
            self.edge_[k] = float(np.exp(np.median(y[top])))
        params = {**_XGB, **dict(self.xgb_params or {})}
        self.booster_ = xgb.XGBRegressor(
            **params, random_state=self.random_state, n_jobs=1, tree_method="hist"
        ).fit(self._matrix(table), y)
        # roofline fallback for unmodelled ops: median ms per MB moved (memory-bound kinds)
        # and per GFLOP (convolutions, linear)
        ms = table["measured_ms"].to_numpy(float)
        mb = (table["read_bytes"] + table["write_bytes"] + table["weight_bytes"]).to_numpy(
            float
        ) / 1e6
        gf = table["flops"].to_numpy(float) / 1e9
        comp = table["kind"].isin(_CONV).to_numpy() & (gf > 0)
        mem = ~comp & (mb > 0)
        self.ms_per_mb_ = float(np.median(ms[mem] / mb[mem])) if mem.any() else 1.0
        self.ms_per_gflop_ = float(np.median(ms[comp] / gf[comp])) if comp.any() else 20.0
        self.n_signatures_ = len(table)
        return self

    def _terms(self, table: pd.DataFrame) -> np.ndarray:
        """The linear prior's columns of op rows (:func:`_prior_terms_of`)."""
        _, _, num, logged = _op_arrays(table)
        return _prior_terms_of(logged, num, self.simd_lanes)

    def _prior(self, table: pd.DataFrame) -> np.ndarray:
        """The per-kind physical prior (ms) of op rows of seen kinds (1 ms elsewhere)."""
        kinds, _, num, logged = self._arrays(table)
        return self._prior_of(kinds, logged, num)

    def _prior_of(self, kinds: np.ndarray, logged: np.ndarray, num: np.ndarray) -> np.ndarray:
        if self.prior == "loglinear":
            coef = np.array([self.prior_.get(k, [0.0, 0.0, 0.0, 0.0]) for k in kinds])
            return np.maximum(np.exp((_loglinear_terms(logged) * coef).sum(axis=1)), 1e-6)
        A = _prior_terms_of(logged, num, self.simd_lanes)
        n = A.shape[1]
        # a model saved before the lane-waste term has 4 coefficients: the term is absent
        coef = np.array([(self.prior_.get(k, [1.0]) + [0.0] * n)[:n] for k in kinds])
        return np.maximum((A * coef).sum(axis=1), 1e-6)

    def _check_fitted(self) -> None:
        if not hasattr(self, "booster_"):
            raise ModelError(
                "KernelCostModel is not fitted: expected fit(ops) or load(dir) first, got an "
                "unfitted model. Fit it on measured op rows."
            )

    def predict_ops(self, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Per op row: predicted ms, and whether its (kind, name) was ever measured (False:
        the roofline estimate, see the module docstring)."""
        self._check_fitted()
        if not len(ops):
            return np.zeros(0), np.zeros(0, dtype=bool)
        if "signature" not in ops:
            ops = ops.assign(signature=_row_signatures(ops))
        # one prediction per distinct signature: repeated blocks cost nothing
        codes, _ = pd.factorize(ops["signature"])
        first = np.unique(codes, return_index=True)[1]
        kinds, names, num, logged = self._arrays(ops)
        ms, seen = self._predict_cached(kinds[first], names[first], num[first], logged[first])
        return ms[codes], seen[codes]

    def predict_op_arrays(self, cols: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predict_ops` of an op table given as its columns
        (:func:`carb_nas.features.trace_op_arrays`): the same numbers, no frame."""
        self._check_fitted()
        sig = cols["signature"]
        if not len(sig):
            return np.zeros(0), np.zeros(0, dtype=bool)
        # pd.factorize's codes (first appearance order), without building a Series
        index: dict[Any, int] = {}
        codes = np.fromiter((index.setdefault(v, len(index)) for v in sig), np.intp, len(sig))
        first = np.unique(codes, return_index=True)[1]
        kinds = self._kinds(np.asarray(cols["kind"], dtype=object)[first])
        names = np.asarray(cols["op"], dtype=object)[first]
        num = np.column_stack([np.asarray(cols[c], dtype=float)[first] for c in _NUMERIC])
        logged = np.column_stack([np.asarray(cols[c], dtype=float)[first] for c in _LOGGED])
        ms, seen = self._predict_cached(kinds, names, num, logged)
        return ms[codes], seen[codes]

    def _predict_cached(
        self, kinds: np.ndarray, names: np.ndarray, num: np.ndarray, logged: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_predict_of`, each distinct op row computed once per model: a prediction
        depends on nothing but the row's kind, name, geometry and traffic, so the ops of
        layers seen in earlier predictions cost a dictionary lookup, not a booster call."""
        cache = self._cache()
        keys = [(k, o, *n, *g) for k, o, n, g in zip(kinds, names, num.tolist(), logged.tolist())]
        hits = [cache.get(key) for key in keys]
        miss = [i for i, h in enumerate(hits) if h is None]
        if miss:
            ms_new, seen_new = self._predict_of(kinds[miss], names[miss], num[miss], logged[miss])
            if len(cache) + len(miss) > _PREDICT_CACHE_MAX:
                cache.clear()
            for i, m, v in zip(miss, ms_new.tolist(), seen_new.tolist()):
                hits[i] = cache[keys[i]] = (m, v)
        done: list[tuple[float, bool]] = hits  # type: ignore[assignment]  # every miss filled
        ms = np.array([h[0] for h in done], dtype=np.float64)
        seen = np.array([h[1] for h in done], dtype=np.bool_)
        return ms, seen

    def _predict_of(
        self, kinds: np.ndarray, names: np.ndarray, num: np.ndarray, logged: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ms, seen) of distinct op rows given as :func:`_op_arrays` (one booster call)."""
        if not len(kinds):
            return np.zeros(0), np.zeros(0, dtype=bool)
        # the Booster itself (what XGBRegressor.predict calls on a numpy matrix, without the
        # wrapper's per-call configuration): the same trees, the same float32 inputs
        known = self._seen_set
        seen = np.array([f"{k}:{o}" in known for k, o in zip(kinds, names)], dtype=bool)
        alts = self._stand_ins_of(kinds, names, logged, seen)
        by_kind = np.array([bool(a) for a in alts], dtype=bool)
        X = self._matrix_of(kinds, names, num, logged)
        n = len(kinds)
        if by_kind.any():
            # the rows predicted by kind, once per stand-in name in the op's place (its
            # geometry and traffic unchanged): in the same booster call (a call's fixed cost
            # is that of ~100 rows); each row's prediction does not depend on the others
            row = np.repeat(np.arange(n), [len(a) for a in alts])
            stand_in = np.array([o for a in alts for o in a], dtype=object)
            X = np.vstack([X, self._matrix_of(kinds[row], stand_in, num[row], logged[row])])
        raw = self._booster().inplace_predict(X)
        corr = np.exp(raw[:n])
        if by_kind.any():
            corr[by_kind] = self._median_correction(raw[n:], row, np.flatnonzero(by_kind))
        # optional attribute: models saved without edge factors use the prior alone there
        edges = getattr(self, "edge_", {})
        edge = np.array([edges.get(k, 1.0) for k in kinds])
        prior = self._prior_of(kinds, logged, num)
        pred = np.where(self._beyond_of(kinds, logged), edge, corr) * prior
        flops, read, write, weight = logged.T
        roof = (read + write + weight) / 1e6 * self.ms_per_mb_ + flops / 1e9 * self.ms_per_gflop_
        return np.where(seen | by_kind, pred, roof), seen

    def _stand_ins(self, kind: str, name: str, moved_bytes: float) -> list[str]:
        """The measured names an op of a measured kind but an unmeasured name is predicted
        like (``unseen="kind"``): those of its kind and cost class (:func:`_op_class`) whose
        measured ops reach its size (read + write bytes), in ``seen_``'s order; none: the
        roofline."""
        if self.unseen != "kind" or kind not in self.prior_:
            return []
        cands = self._stand_in_table().get((kind, _op_class(name)), ())
        return [o for o, top in cands if top >= moved_bytes]

    def _stand_in_table(self) -> dict[tuple[str, str], list[tuple[str, float]]]:
        """Per (kind, cost class): the measured names and their largest op (read + write
        bytes), in ``seen_``'s order; built once per model."""
        t = self.__dict__.get("_stand_in_cache")
        if t is None:
            t = {}
            top = getattr(self, "name_range_", {})
            for s in self.seen_:
                kk, o = s.split(":", 1)
                t.setdefault((kk, _op_class(o)), []).append((o, top.get(s, 0.0)))
            self.__dict__["_stand_in_cache"] = t
        return t

    def _stand_ins_of(
        self, kinds: np.ndarray, names: np.ndarray, logged: np.ndarray, seen: np.ndarray
    ) -> list[list[str]]:
        """:meth:`_stand_ins` of each row (none for a measured name)."""
        out: list[list[str]] = [[] for _ in range(len(kinds))]
        if self.unseen != "kind" or seen.all():
            return out
        moved = logged[:, 1] + logged[:, 2]
        for i in np.flatnonzero(~seen).tolist():
            out[i] = self._stand_ins(kinds[i], names[i], float(moved[i]))
        return out

    def _by_kind_of(
        self, kinds: np.ndarray, names: np.ndarray, logged: np.ndarray, seen: np.ndarray
    ) -> np.ndarray:
        """Rows never measured by name that get their kind's model (see :meth:`_stand_ins`)."""
        alts = self._stand_ins_of(kinds, names, logged, seen)
        return np.array([bool(a) for a in alts], dtype=bool)

    @staticmethod
    def _median_correction(raw: np.ndarray, row: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Per row in ``rows``: exp of the median of the raw predictions ``raw`` whose
        ``row`` is it (its stand-ins)."""
        out = np.ones(len(rows))
        for j, i in enumerate(rows.tolist()):
            out[j] = float(np.exp(np.median(raw[row == i])))
        return out

    def _booster(self) -> Any:
        b = self.__dict__.get("_booster_cache")
        if b is None:
            b = self.__dict__["_booster_cache"] = self.booster_.get_booster()
        return b

    def _cache(self) -> dict[tuple, tuple[float, bool]]:
        c = self.__dict__.get("_predict_cache")
        if c is None:
            c = self.__dict__["_predict_cache"] = {}
        return c

    def _clear_cache(self) -> None:
        """Forget the per-op predictions (and the derived lookups) of a model being refitted;
        ``clear_cache`` for benchmarks timing a cold prediction."""
        for name in ("_predict_cache", "_booster_cache", "_seen_cache", "_stand_in_cache"):
            self.__dict__.pop(name, None)

    def clear_cache(self) -> None:
        """Forget the cached per-op predictions (a cold prediction: benchmarks)."""
        self._cache().clear()

    def _beyond(self, table: pd.DataFrame) -> np.ndarray:
        """Rows larger than every measured op of their kind (see ``range_``)."""
        kinds, _, _, logged = self._arrays(table)
        return self._beyond_of(kinds, logged)

    def _beyond_of(self, kinds: np.ndarray, logged: np.ndarray) -> np.ndarray:
        ranges = getattr(self, "range_", None)
        if not ranges:
            return np.zeros(len(kinds), dtype=bool)
        top = np.array([ranges.get(k, [np.inf] * len(_RANGE)) for k in kinds])
        return np.asarray((logged[:, _RANGE_IN_LOGGED] > top).any(axis=1))

    @property
    def _seen_set(self) -> set[str]:
        s = self.__dict__.get("_seen_cache")
        if s is None:
            s = self.__dict__["_seen_cache"] = set(self.seen_)
        return s

    def predict_network(self, ops: pd.DataFrame) -> dict[str, Any]:
        """``{"kernel_sum_ms", "unmodelled_ms", "unmodelled": [op names], "by_kind": [op
        names], "n_ops"}`` of one network's op table: ``unmodelled`` every op name never
        measured, ``by_kind`` those of them predicted by their kind's model (the others: the
        roofline)."""
        ms, seen = self.predict_ops(ops)
        names = sorted(set(ops.loc[~seen, "op"])) if len(ops) else []
        by_kind: list[str] = []
        if names:
            kinds, op_names, _, logged = self._arrays(ops)
            flag = self._by_kind_of(kinds, op_names, logged, seen)
            by_kind = sorted(set(op_names[flag]))
        return {
            KERNEL_SUM: float(ms.sum()),
            "unmodelled_ms": float(ms[~seen].sum()),
            "unmodelled": names,
            "by_kind": by_kind,
            "n_ops": len(ops),
        }

    # -- persistence ------------------------------------------------------------------------
    def _manifest(self) -> dict[str, Any]:
        return {
            "format": KERNEL_FORMAT,
            "format_version": FORMAT_VERSION,
            "carb_nas": package_version(),
            "kinds": self.kinds_,
            "ops": self.ops_,
            "seen": self.seen_,
            "ms_per_mb": self.ms_per_mb_,
            "ms_per_gflop": self.ms_per_gflop_,
            "prior": self.prior_,
            "range": self.range_,
            "n_signatures": self.n_signatures_,
            "random_state": self.random_state,
            "prior_form": self.prior,
            "geometry": self.geometry,
            "shared_conv": self.shared_conv,
            "unseen": self.unseen,
            "simd_lanes": self.simd_lanes,
            "name_range": self.name_range_,
            "edge": self.edge_,
        }

    def save_to(self, d: Path, prefix: str = "kernel") -> dict[str, Any]:
        """Write the booster into ``d`` (an existing directory); returns the manifest part."""
        self._check_fitted()
        path = d / f"{prefix}_xgb.json"
        self.booster_.get_booster().save_model(str(path))
        return {**self._manifest(), "file": path.name, "sha256": sha256_file(path)}

    @classmethod
    def load_from(cls, d: Path, part: Mapping[str, Any]) -> KernelCostModel:
        import xgboost as xgb

        if part.get("format") != KERNEL_FORMAT or part.get("format_version") != FORMAT_VERSION:
            raise ModelError(
                f"not a kernel model: expected format {KERNEL_FORMAT!r} version "
                f"{FORMAT_VERSION}, got {part.get('format')!r} version "
                f"{part.get('format_version')!r}. Save it again with this carb_nas."
            )
        path = d / part["file"]
        if not path.is_file() or sha256_file(path) != part["sha256"]:
            raise ModelError(
                f"kernel model file changed or missing: expected {path} with SHA-256 "
                f"{part['sha256'][:12]}..., got {'a different file' if path.is_file() else 'none'}"
                ". Restore the saved directory or fit the model again."
            )
        m = cls(
            random_state=int(part["random_state"]),
            prior=str(part.get("prior_form", "linear")),  # saved before the option: linear
            geometry=bool(part.get("geometry", False)),
            shared_conv=bool(part.get("shared_conv", False)),
            unseen=str(part.get("unseen", "roofline")),  # saved before the option: roofline
            simd_lanes=int(part.get("simd_lanes", 0)),  # saved before the term: none
        )
        m.name_range_ = {k: float(v) for k, v in part.get("name_range", {}).items()}
        m.edge_ = {k: float(v) for k, v in part.get("edge", {}).items()}
        m.kinds_, m.ops_, m.seen_ = list(part["kinds"]), list(part["ops"]), list(part["seen"])
        m.ms_per_mb_, m.ms_per_gflop_ = float(part["ms_per_mb"]), float(part["ms_per_gflop"])
        m.n_signatures_ = int(part["n_signatures"])
        m.prior_ = {k: [float(x) for x in v] for k, v in part["prior"].items()}
        m.range_ = {k: [float(x) for x in v] for k, v in part.get("range", {}).items()}
        booster = xgb.XGBRegressor()
        booster.load_model(str(path))
        m.booster_ = booster
        return m


def is_module_model_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory :meth:`ModuleCostModel.save` wrote."""
    p = Path(path) / "manifest.json"
    try:
        return p.is_file() and json.loads(p.read_text()).get("format") == MODULE_FORMAT
    except (OSError, json.JSONDecodeError):
        return False


#: activations by cost: piecewise-linear (a compare and a select per element) against
#: transcendental (an exp or a tanh per element): what an unmeasured activation is predicted
#: like (the measured activations of its class)
_TRANSCENDENTAL = frozenset(
    {"sigmoid", "silu", "swish", "tanh", "gelu", "elu", "selu", "celu", "mish", "softplus",
     "softmax", "log_softmax", "logsigmoid", "exp", "log"}
)  # fmt: skip


def _op_class(name: str) -> str:
    """The cost class of an aten op name (``"transcendental"`` or ``""``, see above)."""
    return "transcendental" if name.rstrip("_") in _TRANSCENDENTAL else ""


def _op_arrays(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What a per-op prediction depends on, as arrays: kinds, aten names (object), the
    :data:`_NUMERIC` columns and the :data:`_LOGGED` columns (float64 matrices)."""
    # column by column: selecting a list of columns builds a frame first (3x the time)
    return (
        table["kind"].to_numpy(dtype=object),
        table["op"].to_numpy(dtype=object),
        np.column_stack([table[c].to_numpy(dtype=float) for c in _NUMERIC]),
        np.column_stack([table[c].to_numpy(dtype=float) for c in _LOGGED]),
    )


def _prior_terms_of(
    logged: np.ndarray, num: np.ndarray | None = None, simd_lanes: int = 0
) -> np.ndarray:
    """Columns of the per-kind linear prior: 1 (per-op overhead), GFLOPs, MB moved, weight MB;
    with ``simd_lanes`` > 0 also the lane-waste GFLOPs of grouped convolutions
    (:func:`lane_waste`)."""
    flops, read, write, weight = logged.T
    cols = [np.ones(len(logged)), flops / 1e9, (read + write) / 1e6, weight / 1e6]
    if simd_lanes > 0 and num is not None:
        cols.append(flops / 1e9 * lane_waste(num, simd_lanes))
    return np.column_stack(cols)


def lane_waste(num: np.ndarray, simd_lanes: int = 16) -> np.ndarray:
    """Per op row (the :data:`_NUMERIC` columns): ``log2(simd_lanes / L)``, the halvings of the
    vector width a grouped convolution's channels force, where ``L`` is the largest power of
    two up to ``simd_lanes`` dividing both its input and its output channels per group; 0 for
    every other op (dense convs: oneDNN pads their channels to the vector; depthwise convs,
    one input channel per group: a kernel vectorized across groups). oneDNN vectorizes a
    grouped conv within a group's channels, so a group 2 channels wide uses 2 of AVX-512's 16
    fp32 lanes. The prior's term ``GFLOPs x lane_waste``, fitted alone on what the four-term
    prior leaves of the grouped convs the training families have (RegNet's 8- and 24-channel
    groups: one halving), extrapolates to narrower groups where the trees cannot (ResNeXt's
    at narrow width multipliers). Logarithmic, not ``simd_lanes / L - 1`` (idle lanes per used
    lane) or its square root: those forms, fitted on RegNet, overshoot held-out ResNeXt's
    narrow groups. Off by default (``simd_lanes=0``): fitted on ResNeXt, the term overshoots
    held-out RegNet's wider groups (docs/accuracy.md)."""
    _b, ci, _hi, _wi, co, _ho, _wo, _k, _s, gr, _n = num.T
    gr = np.maximum(gr, 1.0)
    cpi, cpo = np.rint(ci / gr).astype(np.int64), np.rint(co / gr).astype(np.int64)
    lanes = np.ones(len(num))
    lane = 2
    while lane <= simd_lanes:
        lanes = np.where((cpi % lane == 0) & (cpo % lane == 0), lane, lanes)
        lane *= 2
    grouped = (gr > 1) & (cpi > 1)
    return np.where(grouped, np.log2(max(simd_lanes, 1) / lanes), 0.0)


def _loglinear_terms(logged: np.ndarray) -> np.ndarray:
    """Columns of the log-linear prior: 1, log(1 + MFLOPs), log(1 + moved / 10 kB),
    log(1 + weight / 10 kB): a power law in the op's work with a floor (the per-op overhead)
    for small ops, so it extrapolates along the trend beyond the largest measured op."""
    flops, read, write, weight = logged.T
    return np.column_stack(
        [
            np.ones(len(logged)),
            np.log1p(flops / 1e6),
            np.log1p((read + write) / 1e4),
            np.log1p(weight / 1e4),
        ]
    )


def _loglinear_fit(logged: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """Least squares of ``log ms`` on :func:`_loglinear_terms` (one kind's op signatures)."""
    coef, *_ = np.linalg.lstsq(_loglinear_terms(logged), np.log(ms), rcond=None)
    return np.asarray(coef)


def _geometry_of(num: np.ndarray) -> np.ndarray:
    """Extra per-op features of the ``geometry`` option, from the :data:`_NUMERIC` columns:
    channels per group in and out, output and input elements per channel (batch x H x W),
    the GEMM depth (channels per group x kernel^2), oneDNN's 16-lane channel padding
    (padded / real channels, per group and in all) and log groups: what sets a convolution's
    efficiency beyond its FLOPs, in terms shared by every family."""
    b, ci, hi, wi, co, ho, wo, k, _s, gr, _n = num.T
    gr = np.maximum(gr, 1.0)
    cpi, cpo = ci / gr, co / gr

    def pad(c: np.ndarray) -> np.ndarray:
        return np.where(c > 0, np.ceil(c / 16.0) * 16.0 / np.maximum(c, 1.0), 1.0)

    return np.column_stack(
        [
            np.log1p(cpi),
            np.log1p(cpo),
            np.log1p(b * ho * wo),
            np.log1p(b * hi * wi),
            np.log1p(cpi * k * k),
            pad(cpi),
            pad(cpo),
            pad(ci),
            pad(co),
            np.log1p(gr),
        ]
    )


def _row_signatures(ops: pd.DataFrame) -> np.ndarray:
    cols = ["kind", "op", *_NUMERIC, *_LOGGED]
    text = ops[cols].astype(str).agg("|".join, axis=1)
    return np.array([hashlib.sha1(t.encode()).hexdigest()[:12] for t in text])


class ModuleCostModel:
    """Latency and peak memory of any module: kernel sum + CARB cascade (module docstring).

    ``fit(rows, ops)``: ``rows`` one per network with ``key``, :data:`NETWORK_COLUMNS`,
    ``batch_size``, ``latency_ms`` and ``peak_mem_mb``; ``ops`` the op rows of the same networks
    (``key`` + op columns + ``measured_ms``). ``predict_module(module, input_shape)`` traces and
    predicts one module; ``predict(rows, ops)`` many traced networks. A network of a family
    the model trained on (``family=``, the rows' ``family``) gets the interval of its held-out
    networks; any other (a user's module), with ``interval="family"``, that of the training
    families each held out in turn (:data:`INTERVALS`).
    """

    def __init__(
        self,
        mode: str = "kernel",
        preset: str = "fast",
        kernel_folds: int = 3,
        random_state: int = 0,
        n_jobs: int | None = 1,
        memory: str = "physics",
        kernel_prior: str = "linear",
        kernel_geometry: bool = True,
        kernel_shared_conv: bool = True,
        kernel_simd_lanes: int = 0,
        kernel_anchor: bool = True,
        interval: str = "family",
    ) -> None:
        self.interval = interval
        self.kernel_anchor = kernel_anchor
        self.kernel_simd_lanes = kernel_simd_lanes
        self.memory = memory
        self.kernel_prior = kernel_prior
        self.kernel_geometry = kernel_geometry
        self.kernel_shared_conv = kernel_shared_conv
        self.mode = mode
        self.preset = preset
        self.kernel_folds = kernel_folds
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _check_mode(self) -> None:
        if self.mode not in MODES:
            raise err("invalid mode", f"one of {list(MODES)}", repr(self.mode), "Use 'both'.")
        if self.memory not in MEMORY_MODES:
            raise err(
                "invalid memory", f"one of {list(MEMORY_MODES)}", repr(self.memory),
                "Use 'physics'.",
            )  # fmt: skip
        if self.interval not in INTERVALS:
            raise err(
                "invalid interval", f"one of {list(INTERVALS)}", repr(self.interval),
                "Use 'family'.",
            )  # fmt: skip

    def _X(self, rows: pd.DataFrame, ksum: np.ndarray | None) -> pd.DataFrame:
        X = rows[list(NETWORK_COLUMNS)].astype(float).copy()
        X["batch_size"] = rows["batch_size"].to_numpy(dtype=float)
        if self.mode in ("feature", "both") and ksum is not None:
            X[KERNEL_SUM] = ksum
        return X

    def _offsets(self) -> dict[str, Any]:
        # memory: the traced tensor peak plus oneDNN's reordered weight copies; latency: the
        # kernel sum (or the physical resources) plus a per-op overhead (``n_ops``: framework
        # time between kernels, which the profiler's op events do not cover)
        off: dict[str, Any] = {"peak_mem_mb": list(MEMORY_TERMS)}
        physical = [*PHYSICAL_OFFSETS["latency_ms"], "n_ops"]
        off["latency_ms"] = [KERNEL_SUM, "n_ops"] if self.mode == "both" else physical
        return off

    def _network_sums(
        self,
        km: KernelCostModel,
        rows: pd.DataFrame,
        ops: pd.DataFrame,
        seen_out: list | None = None,
    ) -> pd.DataFrame:
        ms, seen = km.predict_ops(ops)
        if seen_out is not None:
            seen_out.append(seen)  # predict() lists the unmodelled ops without predicting again
        per = pd.DataFrame({"key": ops["key"].to_numpy(), "ms": ms, "un": np.where(seen, 0.0, ms)})
        g = per.groupby("key").sum()
        return g.reindex(rows["key"]).fillna(0.0)

    def _kernel_model(self) -> KernelCostModel:
        return KernelCostModel(
            random_state=self.random_state,
            prior=self.kernel_prior,
            geometry=self.kernel_geometry,
            shared_conv=self.kernel_shared_conv,
            simd_lanes=self.kernel_simd_lanes,
        )

    def kernel_part(
        self,
        rows: pd.DataFrame,
        ops: pd.DataFrame,
        kernel_samples: pd.DataFrame | None = None,
    ) -> tuple[KernelCostModel, np.ndarray]:
        """The kernel model on all ``ops`` and the out-of-fold kernel sums of ``rows``
        (what :meth:`fit` computes first; pass it as ``kernel=`` to fit several modes on
        the same rows without refitting it). ``kernel_samples``: measured op rows of no
        network (single ops drawn over a kernel space, ``key`` + op columns +
        ``measured_ms``), added to every per-op fit: they cover op geometries that the
        networks leave empty. With ``kernel_anchor`` each network's op times are first scaled
        to sum to its timed latency (:func:`anchored_ops`); the samples keep theirs."""
        from sklearn.model_selection import GroupKFold

        rows = rows.reset_index(drop=True)
        ops, extra = self._fit_ops(rows, ops, kernel_samples)
        km = self._kernel_model().fit(_with_samples(ops, extra))
        keys = rows["key"].to_numpy()
        folds = GroupKFold(n_splits=min(self.kernel_folds, len(rows)))
        return km, self._held_out_sums(rows, ops, extra, folds.split(rows, groups=keys))

    def _fit_ops(
        self, rows: pd.DataFrame, ops: pd.DataFrame, kernel_samples: pd.DataFrame | None
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """What every per-op fit of ``rows`` takes: their ops (anchored with
        ``kernel_anchor``) and the checked ``kernel_samples``."""
        ops = ops[ops["key"].isin(set(rows["key"]))]
        extra = _kernel_samples(kernel_samples, rows)
        if self.kernel_anchor:
            # the samples keep their own times: scaled by the networks' median anchor factor
            # (a share of the time between op events, which is per op, not per ms)
            ops = anchored_ops(rows, ops)
        return ops, extra

    def _held_out_sums(
        self, rows: pd.DataFrame, ops: pd.DataFrame, extra: pd.DataFrame, splits: Any
    ) -> np.ndarray:
        """Per row of ``rows``, its kernel sum by a kernel model fitted on the other rows of
        its ``(train, test)`` split (``ops`` anchored already; ``extra`` in every fit)."""
        oof = np.zeros(len(rows))
        keys = rows["key"].to_numpy()
        for tr, te in splits:
            fold = self._kernel_model().fit(
                _with_samples(ops[ops["key"].isin(set(keys[tr]))], extra)
            )
            test_ops = ops[ops["key"].isin(set(keys[te]))]
            oof[te] = self._network_sums(fold, rows.iloc[te], test_ops)["ms"].to_numpy()
        return oof

    def _family_held_out(
        self, rows: pd.DataFrame, ops: pd.DataFrame, kernel_samples: pd.DataFrame | None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The ``"family"`` interval's inputs: per row, its kernel sum and its memory terms'
        fit, each by a model that never saw its family group; None where ``interval`` is
        ``"network"`` or the rows hold fewer than :data:`_MIN_INTERVAL_FAMILIES` groups."""
        from sklearn.model_selection import LeaveOneGroupOut

        from carb_nas.space import FAMILIES

        if self.interval != "family" or "family" not in rows:
            return None
        # a built-in family's group (basic and bottleneck are one); other labels as they are
        # (a campaign of a user's own networks)
        labels = rows["family"].astype(str).to_numpy()
        known = np.isin(labels, list(FAMILIES))
        groups = labels.astype(object)
        if known.any():
            groups[known] = family_groups(labels[known])
        if len(set(groups)) < _MIN_INTERVAL_FAMILIES:
            return None
        ops, extra = self._fit_ops(rows, ops, kernel_samples)
        splits = list(LeaveOneGroupOut().split(rows, groups=groups))
        sums = self._held_out_sums(rows, ops, extra, splits)
        y_mem = rows["peak_mem_mb"].to_numpy(float)
        A_mem = rows[list(MEMORY_TERMS)].to_numpy(float)
        mem = np.zeros(len(rows))
        for tr, te in splits:
            coef, _ = nnls(A_mem[tr] / y_mem[tr, None], np.ones(len(tr)))
            mem[te] = A_mem[te] @ coef
        return sums, mem

    def fit(
        self,
        rows: pd.DataFrame,
        ops: pd.DataFrame,
        kernel: tuple[KernelCostModel, np.ndarray] | None = None,
        platform: Mapping[str, Any] | None = None,
        kernel_samples: pd.DataFrame | None = None,
    ) -> ModuleCostModel:
        """Fit on measured networks and their ops; ``platform`` the fingerprint of the rows
        (default: the ``fingerprint`` column's first value, if any); ``kernel_samples``
        single-op measurements for the per-op models (:meth:`kernel_part`)."""
        self._check_mode()
        self.__dict__.pop("_quantiles", None)  # the interval levels of a previous fit
        if platform is None and "fingerprint" in rows and rows["fingerprint"].notna().any():
            try:
                platform = json.loads(str(rows["fingerprint"].dropna().iloc[0]))
            except json.JSONDecodeError:
                platform = None
        self.platform_ = dict(platform) if platform else {"platform": "cpu/torch/fp32"}
        self.targets_ = ["peak_mem_mb", "latency_ms"]
        rows = rows.reset_index(drop=True)
        self.kernel_, oof = (
            kernel if kernel is not None else self.kernel_part(rows, ops, kernel_samples)
        )
        y_lat = rows["latency_ms"].to_numpy(float)
        self.scale_ = float(np.median(y_lat / np.maximum(oof, 1e-9))) if oof.any() else 1.0
        # kernel mode: latency = a x kernel sum + b x n_ops (non-negative, relative error)
        A = np.column_stack([oof, rows["n_ops"].to_numpy(float)]) / y_lat[:, None]
        coef, _ = nnls(A, np.ones(len(rows)))
        self.kernel_coefs_ = [float(c) for c in coef] if coef.any() else [self.scale_, 0.0]
        # kernel mode's interval: the relative residuals of that fit on the out-of-fold sums
        # (each row's sum from a kernel model that never saw its network)
        a, b = self.kernel_coefs_
        n_ops = rows["n_ops"].to_numpy(float)
        fit_lat = np.maximum(a * oof + b * n_ops, 1e-9)
        self.kernel_scores_ = sorted(float(v) for v in np.abs(np.log(y_lat / fit_lat)))
        # a network of a family never trained on (``interval="family"``): the scores of each
        # training family group predicted by models that never saw it
        self.families_ = sorted(set(rows["family"].astype(str))) if "family" in rows else []
        held = self._family_held_out(rows, ops, kernel_samples)
        self.new_family_kernel_scores_: list[float] = []
        self.new_family_mem_scores_: list[float] = []
        if held is not None:
            fit_new = np.maximum(a * held[0] + b * n_ops, 1e-9)
            self.new_family_kernel_scores_ = sorted(
                float(v) for v in np.abs(np.log(y_lat / fit_new))
            )
        # peak memory, physics: a non-negative sum of the memory terms (relative error); its
        # scores |log(y / fit)| give the interval (3 coefficients: in-sample is close to
        # held-out). The trees do not extrapolate to families wider than the training ones.
        y_mem = rows["peak_mem_mb"].to_numpy(float)
        A_mem = rows[list(MEMORY_TERMS)].to_numpy(float)
        mcoef, _ = nnls(A_mem / y_mem[:, None], np.ones(len(rows)))
        self.mem_coefs_ = [float(c) for c in mcoef]
        fit_mem = np.maximum(A_mem @ mcoef, 1e-9)
        self.mem_scores_ = sorted(float(v) for v in np.abs(np.log(y_mem / fit_mem)))
        if held is not None:
            fit_new = np.maximum(held[1], 1e-9)
            self.new_family_mem_scores_ = sorted(float(v) for v in np.abs(np.log(y_mem / fit_new)))
        if self.mode == "network":
            oof = np.zeros(len(rows))
        if self.mode == "kernel":
            mem = CostModel(
                preset=self.preset,
                targets=["peak_mem_mb"],
                target_offsets={"peak_mem_mb": list(MEMORY_TERMS)},
                random_state=self.random_state,
                n_jobs=self.n_jobs,
            )
            self.network_ = mem.fit(self._X(rows, None), rows[["peak_mem_mb"]])
        else:
            X = self._X(rows, oof * self.scale_)
            self.network_ = CostModel(
                preset=self.preset,
                targets=["peak_mem_mb", "latency_ms"],
                target_offsets=self._offsets(),
                random_state=self.random_state,
                n_jobs=self.n_jobs,
            ).fit(X, rows[["peak_mem_mb", "latency_ms"]])
        return self

    def predict(
        self, rows: pd.DataFrame, ops: pd.DataFrame, alpha: float | None = 0.1
    ) -> pd.DataFrame:
        """Per network row: ``latency_ms``, ``peak_mem_mb`` (with ``_lower``/``_upper`` when
        ``alpha``), ``kernel_sum_ms``, ``unmodelled_ms`` and ``unmodelled_ops``."""
        self._check_predictable()
        rows = rows.reset_index(drop=True)
        seen_out: list = []
        sums = self._network_sums(self.kernel_, rows, ops, seen_out)
        out = pd.DataFrame(
            self._assemble(
                rows["n_ops"].to_numpy(float),
                rows[list(MEMORY_TERMS)].to_numpy(float),
                sums["ms"].to_numpy(),
                sums["un"].to_numpy(),
                lambda: rows,
                alpha,
                self._new_families(rows),
            )
        )
        names = ops.assign(_seen=seen_out[0])
        un_names = names[~names["_seen"]].groupby("key")["op"].agg(lambda s: sorted(set(s)))
        out["unmodelled_ops"] = [un_names.get(k, []) for k in rows["key"]]
        return out

    def _check_predictable(self) -> None:
        if not hasattr(self, "network_"):
            raise ModelError(
                "ModuleCostModel is not fitted: expected fit(rows, ops) or load(dir) first, "
                "got an unfitted model. Fit it on a measured ops campaign."
            )

    def _assemble(
        self,
        n_ops: np.ndarray,
        mem_terms: np.ndarray,
        ms_sum: np.ndarray,
        un_sum: np.ndarray,
        frame: Any,
        alpha: float | None,
        new: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """The prediction columns (in :meth:`predict`'s order) of networks given by their
        ``n_ops``, :data:`MEMORY_TERMS` and per-op sums (all ops, unmodelled ops);
        ``frame()`` gives their rows when the network cascade needs them; ``new`` marks the
        networks of families the model never trained on (their wider intervals)."""
        ksum = ms_sum * self.scale_
        un = un_sum * self.scale_
        out: dict[str, np.ndarray] = {}
        if not (self.mode == "kernel" and self.memory == "physics"):  # neither needs it
            X = self._X(frame().reset_index(drop=True), ksum)
            net = self.network_.predict(X, alpha=alpha) if alpha else self.network_.predict(X)
            out = {c: net[c].to_numpy() for c in net.columns}
        if self.mode == "kernel":
            a, b = self.kernel_coefs_
            lat = a * ms_sum + b * n_ops
            out["latency_ms"] = lat
            if alpha:
                q = np.where(new, self._quantile("kernel_new", alpha),
                             self._quantile("kernel", alpha))  # fmt: skip
                out["latency_ms_lower"] = lat * np.exp(-q)
                out["latency_ms_upper"] = lat * np.exp(q)
        if self.memory == "physics":
            mem = np.maximum(mem_terms @ self.mem_coefs_, 1e-9)
            out["peak_mem_mb"] = mem
            if alpha:
                q = np.where(new, self._quantile("mem_new", alpha), self._quantile("mem", alpha))
                out["peak_mem_mb_lower"] = mem * np.exp(-q)
                out["peak_mem_mb_upper"] = mem * np.exp(q)
        out[KERNEL_SUM] = ksum
        out["unmodelled_ms"] = un
        if alpha and "latency_ms_upper" in out:
            # ops never measured: their roofline estimate is a guess; widen by it both ways
            out["latency_ms_upper"] = out["latency_ms_upper"] + un
            out["latency_ms_lower"] = np.maximum(out["latency_ms_lower"] - un, 0.0)
        return out

    def _quantile(self, which: str, alpha: float) -> float:
        """The ``1 - alpha`` quantile of the kernel-mode latency (``"kernel"``) or the
        physics-memory (``"mem"``) scores (relative residuals), of a trained family's networks
        or (``"kernel_new"``, ``"mem_new"``) of a family never trained on (the networks'
        scores where the fit had too few families), computed once per level."""
        cache = self.__dict__.setdefault("_quantiles", {})
        key = (which, float(alpha))
        if key not in cache:
            seen = {
                "kernel": getattr(self, "kernel_scores_", None) or [np.log(1.25)],
                "mem": self.mem_scores_,
            }
            new = {
                "kernel": getattr(self, "new_family_kernel_scores_", None),
                "mem": getattr(self, "new_family_mem_scores_", None),
            }
            base = which.removesuffix("_new")
            scores = (new[base] if which.endswith("_new") else None) or seen[base]
            cache[key] = float(np.quantile(scores, 1 - alpha, method="higher"))
        return cache[key]

    def _new_family(self, family: str | None) -> bool:
        """Whether a network of ``family`` (None: not a built-in family's config, e.g. a
        user's module) gets the interval of a family never trained on."""
        return family is None or family not in getattr(self, "families_", [])

    def _new_families(self, rows: pd.DataFrame) -> np.ndarray:
        """:meth:`_new_family` of each row (all, without a ``family`` column)."""
        if "family" not in rows:
            return np.ones(len(rows), dtype=bool)
        return ~rows["family"].astype(str).isin(getattr(self, "families_", [])).to_numpy()

    def predict_module(
        self,
        module: Any,
        input_shape: Sequence[int],
        precision: str = "fp32",
        alpha: float | None = 0.1,
        family: str | None = None,
    ) -> dict[str, Any]:
        """Trace ``module`` for ``input_shape`` and predict it (one dict, see
        :meth:`predict`): the numbers of ``predict`` on its one row, without building
        frames where arrays do (the per-op predictions are cached by the kernel model).
        ``family``: the built-in family the module is a config of, if any; a module of no
        family the model trained on gets the wider intervals of a new family."""
        self._check_predictable()
        table, feats = trace_op_arrays(module, input_shape, precision)
        ms, seen = self.kernel_.predict_op_arrays(table)
        batch = int(input_shape[0])

        def frame() -> pd.DataFrame:
            return pd.DataFrame([{**feats, "key": "module", "batch_size": batch}])

        cols = self._assemble(
            np.array([float(feats["n_ops"])]),
            np.array([[float(feats[c]) for c in MEMORY_TERMS]]),
            np.array([ms.sum()]),
            np.array([ms[~seen].sum()]),
            frame,
            alpha,
            np.array([self._new_family(family)]),
        )
        out: dict[str, Any] = {c: v[0].item() if hasattr(v[0], "item") else v[0]
                               for c, v in cols.items()}  # fmt: skip
        out["unmodelled_ops"] = sorted(set(table["op"][~seen])) if len(seen) else []
        return out

    def predict_spec(self, spec: Any, alpha: float | None = 0.1) -> tuple[pd.DataFrame, bool]:
        """What ``carb_nas.scoring.predict_spec`` returns for a
        :class:`carb_nas.models.ModelSpec`: one row (targets, ``_lower``/``_upper``,
        ``kernel_sum_ms``, ``unmodelled_ops``) and whether any op was unmodelled."""
        module = spec.module if spec.kind == "module" else spec.build("meta")
        family = spec.config.family if spec.config is not None else None
        pred = self.predict_module(
            module, spec.input_shape, spec.precision, alpha=alpha, family=family
        )
        return pd.DataFrame([pred]), bool(pred["unmodelled_ops"])

    # -- persistence ------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """A directory: the kernel booster (XGBoost JSON), the network CostModel (its own
        pickle-free format) and ``manifest.json`` with the SHA-256 of the kernel file."""
        d = Path(directory)
        with atomic_directory(d) as tmp:
            part = self.kernel_.save_to(tmp)
            self.network_.save(tmp / "network")
            manifest = {
                "format": MODULE_FORMAT,
                "format_version": FORMAT_VERSION,
                "mode": self.mode,
                "preset": self.preset,
                "scale": self.scale_,
                "kernel_coefs": self.kernel_coefs_,
                "kernel_anchor": self.kernel_anchor,
                "memory": self.memory,
                "mem_coefs": self.mem_coefs_,
                "mem_scores": self.mem_scores_,
                "kernel_scores": self.kernel_scores_,
                "families": getattr(self, "families_", []),
                "new_family_kernel_scores": getattr(self, "new_family_kernel_scores_", []),
                "new_family_mem_scores": getattr(self, "new_family_mem_scores_", []),
                "platform": self.platform_,
                "kernel": part,
            }
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        return d

    @classmethod
    def load(cls, directory: str | Path) -> ModuleCostModel:
        d = Path(directory)
        try:
            manifest = json.loads((d / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ModelError(
                f"cannot read a module cost model: expected {d / 'manifest.json'}, got "
                f"{type(e).__name__}: {e}. Pass a directory ModuleCostModel.save wrote."
            ) from e
        if (
            manifest.get("format") != MODULE_FORMAT
            or manifest.get("format_version") != FORMAT_VERSION
        ):
            raise ModelError(
                f"not a module cost model: expected format {MODULE_FORMAT!r} version "
                f"{FORMAT_VERSION}, got {manifest.get('format')!r}. Save it again."
            )
        m = cls(
            mode=manifest["mode"],
            preset=manifest["preset"],
            # optional fields: manifests without them predate these options, whose
            # behaviour then was the "cascade" memory and no anchoring
            memory=manifest.get("memory", "cascade"),
            kernel_anchor=bool(manifest.get("kernel_anchor", False)),
        )
        m.mem_coefs_ = [float(v) for v in manifest.get("mem_coefs", [])]
        m.mem_scores_ = [float(v) for v in manifest.get("mem_scores", [])]
        m.kernel_scores_ = [float(v) for v in manifest.get("kernel_scores", [])]
        # optional field: a manifest without families gives every network the networks' scores
        m.families_ = [str(f) for f in manifest.get("families", [])]
        m.new_family_kernel_scores_ = [
            float(v) for v in manifest.get("new_family_kernel_scores", [])
        ]
        m.new_family_mem_scores_ = [float(v) for v in manifest.get("new_family_mem_scores", [])]
        m.scale_ = float(manifest["scale"])
        m.kernel_coefs_ = [float(v) for v in manifest["kernel_coefs"]]
        m.platform_ = dict(manifest.get("platform") or {"platform": "cpu/torch/fp32"})
        m.targets_ = ["peak_mem_mb", "latency_ms"]
        m.kernel_ = KernelCostModel.load_from(d, manifest["kernel"])
        m.kernel_prior, m.kernel_geometry = m.kernel_.prior, m.kernel_.geometry
        m.kernel_shared_conv = m.kernel_.shared_conv
        m.kernel_simd_lanes = m.kernel_.simd_lanes
        m.network_ = CostModel.load(d / "network")
        return m


# -- tables of a measured campaign and the leave-one-family-out evaluation -------------------
def network_tables(
    rows: pd.DataFrame, measured_ops: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(networks, ops)`` of measured config rows: each config's module (built on the meta
    device) traced by :func:`trace_ops` into :data:`NETWORK_COLUMNS` and its op table, with
    ``measured_ms`` joined from ``measured_ops`` (``key``, ``index``, ``measured_ms``) where
    given. Each architecture is traced once per batch size (the trace's own cache)."""
    from carb_nas.models import build_model
    from carb_nas.space import Config

    nets, tables = [], []
    for r in rows.itertuples(index=False):
        c = Config(r.family, int(r.depth), float(r.width), int(r.resolution), int(r.batch_size))
        module = build_model(c, device="meta")
        ops, feats = trace_ops(module, (c.batch_size, 3, c.resolution, c.resolution))
        nets.append({"key": r.key, **feats})
        tables.append(ops.assign(key=r.key))
    net = pd.DataFrame(nets)
    ops = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    out = rows.drop(columns=[c for c in NETWORK_COLUMNS if c in rows.columns]).merge(
        net, on="key", how="left"
    )
    if measured_ops is not None and len(ops):
        m = measured_ops[["key", "index", "measured_ms"]]
        ops = ops.merge(m, on=["key", "index"], how="left")
    return out, ops


def anchored_ops(rows: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with each network's ``measured_ms`` scaled so they sum to its ``latency_ms``
    in ``rows`` (the timed latency split over the ops in proportion to their profiled times,
    the time between op events included); a network without a positive latency or op sum
    (or ``rows`` without ``latency_ms``) keeps its times.

    Why: the op times come from profiled runs after the timing window, another stretch of
    the run at its own machine speed: a whole-run shift shared by every op of a run, larger
    than the latencies' own noise. The timed latency (a median over many runs, and over
    passes in a shipped dataset) is the better total (docs/accuracy.md)."""
    if "latency_ms" not in rows.columns:  # nothing to anchor to
        return ops
    total = ops.groupby("key")["measured_ms"].sum()
    lat = pd.to_numeric(rows.drop_duplicates("key").set_index("key")["latency_ms"], "coerce")
    factor = lat.reindex(total.index) / total
    factor = factor.where(np.isfinite(factor) & (factor > 0), 1.0)
    return ops.assign(measured_ms=ops["measured_ms"] * ops["key"].map(factor).fillna(1.0))


def within(y: np.ndarray, p: np.ndarray, tol: float = 0.10) -> float:
    """Share of predictions within ``tol`` (relative) of the measurement."""
    return float(np.mean(np.abs(p / y - 1) <= tol))


def _covered(pred: pd.DataFrame, target: str, y: np.ndarray) -> float:
    """Share of ``y`` inside the predicted ``<target>_lower`` .. ``_upper`` interval."""
    lo, hi = pred[f"{target}_lower"].to_numpy(float), pred[f"{target}_upper"].to_numpy(float)
    return float(np.mean((lo <= y) & (y <= hi)))


def leave_one_family_out(
    rows: pd.DataFrame,
    ops: pd.DataFrame,
    groups: Sequence[str] | np.ndarray,
    modes: Sequence[str] = MODES,
    preset: str = "fast",
    random_state: int = 0,
    kernel_params: Mapping[str, Any] | None = None,
    kernel_samples: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per held-out family group and mode: train on the other groups' networks and ops
    (and ``kernel_samples``, single ops of no family, in every fold), test on it
    (``kernel_params``: ``ModuleCostModel``'s ``kernel_prior`` / ``kernel_geometry``,
    default theirs). Columns: ``family``, ``mode``, ``n``, ``latency_mape``,
    ``latency_within10``, ``latency_r2``, ``latency_cover90`` (the share inside the 90 %
    interval), ``mem_mape``, ``mem_within10``, ``mem_r2``, ``mem_cover90``."""
    from sklearn.metrics import mean_absolute_percentage_error, r2_score

    rows = rows.reset_index(drop=True)
    g = np.asarray(groups)
    out = []
    for fam in sorted(set(g)):
        tr, te = rows[g != fam], rows[g == fam]
        ops_tr = ops[ops["key"].isin(set(tr["key"]))]
        ops_te = ops[ops["key"].isin(set(te["key"]))]
        kp = dict(kernel_params or {})
        kernel = ModuleCostModel(random_state=random_state, **kp).kernel_part(
            tr, ops_tr, kernel_samples
        )
        for mode in modes:
            m = ModuleCostModel(mode=mode, preset=preset, random_state=random_state, **kp).fit(
                tr, ops_tr, kernel=kernel, kernel_samples=kernel_samples
            )
            p = m.predict(te, ops_te, alpha=0.1)
            y_l, y_m = te["latency_ms"].to_numpy(float), te["peak_mem_mb"].to_numpy(float)
            p_l, p_m = p["latency_ms"].to_numpy(float), p["peak_mem_mb"].to_numpy(float)
            out.append(
                {
                    "family": fam,
                    "mode": mode,
                    "n": len(te),
                    "latency_mape": mean_absolute_percentage_error(y_l, p_l),
                    "latency_within10": within(y_l, p_l),
                    "latency_r2": r2_score(y_l, p_l) if len(te) > 1 else float("nan"),
                    "latency_cover90": _covered(p, "latency_ms", y_l),
                    "mem_mape": mean_absolute_percentage_error(y_m, p_m),
                    "mem_within10": within(y_m, p_m),
                    "mem_r2": r2_score(y_m, p_m) if len(te) > 1 else float("nan"),
                    "mem_cover90": _covered(p, "peak_mem_mb", y_m),
                }
            )
    return pd.DataFrame(out)


def _kernel_samples(samples: pd.DataFrame | None, rows: pd.DataFrame) -> pd.DataFrame:
    """``samples`` checked: measured op rows whose keys are no network's of ``rows``."""
    if samples is None or len(samples) == 0:
        return pd.DataFrame()
    # checked here, not left to KernelCostModel.fit: concatenated with the networks' ops, a
    # missing column would become NaN instead of missing
    missing = [c for c in ("key", *_OP_TABLE_COLUMNS) if c not in samples]
    if missing:
        raise err("kernel samples without their op columns", "the trace_ops columns plus key and "
                  "measured_ms", f"missing {missing}", "Pass a trace_ops table with measured_ms "
                  "(carb_nas.datasets.load_kernel_samples reads an export).")  # fmt: skip
    shared = set(samples["key"]) & set(rows["key"])
    if shared:
        raise err("kernel samples that are networks", "op rows of no network being fitted",
                  f"{len(shared)} keys of the networks (e.g. {sorted(shared)[0]})",
                  "Pass single-op samples; the networks' own ops go in ops.")  # fmt: skip
    return samples[samples["measured_ms"].notna()]


def _with_samples(ops: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    return ops if samples.empty else pd.concat([ops, samples], ignore_index=True)


def family_groups(families: Sequence[str]) -> np.ndarray:
    """The held-out unit of :func:`leave_one_family_out` per row: the family group of
    :func:`carb_nas.space.family_group` (``resnet`` for basic and bottleneck, one group for
    all RegNets, ...)."""
    from carb_nas.space import family_group

    return np.array([family_group(str(f)) for f in families], dtype=object)


def lofo_report(
    rows: pd.DataFrame,
    measured_ops: pd.DataFrame,
    modes: Sequence[str] = MODES,
    preset: str = "fast",
    random_state: int = 0,
    kernel_params: Mapping[str, Any] | None = None,
    kernel_samples: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Leave-one-family-out over the measured ``rows`` (config columns, ``key``,
    ``latency_ms``, ``peak_mem_mb``) and their per-op times (``kernel_samples``: single-op
    measurements added to every fold's per-op fit, :func:`leave_one_family_out`): per family
    group and mode the metrics of :func:`leave_one_family_out`, and per mode the median over
    families and the worst family of ``latency_within10`` and the median ``mem_within10``."""
    for m in modes:
        if m not in MODES:
            raise err("invalid mode", f"one of {list(MODES)}", repr(m), "Use e.g. 'both'.")
    rows = rows[rows["latency_ms"].notna() & rows["peak_mem_mb"].notna()]
    net, ops = network_tables(rows, measured_ops)
    table = leave_one_family_out(
        net, ops, family_groups(net["family"]), modes, preset, random_state, kernel_params,
        kernel_samples,
    )  # fmt: skip
    summary = {}
    for m, t in table.groupby("mode", sort=False):
        summary[m] = {
            "lofo_latency_within10": float(t["latency_within10"].median()),
            "lofo_latency_min_within10": float(t["latency_within10"].min()),
            "lofo_mem_within10": float(t["mem_within10"].median()),
            "lofo_latency_mape": float(t["latency_mape"].median()),
            "lofo_latency_cover90": float(t["latency_cover90"].median()),
        }
    return {
        "n_rows": len(net),
        "families": sorted(set(table["family"])),
        "per_family": table.to_dict(orient="records"),
        "summary": summary,
    }


def network_lofo_report(
    rows: pd.DataFrame, preset: str = "fast", random_state: int = 0
) -> dict[str, Any]:
    """Leave-one-family-out of the config-table ``CostModel`` (the default models' recipe:
    physical offsets, architecture columns only) over measured ``rows`` of several family
    groups, for a dataset without a per-operator table (the GPU rows): per held-out group and
    measured target (``peak_mem_mb``, ``energy_j``, ``latency_ms``) ``n``, ``<target>_mape``,
    ``<target>_within10`` and ``<target>_r2``; per target the median and worst
    ``within10`` over groups. A family label the folds never saw counts as missing."""
    from sklearn.metrics import mean_absolute_percentage_error, r2_score

    from carb_nas.costmodel._prepare import physical_offsets, prepare_table

    targets = [t for t in ("peak_mem_mb", "energy_j", "latency_ms") if t in rows]
    targets = [t for t in targets if pd.to_numeric(rows[t], errors="coerce").notna().any()]
    held = sorted(set(family_groups(rows["family"]))) if "family" in rows else []
    if len(held) < 2:  # before featurizing anything
        raise err(
            "too few family groups to hold one out",
            "rows of two or more family groups",
            f"{held}",
            "Pass a multi-family dataset (e.g. carb_nas/data/zoo/cuda_torch_fp16_zoo-h200.csv).",
        )
    data = prepare_table(rows, "leave-one-family-out rows", targets)
    X, Y = data["X"], data["Y"][targets]
    groups = family_groups(data["frame"]["family"])
    out = []
    for g in sorted(set(groups)):
        tr, te = groups != g, groups == g
        model = CostModel(
            preset=preset,
            targets=targets,
            target_offsets=physical_offsets(X[tr], targets) or None,
            architecture_only=True,
            handle_unknown="ignore",
            # the blend weights need >= 10 validation rows (67 at 0.15); fewer: equal weights
            validation_fraction=0.15 if tr.sum() >= 67 else 0.0,
            calibration_fraction=0.0,
            random_state=random_state,
            n_jobs=1,
        ).fit(X[tr], Y[tr])
        pred = model.predict(X[te])
        rec: dict[str, Any] = {"family": g, "n": int(te.sum())}
        for t in targets:
            y, p = Y[t][te].to_numpy(float), pred[t].to_numpy(float)
            rec[f"{t}_mape"] = mean_absolute_percentage_error(y, p)
            rec[f"{t}_within10"] = within(y, p)
            rec[f"{t}_r2"] = r2_score(y, p) if len(y) > 1 else float("nan")
        out.append(rec)
    table = pd.DataFrame(out)
    summary = {
        t: {
            "within10_median": float(table[f"{t}_within10"].median()),
            "within10_min": float(table[f"{t}_within10"].min()),
            "mape_median": float(table[f"{t}_mape"].median()),
        }
        for t in targets
    }
    return {
        "n_rows": len(X),
        "model": f"CostModel(preset={preset!r}), physical offsets, architecture columns",
        "targets": targets,
        "per_family": table.to_dict(orient="records"),
        "summary": summary,
    }
