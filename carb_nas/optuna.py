"""Predicted costs and budget constraints for an Optuna study you already have.

Your study keeps its objective, directions, sampler and storage; one call inside the objective
adds a config suggested from a carb_nas space, its predicted costs, and one constraint per
budget::

    import optuna
    from carb_nas.costmodel import load_default_model
    from carb_nas.optuna import CostConstraints

    costs = CostConstraints(load_default_model("cpu/torch/fp32"), budgets={"latency_ms": 50})

    def objective(trial):
        config = costs.suggest(trial, "cpu")   # suggest, predict, constrain (maybe prune)
        return train_and_evaluate(config)      # your own training, unchanged

    study = optuna.create_study(direction="maximize")  # any sampler, any storage
    study.optimize(objective, n_trials=50)
    study.best_trial                                     # the best *feasible* trial

What ``CostConstraints.suggest(trial, space)`` does, in this order:

1. suggests one value per knob under the stable parameter names of :func:`param_names`
   (``carb_nas.family``, ``carb_nas.depth.<family>``, ``carb_nas.width``, ...), all
   categorical, so TPE, NSGA-II, random and grid samplers all handle them;
2. predicts the config's costs with the cost model (with calibrated intervals when a
   ``confidence`` is given) and stores them as user attributes ``carb_nas.predicted.<target>``
   (``..._lower`` / ``..._upper`` with a confidence);
3. records every budget as a constraint ``carb_nas.<target>`` with
   :meth:`optuna.trial.Trial.set_constraint`: value = predicted cost - budget (the upper end
   of the interval with a confidence), so a value <= 0 is feasible, as Optuna expects; a space
   with ``[limits]`` adds ``carb_nas.space.max_gflops_per_batch`` (GFLOPs per batch - limit);
   ``normalize=True`` divides both by the budget (the scale ``carb-nas search`` writes). The
   study records its scale (user attribute ``carb_nas.constraint_scale``) and refuses a writer
   of the other one, so values of both never mix under the same names;
4. with ``prune=True``, raises :class:`optuna.TrialPruned` when any constraint is > 0, before
   your objective spends anything on training.

Optuna >= 5 samplers (TPE, NSGA-II, NSGA-III, GP) read constraints set with ``set_constraint``
and ``study.best_trial`` / ``study.best_trials`` keep only feasible trials. For a sampler that
still takes ``constraints_func=``, pass :meth:`CostConstraints.constraints_func`, which reads the
values back from the trial's stored user attributes.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna  # absolute import: this is the real optuna, not carb_nas.optuna

from carb_nas.errors import BudgetError, ConfigError, MissingFileError, ModelError
from carb_nas.screen import PER_IMAGE, check_budgets, parse_budgets
from carb_nas.space import Config, Space, configs_to_frame, load_space

__all__ = [
    "CostConstraints",
    "suggest_config",
    "param_names",
    "config_params",
    "trial_config",
    "stored_constraints",
    "claim_constraint_scale",
    "PARAM_PREFIX",
]

PARAM_PREFIX = "carb_nas."
# Knobs suggested after the family, in this order. Their order fixes the order of suggest calls,
# which keeps relative samplers (e.g. CMA-ES groups, TPE multivariate) reproducible.
_KNOBS = ("depth", "width", "resolution", "batch_size", "precision", "runtime")
# Depth values always differ by family (2 + 2k basic vs 2 + 3k bottleneck), so depth is always a
# per-family parameter; other knobs are shared unless the space gives families other values.
_ALWAYS_PER_FAMILY = ("depth",)

_ATTR_CONFIG = PARAM_PREFIX + "config"
_ATTR_KEY = PARAM_PREFIX + "config_key"
_ATTR_CONSTRAINTS = PARAM_PREFIX + "constraints"
_ATTR_BUDGETS = PARAM_PREFIX + "budgets"
_ATTR_CONFIDENCE = PARAM_PREFIX + "confidence"
_ATTR_PREDICTED = PARAM_PREFIX + "predicted."
_ATTR_GFLOPS = PARAM_PREFIX + "gflops_per_batch"
_ATTR_PRUNED = PARAM_PREFIX + "pruned_reason"
_LIMIT_CONSTRAINT = PARAM_PREFIX + "space.max_gflops_per_batch"
# study attribute: the scale of the study's carb_nas budget constraints ("absolute": cost -
# budget; "relative": (cost - budget) / budget, what `carb-nas search` writes). Samplers sum
# constraint values across trials, so one study must not mix the two under the same names.
_ATTR_SCALE = PARAM_PREFIX + "constraint_scale"


# -- parameters -------------------------------------------------------------------------------
def _as_space(space: Space | str | Path) -> Space:
    if isinstance(space, Space):
        return space
    if isinstance(space, (str, Path)):
        return _load_space_cached(str(space))
    raise ConfigError(
        f"invalid space: expected a carb_nas.space.Space, a TOML path or a bundled space name, "
        f"got {type(space).__name__} {space!r}. Pass e.g. load_space('cpu')."
    )


_SPACES: dict[str, Space] = {}


def _load_space_cached(path: str) -> Space:
    # Objectives call suggest once per trial; parsing the TOML (and, with [limits], computing
    # the capped grid) every trial would cost more than the prediction.
    if path not in _SPACES:
        _SPACES[path] = load_space(path)
    return _SPACES[path]


def _param_name(space: Space, knob: str, family: str) -> str:
    if knob in _ALWAYS_PER_FAMILY:
        return f"{PARAM_PREFIX}{knob}.{family}"
    first = space.knobs[space.families[0]][knob]
    if any(space.knobs[f][knob] != first for f in space.families):
        return f"{PARAM_PREFIX}{knob}.{family}"
    return f"{PARAM_PREFIX}{knob}"


def param_names(space: Space | str | Path) -> list[str]:
    """Every Optuna parameter name :func:`suggest_config` may use for ``space``, in call order.

    Names are part of the public API and stay fixed across releases:
    ``carb_nas.family``; ``carb_nas.depth.<family>`` (a conditional parameter, suggested only
    when that family is chosen, because depth values differ by family); and
    ``carb_nas.<knob>`` for width, resolution, batch_size, precision and runtime, or
    ``carb_nas.<knob>.<family>`` when the space gives that knob different values per family
    (an Optuna parameter must keep one distribution for the whole study).
    """
    space = _as_space(space)
    names = [PARAM_PREFIX + "family"]
    for knob in _KNOBS:
        for family in space.families:
            name = _param_name(space, knob, family)
            if name not in names:
                names.append(name)
    return names


def _native(value: Any) -> Any:
    # Optuna categorical choices must be None, bool, int, float or str (no numpy scalars),
    # and JSON storages must be able to write them.
    return value.item() if isinstance(value, np.generic) else value


def _suggest(trial: optuna.trial.BaseTrial, space: Space) -> Config:
    family = trial.suggest_categorical(PARAM_PREFIX + "family", list(space.families))
    values: dict[str, Any] = {"family": family}
    for knob in _KNOBS:
        choices = [_native(v) for v in space.knobs[family][knob]]
        values[knob] = trial.suggest_categorical(_param_name(space, knob, family), choices)
    config = Config(**values)
    trial.set_user_attr(_ATTR_KEY, config.key)
    trial.set_user_attr(_ATTR_CONFIG, config.as_dict())
    return config


def config_params(config: Config, space: Space | str | Path) -> dict[str, Any]:
    """The Optuna params that make :func:`suggest_config` return ``config``.

    Use it to enqueue known configs (a baseline, last release's network)::

        study.enqueue_trial(config_params(Config("basic", 18, 1.0, 64, 8), space))
    """
    space = _as_space(space)
    if not isinstance(config, Config) or config not in space:
        raise ConfigError(
            f"config not in the space: expected a Config whose every value is one of "
            f"{space.name!r}'s values, got {config!r}. Pick values listed by "
            "`carb-nas space show` for that space."
        )
    params: dict[str, Any] = {PARAM_PREFIX + "family": config.family}
    for knob in _KNOBS:
        params[_param_name(space, knob, config.family)] = getattr(config, knob)
    return params


def trial_config(trial: optuna.trial.BaseTrial) -> Config:
    """The Config a trial evaluated (from its ``carb_nas.config`` user attribute)."""
    stored = trial.user_attrs.get(_ATTR_CONFIG)
    if not isinstance(stored, Mapping):
        raise ConfigError(
            f"trial {trial.number} holds no carb_nas config: expected the user attribute "
            f"{_ATTR_CONFIG!r} written by suggest_config or CostConstraints.suggest, got "
            f"user attributes {sorted(trial.user_attrs)}. Call one of them in the objective."
        )
    return Config(**stored)


def stored_constraints(trial: optuna.trial.BaseTrial) -> dict[str, float]:
    """The carb_nas constraints recorded on a trial, ``{name: value}`` (value <= 0 feasible).

    Empty when the trial never reached :meth:`CostConstraints.suggest` (e.g. it failed first).
    """
    stored = trial.user_attrs.get(_ATTR_CONSTRAINTS)
    return {str(k): float(v) for k, v in stored.items()} if isinstance(stored, Mapping) else {}


def _space_limit_constraints(config: Config, space: Space, trial: Any) -> dict[str, float]:
    """Constraints from the space's own ``[limits]``: the suggested knobs can combine into a
    config the space file leaves out (e.g. above ``max_gflops_per_batch``)."""
    limit = space.limits.get("max_gflops_per_batch")
    if limit is None:
        return {}
    from carb_nas.features import compute_features  # imported lazily: only for capped spaces

    gflops = float(compute_features(configs_to_frame([config]))["flops"].iloc[0]) / 1e9
    trial.set_user_attr(_ATTR_GFLOPS, gflops)
    return {_LIMIT_CONSTRAINT: gflops - float(limit)}


def _limit_reason(constraints: Mapping[str, float], space: Space) -> str | None:
    if constraints.get(_LIMIT_CONSTRAINT, 0.0) <= 0:
        return None
    limit = float(space.limits["max_gflops_per_batch"])
    return f"above the space's limit of {limit:g} GFLOPs per batch"


def _record(trial: Any, constraints: Mapping[str, float]) -> None:
    trial.set_user_attr(_ATTR_CONSTRAINTS, dict(constraints))
    # Optuna >= 5 stores named constraints that every built-in sampler and best_trial(s)
    # read; older Optuna only has constraints_func, which reads the user attribute above.
    set_constraint = getattr(trial, "set_constraint", None)
    if set_constraint is not None:
        for name, value in constraints.items():
            set_constraint(name, value)


def claim_constraint_scale(study: Any, relative: bool) -> None:
    """Record on ``study`` the scale of its carb_nas budget constraints, or check it.

    The first writer sets it; a later one with the other scale gets a
    :class:`~carb_nas.errors.BudgetError` before anything is written.
    """
    scale = "relative" if relative else "absolute"
    held = study.user_attrs.get(_ATTR_SCALE)
    if held is None:
        study.set_user_attr(_ATTR_SCALE, scale)
    elif held != scale:
        raise BudgetError(
            f"study {study.study_name!r} holds carb_nas budget constraints on the {held} scale "
            f"({'(cost - budget) / budget' if held == 'relative' else 'cost - budget'}), but "
            f"this writer uses the {scale} scale: samplers would add up values of both under "
            f"the same names. Use CostConstraints(..., normalize={held == 'relative'}) for "
            "this study (carb-nas search writes the relative scale), or a new study."
        )


def suggest_config(trial: optuna.trial.BaseTrial, space: Space | str | Path) -> Config:
    """Suggest a config of ``space`` under the stable names of :func:`param_names`.

    Stores the config (user attributes ``carb_nas.config_key`` and ``carb_nas.config``).
    For a space with ``[limits]`` it also records the constraint
    ``carb_nas.space.max_gflops_per_batch`` (GFLOPs per batch minus the limit; <= 0 inside the
    space). No costs are predicted; use :class:`CostConstraints` for that.
    """
    space = _as_space(space)
    config = _suggest(trial, space)
    limits = _space_limit_constraints(config, space, trial)
    if limits:
        _record(trial, limits)
    return config


# -- costs and budgets ------------------------------------------------------------------------
def _model_inputs(frame: Any) -> Any:
    from carb_nas.costmodel import model_inputs  # lazily: keeps param-only use light

    return model_inputs(frame)


def _as_model(model: Any) -> Any:
    if isinstance(model, (str, Path)):
        path = Path(model)
        if path.is_dir():
            from carb_nas.costmodel import CostModel

            return CostModel.load(path)
        if str(model).count("/") == 2 and not path.exists():
            from carb_nas.costmodel import load_default_model

            return load_default_model(str(model))
        raise MissingFileError(
            f"cost model not found: expected a model directory (saved by CostModel.save) or a "
            f"platform name such as 'cpu/torch/fp32', got {str(model)!r}. Check the path."
        )
    targets = getattr(model, "targets_", None)
    if not callable(getattr(model, "predict", None)) or targets is None:
        raise ModelError(
            f"unusable cost model: expected a fitted carb_nas.costmodel.CostModel (with predict "
            f"and targets_), got {type(model).__name__}. Fit it first or load one with "
            "CostModel.load(dir) / load_default_model(platform)."
        )
    return model


def _one_row_model(model: Any) -> Any:
    """A shallow copy predicting on one thread when the model would use a pool.

    Each trial predicts a single row; starting a thread pool for it costs ~30x the prediction
    (about 200 ms vs 7 ms with the fast preset on 2 cores). The user's model is not changed.
    """
    get_params = getattr(model, "get_params", None)
    if get_params is None or get_params(deep=False).get("n_jobs", 1) in (1, None):
        return model
    model = copy.copy(model)
    model.set_params(n_jobs=1)
    return model


class CostConstraints:
    """Predicted costs and budget constraints for the trials of an existing Optuna study.

    Args:
        model: a fitted :class:`carb_nas.costmodel.CostModel`, a directory saved by
            ``CostModel.save``, or a shipped platform name such as ``"cpu/torch/fp32"``.
        budgets: upper limits in the target's unit, per batch, e.g.
            ``{"latency_ms": 50, "peak_mem_mb": 200}`` or ``["latency_ms=50"]``; a
            ``<target>_per_image`` name divides the batch's cost by the batch size. Targets
            among ``peak_mem_mb``, ``energy_j``, ``latency_ms``, and predicted by the model;
            the rules are those of ``carb-nas screen --budget``. ``None``: costs only.
        confidence: ``None`` to judge budgets on the point prediction; or a level in (0, 1),
            e.g. ``0.95``: intervals are predicted with ``alpha = 1 - confidence`` and a budget
            counts as met only if the interval's upper end is within it (so at least
            ``confidence`` of such configs truly meet it, by the calibration).
        prune: raise :class:`optuna.TrialPruned` in :meth:`suggest` when any constraint is
            violated, so the objective never trains a config predicted to miss a budget. The
            pruned trial keeps its constraints, so TPE still learns where infeasible configs
            lie; NSGA-II only breeds from completed trials.
        normalize: store constraints as ``(cost - budget) / budget`` instead of
            ``cost - budget``. Samplers sum the positive parts of constraints to rank
            infeasible trials, which mixes units (ms + MB) unless normalized.

    The study's directions, sampler and storage are never touched; the values written are
    plain JSON, so any storage (in-memory, JournalStorage, RDB) works.
    """

    def __init__(
        self,
        model: Any,
        budgets: Mapping[str, float] | None = None,
        *,
        confidence: float | None = None,
        prune: bool = False,
        normalize: bool = False,
    ) -> None:
        # Validated before any trial runs: a typo in a budget must not surface after hours.
        self.model = _one_row_model(_as_model(model))
        self.targets = [str(t) for t in self.model.targets_]
        # The same budget rules as `carb-nas screen/search --budget` (carb_nas.screen).
        self.budgets = parse_budgets(budgets)
        check_budgets(self.budgets, self.model, role="cost model")
        if confidence is not None and (
            isinstance(confidence, bool)
            or not isinstance(confidence, (int, float, np.floating))
            or not 0.0 < float(confidence) < 1.0
        ):
            raise BudgetError(
                f"invalid confidence: expected None or a number with 0 < confidence < 1 "
                f"(e.g. 0.95), got {confidence!r}. Use None for point predictions."
            )
        for name, flag in (("prune", prune), ("normalize", normalize)):
            if not isinstance(flag, bool):
                raise BudgetError(f"invalid {name}: expected True or False, got {flag!r}.")
        self.confidence = None if confidence is None else float(confidence)
        self.prune = prune
        self.normalize = normalize
        self._warned_spaces: set[str] = set()
        self._scaled_studies: set[tuple[int, str]] = set()

    def __repr__(self) -> str:
        return (
            f"CostConstraints(budgets={self.budgets}, confidence={self.confidence}, "
            f"prune={self.prune}, normalize={self.normalize})"
        )

    @property
    def constraint_names(self) -> list[str]:
        """Names of the budget constraints, in the order of ``budgets``."""
        return [PARAM_PREFIX + t for t in self.budgets]

    def predict(self, config: Config) -> dict[str, float]:
        """Predicted costs of one config: ``{target: value}`` plus ``{target}_lower`` and
        ``{target}_upper`` when a confidence is set (units as the target names say)."""
        X = _model_inputs(configs_to_frame([config]))
        if self.confidence is None:
            frame = self.model.predict(X)
        else:
            frame = self.model.predict(X, alpha=round(1.0 - self.confidence, 12))
        row = frame.iloc[0]
        out: dict[str, float] = {}
        for target in self.targets:
            out[target] = float(row[target])
            if self.confidence is not None:
                out[f"{target}_lower"] = float(row[f"{target}_lower"])
                out[f"{target}_upper"] = float(row[f"{target}_upper"])
        bad = [k for k, v in out.items() if not math.isfinite(v)]
        if bad:
            raise ModelError(
                f"cost model returned non-finite predictions for {config!r}: expected finite "
                f"numbers, got {[(k, out[k]) for k in bad]}. Check the model's training data."
            )
        return out

    def _check_scale(self, trial: Any) -> None:
        study = getattr(trial, "study", None)
        if study is None or not self.budgets:
            return
        key = (id(study), study.study_name)  # one storage read per study object
        if key not in self._scaled_studies:
            claim_constraint_scale(study, self.normalize)
            self._scaled_studies.add(key)

    def _check_space(self, space: Space) -> None:
        trained_on = getattr(self.model, "space_fingerprint_", None)
        seen = space.fingerprint in self._warned_spaces
        if trained_on and trained_on != space.fingerprint and not seen:
            self._warned_spaces.add(space.fingerprint)
            warnings.warn(
                f"the cost model was trained on another space (fingerprint {trained_on}) than "
                f"{space.name!r} ({space.fingerprint}); configs outside its training range are "
                "extrapolated. Train a model on this space's measurements for firm budgets.",
                UserWarning,
                stacklevel=3,
            )

    def suggest(self, trial: optuna.trial.BaseTrial, space: Space | str | Path) -> Config:
        """Suggest a config, attach its predicted costs, record the budget constraints.

        Call it first in the objective. Raises :class:`optuna.TrialPruned` (after recording
        everything) when ``prune=True`` and a constraint is violated.
        """
        space = _as_space(space)
        self._check_space(space)
        self._check_scale(trial)
        config = _suggest(trial, space)
        constraints = _space_limit_constraints(config, space, trial)
        predicted = self.predict(config)
        for name, value in predicted.items():
            trial.set_user_attr(_ATTR_PREDICTED + name, value)
        if self.confidence is not None:
            trial.set_user_attr(_ATTR_CONFIDENCE, self.confidence)
        reasons = []
        side = "" if self.confidence is None else "_upper"
        for name, budget in self.budgets.items():
            if name.endswith(PER_IMAGE):
                cost = predicted[name[: -len(PER_IMAGE)] + side] / config.batch_size
            else:
                cost = predicted[name + side]
            excess = cost - budget
            constraints[PARAM_PREFIX + name] = excess / budget if self.normalize else excess
            if excess > 0:
                what = "predicted" if self.confidence is None else f"{self.confidence:g} upper"
                reasons.append(f"{name} {what} {cost:.4g} > budget {budget:g}")
        limit_reason = _limit_reason(constraints, space)
        if limit_reason:
            reasons.append(limit_reason)
        if self.normalize and _LIMIT_CONSTRAINT in constraints:
            constraints[_LIMIT_CONSTRAINT] /= float(space.limits["max_gflops_per_batch"])
        trial.set_user_attr(_ATTR_BUDGETS, dict(self.budgets))
        _record(trial, constraints)
        if self.prune and reasons:
            reason = "; ".join(reasons)
            trial.set_user_attr(_ATTR_PRUNED, reason)
            raise optuna.TrialPruned(f"carb_nas: {config.key} predicted infeasible: {reason}")
        return config

    def constraints_func(self, trial: optuna.trial.FrozenTrial) -> list[float]:
        """Constraint values of a finished trial for samplers that take ``constraints_func=``.

        Budget constraints come first in the order of ``budgets``, then any other carb_nas
        constraint (the space limit) by name. Optuna >= 5 samplers do not need this: they read
        the constraints :meth:`suggest` records with ``set_constraint``.
        """
        stored = stored_constraints(trial)
        missing = [n for n in self.constraint_names if n not in stored]
        if missing:
            raise BudgetError(
                f"trial {trial.number} has no recorded value for constraint(s) {missing}: "
                f"expected CostConstraints.suggest(trial, space) with these budgets to run in "
                f"the objective, got constraints {sorted(stored)}. Call suggest first in the "
                "objective, with the same budgets as this CostConstraints."
            )
        rest = sorted(n for n in stored if n not in self.constraint_names)
        return [stored[n] for n in self.constraint_names + rest]
