"""Budget-constrained multi-objective search with a cost model as the surrogate.

The objectives are predicted costs (minimized) and a *quality* score (maximized); every budget
is a constraint ``value / limit - 1 <= 0`` (a relative excess, so budgets in different units
weigh alike). Two backends explore the same space:

- ``pymoo``: NSGA-II over an integer encoding of the space (one variable per knob, an index into
  the knob's sorted values, SBX + polynomial mutation with rounding repair). :class:`SpaceProblem`
  is a plain pymoo ``Problem`` and can be used on its own with any pymoo algorithm.
- ``optuna``: NSGA-II or TPE, one trial per config, budgets recorded with
  ``Trial.set_constraint`` (Optuna >= 5), on any storage (``--storage URL --study-name NAME``).

Every config the search evaluates is kept (predictions are cached per config), and the result
is the non-dominated set of *all* feasible evaluated configs, not only the last population.

Quality. Minimizing costs alone makes the smallest network win, so one objective says how good
a network is. The built-in default, :func:`capacity_proxy`, is ``log10(params) +
log10(FLOPs per image)``: it grows with depth, width and input resolution, the axes along which
ResNet accuracy grows in published scaling studies, with diminishing returns. It is a *proxy for
model capacity, not accuracy*: it knows nothing of the data set, the training recipe or
overfitting, and it ignores batch size, precision and runtime. Give your own with
``quality="module:function"`` (maximized), called as ``function(config)`` or
``function(config, features)`` (``config`` a :class:`carb_nas.space.Config`, ``features`` a dict
of its architecture features from :func:`carb_nas.features.compute_features`), returning a
finite number; or mark a function ``vectorized = True`` to receive one DataFrame (config columns
+ features) and return one value per row.
"""

from __future__ import annotations

import importlib
import inspect
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.errors import BudgetError, CarbNasError, ConfigError
from carb_nas.screen import (
    KNOWN_METRICS,
    _base_target,
    _model_targets,
    _platform_name,
    align_to_platform,
    check_budgets,
    metric_values,
    pareto_mask,
    parse_budgets,
    predict_frame,
)
from carb_nas.space import CONFIG_COLUMNS, KNOBS, Space, frame_to_configs, load_space

__all__ = [
    "search",
    "SearchResult",
    "SpaceProblem",
    "SpaceEncoding",
    "SurrogateEvaluator",
    "capacity_proxy",
    "check_objectives",
    "load_quality",
    "QualityError",
    "StorageError",
    "open_storage",
    "open_study",
    "QUALITY",
]

QUALITY = "quality"
_NUMERIC_KNOBS = ("depth", "width", "resolution", "batch_size")


class QualityError(ConfigError):
    """The quality callable cannot be imported, or raised, or returned something unusable."""


class StorageError(CarbNasError, ValueError):
    """An Optuna storage URL does not open, or the study does not match the search."""


# -- quality ---------------------------------------------------------------------------------
def capacity_proxy(frame: pd.DataFrame) -> np.ndarray:
    """Built-in quality: ``log10(params) + log10(FLOPs per image)`` (higher = more capacity).

    ``frame`` holds the config columns and the features ``params`` and ``flops`` (per batch).
    A proxy of capacity, NOT accuracy (see the module docstring).
    """
    params = frame["params"].to_numpy(dtype=float)
    flops_per_image = frame["flops"].to_numpy(dtype=float) / frame["batch_size"].to_numpy(float)
    return np.log10(params) + np.log10(flops_per_image)


capacity_proxy.vectorized = True  # type: ignore[attr-defined]


def load_quality(spec: str | Callable | None) -> Callable:
    """The quality function for ``spec``: None -> :func:`capacity_proxy`; a callable as is;
    ``"module:function"`` imported (``module`` may also be a path to a ``.py`` file)."""
    if spec is None:
        return capacity_proxy
    if callable(spec):
        return spec
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise QualityError(
            f"malformed quality callable: expected 'module:function' (e.g. "
            f"'mypkg.scores:accuracy'), got {spec!r}. Name an importable module and a function."
        )
    mod_name, fn_name = spec.split(":")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.exists():
                raise FileNotFoundError(f"no such file {mod_name}")
            loader = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's module's
        raise QualityError(
            f"cannot import the quality module {mod_name!r}: expected an importable module "
            f"(on PYTHONPATH or a .py path), got {type(e).__name__}: {e}. Check the name and "
            "that the module imports on its own."
        ) from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        public = sorted(n for n in dir(module) if not n.startswith("_"))
        raise QualityError(
            f"quality callable not found: expected a function {fn_name!r} in module "
            f"{mod_name!r}, got {type(fn).__name__ if fn is not None else 'nothing'}. "
            f"Check the spelling; the module defines {public[:10]}."
        )
    return fn


