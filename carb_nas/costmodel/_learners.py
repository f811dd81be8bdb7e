"""The learners of the cascade: presets resolved to explicit parameters, thread counts, and
fitting/predicting XGBoost, LightGBM and ExtraTrees the same way everywhere."""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from carb_nas.costmodel._common import err, show

LEARNERS = ("xgb", "lgbm", "et")
# what a preset sizes: the three specialists, the low-batch corrector, the cascade learner
LEARNER_KINDS = (*LEARNERS, "corrector", "cascade")


def _frozen(doc: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in doc.items()})


# Read-only: a preset is a name for explicit parameters (see resolve_preset), never a table
# that callers edit. Pass ``learner_params`` to CostModel to change sizes.
PRESETS: Mapping[str, Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        # the CARB paper's specialists
        "carb": _frozen(
            {
                "xgb": {"n_estimators": 800, "max_depth": 9},
                "lgbm": {"n_estimators": 800, "num_leaves": 127},
                "et": {"n_estimators": 400},
                "corrector": {"n_estimators": 200, "num_leaves": 15, "learning_rate": 0.05},
                "cascade": {"n_estimators": 200, "num_leaves": 31},
            }
        ),
        # Same structure, about 6x less work: for interactive use and tests.
        "fast": _frozen(
            {
                "xgb": {"n_estimators": 150, "max_depth": 6},
                "lgbm": {"n_estimators": 150, "num_leaves": 31},
                "et": {"n_estimators": 100, "min_samples_leaf": 2},
                "corrector": {"n_estimators": 100, "num_leaves": 7, "learning_rate": 0.05},
                "cascade": {"n_estimators": 100, "num_leaves": 15},
            }
        ),
    }
)


def resolve_preset(
    preset: str, learner_params: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """The explicit keyword arguments of every learner: ``PRESETS[preset]`` updated per learner
    by ``learner_params`` (e.g. ``{"et": {"n_estimators": 50}}``). A fresh dict each call."""
    if not isinstance(preset, str) or preset not in PRESETS:
        raise err(
            "unknown preset",
            f"one of {list(PRESETS)}",
            show(preset),
            "Use preset='carb' (the paper's sizes) or 'fast'; change sizes with learner_params.",
        )
    out = {k: dict(v) for k, v in PRESETS[preset].items()}
    if learner_params is None:
        return out
    if not isinstance(learner_params, Mapping):
        raise err(
            "invalid learner_params",
            f"a dict {{learner: {{parameter: value}}}} with learners among {list(LEARNER_KINDS)}",
            type(learner_params).__name__,
            'Pass e.g. {"et": {"n_estimators": 50}}.',
        )
    for kind, params in learner_params.items():
        if kind not in LEARNER_KINDS or not isinstance(params, Mapping):
            raise err(
                "invalid learner_params entry",
                f"learners among {list(LEARNER_KINDS)}, each with a dict of parameters",
                f"{kind!r}: {type(params).__name__}",
                'Pass e.g. {"et": {"n_estimators": 50}}.',
            )
        out[kind].update(params)
    return out


class Threads(NamedTuple):
    forest: int  # ExtraTrees (joblib threads)
    omp: int  # XGBoost and LightGBM (OpenMP)


def _idle_cores(samples: int = 5) -> int:
    """Cores not taken by other runnable tasks (Linux /proc/loadavg; else all cores)."""
    from joblib import cpu_count

    cpu = cpu_count()
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)  # minus this reader
        except (OSError, ValueError, IndexError):
            return cpu
        if i + 1 < samples:
            time.sleep(0.005)
    return max(1, min(cpu, cpu - int(np.median(counts))))


def check_n_jobs(n_jobs: Any) -> None:
    """None, -1 (all cores), another negative (counted back from the cores, as joblib does)
    or a thread count >= 1; 0 means nothing and is refused."""
    if n_jobs is None or (
        isinstance(n_jobs, (int, np.integer)) and not isinstance(n_jobs, bool) and n_jobs != 0
    ):
        return
    raise err(
        "invalid n_jobs",
        "None (1 thread), -1 (all cores) or a thread count >= 1",
        show(n_jobs),
        "Use n_jobs=1 on a busy machine, -1 otherwise.",
    )


