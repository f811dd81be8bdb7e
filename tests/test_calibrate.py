"""Calibrate on arrival (carb_nas.calibrate, carb-nas calibrate, search's calibrate-first,
validate's median ratio and --recalibrate).

The profiler is a scripted FAKE: its rows are labelled fake (device_name, meter, protocol) and
"measure" the fixture model's own prediction times a known factor, so a calibration must
recover that factor. The clock is the fake's too: each config costs ``seconds_per_config``.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import carb_nas.calibrate as cal_mod
from carb_nas.calibrate import (
    MIN_CALIBRATION_ROWS,
    calibrate_on_arrival,
    calibration_dir,
    choose_configs,
    load_calibration,
    machine_fingerprint,
    recalibrate,
)
from carb_nas.cli import cli
from carb_nas.costmodel import model_inputs
from carb_nas.datasets import SCHEMA
from carb_nas.errors import ConfigError, InputFileError, ModelError
from carb_nas.space import CONFIG_COLUMNS

PLATFORM = "cpu/torch/fp32"
FAKE = "FAKE CPU (scripted test profiler)"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class FakeProfiler:
    """Rows labelled fake: latency = factor x the model's prediction, memory as predicted."""

    kind = "cpu"

    def __init__(self, model, factor=1.3, *, device_name=FAKE, platform=PLATFORM, clock=None,
                 seconds_per_config=0.0, status="ok", reference_ms=None):  # fmt: skip
        self.model, self.factor, self.device_name = model, factor, device_name
        self.reference_ms = reference_ms  # a made-up speed-probe time for every row
        self.platform, self.clock, self.seconds = platform, clock, seconds_per_config
        self.status = status
        self.runtime = type("R", (), {"name": platform.split("/")[1], "threads": 1})()
        self.fingerprint = {
            "platform": platform, "device": "cpu", "device_name": device_name,
            "cpu_model": device_name, "threads": 1, "runtime": self.runtime.name,
            "precision": platform.split("/")[2], "meter": "fake", "protocol": "fake",
        }  # fmt: skip
        self.profiled: list[str] = []

    def profile(self, config):
        if self.clock is not None:
            self.clock.now += self.seconds
        self.profiled.append(config.key)
        pred = self.model.predict(model_inputs(pd.DataFrame([config.as_dict()])))
        row = dict.fromkeys(SCHEMA)
        row.update(config.as_dict())
        row.update(
            key=config.key, platform=self.platform, device="cpu", device_name=self.device_name,
            threads=1, fingerprint=json.dumps(self.fingerprint), protocol="fake",
            protocol_params="{}", timestamp="2026-12-01T00:00:00+00:00", status=self.status,
            meter="fake", latency_ms=float(pred["latency_ms"].iloc[0]) * self.factor,
            peak_mem_mb=float(pred["peak_mem_mb"].iloc[0]), reference_ms=self.reference_ms,
        )  # fmt: skip
        return row

    def close(self):
        pass


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(cal_mod.time, "perf_counter", c.perf_counter)
    return c


def _grid(n=6):
    from carb_nas.space import load_space

    return load_space("cpu").grid().sample(n=n, random_state=1).reset_index(drop=True)


def test_calibration_measures_with_the_heap_frozen_and_unfreezes_it(
    torch_model, model_cache, clock
):
    """What lived before the measurements (a loaded default model) is frozen while they run,
    so each config's gc.collect() scans only what it creates; unfrozen after, also when a
    measurement raises."""
    import gc

    class Recording(FakeProfiler):
        def profile(self, config):
            frozen.append(gc.get_freeze_count())
            return super().profile(config)

    before = gc.get_freeze_count()
    frozen: list[int] = []
    prof = Recording(torch_model, 1.3, clock=clock, seconds_per_config=1.0)
    calibrate_on_arrival(PLATFORM, 12, prof, source_model=torch_model, passes=1, save=False)
    assert frozen and min(frozen) > before
    assert gc.get_freeze_count() == before

    class Failing(FakeProfiler):
        def profile(self, config):
            raise RuntimeError("the runtime died")

    with pytest.raises(RuntimeError, match="the runtime died"):
        calibrate_on_arrival(
            PLATFORM, 12, Failing(torch_model, clock=clock), source_model=torch_model, save=False
        )
    assert gc.get_freeze_count() == before


def test_a_frozen_heap_inside_another_leaves_the_outer_frozen():
    """gc.unfreeze thaws everything: an inner frozen_heap (a loop of measurements inside
    another) must not, or the outer loop scans the whole heap again."""
    import gc

    from carb_nas.measure import frozen_heap

    before = gc.get_freeze_count()
    with frozen_heap():
        outer = gc.get_freeze_count()
        with frozen_heap():
            pass
        assert gc.get_freeze_count() == outer > before
    assert gc.get_freeze_count() == before


def test_choose_configs_spreads_over_the_knobs_and_honours_exclude(torch_model):
    order = choose_configs(torch_model, PLATFORM, n=40)
    assert len(order) == 40 and not order[list(CONFIG_COLUMNS)].duplicated().any()
    first = order.head(12)
    # every prefix is spread: both families, several batch sizes, resolutions and depths
    assert set(first["family"]) == {"basic", "bottleneck"}
    for knob in ("batch_size", "resolution", "depth", "width"):
        assert first[knob].nunique() >= 3, knob
    assert (order["predicted_latency_ms"] <= cal_mod.MAX_PREDICTED_MS).all()
    # representative, not the corners first: most early picks sit inside every knob's range
    # (farthest-point order put 16 of the first 20 on some knob's edge, this one 4)
    pool = choose_configs(torch_model, PLATFORM, n=10**6)
    knobs = ["batch_size", "resolution", "width", "depth"]
    edge = np.zeros(20, dtype=bool)
    for k in knobs:
        edge |= order[k].head(20).isin([pool[k].min(), pool[k].max()]).to_numpy()
    assert edge.sum() <= 8
    held = order.head(5)[list(CONFIG_COLUMNS)]
    again = choose_configs(torch_model, PLATFORM, n=40, exclude=held)
    keys = set(held.astype(str).itertuples(index=False))
    assert not any(tuple(r) in keys for r in again[list(CONFIG_COLUMNS)].astype(str).itertuples(
        index=False))  # fmt: skip


