"""An Optuna study you already have gains predicted costs and budget constraints.

The study below is "yours": it maximizes the accuracy of a network after a tiny training run
(a few SGD steps on a synthetic 4-class image task at 32 px, so the example stays fast). It
picks its networks from carb_nas's screening space, and three lines add carb_nas to it:

    costs = CostConstraints(model, budgets={...}, prune=True)   # 1. once
    config = costs.suggest(trial, space)                        # 2. first line of the objective
    study.best_trial                                            # 3. now the best *feasible* one

With ``prune=True`` a config predicted over budget is pruned before any training; its
predicted costs and constraint values stay on the trial, and TPE learns from them.

Cost model: the shipped ``cpu/torch/fp32`` model when installed; otherwise a fast model
trained now on the shipped real CPU measurements; otherwise (neither shipped) a fast model
fitted to a SYNTHETIC cost formula, so the mechanics can still be shown. The script says
which one it uses. Budgets default to quantiles of the model's predictions over the space
(so part of the space is over budget whatever the model); pass --latency-ms / --peak-mem-mb
for fixed ones.

Last line: ``trials=<n> constrained=<n> pruned=<n> feasible=<n>``.
Run: python examples/optuna_existing_study.py [--trials 20] [--storage sqlite:///study.db]
     [--steps 4] [--synthetic]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import optuna
import pandas as pd
import torch

from carb_nas.errors import CarbNasError
from carb_nas.integrations import CostConstraints
from carb_nas.models import build_model
from carb_nas.space import Config, load_space

PLATFORM = "cpu/torch/fp32"
SPACE = "carb_screening"  # the paper's 3,072-config screening space, inside cpu.toml's ranges


# -- your study (nothing carb_nas-specific here) -----------------------------------------------
def synthetic_task(seed: int = 0, n: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    """4 classes of 32 px noise images, each class shifted towards its own colour."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    colours = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0]])
    x = torch.randn(n, 3, 32, 32, generator=g) + 0.8 * colours[y][:, :, None, None]
    return x, y


