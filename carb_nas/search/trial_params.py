"""Optuna trial parameters of a carb_nas space: stable names, suggestion, stored attributes.

Shared by the Optuna search backend (:func:`carb_nas.search.search` with ``backend="optuna"``)
and the Optuna plugin (:class:`carb_nas.integrations.CostConstraints`). Everything goes through
Optuna's public trial and study API (``suggest_categorical``, ``set_user_attr``,
``set_constraint``, ``user_attrs``).

Parameter names are part of the public API and stay fixed across releases (see
:func:`param_names`); every parameter is categorical, so TPE, NSGA-II, random and grid samplers
all handle them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from carb_nas.errors import BudgetError, ConfigError
from carb_nas.space import Config, Space, configs_to_frame, load_space

__all__ = [
    "PARAM_PREFIX",
    "SUGGESTED_KNOBS",
    "ATTR_CONFIG",
    "ATTR_KEY",
    "ATTR_CONSTRAINTS",
    "ATTR_BUDGETS",
    "ATTR_CONFIDENCE",
    "ATTR_PREDICTED",
    "ATTR_GFLOPS",
    "ATTR_PRUNED",
    "ATTR_UNMODELLED",
    "ATTR_SCALE",
    "LIMIT_CONSTRAINT",
    "as_space",
    "param_names",
    "suggest_knobs",
    "suggest_config",
    "config_params",
    "trial_config",
    "stored_constraints",
    "space_limit_constraints",
    "limit_reason",
    "record_constraints",
    "claim_study_attr",
    "claim_constraint_scale",
]

PARAM_PREFIX = "carb_nas."
# Knobs suggested after the family, in this order. Their order fixes the order of suggest calls,
# which keeps relative samplers (e.g. CMA-ES groups, TPE multivariate) reproducible.
SUGGESTED_KNOBS = ("depth", "width", "resolution", "batch_size", "precision", "runtime")
# Depth values always differ by family (2 + 2k basic vs 2 + 3k bottleneck), so depth is always a
# per-family parameter; other knobs are shared unless the space gives families other values.
_ALWAYS_PER_FAMILY = ("depth",)

ATTR_CONFIG = PARAM_PREFIX + "config"
ATTR_KEY = PARAM_PREFIX + "config_key"
ATTR_CONSTRAINTS = PARAM_PREFIX + "constraints"
ATTR_BUDGETS = PARAM_PREFIX + "budgets"
ATTR_CONFIDENCE = PARAM_PREFIX + "confidence"
ATTR_PREDICTED = PARAM_PREFIX + "predicted."
ATTR_GFLOPS = PARAM_PREFIX + "gflops_per_batch"
ATTR_PRUNED = PARAM_PREFIX + "pruned_reason"
# the ops of a constrained module the kernel-level module model never measured (their roofline
# estimate is in the costs and widens the interval)
ATTR_UNMODELLED = PARAM_PREFIX + "unmodelled_ops"
LIMIT_CONSTRAINT = PARAM_PREFIX + "space.max_gflops_per_batch"
# study attribute: the scale of the study's carb_nas budget constraints ("absolute": cost -
# budget; "relative": (cost - budget) / budget, what `carb-nas search` writes). Samplers sum
# constraint values across trials, so one study must not mix the two under the same names.
ATTR_SCALE = PARAM_PREFIX + "constraint_scale"


# -- parameters -------------------------------------------------------------------------------
def as_space(space: Space | str | Path) -> Space:
    """``space`` as a Space (a TOML path or bundled name is loaded once per process)."""
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
    space = as_space(space)
    names = [PARAM_PREFIX + "family"]
    for knob in SUGGESTED_KNOBS:
        for family in space.families:
            name = _param_name(space, knob, family)
            if name not in names:
                names.append(name)
    return names


def _native(value: Any) -> Any:
    # Optuna categorical choices must be None, bool, int, float or str (no numpy scalars),
    # and JSON storages must be able to write them.
    return value.item() if isinstance(value, np.generic) else value


def suggest_knobs(trial: optuna.trial.BaseTrial, space: Space) -> Config:
    """Suggest one value per knob and store the config on the trial (no constraints)."""
    family = trial.suggest_categorical(PARAM_PREFIX + "family", list(space.families))
    values: dict[str, Any] = {"family": family}
    for knob in SUGGESTED_KNOBS:
        choices = [_native(v) for v in space.knobs[family][knob]]
        values[knob] = trial.suggest_categorical(_param_name(space, knob, family), choices)
    config = Config(**values)
    trial.set_user_attr(ATTR_KEY, config.key)
    trial.set_user_attr(ATTR_CONFIG, config.as_dict())
    return config


def config_params(config: Config, space: Space | str | Path) -> dict[str, Any]:
    """The Optuna params that make :func:`suggest_config` return ``config``.

    Use it to enqueue known configs (a baseline, last release's network)::

        study.enqueue_trial(config_params(Config("basic", 18, 1.0, 64, 8), space))
    """
    space = as_space(space)
    if not isinstance(config, Config) or config not in space:
        raise ConfigError(
            f"config not in the space: expected a Config whose every value is one of "
            f"{space.name!r}'s values, got {config!r}. Pick values listed by "
            "`carb-nas space show` for that space."
        )
    params: dict[str, Any] = {PARAM_PREFIX + "family": config.family}
    for knob in SUGGESTED_KNOBS:
        params[_param_name(space, knob, config.family)] = getattr(config, knob)
    return params


def trial_config(trial: optuna.trial.BaseTrial) -> Config:
    """The Config a trial evaluated (from its ``carb_nas.config`` user attribute)."""
    stored = trial.user_attrs.get(ATTR_CONFIG)
    if not isinstance(stored, Mapping):
        raise ConfigError(
            f"trial {trial.number} holds no carb_nas config: expected the user attribute "
            f"{ATTR_CONFIG!r} written by suggest_config or CostConstraints.suggest, got "
            f"user attributes {sorted(trial.user_attrs)}. Call one of them in the objective."
        )
    return Config(**stored)


def stored_constraints(trial: optuna.trial.BaseTrial) -> dict[str, float]:
    """The carb_nas constraints recorded on a trial, ``{name: value}`` (value <= 0 feasible).

    Empty when the trial never reached :meth:`CostConstraints.suggest` (e.g. it failed first).
    """
    stored = trial.user_attrs.get(ATTR_CONSTRAINTS)
    return {str(k): float(v) for k, v in stored.items()} if isinstance(stored, Mapping) else {}


def space_limit_constraints(
    config: Config, space: Space, trial: Any, flops: float | None = None
) -> dict[str, float]:
    """Constraints from the space's own ``[limits]``: the suggested knobs can combine into a
    config the space file leaves out (e.g. above ``max_gflops_per_batch``). ``flops``: the
    config's FLOPs per batch when already computed (else featurized here)."""
    limit = space.limits.get("max_gflops_per_batch")
    if limit is None:
        return {}
    if flops is None:
        from carb_nas.features import compute_features  # lazily: only for capped spaces

        flops = float(compute_features(configs_to_frame([config]))["flops"].iloc[0])
    gflops = float(flops) / 1e9
    trial.set_user_attr(ATTR_GFLOPS, gflops)
    return {LIMIT_CONSTRAINT: gflops - float(limit)}


def limit_reason(constraints: Mapping[str, float], space: Space) -> str | None:
    if constraints.get(LIMIT_CONSTRAINT, 0.0) <= 0:
        return None
    limit = float(space.limits["max_gflops_per_batch"])
    return f"above the space's limit of {limit:g} GFLOPs per batch"


def record_constraints(trial: Any, constraints: Mapping[str, float]) -> None:
    trial.set_user_attr(ATTR_CONSTRAINTS, dict(constraints))
    # Optuna >= 5 stores named constraints that every built-in sampler and best_trial(s)
    # read; older Optuna only has constraints_func, which reads the user attribute above.
    set_constraint = getattr(trial, "set_constraint", None)
    if set_constraint is not None:
        for name, value in constraints.items():
            set_constraint(name, value)


def claim_study_attr(study: Any, attr: str, value: str, refuse: Callable[[str], Exception]) -> None:
    """Record ``value`` as the study's user attribute ``attr`` (the first writer), or raise
    ``refuse(held)`` when the study already holds another value."""
    held = study.user_attrs.get(attr)
    if held is None:
        study.set_user_attr(attr, value)
    elif held != value:
        raise refuse(held)


def claim_constraint_scale(study: Any, relative: bool) -> None:
    """Record on ``study`` the scale of its carb_nas budget constraints, or check it.

    The first writer sets it; a later one with the other scale gets a
    :class:`~carb_nas.errors.BudgetError` before anything is written.
    """
    scale = "relative" if relative else "absolute"

    def refuse(held: str) -> BudgetError:
        return BudgetError(
            f"study {study.study_name!r} holds carb_nas budget constraints on the {held} scale "
            f"({'(cost - budget) / budget' if held == 'relative' else 'cost - budget'}), but "
            f"this writer uses the {scale} scale: samplers would add up values of both under "
            f"the same names. Use CostConstraints(..., normalize={held == 'relative'}) for "
            "this study (carb-nas search writes the relative scale), or a new study."
        )

    claim_study_attr(study, ATTR_SCALE, scale, refuse)


def suggest_config(trial: optuna.trial.BaseTrial, space: Space | str | Path) -> Config:
    """Suggest a config of ``space`` under the stable names of :func:`param_names`.

    Stores the config (user attributes ``carb_nas.config_key`` and ``carb_nas.config``).
    For a space with ``[limits]`` it also records the constraint
    ``carb_nas.space.max_gflops_per_batch`` (GFLOPs per batch minus the limit; <= 0 inside the
    space). No costs are predicted; use :class:`CostConstraints` for that.
    """
    space = as_space(space)
    config = suggest_knobs(trial, space)
    limits = space_limit_constraints(config, space, trial)
    if limits:
        record_constraints(trial, limits)
    return config
