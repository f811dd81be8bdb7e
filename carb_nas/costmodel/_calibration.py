"""Few-shot calibration: a source platform's cost model adapted to a new platform.

``calibrate(source_model, rows)`` fits, per target, a small map of the residual
``log(y) - log(source prediction)`` on a few measured rows of the new platform (10-100) and
returns a ``CalibratedModel`` that predicts like a ``CostModel``. Used by ``carb-nas report
transfer`` (``carb_nas.reports``) to measure how many target rows a transfer needs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._json import jsonable
from carb_nas.costmodel._common import booster_from_text
from carb_nas.costmodel._prepare import model_inputs
from carb_nas.datasets import TARGETS, load_dataset
from carb_nas.errors import ModelError
from carb_nas.space import CONFIG_COLUMNS

__all__ = [
    "CALIBRATION_FEATURES",
    "MANY_ROWS_FEATURES",
    "CALIBRATION_METHODS",
    "INFORMATIVE_KINDS",
    "MAX_FACILITY_POINTS",
    "CalibratedModel",
    "ModuleRatio",
    "calibrate",
    "fit_module_ratio",
    "MIN_PRIOR_CONFIGS",
    "PRIOR_MAP_COLUMNS",
    "TransferPrior",
    "calibration_feature_names",
    "calibration_features",
    "fit_transfer_prior",
    "facility_location_order",
    "informative_rows",
    "nearest_distance",
    "penalized_fit",
]

CALIBRATION_METHODS = ("auto", "scale", "loglinear", "features", "prior")
PRIOR_MAP_COLUMNS = ("log_source", "log_flops")
"""The linear columns of the ``prior`` map beside the prior's shape (see ``CalibratedModel``)."""
CALIBRATION_FEATURES = (
    "log_flops",
    "log_batch_size",
    "log_resolution",
    "log_width",
    "log_depth",
    "is_bottleneck",
)


MANY_ROWS_FEATURES = ("log_compute_intensity", "log_flops_sq", "is_batch_one")
"""Columns the ``features`` and ``prior`` maps add from many rows on (``FEATURE_MIN_ROWS``).

``log_compute_intensity`` (from ``MANY_ROWS`` rows): FLOPs per byte moved; a machine with
another bandwidth-to-compute balance than the source's bends the time per FLOP by it.
``log_flops_sq`` (from ``SQUARE_ROWS``): the square of log FLOPs about 1 GFLOP
(:data:`FLOPS_SQ_CENTER`); a machine with another per-op overhead bends the time per FLOP one
way for small, overhead-bound configs and the other for large, compute-bound ones.
``is_batch_one`` (from ``SQUARE_ROWS``, with ``MIN_LEVEL_ROWS`` on each side): a batch of one
runs other kernels than larger batches, a step log batch size cannot follow. They are not in
``CALIBRATION_FEATURES`` (the D-optimal design's and the prior's columns): with few rows they
overfit. Measured effects: see docs/accuracy.md."""

MIN_LEVEL_ROWS = 3
"""An indicator column (``is_batch_one``) enters a map only with this many rows on each side:
fewer, and its weight is one config's noise."""

FLOPS_SQ_CENTER = math.log(1e9)
"""``log_flops_sq`` is ``(ln FLOPs - ln 1e9) ** 2``: centred within the spaces' range, so that
it is not nearly collinear with ``log_flops`` (the maps standardize, but do not centre before
squaring)."""


def calibration_features(
    X: pd.DataFrame,
    names: Sequence[str] | None = None,
    log_flops_range: Sequence[float] | None = None,
) -> np.ndarray:
    """Columns ``names`` (default: all of ``CALIBRATION_FEATURES`` that X can give).

    ``log_flops_range``: the calibration rows' ``[min, max]`` of ln FLOPs; ``log_flops_sq``
    squares ln FLOPs clipped to it: flat beyond the rows, like the maps' corrections (``clip``),
    where a square fitted on them would grow without bound."""
    if names is None:
        names = calibration_feature_names(X)
    cols = []
    for name in names:
        if name == "is_bottleneck":
            cols.append((X["family"].astype(str).to_numpy() == "bottleneck").astype(float))
        elif name == "is_batch_one":
            cols.append((pd.to_numeric(X["batch_size"]).to_numpy(float) == 1).astype(float))
        elif name == "log_flops_sq":
            v = _log_flops(X)
            if log_flops_range is not None:
                v = np.clip(v, log_flops_range[0], log_flops_range[1])
            cols.append((v - FLOPS_SQ_CENTER) ** 2)
        else:
            v = pd.to_numeric(X[name[4:]]).to_numpy(float)
            cols.append(np.log(np.maximum(v, 1e-12)))
    return np.column_stack(cols)


def calibration_feature_names(X: pd.DataFrame, many_rows: bool = False) -> list[str]:
    """The ``CALIBRATION_FEATURES`` (and with ``many_rows`` the ``MANY_ROWS_FEATURES``) that
    ``X`` can give: the architecture columns come with ``model_inputs``."""
    names = CALIBRATION_FEATURES + (MANY_ROWS_FEATURES if many_rows else ())
    return [n for n in names if n == "is_bottleneck" or _column_of(n) in X.columns]


def _both_levels(column: np.ndarray) -> bool:
    """Whether an indicator column has ``MIN_LEVEL_ROWS`` rows at 1 and as many at 0."""
    ones = int(np.sum(column == 1))
    return min(ones, len(column) - ones) >= MIN_LEVEL_ROWS


def _log_flops(X: pd.DataFrame) -> np.ndarray:
    return np.log(np.maximum(pd.to_numeric(X["flops"]).to_numpy(float), 1e-12))


def _column_of(name: str) -> str:
    """The column of ``X`` a calibration feature is computed from."""
    return {"log_flops_sq": "flops", "is_batch_one": "batch_size"}.get(name, name[4:])


INFORMATIVE_KINDS = ("design", "spread")


