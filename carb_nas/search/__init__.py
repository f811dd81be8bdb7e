"""Budget-constrained multi-objective search with a cost model as the surrogate.

The surrogate evaluator (``_evaluator``), the pymoo backend (``_pymoo``), the Optuna backend
(``_optuna``, with the trial parameters of :mod:`carb_nas.search.trial_params`) and the search
itself (``_search``). For users' own loops, :mod:`carb_nas.integrations` holds the Optuna plugin
and the pymoo ``Problem``.
"""

from carb_nas.search._encoding import SpaceEncoding
from carb_nas.search._evaluator import SurrogateEvaluator, check_objectives, default_objectives
from carb_nas.search._optuna import SAMPLERS, make_sampler, open_study, run_optuna
from carb_nas.search._pymoo import (
    EvaluatorProblem,
    check_pop_size,
    refine_front,
    run_pymoo,
    screened_refine,
)
from carb_nas.search._quality import (
    QUALITY,
    QualityError,
    call_quality,
    capacity_proxy,
    load_quality,
)
from carb_nas.search._search import (
    BACKENDS,
    PARETO_KNOBS,
    SearchResult,
    check_search_args,
    search,
)

__all__ = [
    "search",
    "SearchResult",
    "SurrogateEvaluator",
    "SpaceEncoding",
    "EvaluatorProblem",
    "capacity_proxy",
    "call_quality",
    "check_objectives",
    "default_objectives",
    "check_pop_size",
    "check_search_args",
    "load_quality",
    "make_sampler",
    "open_study",
    "run_optuna",
    "run_pymoo",
    "refine_front",
    "screened_refine",
    "QualityError",
    "QUALITY",
    "BACKENDS",
    "PARETO_KNOBS",
    "SAMPLERS",
]