def _call_quality(fn: Callable, frame: pd.DataFrame) -> np.ndarray:
    """Quality per row of ``frame`` (config columns + features), as finite floats."""
    name = getattr(fn, "__qualname__", repr(fn))
    if getattr(fn, "vectorized", False):
        try:
            values = np.asarray(fn(frame), dtype=float).reshape(-1)
        except Exception as e:  # noqa: BLE001 - the user's function raised
            raise QualityError(
                f"the quality function {name} raised {type(e).__name__}: {e} (vectorized call on "
                f"{len(frame)} configs). Fix the function; it must return one number per row."
            ) from e
        if len(values) != len(frame):
            raise QualityError(
                f"the quality function {name} returned {len(values)} values: expected one per "
                f"config ({len(frame)}). Return an array as long as the frame."
            )
    else:
        try:
            n_args = len(
                [
                    p
                    for p in inspect.signature(fn).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                ]
            )
        except (TypeError, ValueError):
            n_args = 1
        feats = [c for c in frame.columns if c not in CONFIG_COLUMNS]
        configs = frame_to_configs(frame)
        records = frame[feats].to_dict(orient="records")
        values = np.empty(len(frame))
        for i, (config, features) in enumerate(zip(configs, records)):
            try:
                out = fn(config, features) if n_args >= 2 else fn(config)
                values[i] = float(out)
            except Exception as e:  # noqa: BLE001 - the user's function raised
                raise QualityError(
                    f"the quality function {name} failed on {config}: {type(e).__name__}: {e}. "
                    "It must return a finite number (higher is better) for every config."
                ) from e
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise QualityError(
            f"the quality function {name} returned {values[i]!r} for "
            f"{frame_to_configs(frame.iloc[[i]])[0]}: expected a finite number. Return a "
            "finite score for every config."
        )
    return values