def informative_rows(
    X: pd.DataFrame,
    source_prediction: Sequence[float],
    n: int,
    seed: int = 0,
    kind: str = "design",
) -> np.ndarray:
    """Positions of ``n`` rows of ``X`` worth measuring for a few-shot calibration.

    ``kind="design"`` (default): a greedy D-optimal design for the ``features`` map itself.
    From a seeded random first row, each next row is the one with the largest leverage
    ``g' M^-1 g`` under the rows chosen so far (``M = I + sum g g'``, ``g = [1, log source
    prediction, CALIBRATION_FEATURES]`` standardized), i.e. the row that most shrinks the
    map's coefficient uncertainty: the N rows pin down the map's directions instead of
    spreading evenly (see docs/accuracy.md for the comparison with ``"spread"``).

    ``kind="spread"``: farthest-point order, from a seeded random first row, in the
    standardized space of the knobs (log batch size, resolution, width, depth; is_bottleneck)
    and of the source model's log prediction.
    """
    n = int(n)
    if n < 1 or n > len(X):
        raise ModelError(
            f"cannot choose {n} rows for a calibration: expected 1 <= N <= {len(X)} (the rows "
            f"given), got {n}. Ask for fewer rows or give more."
        )
    if kind not in INFORMATIVE_KINDS:
        raise ModelError(
            f"unknown informative-row kind: expected one of {list(INFORMATIVE_KINDS)}, got "
            f"{kind!r}. Use 'design'."
        )
    pred = np.asarray(source_prediction, dtype=float)
    log_pred = np.log(np.maximum(np.where(np.isfinite(pred), pred, 1.0), 1e-12))
    if kind == "design":
        M = np.column_stack([log_pred, calibration_features(X)])
    else:
        cols = [np.log(np.maximum(pd.to_numeric(X[k]).to_numpy(float), 1e-12))
                for k in ("batch_size", "resolution", "width", "depth")]  # fmt: skip
        cols.append((X["family"].astype(str).to_numpy() == "bottleneck").astype(float))
        cols.append(log_pred)
        M = np.column_stack(cols)
    std = M.std(axis=0)
    M = (M - M.mean(axis=0)) / np.where(std > 0, std, 1.0)
    rng = np.random.default_rng(seed)
    order = [int(rng.integers(len(M)))]
    if kind == "design":
        return _d_optimal(np.column_stack([np.ones(len(M)), M]), order, n)
    dist = np.linalg.norm(M - M[order[0]], axis=1)
    dist[order[0]] = -1.0
    for _ in range(n - 1):
        i = int(np.argmax(dist))
        if dist[i] < 0:
            break
        order.append(i)
        dist = np.minimum(dist, np.linalg.norm(M - M[i], axis=1))
        dist[order] = -1.0
    if len(order) < n:  # duplicates in these coordinates: fill at random
        left = np.setdiff1d(np.arange(len(M)), order)
        order += list(rng.choice(left, n - len(order), replace=False))
    return np.asarray(order, dtype=np.int64)


def _d_optimal(G: np.ndarray, order: list[int], n: int) -> np.ndarray:
    """Greedy D-optimal rows of the design ``G`` after ``order``: each adds the largest
    leverage under a unit ridge prior (``M = I + sum g g'``), never a row twice."""
    info = np.eye(G.shape[1]) + G[order].T @ G[order]
    taken = np.zeros(len(G), dtype=bool)
    taken[order] = True
    while len(order) < n:
        gain = np.einsum("ij,jk,ik->i", G, np.linalg.inv(info), G)
        gain[taken] = -np.inf
        i = int(np.argmax(gain))
        order.append(i)
        taken[i] = True
        info += np.outer(G[i], G[i])
    return np.asarray(order, dtype=np.int64)


MAX_FACILITY_POINTS = 4096  # rows facility_location_order scores (pair matrix 64 MB)
_BLOCK_ROWS = 512  # rows of a distance block: 512 x 4096 float64 is 16 MB


def nearest_distance(Xc: np.ndarray, Xm: np.ndarray) -> np.ndarray:
    """Distance of every row of ``Xc`` to its nearest row of ``Xm`` (chunked: pools are large)."""
    from scipy.spatial.distance import cdist

    dist = np.full(len(Xc), np.inf)
    for start in range(0, len(Xm), _BLOCK_ROWS):
        block = cdist(Xc, Xm[start : start + _BLOCK_ROWS]).min(axis=1)
        dist = np.minimum(dist, block)
    return dist


def _pair_distances(K: np.ndarray) -> np.ndarray:
    """The float32 distance matrix of ``K``'s rows, by blocks of rows: broadcasting the
    differences made an N x N x d array first (4096 rows of 8 coordinates: 540 MB); scipy's
    cdist differences each pair exactly, so coinciding rows stay at 0."""
    from scipy.spatial.distance import cdist

    pair = np.empty((len(K), len(K)), dtype=np.float32)
    for start in range(0, len(K), _BLOCK_ROWS):
        pair[start : start + _BLOCK_ROWS] = cdist(K[start : start + _BLOCK_ROWS], K)
    return pair


