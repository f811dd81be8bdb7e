"""``transfer``: how well platform A's costs predict platform B's, and few-shot calibration."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._json import jsonable
from carb_nas.costmodel import (
    MIN_TRAIN_ROWS,
    TELEMETRY_COLUMNS,
    CalibratedModel,
    CostModel,
    model_inputs,
)
from carb_nas.costmodel.calibration import (
    CALIBRATION_METHODS,
    TransferPrior,
    calibration_features,
    fit_transfer_prior,
    informative_rows,
    log_map_correction,
    log_maps,
    penalized_fit,
)
from carb_nas.datasets import TARGETS, machines
from carb_nas.errors import InputFileError, ModelError
from carb_nas.reports._characterize import aggregate, variant_parts
from carb_nas.reports._load import (
    JOIN_COLUMNS,
    batch_tier,
    load_measurements,
    same_dataset,
    tier_order,
)
from carb_nas.reports._stats import linear_fit, mdape, r2, spearman

__all__ = [
    "transfer",
    "transfer_frames",
    "published_transfer",
    "FEW_SHOT_SIZES",
    "MIN_EVALUATION_ROWS",
    "PRIOR_PAIRS",
    "prior_pairs",
]

FEW_SHOT_SIZES = (10, 25, 50, 100)
MIN_EVALUATION_ROWS = 11
"""Rows of B each few-shot draw leaves out for evaluation at least (N + 11 usable rows)."""

PRIOR_PAIRS = (
    ("cpu/torch/fp32", "cpu/onnxruntime/fp32"),
    ("cpu/torch/fp32", "cpu/onnxruntime/int8"),
    ("cpu/torch/fp32/zen4", "cpu/onnxruntime/fp32/zen4"),
    ("cpu/torch/fp32/zoo", "cpu/openvino/fp32"),
    ("cpu/torch/fp32/zoo", "cpu/openvino/int8"),
)
"""The shipped platform pairs (A, B) a transfer prior can be learned on (``--prior auto``)."""


def _pair_name(a: str, b: str) -> str:
    return f"{a}:{b}"


def prior_pairs(
    prior: str, dataset_b: Any, variant_b: str, rows_b: pd.DataFrame | None = None
) -> dict[str, tuple[Any, Any]]:
    """The platform pairs ``--prior`` names for a transfer to B (variant ``variant_b``).

    ``"none"``: no prior. ``"auto"``: the shipped pairs (``PRIOR_PAIRS``) whose B runs B's
    runtime on B's kind of device and differs from B in one respect only: another precision
    on B's machine, or (given ``rows_b``) B's precision on another machine
    (``cpu/onnxruntime/fp32/zen4`` for the shipped ``cpu/onnxruntime/fp32``). Measured
    (docs/costmodel.md): a pair differing in both, or another runtime (the OpenVINO zoo
    pairs), did not help. Otherwise comma-separated ``A:B`` dataset pairs. The prior must
    not see the target: a pair whose B is B's dataset, or (given ``rows_b``, B's rows) holds
    any of B's measurements (a config with the same measured latency), is refused; without
    ``rows_b`` a pair of B's platform is refused.
    """
    if prior == "none":
        return {}
    device_b, runtime_b, precision_b = variant_parts(variant_b)
    if prior == "auto":
        out = {}
        for pa, pb in PRIOR_PAIRS:
            device, runtime, precision = pb.split("/")[:3]
            if (device, runtime) != (device_b, runtime_b) or same_dataset(pb, dataset_b):
                continue
            if rows_b is None:  # B's machine unknown: another precision, as measured to help
                keep = precision != precision_b
            else:
                theirs = load_measurements(pb)
                same_machine = machines(theirs) == machines(rows_b)
                keep = (precision != precision_b and same_machine) or (
                    precision == precision_b and not same_machine and _other_rows(theirs, rows_b)
                )
            if keep:
                out[_pair_name(pa, pb)] = (pa, pb)
        return out
    out = {}
    for item in str(prior).split(","):
        sides = item.strip().split(":")
        if len(sides) != 2 or not all(sides):
            raise ModelError(
                f"invalid --prior: expected 'auto', 'none' or comma-separated A:B dataset "
                f"pairs such as cpu/torch/fp32:cpu/onnxruntime/int8, got {item!r}. Fix the "
                "pair."
            )
        pb = load_measurements(sides[1])
        seen = same_dataset(sides[1], dataset_b) or (
            _single_variant(pb) == variant_b and not _other_rows(pb, rows_b)
        )
        if seen:
            raise ModelError(
                f"invalid --prior pair {item!r}: expected pairs whose B is neither B's dataset "
                f"nor holds B's measurements ({variant_b}), got one whose B is "
                f"{_single_variant(pb)}{' and holds rows of B' if rows_b is not None else ''}. "
                "A prior learned on the target would not be a prior; leave that pair out (B's "
                "platform measured on another machine is fine)."
            )
        out[_pair_name(*sides)] = (sides[0], sides[1])
    return out


def _other_rows(pair_b: Any, rows_b: pd.DataFrame | None) -> bool:
    """True when the pair's B rows share no measurement with B's rows (a config with the
    same measured latency); False without B's rows (nothing to tell them apart)."""
    if rows_b is None:
        return False
    theirs = pair_b if isinstance(pair_b, pd.DataFrame) else load_measurements(pair_b)
    marks = [*JOIN_COLUMNS, "latency_ms"]
    if not set(marks) <= set(theirs.columns) & set(rows_b.columns):
        return False
    shared = theirs[marks].astype(str).merge(rows_b[marks].astype(str), on=marks)
    return len(shared) == 0