# -- encoding --------------------------------------------------------------------------------
class SpaceEncoding:
    """Integer encoding of a Space: one variable per knob that takes more than one value.

    Variable ``j`` is an index into the knob's values over all families (numbers ascending, so
    neighbouring indices are neighbouring values, which suits SBX and polynomial mutation;
    names in declared order). A family that lacks a value maps the index to its nearest
    allowed value.
    """

    def __init__(self, space: Space) -> None:
        self.space = space
        self.families = list(space.families)
        self.values: dict[str, list] = {}
        for knob in KNOBS:
            vals = space.values(knob)
            self.values[knob] = sorted(vals) if knob in _NUMERIC_KNOBS else list(vals)
        self.var_knobs = [k for k in KNOBS if len(self.values[k]) > 1]
        # table[knob][family_index, union_index] -> index into self.values[knob]
        self._table: dict[str, np.ndarray] = {}
        for knob in KNOBS:
            union = self.values[knob]
            tab = np.empty((len(self.families), len(union)), dtype=np.int64)
            for fi, fam in enumerate(self.families):
                allowed = (
                    [union.index(fam)]
                    if knob == "family"
                    else [union.index(v) for v in space.knobs[fam][knob]]
                )
                allowed_arr = np.asarray(allowed)
                for u in range(len(union)):
                    tab[fi, u] = allowed_arr[np.argmin(np.abs(allowed_arr - u))]
            self._table[knob] = tab

    @property
    def n_var(self) -> int:
        return len(self.var_knobs)

    @property
    def upper(self) -> np.ndarray:
        return np.array([len(self.values[k]) - 1 for k in self.var_knobs], dtype=float)

    def decode(self, X: Any) -> pd.DataFrame:
        """Configs (CONFIG_COLUMNS) of the rows of X (rounded and clipped to the bounds)."""
        X = (
            np.asarray(X, dtype=float).reshape(-1, self.n_var)
            if self.n_var
            else np.zeros((len(X), 0))
        )
        Xi = np.clip(np.rint(X), 0, self.upper).astype(np.int64) if self.n_var else X.astype(int)
        n = len(Xi)
        col = {k: j for j, k in enumerate(self.var_knobs)}
        fam_idx = Xi[:, col["family"]] if "family" in col else np.zeros(n, dtype=np.int64)
        out = {}
        for knob in KNOBS:
            u = Xi[:, col[knob]] if knob in col else np.zeros(n, dtype=np.int64)
            idx = self._table[knob][fam_idx, u]
            arr = np.asarray(
                self.values[knob],
                dtype=object if knob in ("family", "precision", "runtime") else None,
            )
            out[knob] = arr[idx]
        return pd.DataFrame(out)[list(CONFIG_COLUMNS)]

    def encode(self, frame: pd.DataFrame) -> np.ndarray:
        """Integer rows for the configs of ``frame`` (the inverse of :meth:`decode`)."""
        cols = []
        for knob in self.var_knobs:
            lookup = {v: i for i, v in enumerate(self.values[knob])}
            try:
                cols.append([lookup[v] for v in frame[knob].tolist()])
            except KeyError as e:
                raise ConfigError(
                    f"value {e.args[0]!r} of knob {knob!r} is not in the space: expected one of "
                    f"{self.values[knob]}. Pick configs from the space."
                ) from None
        return np.array(cols, dtype=float).T.reshape(len(frame), self.n_var)

    def config_codes(self, frame: pd.DataFrame) -> np.ndarray:
        """One int64 per config (mixed radix over the knob indices) for caching."""
        code = np.zeros(len(frame), dtype=np.int64)
        for knob in KNOBS:
            lookup = {v: i for i, v in enumerate(self.values[knob])}
            idx = frame[knob].map(lookup).to_numpy()
            code = code * len(self.values[knob]) + idx.astype(np.int64)
        return code


# -- evaluation ------------------------------------------------------------------------------
def check_objectives(objectives: Sequence[str] | None, model: Any) -> list[str]:
    """The objectives (default: every target of ``model`` plus quality), checked against what
    ``model`` predicts; BudgetError for unknown names, targets it lacks, or duplicates."""
    targets = _model_targets(model)
    objectives = list(objectives) if objectives else [*targets, QUALITY]
    return _check_objectives(objectives, targets, model)


def _check_objectives(objectives: Sequence[str], targets: Sequence[str], model: Any) -> list:
    out = []
    for name in objectives:
        if name == QUALITY:
            out.append(name)
            continue
        if name not in KNOWN_METRICS:
            raise BudgetError(
                f"unknown objective: expected 'quality' or one of {', '.join(KNOWN_METRICS)}, "
                f"got {name!r}. Use a target name with its unit suffix."
            )
        if _base_target(name) not in targets:
            raise BudgetError(
                f"objective on a target the model does not predict: the model for "
                f"{_platform_name(model)} predicts {list(targets)}, got {name!r}. Drop it."
            )
        out.append(name)
    if len(set(out)) != len(out):
        raise BudgetError(f"duplicate objectives: expected distinct names, got {list(out)}.")
    if not out:
        raise BudgetError("no objectives: expected at least one, got none. Add e.g. latency_ms.")
    return out