def facility_location_order(
    points: np.ndarray,
    weights: np.ndarray,
    n: int,
    covered: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
    max_points: int | None = None,
) -> list[int]:
    """Positions of up to ``n`` rows of ``points`` by greedy weighted facility location: each
    pick is the row that most reduces ``sum_j weights_j * d_j``, ``d_j`` the distance from
    row ``j`` to its nearest pick or ``covered`` row (none: a phantom one beyond the largest
    pairwise distance, so the first pick is the weighted medoid). Every prefix stands for the
    rows near it: the picks follow the rows' density, and a pick lowers its neighbours'
    value. Above ``max_points`` (default :data:`MAX_FACILITY_POINTS`) rows, a sample drawn with
    ``rng`` is scored. Stops early when no row reduces the sum (the rest coincide with
    picks)."""
    limit = MAX_FACILITY_POINTS if max_points is None else max_points
    pick_from = np.arange(len(points))
    if len(points) > limit:
        rng = rng if rng is not None else np.random.default_rng(0)
        pick_from = np.sort(rng.choice(len(points), limit, replace=False))
    K = np.asarray(points, dtype=np.float32)[pick_from]
    w = np.asarray(weights, dtype=np.float32)[pick_from]
    pair = _pair_distances(K)
    if covered is not None and len(covered):
        cur = nearest_distance(K, np.asarray(covered, dtype=np.float32))
    else:
        # beyond every pair, so that the first pick gains even where all rows coincide
        cur = np.full(len(K), float(pair.max()) + 1.0 if pair.size else 1.0, dtype=np.float32)
    order: list[int] = []
    taken = np.zeros(len(K), dtype=bool)
    buf = np.empty_like(pair)  # one N x N scratch for every pick's gains, not three
    for _ in range(min(int(n), len(K))):
        np.subtract(cur[None, :], pair, out=buf)
        np.maximum(buf, 0.0, out=buf)
        buf *= w[None, :]
        gain = buf.sum(axis=1)
        gain[taken] = -np.inf
        i = int(np.argmax(gain))
        if not gain[i] > 0:
            break
        order.append(int(pick_from[i]))
        taken[i] = True
        cur = np.minimum(cur, pair[i])
    return order


