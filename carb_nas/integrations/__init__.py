"""carb_nas inside your own loops: the Optuna plugin and the pymoo ``Problem``.

- :class:`CostConstraints` adds a suggested config, its predicted costs and one constraint per
  budget to the trials of an Optuna study you already have (see ``_optuna_plugin``);
  :func:`suggest_config`, :func:`param_names`, :func:`config_params`, :func:`trial_config` and
  :func:`stored_constraints` are the trial parameters without costs.
- :class:`SpaceProblem` is a pymoo ``Problem`` over a space with a cost model as surrogate.

The module names (``_optuna_plugin``, ``_pymoo_problem``) shadow neither library.
"""

from carb_nas.integrations._optuna_plugin import CostConstraints
from carb_nas.integrations._pymoo_problem import SpaceProblem
from carb_nas.search.trial_params import (
    PARAM_PREFIX,
    claim_constraint_scale,
    config_params,
    param_names,
    stored_constraints,
    suggest_config,
    trial_config,
)

__all__ = [
    "CostConstraints",
    "SpaceProblem",
    "suggest_config",
    "param_names",
    "config_params",
    "trial_config",
    "stored_constraints",
    "claim_constraint_scale",
    "PARAM_PREFIX",
]