def _single_variant(frame: pd.DataFrame) -> str:
    variants = sorted(frame["variant"].unique())
    if len(variants) != 1:
        raise InputFileError(
            f"{frame.attrs['source']}: mixed platforms: expected one device/runtime/precision "
            f"per transfer dataset, got {variants}. Split the dataset by its 'platform' column."
        )
    return variants[0]


def _summary(runs: Sequence[tuple[float, float]]) -> dict[str, Any]:
    r2 = np.array([r for r, _ in runs], float)
    mdape = np.array([m for _, m in runs], float)
    any_ = np.isfinite(r2).any()
    return {
        "r2_mean": float(np.nanmean(r2)) if any_ else math.nan,
        "r2_std": float(np.nanstd(r2)) if any_ else math.nan,
        "mdape_pct_mean": float(np.nanmean(mdape)) if any_ else math.nan,
        "r2_runs": r2.tolist(),
    }


def _linear_baseline(X_train: pd.DataFrame, y: np.ndarray, X_test: pd.DataFrame) -> np.ndarray:
    """Ridge regression of log(y) on log FLOPs and the log config knobs (LOO-picked penalty):
    the simplest model one could fit to N target rows alone."""

    def feats(X: pd.DataFrame) -> np.ndarray:
        flops = np.log(np.maximum(pd.to_numeric(X["flops"]).to_numpy(float), 1.0))
        return np.column_stack([flops, calibration_features(X)])

    return _ridge_log_fit(feats(X_train), y, feats(X_test))


def _ridge_log_fit(F: np.ndarray, y: np.ndarray, Ft: np.ndarray) -> np.ndarray:
    """Ridge regression of log(y) on the standardized columns ``F`` (intercept unpenalized),
    the penalty picked by leave-one-out error, predicted at ``Ft`` in y's units."""
    mean, std = F.mean(axis=0), F.std(axis=0)
    std[std == 0] = 1.0
    design = np.column_stack([np.ones(len(F)), (F - mean) / std])
    logy = np.log(y)
    fits: list[tuple[np.ndarray, float]] = []
    for lam in (0.01, 0.1, 1.0, 10.0, 100.0):
        coef, loo = penalized_fit(design, logy, lam)
        fits.append((coef, float(np.mean(loo**2))))
    # the lowest LOO error; on a tie min() keeps the smaller penalty (the first)
    best_coef, _ = min(fits, key=lambda fit: fit[1])
    return np.exp(np.column_stack([np.ones(len(Ft)), (Ft - mean) / std]) @ best_coef)


