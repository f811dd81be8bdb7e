"""Published GPU platforms: cost models, their evaluation and GPU->GPU screening over a zoo.

The published datasets (``carb_nas.datasets.load_published``: timm's inference benchmarks on
RTX 3090/4090/5090, RTX PRO 6000 Max-Q and two Intel CPUs) give one row per model and image
size with the architecture columns timm counts (GMACs, activations and parameters per image,
image size, batch size) and the measured step time. This module

* fits the CARB estimator (``carb_nas.costmodel.CostModel``, unchanged) on those columns
  through a small adapter (``carb_nas.datasets.published_inputs``: FLOPs per batch, params,
  activations per batch, resolution, batch size) -- ``fit_published_model``;
* scores it on a random split and on a split by model family (``GroupKFold`` on the name's
  family, so no network of a held-out family was seen in training), beside the FLOPs-only
  linear baseline -- ``evaluate_published``;
* screens a zoo in two stages, GPU->GPU (``screen_published``): every model ranked by the
  source GPU's predicted latency per image, the top K re-scored with the target GPU's model,
  the latency budget applied (``carb_nas.budgets``), the Pareto set of (published ImageNet
  top-1, predicted target latency) extracted with pymoo's non-dominated sorting, and then every
  decision checked against the target GPU's published measurements, as ``validate`` does for
  our own profiling.

What the columns cannot carry: no per-layer detail (operator mix, layer shapes, depthwise vs
dense convolution, attention), no memory or energy figures, one batch size per model. Two
networks with equal MACs, activations and parameters look the same to any model of them; a
split by family measures how far that goes.

Honesty of the check: by default (``holdout="family"``) each candidate is predicted by models
fitted without its family's rows (out-of-fold, ``GroupKFold``), so the target GPU's published
figure of a candidate was never seen by the model that predicted it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._json import jsonable
from carb_nas.budgets import accept_mask, metric_values, pareto_mask, parse_budgets
from carb_nas.costmodel import MIN_TRAIN_ROWS, CostModel
from carb_nas.costmodel.evaluation import regression_metrics
from carb_nas.datasets import (
    PublishedDatasetError,
    is_published,
    load_published,
    load_published_accuracy,
    published_inputs,
)
from carb_nas.errors import BudgetError, MissingFileError, ModelError

__all__ = [
    "ARCHITECTURE_COLUMNS",
    "PublishedScreenResult",
    "evaluate_published",
    "fit_published_model",
    "published_quality",
    "published_rows",
    "screen_published",
]

ARCHITECTURE_COLUMNS = ("gmacs", "macts_m", "params_m", "resolution", "batch_size")
TARGET = "latency_ms"  # per batch (timm's step time); budgets may ask for _per_image


def published_rows(source: str | pd.DataFrame) -> pd.DataFrame:
    """The rows of a published benchmark a cost model can use: a figure and every
    architecture column (``source``: a name such as ``published/rtx4090`` or a loaded frame)."""
    frame = load_published(source) if isinstance(source, str) else source
    out = frame[frame["status"] == "ok"].dropna(subset=[*ARCHITECTURE_COLUMNS, TARGET])
    out = out.reset_index(drop=True)
    out.attrs = dict(frame.attrs)
    if len(out) < MIN_TRAIN_ROWS:
        empty = [c for c in ARCHITECTURE_COLUMNS if frame[c].isna().all()]
        raise ModelError(
            f"{frame.attrs.get('source', 'published table')}: too few usable models: expected at "
            f"least {MIN_TRAIN_ROWS} with a figure and every architecture column "
            f"{list(ARCHITECTURE_COLUMNS)}, got {len(out)}"
            + (f" (the file has no {empty} values)" if empty else "")
            + ". Use another published file of that device (`carb-nas dataset list --source "
            "published`)."
        )
    return out


def fit_published_model(
    source: str | pd.DataFrame,
    *,
    preset: str = "fast",
    seed: int = 0,
    n_jobs: int | None = None,
    learner_params: Mapping[str, Mapping[str, Any]] | None = None,
) -> CostModel:
    """A ``CostModel`` of one published platform's step time (``latency_ms`` per batch)."""
    rows = published_rows(source)
    return _fit(rows, preset, seed, n_jobs, learner_params)


def _fit(rows, preset, seed, n_jobs, learner_params) -> CostModel:
    platform = rows.attrs.get("source", "published")
    return CostModel(
        preset=preset,
        n_jobs=n_jobs,
        random_state=seed,
        learner_params=learner_params,
    ).fit(published_inputs(rows), rows[[TARGET]], platform=platform)