def penalized_fit(design: np.ndarray, r: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Penalized least squares (intercept column 0 unpenalized): coefficients, LOO residuals."""
    penalty = lam * np.eye(design.shape[1])
    penalty[0, 0] = 0.0
    gram_inv = np.linalg.pinv(design.T @ design + penalty)
    coef = gram_inv @ design.T @ r
    hat = np.einsum("ij,jk,ik->i", design, gram_inv, design)
    resid = r - design @ coef
    with np.errstate(divide="ignore", invalid="ignore"):
        loo = np.where(hat < 1 - 1e-9, resid / (1 - hat), np.inf)
    return coef, loo


def log_maps(
    z: np.ndarray,
    r: np.ndarray,
    penalties: Sequence[float] = (0.0,),
    centre: tuple[float, float] | None = None,
) -> dict[str, tuple[dict[str, Any], float]]:
    """The two maps of a residual ``r = log(y) - log(source)`` on ``z = log(source)`` alone,
    each with its leave-one-out RMSE (in log units): ``scale``, ``r = a``, and, from 3 rows
    with ``z`` not constant, ``loglinear``, ``r = a + b * (z - mean) / std``, ridge-penalized
    on ``b`` with the penalty of ``penalties`` of lowest LOO error (the first on a tie).
    ``centre``: the ``(mean, std)`` to standardize ``z`` by (default: ``z``'s own).
    Apply a map with :func:`log_map_correction`."""
    n = len(z)
    coef, loo = penalized_fit(np.ones((n, 1)), r, 0.0)
    out = {
        "scale": (
            {"method": "scale", "intercept": float(coef[0])},
            float(np.sqrt(np.mean(loo**2))) if n > 1 else math.inf,
        )
    }
    if n >= 3 and np.ptp(z) > 0:
        mean, std = (float(z.mean()), float(z.std())) if centre is None else map(float, centre)
        design = np.column_stack([np.ones(n), (z - mean) / std])
        fits = []
        for lam in penalties:
            coef, loo = penalized_fit(design, r, lam)
            spec = {
                "method": "loglinear",
                "intercept": float(coef[0]),
                "weights": [float(coef[1])],
                "mean": [mean],
                "std": [std],
            }
            fits.append((spec, float(np.sqrt(np.mean(loo**2)))))
        out["loglinear"] = min(fits, key=lambda fit: fit[1])
    return out


def log_map_correction(spec: Mapping[str, Any], z: np.ndarray) -> np.ndarray:
    """The correction ``r`` of a ``scale`` or ``loglinear`` map (:func:`log_maps`) at
    ``z = log(source)``, unclipped: ``exp(z + r)`` is the calibrated value."""
    r = np.full(len(z), float(spec["intercept"]))
    if spec["method"] == "loglinear":
        r = r + spec["weights"][0] * (z - spec["mean"][0]) / spec["std"][0]
    return r


# --- transfer prior ---------------------------------------------------------------------
PRIOR_SHAPE_PARAMS: dict[str, Any] = {
    "n_estimators": 200,
    "num_leaves": 15,
    "learning_rate": 0.05,
    "min_child_samples": 10,
}
"""LightGBM parameters of one pair's residual shape (small: a few hundred shared configs)."""
MIN_PRIOR_CONFIGS = 30
"""Configs a pair must have measured on both platforms to give a shape."""
_JOIN = tuple(c for c in CONFIG_COLUMNS if c not in ("precision", "runtime"))


class TransferPrior:
    """How a platform change bends the cost, learned on *other* platform pairs (A -> B).

    Per pair and target, on the configs both platforms measured, a small LightGBM model
    (``PRIOR_SHAPE_PARAMS``) of the log residual ``r = log(y_B) - log(y_A)`` over ``g = [log
    y_A, CALIBRATION_FEATURES]``: the pair's *shape* of the transfer, non-linear where the
    few-shot maps are linear. ``shape(target, g)`` is the mean of the pairs' shapes at ``g``
    (``log y_A`` replaced by the source model's log prediction). ``calibrate(...,
    prior=...)`` adds it as one more column of the ridge ``features`` map (map ``prior``):
    the N target rows fit only its weight with the other coefficients, so a shape that does
    not hold on the target is weighted down, not imposed. Persisted as JSON (LightGBM's text
    model inside), never pickle. Build it with ``fit_transfer_prior``.

    A prior helps where its pairs resemble the calibrated change (same runtime, machine and
    space); one learned on unrelated pairs is weighted down by the map (see docs/accuracy.md).

    A pair whose B is the calibrated platform itself, measured on another machine
    (``fit_transfer_prior(..., platform=...)``), also gives B's *level*: a booster of ``log
    y_B`` over the ``CALIBRATION_FEATURES`` alone, which the shape turns into ``level(x) -
    log source`` and averages with the pairs' residual shapes. The residual shape of such a
    pair reads ``log y_A`` of *its* machine, so at this machine's source predictions it is read
    off its training range; the level needs the architecture only, and the machines' speed
    difference is one constant, which the map's intercept takes.
    """

    def __init__(self, shapes: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        # shapes[target][pair] = {"model": LightGBM text, "n": shared configs}, and for a pair
        # whose B is the calibrated platform on another machine {"level_model", "level_n"}
        self.shapes = {t: {p: dict(s) for p, s in per.items()} for t, per in shapes.items()}
        self._boosters: dict[tuple[str, str, str], Any] = {}

    @property
    def pairs(self) -> list[str]:
        return sorted({p for per in self.shapes.values() for p in per})

    @property
    def level_pairs(self) -> list[str]:
        """The pairs that also give the calibrated platform's level (for some target)."""
        return sorted({p for per in self.shapes.values() for p, s in per.items()
                       if "level_model" in s})  # fmt: skip

    def shape(self, target: str, g: np.ndarray) -> np.ndarray | None:
        """The mean of the pairs' shapes (and levels) at ``g`` (rows of ``[log source,
        features]``), or None when no pair measured ``target``."""
        per = self.shapes.get(target)
        if not per:
            return None
        parts = []
        for pair, spec in per.items():
            parts.append(self._booster(target, pair, "model").predict(g))
            if "level_model" in spec:  # B's own level, on the features alone
                parts.append(self._booster(target, pair, "level_model").predict(g[:, 1:]) - g[:, 0])
        return np.mean(parts, axis=0)

    def _booster(self, target: str, pair: str, field: str) -> Any:
        import lightgbm as lgb

        key = (target, pair, field)
        if key not in self._boosters:
            self._boosters[key] = lgb.Booster(model_str=self.shapes[target][pair][field])
        return self._boosters[key]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "transfer_prior", "features": ["log_source", *CALIBRATION_FEATURES],
                "shapes": self.shapes}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransferPrior:
        if not isinstance(data, Mapping) or data.get("kind") != "transfer_prior":
            raise ModelError(
                "not a transfer prior: expected TransferPrior.to_dict() data (kind "
                f"'transfer_prior'), got {type(data).__name__}"
                + (f" of kind {data.get('kind')!r}" if isinstance(data, Mapping) else "")
                + ". Build one with fit_transfer_prior."
            )
        return cls(data["shapes"])


def _prior_design(z: np.ndarray, feats: np.ndarray) -> np.ndarray:
    return np.column_stack([z, feats])


def fit_transfer_prior(
    pairs: Mapping[str, tuple[Any, Any]],
    targets: Sequence[str] = ("latency_ms",),
    seed: int = 0,
    platform: str | None = None,
) -> TransferPrior:
    """Learn a ``TransferPrior`` from measured platform pairs ``{"name": (rows_A, rows_B)}``.

    Each side is a dataset name, path or frame of measured rows (one platform each); the pair
    is joined on the config knobs (family, depth, width, resolution, batch size). Every pair
    must share at least ``MIN_PRIOR_CONFIGS`` configs measured on both for one of
    ``targets``. Leave the platform you calibrate to out of ``pairs``: the prior is meant to
    carry knowledge from elsewhere (``carb-nas report transfer --prior`` does: see
    ``carb_nas.reports.prior_pairs``). Figures: ``TransferPrior``.

    ``platform``: the platform the prior will calibrate to (``device/runtime/precision``, e.g.
    ``"cpu/onnxruntime/fp32"``). A pair whose B rows measured that platform (on another
    machine: B's own rows would not be a prior) also gives B's *level*: a booster of ``log
    y_B`` over the ``CALIBRATION_FEATURES`` alone, every row of B, which ``shape`` turns into
    ``level(x) - log source`` and averages with the residual shapes (see ``TransferPrior``).
    """
    import lightgbm as lgb

    if not isinstance(pairs, Mapping) or not pairs:
        raise ModelError(
            "no platform pairs for a transfer prior: expected a mapping {name: (rows_A, "
            f"rows_B)}} with at least one pair, got {pairs!r}. Pass e.g. "
            "{'torch>ort_int8': ('cpu/torch/fp32', 'cpu/onnxruntime/int8')}."
        )
    shapes: dict[str, dict[str, dict[str, Any]]] = {}
    for name, sides in pairs.items():
        if not isinstance(sides, (tuple, list)) or len(sides) != 2:
            raise ModelError(
                f"transfer prior pair {name!r}: expected (rows_A, rows_B), got {sides!r}. "
                "Give two datasets per pair."
            )
        a, b = (load_dataset(s, ok_only=True, partial=True, name=f"{name} side {k}")
                for s, k in zip(sides, "AB"))  # fmt: skip
        used = [t for t in targets if t in a.columns and t in b.columns]
        keep = [*_JOIN, *used]
        m = a[keep].merge(b[[*CONFIG_COLUMNS, *used]], on=list(_JOIN), suffixes=("_a", "_b"))
        fitted = 0
        for t in used:
            ya, yb = m[f"{t}_a"].to_numpy(float), m[f"{t}_b"].to_numpy(float)
            ok = np.isfinite(ya) & np.isfinite(yb) & (ya > 0) & (yb > 0)
            if ok.sum() < MIN_PRIOR_CONFIGS:
                continue
            sub = m[ok].reset_index(drop=True)
            z = np.log(ya[ok])
            r = np.log(yb[ok]) - z
            g = _prior_design(z, calibration_features(model_inputs(sub), CALIBRATION_FEATURES))
            booster = lgb.LGBMRegressor(random_state=seed, n_jobs=1, verbose=-1,
                                        **PRIOR_SHAPE_PARAMS)  # fmt: skip
            booster.fit(g, r)
            spec = shapes.setdefault(t, {})[str(name)] = {
                "model": booster.booster_.model_to_string(),
                "n": int(ok.sum()),
            }
            if platform is not None and set(b["platform"].astype(str)) == {str(platform)}:
                yb_all = b[t].to_numpy(float)
                keep_b = np.isfinite(yb_all) & (yb_all > 0)
                level = lgb.LGBMRegressor(random_state=seed, n_jobs=1, verbose=-1,
                                          **PRIOR_SHAPE_PARAMS)  # fmt: skip
                feats_b = calibration_features(model_inputs(b[keep_b]), CALIBRATION_FEATURES)
                level.fit(feats_b, np.log(yb_all[keep_b]))
                spec["level_model"] = level.booster_.model_to_string()
                spec["level_n"] = int(keep_b.sum())
            fitted += 1
        if not fitted:
            raise ModelError(
                f"transfer prior pair {name!r}: expected at least {MIN_PRIOR_CONFIGS} configs "
                f"measured on both sides for one of {list(targets)}, got {len(m)} shared "
                "configs. Pair datasets that profiled the same configs."
            )
    return TransferPrior(shapes)


MODULE_RATIO_PARAMS = {
    "objective": "regression",
    "learning_rate": 0.05,
    "num_leaves": 15,
    "min_data_in_leaf": 5,
    "seed": 0,
    "deterministic": True,
    "num_threads": 1,
    "verbose": -1,
}
MODULE_RATIO_ROUNDS = 300


class ModuleRatio:
    """How this machine kind's module model differs from a config model, over the configs:
    ``log(module latency / source latency)`` learned by a small LightGBM on the knobs (log
    batch size, resolution, width, depth; is_bottleneck) and the log source latency.

    The module model (``load_default_module_model``: per-op costs measured on this machine's
    CPU kind) knows which shapes that kind runs fast; the config model (``source``) was
    trained on another machine. Their ratio is one more column of a calibration map
    (``log_module_ratio``), which the map weighs by how far it follows the measured rows.
    The module model traces every network (milliseconds a config), so the map reads the
    surrogate instead (microseconds; its agreement with the exact ratio: docs/accuracy.md).
    Saved as the booster's text (no pickle)."""

    what = "module model"  # what a calibration summary says the column comes from

    def __init__(self, booster_text: str) -> None:
        self.booster_text = booster_text
        self._booster = booster_from_text(
            booster_text, "module ratio", "Calibrate again (carb-nas calibrate)."
        )

    @staticmethod
    def inputs(X: pd.DataFrame, log_source_ms: np.ndarray) -> np.ndarray:
        """The surrogate's columns of config rows ``X`` (``model_inputs``) and their log
        source latency."""
        knobs = [
            np.log(pd.to_numeric(X[c]).to_numpy(float))
            for c in ("batch_size", "resolution", "width", "depth")
        ]
        bottleneck = (X["family"].astype(str).to_numpy() == "bottleneck").astype(float)
        return np.column_stack([*knobs, bottleneck, log_source_ms])

    def predict(self, X: pd.DataFrame, log_source_ms: np.ndarray) -> np.ndarray:
        """The surrogate's ``log(module / source)`` latency of each row of ``X``."""
        return np.asarray(self._booster.predict(self.inputs(X, log_source_ms)), dtype=float)

    def to_dict(self) -> dict[str, Any]:
        return {"booster": self.booster_text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModuleRatio:
        if data.get("kind") == "nodes":  # a node model's exact column (costmodel._nodes)
            from carb_nas.costmodel._nodes import NodeRatio

            return NodeRatio.from_reference(data)
        return cls(str(data["booster"]))


def fit_module_ratio(
    source_model: Any, module_model: Any, configs: pd.DataFrame, platform: Mapping[str, str]
) -> ModuleRatio:
    """A :class:`ModuleRatio` of ``module_model`` (a ``ModuleCostModel``) against
    ``source_model`` (a config ``CostModel``), fitted on ``configs`` (config rows of the
    source's space, a few hundred) at ``platform``'s runtime and precision (the source's
    own platform: the ratio is between two models of one platform)."""
    import lightgbm as lgb

    from carb_nas.costmodel._configs import ConfigModuleModel

    if len(configs) < MIN_PRIOR_CONFIGS:
        raise ModelError(
            f"too few configs for a module ratio: expected at least {MIN_PRIOR_CONFIGS}, got "
            f"{len(configs)}. Pass a sample of the source model's configs."
        )
    X = model_inputs(configs[list(CONFIG_COLUMNS)].assign(**platform))
    source = source_model.predict(X)["latency_ms"].to_numpy(float)
    module = ConfigModuleModel(module_model).predict(X)["latency_ms"].to_numpy(float)
    ok = np.isfinite(source) & np.isfinite(module) & (source > 0) & (module > 0)
    z = np.log(source[ok])
    data = lgb.Dataset(ModuleRatio.inputs(X[ok], z), np.log(module[ok] / source[ok]))
    booster = lgb.train(MODULE_RATIO_PARAMS, data, num_boost_round=MODULE_RATIO_ROUNDS)
    return ModuleRatio(booster.model_to_string())


#: ridge penalties (times n / 10) the features and prior maps choose from by LOO error; the
#: features map from ``MANY_ROWS`` rows on also the weaker ``LOW_PENALTIES`` (with fewer rows
#: the wider choice overfits the LOO selection; docs/accuracy.md)
FEATURE_PENALTIES = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
LOW_PENALTIES = (0.01, 0.03, 0.1)
MANY_ROWS = 20

SQUARE_ROWS = 30
FEATURE_MIN_ROWS = {
    "log_compute_intensity": MANY_ROWS,
    "log_flops_sq": SQUARE_ROWS,
    "is_batch_one": SQUARE_ROWS,
    "log_module_ratio": MANY_ROWS,
}
"""The rows a map needs before it may take each of the ``MANY_ROWS_FEATURES``."""


class CalibratedModel:
    """A source platform's cost model adapted to a target platform with a few measurements.

    Per target, the map works in log space on the residual ``r = log(y) - log(source)``
    (so "no change" is the zero map and every method shrinks toward it):

    - ``scale``: ``r = a`` -- one multiplicative factor (1 parameter);
    - ``loglinear``: ``r = a + b*log(source)`` -- a power law ``y = e^a * source^(1+b)``;
    - ``features``: ``r = a + w . [log source, log FLOPs, log batch, log resolution,
      log width, log depth, is_bottleneck]`` (standardized; log FLOPs when X has ``flops``;
      from ``FEATURE_MIN_ROWS`` rows also the ``MANY_ROWS_FEATURES``, log compute intensity,
      the square of log FLOPs and batch-of-one, and with ``module_ratio`` the module
      model's log ratio to the source, ``log_module_ratio``), ridge-penalized, penalty
      picked by leave-one-out error;
    - ``prior`` (needs ``prior``, a ``TransferPrior``): the prior's shape ``s(x)`` (learned
      on other platform pairs) as one more column of a ridge map, ``r = a + w . [...] +
      b*s(x)``, ``[...]`` either the ``features`` columns or only ``PRIOR_MAP_COLUMNS`` (log
      source, log FLOPs: fewer coefficients for N rows to pin where the shape already bends
      the map), the columns and penalty picked by leave-one-out error;
    - ``auto`` (default): the method with the lowest leave-one-out RMSE of ``log(y)`` on the
      calibration rows, per target, the ``prior`` map among them when a ``prior`` is given.

    Every map's correction is clipped to the range of ``r`` seen on the calibration rows:
    fitted on a handful of noisy points, a trend must not be extrapolated into factors it
    never observed (beyond the data the nearest observed correction holds).

    ``predict(X)`` takes the same ``X`` as the source ``CostModel`` (``model_inputs(frame)``)
    and returns a DataFrame of the calibrated targets. Prediction intervals are not
    calibrated: ask the source model for them only as a rough guide.

    The source model is asked what each config costs *on the source platform*: ``runtime``
    and ``precision`` of ``X`` are replaced by ``source_runtime``/``source_precision`` (by
    default read from ``source_model.platform_``, e.g. ``"cpu/torch/fp32"``) and the inputs
    rebuilt, so a PyTorch FP32 model can be calibrated to ONNX Runtime INT8 rows.

    ``keep_uncalibrated=True`` passes the source model's other targets through unchanged
    (e.g. ``energy_j`` on a machine without an energy meter), so the calibrated model predicts
    every target the source does and can stand in for it in a search. ``predict(X, alpha)``
    then also gives ``<t>_lower``/``<t>_upper``: the source model's conformal interval moved by
    the same correction and widened by the map's leave-one-out error (``loo_rmse_log``), a
    rough guide rather than a coverage guarantee.
    """

    def __init__(
        self,
        source_model: Any,
        method: str = "auto",
        source_runtime: str | None = None,
        source_precision: str | None = None,
        keep_uncalibrated: bool = False,
        prior: TransferPrior | None = None,
        module_ratio: ModuleRatio | None = None,
    ) -> None:
        self.source_model = source_model
        self.method = method
        self.source_runtime = source_runtime
        self.source_precision = source_precision
        self.keep_uncalibrated = keep_uncalibrated
        self.prior = prior
        self.module_ratio = module_ratio

    @property
    def schema_(self) -> Any:
        """The source model's input schema (the knobs and levels it was trained on)."""
        return getattr(self.source_model, "schema_", None)

    def _source_platform(self) -> dict[str, str]:
        platform = getattr(self.source_model, "platform_", None) or {}
        out = {}
        for col, given in (("runtime", self.source_runtime), ("precision", self.source_precision)):
            value = given or (platform.get(col) if isinstance(platform, Mapping) else None)
            if value:
                out[col] = str(value)
        return out

    def source_predict(self, X: pd.DataFrame, alpha: float | None = None) -> pd.DataFrame:
        override = self._source_platform()
        if override and all(c in X.columns for c in CONFIG_COLUMNS):
            differs = any((X[c].astype(str) != v).any() for c, v in override.items())
            if differs:
                X = model_inputs(X.assign(**override))
        if alpha is None:
            return self.source_model.predict(X)
        return self.source_model.predict(X, alpha=alpha)

    def fit(self, X: pd.DataFrame, Y: pd.DataFrame) -> CalibratedModel:
        if self.method not in CALIBRATION_METHODS:
            raise ModelError(
                f"unknown calibration method: expected one of {list(CALIBRATION_METHODS)}, got "
                f"{self.method!r}. Pick one of those."
            )
        if self.prior is not None and not isinstance(self.prior, TransferPrior):
            raise ModelError(
                f"invalid calibration prior: expected a TransferPrior (fit_transfer_prior) or "
                f"None, got {type(self.prior).__name__}. Build one with fit_transfer_prior."
            )
        if self.module_ratio is not None and not isinstance(self.module_ratio, ModuleRatio):
            raise ModelError(
                f"invalid module ratio: expected a ModuleRatio (fit_module_ratio) or None, got "
                f"{type(self.module_ratio).__name__}. Build one with fit_module_ratio."
            )
        if self.method == "prior" and self.prior is None:
            raise ModelError(
                "calibration method 'prior' without a prior: expected prior=TransferPrior "
                "(fit_transfer_prior on other platform pairs), got None. Pass a prior or "
                "use method 'auto'."
            )
        source_targets = list(getattr(self.source_model, "targets_", []) or [])
        targets = [t for t in Y.columns if t in source_targets and Y[t].notna().any()]
        if not targets:
            raise ModelError(
                f"nothing to calibrate: expected target rows for at least one of the source "
                f"model's targets {source_targets}, got columns {list(Y.columns)} with values. "
                "Measure a target the source model predicts."
            )
        base = self.source_predict(X)
        self.feature_names_ = calibration_feature_names(X, many_rows=True)
        if self.module_ratio is not None and "latency_ms" in base:
            self.feature_names_.append("log_module_ratio")
        self.log_flops_range_: list[float] | None = None
        if "log_flops_sq" in self.feature_names_:
            v = _log_flops(X)
            self.log_flops_range_ = [float(v.min()), float(v.max())]
        feats = self._features(X, base)
        self.maps_: dict[str, dict[str, Any]] = {}
        for t in targets:
            y = Y[t].to_numpy(float)
            s = base[t].to_numpy(float)
            ok = np.isfinite(y) & (y > 0) & np.isfinite(s)
            if ok.sum() < 1:
                raise ModelError(
                    f"cannot calibrate {t}: expected at least 1 positive measurement, got "
                    f"{int(ok.sum())}. Measure more target rows."
                )
            z = np.log(np.maximum(s[ok], 1e-12))
            shape = self._prior_shape(t, z, X[ok])
            self.maps_[t] = self._fit_target(z, np.log(y[ok]), feats[ok], shape)
        self.calibrated_targets_ = targets
        self.targets_ = self._all_targets(source_targets)
        self.n_calibration_rows_ = int(len(Y))
        return self

    def _features(self, X: pd.DataFrame, base: pd.DataFrame) -> np.ndarray:
        """The map's columns of ``X`` (``feature_names_``): the module ratio, last, from the
        source's latency prediction ``base``."""
        names = [n for n in self.feature_names_ if n != "log_module_ratio"]
        feats = calibration_features(X, names, self.log_flops_range_)
        if len(names) == len(self.feature_names_):
            return feats
        if self.module_ratio is None:
            raise ModelError(
                "calibration map uses the module ratio: expected the ModuleRatio it was fitted "
                "with, got none. Load the calibration with it (to_dict keeps it)."
            )
        z = np.log(np.maximum(base["latency_ms"].to_numpy(float), 1e-12))
        return np.column_stack([feats, self.module_ratio.predict(X, z)])

    def _all_targets(self, source_targets: Sequence[str]) -> list[str]:
        if not self.keep_uncalibrated:
            return list(self.maps_)
        return list(source_targets)

    def _prior_shape(self, target: str, z: np.ndarray, X: pd.DataFrame) -> np.ndarray | None:
        """The prior's shape at these rows (None without a prior for ``target``)."""
        if self.prior is None:
            return None
        if "flops" not in X.columns:
            raise ModelError(
                "calibration with a transfer prior: expected X with the architecture features "
                f"(flops, ...), got columns {list(map(str, X.columns))[:8]}. Pass "
                "model_inputs(frame)."
            )
        return self.prior.shape(
            target, _prior_design(z, calibration_features(X, CALIBRATION_FEATURES))
        )

    def _prior_columns(self) -> list[int]:
        """Positions in ``[log source, *feature_names_]`` of the prior map's linear columns."""
        names = ["log_source", *self.feature_names_]
        return [names.index(c) for c in PRIOR_MAP_COLUMNS if c in names]

    def _fit_target(
        self, z: np.ndarray, logy: np.ndarray, feats: np.ndarray, shape: np.ndarray | None = None
    ) -> dict[str, Any]:
        n = len(z)
        r = logy - z
        full = np.column_stack([z, feats])
        mean, std = full.mean(axis=0), full.std(axis=0)
        std[std == 0] = 1.0
        candidates: dict[str, tuple[dict[str, Any], float]] = {}
        many = n >= MANY_ROWS
        penalties = (LOW_PENALTIES if many else ()) + FEATURE_PENALTIES
        # the linear columns of the features map (and the prior map's widest choice): each
        # of the MANY_ROWS_FEATURES only from its FEATURE_MIN_ROWS on, an indicator only
        # with MIN_LEVEL_ROWS rows on each side
        linear = [0] + [
            1 + i for i, name in enumerate(self.feature_names_)
            if n >= FEATURE_MIN_ROWS.get(name, 0)
            and (name != "is_batch_one" or _both_levels(feats[:, i]))
        ]  # fmt: skip
        candidates.update(log_maps(z, r, centre=(mean[0], std[0])))
        if n >= 4:
            design = np.column_stack([np.ones(n), ((full - mean) / std)[:, linear]])
            fits: list[tuple[dict[str, Any], float]] = []
            for lam in penalties:
                coef, loo = penalized_fit(design, r, lam * n / 10)
                fits.append(
                    (
                        {
                            "method": "features",
                            "intercept": float(coef[0]),
                            "columns": linear,
                            "weights": [float(c) for c in coef[1:]],
                            "mean": mean.tolist(),
                            "std": std.tolist(),
                            "penalty": lam,
                        },
                        float(np.sqrt(np.mean(loo**2))),
                    )
                )
            # the lowest LOO error; on a tie min() keeps the smaller penalty (the first)
            candidates["features"] = min(fits, key=lambda fit: fit[1])
        if n >= 4 and shape is not None:
            # the prior's shape as one more (unstandardized, penalized) column: the N rows
            # weigh it against the linear terms instead of taking it as given. Beside it,
            # either only PRIOR_MAP_COLUMNS (log source and log FLOPs: the shape already bends
            # the map by batch, resolution, width and depth, and few rows pin 4 coefficients
            # better than 9) or every column, whichever (with its penalty) has the lower LOO
            # error
            fits = []
            for cols, lam in itertools.product(
                (self._prior_columns(), linear),
                FEATURE_PENALTIES,
            ):
                design = np.column_stack([np.ones(n), ((full - mean) / std)[:, cols], shape])
                coef, loo = penalized_fit(design, r, lam * n / 10)
                fits.append(
                    (
                        {
                            "method": "prior",
                            "intercept": float(coef[0]),
                            "columns": cols,
                            "weights": [float(c) for c in coef[1:-1]],
                            "prior_weight": float(coef[-1]),
                            "mean": mean.tolist(),
                            "std": std.tolist(),
                            "penalty": lam,
                        },
                        float(np.sqrt(np.mean(loo**2))),
                    )
                )
            candidates["prior"] = min(fits, key=lambda fit: fit[1])
        if self.method == "auto":
            name = min(candidates, key=lambda k: candidates[k][1])
        elif self.method in candidates:
            name = self.method
        elif self.method == "prior" and "features" in candidates:  # no shape for this target
            name = "features"
        else:  # too few rows for the asked method: fall back to the one-parameter map
            name = "scale"
        spec, err = candidates[name]
        # corrections stay inside the range seen on the calibration rows: a map fitted on a
        # handful of (noisy) points must not extrapolate a trend into factors it never
        # observed; beyond the data the nearest observed correction holds (like isotonic
        # regression's flat ends)
        return spec | {
            "clip": [float(r.min()), float(r.max())],
            "loo_rmse_log": err,
            "n": int(n),
            "candidates_loo_rmse_log": {k: v[1] for k, v in candidates.items()},
        }

    def predict(self, X: pd.DataFrame, alpha: float | None = None) -> pd.DataFrame:
        if not hasattr(self, "maps_"):
            raise ModelError(
                "calibrated model not fitted: expected fit() or calibrate() before predict(), "
                "got an unfitted CalibratedModel. Call calibrate(source_model, rows) first."
            )
        base = self.source_predict(X, alpha)
        feats = self._features(X, base)
        out = {}
        for t in self.targets_:
            if t in self.maps_:
                continue
            out[t] = base[t].to_numpy(float)  # passed through (keep_uncalibrated)
            if alpha is not None:
                for bound in ("lower", "upper"):
                    out[f"{t}_{bound}"] = base[f"{t}_{bound}"].to_numpy(float)
        for t, spec in self.maps_.items():
            z = np.log(np.maximum(base[t].to_numpy(float), 1e-12))
            if spec["method"] in ("scale", "loglinear"):
                r = log_map_correction(spec, z)
            else:  # features, prior
                r = np.full(len(z), spec["intercept"])
                full = (np.column_stack([z, feats]) - np.asarray(spec["mean"])) / np.asarray(
                    spec["std"]
                )
                # a map names its columns (one saved before them used every column)
                cols = spec.get("columns", list(range(full.shape[1])))
                r = r + full[:, cols] @ np.asarray(spec["weights"])
                if spec["method"] == "prior":
                    shape = self._prior_shape(t, z, X)
                    if shape is None:
                        raise ModelError(
                            f"calibration map of {t} uses a transfer prior: expected the "
                            "prior it was fitted with, got none for this target. Load the "
                            "calibration with its prior (to_dict keeps it)."
                        )
                    r = r + spec["prior_weight"] * shape
            r = np.clip(r, *spec["clip"])  # see _fit_target
            out[t] = np.exp(z + r)
            if alpha is not None:
                loo = spec.get("loo_rmse_log")
                widen = float(loo) if loo is not None and np.isfinite(loo) else 0.0
                for bound, sign in (("lower", -1.0), ("upper", 1.0)):
                    edge = base[f"{t}_{bound}"].to_numpy(float)
                    with np.errstate(over="ignore"):
                        out[f"{t}_{bound}"] = edge * np.exp(r + sign * widen)
        order = [c for t in self.targets_ for c in (t, f"{t}_lower", f"{t}_upper") if c in out]
        return pd.DataFrame({c: out[c] for c in order}, index=X.index)

    def to_dict(self) -> dict[str, Any]:
        """The fitted maps as plain JSON-ready data (the source model is saved separately)."""
        return jsonable(
            {
                "method": self.method,
                "source_runtime": self.source_runtime,
                "source_precision": self.source_precision,
                "targets": list(self.targets_),
                "keep_uncalibrated": self.keep_uncalibrated,
                "feature_names": list(self.feature_names_),
                "log_flops_range": self.log_flops_range_,
                "n_calibration_rows": self.n_calibration_rows_,
                "maps": self.maps_,
                "prior": None if self.prior is None else self.prior.to_dict(),
                "module_ratio": None if self.module_ratio is None else self.module_ratio.to_dict(),
            }
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source_model: Any) -> CalibratedModel:
        model = cls(
            source_model,
            method=data["method"],
            source_runtime=data.get("source_runtime"),
            source_precision=data.get("source_precision"),
            keep_uncalibrated=bool(data.get("keep_uncalibrated", False)),
            prior=None if data.get("prior") is None else TransferPrior.from_dict(data["prior"]),
            # optional field: calibrations without the module-ratio column omit it
            module_ratio=None
            if data.get("module_ratio") is None
            else ModuleRatio.from_dict(data["module_ratio"]),
        )
        model.maps_ = {t: dict(m) for t, m in data["maps"].items()}
        model.calibrated_targets_ = list(model.maps_)
        model.targets_ = list(data["targets"])
        model.feature_names_ = list(data["feature_names"])
        # optional field: maps without the log_flops_sq column carry no range
        model.log_flops_range_ = data.get("log_flops_range")
        model.n_calibration_rows_ = int(data["n_calibration_rows"])
        return model


def calibrate(
    source_model: Any,
    target_rows: pd.DataFrame,
    method: str = "auto",
    source_runtime: str | None = None,
    source_precision: str | None = None,
    keep_uncalibrated: bool = False,
    prior: TransferPrior | None = None,
    module_ratio: ModuleRatio | None = None,
) -> CalibratedModel:
    """Adapt ``source_model`` (a fitted CostModel) to a new platform from a few measured rows.

    ``target_rows`` holds the config columns and the measured targets of the new platform
    (e.g. 10-100 rows of a dataset). Returns a ``CalibratedModel`` whose
    ``predict(model_inputs(frame))`` gives that platform's costs. See ``CalibratedModel``
    for the methods and for ``source_runtime``/``source_precision``; ``prior`` (a
    ``TransferPrior`` learned on other platform pairs, see ``fit_transfer_prior``) adds the
    ``prior`` map; ``module_ratio`` (a ``ModuleRatio``, see ``fit_module_ratio``) adds the
    column ``log_module_ratio`` to the ``features`` and ``prior`` maps from ``MANY_ROWS``
    rows on.
    """
    rows = load_dataset(target_rows, ok_only=True, partial=True, name="target rows")
    targets = [t for t in TARGETS if t in rows.columns and rows[t].notna().any()]
    model = CalibratedModel(
        source_model,
        method,
        source_runtime,
        source_precision,
        keep_uncalibrated,
        prior,
        module_ratio,
    )
    return model.fit(model_inputs(rows), rows[targets])
