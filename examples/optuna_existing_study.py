"""An Optuna study you already have gains predicted costs and budget constraints.

The study below is "yours": it builds its own CNN from its own hyperparameters (number of
layers, channels, kernel size, depthwise-separable or plain convolutions) -- nothing from
carb_nas's spaces -- and maximizes its accuracy after a tiny training run (a few SGD steps on a
synthetic 4-class image task at 32 px, so the example stays fast). Three lines add carb_nas:

    costs = CostConstraints("default", budgets={...}, prune=True)  # 1. once
    costs.constrain(trial, net, (BATCH, 3, 32, 32))                # 2. after building the net
    study.best_trial                                               # 3. the best *feasible* one

``constrain`` traces the network on the meta device (no memory, nothing runs), predicts each
of its operators with the kernel-level module model, stores the predicted costs (and the ops
the model never measured, ``carb_nas.unmodelled_ops``) as user attributes, sets one
constraint per budget and, with ``prune=True``, prunes a network predicted over budget before
any training.

Cost model: ``"default"``, the kernel-level module model of ``cpu/torch/fp32``: per-operator
models trained on the shipped multi-family measurements (carb_nas/data/zoo), summed per
network; shipped with carb_nas (it loads in about a second). ``--synthetic``: a
module model fitted now to SYNTHETIC per-operator times of this study's own networks (a
made-up roofline, not measurements: its numbers mean nothing), so the mechanics show in
seconds. The script says which one it uses. Budgets default to quantiles of the predictions
over a few of the study's own networks (so part of its range is over budget whatever the
model); pass --latency-ms / --peak-mem-mb for fixed ones.

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
from torch import nn

from carb_nas.integrations import CostConstraints

PLATFORM = "cpu/torch/fp32"
BATCH = 16


# -- your study (nothing carb_nas-specific here) -----------------------------------------------
def make_cnn(layers: int, channels: int, kernel: int, depthwise: bool) -> nn.Module:
    """The study's own network: a stride-2 stem, ``layers`` conv blocks, a 4-way head."""
    mods: list[nn.Module] = [nn.Conv2d(3, channels, 3, 2, 1), nn.BatchNorm2d(channels), nn.ReLU()]
    for _ in range(layers):
        if depthwise:
            mods += [
                nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels),
                nn.Conv2d(channels, channels, 1),
            ]
        else:
            mods.append(nn.Conv2d(channels, channels, kernel, padding=kernel // 2))
        mods += [nn.BatchNorm2d(channels), nn.ReLU()]
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 4)]
    return nn.Sequential(*mods)


def suggest_cnn(trial: optuna.Trial) -> nn.Module:
    return make_cnn(
        layers=trial.suggest_int("layers", 1, 6),
        channels=trial.suggest_categorical("channels", [16, 32, 64, 128, 256]),
        kernel=trial.suggest_categorical("kernel", [3, 5, 7]),
        depthwise=trial.suggest_categorical("depthwise", [False, True]),
    )