def _folds(rows: pd.DataFrame, split: str, folds: int, seed: int):
    from sklearn.model_selection import GroupKFold, KFold

    if split == "random":
        return KFold(folds, shuffle=True, random_state=seed).split(rows)
    return GroupKFold(folds).split(rows, groups=rows["family"].to_numpy())


def _oof(rows, split, folds, seed, preset, n_jobs, learner_params) -> dict[str, np.ndarray]:
    """Out-of-fold predictions of latency per batch: the CostModel and the two baselines."""
    from sklearn.linear_model import LinearRegression

    X = published_inputs(rows)
    y = rows[TARGET].to_numpy(float)
    flops = X[["flops"]].to_numpy(float)
    out = {k: np.full(len(rows), np.nan) for k in ("costmodel", "flops_linear", "flops_loglog")}
    for i, (train, test) in enumerate(_folds(rows, split, folds, seed)):
        tr = rows.iloc[train].reset_index(drop=True)
        tr.attrs = dict(rows.attrs)
        model = _fit(tr, preset, seed + i, n_jobs, learner_params)
        out["costmodel"][test] = model.predict(X.iloc[test])[TARGET].to_numpy(float)
        lin = LinearRegression().fit(flops[train], y[train])
        out["flops_linear"][test] = lin.predict(flops[test])
        loglog = LinearRegression().fit(np.log(flops[train]), np.log(y[train]))
        out["flops_loglog"][test] = np.exp(loglog.predict(np.log(flops[test])))
    return out


def _metrics(rows: pd.DataFrame, pred: np.ndarray) -> dict[str, Any]:
    y = rows[TARGET].to_numpy(float)
    b = rows["batch_size"].to_numpy(float)
    per_batch = regression_metrics(y, pred)
    per_image = regression_metrics(y / b, pred / b)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_r2 = regression_metrics(np.log(y), np.log(pred))["r2"]
    return {
        "r2": per_batch["r2"],
        "mape": per_batch["mape"],
        "r2_per_image": per_image["r2"],
        "r2_log": log_r2,
        "mdape_pct": float(np.median(np.abs(pred / y - 1.0)) * 100.0),
        "n": per_batch["n"],
    }


