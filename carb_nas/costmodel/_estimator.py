"""The CARB estimator: :class:`CostModel` (the method is described in the package docstring)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin

from carb_nas.costmodel._common import (
    MIN_TRAIN_ROWS,
    err,
    frame_sha256,
    relative_nnls,
    show,
)
from carb_nas.costmodel._intervals import conformal_scores, regime_quantiles
from carb_nas.costmodel._learners import (
    LEARNERS,
    Threads,
    _blend_grid,
    _fit_learner,
    _predict,
    check_n_jobs,
    resolve_preset,
)
from carb_nas.costmodel._learners import threads as _threads
from carb_nas.costmodel._metrics import regression_metrics
from carb_nas.costmodel._schema import InputSchema, _as_frame
from carb_nas.datasets import TARGETS

_MIN_SPLIT = 10  # rows in the validation and calibration parts
_MIN_TRAIN = MIN_TRAIN_ROWS
_MIN_CORRECTOR = 20  # low-batch validation rows needed to fit a corrector
_HANDLE_UNKNOWN = ("error", "ignore")


def _platform_dict(platform: Mapping[str, Any] | str | None) -> dict[str, Any] | None:
    import json

    from carb_nas._json import jsonable

    if platform is None:
        return None
    if isinstance(platform, str):
        parts = platform.split("/")
        out: dict[str, Any] = {"platform": platform}
        if len(parts) == 3:
            out.update(zip(("device", "runtime", "precision"), parts))
        return out
    if not isinstance(platform, Mapping):
        raise err(
            "invalid platform",
            "a fingerprint dict or a platform string such as 'cpu/torch/fp32'",
            type(platform).__name__,
            "Pass one of those.",
        )
    return json.loads(json.dumps(jsonable(dict(platform)), allow_nan=False))


class CostModel(RegressorMixin, BaseEstimator):
    """CARB cascade cost model (see the ``carb_nas.costmodel`` docstring for the method).

    Args:
        preset: ``"carb"`` (the paper's ensemble sizes) or ``"fast"`` (about 6x cheaper); a
            name for explicit learner parameters (:func:`resolve_preset`, ``learner_params_``).
        learner_params: per-learner parameter overrides on top of the preset, e.g.
            ``{"et": {"n_estimators": 50}}`` (learners ``xgb``, ``lgbm``, ``et``,
            ``corrector``, ``cascade``). None: the preset as it is.
        targets: target columns of ``Y`` to model, in any order (they are fitted in cascade
            order: ``peak_mem_mb``, ``energy_j``, ``latency_ms``, then any others). ``None``
            uses every column of ``Y``.
        architecture_only: drop telemetry columns (:data:`TELEMETRY_COLUMNS`) from ``X``.
        log_targets: ``"auto"`` (log space for strictly positive targets), ``True`` or
            ``False``.
        validation_fraction: share of rows for blend weights and the low-batch correctors.
            0 gives equal weights and no corrector.
        calibration_fraction: share of rows for the conformal intervals. 0 disables
            ``predict(X, alpha=...)``.
        low_batch_threshold: batches up to this size form the low-batch regime.
        corrector_damping: the corrector's weight lambda (0.9 in CARB; 0 disables it).
        blend_step: grid step of the blend-weight search over the simplex.
        cascade_folds: folds for the out-of-fold cascade features of the training rows.
        target_offsets: optional ``{target: feature column}``, e.g. ``{"peak_mem_mb":
            "tensor_peak_mb", "latency_ms": "flops"}``: the learners then fit the log-ratio
            of the target to that (positive) column instead of the target itself, which lets
            trees extrapolate beyond the training range (not part of CARB; default None).
            A list of (non-negative) columns instead of one makes the offset their sum
            weighted by non-negative costs, fitted on the training rows by non-negative
            least squares of the relative error (``offset_coefs_``), e.g. seconds per FLOP
            and per MB moved. :data:`PHYSICAL_OFFSETS` holds the physical choice.
        max_categories: most distinct labels a categorical feature column may have.
        handle_unknown: a categorical label unseen in training at predict time: ``"error"``
            (default) refuses it; ``"ignore"`` treats it as missing, as scikit-learn's
            encoders do.
        random_state: seed of the split and every learner.
        n_jobs: threads per learner. -1 (default): all cores for ExtraTrees and the idle
            cores (at fit/predict time) for XGBoost and LightGBM, whose OpenMP threads slow
            down by an order of magnitude when other processes hold the cores; None: 1;
            0 is refused.

    Fitted attributes: ``targets_``, ``feature_names_in_`` (input columns used),
    ``n_features_in_``, ``platform_`` (fingerprint dict or None), ``space_fingerprint_``,
    ``blend_weights_``, ``learner_params_`` (the resolved learner parameters),
    ``fit_info_`` (split sizes, timings, validation scores).
    """

    def __init__(
        self,
        preset: str = "carb",
        learner_params: Mapping[str, Mapping[str, Any]] | None = None,
        targets: Sequence[str] | None = None,
        architecture_only: bool = False,
        log_targets: bool | str = "auto",
        validation_fraction: float = 0.15,
        calibration_fraction: float = 0.15,
        low_batch_threshold: int = 8,
        corrector_damping: float = 0.9,
        blend_step: float = 0.1,
        cascade_folds: int = 5,
        target_offsets: Mapping[str, str | Sequence[str]] | None = None,
        max_categories: int = 64,
        handle_unknown: str = "error",
        random_state: int = 0,
        n_jobs: int | None = -1,
    ) -> None:
        self.preset = preset
        self.learner_params = learner_params
        self.targets = targets
        self.architecture_only = architecture_only
        self.log_targets = log_targets
        self.validation_fraction = validation_fraction
        self.calibration_fraction = calibration_fraction
        self.low_batch_threshold = low_batch_threshold
        self.corrector_damping = corrector_damping
        self.blend_step = blend_step
        self.cascade_folds = cascade_folds
        self.target_offsets = target_offsets
        self.max_categories = max_categories
        self.handle_unknown = handle_unknown
        self.random_state = random_state
        self.n_jobs = n_jobs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    # -- validation -------------------------------------------------------------------------
    def _check_params(self) -> dict[str, dict[str, Any]]:
        learner_params = resolve_preset(self.preset, self.learner_params)
        check_n_jobs(self.n_jobs)
        self._check_handle_unknown()
        for name in ("validation_fraction", "calibration_fraction"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v < 0.5):
                raise err(f"invalid {name}", "a number in [0, 0.5)", show(v), "Use e.g. 0.15.")
        if not 0 <= self.corrector_damping <= 1:
            raise err(
                "invalid corrector_damping",
                "a number in [0, 1]",
                show(self.corrector_damping),
                "CARB uses 0.9.",
            )
        if self.log_targets not in ("auto", True, False):
            raise err(
                "invalid log_targets",
                "'auto', True or False",
                show(self.log_targets),
                "Use 'auto'.",
            )
        if not (isinstance(self.cascade_folds, int) and self.cascade_folds >= 2):
            raise err(
                "invalid cascade_folds", "an integer >= 2", show(self.cascade_folds), "Use 5."
            )
        _blend_grid(self.blend_step)
        return learner_params

    def _check_handle_unknown(self) -> None:
        if self.handle_unknown not in _HANDLE_UNKNOWN:
            raise err(
                "invalid handle_unknown",
                f"one of {list(_HANDLE_UNKNOWN)}",
                show(self.handle_unknown),
                "Use 'error' (refuse unseen labels) or 'ignore' (treat them as missing).",
            )

    def _check_targets(self, Y: pd.DataFrame) -> list[str]:
        cols = [str(c) for c in Y.columns]
        if self.targets is not None:
            wanted = [self.targets] if isinstance(self.targets, str) else list(self.targets)
            missing = [t for t in wanted if t not in cols]
            if missing or not wanted:
                raise err(
                    "target column(s) missing from Y",
                    f"columns {wanted}",
                    f"columns {cols}",
                    "Pass Y with those columns or change targets=.",
                )
        else:
            wanted = cols
        if not wanted:
            raise err(
                "no target column",
                "Y with at least one of the target columns "
                f"{list(TARGETS)} (or any numeric column to predict)",
                "an empty Y",
                "Pass the measured targets as Y.",
            )
        if len(set(wanted)) != len(wanted):
            raise err("duplicate target columns", "distinct names", wanted, "Rename them.")
        known = [t for t in TARGETS if t in wanted]
        return known + [t for t in wanted if t not in TARGETS]

    # -- fitting ----------------------------------------------------------------------------
    def fit(
        self,
        X: Any,
        Y: Any,
        *,
        platform: Mapping[str, Any] | str | None = None,
        space_fingerprint: str | None = None,
    ) -> CostModel:
        """Fit the cascade on features ``X`` and measured targets ``Y`` (same rows).

        Args:
            X: DataFrame of feature columns (numeric and categorical), e.g.
                ``model_inputs(frame)``; a 2-D array also works (columns ``x0, x1, ...``).
            Y: DataFrame of targets (units as named: ``peak_mem_mb``, ``energy_j``,
                ``latency_ms``); a 1-D array becomes the single target ``y``.
            platform: the platform fingerprint the rows were measured on (dict, or a platform
                string such as ``"cpu/torch/fp32"``); stored as ``platform_``.
            space_fingerprint: ``Space.fingerprint`` of the space the rows sample, if any.
        """
        t_start, c_start = time.perf_counter(), time.process_time()
        preset = self._check_params()
        X = _as_frame(X, "X")
        Y = _as_frame(Y, "Y")
        targets = self._check_targets(Y)
        if len(X) != len(Y):
            raise err(
                "X and Y differ in length",
                "one row of Y per row of X",
                f"{len(X)} rows of X and {len(Y)} of Y",
                "Pass matching tables.",
            )
        Yv = {}
        for t in targets:
            s = Y[t]
            if pd.api.types.is_object_dtype(s.dtype):
                num = pd.to_numeric(s, errors="coerce")
                s = num if not (num.isna() & s.notna()).any() else s
            if not pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype):
                raise err(
                    f"non-numeric target column {t!r}",
                    "numbers",
                    f"dtype {s.dtype}",
                    "Convert the target to numbers.",
                )
            v = s.to_numpy(dtype=float, na_value=np.nan)
            bad = ~np.isfinite(v)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise err(
                    f"missing or non-finite target values in {t!r}",
                    "a finite measured value on every row",
                    f"{int(bad.sum())} bad value(s), first at row {i + 1} ({v[i]})",
                    "Drop the rows without a measurement (e.g. keep status == 'ok') or "
                    "leave that target out.",
                )
            if self.log_targets is True and (v <= 0).any():
                raise err(
                    f"non-positive values in target {t!r}",
                    "values > 0 for log-space fitting",
                    f"min {v.min()}",
                    "Use log_targets='auto' or False.",
                )
            Yv[t] = v
        n = len(X)
        threads = _threads(self.n_jobs)
        schema = InputSchema.learn(X, self.architecture_only, self.max_categories)
        F = schema.transform(X)
        batch = schema.batch(X)
        low = batch <= self.low_batch_threshold if batch is not None else np.zeros(n, bool)
        tr, va, ca = self._split(n, low)
        self.schema_ = schema
        self.learner_params_ = preset
        self.targets_ = targets
        self.feature_names_in_ = np.asarray(schema.input_columns, dtype=object)
        self.n_features_in_ = len(schema.input_columns)
        self.transforms_ = {
            t: "log"
            if (self.log_targets is True or (self.log_targets == "auto" and (Yv[t] > 0).all()))
            else "identity"
            for t in targets
        }
        self.learners_: dict[str, dict[str, Any]] = {}
        self.blend_weights_: dict[str, dict[str, float]] = {}
        self.correctors_: dict[str, Any] = {}
        self.conformal_: dict[str, dict[str, list[float]]] = {}
        info: dict[str, Any] = {
            "n_rows": n,
            "n_train": len(tr),
            "n_validation": len(va),
            "n_calibration": len(ca),
            "n_features": F.shape[1],
            "seconds": {},
            "validation": {},
            "corrector": {},
        }
        # cascade feature columns: training rows get out-of-fold predictions, the other rows
        # the specialist's own predictions
        casc_tr: list[np.ndarray] = []
        casc_rest: list[np.ndarray] = []
        rest = np.concatenate([va, ca])
        nva = len(va)
        self.offsets_ = self._check_offsets(X, targets)
        self.offset_coefs_ = {
            t: self._fit_offset_coefs(X.iloc[tr], t, Yv[t][tr])
            for t, spec in self.offsets_.items()
            if not isinstance(spec, str)
        }
        for k, t in enumerate(targets):
            z = self._to_model(t, Yv[t])
            off = self._offset(X, t)
            u = z - off  # what the learners fit (z itself without an offset)
            Ftr = np.column_stack([F[tr], *casc_tr]) if casc_tr else F[tr]
            Frest = np.column_stack([F[rest], *casc_rest]) if casc_rest else F[rest]
            secs: dict[str, float] = {}
            models = {}
            for kind in LEARNERS:
                t0 = time.perf_counter()
                models[kind] = _fit_learner(
                    kind, preset[kind], Ftr, u[tr], self.random_state, threads
                )
                secs[kind] = time.perf_counter() - t0
            self.learners_[t] = models
            preds = {
                kind: _predict(kind, models[kind], Frest, threads) + off[rest] for kind in LEARNERS
            }
            # blend weights on the validation part (in the target's own units)
            if nva:
                w = self._search_weights(t, {k_: p[:nva] for k_, p in preds.items()}, Yv[t][va])
            else:
                w = dict.fromkeys(LEARNERS, 1 / 3)
            self.blend_weights_[t] = w
            blend = sum(w[k_] * preds[k_] for k_ in LEARNERS)
            # low-batch corrector on validation residuals
            t0 = time.perf_counter()
            corr, why = None, "no batch_size column"
            if batch is not None and self.corrector_damping > 0:
                lo_va = low[va]
                if lo_va.sum() >= _MIN_CORRECTOR:
                    Fc = np.column_stack([Frest[:nva][lo_va], blend[:nva][lo_va]])
                    resid = z[va][lo_va] - blend[:nva][lo_va]
                    corr = _fit_learner(
                        "corrector", preset["corrector"], Fc, resid, self.random_state, threads
                    )
                    why = f"fitted on {int(lo_va.sum())} low-batch validation rows"
                else:
                    why = f"only {int(lo_va.sum())} low-batch validation rows (< {_MIN_CORRECTOR})"
            elif batch is not None:
                why = "corrector_damping = 0"
            self.correctors_[t] = corr
            info["corrector"][t] = why
            if corr is not None:
                lo_rest = low[rest]
                if lo_rest.any():
                    Fc = np.column_stack([Frest[lo_rest], blend[lo_rest]])
                    blend = blend.copy()
                    blend[lo_rest] += self.corrector_damping * _predict(
                        "corrector", corr, Fc, threads
                    )
            secs["corrector"] = time.perf_counter() - t0
            if nva:
                info["validation"][t] = regression_metrics(
                    Yv[t][va], self._from_model(t, blend[:nva])
                )
            # conformal scores on the calibration part
            self.conformal_[t] = conformal_scores(z[ca] - blend[nva:], low[ca])
            # cascade feature for the next targets
            if k < len(targets) - 1:
                t0 = time.perf_counter()
                casc_tr.append(self._oof(preset["cascade"], Ftr, u[tr], threads) + off[tr])
                casc_rest.append(blend)
                secs["cascade_oof"] = time.perf_counter() - t0
            info["seconds"][t] = secs
        self.platform_ = _platform_dict(platform)
        self.space_fingerprint_ = space_fingerprint
        self.training_sha256_ = frame_sha256(X, Y[targets])
        info["train_seconds"] = time.perf_counter() - t_start
        info["cpu_seconds"] = time.process_time() - c_start  # all threads of this process
        info["threads"] = threads._asdict()
        self.fit_info_ = info
        return self

    def _split(self, n: int, low: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n_va = int(round(n * self.validation_fraction))
        n_ca = int(round(n * self.calibration_fraction))
        need = (
            _MIN_TRAIN
            + (_MIN_SPLIT if self.validation_fraction else 0)
            + (_MIN_SPLIT if self.calibration_fraction else 0)
        )
        if (
            n - n_va - n_ca < _MIN_TRAIN
            or (self.validation_fraction and n_va < _MIN_SPLIT)
            or (self.calibration_fraction and n_ca < _MIN_SPLIT)
        ):
            least = max(
                need,
                math.ceil(_MIN_SPLIT / max(self.validation_fraction, 1e-9))
                if self.validation_fraction
                else 0,
                math.ceil(_MIN_SPLIT / max(self.calibration_fraction, 1e-9))
                if self.calibration_fraction
                else 0,
            )
            raise err(
                "too few rows for the training/validation/calibration split",
                f"at least {least} rows (>= {_MIN_TRAIN} to train and >= {_MIN_SPLIT} in "
                f"each held-out part; validation_fraction={self.validation_fraction}, "
                f"calibration_fraction={self.calibration_fraction})",
                f"{n} rows (n_samples={n})",
                "Measure more configs, or lower/zero validation_fraction and "
                "calibration_fraction (zero disables blend search and intervals).",
            )
        rng = np.random.default_rng(self.random_state)
        va, ca, tr = [], [], []
        # stratified by batch regime so both regimes reach every part
        for mask in (low, ~low):
            idx = np.flatnonzero(mask)
            if not len(idx):
                continue
            idx = rng.permutation(idx)
            a = int(round(len(idx) * self.validation_fraction))
            b = int(round(len(idx) * self.calibration_fraction))
            va.append(idx[:a])
            ca.append(idx[a : a + b])
            tr.append(idx[a + b :])
        return (
            np.sort(np.concatenate(tr)),
            np.sort(np.concatenate(va)),
            np.sort(np.concatenate(ca)),
        )

    def _oof(
        self, params: Mapping[str, Any], F: np.ndarray, z: np.ndarray, threads: Threads
    ) -> np.ndarray:
        from sklearn.model_selection import PredefinedSplit

        n = len(z)
        k = min(self.cascade_folds, n)
        # seeded fold labels (a numpy Generator stream: the fitted models, the shipped
        # defaults among them, depend on these exact folds)
        folds = PredefinedSplit(np.random.default_rng(self.random_state + 1).permutation(n) % k)
        out = np.empty(n)
        for fit_rows, test in folds.split():
            m = _fit_learner(
                "cascade", params, F[fit_rows], z[fit_rows], self.random_state, threads
            )
            out[test] = _predict("lgbm", m, F[test], threads)
        return out

    def _search_weights(
        self, t: str, preds: Mapping[str, np.ndarray], y: np.ndarray
    ) -> dict[str, float]:
        P = np.column_stack([self._from_model(t, preds[k]) for k in LEARNERS])
        grid = np.asarray(_blend_grid(self.blend_step))
        # error in the target's own units (what R2 and MAE measure); ties -> first grid point
        err = ((P @ grid.T - y[:, None]) ** 2).mean(axis=0)
        best = grid[int(np.argmin(err))]
        return {k: round(float(w), 10) for k, w in zip(LEARNERS, best)}

    def _check_offsets(self, X: pd.DataFrame, targets: list[str]) -> dict[str, str | list[str]]:
        offsets: dict[str, str | list[str]] = {}
        for t, spec in dict(self.target_offsets or {}).items():
            if t not in targets:
                raise err(
                    "target_offsets names a target that is not fitted",
                    f"targets among {targets}",
                    show(t),
                    "Drop it from target_offsets.",
                )
            cols = [spec] if isinstance(spec, str) else list(spec)
            if not cols or not all(isinstance(c, str) for c in cols):
                raise err(
                    f"invalid target_offsets entry for {t!r}",
                    "a column name or a non-empty list of column names",
                    show(spec),
                    'Use e.g. {"latency_ms": "flops"} or {"latency_ms": ["flops", "param_mb"]}.',
                )
            for col in cols:
                if col not in self.schema_.numeric or col in self.schema_.dropped:
                    raise err(
                        f"target_offsets column for {t!r} is not a numeric feature of X",
                        f"one of {self.schema_.numeric}",
                        show(col),
                        "Name a positive numeric column of X.",
                    )
                v = X[col].to_numpy(dtype=float, na_value=np.nan)
                ok = (v > 0) if isinstance(spec, str) else (v >= 0)
                if not ok.all():
                    raise err(
                        f"target_offsets column {col!r} has "
                        f"{'non-positive' if isinstance(spec, str) else 'negative'} or missing "
                        "values",
                        "values > 0 on every row" if isinstance(spec, str) else "values >= 0",
                        f"min {np.nanmin(v)}",
                        "Use a strictly positive column."
                        if isinstance(spec, str)
                        else "Use non-negative resource columns.",
                    )
            if self.transforms_[t] != "log":
                raise err(
                    f"target_offsets for {t!r} needs a log-space target",
                    "a strictly positive target",
                    "non-positive values",
                    "Drop the offset for that target.",
                )
            offsets[t] = spec if isinstance(spec, str) else cols
        return offsets

    def _fit_offset_coefs(self, X: pd.DataFrame, t: str, y: np.ndarray) -> dict[str, float]:
        """Non-negative costs c of a list offset, minimizing the relative error of X @ c."""
        cols = self.offsets_[t]
        M = X[cols].to_numpy(dtype=float)
        c = relative_nnls(M, y)
        coefs = {col: float(v) for col, v in zip(cols, c)}
        if not (M @ c > 0).all():
            raise err(
                f"target_offsets columns for {t!r} cannot form a positive offset",
                "non-negative costs that make the offset > 0 on every training row",
                f"costs {coefs}",
                "Add a column that is positive on every row (e.g. flops).",
            )
        return coefs

    def _offset(self, X: pd.DataFrame, t: str) -> np.ndarray:
        spec = getattr(self, "offsets_", {}).get(t)
        if spec is None:
            return np.zeros(len(X))
        if isinstance(spec, str):
            raw = X[spec].to_numpy(dtype=float, na_value=np.nan)
            what = f"offset column {spec!r}"
        else:
            coefs = self.offset_coefs_[t]
            raw = X[list(coefs)].to_numpy(dtype=float, na_value=np.nan) @ np.array(
                list(coefs.values())
            )
            what = f"offset {' + '.join(f'{v:.3g}*{c}' for c, v in coefs.items())}"
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.log(raw)
        if not np.isfinite(v).all():
            i = int(np.flatnonzero(~np.isfinite(v))[0])
            raise err(
                f"{what} needs positive values",
                "values > 0",
                f"{show(raw[i])} at row {i + 1}",
                "Fix that row.",
            )
        return v

    def _to_model(self, t: str, y: np.ndarray) -> np.ndarray:
        return np.log(y) if self.transforms_[t] == "log" else np.asarray(y, dtype=float)

    def _from_model(self, t: str, z: np.ndarray) -> np.ndarray:
        if self.transforms_[t] == "log":
            with np.errstate(over="ignore"):
                return np.exp(z)  # +-inf bounds stay inf / 0
        return np.asarray(z, dtype=float)

    # -- prediction -------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "learners_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(
                "this CostModel is not fitted: expected fit(X, Y) or CostModel.load(dir) "
                "before predict, got an unfitted model. Fit or load it first."
            )

    def _predict_model_space(self, X: Any, correct: bool = True) -> tuple[dict, np.ndarray]:
        self._check_fitted()
        X = _as_frame(X, "X")
        self._check_handle_unknown()
        F = self.schema_.transform(X, self.handle_unknown)
        batch = self.schema_.batch(X)
        low = (batch <= self.low_batch_threshold) if batch is not None else np.zeros(len(X), bool)
        threads = _threads(self.n_jobs)
        cascade: list[np.ndarray] = []
        out: dict[str, np.ndarray] = {}
        for t in self.targets_:
            Ft = np.column_stack([F, *cascade]) if cascade else F
            w = self.blend_weights_[t]
            blend = self._offset(X, t).copy()
            for kind in LEARNERS:
                if w[kind]:
                    blend += w[kind] * _predict(kind, self.learners_[t][kind], Ft, threads)
            corr = self.correctors_.get(t)
            if correct and corr is not None and low.any():
                Fc = np.column_stack([Ft[low], blend[low]])
                blend[low] += self.corrector_damping * _predict("corrector", corr, Fc, threads)
            out[t] = blend
            cascade.append(blend)
        return out, low

    def predict(
        self, X: Any, alpha: float | None = None, *, low_batch_correction: bool = True
    ) -> pd.DataFrame:
        """Predicted targets for the rows of ``X`` (units as the column names say).

        With ``alpha`` (e.g. 0.05), each target ``t`` also gets ``t_lower`` and ``t_upper``:
        a split-conformal interval meant to hold the measured value with probability
        >= 1 - alpha within each batch regime (infinite when the calibration part is too
        small for that alpha). ``low_batch_correction=False`` skips the low-batch correctors
        (for ablations; the intervals are calibrated for the corrected model).
        """
        if alpha is not None and not (
            isinstance(alpha, (int, float, np.floating))
            and not isinstance(alpha, bool)
            and 0 < alpha < 1
        ):
            conf = f" (confidence {1 - float(alpha):g})" if isinstance(alpha, (int, float)) else ""
            raise err(
                "invalid alpha (the miscoverage, 1 - confidence)",
                "alpha in (0, 1), i.e. a confidence in (0, 1): alpha 0.05 is confidence 0.95",
                f"alpha {show(alpha)}{conf}",
                "Pass alpha=0.05 (confidence 0.95) for 95% intervals.",
            )
        z, low = self._predict_model_space(X, correct=low_batch_correction)
        index = X.index if isinstance(X, pd.DataFrame) else None
        cols: dict[str, np.ndarray] = {}
        for t in self.targets_:
            cols[t] = self._from_model(t, z[t])
            if alpha is not None:
                lo_q, hi_q = self._quantiles(t, alpha)
                if math.isnan(lo_q):
                    raise err(
                        "no calibrated intervals",
                        "a model fitted with calibration_fraction > 0",
                        "calibration_fraction=0",
                        "Refit with calibration_fraction=0.15 or predict without alpha.",
                    )
                q = np.where(low, lo_q, hi_q)
                with np.errstate(over="ignore"):
                    cols[f"{t}_lower"] = self._from_model(t, z[t] - q)
                    cols[f"{t}_upper"] = self._from_model(t, z[t] + q)
        return pd.DataFrame(cols, index=index)

    def _quantiles(self, t: str, alpha: float) -> tuple[float, float]:
        return regime_quantiles(self.conformal_[t], alpha)

    def interval_quantiles(self, alpha: float = 0.05) -> dict[str, dict[str, float]]:
        """Conformal half-widths (model space) per target and regime for ``alpha``."""
        self._check_fitted()
        return {
            t: dict(zip(("low_batch", "high_batch"), self._quantiles(t, alpha)))
            for t in self.targets_
        }

    def feature_importance(self) -> pd.DataFrame:
        """Blend-weighted, normalised gain/impurity importances: rows features, cols targets."""
        self._check_fitted()
        cols = {}
        base = self.schema_.feature_names
        for k, t in enumerate(self.targets_):
            names = base + [f"pred_{u}" for u in self.targets_[:k]]
            total = np.zeros(len(names))
            for kind in LEARNERS:
                m = self.learners_[t][kind]
                if kind == "xgb":
                    score = m.get_score(importance_type="gain")
                    imp = np.array([score.get(f"f{i}", 0.0) for i in range(len(names))])
                elif kind == "lgbm":
                    imp = np.asarray(m.feature_importance("gain"), dtype=float)
                else:
                    imp = np.asarray(m.feature_importances_, dtype=float)
                if imp.sum() > 0:
                    total += self.blend_weights_[t][kind] * imp / imp.sum()
            cols[t] = pd.Series(total, index=names)
        return pd.DataFrame(cols).fillna(0.0)

    # -- persistence ------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write the model to ``directory`` without pickle, atomically: the files go to a
        temporary sibling renamed into place when complete, so a failure leaves a previous
        model there intact. An existing directory that is not a saved model is refused."""
        from carb_nas.costmodel._persist import save_model

        self._check_fitted()
        return save_model(self, directory)

    @classmethod
    def load(cls, directory: str | Path) -> CostModel:
        """Load a model saved by :meth:`save`, verifying versions, the manifest's own checksum
        and every file's checksum."""
        from carb_nas.costmodel._persist import load_model_dir

        return load_model_dir(cls, directory)