def test_choose_configs_among_given_candidates(torch_model):
    from carb_nas.datasets import load_dataset

    rows = load_dataset(PLATFORM, ok_only=True)[list(CONFIG_COLUMNS)].drop_duplicates()
    given = rows.sample(n=60, random_state=3).reset_index(drop=True)
    order = choose_configs(torch_model, PLATFORM, n=10, candidates=given)
    keys = set(given.astype(str).itertuples(index=False))
    assert 0 < len(order) <= 10
    assert all(tuple(r) in keys for r in order[list(CONFIG_COLUMNS)].astype(str).itertuples(
        index=False))  # fmt: skip
    # runtime and precision are the platform's where absent
    bare = given.drop(columns=["runtime", "precision"])
    assert len(choose_configs(torch_model, PLATFORM, n=10, candidates=bare)) == len(order)
    with pytest.raises(InputFileError, match=r"candidate configs: missing column\(s\) \['width'\]"):
        choose_configs(torch_model, PLATFORM, candidates=given.drop(columns=["width"]))
    with pytest.raises(InputFileError, match="candidate configs: not a table of configs"):
        choose_configs(torch_model, PLATFORM, candidates=given.to_dict("records"))


def test_calibration_recovers_the_machine_factor_and_is_cached(torch_model, model_cache, clock):
    prof = FakeProfiler(torch_model, 1.3, clock=clock, seconds_per_config=1.0)
    seen = []
    cal = calibrate_on_arrival(
        PLATFORM, 12, prof, source_model=torch_model, progress=lambda *a: seen.append(a),
        passes=1,
    )  # fmt: skip
    # the budget stops it: 1 s per config, 12 s in all, the last 20 % (2.4 s) kept for
    # measuring again the configs the map fits worst
    assert 9 <= cal.n_rows <= 11 and cal.n_rows < len(prof.profiled) <= 12
    assert all(e <= 12 for _, e, _ in seen) and seen[-1][0] == len(prof.profiled)
    # those second measurements are not the machine's repeatability (outliers by choice)
    assert cal.repeatability()["n"] == 0 and "repeatability" not in cal.summary()
    assert cal.factors()["latency_ms"] == pytest.approx(1.3, rel=1e-6)
    assert cal.factors()["peak_mem_mb"] == pytest.approx(1.0, rel=1e-6)
    assert cal.replaced is None
    X = model_inputs(_grid())
    np.testing.assert_allclose(
        cal.model.predict(X)["latency_ms"], 1.3 * torch_model.predict(X)["latency_ms"], rtol=1e-6
    )
    d = calibration_dir(PLATFORM, machine_fingerprint(prof))
    assert d == cal.directory and str(d).startswith(str(model_cache))
    assert sorted(p.name for p in d.iterdir()) == ["calibration.json", "rows.csv"]
    assert not list(d.glob("*.pkl")) and (pd.read_csv(d / "rows.csv")["meter"] == "fake").all()
    again = load_calibration(PLATFORM, FakeProfiler(torch_model), source_model=torch_model)
    assert again is not None and again.n_rows == cal.n_rows
    pd.testing.assert_frame_equal(again.model.predict(X, alpha=0.1), cal.model.predict(X, 0.1))
    assert again.model.platform_["device_name"] == FAKE  # the model now describes this machine


def test_a_torch_calibration_carries_this_kinds_module_ratio(
    torch_model, model_cache, clock, monkeypatch
):
    """A calibration of cpu/torch/fp32 fits the module ratio (this CPU kind's module model
    against the config model, over shipped configs) for its map, keeps it in
    calibration.json and predicts alike when loaded; not on a budget too short for its
    column; ONNX Runtime has no module model."""
    from carb_nas.costmodel.calibration import ModuleRatio

    # the surrogate's path: a CPU kind without torch node rows (test_costmodel_nodes has those)
    monkeypatch.setattr(cal_mod, "node_ratio", lambda *a, **k: None)
    prof = FakeProfiler(torch_model, 1.3, clock=clock, seconds_per_config=0.4)
    short = calibrate_on_arrival(PLATFORM, 12, prof, source_model=torch_model, save=False)
    assert short.model.module_ratio is None  # a budget too short for its column
    cal = calibrate_on_arrival(PLATFORM, 24, prof, source_model=torch_model, passes=1)
    assert isinstance(cal.model.module_ratio, ModuleRatio)
    assert cal.model.feature_names_[-1] == "log_module_ratio" and cal.n_rows >= 20
    doc = json.loads((cal.directory / "calibration.json").read_text())
    assert "booster" in json.dumps(doc)
    X = model_inputs(_grid())
    ratio = cal.model.module_ratio.predict(X, np.log(torch_model.predict(X)["latency_ms"]))
    assert np.isfinite(ratio).all() and np.ptp(ratio) > 0  # it varies by config
    again = load_calibration(PLATFORM, FakeProfiler(torch_model), source_model=torch_model)
    pd.testing.assert_frame_equal(again.model.predict(X), cal.model.predict(X))
    # a recalibration keeps the ratio (the two models', not the rows'): not fitted again
    with monkeypatch.context() as m:
        m.setattr(cal_mod, "module_ratio", lambda *a, **k: pytest.fail("fitted again"))
        folded = recalibrate(PLATFORM, cal.rows.head(3), FakeProfiler(torch_model, 1.3),
                             source_model=torch_model)  # fmt: skip
    assert folded.model.module_ratio.booster_text == cal.model.module_ratio.booster_text
    # a damaged ratio in calibration.json is one clear error, not LightGBM's
    doc["calibration"]["module_ratio"]["booster"] = "tree\nnot a booster"
    (cal.directory / "calibration.json").write_text(json.dumps(doc))
    with pytest.raises(ModelError, match="damaged module ratio.*Calibrate again"):
        load_calibration(PLATFORM, FakeProfiler(torch_model), source_model=torch_model)
    assert cal_mod.module_ratio("cpu/onnxruntime/fp32", torch_model, "amd-zen3") is None
    assert cal_mod.module_ratio("cpu/torch/fp32/zen4", torch_model) is None


