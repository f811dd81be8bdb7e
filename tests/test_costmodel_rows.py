"""How calibration chooses the rows to measure (carb_nas.costmodel): informative rows for
few-shot transfer and the calibration map's design, and the greedy facility location order."""

from __future__ import annotations

import numpy as np
import pytest

from carb_nas.errors import ModelError
from carb_nas.space import load_space


@pytest.fixture(scope="module")
def grid():
    return load_space("cpu").grid().sample(n=600, random_state=0).reset_index(drop=True)


def test_informative_rows_cover_knobs_and_predicted_cost(grid, torch_model):
    """Few-shot transfer's informative choice (carb_nas.costmodel.informative_rows)."""
    from carb_nas.costmodel import model_inputs
    from carb_nas.costmodel.calibration import informative_rows

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


def test_design_rows_pin_down_the_calibration_map_better_than_spread(grid, torch_model):
    """informative_rows(kind="design"): greedy D-optimal rows for the features map."""
    from carb_nas.costmodel import model_inputs
    from carb_nas.costmodel.calibration import calibration_features, informative_rows, penalized_fit

    X = model_inputs(grid)
    pred = torch_model.predict(X)["latency_ms"].to_numpy(float)
    F = np.column_stack([np.log(pred), calibration_features(X)])
    G = np.column_stack([np.ones(len(F)), (F - F.mean(axis=0)) / F.std(axis=0)])
    # a fake residual, linear in the map's inputs, plus noise: what the map can learn
    rng = np.random.default_rng(0)
    r = G @ rng.normal(0, 0.3, G.shape[1]) + rng.normal(0, 0.02, len(G))

    def logdet(idx):
        return np.linalg.slogdet(np.eye(G.shape[1]) + G[idx].T @ G[idx])[1]

    errors = {"design": [], "spread": []}
    for seed in range(4):
        rows = {k: informative_rows(X, pred, 12, seed=seed, kind=k) for k in errors}
        assert len(set(rows["design"].tolist())) == 12
        assert logdet(rows["design"]) > logdet(rows["spread"])
        for k, idx in rows.items():
            coef, _ = penalized_fit(G[idx], r[idx], 0.1)
            errors[k].append(float(np.sqrt(np.mean((G @ coef - r) ** 2))))
    assert np.median(errors["design"]) < np.median(errors["spread"])
    with pytest.raises(ModelError, match="unknown informative-row kind"):
        informative_rows(X, pred, 5, kind="random")


def test_facility_location_follows_density_weights_and_coverage():
    from carb_nas.costmodel.calibration import facility_location_order

    rng = np.random.default_rng(0)
    big = rng.normal(0.0, 0.3, size=(90, 2))
    small = rng.normal(10.0, 0.3, size=(10, 2))
    points = np.vstack([big, small])
    ones = np.ones(len(points))
    order = facility_location_order(points, ones, 5)
    assert len(order) == len(set(order)) == 5
    assert order[0] < 90  # the weighted medoid: the dense cluster's
    assert any(i >= 90 for i in order[:2])  # the next pick stands for the other cluster
    heavy = np.where(np.arange(len(points)) >= 90, 100.0, 1.0)
    assert facility_location_order(points, heavy, 1)[0] >= 90
    # what is covered already counts: the first pick goes where nothing is near
    assert facility_location_order(points, ones, 1, covered=big)[0] >= 90
    # no more picks than rows, and none once every row coincides with a pick
    assert sorted(facility_location_order(points[:3], ones[:3], 10)) == [0, 1, 2]
    twins = np.zeros((4, 2))
    assert len(facility_location_order(twins, np.ones(4), 4)) == 1


def test_facility_location_in_blocks_picks_as_the_whole_matrix_does():
    # distances are computed 512 rows at a time (memory): across a block boundary the picks
    # are those of the plain greedy rule on the full pairwise matrix
    from carb_nas.costmodel.calibration import facility_location_order

    rng = np.random.default_rng(3)
    points, w = rng.normal(size=(700, 3)), rng.uniform(0.5, 2.0, 700)
    covered = rng.normal(size=(600, 3))
    pair = np.sqrt(((points[:, None] - points[None]) ** 2).sum(axis=2))
    cur = np.sqrt(((points[:, None] - covered[None]) ** 2).sum(axis=2)).min(axis=1)
    expected = []
    for _ in range(20):
        gain = (np.maximum(cur[None, :] - pair, 0.0) * w[None, :]).sum(axis=1)
        gain[expected] = -np.inf
        expected.append(int(np.argmax(gain)))
        cur = np.minimum(cur, pair[expected[-1]])
    assert facility_location_order(points, w, 20, covered=covered) == expected
    assert max(expected) >= 512  # the picks span both blocks
