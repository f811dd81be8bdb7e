"""The Optuna backend: NSGA-II or TPE over a space, one trial per config, on any storage.

Budgets are recorded with ``Trial.set_constraint`` as relative excesses (the plugin's
``normalize=True`` scale, claimed on the study); predictions as user attributes. Only Optuna's
public API is used (``create_study``, ``ask``/``tell``, ``set_constraint``, ``set_user_attr``).

A study is claimed for one search: its space (fingerprint), the cost model's platform and the
constraint scale are study user attributes, set by the first process and checked by every other
(several processes, e.g. on several hosts, may search one study on a shared PostgreSQL).
"""

from __future__ import annotations

import os
import socket
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd

from carb_nas.errors import ConfigError, StorageError
from carb_nas.search._evaluator import SurrogateEvaluator
from carb_nas.search._quality import QUALITY
from carb_nas.search.trial_params import (
    ATTR_GFLOPS,
    ATTR_PREDICTED,
    LIMIT_CONSTRAINT,
    PARAM_PREFIX,
    claim_constraint_scale,
    claim_study_attr,
    record_constraints,
    suggest_knobs,
)
from carb_nas.space import CONFIG_COLUMNS
from carb_nas.storage import open_storage, redact_url

SAMPLERS = ("nsga2", "tpe")
ATTR_SPACE = "carb_nas.space"
ATTR_PLATFORM = "carb_nas.platform"
#: ``host:pid`` of the process that evaluated a trial (several processes may share a study)
ATTR_WORKER = "carb_nas.worker"


def claim_study(study: Any, attr: str, value: str, what: str, fix: str) -> None:
    """Record ``value`` as the study's ``attr``, or refuse one that holds another value."""

    def refuse(held: str) -> StorageError:
        return StorageError(
            f"study {study.study_name!r} already exists with another {what}: expected "
            f"{held!r} (as recorded in the study), got {value!r}. {fix}"
        )

    claim_study_attr(study, attr, value, refuse)


def _platform_name(model: Any) -> str | None:
    platform = getattr(model, "platform_", None)
    if isinstance(platform, dict):
        return str(platform.get("platform") or sorted(platform.items()))
    return None if platform is None else str(platform)


def open_study(
    storage: str | None,
    study_name: str | None,
    directions: Sequence[Literal["minimize", "maximize"]],
    sampler: Any,
) -> Any:
    """Create or load an Optuna study (None storage: in memory); clear errors for a storage
    that does not open (:func:`carb_nas.storage.open_storage`) or an existing study whose
    directions differ."""
    import optuna

    if study_name is not None and storage is None:
        raise StorageError(
            f"--study-name {study_name!r} without --storage: expected a storage URL to keep the "
            "study in, got none. Add e.g. --storage sqlite:///search.db."
        )
    store = open_storage(storage) if storage is not None else None
    try:
        study = optuna.create_study(
            storage=store,
            study_name=study_name,
            directions=list(directions),
            sampler=sampler,
            load_if_exists=True,
        )
    except Exception as e:  # noqa: BLE001 - optuna/sqlalchemy raise many kinds
        first = str(e).splitlines()[0] if str(e) else ""
        raise StorageError(
            f"cannot create or load study {study_name!r} in {redact_url(storage or '')!r}: "
            f"expected a study with directions {list(directions)}, got {type(e).__name__}: "
            f"{first}. Use another --study-name or storage."
        ) from e
    want = [d.lower() for d in directions]
    have = [d.name.lower() for d in study.directions]
    if want != have:
        raise StorageError(
            f"study {study_name!r} already exists with directions {have}: expected {want} for "
            "these objectives. Use another --study-name or the same --objectives."
        )
    return study


def make_sampler(sampler_name: str, pop_size: int, seed: int) -> Any:
    import optuna

    if sampler_name == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=pop_size, seed=seed)
    if sampler_name == "tpe":
        with warnings.catch_warnings():  # multivariate/group are "experimental" in name only
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    raise ConfigError(
        f"unknown Optuna sampler: expected one of {list(SAMPLERS)}, got {sampler_name!r}. "
        "Use --sampler nsga2 or --sampler tpe."
    )


def run_optuna(
    ev: SurrogateEvaluator,
    n_trials: int,
    sampler_name: str,
    pop_size: int,
    seed: int,
    storage: str | None,
    study_name: str | None,
) -> Any:
    """Ask/tell ``n_trials`` trials in batches (a population for NSGA-II); returns the study."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler(sampler_name, pop_size, seed)
    directions: list[Literal["minimize", "maximize"]] = [
        "maximize" if o == QUALITY else "minimize" for o in ev.objectives
    ]
    study = open_study(storage, study_name, directions, sampler)
    if study_name is not None:
        fix = "Use another --study-name, or the space and model the study was started with."
        claim_study(study, ATTR_SPACE, ev.space.fingerprint, "space", fix)
        platform = _platform_name(ev.model)
        if platform is not None:
            claim_study(study, ATTR_PLATFORM, platform, "platform (cost model)", fix)
    if ev.budgets or ev.limit_flops is not None:  # relative excess: one scale per study
        claim_constraint_scale(study, relative=True)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    batch = pop_size if sampler_name == "nsga2" else max(1, min(pop_size, 8))
    done = 0
    while done < n_trials:
        k = min(batch, n_trials - done)
        trials = [study.ask() for _ in range(k)]
        configs = [suggest_knobs(t, ev.space) for t in trials]
        frame = pd.DataFrame([c.as_dict() for c in configs], columns=list(CONFIG_COLUMNS))
        res = ev.evaluate(frame)  # featurized and predicted once per distinct config
        F = ev.F(res)
        for i, trial in enumerate(trials):
            row = res.iloc[i]
            trial.set_user_attr(ATTR_WORKER, worker)
            constraints = {f"{PARAM_PREFIX}{name}": float(row[f"g_{name}"]) for name in ev.budgets}
            if ev.limit_flops is not None:
                trial.set_user_attr(ATTR_GFLOPS, float(row["gflops_per_batch"]))
                constraints[LIMIT_CONSTRAINT] = float(row["g_space_limit"])
            if constraints:
                record_constraints(trial, constraints)
            for t in ev.targets:
                trial.set_user_attr(f"{ATTR_PREDICTED}{t}", float(row[t]))
            if ev.uses_quality:
                trial.set_user_attr(f"{PARAM_PREFIX}quality", float(row[QUALITY]))
            values = [
                -float(F[i, j]) if o == QUALITY else float(F[i, j])
                for j, o in enumerate(ev.objectives)
            ]
            study.tell(trial, values)
        done += k
    return study