def test_one_slow_first_measurement_is_measured_again_and_bends_nothing(
    torch_model, model_cache, clock
):
    """With one pass the calibration keeps a share of its budget to measure again the configs
    its map fits worst: a config whose first measurement ran 1.6x slow (a noisy moment) is
    measured again, its faster row is kept and flagged, and the factor is the machine's."""

    class OnceSlow(FakeProfiler):
        def profile(self, config):
            row = super().profile(config)
            if self.profiled.count(config.key) == 1 and len(self.profiled) == 2:
                row["latency_ms"] *= 1.6  # the second config's first measurement only
            return row

    prof = OnceSlow(torch_model, 1.3, clock=clock, seconds_per_config=1.0)
    cal = calibrate_on_arrival(PLATFORM, 12, prof, source_model=torch_model, save=False)
    slow = prof.profiled[1]
    assert prof.profiled.count(slow) == 2  # the worst-fitted config came first
    row = cal.rows.set_index("key").loc[slow]
    assert json.loads(row["protocol_params"])["remeasured"] == cal_mod.REMEASURED
    assert cal.factors()["latency_ms"] == pytest.approx(1.3, rel=1e-6)
    ratio = cal.model.predict(model_inputs(cal.rows))["latency_ms"] / cal.rows["latency_ms"]
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-6)  # the slow reading left no trace


def test_a_qualified_dataset_is_calibrated_from_a_sample_of_its_traced_pool(
    torch_model, model_cache, clock, monkeypatch
):
    import copy

    import carb_nas.features as features_module

    zoo = "cpu/torch/fp32/zoo"  # every built-in family, 880 networks
    source = copy.deepcopy(torch_model).set_params(handle_unknown="ignore")  # a stand-in
    monkeypatch.setattr(cal_mod, "MAX_TRACED_POOL", 40)
    featurized = []
    real = features_module.compute_features
    monkeypatch.setattr(
        features_module, "compute_features", lambda cfg: featurized.append(len(cfg)) or real(cfg)
    )
    from carb_nas.datasets import load_dataset
    from carb_nas.space import RESNET_FAMILIES

    rows = load_dataset(zoo, ok_only=True)[list(CONFIG_COLUMNS)].drop_duplicates()
    n_resnet = int(rows["family"].isin(RESNET_FAMILIES).sum())  # closed-form: not sampled
    order = choose_configs(source, zoo, n=12)
    # before: all 880 networks featurized, 580 of them traced (~4 min for the 4,471 of
    # zoo-zen5: the whole time budget before one config was measured)
    assert len(order) == 12 and featurized == [n_resnet + 40] and len(rows) > n_resnet + 40
    assert order["family"].nunique() >= 6  # the spread covers the families, not only ResNets
    prof = FakeProfiler(source, 1.7, clock=clock, seconds_per_config=1.0)
    cal = calibrate_on_arrival(zoo, 8, prof, source_model=source, passes=1)
    assert cal.factors()["latency_ms"] == pytest.approx(1.7, rel=1e-6)
    assert cal.directory.name.startswith("cpu_torch_fp32_zoo-")
    again = load_calibration(zoo, FakeProfiler(source), source_model=source)
    assert again is not None and again.n_rows == cal.n_rows


class UnevenProfiler(FakeProfiler):
    """Fake rows whose configs take 0.5 s and 3 s in turn, the same in every round."""

    def profile(self, config):
        self.seconds = 3.0 if sum(map(ord, config.key)) % 2 else 0.5
        return super().profile(config)


@pytest.mark.parametrize("budget_s", [12, 15.5, 21])
def test_calibration_ends_within_its_budget_with_later_rounds(
    torch_model, model_cache, clock, budget_s
):
    # no config may start that would end after the budget, in any round
    prof = UnevenProfiler(torch_model, 1.2, clock=clock)
    cal = calibrate_on_arrival(PLATFORM, budget_s, prof, source_model=torch_model, passes=3)
    assert cal.seconds <= budget_s and len(prof.profiled) > cal.n_rows >= 3


class DriftingProfiler(FakeProfiler):
    """Fake rows whose machine gets slower over time: each call is 10 % slower than the last."""

    def profile(self, config):
        row = super().profile(config)
        row["latency_ms"] *= 1.1 ** (len(self.profiled) - 1)
        return row


def test_training_the_default_model_on_first_use_is_not_taken_from_the_budget(
    torch_model, model_cache, clock, monkeypatch
):
    """`carb-nas calibrate` on a fresh machine trains the default model first (12-30 s): the
    time budget is for choosing and measuring configs, so that does not eat it."""

    def slow_first_use(platform, **kw):
        clock.now += 100.0  # longer than the whole budget
        return torch_model

    from carb_nas.predictors import _load

    monkeypatch.setattr(_load, "load_default_model", slow_first_use)
    prof = FakeProfiler(torch_model, clock=clock, seconds_per_config=1.0)
    cal = calibrate_on_arrival(PLATFORM, 20, prof)
    assert cal.n_rows >= 10 and cal.seconds <= 20