def evaluate_published(
    source: str | pd.DataFrame,
    *,
    folds: int = 5,
    seed: int = 0,
    preset: str = "fast",
    n_jobs: int | None = None,
    learner_params: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """R2 of one published platform's cost model: ``folds``-fold out-of-fold predictions on a
    random split (``KFold``) and on a split by model family (``GroupKFold``), each beside the
    FLOPs-only baselines (``LinearRegression`` on FLOPs in raw units, CARB's baseline, and a
    power law fitted in log space). R2 on latency per batch (timm's step time), per image,
    and of the logs; MdAPE in %."""
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ModelError(
            f"invalid folds: expected a whole number >= 2, got {folds!r}. Use 5 (or more)."
        )
    rows = published_rows(source)
    n_families = rows["family"].nunique()
    if n_families < folds:
        raise ModelError(
            f"too few model families for {folds}-fold family split: expected >= {folds}, got "
            f"{n_families} in {rows.attrs.get('source')}. Use fewer folds."
        )
    out: dict[str, Any] = {
        "platform": rows.attrs.get("source"),
        "provenance": {
            k: rows.attrs.get("provenance", {}).get(k)
            for k in ("device_name", "torch", "cuda", "precision", "memory_format", "compile")
        },
        "rows": int(len(rows)),
        "families": int(n_families),
        "folds": int(folds),
        "preset": preset,
        "inputs": list(published_inputs(rows.head(1)).columns),
        "target": f"{TARGET} (per batch: timm's infer_step_time)",
    }
    for split in ("random", "family"):
        preds = _oof(rows, split, folds, seed, preset, n_jobs, learner_params)
        out[split] = {k: _metrics(rows, p) for k, p in preds.items()}
    return jsonable(out)


# -- quality ---------------------------------------------------------------------------------
def published_quality(quality: str | Path | pd.DataFrame | None = "imagenet") -> pd.DataFrame:
    """A published accuracy table as the quality of zoo entries: one row per (arch,
    resolution) with the best ``top1`` over its pretrained weights and that weight's name.

    ``quality``: ``"imagenet"`` (the shipped ``results-imagenet.csv``), a path to a timm-format
    results CSV, or such a table as a DataFrame (columns of
    ``carb_nas.datasets.ACCURACY_COLUMNS``).
    """
    if quality is None or (isinstance(quality, str) and quality.split("/")[-1] == "imagenet"):
        table = load_published_accuracy("imagenet")
    elif isinstance(quality, pd.DataFrame):
        table = quality
        if "arch" not in table.columns:
            from io import BytesIO

            buf = BytesIO()
            quality.to_csv(buf, index=False)
            table = load_published_accuracy(buf.getvalue(), "<quality frame>")
    else:
        p = Path(quality)
        if not p.is_file():
            raise MissingFileError(
                f"quality table not found: expected 'imagenet' (the shipped published ImageNet "
                f"accuracies) or an existing timm-format results CSV, got {str(quality)!r}. "
                "Check the path."
            )
        table = load_published_accuracy(p.read_bytes(), str(p))
    best = table.sort_values("top1", ascending=False, kind="stable")
    best = best.drop_duplicates(["arch", "resolution"]).rename(columns={"model": "weights"})
    return best[["arch", "resolution", "weights", "top1", "top5"]].reset_index(drop=True)


# -- screening -------------------------------------------------------------------------------
@dataclass
class PublishedScreenResult:
    """Every stage of a GPU->GPU screen over a published zoo, and the check of its decisions
    against the target GPU's published measurements."""

    source: str
    target: str
    candidates: pd.DataFrame
    shortlist: pd.DataFrame
    within_budget: pd.DataFrame
    pareto: pd.DataFrame
    check: dict[str, Any]
    top_k: int
    budgets: dict[str, float]
    holdout: str | None
    spearman: float
    seconds: float
    counts_extra: dict[str, int] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, Any]:
        return {
            **self.counts_extra,
            "candidates": len(self.candidates),
            "shortlisted": len(self.shortlist),
            "within_budget": len(self.within_budget),
            "pareto": len(self.pareto),
        }

    def to_dict(self, rows: bool = True) -> dict[str, Any]:
        out = {
            "source": self.source,
            "target": self.target,
            "counts": self.counts,
            "top_k": self.top_k,
            "budgets": self.budgets,
            "holdout": self.holdout,
            "spearman": self.spearman,
            "check": self.check,
            "seconds": self.seconds,
        }
        if rows:
            out["pareto_models"] = self.pareto.to_dict(orient="records")
        return jsonable(out)

    def summary(self) -> str:
        c, k = self.counts, self.check
        budgets = ", ".join(f"{n} <= {v:g}" for n, v in self.budgets.items())
        d = k["decisions"]
        return "\n".join(
            [
                f"zoo entries on {self.source:<34} {c['zoo']:>6,}",
                f"  with published ImageNet top-1            {c['candidates']:>6,}",
                f"stage 1: top {self.top_k} by {self.source} latency/image {c['shortlisted']:>6,}",
                f"stage 2: {self.target} model, {budgets:<18} {c['within_budget']:>6,}",
                f"Pareto set (top-1, latency per image)      {c['pareto']:>6,}",
                f"Spearman source vs target prediction on the shortlist: {self.spearman:.3f}",
                f"check against {self.target}'s published measurements "
                f"({k['measured']} of {c['shortlisted']} shortlisted measured there):",
                f"  decisions right {d['right']}, wrong {d['wrong']} (true accept "
                f"{d['true_accept']}, false accept {d['false_accept']}, true reject "
                f"{d['true_reject']}, false reject {d['false_reject']})",
                f"  latency per image MdAPE on the shortlist {k['mdape_pct']:.1f} %; Pareto "
                f"models on the measured front of the shortlist {k['pareto_on_measured_front']}"
                f" of {c['pareto']}; of the zoo-wide measured front within budget "
                f"{k['zoo_front_found']} of {k['zoo_front']} found",
            ]
        )


def _oof_predictions(rows: pd.DataFrame, holdout, folds, seed, preset, n_jobs, lp) -> np.ndarray:
    X = published_inputs(rows)
    if holdout is None:
        model = _fit(rows, preset, seed, n_jobs, lp)
        return model.predict(X)[TARGET].to_numpy(float)
    pred = np.full(len(rows), np.nan)
    for i, (train, test) in enumerate(_folds(rows, "family", folds, seed)):
        tr = rows.iloc[train].reset_index(drop=True)
        tr.attrs = dict(rows.attrs)
        pred[test] = _fit(tr, preset, seed + i, n_jobs, lp).predict(X.iloc[test])[TARGET]
    return pred