def _few_shot(
    a: pd.DataFrame,
    b: pd.DataFrame,
    targets: Sequence[str],
    sizes: Sequence[int],
    repeats: int,
    seed: int,
    method: str,
    source_model: Any,
    preset: str,
    progress: Callable[[str], None] | None,
    n_jobs: int | None,
    pairs: Mapping[str, tuple[Any, Any]],
) -> dict[str, Any]:
    say = progress or (lambda _msg: None)
    notes: list[str] = []
    _, runtime_a, precision_a = variant_parts(a["variant"].iloc[0])
    # GPU rows carry the clocks and temperature seen while measuring: a config to predict has
    # none, so the models trained here read the architecture columns only (as default models)
    arch_only = bool(set(TELEMETRY_COLUMNS) & (set(a.columns) | set(b.columns)))
    if source_model is None:
        a_targets = [t for t in targets if a[t].notna().any()]
        train = a.dropna(subset=a_targets)
        say(f"training the source model ({preset} preset) on {len(train)} rows of A")
        source_model = CostModel(
            preset=preset, n_jobs=n_jobs, random_state=seed, architecture_only=arch_only
        ).fit(model_inputs(train), train[a_targets], platform=a["variant"].iloc[0])
        source_desc = f"CostModel(preset={preset!r}) trained on all {len(train)} ok rows of A"
    else:
        source_desc = "given source model"
    targets = [t for t in targets if t in list(source_model.targets_)]
    pool = b.dropna(subset=targets).reset_index(drop=True)
    X_pool = model_inputs(pool)
    probe = CalibratedModel(source_model, method, runtime_a, precision_a)
    zero = probe.source_predict(X_pool)
    prior: TransferPrior | None = None
    if pairs:
        say(f"learning the transfer prior on {len(pairs)} other platform pair(s)")
        # B's platform: a pair that measured it on another machine also gives its level
        prior = fit_transfer_prior(pairs, targets, seed=seed, platform=b["variant"].iloc[0])
        levels = prior.level_pairs
        notes.append(
            f"transfer prior learned on {', '.join(prior.pairs)} (targets "
            f"{sorted(prior.shapes)}"
            + (
                f"; B's level from {', '.join(levels)}, B's platform measured there"
                if levels
                else ""
            )
            + "); 'calibrated without prior' is the same draw without it"
        )
    kinds = ("source_only", "calibrated", "target_only", "target_only_linear") + (
        ("calibrated_without_prior",) if prior is not None else ()
    )
    runs: dict[str, Any] = {}
    for n in sizes:  # transfer() checked n + MIN_EVALUATION_ROWS <= len(pool)
        say(f"few-shot N={n}: {repeats} draws")
        rec: dict[str, dict[str, list[tuple[float, float]]]] = {
            k: {t: [] for t in targets} for k in kinds
        }
        methods: dict[str, int] = {}
        errors: list[str] = []
        if n < MIN_TRAIN_ROWS:
            errors.append(f"CostModel needs at least {MIN_TRAIN_ROWS} rows to train; N={n}")
        for draw in range(seed, seed + repeats):
            # informative choice: the N rows that pin down the calibration map's
            # coefficients (carb_nas.costmodel.calibration.informative_rows), one start per seed
            spread_by = "latency_ms" if "latency_ms" in targets else targets[0]
            idx = informative_rows(X_pool, zero[spread_by].to_numpy(float), n, seed=draw)
            test = np.setdiff1d(np.arange(len(pool)), idx)
            train_rows, X_train, X_test = pool.iloc[idx], X_pool.iloc[idx], X_pool.iloc[test]
            cal = CalibratedModel(source_model, method, runtime_a, precision_a, prior=prior)
            pred_cal = cal.fit(X_train, train_rows[targets]).predict(X_test)
            for t in targets:
                methods[cal.maps_[t]["method"]] = methods.get(cal.maps_[t]["method"], 0) + 1
            pred_plain = None
            if prior is not None:
                plain = CalibratedModel(source_model, method, runtime_a, precision_a)
                pred_plain = plain.fit(X_train, train_rows[targets]).predict(X_test)
            pred_own = None
            if n >= MIN_TRAIN_ROWS:
                try:
                    own = CostModel(
                        preset=preset,
                        n_jobs=n_jobs,
                        validation_fraction=0.0,
                        calibration_fraction=0.0,
                        random_state=draw,
                        architecture_only=arch_only,
                        # N rows of a multi-family pool miss families: theirs count as missing
                        handle_unknown="ignore",
                    )
                    pred_own = own.fit(X_train, train_rows[targets]).predict(X_test)
                except ModelError as e:
                    errors.append(f"seed {draw}: {e}")
            for t in targets:
                y = pool[t].to_numpy(float)[test]
                preds = {
                    "calibrated": pred_cal[t].to_numpy(float),
                    "source_only": zero[t].to_numpy(float)[test],
                    "target_only": None if pred_own is None else pred_own[t].to_numpy(float),
                    "target_only_linear": _linear_baseline(
                        X_train, train_rows[t].to_numpy(float), X_test
                    ),
                }
                if pred_plain is not None:
                    preds["calibrated_without_prior"] = pred_plain[t].to_numpy(float)
                for kind, p in preds.items():
                    rec[kind][t].append(
                        (math.nan, math.nan) if p is None else (r2(y, p), mdape(y, p))
                    )
        runs[str(n)] = {
            kind: {t: _summary(v) for t, v in per.items()} for kind, per in rec.items()
        } | {"methods_chosen": methods, "target_only_errors": errors[:3]}
    return {
        "sizes": [int(n) for n in sizes],
        "seeds": int(repeats),
        "method": method,
        "source_model": source_desc,
        "source_platform": f"{runtime_a}/{precision_a}",
        "prior_pairs": [] if prior is None else prior.pairs,
        "prior_level_pairs": [] if prior is None else prior.level_pairs,
        "selection": "informative_rows: greedy D-optimal design for the features map (log "
        "source prediction and CALIBRATION_FEATURES), a seeded random start per draw",
        "evaluation": "R2 on every usable row of B not drawn for calibration",
        "targets": list(targets),
        "runs": runs,
        "notes": notes,
    }


def _side_meta(frame: pd.DataFrame, variant: Any) -> dict[str, Any]:
    """What a transfer report records about one of its two datasets."""
    keys = ("ok_rows", "rows", "peak_mem_methods", "latency_cv_median")
    return {
        "source": frame.attrs["source"],
        "variant": variant,
        **{k: frame.attrs[k] for k in keys},
    }