class NoisyRunsProfiler(FakeProfiler):
    """FAKE rows whose timed runs varied by ``cv`` (as latency_cv records it)."""

    def __init__(self, model, cv, **kw):
        super().__init__(model, 1.0, **kw)
        self.cv = cv

    def profile(self, config):
        return {**super().profile(config), "latency_cv": self.cv}


@pytest.mark.parametrize("cv", [0.02, 0.15])
def test_one_pass_calibration_says_when_the_runs_were_noisy(torch_model, model_cache, clock, cv):
    """With one pass no config is measured twice in whole passes, so the repeatability note
    cannot fire: the median CV of each config's timed runs is the noise figure then."""
    prof = NoisyRunsProfiler(torch_model, cv, clock=clock, seconds_per_config=1.0)
    cal = calibrate_on_arrival(PLATFORM, 20, prof, source_model=torch_model)
    assert cal.repeatability()["n"] == 0
    assert cal.run_cv_pct() == pytest.approx(100 * cv)
    assert f"median CV of {100 * cv:.1f}%" in cal.summary()
    assert cal.to_dict()["run_cv_median_pct"] == pytest.approx(100 * cv)
    noisy = [n for n in cal.notes if "noisy while calibrating" in n]
    assert len(noisy) == (cv > cal_mod.NOISY_RUN_CV_PCT / 100)
    assert not noisy or "median CV of 15%" in noisy[0]


def test_calibration_interleaves_passes_and_keeps_the_fastest(torch_model, model_cache, clock):
    prof = DriftingProfiler(torch_model, 1.0, clock=clock, seconds_per_config=1.0)
    cal = calibrate_on_arrival(PLATFORM, 20, prof, source_model=torch_model, passes=3)
    n = cal.n_rows
    # 1 s per measurement, 20 s: the first round stops while its later rounds still fit
    assert n == 6 and len(prof.profiled) == 3 * n and prof.profiled == prof.profiled[:n] * 3
    params = [json.loads(p) for p in cal.rows["protocol_params"]]
    assert all(p["passes"] == 3 and len(p["pass_latency_ms"]) == 3 for p in params)
    # the machine only got slower: every kept row is its config's first (fastest) pass
    for p, lat in zip(params, cal.rows["latency_ms"]):
        assert lat == pytest.approx(min(p["pass_latency_ms"]), rel=1e-6)
        assert p["pass_latency_ms"][0] == min(p["pass_latency_ms"])
    rep = cal.repeatability()
    # config i was measured at call i and again at call n + i: 1.1 ** n - 1 apart
    assert rep["n"] == n and rep["median_pct"] == pytest.approx(100 * (1.1**n - 1), rel=1e-4)
    assert any("timings moved" in note for note in cal.notes)
    assert f"repeatability: {n} configs measured twice" in cal.summary()
    assert cal.to_dict()["repeatability"]["n"] == n
    again = load_calibration(PLATFORM, FakeProfiler(torch_model), source_model=torch_model)
    assert again is not None and again.repeatability() == rep
    with pytest.raises(ConfigError, match="bad passes"):
        calibrate_on_arrival(PLATFORM, 10, prof, source_model=torch_model, passes=0)


def test_calibrated_model_keeps_uncalibrated_targets_and_widens_intervals(
    torch_model, model_cache, clock
):
    cal = calibrate_on_arrival(PLATFORM, 8, FakeProfiler(torch_model, 2.0, clock=clock,
                               seconds_per_config=1.0), source_model=torch_model)  # fmt: skip
    X = model_inputs(_grid())
    got, src = cal.model.predict(X, alpha=0.1), torch_model.predict(X, alpha=0.1)
    assert list(got.columns) == list(src.columns)  # stands in for the source model
    assert cal.model.targets_ == torch_model.targets_
    ratio_lo = got["latency_ms_lower"] / got["latency_ms"]
    assert (ratio_lo <= src["latency_ms_lower"] / src["latency_ms"] + 1e-9).all()
    assert (got["latency_ms"] > 1.9 * src["latency_ms"]).all()


def test_recalibration_says_what_it_replaces(torch_model, model_cache, clock):
    first = calibrate_on_arrival(PLATFORM, 6, FakeProfiler(torch_model, clock=clock,
                                 seconds_per_config=1.0), source_model=torch_model)  # fmt: skip
    second = calibrate_on_arrival(PLATFORM, 6, FakeProfiler(torch_model, 1.5, clock=clock,
                                  seconds_per_config=1.0), source_model=torch_model)  # fmt: skip
    assert second.replaced and first.created in second.replaced and "rows" in second.replaced
    assert "replaced" in second.summary()
    loaded = load_calibration(PLATFORM, FakeProfiler(torch_model), source_model=torch_model)
    assert loaded.factors()["latency_ms"] == pytest.approx(1.5, rel=1e-6)


def test_recalibrate_folds_validated_rows_in(torch_model, model_cache, clock):
    first = calibrate_on_arrival(PLATFORM, 5, FakeProfiler(torch_model, clock=clock,
                                 seconds_per_config=1.0), source_model=torch_model)  # fmt: skip
    prof = FakeProfiler(torch_model, 1.3)
    from carb_nas.space import frame_to_configs

    new = pd.DataFrame([prof.profile(c) for c in frame_to_configs(_grid(4))])
    again = pd.concat([new, first.rows.head(1)])  # one config measured again: replaced
    cal = recalibrate(PLATFORM, again, prof, source_model=torch_model)
    assert len(cal.rows) == first.n_rows + 4 and not cal.rows["key"].duplicated().any()
    assert cal.replaced and "folded" in cal.notes[0]


def test_budget_too_short_and_too_few_rows_write_nothing(torch_model, model_cache, clock):
    with pytest.raises(ConfigError, match="time budget too short"):
        calibrate_on_arrival(PLATFORM, 1, FakeProfiler(torch_model), source_model=torch_model)
    failing = FakeProfiler(torch_model, clock=clock, seconds_per_config=1.0, status="error")
    with pytest.raises(ConfigError, match=f"at least {MIN_CALIBRATION_ROWS} configs"):
        calibrate_on_arrival(PLATFORM, 6, failing, source_model=torch_model)
    assert not (model_cache / "calibrations").exists() or not any(
        (model_cache / "calibrations").iterdir()
    )


