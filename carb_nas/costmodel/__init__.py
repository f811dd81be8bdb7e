"""The CARB cost model: a cascade of blended tree ensembles with low-batch correctors.

Method (seed 001, "CARB Prediction Framework"; the ``carb`` preset reproduces it):

* **Features.** Numeric columns of ``X`` are used as they are, except heavy-tailed ones, which
  are replaced by ``log1p`` (see :data:`HEAVY_TAILED`, plus any non-negative column whose
  training skewness exceeds 2). Categorical columns (object, string or category dtype, e.g.
  ``family``, ``precision``, ``runtime``) are one-hot encoded with the levels seen in training.
  When ``sm_util`` and ``mem_util`` telemetry exist, CARB's interaction features are added:
  ``batch_x_sm = batch_size * sm_util``, ``flops_x_sm = log1p(flops) * sm_util``,
  ``act_x_mem = log1p(act_mb_total) * mem_util`` and ``util_product = sm_util * mem_util``.
  ``architecture_only=True`` drops every telemetry column (:data:`TELEMETRY_COLUMNS`).
* **Targets.** Strictly positive targets are modelled in log space (``log_targets="auto"``)
  and back-transformed with ``exp``; the others in their own units.
* **Specialists.** Per target, XGBoost (800 trees, depth 9), LightGBM (800 trees, 127 leaves)
  and ExtraTrees (400 trees); other hyperparameters are the libraries' defaults. Blend
  weights are chosen by grid search over the simplex (step ``blend_step``) to minimise the
  squared error in the target's own units on a validation split.
* **Cascade.** Targets are fitted in the order peak memory -> energy -> latency (targets the
  data lacks are skipped); each later target sees the earlier targets' *predictions* as
  features (``pred_<target>``, in model space). At training time the training rows carry
  ``cascade_folds``-fold **out-of-fold** predictions of a LightGBM cascade learner (never the
  measured values, which would leak and make the downstream learners over-trust the feature);
  validation and calibration rows, and ``predict``, carry the specialist's own (blended,
  corrected) predictions.
* **Low-batch corrector.** When ``X`` has ``batch_size``, a LightGBM model per target is fitted
  on the specialist's validation residuals of the low-batch rows
  (``batch_size <= low_batch_threshold``); predictions there become
  ``specialist + corrector_damping * correction`` (0.9 in CARB).
* **Intervals.** Split-conformal per target on a held-out calibration split, Mondrian by batch
  regime (low batch vs the rest): the scores are absolute residuals in model space (relative
  errors for log-space targets), so ``predict(X, alpha)`` gives ``[pred * e^-q, pred * e^q]``
  with coverage >= 1 - alpha per regime under exchangeability. A regime with fewer than
  ``MIN_CONFORMAL`` (20) calibration rows uses the pooled scores.

Extension (off by default, not part of CARB): ``target_offsets`` makes the learners fit the
log-ratio of a target to a positive feature column (peak memory to ``tensor_peak_mb``) or to
a fitted non-negative sum of resource columns (latency and energy to :data:`PHYSICAL_OFFSETS`:
FLOPs, native-kernel FLOPs, weight MB, activation MB, MB faulted in per call, layer count), so
the trees predict a bounded ratio and extrapolate beyond the largest training values. On the
shipped cpu/torch/fp32 rows (held-out 20 %, seed 0, carb preset) it lifts R2 from 0.9995 to
1.0000 for memory and from 0.943 to 0.993 for latency (MAPE 5.3 % to 3.3 %).

Rows are split once (seeded, stratified by batch regime) into training
(1 - ``validation_fraction`` - ``calibration_fraction``), validation and calibration parts.

Persistence never uses pickle: :meth:`CostModel.save` writes XGBoost UBJSON, LightGBM text,
skops for ExtraTrees (loaded with an explicit trusted-type list) and a JSON manifest with the
schema, blend weights, conformal scores, versions, training-data hash, platform fingerprint,
a SHA-256 of every file and one of the manifest's own content; :meth:`CostModel.load` checks
all of it.

Layout: ``_estimator`` (CostModel), ``_schema`` (the input schema), ``_learners`` (presets
resolved to explicit parameters, threads), ``_intervals`` (conformal), ``_persist`` (save/load),
``_prepare`` (rows -> X/Y, physical offsets), ``_defaults`` (default-model registry, load_model),
``_metrics`` and ``_evaluation`` (scoring the way the CARB paper does).
"""

