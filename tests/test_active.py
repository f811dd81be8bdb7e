"""Active selection (carb_nas.active): seeded random first, then coverage and uncertainty."""

from __future__ import annotations

import numpy as np
import pytest

from carb_nas.active import ACTIVE_REASONS, choose_active, config_keys
from carb_nas.errors import ConfigError, ModelError
from carb_nas.space import load_space


@pytest.fixture(scope="module")
def grid():
    return load_space("cpu").grid().sample(n=600, random_state=0).reset_index(drop=True)


def test_without_a_model_the_picks_are_seeded_random(grid):
    a = choose_active(grid, n=10, seed=3)
    b = choose_active(grid, n=10, seed=3)
    assert config_keys(a) == config_keys(b) and len(set(config_keys(a))) == 10
    assert (a["active_reason"] == "seed").all() and a["active_interval_width"].isna().all()
    assert config_keys(choose_active(grid, n=10, seed=4)) != config_keys(a)


def test_with_a_model_picks_spread_and_record_why(grid, torch_model):
    measured = grid.iloc[:20]
    picks = choose_active(grid, measured, torch_model, n=30, seed=0)
    assert len(picks) == 30 and set(picks["active_reason"]) <= set(ACTIVE_REASONS[1:])
    assert np.isfinite(picks["active_interval_width"]).all()
    # never a config already measured, never one twice
    keys = config_keys(picks)
    assert len(set(keys)) == 30 and not set(keys) & set(config_keys(measured))
    # coverage: the picks span more of the batch-size range than 30 random configs usually do
    spread = picks["batch_size"].nunique()
    rand = choose_active(grid, n=30, seed=0)["batch_size"].nunique()
    assert spread >= min(rand, 10)
    assert picks["family"].nunique() == 2


def test_asking_for_more_than_is_left_gives_what_is_left(grid, torch_model):
    rest = choose_active(grid.iloc[:30], grid.iloc[:25], torch_model, n=50)
    assert len(rest) == 5


@pytest.mark.parametrize("n", [0, -1, 2.5, True])
def test_bad_counts_are_refused(grid, n):
    with pytest.raises(ConfigError, match="invalid active count"):
        choose_active(grid, n=n)


def test_informative_rows_cover_knobs_and_predicted_cost(grid, torch_model):
    """Few-shot transfer's informative choice (carb_nas.costmodel.informative_rows)."""
    from carb_nas.costmodel import informative_rows, model_inputs

    X = model_inputs(grid)
    pred = torch_model.predict(X)["latency_ms"].to_numpy(float)
    idx = informative_rows(X, pred, 10, seed=0)
    assert len(set(idx.tolist())) == 10
    assert informative_rows(X, pred, 10, seed=0).tolist() == idx.tolist()  # seeded
    assert informative_rows(X, pred, 10, seed=1).tolist() != idx.tolist()
    # the extremes of the predicted cost are reached far more than a random draw would
    lo, hi = np.quantile(pred, [0.1, 0.9])
    chosen = pred[idx]
    assert (chosen <= lo).any() and (chosen >= hi).any()
    assert grid.iloc[idx]["family"].nunique() == 2
    with pytest.raises(ModelError, match="cannot choose"):
        informative_rows(X, pred, len(X) + 1)
