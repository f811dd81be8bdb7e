"""Active selection (carb_nas.active): seeded random first, then coverage and uncertainty."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.active import ACTIVE_REASONS, choose_active, config_keys, run_active_campaign
from carb_nas.cli import cli
from carb_nas.errors import ConfigError, ModelError
from carb_nas.measure import (
    JOURNAL,
    STUDY_NAME,
    Prepared,
    Profiler,
    Protocol,
    TorchRuntime,
    campaign_rows,
    group_of,
    open_campaign_study,
    run_campaign,
)
from carb_nas.space import Space, load_space
from carb_nas.storage import open_storage
from tests.measure.fakes import FakeMeter


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


def test_design_rows_pin_down_the_calibration_map_better_than_spread(grid, torch_model):
    """informative_rows(kind="design"): greedy D-optimal rows for the features map."""
    from carb_nas.costmodel import (
        calibration_features,
        informative_rows,
        model_inputs,
        penalized_fit,
    )

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


# -- active campaigns (carb-nas profile SPACE --active N) ---------------------------------------
# The profiler is a real Profiler on a FAKE runtime (a sleep per image) and the FakeMeter: every
# row is labelled fake (meter "fake-counter"). The round model is a fake too (below), except in
# the slow test, which fits the real fast-preset CostModel on the fake rows (never saved).


class _SleepRuntime(TorchRuntime):
    """Runs nothing: sleeps in proportion to the batch. Rows are labelled fake by the meter."""

    def prepare(self, config):
        return Prepared(group_of(config), None)

    def make_input(self, prepared, config):
        return config.batch_size * config.depth

    def run(self, prepared, x):
        time.sleep(0.00002 * x)

    def peak_memory_mb(self, prepared, x):
        return float(x), "fake"


def _profiler(fail_after=None):
    prof = Profiler(
        "cpu",
        "torch",
        "fp32",
        threads=1,
        protocol=Protocol(time_cap_s=0.02, warmup_runs=1, warmup_min_s=0.0, min_runs=3),
        meter=FakeMeter(),
        runtime_obj=_SleepRuntime("cpu", "fp32", 1),
        idle_s=0.0,
        energy_min_window_s=0.0,
    )
    if fail_after is not None:  # the worker "dies" measuring config number fail_after + 1
        real, calls = prof.profile, []

        def profile(config):
            calls.append(config.key)
            if len(calls) > fail_after:
                raise KeyboardInterrupt("killed")
            return real(config)

        prof.profile = profile
    return prof


class _FakeModel:
    """Predicts latency from the knobs; bottleneck intervals are 4x wider (labelled fake)."""

    def predict(self, X, alpha=0.1):
        lat = X["batch_size"] * X["depth"] * X["width"] * (X["resolution"] / 32.0) ** 2
        w = np.where(X["family"].astype(str) == "bottleneck", 0.8, 0.2)
        lat = lat.to_numpy(float)
        return pd.DataFrame(
            {
                "peak_mem_mb": X["batch_size"].to_numpy(float),
                "latency_ms": lat,
                "latency_ms_lower": lat * np.exp(-w),
                "latency_ms_upper": lat * np.exp(w),
            }
        )


def _fake_fit(rows, seed):
    return _FakeModel() if (rows["status"] == "ok").sum() >= 6 else None


def _space_configs(n=40):
    return load_space("cpu").grid().sample(n=n, random_state=2).reset_index(drop=True)


def _active(frame, out, n, prof=None, **kw):
    return run_active_campaign(
        frame,
        out,
        n,
        round_size=4,
        seed_rows=6,
        fit=_fake_fit,
        threads=1,
        protocol_overrides=dict(time_cap_s=0.02, warmup_runs=1, warmup_min_s=0.0, min_runs=3),
        progress=False,
        profiler=prof or _profiler(),
        **kw,
    )


def test_active_campaign_records_round_reason_and_width_in_each_row(tmp_path):
    frame = _space_configs()
    out = tmp_path / "camp"
    result = _active(frame, out, 14, uncertainty="interval")
    rounds = result["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3] and [r["configs"] for r in rounds] == [6, 4, 4]
    assert rounds[0]["reasons"] == {"seed": 6} and rounds[0]["model_rows"] == 0
    assert result["summary"].measured_now == 14 and result["summary"].done == 14
    rows = campaign_rows(out)
    assert len(rows) == 14 and rows["key"].is_unique and (rows["meter"] == "fake-counter").all()
    assert list(rows.columns[-3:]) == ["active_interval_width", "active_reason", "active_round"]
    seeds = rows[rows["active_round"] == 1]
    assert (seeds["active_reason"] == "seed").all() and seeds["active_interval_width"].isna().all()
    later = rows[rows["active_round"] > 1]
    assert set(later["active_reason"]) <= {"coverage", "uncertainty"}
    assert np.isfinite(later["active_interval_width"]).all()
    # the wide (bottleneck) intervals are the uncertain ones
    unsure = later[later["active_reason"] == "uncertainty"]
    assert len(unsure) and (unsure["family"] == "bottleneck").all()
    # the export carries them too (CLI), and a finished campaign measures nothing more
    r = CliRunner().invoke(cli, ["dataset", "export", str(out), "-o", str(tmp_path / "r.csv")])
    assert r.exit_code == 0, r.output
    exported = pd.read_csv(tmp_path / "r.csv")
    assert exported["active_reason"].notna().all() and len(exported) == 14
    again = _active(frame, out, 14, uncertainty="interval")
    assert again["summary"].measured_now == 0 and again["rounds"] == []


def test_active_campaign_with_the_committee_records_its_disagreement(tmp_path):
    out = tmp_path / "camp"
    result = _active(_space_configs(), out, 10)
    assert [r["configs"] for r in result["rounds"]] == [6, 4]
    rows = campaign_rows(out)
    later = rows[rows["active_round"] == 2]
    assert len(later) == 4 and np.isfinite(later["active_disagreement"]).all()
    assert (later["active_disagreement"] > 0).all()
    assert rows.loc[rows["active_round"] == 1, "active_disagreement"].isna().all()


def test_killed_active_campaign_resumes_without_remeasuring(tmp_path):
    frame = _space_configs()
    out = tmp_path / "camp"
    with pytest.raises(KeyboardInterrupt):  # dies measuring the 9th config (round 2)
        _active(frame, out, 14, _profiler(fail_after=8))
    # the dead worker's trial: RUNNING, owned by a process that is gone (as after kill -9)
    study = open_campaign_study(out)
    running = [t for t in study.get_trials() if t.state.name == "RUNNING"]
    assert len(running) == 1 and running[0].user_attrs["fields"]["active_round"] == 2
    st = open_storage(f"journal:{out / JOURNAL}")
    trial_id = st.get_trial_id_from_study_id_trial_number(
        st.get_study_id_from_name(STUDY_NAME), running[0].number
    )
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    st.set_trial_user_attr(trial_id, "_owner", {"pid": 999999, "start": 1.0, "boot": boot})
    before = campaign_rows(out)
    assert len(before) == 8
    prof = _profiler()
    measured = []
    real = prof.profile
    prof.profile = lambda c: measured.append(c.key) or real(c)
    result = _active(frame, out, 14, prof)
    assert result["summary"].requeued == 1
    rows = campaign_rows(out)
    assert len(rows) == 14 and rows["key"].is_unique
    assert not set(measured) & set(before["key"]) and len(measured) == 6  # none measured twice
    # the killed round was finished with the choices it had, then round 3 was chosen
    assert [r["round"] for r in result["rounds"]] == [3]
    assert sorted(rows["active_round"].value_counts().items()) == [(1, 6), (2, 4), (3, 4)]
    requeued = rows[rows["key"] == running[0].user_attrs["key"]]
    assert requeued["active_round"].item() == 2 and requeued["active_reason"].item() != "seed"


def test_max_configs_stops_an_active_campaign_between_rounds(tmp_path):
    frame = _space_configs()
    out = tmp_path / "camp"
    assert _active(frame, out, 14, max_configs=7)["summary"].measured_now == 7
    assert len(campaign_rows(out)) == 7
    result = _active(frame, out, 14)
    assert result["summary"].measured_now == 7 and len(campaign_rows(out)) == 14


def test_active_resumes_a_plain_campaign_from_its_rows(tmp_path):
    frame = _space_configs()
    out = tmp_path / "camp"
    run_campaign(
        frame,
        out,
        limit=6,
        threads=1,
        protocol_overrides=dict(time_cap_s=0.02, warmup_runs=1, warmup_min_s=0.0, min_runs=3),
        progress=False,
        profiler=_profiler(),
    )
    result = _active(frame, out, 10)
    assert [r["model_rows"] for r in result["rounds"]] == [6]  # a model from the first call
    rows = campaign_rows(out)
    assert len(rows) == 10 and rows["active_round"].isna().sum() == 6


@pytest.mark.parametrize(
    ("n", "size", "needle"),
    [(41, 4, "at most the 40 configs"), (0, 4, "invalid --active"), (5, 0, "--active-round")],
)
def test_bad_active_counts_write_nothing(tmp_path, n, size, needle):
    with pytest.raises(ConfigError, match=needle):
        run_active_campaign(_space_configs(), tmp_path / "camp", n, round_size=size)
    assert not (tmp_path / "camp").exists()


def _one_line(r, needle):
    assert r.exit_code == 1, r.output
    assert r.output.startswith("error:") and needle in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--active", "100000000"], "invalid --active: expected at most the"),
        (["--active", "0"], "invalid --active"),
        (["--active", "8", "--max-configs", "4"], "invalid --max-configs with --active"),
        (["--active-round", "4"], "--active-round without --active"),
        (["--active", "8", "--active-round", "0"], "invalid --active-round"),
    ],
)
def test_cli_bad_active_is_one_line_and_writes_nothing(tmp_path, args, needle):
    out = tmp_path / "camp"
    r = CliRunner().invoke(cli, ["profile", "cpu", "-o", str(out), "--threads", "1", *args])
    _one_line(r, needle)
    assert "Use " in r.output or "Drop " in r.output or "Add " in r.output
    assert not out.exists()


@pytest.mark.slow  # real measurements of tiny configs and a real fast-preset fit (~15-30 s)
def test_cli_profile_active_measures_and_records_the_choice(tmp_path):
    grid = load_space("cpu").grid()
    tiny = grid[(grid["width"] == grid["width"].min()) & (grid["resolution"] == 32)]
    csv = tmp_path / "c.csv"
    tiny[tiny["batch_size"] <= 8].head(44).to_csv(csv, index=False)
    out = tmp_path / "camp"
    args = ["profile", str(csv), "-o", str(out), "--threads", "1", "--time-cap-s", "0.15"]
    r = CliRunner().invoke(cli, [*args, "--active", "34", "--active-round", "4", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["done"] == 34 and [x["configs"] for x in doc["active_rounds"]] == [30, 4]
    assert doc["active_rounds"][0]["reasons"] == {"seed": 30}
    assert doc["active_rounds"][1]["model_rows"] == 30  # the real CostModel, refitted
    rows = campaign_rows(out)
    assert (rows["status"] == "ok").all() and rows["active_reason"].notna().all()
    assert set(rows.loc[rows["active_round"] == 2, "active_reason"]) <= {"coverage", "uncertainty"}


# -- query by committee (the default uncertainty) ---------------------------------------------
def _synthetic_latency(frame: pd.DataFrame) -> np.ndarray:
    """A smooth fake latency (ms) of the knobs: labelled fake, never a measurement."""
    return (
        0.02
        * frame["batch_size"].to_numpy(float)
        * (frame["resolution"].to_numpy(float) / 32) ** 2
        * frame["width"].to_numpy(float)
        * frame["depth"].to_numpy(float) ** 0.5
    )


def test_committee_disagrees_more_far_from_the_measured_rows(grid):
    from carb_nas.active import committee_disagreement

    small = grid[grid["batch_size"] <= 8].reset_index(drop=True)
    measured = small.iloc[:80].assign(latency_ms=lambda f: _synthetic_latency(f))
    near = small.iloc[:80]  # the measured configs themselves
    far = grid[grid["batch_size"] >= 128].iloc[:80]  # batch sizes never measured
    # plain log-latency members (physical=False): they extrapolate to unseen batch sizes
    u_near, _ = committee_disagreement(measured, near, seed=0, physical=False)
    u_far, mean_far = committee_disagreement(measured, far, seed=0, physical=False)
    assert np.all(np.isfinite(u_far)) and np.median(u_far) > 2 * np.median(u_near)
    # the members' mean is in log units of the target
    assert mean_far.shape == (len(far),)


def test_physical_committee_is_sure_where_the_physics_explains_the_latency(grid):
    """A latency the physical prior explains (a fake: seconds per FLOP plus per layer) leaves
    the physical committee little to disagree on, also at batch sizes never measured."""
    from carb_nas.active import committee_disagreement
    from carb_nas.costmodel import model_inputs

    def physics(f):
        X = model_inputs(f)
        return 1e-8 * X["flops"].to_numpy(float) + 0.01 * X["n_conv"].to_numpy(float)

    small = grid[grid["batch_size"] <= 8].reset_index(drop=True)
    measured = small.iloc[:80].assign(latency_ms=physics)
    far = grid[grid["batch_size"] >= 128].iloc[:80]
    u_phys, mean_phys = committee_disagreement(measured, far, seed=0)
    u_plain, _ = committee_disagreement(measured, far, seed=0, physical=False)
    assert np.median(u_phys) < 0.5 * np.median(u_plain)
    # and its mean carries the prior: within 5 % of the fake latency where none was measured
    assert np.median(np.abs(np.exp(mean_phys) / physics(far) - 1)) < 0.05


def test_committee_needs_measured_latencies(grid):
    from carb_nas.active import committee_disagreement

    with pytest.raises(ConfigError, match="cannot fit a committee"):
        committee_disagreement(grid.iloc[:10], grid.iloc[10:20])


def test_committee_choice_prefers_the_unmeasured_region_and_records_it(grid, torch_model):
    small = grid[grid["batch_size"] <= 8]
    measured = small.iloc[:60].assign(latency_ms=lambda f: _synthetic_latency(f))
    picks = choose_active(grid, measured, torch_model, n=20, seed=0)
    assert "active_disagreement" in picks and np.isfinite(picks["active_disagreement"]).all()
    assert set(picks["active_reason"]) <= set(ACTIVE_REASONS[1:])
    assert not set(config_keys(picks)) & set(config_keys(measured))
    # most picks lie outside the measured small-batch region (random: ~ the grid's share)
    share = float((picks["batch_size"] > 8).mean())
    assert share > float((grid["batch_size"] > 8).mean())
    # seeded: the same call gives the same picks
    again = choose_active(grid, measured, torch_model, n=20, seed=0)
    assert config_keys(again) == config_keys(picks)


def test_committee_batch_spreads_instead_of_piling_onto_the_most_uncertain(grid, torch_model):
    from carb_nas.active import committee_disagreement

    small = grid[grid["batch_size"] <= 8]
    measured = small.iloc[:60].assign(latency_ms=lambda f: _synthetic_latency(f))
    picks = choose_active(grid, measured, torch_model, n=20, seed=0)
    # the 20 configs the committee is least sure of, taken alone
    done = set(config_keys(measured))
    rest = grid[[k not in done for k in config_keys(grid)]].reset_index(drop=True)
    u, _ = committee_disagreement(measured, rest, seed=0)
    top = rest.iloc[np.argsort(-u)[:20]]
    knobs = ["family", "batch_size", "resolution", "width", "depth"]
    assert sum(picks[k].nunique() for k in knobs) > sum(top[k].nunique() for k in knobs)


def test_committee_scores_a_sample_of_a_large_candidate_set(grid, torch_model, monkeypatch):
    import carb_nas.active as active

    monkeypatch.setattr(active, "MAX_FACILITY", 50)
    measured = grid.iloc[:30].assign(latency_ms=lambda f: _synthetic_latency(f))
    picks = choose_active(grid, measured, torch_model, n=12, seed=1)
    keys = config_keys(picks)
    assert len(set(keys)) == 12 and not set(keys) & set(config_keys(measured))
    assert config_keys(choose_active(grid, measured, torch_model, n=12, seed=1)) == keys


def test_facility_location_follows_density_weights_and_coverage():
    from carb_nas.costmodel import facility_location_order

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
    from carb_nas.costmodel import facility_location_order

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


def test_round_model_uses_the_physical_offsets(grid):
    from carb_nas.active import fit_round_model
    from carb_nas.costmodel import PHYSICAL_OFFSETS, model_inputs

    rows = grid.iloc[:40].assign(
        status="ok",
        latency_ms=lambda f: _synthetic_latency(f),
        peak_mem_mb=lambda f: model_inputs(f)["tensor_peak_mb"].to_numpy(float) * 1.2,
    )
    model = fit_round_model(rows)
    assert model.offsets_["latency_ms"] == list(PHYSICAL_OFFSETS["latency_ms"])
    assert model.offsets_["peak_mem_mb"] == PHYSICAL_OFFSETS["peak_mem_mb"]
    assert fit_round_model(rows.iloc[:20]) is None  # fewer than MIN_FIT_ROWS


def test_unknown_uncertainty_is_refused(grid):
    with pytest.raises(ConfigError, match="invalid uncertainty"):
        choose_active(grid, n=3, uncertainty="entropy")


@pytest.mark.parametrize("uncertainty", ["committee", "interval"])
def test_a_round_chooses_among_families_no_round_has_measured(uncertainty):
    """`carb-nas profile zoo --active 40` stopped at its third round: the round model, fitted
    on the families measured so far, refused candidates of the others ("unseen label(s) in
    column 'family'"). They are predicted with the family as missing, and each family is a
    coverage coordinate of its own, so the next round reaches them."""
    from carb_nas.active import coverage_matrix, fit_round_model
    from carb_nas.costmodel import model_inputs

    zoo = Space.from_dict(
        {
            "name": "four",
            "knobs": {"family": ["basic", "mobilenet_v2", "vgg", "efficientnet"],
                      "width": [0.25, 0.5], "resolution": [32, 64], "batch_size": [1, 2, 4, 8]},
            "family": {"basic": {"depth": [10, 18]}, "mobilenet_v2": {"depth": [7, 9]},
                       "vgg": {"depth": [11]}, "efficientnet": {"depth": [8]}},
        }
    ).grid()  # fmt: skip
    seen = zoo[zoo["family"].isin(["basic", "mobilenet_v2"])].sample(32, random_state=0)
    rows = seen.assign(
        status="ok",
        latency_ms=lambda f: _synthetic_latency(f),
        peak_mem_mb=lambda f: model_inputs(f)["tensor_peak_mb"].to_numpy(float) * 1.2,
    )  # SYNTHETIC costs
    model = fit_round_model(rows)
    unseen = zoo[zoo["family"].isin(["vgg", "efficientnet"])].sample(12, random_state=1)
    cand = pd.concat([seen, unseen])
    picks = choose_active(cand, rows, model, n=8, seed=0, uncertainty=uncertainty)
    assert len(picks) == 8 and not set(config_keys(picks)) & set(config_keys(rows))
    assert {"vgg", "efficientnet"} & set(picks["family"])  # reaches unmeasured families
    cov = coverage_matrix(zoo.head(3), families=["basic", "bottleneck", "vgg"])
    assert cov.shape == (3, 6)  # 4 log knobs + bottleneck + vgg
    assert coverage_matrix(zoo.head(3)).shape == (3, 5)  # the ResNet space's: is_bottleneck