def test_another_machines_calibration_is_refused(torch_model, model_cache, clock):
    here = FakeProfiler(torch_model, clock=clock, seconds_per_config=1.0)
    cal = calibrate_on_arrival(PLATFORM, 6, here, source_model=torch_model)
    other = FakeProfiler(torch_model, device_name="FAKE other CPU")
    # looked up by this machine's key: the other machine's entry is simply not there
    assert load_calibration(PLATFORM, other, source_model=torch_model) is None
    # pointed at explicitly (a copied cache): refused, one line, not used
    with pytest.raises(ModelError, match="another machine's") as e:
        load_calibration(PLATFORM, other, directory=cal.directory, source_model=torch_model)
    assert "\n" not in str(e.value) and "device_name" in str(e.value)
    # a cache entry whose recorded fingerprint was edited is refused the same way
    doc = json.loads((cal.directory / "calibration.json").read_text())
    doc["fingerprint"]["device_name"] = "FAKE edited"
    (cal.directory / "calibration.json").write_text(json.dumps(doc))
    with pytest.raises(ModelError, match="another machine's"):
        load_calibration(PLATFORM, here, source_model=torch_model)


def test_calibration_of_another_source_model_is_refused(torch_model, ort_model, model_cache,
                                                        clock):  # fmt: skip
    calibrate_on_arrival(PLATFORM, 6, FakeProfiler(torch_model, clock=clock,
                         seconds_per_config=1.0), source_model=torch_model)  # fmt: skip
    with pytest.raises(ModelError, match="another default"):
        load_calibration(PLATFORM, FakeProfiler(torch_model), source_model=ort_model)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["calibrate", "cpu/torch/fp32", "--time-budget-s", "2"], "time budget too short"),
        (["calibrate", "cpu/torch/fp32", "--time-budget-s", "nan"], "invalid --time-budget-s"),
        (["calibrate", "cpu/torch/fp32", "--time-budget-s", "inf"], "a finite number of seconds"),
        (["calibrate", "cpu/torch/fp16"], "unsupported precision"),
        (["calibrate", "cuda/torch/fp16"], "or calibrate a CPU platform here: cpu/"),
        (["calibrate", "cuda/torch/bf16"], "no default model to calibrate for 'cuda/torch/bf16'"),
        (["calibrate", "torch"], "DEVICE/RUNTIME/PRECISION"),
        (["calibrate", "gpu/torch/fp32"], "unknown device in platform 'gpu/torch/fp32'"),
    ],
)
def test_cli_calibrate_bad_input_is_one_line(args, needle, model_cache):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle.lower() in lines[0].lower()
    assert "Traceback" not in res.output and not (model_cache / "calibrations").exists()


def _default_model_is(monkeypatch, model):
    """The registry's default model of every platform is ``model`` (patched under the one
    loader, ``carb_nas.predictors``)."""
    from carb_nas.predictors import _load, _store

    for module in (_load, _store):
        monkeypatch.setattr(module, "load_default_model", lambda p, verbose=True, **k: model)


def _fake_platform_profilers(monkeypatch, models, factor=1.3, seconds=1.0):
    """Every Profiler carb_nas.calibrate builds is a FakeProfiler on a fake clock: the
    ``clock`` fixture's when a test has it (a test's own FakeProfiler on it then advances the
    clock calibrate reads; on a second clock, its calibrations measured every candidate)."""
    installed = getattr(cal_mod.time.perf_counter, "__self__", None)
    clock = installed if isinstance(installed, FakeClock) else FakeClock()
    monkeypatch.setattr(cal_mod.time, "perf_counter", clock.perf_counter)
    from carb_nas.predictors import _store

    def fake(platform, source, protocol="adaptive"):
        return FakeProfiler(
            models["/".join(platform.split("/")[:3])],  # a qualified dataset's platform
            factor,
            platform="/".join(platform.split("/")[:3]),
            clock=clock,
            seconds_per_config=seconds,
        )

    for module in (cal_mod, _store):
        monkeypatch.setattr(module, "calibration_profiler", fake)
        monkeypatch.setattr(module, "check_runnable", lambda platform: platform.split("/"))