class SurrogateEvaluator:
    """Predicts objectives and constraints of configs with a cost model, caching per config.

    ``evaluate(frame)`` returns, per row: the predictions (``<target>`` and, with a confidence,
    ``<target>_lower``/``_upper``), ``quality``, ``gflops_per_batch``, one ``g_<budget>``
    column per budget (relative excess, <= 0 feasible), ``g_space_limit`` for a space with
    ``[limits]``, ``violation`` (sum of positive parts) and ``feasible``. ``archive()`` is every
    distinct config evaluated so far.
    """

    def __init__(
        self,
        space: Space,
        model: Any,
        objectives: Sequence[str] | None = None,
        budgets: Mapping[str, float] | Iterable[str] | None = None,
        quality: str | Callable | None = None,
        confidence: float | None = None,
    ) -> None:
        self.space = space
        self.model = model
        self.targets = _model_targets(model)
        objectives = list(objectives) if objectives else [*self.targets, QUALITY]
        self.objectives = _check_objectives(objectives, self.targets, model)
        self.budgets = parse_budgets(budgets)
        check_budgets(self.budgets, model)
        if confidence is not None and not (
            isinstance(confidence, (int, float)) and 0 < confidence < 1
        ):
            raise BudgetError(
                f"invalid confidence: expected a probability strictly between 0 and 1, got "
                f"{confidence!r}. Use e.g. 0.9."
            )
        self.confidence = confidence
        self.quality_fn = load_quality(quality)
        self.uses_quality = QUALITY in self.objectives
        self.encoding = SpaceEncoding(space)
        self.limit_flops = space.limits.get("max_gflops_per_batch")
        self.constraint_names = [f"g_{b}" for b in self.budgets]
        if self.limit_flops is not None:
            self.constraint_names.append("g_space_limit")
        self._rows: dict[int, int] = {}
        self._frames: list[pd.DataFrame] = []
        self._archive: pd.DataFrame | None = None
        self.n_predicted = 0

    # objective matrix, minimization (quality negated)
    def F(self, ev: pd.DataFrame) -> np.ndarray:
        cols = []
        for name in self.objectives:
            if name == QUALITY:
                cols.append(-ev[QUALITY].to_numpy(dtype=float))
            else:
                cols.append(metric_values(ev, name, ev["batch_size"].to_numpy()))
        return np.column_stack(cols)

    def G(self, ev: pd.DataFrame) -> np.ndarray:
        if not self.constraint_names:
            return np.zeros((len(ev), 0))
        return ev[self.constraint_names].to_numpy(dtype=float)

    def _compute(self, frame: pd.DataFrame) -> pd.DataFrame:
        from carb_nas.features import compute_features

        frame = frame.reset_index(drop=True)
        scored = align_to_platform(self.model, frame, "search model")
        alpha = None if self.confidence is None else 1.0 - self.confidence
        pred = predict_frame(self.model, scored, alpha=alpha)
        self.n_predicted += len(frame)
        out = frame.copy()
        for c in pred.columns:
            out[c] = pred[c].to_numpy()
        feats = compute_features(frame)
        out["gflops_per_batch"] = feats["flops"].to_numpy(dtype=float) / 1e9
        if self.uses_quality:
            qframe = pd.concat([frame, feats.reset_index(drop=True)], axis=1)
            qframe = qframe.loc[:, ~qframe.columns.duplicated()]
            out[QUALITY] = _call_quality(self.quality_fn, qframe)
        batch = frame["batch_size"].to_numpy()
        for name, limit in self.budgets.items():
            out[f"g_{name}"] = (
                metric_values(out, name, batch, upper=self.confidence is not None) / limit - 1.0
            )
        if self.limit_flops is not None:
            out["g_space_limit"] = out["gflops_per_batch"] / self.limit_flops - 1.0
        g = self.G(out)
        out["violation"] = np.clip(g, 0, None).sum(axis=1) if g.shape[1] else 0.0
        out["feasible"] = (g <= 0).all(axis=1) if g.shape[1] else True
        return out

    def evaluate(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Evaluate configs (CONFIG_COLUMNS), predicting only those not seen before."""
        frame = frame[list(CONFIG_COLUMNS)].reset_index(drop=True)
        codes = self.encoding.config_codes(frame)
        new_mask = np.array([c not in self._rows for c in codes.tolist()], dtype=bool)
        if new_mask.any():
            _, first = np.unique(codes[new_mask], return_index=True)
            new_idx = np.flatnonzero(new_mask)[np.sort(first)]
            ev = self._compute(frame.iloc[new_idx])
            base = sum(len(f) for f in self._frames)
            for i, c in enumerate(codes[new_idx].tolist()):
                self._rows[c] = base + i
            self._frames.append(ev)
            self._archive = None
        arch = self.archive()
        return arch.iloc[[self._rows[c] for c in codes.tolist()]].reset_index(drop=True)

    def archive(self) -> pd.DataFrame:
        if self._archive is None:
            self._archive = (
                pd.concat(self._frames, ignore_index=True) if self._frames else pd.DataFrame()
            )
        return self._archive

    @property
    def n_evaluated(self) -> int:
        return len(self._rows)

    def pareto(self, frame: pd.DataFrame | None = None) -> pd.DataFrame:
        """Non-dominated feasible configs of ``frame`` (default: the whole archive)."""
        frame = self.archive() if frame is None else frame
        if len(frame) == 0:
            return frame
        feas = frame[frame["feasible"].to_numpy(dtype=bool)]
        if len(feas) == 0:
            return feas.reset_index(drop=True)
        return feas[pareto_mask(self.F(feas))].reset_index(drop=True)


# -- pymoo -----------------------------------------------------------------------------------
def _pymoo_problem_base():
    from pymoo.core.problem import Problem

    return Problem


class SpaceProblem(_pymoo_problem_base()):
    """A pymoo ``Problem`` over a carb_nas space, with a cost model as surrogate objectives.

    Variables: integer indices (see :class:`SpaceEncoding`), bounds ``[0, n_values - 1]``.
    ``F``: the objectives, minimized (``quality`` enters negated). ``G``: one relative budget
    excess per budget (<= 0 feasible), plus the space's ``[limits]`` cap when it has one.
    Use ``problem.decode(X)`` for the configs of a result and ``problem.evaluator.archive()``
    for everything evaluated. Works with any pymoo algorithm that handles integer variables::

        problem = SpaceProblem("cpu", model, budgets={"latency_ms": 50})
        res = minimize(problem, NSGA2(pop_size=40, sampling=IntegerRandomSampling(),
                       crossover=SBX(vtype=float, repair=RoundingRepair()),
                       mutation=PM(vtype=float, repair=RoundingRepair())), ("n_gen", 20))
    """

    def __init__(
        self,
        space: Space | str | Path,
        model: Any,
        objectives: Sequence[str] | None = None,
        budgets: Mapping[str, float] | Iterable[str] | None = None,
        quality: str | Callable | None = None,
        confidence: float | None = None,
    ) -> None:
        space = space if isinstance(space, Space) else load_space(space)
        self.evaluator = SurrogateEvaluator(space, model, objectives, budgets, quality, confidence)
        self.encoding = self.evaluator.encoding
        if self.encoding.n_var == 0:
            raise ConfigError(
                f"nothing to search: every knob of space {space.name!r} has a single value, "
                "got a one-config space. Give some knob more than one value."
            )
        super().__init__(
            n_var=self.encoding.n_var,
            n_obj=len(self.evaluator.objectives),
            n_ieq_constr=len(self.evaluator.constraint_names),
            xl=np.zeros(self.encoding.n_var),
            xu=self.encoding.upper,
            vtype=int,
        )

    def decode(self, X: Any) -> pd.DataFrame:
        return self.encoding.decode(X)

    def _evaluate(self, X: np.ndarray, out: dict, *args: Any, **kwargs: Any) -> None:
        ev = self.evaluator.evaluate(self.encoding.decode(X))
        out["F"] = self.evaluator.F(ev)
        if self.n_ieq_constr:
            out["G"] = self.evaluator.G(ev)


def _run_pymoo(problem: SpaceProblem, n_evals: int, pop_size: int, seed: int) -> None:
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.repair.rounding import RoundingRepair
    from pymoo.operators.sampling.rnd import IntegerRandomSampling
    from pymoo.optimize import minimize

    algorithm = NSGA2(
        pop_size=pop_size,
        sampling=IntegerRandomSampling(),
        crossover=SBX(prob=0.9, eta=3.0, vtype=float, repair=RoundingRepair()),
        mutation=PM(prob=1.0, eta=3.0, vtype=float, repair=RoundingRepair()),
        eliminate_duplicates=True,
    )
    minimize(problem, algorithm, ("n_evals", n_evals), seed=seed, verbose=False)


# -- optuna ----------------------------------------------------------------------------------
def open_storage(storage: str) -> Any:
    """An Optuna storage from a URL: an RDB URL (``sqlite:///x.db``, ``postgresql://...``) or a
    journal file (``journal:PATH``, or a path ending in ``.log``/``.journal``)."""
    import optuna

    try:
        if storage.startswith("journal:") or storage.endswith((".log", ".journal")):
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            path = Path(storage.removeprefix("journal:"))
            if not path.parent.is_dir():
                raise FileNotFoundError(f"directory {str(path.parent)!r} does not exist")
            return JournalStorage(JournalFileBackend(str(path)))
        return optuna.storages.get_storage(storage)
    except Exception as e:  # noqa: BLE001 - optuna/sqlalchemy raise many kinds
        first = str(e).splitlines()[0] if str(e) else ""
        raise StorageError(
            f"cannot open the Optuna storage {storage!r}: expected an RDB URL such as "
            f"sqlite:///search.db or a journal file (journal:PATH), got {type(e).__name__}: "
            f"{first}. Check the URL, the database driver and that the database is reachable."
        ) from e


def open_study(
    storage: str | None,
    study_name: str | None,
    directions: Sequence[str],
    sampler: Any,
) -> Any:
    """Create or load an Optuna study (None storage: in memory); clear errors for a storage
    that does not open or an existing study whose directions differ."""
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
    except Exception as e:  # noqa: BLE001
        raise StorageError(
            f"cannot create or load study {study_name!r} in {storage!r}: expected a study "
            f"with directions {list(directions)}, got {type(e).__name__}: {e}. Use another "
            "--study-name or storage."
        ) from e
    want = [d.lower() for d in directions]
    have = [d.name.lower() for d in study.directions]
    if want != have:
        raise StorageError(
            f"study {study_name!r} already exists with directions {have}: expected {want} for "
            "these objectives. Use another --study-name or the same --objectives."
        )
    return study


def _run_optuna(
    ev: SurrogateEvaluator,
    n_trials: int,
    sampler_name: str,
    pop_size: int,
    seed: int,
    storage: str | None,
    study_name: str | None,
) -> Any:
    import optuna

    from carb_nas.optuna import suggest_config

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sampler_name == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(population_size=pop_size, seed=seed)
    elif sampler_name == "tpe":
        with warnings.catch_warnings():  # multivariate/group are "experimental" in name only
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    else:
        raise ConfigError(
            f"unknown Optuna sampler: expected 'nsga2' or 'tpe', got {sampler_name!r}."
        )
    directions = ["maximize" if o == QUALITY else "minimize" for o in ev.objectives]
    study = open_study(storage, study_name, directions, sampler)
    if ev.budgets:  # relative excess, the plugin's normalize=True: one scale per study
        from carb_nas.optuna import claim_constraint_scale

        claim_constraint_scale(study, relative=True)
    batch = pop_size if sampler_name == "nsga2" else max(1, min(pop_size, 8))
    done = 0
    while done < n_trials:
        k = min(batch, n_trials - done)
        trials = [study.ask() for _ in range(k)]
        configs = [suggest_config(t, ev.space) for t in trials]
        frame = pd.DataFrame([c.as_dict() for c in configs], columns=list(CONFIG_COLUMNS))
        res = ev.evaluate(frame)
        F = ev.F(res)
        for i, trial in enumerate(trials):
            row = res.iloc[i]
            for name in ev.budgets:
                trial.set_constraint(f"carb_nas.{name}", float(row[f"g_{name}"]))
            for t in ev.targets:
                trial.set_user_attr(f"carb_nas.predicted.{t}", float(row[t]))
            if ev.uses_quality:
                trial.set_user_attr("carb_nas.quality", float(row[QUALITY]))
            values = [
                -float(F[i, j]) if o == QUALITY else float(F[i, j])
                for j, o in enumerate(ev.objectives)
            ]
            study.tell(trial, values)
        done += k
    return study


# -- search ----------------------------------------------------------------------------------
@dataclass
class SearchResult:
    """Outcome of :func:`search`.

    ``pareto``: non-dominated feasible configs among everything evaluated (config columns,
    predictions, ``quality``, constraint columns; with a rescore model also ``target_<t>``
    predictions and ``target_within_budget``); ``evaluated``: every config evaluated;
    ``least_violating``: when nothing is feasible, the evaluated configs closest to the budgets.
    """

    pareto: pd.DataFrame
    evaluated: pd.DataFrame
    least_violating: pd.DataFrame
    objectives: list[str]
    budgets: dict[str, float]
    confidence: float | None
    backend: str
    space_name: str
    space_size: int
    n_evaluated: int
    seconds: float
    rescored: bool = False
    rescore_platform: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return len(self.pareto) > 0

    @property
    def eval_fraction(self) -> float:
        return self.n_evaluated / max(self.space_size, 1)

    def to_dict(self, rows: bool = True) -> dict[str, Any]:
        out = {
            "backend": self.backend,
            "space": self.space_name,
            "space_size": self.space_size,
            "evaluated": self.n_evaluated,
            "eval_fraction": self.eval_fraction,
            "objectives": self.objectives,
            "budgets": self.budgets,
            "confidence": self.confidence,
            "feasible": self.feasible,
            "seconds": self.seconds,
            "rescored": self.rescored,
            "rescore_platform": self.rescore_platform,
            **self.extra,
        }
        if rows:
            out["pareto"] = self.pareto.to_dict(orient="records")
            if not self.feasible:
                out["least_violating"] = self.least_violating.to_dict(orient="records")
        return out

    def summary(self, max_rows: int = 12) -> str:
        budgets = ", ".join(f"{k} <= {v:g}" for k, v in self.budgets.items()) or "none"
        lines = [
            f"searched {self.space_name!r} ({self.space_size:,} configs) with {self.backend}: "
            f"{self.n_evaluated:,} evaluated ({100 * self.eval_fraction:.1f}%), "
            f"{self.seconds:.1f} s",
            f"objectives: {', '.join(self.objectives)} (quality maximized); budgets: {budgets}"
            + (f" at confidence {self.confidence:g}" if self.confidence else ""),
        ]
        if not self.feasible:
            lines.append("no evaluated config meets every budget; the closest ones:")
            lines.append(_table(self.least_violating.head(max_rows), self.objectives, True))
            return "\n".join(lines)
        lines.append(f"Pareto set: {len(self.pareto)} configs")
        if self.rescored:
            ok = int(self.pareto["target_within_budget"].sum())
            lines.append(
                f"rescored with the {self.rescore_platform} model: {ok} of {len(self.pareto)} "
                "still within budget"
            )
        shown = _spread(self.pareto, self.objectives, max_rows)
        if len(self.pareto) > max_rows:
            lines.append(f"{max_rows} of them, spread along the front (all with -o / --json):")
        extra = [c for c in self.pareto.columns if c.startswith("target_")]
        lines.append(_table(shown, self.objectives, False, extra))
        return "\n".join(lines)


def _spread(frame: pd.DataFrame, objectives: Sequence[str], n: int) -> pd.DataFrame:
    """``n`` rows evenly spaced along the first objective (quality when searched)."""
    if len(frame) <= n:
        return frame
    key = QUALITY if QUALITY in objectives and QUALITY in frame else objectives[0]
    values = frame[key] if key in frame else frame[_base_target(key)] / frame["batch_size"]
    order = frame.assign(_key=values.to_numpy()).sort_values("_key").drop(columns="_key")
    idx = np.unique(np.round(np.linspace(0, len(order) - 1, n)).astype(int))
    return order.iloc[idx]


def _table(
    frame: pd.DataFrame,
    objectives: Sequence[str],
    violation: bool,
    extra: Sequence[str] = (),
) -> str:
    cols = ["family", "depth", "width", "resolution", "batch_size"]
    tail = (["violation"] if violation else []) + [
        c for c in extra if not c.endswith(("_lower", "_upper"))
    ]
    rows = [cols + list(objectives) + [c.replace("target_", "target ") for c in tail]]
    for _, r in frame.iterrows():
        vals = [str(r[c]) for c in cols]
        for o in objectives:
            v = r[o] if o in r else r[_base_target(o)] / r["batch_size"]
            vals.append(f"{v:.3g}")
        for c in tail:
            v = r[c]
            vals.append(("yes" if v else "NO") if isinstance(v, (bool, np.bool_)) else f"{v:.3g}")
        rows.append(vals)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows)


def search(
    space: Space | str | Path,
    model: Any,
    budgets: Mapping[str, float] | Iterable[str] | None = None,
    objectives: Sequence[str] | None = None,
    quality: str | Callable | None = None,
    backend: str = "pymoo",
    trials: int = 2000,
    pop_size: int = 64,
    sampler: str = "nsga2",
    seed: int = 0,
    confidence: float | None = None,
    rescore: Any | None = None,
    storage: str | None = None,
    study_name: str | None = None,
) -> SearchResult:
    """Search ``space`` for the budget-feasible Pareto set of the objectives.

    Args:
        space: a Space, a space TOML or a bundled name (``cpu``).
        model: fitted CostModel of the platform being searched for (the surrogate).
        budgets: ``{"latency_ms": 50}`` or ``["latency_ms=50"]`` (per batch; units in names).
        objectives: among the model's targets, ``<target>_per_image`` and ``quality``;
            default: every target of the model plus ``quality``.
        quality: None (built-in :func:`capacity_proxy`), a callable, or ``"module:function"``.
        backend: ``"pymoo"`` (NSGA-II) or ``"optuna"`` (``sampler`` ``"nsga2"`` or ``"tpe"``).
        trials: evaluations the search may ask for (cached repeats are free).
        confidence: budgets checked on the upper bound at ``alpha = 1 - confidence``.
        rescore: optional target-platform CostModel; the Pareto set is re-predicted with it
            and each config marked ``target_within_budget``.
        storage / study_name: Optuna storage URL and study name (optuna backend only).
    """
    t0 = time.perf_counter()
    space = space if isinstance(space, Space) else load_space(space)
    if backend not in ("pymoo", "optuna"):
        raise ConfigError(f"unknown search backend: expected 'pymoo' or 'optuna', got {backend!r}.")
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ConfigError(f"invalid trials: expected a whole number >= 1, got {trials!r}.")
    if storage is not None and backend != "optuna":
        raise StorageError(
            f"--storage needs the optuna backend: expected --backend optuna, got {backend!r}. "
            "Add --backend optuna or drop --storage."
        )
    ev = SurrogateEvaluator(space, model, objectives, budgets, quality, confidence)
    if rescore is not None:
        check_budgets(ev.budgets, rescore, role="rescore model")
    extra: dict[str, Any] = {}
    if backend == "pymoo":
        problem = SpaceProblem(space, model, ev.objectives, ev.budgets, quality, confidence)
        problem.evaluator = ev
        _run_pymoo(problem, int(trials), pop_size, seed)
    else:
        study = _run_optuna(ev, int(trials), sampler, pop_size, seed, storage, study_name)
        extra["study_name"] = study.study_name
        extra["sampler"] = sampler
    evaluated = ev.archive()
    pareto = ev.pareto()
    if len(pareto):
        order = np.argsort(ev.F(pareto)[:, 0], kind="stable")
        pareto = pareto.iloc[order].reset_index(drop=True)
        least = evaluated.iloc[:0]
    else:
        least = evaluated.sort_values("violation").head(10).reset_index(drop=True)
    rescore_platform = None
    if rescore is not None and len(pareto):
        rescore_platform = _platform_name(rescore)
        aligned = align_to_platform(rescore, pareto[list(CONFIG_COLUMNS)], "rescore model")
        alpha = None if confidence is None else 1.0 - confidence
        pred = predict_frame(rescore, aligned, alpha=alpha)
        ok = np.ones(len(pareto), dtype=bool)
        batch = pareto["batch_size"].to_numpy()
        for c in pred.columns:
            pareto[f"target_{c}"] = pred[c].to_numpy()
        for name, limit in ev.budgets.items():
            ok &= metric_values(pred, name, batch, upper=confidence is not None) <= limit
        pareto["target_within_budget"] = ok
    return SearchResult(
        pareto=pareto,
        evaluated=evaluated,
        least_violating=least,
        objectives=ev.objectives,
        budgets=ev.budgets,
        confidence=confidence,
        backend=backend if backend == "pymoo" else f"optuna-{sampler}",
        space_name=space.name,
        space_size=len(space),
        n_evaluated=ev.n_evaluated,
        seconds=time.perf_counter() - t0,
        rescored=rescore is not None and len(pareto) > 0,
        rescore_platform=rescore_platform,
        extra=extra,
    )