def transfer(
    dataset_a: str | Path | pd.DataFrame,
    dataset_b: str | Path | pd.DataFrame,
    *,
    few_shot: Sequence[int] | None = FEW_SHOT_SIZES,
    repeats: int = 5,
    seed: int = 0,
    method: str = "auto",
    source_model: Any = None,
    preset: str = "fast",
    top_k: int = 100,
    progress: Callable[[str], None] | None = None,
    n_jobs: int | None = None,
    prior: str = "auto",
) -> dict[str, Any]:
    """Compare platform B with platform A on the configs both measured.

    Returns a JSON-ready dict with one entry per shared target, ``{"slope", "intercept",
    "r2", "spearman", "top100_overlap", ...}`` (fit ``B = slope * A + intercept``; top-k
    overlap as a fraction of k, k = min(top_k, shared configs)), plus ``"meta"`` and,
    unless ``few_shot`` is empty/None, ``"few_shot"`` (see ``carb_nas.costmodel.calibrate``): the
    source model (``source_model``, or a ``CostModel(preset)`` trained on all of A) adapted
    with N random rows of B, ``repeats`` draws per N (seeds ``seed``, ``seed + 1``, ...;
    recorded as ``few_shot["seeds"]``), against a ``CostModel(preset)`` trained on the N rows
    alone; R2 on the rows of B not drawn. Every N must leave ``MIN_EVALUATION_ROWS`` usable
    rows of B. ``n_jobs``: threads per learner (None: 1). ``prior``: the platform pairs the
    calibration's ``TransferPrior`` is learned on (``prior_pairs``: ``"auto"``, ``"none"`` or
    ``A:B,...``); with one, ``few_shot`` also reports ``calibrated_without_prior``.
    """
    return transfer_frames(
        dataset_a,
        dataset_b,
        few_shot=few_shot,
        repeats=repeats,
        seed=seed,
        method=method,
        source_model=source_model,
        preset=preset,
        top_k=top_k,
        progress=progress,
        n_jobs=n_jobs,
        prior=prior,
    )[0]