def train_and_score(config: Config, lr: float, steps: int = 4, batch: int = 16) -> float:
    """A tiny real training run of the config's network; returns held-out accuracy."""
    torch.manual_seed(0)
    x, y = synthetic_task()
    x_train, y_train, x_val, y_val = x[:64], y[:64], x[64:], y[64:]
    net = build_model(config.replace(precision="fp32")).train()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    for step in range(steps):
        i = (step * batch) % len(x_train)
        logits = net(x_train[i : i + batch])[:, :4]  # 4 of the 1000 classifier outputs
        loss = torch.nn.functional.cross_entropy(logits, y_train[i : i + batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        return float((net(x_val)[:, :4].argmax(1) == y_val).float().mean())


# -- choosing the cost model ----------------------------------------------------------------
def cost_model(synthetic: bool = False):
    """(model, description): shipped model, else real measurements, else synthetic."""
    from carb_nas.costmodel import CostModel, load_default_model, model_inputs

    if synthetic:
        return synthetic_model(CostModel, model_inputs), (
            "a fast model fitted to a SYNTHETIC cost formula (--synthetic; not measurements, "
            "its numbers mean nothing)"
        )
    try:
        return load_default_model(PLATFORM), f"the shipped {PLATFORM} cost model"
    except CarbNasError as e:
        reason = str(e).split(":")[0]
    try:
        from carb_nas.datasets import load_dataset

        rows = load_dataset(PLATFORM, ok_only=True)
        if len(rows) >= 50:
            targets = [t for t in ("peak_mem_mb", "latency_ms") if rows[t].notna().all()]
            model = CostModel(preset="fast", n_jobs=1).fit(
                model_inputs(rows), rows[targets], platform=PLATFORM
            )
            return model, f"a fast model trained now on {len(rows)} real {PLATFORM} measurements"
    except (CarbNasError, ImportError):
        pass
    return synthetic_model(CostModel, model_inputs), (
        f"no shipped model ({reason}) and no real measurements: a fast model fitted to a "
        "SYNTHETIC cost formula (not measurements; its numbers mean nothing)"
    )


def synthetic_model(CostModel, model_inputs):
    from carb_nas.features import compute_features

    grid = load_space(SPACE).grid()
    sample = grid.sample(400, random_state=0).reset_index(drop=True)
    f = compute_features(sample)
    noise = np.random.default_rng(0).lognormal(0, 0.05, size=(len(sample), 2))
    Y = pd.DataFrame(
        {  # SYNTHETIC: 20 GFLOP/s plus 0.3 ms overhead; weights + 2 largest activations + 20 MB
            "peak_mem_mb": (f["param_mb"] + 2 * f["act_mb_max"] + 20) * noise[:, 0],
            "latency_ms": (f["flops"] / 20e9 * 1e3 + 0.3) * noise[:, 1],
        }
    )
    return CostModel(preset="fast", n_jobs=1).fit(model_inputs(sample), Y)


def default_budgets(model, space) -> dict[str, float]:
    """Budgets at quantiles of the predictions over the space (so some of it is over)."""
    from carb_nas.costmodel import model_inputs

    pred = model.predict(model_inputs(space.grid()))
    quantiles = {"latency_ms": 0.5, "peak_mem_mb": 0.7}
    return {
        t: float(f"{pred[t].quantile(q):.3g}") for t, q in quantiles.items() if t in pred.columns
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--storage", default=None, help="any Optuna storage URL")
    parser.add_argument("--latency-ms", type=float, default=None)
    parser.add_argument("--peak-mem-mb", type=float, default=None)
    parser.add_argument("--steps", type=int, default=4, help="training steps per trial")
    parser.add_argument("--space", default=SPACE, help="a carb_nas space (TOML or bundled name)")
    parser.add_argument(
        "--synthetic", action="store_true", help="a synthetic cost model (a quick run)"
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()

    space = load_space(args.space)
    model, description = cost_model(args.synthetic)
    print(f"cost model: {description}")
    budgets = default_budgets(model, space)
    if args.latency_ms is not None:
        budgets["latency_ms"] = args.latency_ms
    if args.peak_mem_mb is not None:
        budgets["peak_mem_mb"] = args.peak_mem_mb
    print(f"budgets: {budgets} (per batch; defaults are quantiles of the predictions)")

    # 1. carb_nas, once: budgets are checked here, before any trial runs.
    costs = CostConstraints(model, budgets, prune=True)

    def objective(trial: optuna.Trial) -> float:
        config = costs.suggest(trial, space)  # 2. the one new line in the objective
        lr = trial.suggest_float("lr", 1e-3, 0.3, log=True)  # the study's own parameter
        return train_and_score(config, lr, steps=args.steps)

    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=8),
        storage=args.storage,
    )
    with warnings.catch_warnings():
        # The model was trained on cpu.toml; this space lies inside its knob ranges.
        warnings.filterwarnings("ignore", message="the cost model was trained on another space")
        study.optimize(objective, n_trials=args.trials)

    trials = study.trials
    state = optuna.trial.TrialState
    for t in trials:
        a = t.user_attrs
        verdict = "pruned " if t.state == state.PRUNED else f"acc={t.value:.2f}"
        preds = "  ".join(f"{k}={a['carb_nas.predicted.' + k]:.3g}" for k in budgets)
        print(f"#{t.number:<3} {verdict:<8} {a['carb_nas.config_key']}  {preds}")
    constrained = [t for t in trials if t.constraints]
    feasible = [t for t in constrained if all(v <= 0 for v in t.constraints.values())]
    pruned = [t for t in trials if t.state == state.PRUNED]
    if any(t.state == state.COMPLETE for t in feasible):
        best = study.best_trial  # Optuna picks among feasible trials only
        print(
            f"best feasible: trial {best.number}, accuracy {best.value:.2f}, "
            f"config {best.user_attrs['carb_nas.config']}"
        )
    else:
        print("no feasible trial completed: loosen the budgets or run more trials")
    print(
        f"{len(pruned)} of {len(trials)} trials were pruned before training; "
        f"took {time.perf_counter() - t0:.1f} s"
    )
    print(
        f"trials={len(trials)} constrained={len(constrained)} pruned={len(pruned)} "
        f"feasible={len(feasible)}"
    )


if __name__ == "__main__":
    main()