def _check_screen_args(source, target, top_k, budgets, holdout, folds) -> dict[str, float]:
    for role, name in (("source", source), ("target", target)):
        if not (isinstance(name, pd.DataFrame) or is_published(name)):
            raise PublishedDatasetError(
                f"{role} is not a published dataset: expected a name such as "
                f"'published/rtx4090' (see `carb-nas dataset list --source published`), got "
                f"{name!r}. Screen our own platforms with `carb-nas screen`."
            )
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise BudgetError(
            f"invalid top_k: expected a whole number >= 1, got {top_k!r}. Use --top-k 1 or more."
        )
    if holdout not in (None, "family"):
        raise ModelError(
            f"invalid holdout: expected 'family' or None, got {holdout!r}. Use 'family'."
        )
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ModelError(
            f"invalid folds: expected a whole number >= 2, got {folds!r}. Use --folds 5."
        )
    parsed = dict(parse_budgets(budgets))
    wrong = [n for n in parsed if n not in (TARGET, f"{TARGET}_per_image")]
    if wrong:
        raise BudgetError(
            f"unsupported budget for published platforms: expected latency_ms or "
            f"latency_ms_per_image (the published files have no memory or energy), got "
            f"{wrong}. Budget the latency only."
        )
    return parsed


def screen_published(
    source: str = "published/rtx4090",
    target: str = "published/rtx3090",
    *,
    top_k: int = 300,
    budgets: Mapping[str, float] | None = None,
    quality: str | Path | pd.DataFrame | None = "imagenet",
    holdout: str | None = "family",
    folds: int = 5,
    preset: str = "fast",
    seed: int = 0,
    n_jobs: int | None = None,
    learner_params: Mapping[str, Mapping[str, Any]] | None = None,
) -> PublishedScreenResult:
    """Two-stage screening of the published zoo from GPU ``source`` to GPU ``target``.

    Candidates: every model of ``source`` with its architecture columns and a published
    top-1 at the same image size (``published_quality(quality)``). Stage 1 keeps the ``top_k``
    with the smallest source-predicted latency per image; stage 2 predicts them with the
    target's model (at the target's published batch size), applies ``budgets`` (default
    ``latency_ms_per_image <= 0.25``) and keeps the Pareto set of (top-1, latency per image).
    ``check``: decisions and the Pareto set against the target's published measurements.
    """
    t0 = time.perf_counter()
    budgets = _check_screen_args(
        source, target, top_k, budgets or {"latency_ms_per_image": 0.25}, holdout, folds
    )
    src, tgt = published_rows(source), published_rows(target)
    src_name, tgt_name = src.attrs.get("source", "source"), tgt.attrs.get("source", "target")
    acc = published_quality(quality)
    zoo = len(src)
    cand = src.merge(
        acc, left_on=["model", "resolution"], right_on=["arch", "resolution"], how="inner"
    ).drop(columns=["arch"])
    if len(cand) == 0:
        raise PublishedDatasetError(
            f"no candidate: expected models of {src_name} with a published top-1 at the same "
            "image size, got none. Use a timm-format accuracy table with timm model names."
        )
    src_pred = _oof_predictions(src, holdout, folds, seed, preset, n_jobs, learner_params)
    tgt_pred = _oof_predictions(tgt, holdout, folds, seed + 1000, preset, n_jobs, learner_params)
    per_src = pd.Series(src_pred / src["batch_size"].to_numpy(float), index=src["entry"])
    cand["source_latency_ms_per_image"] = cand["entry"].map(per_src).to_numpy(float)
    cand = cand.sort_values("source_latency_ms_per_image", kind="stable").reset_index(drop=True)
    cand["source_rank"] = np.arange(1, len(cand) + 1)
    short = cand.head(top_k).copy()
    # stage 2: the target model at the target's batch size; entries the target lacks are
    # predicted at the source's batch (the model only needs the architecture columns)
    tgt_by_entry = tgt.set_index("entry")
    tgt_pred_by_entry = pd.Series(tgt_pred, index=tgt["entry"])
    measured = short["entry"].isin(tgt_by_entry.index).to_numpy()
    rows = short[["model", "family", "entry", *ARCHITECTURE_COLUMNS]].copy()
    rows.loc[measured, "batch_size"] = tgt_by_entry.loc[
        short["entry"][measured], "batch_size"
    ].to_numpy()
    pred_t = np.where(
        measured,
        short["entry"].map(tgt_pred_by_entry).to_numpy(float),
        np.nan,
    )
    if (~measured).any():
        extra = _fit(tgt, preset, seed, n_jobs, learner_params).predict(
            published_inputs(rows[~measured])
        )
        pred_t[~measured] = extra[TARGET].to_numpy(float)
    short["batch_size"] = rows["batch_size"].to_numpy()
    short[TARGET] = pred_t
    short["latency_ms_per_image"] = pred_t / short["batch_size"].to_numpy(float)
    short["measured_latency_ms_per_image"] = (
        short["entry"].map(tgt_by_entry["latency_ms_per_image"]).to_numpy(float)
    )
    short["measured_latency_ms"] = short["entry"].map(tgt_by_entry[TARGET]).to_numpy(float)
    pred_frame = short[[TARGET]]
    short["accept"] = accept_mask(pred_frame, short["batch_size"], budgets, upper=False)
    meas_frame = short[["measured_latency_ms"]].rename(columns={"measured_latency_ms": TARGET})
    short["measured_accept"] = accept_mask(meas_frame, short["batch_size"], budgets, upper=False)
    within = short[short["accept"]].copy()
    objectives = np.column_stack(
        [-within["top1"].to_numpy(float), within["latency_ms_per_image"].to_numpy(float)]
    )
    pareto = within[pareto_mask(objectives)].sort_values("latency_ms_per_image").copy()
    check = _check(short, pareto, cand, tgt, budgets, measured)
    ok = np.isfinite(short["source_latency_ms_per_image"]) & np.isfinite(short[TARGET])
    spearman = _spearman(
        short.loc[ok, "source_latency_ms_per_image"].to_numpy(float),
        short.loc[ok, "latency_ms_per_image"].to_numpy(float),
    )
    return PublishedScreenResult(
        source=src_name,
        target=tgt_name,
        candidates=cand,
        shortlist=short,
        within_budget=within,
        pareto=pareto,
        check=check,
        top_k=int(top_k),
        budgets=budgets,
        holdout=holdout,
        spearman=spearman,
        seconds=time.perf_counter() - t0,
        counts_extra={"zoo": zoo},
    )