def transfer_frames(
    dataset_a: str | Path | pd.DataFrame,
    dataset_b: str | Path | pd.DataFrame,
    *,
    few_shot: Sequence[int] | None = FEW_SHOT_SIZES,
    repeats: int = 5,
    seed: int = 0,
    method: str = "auto",
    source_model: Any = None,
    preset: str = "fast",
    top_k: int = 100,
    progress: Callable[[str], None] | None = None,
    n_jobs: int | None = None,
    prior: str = "auto",
) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """``transfer`` and the two loaded datasets (for plotting without reading them again)."""
    if method not in CALIBRATION_METHODS:
        raise ModelError(
            f"unknown calibration method: expected one of {list(CALIBRATION_METHODS)}, got "
            f"{method!r}. Pick one of those."
        )
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 1:
        raise ModelError(
            f"invalid repeats: expected a whole number >= 1 of random draws per few-shot size, "
            f"got {repeats!r}. Use --repeats 1 or more."
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ModelError(
            f"invalid seed: expected a whole number >= 0, got {seed!r}. Use --seed 0 or more."
        )
    sizes = sorted({int(n) for n in few_shot}) if few_shot else []
    if sizes and sizes[0] < 1:
        raise ModelError(
            f"invalid few-shot size: expected sizes >= 1, got {sizes}. Use e.g. 10,25,50,100."
        )
    if not isinstance(prior, str) or not prior.strip():
        raise ModelError(
            f"invalid prior: expected 'auto', 'none' or A:B dataset pairs, got {prior!r}. "
            "Use --prior auto."
        )
    a, b = load_measurements(dataset_a), load_measurements(dataset_b)
    va, vb = _single_variant(a), _single_variant(b)
    pairs = prior_pairs(prior, dataset_b, vb, b) if sizes else {}
    targets = [t for t in TARGETS if t in a.attrs["targets"] and t in b.attrs["targets"]]
    if not targets:
        raise InputFileError(
            f"no common target: expected both datasets to measure one of {list(TARGETS)}, got "
            f"A: {a.attrs['targets']}, B: {b.attrs['targets']}. Compare datasets that share a "
            "target."
        )
    shared = aggregate(a, targets).merge(
        aggregate(b, targets), on=list(JOIN_COLUMNS), suffixes=("_a", "_b")
    )
    if len(shared) == 0:
        raise InputFileError(
            f"no shared configs: expected configs (family, depth, width, resolution, "
            f"batch_size) measured in both {a.attrs['source']} ({len(a)} ok rows) and "
            f"{b.attrs['source']} ({len(b)} ok rows), got none in common. Profile the same "
            "configs on both platforms (e.g. the same `carb-nas space sample` file)."
        )
    result: dict[str, Any] = {}
    for t in targets:
        sub = shared[[*JOIN_COLUMNS, f"{t}_a", f"{t}_b"]].dropna()
        if len(sub) < 3:
            continue
        x, y = sub[f"{t}_a"].to_numpy(float), sub[f"{t}_b"].to_numpy(float)
        slope, intercept, fit_r2 = linear_fit(x, y)
        k = min(top_k, len(sub))
        top_a = set(np.argsort(x, kind="stable")[:k])
        top_b = set(np.argsort(y, kind="stable")[:k])
        pos = (x > 0) & (y > 0)
        result[t] = {
            "slope": slope,
            "intercept": intercept,
            "r2": fit_r2,
            "spearman": spearman(x, y),
            "top100_overlap": len(top_a & top_b) / k,
            "top_k": int(k),
            "n": int(len(sub)),
            "ratio_geomean": float(np.exp(np.mean(np.log(y[pos] / x[pos]))))
            if pos.any()
            else math.nan,
            "loglog_slope": linear_fit(np.log(x[pos]), np.log(y[pos]))[0],
            "by_tier": {
                tier: {"slope": s, "intercept": i, "r2": r, "n": int(m.sum())}
                for tier in tier_order(batch_tier(sub["batch_size"]))
                for m in [batch_tier(sub["batch_size"]) == tier]
                for s, i, r in [linear_fit(x[m], y[m])]
            },
        }
    if not result:
        raise InputFileError(
            f"too few shared measurements: expected at least 3 shared configs with values for "
            f"one of {targets}, got {len(shared)} shared configs. Measure more shared configs."
        )
    result["meta"] = {
        "kind": "transfer",
        "a": _side_meta(a, va),
        "b": _side_meta(b, vb),
        "shared_configs": int(len(shared)),
        "join_columns": list(JOIN_COLUMNS),
        "targets": [t for t in targets if t in result],
        "notes": a.attrs["notes"] + b.attrs["notes"],
    }
    if "peak_mem_mb" in result and a.attrs["peak_mem_methods"] != b.attrs["peak_mem_methods"]:
        result["meta"]["notes"].append(
            f"peak_mem_mb is measured differently on A ({'; '.join(a.attrs['peak_mem_methods'])})"
            f" and B ({'; '.join(b.attrs['peak_mem_methods'])}): the memory fit includes the "
            "difference in what each method counts"
        )
    if same_dataset(dataset_a, dataset_b):
        result["meta"]["notes"].append(
            "A and B are the same dataset: every fit is trivially perfect; compare two "
            "platforms' datasets"
        )
    if sizes:
        fs_targets = [
            t
            for t in result["meta"]["targets"]
            if source_model is None or t in list(source_model.targets_)
        ]
        usable = len(b.dropna(subset=fs_targets))
        largest = usable - MIN_EVALUATION_ROWS
        if sizes[-1] > largest:
            raise ModelError(
                f"few-shot size too large: expected sizes <= {max(largest, 0)} ({b.attrs['source']}"
                f" has {usable} usable rows and each draw keeps {MIN_EVALUATION_ROWS} to "
                f"evaluate on), got {sizes[-1]}. Use smaller --few-shot sizes, or 'none'."
            )
        result["few_shot"] = _few_shot(
            a,
            b,
            fs_targets,
            sizes,
            repeats,
            seed,
            method,
            source_model,
            preset,
            progress,
            n_jobs,
            pairs,
        )
    return jsonable(result), a, b


# -- published platforms (timm's benchmarks; carb_nas.published) ------------------------------
PUBLISHED_TARGET = "latency_ms_per_image"


#: ridge penalties of the published few-shot ``loglinear`` map's exponent (log source centred,
#: not standardized): the published files carry no config knobs, so only the two maps of
#: ``carb_nas.costmodel.log_maps`` that need nothing but the source prediction apply
PUBLISHED_MAP_PENALTIES = (0.1, 1.0, 10.0)


def _published_calibration(log_src: np.ndarray, log_y: np.ndarray) -> dict[str, Any]:
    """Few-shot map of log(target) on log(source prediction): ``scale`` or ``loglinear``
    (ridge-shrunk to the scale map), picked by leave-one-out error."""
    maps = log_maps(
        log_src, log_y - log_src, PUBLISHED_MAP_PENALTIES, centre=(float(log_src.mean()), 1.0)
    )
    return min(maps.values(), key=lambda fit: fit[1])[0]


def published_transfer(
    dataset_a: str,
    dataset_b: str,
    *,
    few_shot: Sequence[int] | None = FEW_SHOT_SIZES,
    repeats: int = 5,
    seed: int = 0,
    preset: str = "fast",
    top_k: int = 100,
    progress: Callable[[str], None] | None = None,
    n_jobs: int | None = None,
) -> dict[str, Any]:
    """``transfer`` for two published platforms (``published/rtx4090``, ...): latency per
    image of B against A on the models both published (joined on model and image size; the
    batch sizes may differ, so per image is the comparable figure): least-squares slope, R2,
    Spearman, top-k overlap (cheapest first), geometric-mean ratio and log-log slope. Then
    few-shot calibration: a ``CostModel`` of A (``carb_nas.published.fit_published_model``),
    predicting each model's time per image on A (at A's batch size), adapted with N random
    models of B (a scale or log-linear map of its predictions, see
    ``_published_calibration``), against a CostModel and a log-linear ridge (log FLOPs,
    activations, parameters) trained on the N rows of B alone; R2 (per image, linear units;
    and of the logs) and MdAPE on every other shared model of B. The published files have no
    memory or energy figures: only latency transfers.
    """
    from carb_nas.datasets import PublishedDatasetError, is_published, published_inputs
    from carb_nas.published import fit_published_model, published_rows

    for role, name in (("A", dataset_a), ("B", dataset_b)):
        if not is_published(name):
            raise PublishedDatasetError(
                f"published transfer: expected two published datasets, got {role}={name!r}, "
                "which is not one. Compare published/... with published/..., or two measured "
                "datasets with each other (a published and a measured table share no config)."
            )
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 1:
        raise ModelError(
            f"invalid repeats: expected a whole number >= 1, got {repeats!r}. Use --repeats 1+."
        )
    sizes = sorted({int(n) for n in few_shot}) if few_shot else []
    if sizes and sizes[0] < 1:
        raise ModelError(f"invalid few-shot size: expected sizes >= 1, got {sizes}.")
    say = progress or (lambda _msg: None)
    a, b = published_rows(dataset_a), published_rows(dataset_b)
    shared = a.merge(b, on="entry", suffixes=("_a", "_b"))
    if len(shared) < 3:
        raise InputFileError(
            f"too few shared models: expected at least 3 models published on both "
            f"{a.attrs['source']} and {b.attrs['source']}, got {len(shared)}."
        )
    x = shared[f"{PUBLISHED_TARGET}_a"].to_numpy(float)
    y = shared[f"{PUBLISHED_TARGET}_b"].to_numpy(float)
    slope, intercept, fit_r2 = linear_fit(x, y)
    k = min(top_k, len(shared))
    top_a = set(np.argsort(x, kind="stable")[:k])
    top_b = set(np.argsort(y, kind="stable")[:k])
    ratio = y / x
    result: dict[str, Any] = {
        PUBLISHED_TARGET: {
            "slope": slope,
            "intercept": intercept,
            "r2": fit_r2,
            "spearman": spearman(x, y),
            "top100_overlap": len(top_a & top_b) / k,
            "top_k": int(k),
            "n": int(len(shared)),
            "ratio_geomean": float(np.exp(np.mean(np.log(ratio)))),
            "ratio_median": float(np.median(ratio)),
            "ratio_p10_p90": [float(np.quantile(ratio, 0.1)), float(np.quantile(ratio, 0.9))],
            "loglog_slope": linear_fit(np.log(x), np.log(y))[0],
        }
    }
    prov = {}
    for side, frame in (("a", a), ("b", b)):
        p = frame.attrs.get("provenance", {})
        prov[side] = {
            "source": frame.attrs.get("source"),
            "kind": "published",
            "rows": int(len(frame)),
            **{
                key: p.get(key)
                for key in (
                    "device_name",
                    "torch",
                    "cuda",
                    "precision",
                    "memory_format",
                    "compile",
                    "repository",
                    "commit",
                    "file",
                )
            },
        }
    notes = [
        "published measurements (timm's results/ folder), not ours: latency per image is "
        "1000 / infer_samples_per_sec at each file's batch size; no memory or energy figures"
    ]
    if any(prov["a"][k] != prov["b"][k] for k in ("torch", "cuda", "precision", "compile")):
        notes.append(
            "A and B differ in more than the device: "
            + ", ".join(
                f"{k} {prov['a'][k]} vs {prov['b'][k]}"
                for k in ("torch", "cuda", "precision", "memory_format", "compile")
                if prov["a"][k] != prov["b"][k]
            )
        )
    result["meta"] = {
        "kind": "published_transfer",
        "a": prov["a"],
        "b": prov["b"],
        "shared_models": int(len(shared)),
        "join_columns": ["model", "resolution"],
        "targets": [PUBLISHED_TARGET],
        "notes": notes,
    }
    if sizes:
        largest = len(shared) - MIN_EVALUATION_ROWS
        if sizes[-1] > largest:
            raise ModelError(
                f"few-shot size too large: expected sizes <= {max(largest, 0)} ({len(shared)} "
                f"shared models, {MIN_EVALUATION_ROWS} kept to evaluate on), got {sizes[-1]}. "
                "Use smaller --few-shot sizes."
            )
        say(f"training the source model ({preset} preset) on {len(a)} rows of A")
        source = fit_published_model(a, preset=preset, seed=seed, n_jobs=n_jobs)
        pool = b[b["entry"].isin(shared["entry"])].reset_index(drop=True)
        X_pool = published_inputs(pool)
        bs = pool["batch_size"].to_numpy(float)
        # the A model predicts each model on A, at A's batch size (a batch B used may lie
        # outside what A ran: 1 on a CPU, 2048 on a PRO 6000); calibration maps A's
        # predicted time per image to B's
        on_a = a.set_index("entry").loc[pool["entry"]].reset_index()
        src = source.predict(published_inputs(on_a))["latency_ms"].to_numpy(float)
        src = src / on_a["batch_size"].to_numpy(float)
        yb = pool[PUBLISHED_TARGET].to_numpy(float)
        runs: dict[str, Any] = {}
        kinds = ("source_only", "calibrated", "target_only", "target_only_linear")
        for n in sizes:
            say(f"few-shot N={n}: {repeats} draws")
            rec: dict[str, list] = {kind: [] for kind in kinds}
            logs: dict[str, list] = {kind: [] for kind in kinds}
            methods: dict[str, int] = {}
            errors: list[str] = []
            if n < MIN_TRAIN_ROWS:
                errors.append(f"CostModel needs at least {MIN_TRAIN_ROWS} rows to train; N={n}")
            for draw in range(seed, seed + repeats):
                rng = np.random.default_rng(draw)
                idx = rng.choice(len(pool), size=n, replace=False)
                test = np.setdiff1d(np.arange(len(pool)), idx)
                spec = _published_calibration(np.log(src[idx]), np.log(yb[idx]))
                methods[spec["method"]] = methods.get(spec["method"], 0) + 1
                ls = np.log(src[test])
                preds = {
                    "source_only": src[test],
                    "calibrated": np.exp(ls + log_map_correction(spec, ls)),
                    "target_only": None,
                    "target_only_linear": _published_linear(
                        X_pool.iloc[idx], yb[idx], X_pool.iloc[test]
                    ),
                }
                if n >= MIN_TRAIN_ROWS:
                    try:
                        own = CostModel(
                            preset=preset,
                            n_jobs=n_jobs,
                            validation_fraction=0.0,
                            calibration_fraction=0.0,
                            random_state=draw,
                        ).fit(X_pool.iloc[idx], pool.iloc[idx][["latency_ms"]])
                        preds["target_only"] = (
                            own.predict(X_pool.iloc[test])["latency_ms"].to_numpy(float) / bs[test]
                        )
                    except ModelError as e:
                        errors.append(f"seed {draw}: {e}")
                yt = yb[test]
                for kind, p in preds.items():
                    rec[kind].append(
                        (math.nan, math.nan) if p is None else (r2(yt, p), mdape(yt, p))
                    )
                    logs[kind].append(
                        math.nan if p is None else r2(np.log(yt), np.log(np.maximum(p, 1e-12)))
                    )
            runs[str(n)] = {
                kind: {
                    PUBLISHED_TARGET: _summary(rec[kind])
                    | {
                        "r2_log_mean": float(np.nanmean(logs[kind]))
                        if np.isfinite(logs[kind]).any()
                        else math.nan
                    }
                }
                for kind in kinds
            } | {"methods_chosen": methods, "target_only_errors": errors[:3]}
        result["few_shot"] = {
            "sizes": sizes,
            "seeds": int(repeats),
            "method": "auto (scale | loglinear, by leave-one-out error)",
            "source_model": f"CostModel(preset={preset!r}) trained on all {len(a)} rows of A",
            "evaluation": "R2 (per image, linear units) and MdAPE on every shared model of B "
            "not drawn for calibration",
            "targets": [PUBLISHED_TARGET],
            "runs": runs,
            "notes": [],
        }
    return jsonable(result)


def _published_linear(X_train: pd.DataFrame, y: np.ndarray, X_test: pd.DataFrame) -> np.ndarray:
    """Ridge regression of log(latency per image) on log FLOPs, activations and parameters
    per image and log resolution, penalty picked by leave-one-out error."""

    def feats(X: pd.DataFrame) -> np.ndarray:
        b = X["batch_size"].to_numpy(float)
        cols = [X["flops"] / b, X["activations"] / b, X["params"], X["resolution"]]
        return np.log(np.maximum(np.column_stack([np.asarray(c, float) for c in cols]), 1.0))

    return _ridge_log_fit(feats(X_train), y, feats(X_test))


def published_transfer_markdown(result: Mapping[str, Any]) -> str:
    """The Markdown summary of ``published_transfer``."""
    from carb_nas.reports._markdown import fmt

    meta, r = result["meta"], result[PUBLISHED_TARGET]

    def side(s: Mapping[str, Any]) -> str:
        cuda = f", CUDA {s['cuda']}" if s.get("cuda") else ""
        return (
            f"{s['source']} ({s['device_name']}, PyTorch {s['torch']}{cuda}, {s['precision']}, "
            f"{s['memory_format']}, {s['compile']}; {s['rows']} models; `{s['file']}` of "
            f"{s['repository']}@{str(s['commit'])[:12]})"
        )

    lines = [
        "# Transfer between published platforms",
        "",
        f"A = {side(meta['a'])}; B = {side(meta['b'])}; {meta['shared_models']} models "
        "published on both (joined on model and image size).",
        "",
        *[f"- note: {n}" for n in meta["notes"]],
        "",
        "## B against A (latency per image)",
        "",
        "| models | slope | intercept | R2 | Spearman | top-k overlap | B/A geomean | B/A "
        "median (p10-p90) | log-log slope |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {r['n']} | {fmt(r['slope'])} | {fmt(r['intercept'])} | {fmt(r['r2'])} | "
        f"{fmt(r['spearman'])} | {100 * r['top100_overlap']:.0f}% of {r['top_k']} | "
        f"{fmt(r['ratio_geomean'])}x | {fmt(r['ratio_median'])}x ({fmt(r['ratio_p10_p90'][0])}"
        f"-{fmt(r['ratio_p10_p90'][1])}) | {fmt(r['loglog_slope'])} |",
        "",
    ]
    fs = result.get("few_shot")
    if fs:
        lines += [
            "## Few-shot calibration",
            "",
            f"Source model: {fs['source_model']}. Method: {fs['method']}. For each N, N models "
            f"of B are drawn at random ({fs['seeds']} draws); {fs['evaluation']}. Cells: R2 "
            "mean +- std over draws (mean MdAPE; mean R2 of the logs).",
            "",
            "| N | source only | calibrated | target only (CostModel) | target only (log-linear) |",
            "|---|---|---|---|---|",
        ]
        for n, run in fs["runs"].items():
            cells = []
            for kind in ("source_only", "calibrated", "target_only", "target_only_linear"):
                s = run[kind][PUBLISHED_TARGET]
                cells.append(
                    f"{fmt(s['r2_mean'])} +- {fmt(s['r2_std'], 2)} ({fmt(s['mdape_pct_mean'], 2)}"
                    f"%; log {fmt(s['r2_log_mean'])})"
                )
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines += [
            "",
            f"Calibration maps chosen: "
            f"{ {n: run['methods_chosen'] for n, run in fs['runs'].items()} }",
            "",
        ]
    return "\n".join(lines) + "\n"


def write_published_transfer_report(
    dataset_a: str, dataset_b: str, report_dir: str | Path, **kwargs: Any
) -> dict[str, Any]:
    """Run ``published_transfer`` and write ``transfer.json``, ``README.md`` and PNGs."""
    from carb_nas._io import (
        atomic_write,
        atomic_write_json,
        atomic_write_text,
        check_writable_dir,
    )
    from carb_nas.published import published_rows
    from carb_nas.reports._plots import _figure, _png

    d = check_writable_dir(report_dir)
    result = published_transfer(dataset_a, dataset_b, **kwargs)
    a, b = published_rows(dataset_a), published_rows(dataset_b)
    shared = a.merge(b, on="entry", suffixes=("_a", "_b"))
    r = result[PUBLISHED_TARGET]
    fig, axes = _figure(1, 1, (5.2, 4.4))
    ax = axes[0, 0]
    x, y = shared[f"{PUBLISHED_TARGET}_a"], shared[f"{PUBLISHED_TARGET}_b"]
    ax.scatter(x, y, s=5, alpha=0.5)
    xs = np.geomspace(float(min(x.min(), y.min())), float(max(x.max(), y.max())), 50)
    ax.plot(xs, xs, "k--", lw=0.8, label="B = A")
    ax.plot(
        xs,
        r["slope"] * xs + r["intercept"],
        "r-",
        lw=1,
        label=f"B = {r['slope']:.3g} A {r['intercept']:+.3g} (R2 {r['r2']:.3f})",
    )
    ax.plot(xs, r["ratio_median"] * xs, "g:", lw=1, label=f"B = {r['ratio_median']:.3g} A (median)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"A {result['meta']['a']['source']}: ms per image")
    ax.set_ylabel(f"B {result['meta']['b']['source']}: ms per image")
    ax.set_title(f"published, {r['n']} models; Spearman {r['spearman']:.3f}", fontsize=9)
    ax.legend(fontsize=6)
    pngs = {"transfer_scatter.png": _png(fig)}
    fs = result.get("few_shot")
    if fs:
        fig, axes = _figure(1, 1, (5.2, 3.8))
        ax = axes[0, 0]
        ns = [int(n) for n in fs["runs"]]
        for kind, style, label in (
            ("calibrated", "o-", "A model calibrated with N models of B"),
            ("target_only", "s--", "CostModel on N models of B"),
            ("target_only_linear", "^--", "log-linear model on N models of B"),
            ("source_only", ":", "A model as is"),
        ):
            m = [fs["runs"][str(n)][kind][PUBLISHED_TARGET]["r2_mean"] for n in ns]
            ax.plot(ns, [np.nan if v is None else v for v in m], style, label=label)
        ax.set_xscale("log")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_ylim(max(-1.0, ax.get_ylim()[0]), 1.02)
        ax.set_xlabel("target measurements N")
        ax.set_ylabel("R2 on held-out B (ms per image)")
        ax.legend(fontsize=7)
        pngs["few_shot.png"] = _png(fig)
    md = (
        published_transfer_markdown(result)
        + "\n## Plots\n\n"
        + "\n".join(f"![{f}]({f})" for f in pngs)
        + "\n"
    )
    result = dict(result)
    result["meta"] = dict(result["meta"]) | {"files": ["README.md", "transfer.json", *pngs]}
    d.mkdir(parents=True, exist_ok=True)
    for name, data in pngs.items():

        def write_png(tmp: Path, data: bytes = data) -> None:
            tmp.write_bytes(data)

        atomic_write(d / name, write_png)
    atomic_write_text(d / "README.md", md)
    atomic_write_json(d / "transfer.json", result)
    return result
