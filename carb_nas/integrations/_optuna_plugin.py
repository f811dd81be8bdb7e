"""Predicted costs and budget constraints for an Optuna study you already have.

Your study keeps its objective, directions, sampler and storage; one call inside the objective
adds predicted costs and one constraint per budget, either to the network your objective
builds itself (:meth:`CostConstraints.constrain`, with the platform's kernel-level module model:
any CNN)::

    from carb_nas.integrations import CostConstraints

    costs = CostConstraints("default", budgets={"latency_ms": 50}, prune=True)

    def objective(trial):
        net = build_my_cnn(trial)                     # your own network and hyperparameters
        costs.constrain(trial, net, (16, 3, 32, 32))  # trace, predict, constrain (maybe prune)
        return train_and_evaluate(net)

or to a config suggested from a carb_nas space (:meth:`CostConstraints.suggest`)::

    import optuna
    from carb_nas.integrations import CostConstraints

    costs = CostConstraints("cpu/torch/fp32", budgets={"latency_ms": 50})

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

import optuna  # absolute import: the real optuna (this module's name shadows nothing)
import pandas as pd

from carb_nas.budgets import (
    check_budgets,
    check_confidence,
    confidence_alpha,
    metric_values,
    model_targets,
    parse_budgets,
    platform_name,
)
from carb_nas.errors import BudgetError, ModelError
from carb_nas.predictors import load_predictor
from carb_nas.scoring import trained_families_note, trained_levels
from carb_nas.search.trial_params import (
    ATTR_BUDGETS,
    ATTR_CONFIDENCE,
    ATTR_KEY,
    ATTR_PREDICTED,
    ATTR_PRUNED,
    ATTR_UNMODELLED,
    LIMIT_CONSTRAINT,
    PARAM_PREFIX,
    as_space,
    claim_constraint_scale,
    limit_reason,
    record_constraints,
    space_limit_constraints,
    stored_constraints,
    suggest_knobs,
)
from carb_nas.space import Config, Space, configs_to_frame


def _model_inputs(frame: pd.DataFrame) -> pd.DataFrame:
    from carb_nas.costmodel import model_inputs  # lazily: keeps param-only use light

    return model_inputs(frame)


#: what ``CostConstraints(model)`` takes for the default platform's predictor
DEFAULT_MODULE_MODEL = "default"
DEFAULT_PLATFORM = "cpu/torch/fp32"


def _is_module_model(model: Any) -> bool:
    from carb_nas.costmodel import ModuleCostModel

    return isinstance(model, ModuleCostModel)


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
        model: anything :func:`carb_nas.load_predictor` takes: a shipped platform name
            such as ``"cpu/torch/fp32"`` (``"default"`` or ``None``: that one), a directory a
            ``save`` wrote, a fitted model or a loaded predictor. A platform's CARB cascade
            predicts configs of the families its data holds; its kernel-level module model
            (``cpu/torch/fp32``) every other network, including the modules given to
            :meth:`constrain` -- as ``carb_nas.predict_costs`` and the CLI predict them.
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
        calibrated: apply this machine's calibration of the model's platform (made by
            ``carb-nas calibrate PLATFORM``) when it exists -- the default, as every command
            and ``carb_nas.predict_costs`` do; ``False`` predicts uncalibrated. Only a
            platform name (or ``"default"``) has a calibration.

    The study's directions, sampler and storage are never touched; the values written are
    plain JSON, so any storage (in-memory, JournalStorage, RDB) works.
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODULE_MODEL,
        budgets: Mapping[str, float] | None = None,
        *,
        confidence: float | None = None,
        prune: bool = False,
        normalize: bool = False,
        calibrated: bool = True,
    ) -> None:
        # Validated before any trial runs: a typo in a budget must not surface after hours
        # (the options first: a bad one costs no first-use training of the default model).
        confidence = check_confidence(confidence)
        for name, flag in (("prune", prune), ("normalize", normalize), ("calibrated", calibrated)):
            if not isinstance(flag, bool):
                raise BudgetError(f"invalid {name}: expected True or False, got {flag!r}.")
        parsed = parse_budgets(budgets)
        default = model is None or (isinstance(model, str) and model == DEFAULT_MODULE_MODEL)
        self.predictor = load_predictor(DEFAULT_PLATFORM if default else model,
                                        calibrated=calibrated, role="cost model")  # fmt: skip
        base = self.predictor.config_model
        self.model = _one_row_model(base if base is not None else self.predictor.module_model)
        # this machine's factors, per target, where the model given is a module model alone
        self.factors: dict[str, float] = {} if base is not None else self.predictor.module_factors
        self.kernel_level = _is_module_model(self.model)
        self.calibrated = self.predictor.calibrated
        self.targets = model_targets(self.model)
        # The same budget rules as `carb-nas screen/search --budget` (carb_nas.budgets).
        self.budgets = parsed
        check_budgets(self.budgets, self.model, role="cost model")
        self.confidence = None if confidence is None else float(confidence)
        self.prune = prune
        self.normalize = normalize
        self._warned_spaces: set[str] = set()
        self._scaled_studies: set[tuple[int, str]] = set()
        self._warned_module = False
        self._warned_ops: set[str] = set()
        self._checked_module = False

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
        model, factors = self._predictor([config.family])
        if _is_module_model(model):
            return self._predict(config, None, model, factors)
        X = _model_inputs(configs_to_frame([config]))
        return self._predict(config, X, model, factors)

    def _predictor(self, families: list[str] | None) -> tuple[Any, dict[str, float]]:
        """``(model, factors)`` that predict networks of ``families`` (``None``: a user's
        module): the platform's CARB cascade for families its data holds, its module model
        (times this machine's factors) for the others, as ``PlatformPredictor`` routes."""
        p = self.predictor
        if p.module_model is None or p.config_model is None:
            return self.model, self.factors
        known = p.config_families()
        if families is not None and (known is None or set(families) <= set(known)):
            return self.model, self.factors
        if not self._checked_module:
            check_budgets(self.budgets, p.module_model, role=f"{p.platform} module model")
            self._checked_module = True
        return p.module_model, p.module_factors

    def _predict(
        self, config: Config, X: Any, model: Any, factors: Mapping[str, float]
    ) -> dict[str, float]:
        alpha = confidence_alpha(self.confidence)
        if _is_module_model(model):  # the config's network, built on the meta device, traced
            from carb_nas.models import ModelSpec
            from carb_nas.scoring import predict_spec

            self._check_module_platform(config, model)
            frame, _ = predict_spec(model, ModelSpec.from_config(config), alpha)
        else:
            frame = model.predict(X) if alpha is None else model.predict(X, alpha=alpha)
        return self._costs(frame.iloc[0], repr(config), factors)

    def _costs(self, row: Any, what: str, factors: Mapping[str, float]) -> dict[str, float]:
        """``{target: value}`` (plus ``_lower``/``_upper`` with a confidence) of a predicted
        row, times ``factors``; ModelError for non-finite values."""
        out: dict[str, float] = {}
        for target in self.targets:
            f = factors.get(target, 1.0)
            out[target] = f * float(row[target])
            if self.confidence is not None:
                out[f"{target}_lower"] = f * float(row[f"{target}_lower"])
                out[f"{target}_upper"] = f * float(row[f"{target}_upper"])
        bad = [k for k, v in out.items() if not math.isfinite(v)]
        if bad:
            raise ModelError(
                f"cost model returned non-finite predictions for {what}: expected finite "
                f"numbers, got {[(k, out[k]) for k in bad]}. Check the model's training data."
            )
        return out

    def _check_module_platform(self, config: Config, model: Any) -> None:
        """A module model predicts its own platform's runtime and precision only."""
        parts = platform_name(model).split("/")
        runtime, precision = (parts[1], parts[2]) if len(parts) == 3 else ("torch", "fp32")
        if (config.runtime, config.precision) != (runtime, precision):
            raise ModelError(
                f"the kernel-level module model predicts {platform_name(model)}: expected "
                f"configs of runtime {runtime!r} and precision {precision!r}, got "
                f"{config.runtime!r} / {config.precision!r} ({config.key}). Use a CostModel "
                "of that platform for this space (CostConstraints('cpu/<runtime>/<precision>')) "
                f"or a space of {runtime} {precision} configs."
            )

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
        space = as_space(space)
        model, factors = self._predictor(sorted(space.families))
        kernel = _is_module_model(model)
        if not kernel:  # a module model predicts any family's network
            self._check_space(space)
        self._check_scale(trial)
        config = suggest_knobs(trial, space)
        X = _model_inputs(configs_to_frame([config]))  # featurized once for costs and limits
        constraints = space_limit_constraints(config, space, trial, flops=X["flops"].iloc[0])
        predicted = self._predict(config, None if kernel else X, model, factors)
        self._record(trial, predicted, config.batch_size, constraints, config.key, space)
        return config

    def constrain(
        self,
        trial: optuna.trial.BaseTrial,
        module: Any,
        input_shape: Any,
    ) -> dict[str, float]:
        """Predicted costs and budget constraints for your own ``nn.Module`` (any CNN your
        objective builds from its own hyperparameters), before you train it.

        ``input_shape``: one batch, batch first, e.g. ``(32, 3, 224, 224)``; budgets are per
        that batch (``<target>_per_image`` divides by its size). The module is traced on the
        meta device (its weights are untouched, nothing runs); the costs become user
        attributes ``carb_nas.predicted.<target>`` (with ``_lower`` / ``_upper`` when a
        ``confidence`` is set), each budget one ``set_constraint`` value
        ``carb_nas.<target>``, and with ``prune=True`` an over-budget module raises
        :class:`optuna.TrialPruned` here. Returns the predicted costs.

        With the kernel-level module model (the default, and a platform name's module model
        such as ``"cpu/torch/fp32"``'s) every operator of the module is
        predicted by the per-operator models; ops it never measured get an estimate (by their
        kind's measured ops, or the roofline)
        and widen the interval by it, and are listed in the user attribute
        ``carb_nas.unmodelled_ops`` (a warning names them, once per new op). A config-table
        CostModel (trained on ResNets) predicts from the network features alone: other
        architectures get a warning (once) and rougher predictions. A module that is not an
        ``nn.Module``, an input shape it rejects or an op without a meta kernel raise
        ``ConfigError`` before anything is written to the trial.
        """
        from carb_nas.models import ModelSpec
        from carb_nas.scoring import predict_spec

        model, factors = self._predictor(None)
        kernel = _is_module_model(model)
        known = trained_levels(model, "precision")
        precision = known[0] if known and len(known) == 1 else "fp32"
        spec = ModelSpec.from_module(module, input_shape, precision)
        alpha = confidence_alpha(self.confidence)
        frame, unseen = predict_spec(model, spec, 0.1 if alpha is None else alpha)
        row = frame.iloc[0]
        predicted = self._costs(row, spec.name, factors)
        if kernel:
            unmodelled = [str(op) for op in row["unmodelled_ops"]]
            new = sorted(set(unmodelled) - self._warned_ops)
            if new:
                self._warned_ops.update(new)
                warnings.warn(
                    f"the module cost model ({platform_name(model)}) never measured ops "
                    f"{new} of this module: their estimate (by their kind's measured ops, or the "
                    "roofline) is added to its costs and "
                    "widens the latency interval by as much; measure such a network "
                    "(carb-nas profile --model-spec) for firm budgets.",
                    UserWarning,
                    stacklevel=2,
                )
        elif unseen and not self._warned_module:
            self._warned_module = True
            warnings.warn(
                f"the cost model never saw this architecture "
                f"({trained_families_note(model)}): its costs are predicted from the "
                "architecture features alone; expect rough predictions until a model is "
                "trained on such networks, or use the kernel-level module model "
                "(CostConstraints('default')).",
                UserWarning,
                stacklevel=2,
            )
        self._check_scale(trial)  # the first write to the study: after every check
        trial.set_user_attr(ATTR_KEY, spec.key)
        if kernel:
            trial.set_user_attr(ATTR_UNMODELLED, unmodelled)
        self._record(trial, predicted, spec.batch_size, {}, spec.key, None)
        return predicted

    def _record(
        self,
        trial: Any,
        predicted: dict[str, float],
        batch_size: int,
        constraints: dict[str, float],
        key: str,
        space: Space | None,
    ) -> None:
        """User attributes, one constraint per budget (and the space's limit), pruning."""
        for name, value in predicted.items():
            trial.set_user_attr(ATTR_PREDICTED + name, value)
        if self.confidence is not None:
            trial.set_user_attr(ATTR_CONFIDENCE, self.confidence)
        reasons = []
        upper = self.confidence is not None
        pred = pd.DataFrame([predicted])
        for name, budget in self.budgets.items():
            cost = float(metric_values(pred, name, batch_size, upper=upper)[0])
            excess = cost - budget
            constraints[PARAM_PREFIX + name] = excess / budget if self.normalize else excess
            if excess > 0:
                what = "predicted" if self.confidence is None else f"{self.confidence:g} upper"
                reasons.append(f"{name} {what} {cost:.4g} > budget {budget:g}")
        if space is not None:
            why_limit = limit_reason(constraints, space)
            if why_limit:
                reasons.append(why_limit)
            if self.normalize and LIMIT_CONSTRAINT in constraints:
                constraints[LIMIT_CONSTRAINT] /= float(space.limits["max_gflops_per_batch"])
        trial.set_user_attr(ATTR_BUDGETS, dict(self.budgets))
        record_constraints(trial, constraints)
        if self.prune and reasons:
            reason = "; ".join(reasons)
            trial.set_user_attr(ATTR_PRUNED, reason)
            raise optuna.TrialPruned(f"carb_nas: {key} predicted infeasible: {reason}")

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