def threads(n_jobs: int | None) -> Threads:
    """Threads for the learners. ``-1`` means every core for ExtraTrees and every *idle* core
    for the OpenMP learners: XGBoost and LightGBM synchronise their threads many times per
    tree, and when other processes hold the cores every synchronisation waits for a time
    slice (measured on a busy 2-core machine: CARB preset fit 685 s with 2 OpenMP threads,
    184 s with 1). Other negative values count back from the cores as joblib does. (Each
    learner takes its thread count as a parameter, so no process-wide limit is needed.)"""
    from joblib import effective_n_jobs

    if n_jobs is None:
        return Threads(1, 1)
    if n_jobs == -1:
        return Threads(effective_n_jobs(-1), _idle_cores())
    n = max(1, effective_n_jobs(int(n_jobs)))
    return Threads(n, n)


def _make(kind: str, params: Mapping[str, Any], seed: int, threads: Threads):
    if kind == "xgb":
        import xgboost as xgb

        return xgb.XGBRegressor(tree_method="hist", random_state=seed, n_jobs=threads.omp, **params)
    if kind in ("lgbm", "corrector", "cascade"):
        import lightgbm as lgb

        return lgb.LGBMRegressor(random_state=seed, n_jobs=threads.omp, verbose=-1, **params)
    if kind == "et":
        from sklearn.ensemble import ExtraTreesRegressor

        return ExtraTreesRegressor(random_state=seed, n_jobs=threads.forest, **params)
    raise ValueError(kind)


def _predict(kind: str, model: Any, F: np.ndarray, threads: Threads) -> np.ndarray:
    """Predict with a fitted learner (XGBoost Booster, LightGBM Booster or ExtraTrees)."""
    if len(F) == 0:
        return np.zeros(0)
    if kind == "xgb":
        model.set_param({"nthread": threads.omp})
        return np.asarray(model.inplace_predict(F), dtype=float)
    if kind in ("lgbm", "corrector"):
        return np.asarray(model.predict(F, num_threads=threads.omp), dtype=float)
    if len(F) <= _SMALL_FOREST_BATCH and getattr(model, "n_outputs_", 1) == 1:
        return _forest_predict_small(model, F)
    model.n_jobs = threads.forest
    return np.asarray(model.predict(F), dtype=float)


_SMALL_FOREST_BATCH = 64


def _forest_predict_small(model: Any, F: np.ndarray) -> np.ndarray:
    """ExtraTrees' ``predict`` for a few rows without joblib's per-tree dispatch (~0.25 ms a
    tree, 100 ms for one row of a 400-tree forest): the same float32 input, the same trees
    summed in the same order in float64, divided by their number -- the same numbers."""
    X = np.ascontiguousarray(F, dtype=np.float32)
    out = np.zeros(len(X), dtype=np.float64)
    for tree in model.estimators_:
        out += tree.tree_.predict(X)[:, 0]
    out /= len(model.estimators_)
    return out


def _fit_learner(
    kind: str,
    params: Mapping[str, Any],
    F: np.ndarray,
    y: np.ndarray,
    seed: int,
    threads: Threads,
) -> Any:
    est = _make(kind, params, seed, threads)
    est.fit(F, y)
    if kind == "xgb":
        return est.get_booster()
    if kind in ("lgbm", "corrector", "cascade"):
        return est.booster_
    return est


def _blend_grid(step: float) -> list[tuple[float, float, float]]:
    k = int(round(1 / step))
    if k < 1 or abs(k * step - 1) > 1e-9:
        raise err(
            "invalid blend_step",
            "a step that divides 1 (e.g. 0.1, 0.05, 0.25)",
            step,
            "Choose such a step.",
        )
    return [(i / k, j / k, (k - i - j) / k) for i in range(k + 1) for j in range(k + 1 - i)]