from carb_nas.costmodel._calibration import (
    CALIBRATION_FEATURES,
    CALIBRATION_METHODS,
    INFORMATIVE_KINDS,
    MANY_ROWS_FEATURES,
    MAX_FACILITY_POINTS,
    MIN_PRIOR_CONFIGS,
    PRIOR_MAP_COLUMNS,
    CalibratedModel,
    ModuleRatio,
    TransferPrior,
    calibrate,
    calibration_feature_names,
    calibration_features,
    facility_location_order,
    fit_module_ratio,
    fit_transfer_prior,
    informative_rows,
    nearest_distance,
    penalized_fit,
)
from carb_nas.costmodel._common import (
    FORMAT_VERSION,
    MIN_TRAIN_ROWS,
    TELEMETRY_COLUMNS,
    frame_sha256,
    relative_nnls,
)
from carb_nas.costmodel._configs import ConfigModuleModel
from carb_nas.costmodel._defaults import (
    CACHE_ENV,
    DEFAULT_MODEL_PARAMS,
    DEFAULT_MODULE_DATASET,
    DEFAULT_MODULE_PARAMS,
    MODULE_CPU_KINDS,
    check_model,
    default_model_cache_dir,
    default_model_dir,
    is_module_model_dir,
    load_default_model,
    load_default_module_model,
    module_cpu_kind,
    ship_default_module_model,
    shipped_module_model_dir,
    zoo_dataset_paths,
    zoo_kernel_samples_path,
)
from carb_nas.costmodel._estimator import CostModel
from carb_nas.costmodel._evaluation import (
    budget_classification,
    corrector_effect,
    default_budgets,
    evaluate,
    feature_importance,
    flops_linear_baseline,
    flops_linear_baseline_cv,
    interval_coverage,
    latency_energy_proxy,
    leave_one_batch_tier_out,
    parity_plots,
    score,
    telemetry_ablation,
)
from carb_nas.costmodel._intervals import MIN_CONFORMAL
from carb_nas.costmodel._kernels import (
    KERNEL_SUM,
    MEMORY_MODES,
    MEMORY_TERMS,
    MODES,
    NETWORK_COLUMNS,
    KernelCostModel,
    ModuleCostModel,
    anchored_ops,
    family_groups,
    leave_one_family_out,
    lofo_kind_breakdown,
    lofo_report,
    network_lofo_report,
    network_tables,
)
from carb_nas.costmodel._learners import PRESETS, resolve_preset
from carb_nas.costmodel._metrics import regression_metrics
from carb_nas.costmodel._nodes import (
    NodeCostModel,
    NodeRatio,
    load_default_node_model,
    measured_table,
    node_ratio,
    node_rows_path,
    node_table,
    torch_measured_table,
)
from carb_nas.costmodel._persist import check_output_dir, manifest_sha256
from carb_nas.costmodel._prepare import (
    PHYSICAL_OFFSETS,
    TARGET_LIMITS,
    model_inputs,
    physical_offsets,
    prepare_table,
)
from carb_nas.costmodel._schema import HEAVY_TAILED

__all__ = [
    # the estimator and its inputs
    "CostModel",
    "model_inputs",
    "prepare_table",
    "physical_offsets",
    "PHYSICAL_OFFSETS",
    "TARGET_LIMITS",
    "PRESETS",
    "resolve_preset",
    "TELEMETRY_COLUMNS",
    "HEAVY_TAILED",
    "MIN_TRAIN_ROWS",
    "MIN_CONFORMAL",
    # persistence and the default models
    "FORMAT_VERSION",
    "frame_sha256",
    "relative_nnls",
    "manifest_sha256",
    "check_output_dir",
    "check_model",
    "load_default_model",
    "default_model_dir",
    "is_module_model_dir",
    "default_model_cache_dir",
    "DEFAULT_MODEL_PARAMS",
    "CACHE_ENV",
    "load_default_module_model",
    "ship_default_module_model",
    "shipped_module_model_dir",
    "DEFAULT_MODULE_DATASET",
    "DEFAULT_MODULE_PARAMS",
    "MODULE_CPU_KINDS",
    "module_cpu_kind",
    "zoo_dataset_paths",
    "zoo_kernel_samples_path",
    # evaluation
    "regression_metrics",
    "score",
    "flops_linear_baseline",
    "flops_linear_baseline_cv",
    "latency_energy_proxy",
    "leave_one_batch_tier_out",
    "telemetry_ablation",
    "feature_importance",
    "interval_coverage",
    "corrector_effect",
    "budget_classification",
    "default_budgets",
    "parity_plots",
    "evaluate",
    # few-shot calibration to a new platform
    "CalibratedModel",
    "ModuleRatio",
    "NodeCostModel",
    "NodeRatio",
    "load_default_node_model",
    "node_ratio",
    "measured_table",
    "node_rows_path",
    "node_table",
    "torch_measured_table",
    "MIN_PRIOR_CONFIGS",
    "PRIOR_MAP_COLUMNS",
    "TransferPrior",
    "calibrate",
    "fit_module_ratio",
    "fit_transfer_prior",
    "calibration_features",
    "calibration_feature_names",
    "INFORMATIVE_KINDS",
    "MAX_FACILITY_POINTS",
    "facility_location_order",
    "informative_rows",
    "nearest_distance",
    "penalized_fit",
    "CALIBRATION_FEATURES",
    "MANY_ROWS_FEATURES",
    "CALIBRATION_METHODS",
    # any module: per-operator models summed, corrected by the network cascade
    "KernelCostModel",
    "ModuleCostModel",
    "ConfigModuleModel",
    "network_tables",
    "anchored_ops",
    "leave_one_family_out",
    "lofo_report",
    "network_lofo_report",
    "lofo_kind_breakdown",
    "family_groups",
    "MODES",
    "MEMORY_MODES",
    "MEMORY_TERMS",
    "NETWORK_COLUMNS",
    "KERNEL_SUM",
]