def _check(short, pareto, cand, tgt, budgets, measured) -> dict[str, Any]:
    """The screen's decisions against the target's published measurements."""
    m = short[measured]
    acc, real = m["accept"].to_numpy(bool), m["measured_accept"].to_numpy(bool)
    decisions = {
        "true_accept": int((acc & real).sum()),
        "false_accept": int((acc & ~real).sum()),
        "true_reject": int((~acc & ~real).sum()),
        "false_reject": int((~acc & real).sum()),
    }
    decisions["right"] = decisions["true_accept"] + decisions["true_reject"]
    decisions["wrong"] = decisions["false_accept"] + decisions["false_reject"]
    y, p = m["measured_latency_ms_per_image"].to_numpy(float), m["latency_ms_per_image"]
    mdape = float(np.median(np.abs(p.to_numpy(float) / y - 1.0)) * 100.0) if len(m) else np.nan
    # the front the shortlist would give with the target's published figures
    real_in = m[real]
    front = real_in[
        pareto_mask(
            np.column_stack(
                [-real_in["top1"].to_numpy(float), real_in["measured_latency_ms_per_image"]]
            )
        )
    ]
    # the zoo-wide measured front within budget (what a full profiling campaign would find)
    zoo = cand.merge(
        tgt[["entry", "latency_ms_per_image", TARGET]].rename(
            columns={"latency_ms_per_image": "m_per_image", TARGET: "m_latency"}
        ),
        on="entry",
    )
    zoo_ok = zoo[
        accept_mask(
            zoo[["m_latency"]].rename(columns={"m_latency": TARGET}),
            zoo["batch_size"],
            budgets,
            upper=False,
        )
    ]
    zoo_front = zoo_ok[
        pareto_mask(np.column_stack([-zoo_ok["top1"].to_numpy(float), zoo_ok["m_per_image"]]))
    ]
    pareto_measured = pareto[pareto["entry"].isin(m["entry"])]
    per_image_measured = metric_values(
        pareto_measured[["measured_latency_ms"]].rename(columns={"measured_latency_ms": TARGET}),
        "latency_ms_per_image",
        pareto_measured["batch_size"],
    )
    return {
        "measured": int(len(m)),
        "decisions": decisions,
        "mdape_pct": mdape,
        "pareto_on_measured_front": int(pareto["entry"].isin(front["entry"]).sum()),
        "measured_front": int(len(front)),
        "pareto_within_budget_measured": int(
            (pareto_measured["measured_accept"].to_numpy(bool)).sum()
        ),
        "pareto_max_measured_latency_ms_per_image": float(np.max(per_image_measured))
        if len(per_image_measured)
        else np.nan,
        "zoo_front": int(len(zoo_front)),
        "zoo_front_found": int(zoo_front["entry"].isin(pareto["entry"]).sum()),
        "zoo_front_models": zoo_front.sort_values("m_per_image")["entry"].tolist(),
    }


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)