def synthetic_task(seed: int = 0, n: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    """4 classes of 32 px noise images, each class shifted towards its own colour."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    colours = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0]])
    x = torch.randn(n, 3, 32, 32, generator=g) + 0.8 * colours[y][:, :, None, None]
    return x, y


def train_and_score(net: nn.Module, lr: float, steps: int = 4) -> float:
    """A tiny real training run of the network; returns held-out accuracy."""
    torch.manual_seed(0)
    x, y = synthetic_task()
    x_train, y_train, x_val, y_val = x[:64], y[:64], x[64:], y[64:]
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    for step in range(steps):
        i = (step * BATCH) % len(x_train)
        loss = nn.functional.cross_entropy(net(x_train[i : i + BATCH]), y_train[i : i + BATCH])
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        return float((net(x_val).argmax(1) == y_val).float().mean())


# -- choosing the cost model ----------------------------------------------------------------
def cost_model(synthetic: bool = False):
    """(model, description): the PLATFORM predictor, or a SYNTHETIC module model (--synthetic)."""
    from carb_nas import load_predictor

    if synthetic:
        return synthetic_module_model(), (
            "a module model fitted now to SYNTHETIC per-op times of this study's networks "
            "(--synthetic; not measurements, its numbers mean nothing)"
        )
    predictor = load_predictor(PLATFORM)  # its kernel-level module model predicts networks
    return predictor, predictor.provenance.describe()


def synthetic_module_model(n: int = 72):
    """A ModuleCostModel fitted to SYNTHETIC per-op times of ``n`` of the study's networks."""
    import itertools

    from carb_nas.costmodel import ModuleCostModel
    from carb_nas.features import trace_ops

    grid = list(itertools.product(range(1, 7), [16, 32, 64, 128, 256], [3, 5, 7], [False, True]))
    picks = np.random.default_rng(0).permutation(len(grid))[:n]
    rows, tables = [], []
    for i in picks:
        with torch.device("meta"):  # shapes only: no weights initialized, traced as built
            net = make_cnn(*grid[i])
        # one batch size: the trace's layer cache then replays the layers networks share
        ops, feats = trace_ops(net, (BATCH, 3, 32, 32))
        mb = (ops["read_bytes"] + ops["write_bytes"] + ops["weight_bytes"]) / 1e6
        # SYNTHETIC: 0.01 ms per op, 20 GFLOP/s (depthwise at a third of it), 0.1 ms per MB
        slow = np.where(ops["kind"] == "dwconv", 3.0, 1.0)
        ms = 0.01 + ops["flops"] / 20e9 * 1e3 * slow + 0.1 * mb
        tables.append(ops.assign(key=f"net{i}", measured_ms=ms))
        rows.append({**feats, "key": f"net{i}", "batch_size": BATCH,
                     "latency_ms": float(ms.sum()) * 1.1 + 0.2,
                     "peak_mem_mb": feats["tensor_peak_mb"] * 1.05 + 20})  # fmt: skip
    return ModuleCostModel().fit(pd.DataFrame(rows), pd.concat(tables, ignore_index=True))


def default_budgets(model) -> dict[str, float]:
    """Budgets at quantiles of the predictions for a few of the study's own networks."""
    from carb_nas import predict_costs

    rng = np.random.default_rng(0)
    nets = [
        make_cnn(
            int(rng.integers(1, 7)),
            int(rng.choice([16, 32, 64, 128, 256])),
            int(rng.choice([3, 5, 7])),
            bool(rng.integers(0, 2)),
        )  # fmt: skip
        for _ in range(12)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = pd.DataFrame(
            [dict(predict_costs(n, (BATCH, 3, 32, 32), platform=model).values) for n in nets]
        )
    quantiles = {"latency_ms": 0.5, "peak_mem_mb": 0.7}
    return {
        t: float(f"{pred[t].map(lambda v: v[0]).quantile(q):.3g}")
        for t, q in quantiles.items()
        if t in pred.columns
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--storage", default=None, help="any Optuna storage URL")
    parser.add_argument("--latency-ms", type=float, default=None)
    parser.add_argument("--peak-mem-mb", type=float, default=None)
    parser.add_argument("--steps", type=int, default=4, help="training steps per trial")
    parser.add_argument(
        "--synthetic", action="store_true", help="a synthetic cost model (a quick run)"
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()

    model, description = cost_model(args.synthetic)
    print(f"cost model: {description}")
    budgets = default_budgets(model)
    if args.latency_ms is not None:
        budgets["latency_ms"] = args.latency_ms
    if args.peak_mem_mb is not None:
        budgets["peak_mem_mb"] = args.peak_mem_mb
    print(f"budgets: {budgets} (per batch of {BATCH}; defaults are quantiles of predictions)")

    # 1. carb_nas, once: budgets are checked here, before any trial runs ("default" is the
    # kernel-level module model; the model object is passed to show the --synthetic one).
    costs = CostConstraints(model, budgets, prune=True)

    def objective(trial: optuna.Trial) -> float:
        net = suggest_cnn(trial)  # the study's own network, from its own hyperparameters
        costs.constrain(trial, net, (BATCH, 3, 32, 32))  # 2. the one new line
        lr = trial.suggest_float("lr", 1e-3, 0.3, log=True)
        return train_and_score(net, lr, steps=args.steps)

    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=8),
        storage=args.storage,
    )
    study.optimize(objective, n_trials=args.trials)

    trials = study.trials
    state = optuna.trial.TrialState
    for t in trials:
        a = t.user_attrs
        verdict = "pruned " if t.state == state.PRUNED else f"acc={t.value:.2f}"
        preds = "  ".join(f"{k}={a['carb_nas.predicted.' + k]:.3g}" for k in budgets)
        unmodelled = a.get("carb_nas.unmodelled_ops") or []
        note = f"  unmodelled={unmodelled}" if unmodelled else ""
        print(f"#{t.number:<3} {verdict:<8} {t.params}  {preds}{note}")
    constrained = [t for t in trials if t.constraints]
    feasible = [t for t in constrained if all(v <= 0 for v in t.constraints.values())]
    pruned = [t for t in trials if t.state == state.PRUNED]
    if any(t.state == state.COMPLETE for t in feasible):
        best = study.best_trial  # Optuna picks among feasible trials only
        print(f"best feasible: trial {best.number}, accuracy {best.value:.2f}, {best.params}")
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