def test_cli_calibrate_json_and_recalibration_note(torch_model, model_cache, monkeypatch):
    _patch_defaults(monkeypatch, torch_model)
    res = CliRunner().invoke(cli, ["calibrate", PLATFORM, "--time-budget-s", "8", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert 6 <= doc["n_rows"] <= 8 and doc["factors"]["latency_ms"] == pytest.approx(1.3)
    assert doc["repeatability"]["n"] == 0  # one pass by default
    assert "ETA" in res.stderr and doc["replaced"] is None
    res = CliRunner().invoke(
        cli, ["calibrate", PLATFORM, "--time-budget-s", "8", "--passes", "3", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # 8 s at 1 s per measurement: the fewest rows a fit takes, then their later passes
    assert doc["n_rows"] == 3 and doc["repeatability"] == {"n": 3, "median_pct": 0.0,
                                                           "max_pct": 0.0}  # fmt: skip
    res = CliRunner().invoke(cli, ["calibrate", PLATFORM, "--passes", "0"])
    assert res.exit_code == 1 and res.output.startswith("error: bad passes")
    res = CliRunner().invoke(cli, ["calibrate", PLATFORM, "--time-budget-s", "8"])
    assert res.exit_code == 0 and "replaced the calibration of" in res.stderr
    assert "calibrated cpu/torch/fp32 on this machine" in res.stdout


def test_search_with_no_arguments_calibrates_first(model_dirs, model_cache, monkeypatch,
                                                   torch_model, ort_model):  # fmt: skip
    import carb_nas.costmodel._defaults as cm

    shipped = {"cpu/torch/fp32": model_dirs[0], "cpu/onnxruntime/fp32": model_dirs[1]}
    monkeypatch.setattr(
        cm, "default_model_dir", lambda platform="cpu/torch/fp32": shipped.get(platform,
                                                                               model_cache / "x"),
    )  # fmt: skip
    models = {"cpu/torch/fp32": torch_model, "cpu/onnxruntime/fp32": ort_model}
    _fake_platform_profilers(monkeypatch, models)
    monkeypatch.setenv("CARB_NAS_CALIBRATE", "1")
    args = ["search", "--trials", "64", "--no-validate", "--time-budget-s", "16", "--json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "no calibration of cpu/torch/fp32, cpu/onnxruntime/fp32 yet" in res.stderr
    assert "about 16 s" in res.stderr and "--no-calibrate" in res.stderr
    calibrated = json.loads(res.stdout)
    assert len(list((model_cache / "calibrations").iterdir())) == 2
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0 and "calibrating" not in res.stderr
    assert "--source cpu/torch/fp32 (carb cascade" in res.stderr
    assert "calibrated to this machine (" in res.stderr  # the provenance line says so
    # a calibration of another default model (an upgrade retrained it) is not used: redone
    (torch_dir,) = (model_cache / "calibrations").glob("cpu_torch_fp32-*")
    doc = json.loads((torch_dir / "calibration.json").read_text())
    doc["source"]["training_sha256"] = "0" * 64
    (torch_dir / "calibration.json").write_text(json.dumps(doc))
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert (
        "another default cpu/torch/fp32 model" in res.stderr and "Calibrating again" in res.stderr
    )
    assert "calibrating cpu/torch/fp32 [" in res.stderr
    assert "calibrating cpu/onnxruntime/fp32 [" not in res.stderr  # still valid: kept
    # --no-calibrate measures nothing (an existing calibration still applies); --uncalibrated
    # predicts with the shipped models
    res = CliRunner().invoke(cli, [*args, "--no-calibrate"])
    assert res.exit_code == 0 and "calibrating" not in res.stderr
    assert "not calibrated" not in res.stderr
    res = CliRunner().invoke(cli, [*args, "--uncalibrated"])
    assert res.exit_code == 0 and "calibrating" not in res.stderr
    assert res.stderr.count("not calibrated to this machine") == 2  # --source and --target
    plain = json.loads(res.stdout)
    # the calibrated search predicted 1.3x the default latency for the same configs
    cols = ["family", "depth", "width", "resolution", "batch_size"]
    a = pd.DataFrame(calibrated["pareto"]).set_index(cols)["latency_ms"]
    b = pd.DataFrame(plain["pareto"]).set_index(cols)["latency_ms"]
    common = a.index.intersection(b.index)
    assert len(common) and np.allclose(a[common] / b[common], 1.3, rtol=0.05)


def test_cli_search_calibration_budget_too_short(model_cache, monkeypatch):
    monkeypatch.setenv("CARB_NAS_CALIBRATE", "1")
    res = CliRunner().invoke(cli, ["search", "--time-budget-s", "1"])
    assert res.exit_code == 1 and "time budget too short" in res.stderr
    assert "or --no-calibrate" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = CliRunner().invoke(cli, ["search", "--time-budget-s", "inf"])
    assert res.exit_code == 1 and "invalid --time-budget-s" in res.stderr


def test_validate_reports_median_ratio_and_warns_outside_intervals(torch_model):
    from carb_nas.validate import validate

    grid = _grid(5)
    with pytest.warns(UserWarning, match="outside what the intervals allow"):
        off = validate(grid, model=torch_model, profiler=FakeProfiler(torch_model, 2.0))
    r = off.ratios["latency_ms"]
    assert r["median"] == pytest.approx(2.0) and r["outside"] and r["allowed"][1] < 2.0
    assert "measured/predicted x2.00" in off.summary()
    assert any("carb-nas calibrate cpu/torch/fp32" in w for w in off.warnings)
    fine = validate(grid, model=torch_model, profiler=FakeProfiler(torch_model, 1.0))
    assert fine.ratios["latency_ms"]["median"] == pytest.approx(1.0)
    assert fine.ratios["latency_ms"]["outside"] is False
    assert not any("intervals allow" in w for w in fine.warnings)
    assert fine.to_dict()["ratios"]["peak_mem_mb"]["median"] == pytest.approx(1.0)
    # a qualified dataset's default model names itself as what to calibrate
    import copy

    zoo = copy.deepcopy(torch_model)
    zoo.default_name_ = "cpu/torch/fp32/zoo-zen5"  # as load_default_model sets it
    with pytest.warns(UserWarning, match="outside what the intervals allow"):
        off = validate(grid, model=zoo, profiler=FakeProfiler(zoo, 2.0))
    assert any("carb-nas calibrate cpu/torch/fp32/zoo-zen5 " in w for w in off.warnings)
    assert "(model: cpu/torch/fp32/zoo-zen5)" in off.summary()  # not the bare platform


def test_cli_validate_recalibrate_checks_the_model_first(tmp_path, model_dirs):
    pareto = tmp_path / "p.csv"
    _grid(2).to_csv(pareto, index=False)
    res = CliRunner().invoke(
        cli, ["validate", str(pareto), "--model", str(model_dirs[0]), "--recalibrate"]
    )
    assert res.exit_code == 1 and "--recalibrate folds rows" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# -- calibrated by default: validate and predict apply this machine's calibration -------------
def _patch_defaults(monkeypatch, torch_model, module_model=False):
    """The default model of every platform is ``torch_model``, measured by FAKE profilers;
    without ``module_model`` the platform has no kernel-level model (configs only)."""
    import carb_nas.predictors._load as loader

    _default_model_is(monkeypatch, torch_model)
    if not module_model:
        monkeypatch.setattr(loader, "zoo_dataset_paths", lambda *a, **k: None)
    _fake_platform_profilers(monkeypatch, {PLATFORM: torch_model})


def test_cli_validate_old_calibrated_flag_names_the_default(tmp_path, torch_model, model_cache,
                                                            monkeypatch):  # fmt: skip
    _patch_defaults(monkeypatch, torch_model)
    pareto = tmp_path / "p.csv"
    _grid(2).to_csv(pareto, index=False)
    res = CliRunner().invoke(cli, ["validate", str(pareto), "--model", PLATFORM, "--calibrated"])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--calibrated is now the default (--uncalibrated" in lines[0]
    assert not (model_cache / "calibrations").exists()


def test_cli_validate_applies_this_machines_calibration_by_default(
    tmp_path, torch_model, model_cache, monkeypatch
):
    import carb_nas.measure

    _patch_defaults(monkeypatch, torch_model)
    # the machine runs 1.3x the default model's latency (a FAKE profiler says so)
    monkeypatch.setattr(
        carb_nas.measure, "Profiler", lambda *a, **k: FakeProfiler(torch_model, 1.3)
    )
    pareto = tmp_path / "p.csv"
    _grid(5).to_csv(pareto, index=False)
    base = ["validate", str(pareto), "--model", PLATFORM, "--json"]
    before = CliRunner().invoke(cli, base)  # no calibration yet: the shipped model, said so
    assert before.exit_code == 0, before.output
    assert "--model cpu/torch/fp32 (carb cascade" in before.stderr
    assert "not calibrated to this machine" in before.stderr
    res = CliRunner().invoke(cli, ["calibrate", PLATFORM, "--time-budget-s", "8"])
    assert res.exit_code == 0, res.output
    monkeypatch.setattr(__import__("carb_nas.predictors._load").predictors._load, "_CACHE", {})
    cal = CliRunner().invoke(cli, base)
    plain = CliRunner().invoke(cli, [*base, "--uncalibrated"])
    assert plain.exit_code == 0 and cal.exit_code == 0, plain.output + cal.output
    assert "calibrated to this machine (" in cal.stderr
    assert "not calibrated to this machine" in plain.stderr
    ratio = {
        name: json.loads(r.stdout)["ratios"]["latency_ms"]["median"]
        for name, r in (("plain", plain), ("calibrated", cal), ("before", before))
    }
    assert ratio["plain"] == pytest.approx(1.3, rel=0.02)
    assert ratio["before"] == pytest.approx(ratio["plain"])
    assert ratio["calibrated"] == pytest.approx(1.0, rel=0.05)  # the calibration absorbed it
    assert json.loads(cal.stdout)["model"]["calibrated"] is True
    assert json.loads(plain.stdout)["model"]["calibrated"] is False


def test_set_up_time_does_not_count_as_a_configs_cost(torch_model, model_cache, clock,
                                                      monkeypatch):  # fmt: skip
    real = cal_mod.choose_configs

    def slow_choice(*args, **kwargs):
        clock.now += 10.0  # 10 s of set-up before the first measurement
        return real(*args, **kwargs)

    monkeypatch.setattr(cal_mod, "choose_configs", slow_choice)
    prof = FakeProfiler(torch_model, 1.3, clock=clock, seconds_per_config=1.0)
    cal = calibrate_on_arrival(PLATFORM, 30, prof, source_model=torch_model, passes=3)
    # 20 s left at 1 s per measurement: 6 configs in 3 rounds (not 3, as 13 s / 3 would say)
    assert cal.n_rows == 6 and len(prof.profiled) == 18


def test_validate_says_when_the_machine_runs_slower_than_when_it_was_calibrated(
    torch_model, model_cache, clock
):
    from carb_nas.validate import validate

    prof = FakeProfiler(torch_model, 1.0, reference_ms=0.4, clock=clock, seconds_per_config=0.5)
    cal = calibrate_on_arrival(PLATFORM, 12, prof, source_model=torch_model)
    assert cal.model.platform_["reference_ms"] == pytest.approx(0.4)
    model = load_calibration(PLATFORM, FakeProfiler(torch_model), source_model=torch_model).model
    assert model.platform_["reference_ms"] == pytest.approx(0.4)  # kept with the calibration
    grid = _grid(4)
    # later the machine runs conv code 25 % slower (the probe says so) and so do the configs
    with pytest.warns(UserWarning, match="x1.25 slower"):
        slow = validate(
            grid, model=model, profiler=FakeProfiler(torch_model, 1.25, reference_ms=0.5)
        )
    assert slow.speed["ratio"] == pytest.approx(1.25) and "x1.25)" in slow.summary()
    assert slow.to_dict()["speed"]["model_reference_ms"] == pytest.approx(0.4)
    same = validate(grid, model=model, profiler=FakeProfiler(torch_model, 1.0, reference_ms=0.41))
    assert not any("convolution code" in w for w in same.warnings)
    # a model whose rows never timed the probe (the shipped ones): nothing to compare
    assert validate(grid, model=torch_model, profiler=FakeProfiler(torch_model, 1.0,
                    reference_ms=0.5)).speed is None  # fmt: skip


# -- calibrated by default: every entry point applies this machine's calibration ---------------
def test_every_entry_point_applies_this_machines_calibration_by_default(
    torch_model, model_cache, clock, monkeypatch
):
    from user_nets import make_cnn

    from carb_nas import load_predictor, predict_costs
    from carb_nas.integrations import CostConstraints
    from carb_nas.space import Config

    _patch_defaults(monkeypatch, torch_model, module_model=True)
    config = Config("basic", 18, 0.5, 64, 4)
    before = load_predictor(PLATFORM)
    assert not before.provenance.calibrated and "not calibrated" in before.provenance.describe()
    plain, plain_net = predict_costs(config), predict_costs(make_cnn(), (2, 3, 32, 32))
    prof = FakeProfiler(torch_model, 1.3, clock=clock, seconds_per_config=1.0)
    cal = calibrate_on_arrival(PLATFORM, 8, prof, passes=1)  # the FAKE machine runs 1.3x
    here = load_predictor(PLATFORM)  # the same name, now this machine's
    assert here.provenance.calibrated and "calibrated to this machine" in here.default_origin_
    costs = predict_costs(config)
    assert costs["latency_ms"] == pytest.approx(1.3 * plain["latency_ms"], rel=0.02)
    assert costs["peak_mem_mb"] == pytest.approx(plain["peak_mem_mb"], rel=0.02)
    assert "calibrated to this machine" in costs.model
    assert predict_costs(config, calibrated=False)["latency_ms"] == plain["latency_ms"]
    # the plugin, on the same name, gives the same answer, and opts out the same way
    assert CostConstraints(PLATFORM).predict(config)["latency_ms"] == pytest.approx(
        costs["latency_ms"]
    )
    uncal = CostConstraints(PLATFORM, calibrated=False).predict(config)
    assert uncal["latency_ms"] == pytest.approx(plain["latency_ms"])
    # a user's module: the kernel-level model times the one factor the calibration printed
    factor = cal.module_factors["latency_ms"]
    assert here.module_factors == cal.module_factors
    (line,) = [x for x in cal.summary().splitlines() if "kernel-level model" in x]
    assert f"latency_ms x{factor:.2f}" in line and line.endswith("applied")
    assert load_calibration(PLATFORM).module_factors == cal.module_factors  # stored, reread
    net = predict_costs(make_cnn(), (2, 3, 32, 32))
    assert net["latency_ms"] == pytest.approx(factor * plain_net["latency_ms"])
    assert net.interval("latency_ms")[1] == pytest.approx(
        factor * plain_net.interval("latency_ms")[1]
    )


def test_cli_predict_applies_this_machines_calibration_by_default(
    tmp_path, torch_model, model_cache, monkeypatch
):
    """`carb-nas predict PLATFORM`: this machine's calibrated model once it has one (said on
    stderr and in the JSON), the shipped one with --uncalibrated; the old --calibrated flag
    names the new default in one line."""
    import carb_nas.measure

    _patch_defaults(monkeypatch, torch_model)
    # this machine's fingerprint, as the calibration store reads it, is the FAKE profiler's
    monkeypatch.setattr(
        carb_nas.measure, "Profiler", lambda *a, **k: FakeProfiler(torch_model, 1.3)
    )
    configs = tmp_path / "c.csv"
    _grid(4).to_csv(configs, index=False)
    out = tmp_path / "pred.csv"
    res = CliRunner().invoke(cli, ["predict", PLATFORM, str(configs), "--calibrated", "-o",
                                   str(out)])  # fmt: skip
    assert res.exit_code == 1 and "--calibrated is now the default" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not out.exists()
    assert CliRunner().invoke(cli, ["calibrate", PLATFORM, "--time-budget-s", "8"]).exit_code == 0

    def predicted(args):
        res = CliRunner().invoke(cli, [*args, "--json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        return pd.DataFrame(doc["predictions"]), doc, res.stderr

    plain, pdoc, perr = predicted(["predict", PLATFORM, str(configs), "--uncalibrated"])
    cal, doc, err = predicted(["predict", PLATFORM, str(configs)])
    assert doc["calibrated"] is True and "calibrated to this machine (" in err, err
    assert pdoc["calibrated"] is False and "not calibrated to this machine" in perr
    ratio = cal["latency_ms"] / plain["latency_ms"]  # the FAKE machine runs 1.3x the model
    assert float(ratio.median()) == pytest.approx(1.3, rel=0.1)


def test_no_calibration_is_said_before_the_default_model_loads(model_cache, monkeypatch):
    """Without any calibration of the platform cached, load_calibration says so without
    loading (on a fresh machine: training) the default model for the fingerprint."""

    def trains(*a, **k):
        raise AssertionError("the default model was loaded")

    from carb_nas.predictors import _load, _store

    monkeypatch.setattr(_load, "load_default_model", trains)
    monkeypatch.setattr(_store, "load_default_model", trains)
    assert load_calibration(PLATFORM) is None
    # a calibration of another platform does not count; one of this platform does
    other = calibration_dir("cpu/torch/fp32/zoo-zen5", {"m": 1})
    other.mkdir(parents=True)
    (other / "calibration.json").write_text("{}")
    assert load_calibration(PLATFORM) is None
    mine = calibration_dir(PLATFORM, {"m": 2})
    mine.mkdir(parents=True)
    (mine / "calibration.json").write_text("{}")
    with pytest.raises(AssertionError, match="default model was loaded"):
        load_calibration(PLATFORM)


def test_cli_model_evaluate_scores_the_model_as_trained_beside_a_calibration(
    torch_model, model_cache, clock, monkeypatch, tmp_path
):
    """A calibration of the platform does not change what `model evaluate` scores: the
    cascade as trained (a calibration map has no conformal scores of its own to report)."""
    from carb_nas.datasets import dataset_path

    _patch_defaults(monkeypatch, torch_model)
    prof = FakeProfiler(torch_model, 1.3, clock=clock, seconds_per_config=1.0)
    calibrate_on_arrival(PLATFORM, 8, prof, passes=1)
    pd.read_csv(dataset_path(PLATFORM)).head(120).to_csv(tmp_path / "rows.csv", index=False)
    res = CliRunner().invoke(cli, ["model", "evaluate", PLATFORM, str(tmp_path / "rows.csv"),
                                   "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "not calibrated to this machine" in res.stderr
    assert json.loads(res.stdout)["model"] == PLATFORM
