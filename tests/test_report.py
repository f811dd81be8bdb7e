"""Tests of carb_nas.reports (characterize, transfer), few-shot calibration and their CLI verbs.

All frames here are SYNTHETIC (built in the tests, labelled device="synthetic"): costs are
exact functions of the config so every statistic has a known answer.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from carb_nas.costmodel import CalibratedModel, calibrate
from carb_nas.errors import InputFileError, MissingFileError, ModelError
from carb_nas.reports import (
    JOIN_COLUMNS,
    batch_tier,
    characterize,
    load_measurements,
    transfer,
    write_characterization_report,
    write_transfer_report,
)
from carb_nas.space import CONFIG_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_rows(
    runtime: str = "torch",
    precision: str = "fp32",
    families: tuple[str, ...] = ("basic", "bottleneck"),
    batch_sizes: tuple[int, ...] = (1, 4, 8, 32, 128),
    widths: tuple[float, ...] = (0.25, 0.5, 1.0),
    resolutions: tuple[int, ...] = (32, 64),
) -> pd.DataFrame:
    """A synthetic dataset frame (device 'synthetic') with exact multiplicative costs."""
    depths = {"basic": (10, 18, 34), "bottleneck": (50, 101)}
    rows = []
    for fam in families:
        for d, w, r, b in itertools.product(depths[fam], widths, resolutions, batch_sizes):
            rows.append({"family": fam, "depth": d, "width": w, "resolution": r, "batch_size": b})
    frame = pd.DataFrame(rows)
    frame["precision"] = precision
    frame["runtime"] = runtime
    frame["device"] = "synthetic"
    frame["platform"] = f"synthetic/{runtime}/{precision}"
    frame["status"] = "ok"
    # latency: d * w^2 * r^2 * b (exactly multiplicative); memory: w * b (width acts 1x)
    frame["latency_ms"] = (
        frame["depth"]
        * frame["width"] ** 2
        * (frame["resolution"] / 32) ** 2
        * frame["batch_size"]
        * 0.01
    )
    frame["peak_mem_mb"] = 10.0 * frame["width"] * frame["batch_size"] + 5.0
    return frame


def _write(frame: pd.DataFrame, path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


# ---------------------------------------------------------------------------------------
# loading and errors
# ---------------------------------------------------------------------------------------
def test_only_ok_rows_are_used(tmp_path):
    frame = synthetic_rows()
    frame.loc[:9, "status"] = "oom"
    frame.loc[:9, "latency_ms"] = 1e9  # would dominate every mean if it were used
    loaded = load_measurements(_write(frame, tmp_path / "a.csv"))
    assert len(loaded) == len(frame) - 10
    assert loaded.attrs["rows"] == len(frame) and loaded.attrs["ok_rows"] == len(frame) - 10
    assert loaded["latency_ms"].max() < 1e9
    assert set(loaded["variant"]) == {"synthetic/torch/fp32"}
    assert loaded.attrs["targets"] == ["peak_mem_mb", "latency_ms"]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(MissingFileError, match="dataset not found"):
        characterize(tmp_path / "nope.csv")
    result = CliRunner().invoke(cli, ["report", "characterize", str(tmp_path / "nope.csv")])
    assert result.exit_code == 1
    assert result.output.startswith("error: dataset not found")


def test_no_ok_rows_is_a_clear_error(tmp_path):
    frame = synthetic_rows()
    frame["status"] = "error"
    with pytest.raises(InputFileError, match="status == 'ok'.*'error'"):
        characterize(_write(frame, tmp_path / "a.csv"))


def test_missing_target_columns_is_a_clear_error(tmp_path):
    frame = synthetic_rows().drop(columns=["latency_ms", "peak_mem_mb"])
    with pytest.raises(InputFileError, match="no target column"):
        characterize(_write(frame, tmp_path / "a.csv"))


def test_missing_config_column_is_a_clear_error(tmp_path):
    frame = synthetic_rows().drop(columns=["resolution"])
    with pytest.raises(InputFileError, match="resolution"):
        characterize(_write(frame, tmp_path / "a.csv"))


def test_transfer_without_shared_configs_is_a_clear_error(tmp_path):
    a = synthetic_rows(resolutions=(32,))
    b = synthetic_rows(resolutions=(64,))
    with pytest.raises(InputFileError, match="no shared configs"):
        transfer(_write(a, tmp_path / "a.csv"), _write(b, tmp_path / "b.csv"), few_shot=None)


def test_transfer_rejects_mixed_platform_dataset(tmp_path):
    mixed = pd.concat([synthetic_rows(), synthetic_rows(runtime="onnxruntime")])
    with pytest.raises(InputFileError, match="mixed platforms"):
        transfer(mixed, synthetic_rows(), few_shot=None)


def test_batch_tiers():
    assert list(batch_tier([1, 4, 5, 16, 17, 64, 65, 256, 512])) == [
        "1-4",
        "1-4",
        "5-16",
        "5-16",
        "17-64",
        "17-64",
        "65-256",
        "65-256",
        ">256",
    ]


# ---------------------------------------------------------------------------------------
# characterize
# ---------------------------------------------------------------------------------------
def test_knob_range_is_ratio_of_group_means():
    frame = synthetic_rows()
    res = characterize(frame)
    basic = frame[frame["family"] == "basic"]
    means = basic.groupby("batch_size")["latency_ms"].mean()
    got = res["knob_ranges"]["synthetic/torch/fp32"]["by_family"]["basic"]["batch_size"]
    assert got["latency_ms"]["range"] == pytest.approx(means.max() / means.min())
    assert got["latency_ms"]["highest"] == "128" and got["latency_ms"]["lowest"] == "1"
    # a full factorial grid of a multiplicative cost: adjusted == marginal == 128x
    assert got["latency_ms"]["range"] == pytest.approx(128.0)
    assert got["latency_ms"]["adjusted_range"] == pytest.approx(128.0)
    factors = got["latency_ms"]["adjusted_factors"]
    assert factors["1"] == 1.0 and factors["32"] == pytest.approx(32.0)
    # the family knob: ratio of the two family means
    fam_means = frame.groupby("family")["latency_ms"].mean()
    assert res["knob_ranges"]["synthetic/torch/fp32"]["family"]["latency_ms"]["range"] == (
        pytest.approx(fam_means.max() / fam_means.min())
    )
    # single-valued knobs (precision, runtime) are left out
    assert "precision" not in res["knob_ranges"]["synthetic/torch/fp32"]["by_family"]["basic"]


def test_adjusted_range_undoes_confounded_sampling():
    # drop large batches of deep networks (like a FLOPs cap): marginal batch means shrink
    frame = synthetic_rows()
    frame = frame[~((frame["batch_size"] == 128) & (frame["depth"] >= 18))]
    res = characterize(frame)
    got = res["knob_ranges"]["synthetic/torch/fp32"]["by_family"]["basic"]["batch_size"]
    assert got["latency_ms"]["range"] < 100.0
    assert got["latency_ms"]["adjusted_range"] == pytest.approx(128.0)


def test_adjusted_range_is_none_when_knobs_are_collinear():
    frame = synthetic_rows(widths=(0.5, 1.0), resolutions=(32, 64))
    frame = frame[(frame["width"] == 0.5) == (frame["resolution"] == 32)]  # never apart
    got = characterize(frame)["knob_ranges"]["synthetic/torch/fp32"]["by_family"]["basic"]
    assert got["width"]["latency_ms"]["adjusted_range"] is None
    assert got["width"]["latency_ms"]["range"] == pytest.approx(16.0)  # 4x width^2 * 4x res^2


def test_width_asymmetry_between_targets():
    res = characterize(synthetic_rows())
    w = res["width_asymmetry"]["synthetic/torch/fp32"]["basic"]
    # latency ~ w^2 over w in {0.25, 1}: 16x; memory = 10*w*b + 5 (not exactly 4x)
    assert w["width_range"]["latency_ms"] == pytest.approx(16.0)
    assert 1 < w["width_range"]["peak_mem_mb"] < 4.0
    assert w["ratio"]["peak_mem_mb/latency_ms"] == pytest.approx(
        w["width_range"]["peak_mem_mb"] / 16.0
    )


def test_efficiency_by_batch_tier_and_flops_r2():
    from carb_nas.features import compute_features

    frame = synthetic_rows()
    gflops = compute_features(frame[list(CONFIG_COLUMNS)])["flops"].to_numpy() / 1e9
    per_tier = {"1-4": 8.0, "5-16": 4.0, "17-64": 2.0, "65-256": 3.0}
    frame["latency_ms"] = gflops * [per_tier[t] for t in batch_tier(frame["batch_size"])]
    frame["energy_j"] = 0.5 * gflops
    res = characterize(frame)
    eff = res["efficiency"]["synthetic/torch/fp32"]
    for tier, ms in per_tier.items():
        assert eff["ms_per_gflop"]["by_tier"][tier]["mean"] == pytest.approx(ms)
        assert eff["j_per_gflop"]["by_tier"][tier]["mean"] == pytest.approx(0.5)
    assert eff["ms_per_gflop"]["best_tier"] == "17-64"
    assert eff["ms_per_gflop"]["worst_over_best"] == pytest.approx(4.0)
    # energy is exactly linear in FLOPs: R2 1; latency is not
    r2 = res["flops_r2"]["synthetic/torch/fp32"]
    assert r2["energy_j"]["r2"] == pytest.approx(1.0)
    assert r2["energy_j"]["slope_per_gflop"] == pytest.approx(0.5)
    assert r2["latency_ms"]["r2"] < 0.999


def test_precision_and_runtime_ratios_by_family_and_tier():
    torch_fp32 = synthetic_rows()
    ort = synthetic_rows(runtime="onnxruntime")
    ort["latency_ms"] *= np.where(ort["family"] == "basic", 0.5, 0.25)
    int8 = synthetic_rows(runtime="onnxruntime", precision="int8")
    int8["latency_ms"] = ort["latency_ms"] * np.where(int8["batch_size"] <= 4, 0.8, 0.4)
    int8["peak_mem_mb"] = ort["peak_mem_mb"] / 4
    res = characterize([torch_fp32, ort, int8])
    comps = {c["name"]: c for c in res["ratios"]}
    assert set(comps) == {
        "ONNX Runtime/PyTorch (FP32)",
        "INT8/FP32 (ONNX Runtime)",
        "ONNX Runtime INT8/PyTorch FP32",
    }
    rt = comps["ONNX Runtime/PyTorch (FP32)"]
    assert rt["numerator"] == "synthetic/onnxruntime/fp32"
    assert rt["pairs"] == len(torch_fp32)
    lat = rt["targets"]["latency_ms"]
    assert lat["by_family"]["basic"]["geomean"] == pytest.approx(0.5)
    assert lat["by_family"]["bottleneck"]["geomean"] == pytest.approx(0.25)
    assert lat["by_family"]["basic"]["frac_below_1"] == 1.0
    q = comps["INT8/FP32 (ONNX Runtime)"]["targets"]
    assert q["latency_ms"]["by_tier"]["1-4"]["geomean"] == pytest.approx(0.8)
    assert q["latency_ms"]["by_tier"]["17-64"]["geomean"] == pytest.approx(0.4)
    assert q["latency_ms"]["by_family_tier"]["bottleneck"]["65-256"]["geomean"] == (
        pytest.approx(0.4)
    )
    assert q["peak_mem_mb"]["overall"]["geomean"] == pytest.approx(0.25)
    # pooled scope has the runtime and precision knobs
    assert "runtime" in res["knob_ranges"]["all"]["by_family"]["basic"]
    assert "precision" in res["knob_ranges"]["all"]["by_family"]["basic"]


def test_divergence_needs_energy_and_telemetry():
    frame = synthetic_rows()
    res = characterize(frame)
    assert "skipped" in res["divergence"]["synthetic/torch/fp32"]
    frame["sm_util"] = np.where(frame["depth"] >= 34, 90.0, 20.0)
    # energy grows 3x faster than latency in the high-SM tier
    frame["energy_j"] = frame["latency_ms"] * np.where(frame["sm_util"] > 65, 3.0, 1.0)
    d = characterize(frame)["divergence"]["synthetic/torch/fp32"]
    assert d["baseline"] == {"sm_tier": "low", "batch_tier": "1-4"}
    assert set(d["cells"]) == {"low", "high"}
    assert d["cells"]["low"]["1-4"]["divergence"] == pytest.approx(1.0)
    assert d["cells"]["high"]["65-256"]["divergence"] == pytest.approx(3.0)
    assert d["cells"]["low"]["65-256"]["energy_scale"] == pytest.approx(
        d["cells"]["low"]["65-256"]["latency_scale"]
    )
    assert set(d["high_over_low_sm_energy"]) == {"1-4", "5-16", "17-64", "65-256"}


def test_characterize_report_files_and_cli_json(tmp_path):
    a = _write(synthetic_rows(), tmp_path / "a.csv")
    b = _write(synthetic_rows(runtime="onnxruntime"), tmp_path / "b.csv")
    out = tmp_path / "report"
    res = write_characterization_report([a, b], out)
    for name in res["files"]:
        assert (out / name).stat().st_size > 0
    pngs = [f for f in res["files"] if f.endswith(".png")]
    assert {
        "knob_ranges.png",
        "knob_effects_adjusted.png",
        "efficiency.png",
        "ratios.png",
        "flops_vs_cost.png",
    } <= set(pngs)
    for name in pngs:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    md = (out / "README.md").read_text()
    assert "ONNX Runtime/PyTorch (FP32)" in md and "![ratios.png](ratios.png)" in md
    on_disk = json.loads((out / "characterization.json").read_text())
    assert on_disk["rows_ok"] == 2 * len(synthetic_rows())

    run = CliRunner().invoke(cli, ["report", "characterize", a, b, "--json"])
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert {
        "knob_ranges",
        "width_asymmetry",
        "efficiency",
        "divergence",
        "ratios",
        "flops_r2",
        "datasets",
        "targets",
    } <= set(data)
    assert data["variants"] == {
        "synthetic/onnxruntime/fp32": len(synthetic_rows()),
        "synthetic/torch/fp32": len(synthetic_rows()),
    }
    text = CliRunner().invoke(cli, ["report", "characterize", a])
    assert text.exit_code == 0 and text.output.startswith("# Characterization")


# ---------------------------------------------------------------------------------------
# transfer
# ---------------------------------------------------------------------------------------
def test_transfer_exact_linear_relation(tmp_path):
    a = synthetic_rows()
    b = synthetic_rows(runtime="onnxruntime")
    b["latency_ms"] = 2.0 * a["latency_ms"]
    b["peak_mem_mb"] = a["peak_mem_mb"] + 7.0
    res = transfer(_write(a, tmp_path / "a.csv"), _write(b, tmp_path / "b.csv"), few_shot=None)
    lat, mem = res["latency_ms"], res["peak_mem_mb"]
    assert lat["slope"] == pytest.approx(2.0) and lat["intercept"] == pytest.approx(0.0, abs=1e-9)
    assert lat["r2"] == pytest.approx(1.0) and lat["spearman"] == pytest.approx(1.0)
    assert lat["ratio_geomean"] == pytest.approx(2.0)
    assert mem["slope"] == pytest.approx(1.0) and mem["intercept"] == pytest.approx(7.0)
    assert res["meta"]["shared_configs"] == len(a)
    assert "energy_j" not in res and "few_shot" not in res


def test_transfer_rank_statistics_detect_a_reordering():
    bs = (1, 2, 4, 8, 16, 32, 64, 128)
    a = synthetic_rows(batch_sizes=bs)
    b = synthetic_rows(runtime="onnxruntime", batch_sizes=bs)
    # reverse the order completely: B's cheapest are A's dearest
    b["latency_ms"] = 1.0 / a["latency_ms"]
    res = transfer(a, b, few_shot=None)
    lat = res["latency_ms"]
    assert lat["spearman"] < -0.99
    n = res["meta"]["shared_configs"]
    assert lat["top_k"] == 100 and n > 200
    assert lat["top100_overlap"] == 0.0
    # the same data, unchanged order: full overlap
    assert transfer(a, a, few_shot=None)["latency_ms"]["top100_overlap"] == 1.0


def test_transfer_only_shared_configs_and_ok_rows(tmp_path):
    a = synthetic_rows()
    b = synthetic_rows(runtime="onnxruntime", resolutions=(32,))
    b.loc[b.index[:5], "status"] = "oom"
    res = transfer(a, b, few_shot=None)
    assert res["meta"]["shared_configs"] == len(b) - 5
    assert res["meta"]["b"]["ok_rows"] == len(b) - 5


def test_transfer_cli_json_keys(tmp_path):
    a = _write(synthetic_rows(), tmp_path / "a.csv")
    bf = synthetic_rows(runtime="onnxruntime")
    bf["latency_ms"] *= 3.0
    b = _write(bf, tmp_path / "b.csv")
    run = CliRunner().invoke(cli, ["report", "transfer", a, b, "--json", "--few-shot", "none"])
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    for t in ("latency_ms", "peak_mem_mb"):
        assert {"slope", "intercept", "r2", "spearman", "top100_overlap"} <= set(data[t])
    assert data["latency_ms"]["slope"] == pytest.approx(3.0)
    bad = CliRunner().invoke(cli, ["report", "transfer", a, b, "--few-shot", "ten"])
    assert bad.exit_code == 1 and "invalid --few-shot" in bad.output


# ---------------------------------------------------------------------------------------
# calibration
# ---------------------------------------------------------------------------------------
class ExactSourceModel:
    """Test double (fake): 'predicts' platform A's synthetic costs exactly."""

    targets_ = ["peak_mem_mb", "latency_ms"]

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        a = synthetic_rows().set_index(list(JOIN_COLUMNS))
        idx = pd.MultiIndex.from_frame(X[list(JOIN_COLUMNS)])
        return a.loc[idx, self.targets_].set_index(X.index)


def _inputs(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[list(CONFIG_COLUMNS)]


def test_calibration_recovers_scale_and_power_law():
    a = synthetic_rows()
    b = synthetic_rows(runtime="onnxruntime")
    b["latency_ms"] = 3.0 * a["latency_ms"] ** 0.8
    b["peak_mem_mb"] = 0.5 * a["peak_mem_mb"]
    # include the cheapest and dearest configs: corrections are clipped to the observed range
    ends = [b["latency_ms"].idxmin(), b["latency_ms"].idxmax()]
    rows = pd.concat([b.drop(ends).sample(18, random_state=0), b.loc[ends]])
    model = CalibratedModel(ExactSourceModel(), method="loglinear").fit(
        _inputs(rows), rows[["peak_mem_mb", "latency_ms"]]
    )
    pred = model.predict(_inputs(b))
    np.testing.assert_allclose(pred["latency_ms"], b["latency_ms"], rtol=1e-6)
    np.testing.assert_allclose(pred["peak_mem_mb"], b["peak_mem_mb"], rtol=1e-6)
    scale = CalibratedModel(ExactSourceModel(), method="scale").fit(
        _inputs(rows), rows[["peak_mem_mb"]]
    )
    np.testing.assert_allclose(
        scale.predict(_inputs(b))["peak_mem_mb"], b["peak_mem_mb"], rtol=1e-9
    )
    assert scale.targets_ == ["peak_mem_mb"]
    # without the ends, predictions beyond them keep the nearest observed correction
    inner = CalibratedModel(ExactSourceModel(), method="loglinear").fit(
        _inputs(rows.iloc[:18]), rows.iloc[:18][["latency_ms"]]
    )
    ratio = inner.predict(_inputs(b))["latency_ms"] / a["latency_ms"]
    seen = rows.iloc[:18]["latency_ms"] / a.loc[rows.index[:18], "latency_ms"]
    assert ratio.max() == pytest.approx(seen.max()) and ratio.min() == pytest.approx(seen.min())
    # auto picks a map that is exact on held-out rows too
    auto = CalibratedModel(ExactSourceModel()).fit(_inputs(rows), rows[["latency_ms"]])
    assert auto.maps_["latency_ms"]["method"] in ("loglinear", "features")
    held = b.drop(rows.index)
    err = np.abs(auto.predict(_inputs(held))["latency_ms"] / held["latency_ms"] - 1)
    assert err.max() < 0.02


def test_calibration_round_trips_through_json():
    a = synthetic_rows()
    b = synthetic_rows(runtime="onnxruntime")
    b["latency_ms"] = a["latency_ms"] * (1 + 0.5 * np.log(a["batch_size"]))
    rows = b.sample(30, random_state=1)
    model = CalibratedModel(ExactSourceModel(), method="features").fit(
        _inputs(rows), rows[["latency_ms"]]
    )
    data = json.loads(json.dumps(model.to_dict()))
    again = CalibratedModel.from_dict(data, ExactSourceModel())
    pd.testing.assert_frame_equal(model.predict(_inputs(b)), again.predict(_inputs(b)))
    # the features map never corrects beyond the factors seen on its calibration rows
    seen = np.log(rows["latency_ms"] / a.loc[rows.index, "latency_ms"])
    applied = np.log(model.predict(_inputs(b))["latency_ms"] / a["latency_ms"])
    assert applied.min() >= seen.min() - 1e-9 and applied.max() <= seen.max() + 1e-9


class RecordingSourceModel(ExactSourceModel):
    """Test double (fake): records the runtime/precision it is asked about."""

    platform_ = {"platform": "synthetic/torch/fp32", "runtime": "torch", "precision": "fp32"}

    def __init__(self):
        self.seen: list[tuple[set, set]] = []

    def predict(self, X):
        self.seen.append((set(X["runtime"]), set(X["precision"])))
        return super().predict(X)


def test_calibration_asks_the_source_model_about_its_own_platform():
    from carb_nas.costmodel import model_inputs

    b = synthetic_rows(runtime="onnxruntime", precision="int8")
    b["latency_ms"] *= 0.3
    source = RecordingSourceModel()
    model = calibrate(source, b.sample(15, random_state=0), method="scale")
    pred = model.predict(model_inputs(b))
    assert source.seen and all(seen == ({"torch"}, {"fp32"}) for seen in source.seen)
    np.testing.assert_allclose(pred["latency_ms"], b["latency_ms"], rtol=1e-9)
    # an explicit source platform wins over platform_
    other = CalibratedModel(RecordingSourceModel(), "scale", source_runtime="onnxruntime")
    other.fit(model_inputs(b.head(12)), b.head(12)[["latency_ms"]])
    assert other.source_model.seen[0] == ({"onnxruntime"}, {"fp32"})


def test_calibration_errors():
    with pytest.raises(ModelError, match="unknown calibration method"):
        CalibratedModel(ExactSourceModel(), method="magic").fit(
            _inputs(synthetic_rows()), synthetic_rows()[["latency_ms"]]
        )
    with pytest.raises(ModelError, match="nothing to calibrate"):
        frame = synthetic_rows().assign(energy_j=1.0)
        CalibratedModel(ExactSourceModel()).fit(_inputs(frame), frame[["energy_j"]])
    with pytest.raises(ModelError, match="not fitted"):
        CalibratedModel(ExactSourceModel()).predict(_inputs(synthetic_rows()))


def _bent(runtime: str, precision: str, a0: float, a_width: float, a_depth: float):
    """SYNTHETIC platform B: A's latency bent by a pair-specific log-linear part and a shape
    shared by every pair (non-linear in the knobs: no linear map on 10 rows can fit it)."""
    a = synthetic_rows()
    b = synthetic_rows(runtime=runtime, precision=precision)
    shared = 0.6 * np.sin(1.5 * np.log(a["batch_size"])) + 0.4 * (
        (a["resolution"] == 64) & (a["family"] == "bottleneck")
    )
    own = a0 + a_width * np.log(a["width"]) + a_depth * np.log(a["depth"])
    b["latency_ms"] = a["latency_ms"] * np.exp(own + shared)
    return b


def test_transfer_prior_learned_on_other_pairs_helps_a_shared_shape():
    from carb_nas.costmodel import model_inputs as _inputs
    from carb_nas.costmodel.calibration import fit_transfer_prior

    other = _bent("onnxruntime", "int8", 0.2, 0.1, 0.0)
    target = _bent("onnxruntime", "fp32", -0.5, -0.2, 0.15)
    prior = fit_transfer_prior({"A:int8": (synthetic_rows(), other)})
    assert prior.pairs == ["A:int8"] and set(prior.shapes) == {"latency_ms"}
    rng = np.random.default_rng(0)
    errors: dict[str, list[float]] = {"plain": [], "prior": []}
    for _ in range(5):
        rows = target.iloc[rng.choice(len(target), 10, replace=False)]
        held = target.drop(rows.index)
        for kind, p in (("plain", None), ("prior", prior)):
            cal = CalibratedModel(ExactSourceModel(), prior=p).fit(
                _inputs(rows), rows[["latency_ms"]]
            )
            if p is not None:
                assert cal.maps_["latency_ms"]["method"] == "prior"
                assert cal.maps_["latency_ms"]["prior_weight"] > 0.1  # the shape is used
            pred = cal.predict(_inputs(held))["latency_ms"]
            errors[kind].append(float(np.sqrt(np.mean(np.log(pred / held["latency_ms"]) ** 2))))
    # the shape from the other pair: 0.25 against 0.48 log RMSE without it
    assert np.mean(errors["prior"]) < 0.6 * np.mean(errors["plain"]), errors
    # persisted with its prior, as JSON (LightGBM's text model inside), predicting the same
    cal = calibrate(ExactSourceModel(), target.head(20), prior=prior)
    again = CalibratedModel.from_dict(json.loads(json.dumps(cal.to_dict())), ExactSourceModel())
    pd.testing.assert_frame_equal(cal.predict(_inputs(target)), again.predict(_inputs(target)))


def test_transfer_prior_takes_the_calibrated_platforms_level_from_another_machine():
    """A pair whose B measured the calibrated platform (on another machine, here twice as
    slow) also gives B's level over the features, averaged with the residual shape; a pair of
    another platform does not; the level survives JSON."""
    from carb_nas.costmodel import model_inputs as _inputs
    from carb_nas.costmodel._calibration import CALIBRATION_FEATURES
    from carb_nas.costmodel.calibration import (
        TransferPrior,
        calibration_features,
        fit_transfer_prior,
    )

    a = synthetic_rows()
    a_there = a.assign(latency_ms=2.0 * a["latency_ms"])
    b_there = _bent("onnxruntime", "fp32", -0.5, -0.2, 0.15)
    b_there["latency_ms"] *= 2.0
    pairs = {"there": (a_there, b_there)}
    plain = fit_transfer_prior(pairs)
    other = fit_transfer_prior(pairs, platform="synthetic/onnxruntime/int8")
    level = fit_transfer_prior(pairs, platform="synthetic/onnxruntime/fp32")
    assert "level_model" not in plain.shapes["latency_ms"]["there"]
    assert "level_model" not in other.shapes["latency_ms"]["there"]
    assert level.shapes["latency_ms"]["there"]["level_n"] == len(b_there)
    assert level.pairs == ["there"] and level.level_pairs == ["there"] and not plain.level_pairs
    # on B's configs, with this machine's A as the source: the shape is the mean of the
    # residual shape and the level, and the level follows log y_B - log source
    z = np.log(a["latency_ms"].to_numpy())
    g = np.column_stack([z, calibration_features(_inputs(b_there), CALIBRATION_FEATURES)])
    residual, both = plain.shape("latency_ms", g), level.shape("latency_ms", g)
    assert not np.allclose(residual, both)
    truth = np.log(b_there["latency_ms"].to_numpy()) - z
    level_part = 2 * both - residual
    assert np.std(level_part - truth) < 0.5 * np.std(truth), (np.std(level_part - truth),)
    again = TransferPrior.from_dict(json.loads(json.dumps(level.to_dict())))
    np.testing.assert_allclose(again.shape("latency_ms", g), both)


def test_prior_map_picks_its_columns_by_loo_error():
    """The prior map's linear columns: log source and log FLOPs only where the target's own
    bend lies in them, every column where it also bends by width and depth; a map saved
    before it named its columns still predicts with every column."""
    from carb_nas.costmodel import model_inputs as _inputs
    from carb_nas.costmodel._calibration import FEATURE_MIN_ROWS, PRIOR_MAP_COLUMNS
    from carb_nas.costmodel.calibration import fit_transfer_prior

    a = synthetic_rows()
    prior = fit_transfer_prior({"A:int8": (a, _bent("onnxruntime", "int8", 0.2, 0.1, 0.0))})
    names = ["log_source", "log_flops"]
    assert list(PRIOR_MAP_COLUMNS) == names
    # own bend in log FLOPs only (and the shared shape): the two columns
    flops_bent = _bent("onnxruntime", "fp32", -0.5, 0.0, 0.0)
    flops_bent["latency_ms"] *= np.exp(0.1 * np.log(_inputs(a)["flops"].to_numpy(float)))
    cal = CalibratedModel(ExactSourceModel(), method="prior", prior=prior)
    rows = flops_bent.sample(25, random_state=0)
    cal.fit(_inputs(rows), rows[["latency_ms"]])
    spec = cal.maps_["latency_ms"]
    assert spec["columns"] == [0, 1] and len(spec["weights"]) == 2, spec
    # own bend by width and depth, which the two columns cannot express: every column
    wide = _bent("onnxruntime", "fp32", -0.5, -0.4, 0.3)
    cal_w = CalibratedModel(ExactSourceModel(), method="prior", prior=prior)
    rows = wide.sample(25, random_state=0)
    cal_w.fit(_inputs(rows), rows[["latency_ms"]])
    names = ["log_source", *cal_w.feature_names_]
    offered = [c for c, name in enumerate(names) if 25 >= FEATURE_MIN_ROWS.get(name, 0)]
    assert "log_flops_sq" in names and names.index("log_flops_sq") not in offered
    assert cal_w.maps_["latency_ms"]["columns"] == offered
    # an older saved map (no "columns", a weight per column, no log_flops_sq nor is_batch_one)
    # predicts with every column
    X = _inputs(wide)
    old = cal_w.to_dict()
    later = [c for c, name in enumerate(names) if c not in offered]  # log_flops_sq, is_batch_one
    assert [names[c] for c in later] == ["log_flops_sq", "is_batch_one"]
    old["feature_names"] = [n for n in old["feature_names"] if names.index(n) not in later]
    del old["log_flops_range"], old["maps"]["latency_ms"]["columns"]
    for key in ("mean", "std"):
        values = old["maps"]["latency_ms"][key]
        old["maps"]["latency_ms"][key] = [v for c, v in enumerate(values) if c not in later]
    again = CalibratedModel.from_dict(json.loads(json.dumps(old)), ExactSourceModel())
    pd.testing.assert_frame_equal(cal_w.predict(X), again.predict(X))
    # and a two-column map applies only its two weights (dropping them changes the result)
    two = cal.to_dict()
    two["maps"]["latency_ms"]["weights"] = [0.0, 0.0]
    zeroed = CalibratedModel.from_dict(json.loads(json.dumps(two)), ExactSourceModel())
    assert not np.allclose(zeroed.predict(X)["latency_ms"], cal.predict(X)["latency_ms"])


def test_transfer_prior_bad_inputs():
    from carb_nas.costmodel.calibration import TransferPrior, fit_transfer_prior

    a = synthetic_rows()
    with pytest.raises(ModelError, match="no platform pairs"):
        fit_transfer_prior({})
    with pytest.raises(ModelError, match=r"expected \(rows_A, rows_B\)"):
        fit_transfer_prior({"x": (a,)})
    with pytest.raises(ModelError, match="at least 30 configs measured on both"):
        fit_transfer_prior({"x": (a, synthetic_rows(runtime="onnxruntime").head(12))})
    with pytest.raises(ModelError, match="without a prior"):
        CalibratedModel(ExactSourceModel(), method="prior").fit(_inputs(a), a[["latency_ms"]])
    with pytest.raises(ModelError, match="expected a TransferPrior"):
        CalibratedModel(ExactSourceModel(), prior={"pairs": []}).fit(  # type: ignore[arg-type]
            _inputs(a), a[["latency_ms"]]
        )
    with pytest.raises(ModelError, match="not a transfer prior"):
        TransferPrior.from_dict({"kind": "calibration"})
    prior = fit_transfer_prior({"x": (a, _bent("onnxruntime", "int8", 0.2, 0.1, 0.0))})
    with pytest.raises(ModelError, match="expected X with the architecture features"):
        CalibratedModel(ExactSourceModel(), prior=prior).fit(_inputs(a), a[["latency_ms"]])


def test_transfer_reports_the_same_draws_with_and_without_the_prior(tmp_path):
    from carb_nas.reports import prior_pairs

    other = _write(_bent("onnxruntime", "int8", 0.2, 0.1, 0.0), tmp_path / "other.csv")
    a = _write(synthetic_rows(), tmp_path / "a.csv")
    b = _bent("onnxruntime", "fp32", -0.5, -0.2, 0.15)
    res = transfer(a, b, few_shot=(10,), repeats=3, source_model=ExactSourceModel(),
                   prior=f"{a}:{other}")  # fmt: skip
    fs = res["few_shot"]
    assert fs["prior_pairs"] == [f"{a}:{other}"]
    run = fs["runs"]["10"]
    assert run["methods_chosen"]["prior"] >= 3  # latency picks it by LOO error on every draw
    with_, without = (
        run[k]["latency_ms"]["r2_mean"] for k in ("calibrated", "calibrated_without_prior")
    )
    assert with_ > without, (with_, without)
    none = transfer(a, b, few_shot=(10,), repeats=1, source_model=ExactSourceModel(), prior="none")
    assert (
        none["few_shot"]["prior_pairs"] == []
        and "calibrated_without_prior" not in none["few_shot"]["runs"]["10"]
    )
    # auto: the shipped pairs of B's runtime and device at another precision, never B's own
    assert list(prior_pairs("auto", "x", "cpu/onnxruntime/fp32")) == [
        "cpu/torch/fp32:cpu/onnxruntime/int8"
    ]
    assert list(prior_pairs("auto", "x", "cpu/openvino/fp32")) == [
        "cpu/torch/fp32/zoo:cpu/openvino/int8"
    ]
    assert prior_pairs("auto", "x", "cpu/torch/fp32") == {}
    assert prior_pairs("auto", "x", "synthetic/onnxruntime/fp32") == {}
    # B's platform measured elsewhere (other rows) is a prior; a copy of B's rows is not
    elsewhere = _write(_bent("onnxruntime", "fp32", -0.3, 0.1, 0.0), tmp_path / "elsewhere.csv")
    assert list(prior_pairs(f"{a}:{elsewhere}", "b", "synthetic/onnxruntime/fp32", b)) == [
        f"{a}:{elsewhere}"
    ]
    copy = _write(b, tmp_path / "copy.csv")
    with pytest.raises(ModelError, match="holds rows of B"):
        prior_pairs(f"{a}:{copy}", "b", "synthetic/onnxruntime/fp32", b)
    with pytest.raises(ModelError, match="neither B's dataset nor holds"):  # rows unknown
        prior_pairs(f"{a}:{elsewhere}", "b", "synthetic/onnxruntime/fp32")


def test_auto_prior_pairs_differ_from_b_in_one_respect():
    """Another precision on B's machine, or B's precision on another machine (shipped pairs)."""
    from carb_nas.reports import prior_pairs

    def auto(name: str) -> list[str]:
        rows = load_measurements(name)
        return list(prior_pairs("auto", name, rows["variant"].iloc[0], rows))

    assert auto("cpu/onnxruntime/fp32") == [
        "cpu/torch/fp32:cpu/onnxruntime/int8",
        "cpu/torch/fp32/zen4:cpu/onnxruntime/fp32/zen4",
    ]
    # another precision on another machine (zen4 fp32 for the shipped int8) is left out
    assert auto("cpu/onnxruntime/int8") == ["cpu/torch/fp32:cpu/onnxruntime/fp32"]
    assert auto("cpu/onnxruntime/fp32/zen4") == ["cpu/torch/fp32:cpu/onnxruntime/fp32"]


@pytest.mark.parametrize(
    "prior, needle",
    [
        ("cpu/torch/fp32", "expected 'auto', 'none' or comma-separated A:B"),
        ("b.csv:b.csv", "neither B's dataset nor holds B's measurements"),
    ],
)
def test_cli_transfer_prior_bad_input_is_one_line(tmp_path, prior, needle):
    a = _write(synthetic_rows(), tmp_path / "a.csv")
    b = _write(synthetic_rows(runtime="onnxruntime"), tmp_path / "b.csv")
    prior = prior.replace("b.csv", b)
    run = CliRunner().invoke(
        cli, ["report", "transfer", a, b, "--few-shot", "10", "--prior", prior]
    )
    _one_line_error(run, needle)


def test_calibrate_function_and_few_shot_transfer(tmp_path):
    """End to end with the real CostModel (fast preset) on synthetic platforms."""
    a = synthetic_rows(batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128))
    b = synthetic_rows(runtime="onnxruntime", batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128))
    b["latency_ms"] = 0.4 * a["latency_ms"] ** 0.9
    b["peak_mem_mb"] = 1.5 * a["peak_mem_mb"]
    from carb_nas.costmodel import CostModel, model_inputs

    source = CostModel(preset="fast", n_jobs=1).fit(
        model_inputs(a), a[["peak_mem_mb", "latency_ms"]], platform="synthetic/torch/fp32"
    )
    cal = calibrate(source, b.sample(25, random_state=0))
    pred = cal.predict(model_inputs(b))
    r2 = (
        1
        - ((pred["latency_ms"] - b["latency_ms"]) ** 2).sum()
        / ((b["latency_ms"] - b["latency_ms"].mean()) ** 2).sum()
    )
    assert r2 > 0.9

    out = tmp_path / "transfer"
    res = write_transfer_report(
        a, b, out, few_shot=(10, 25), repeats=2, source_model=source, n_jobs=1
    )
    fs = res["few_shot"]
    assert set(fs["runs"]) == {"10", "25"}
    assert fs["source_platform"] == "torch/fp32"
    # N=10 is below CostModel's minimum: the tree baseline is n/a, the linear one is not
    assert fs["runs"]["10"]["target_only"]["latency_ms"]["r2_mean"] is None  # NaN in JSON
    assert "at least 20 rows" in fs["runs"]["10"]["target_only_errors"][0]
    run = fs["runs"]["25"]
    for t in ("latency_ms", "peak_mem_mb"):
        assert len(run["calibrated"][t]["r2_runs"]) == 2
        assert run["calibrated"][t]["r2_mean"] > 0.9
        assert math.isfinite(run["target_only"][t]["r2_mean"])
        assert math.isfinite(run["target_only_linear"][t]["r2_mean"])
        # the source model alone is far off on B (other scale), calibration fixes it
        assert run["calibrated"][t]["r2_mean"] > run["source_only"][t]["r2_mean"]
        assert math.isfinite(run["calibrated"][t]["r2_std"])
    assert (out / "few_shot.png").read_bytes()[:8] == PNG_MAGIC
    assert (out / "transfer_scatter.png").read_bytes()[:8] == PNG_MAGIC
    assert "## Few-shot calibration" in (out / "README.md").read_text()
    assert json.loads((out / "transfer.json").read_text())["latency_ms"]["r2"] > 0.9

    # the CLI with a saved source model
    source.save(tmp_path / "source_model")
    paths = [_write(a, tmp_path / "a.csv"), _write(b, tmp_path / "b.csv")]
    run = CliRunner().invoke(
        cli,
        [
            "report",
            "transfer",
            *paths,
            "--json",
            "--few-shot",
            "25",
            "--seeds",
            "1",
            "--source",
            str(tmp_path / "source_model"),
        ],
    )
    assert run.exit_code == 0, run.output
    fs = json.loads(run.stdout)["few_shot"]
    assert fs["source_model"] == "given source model"
    assert fs["runs"]["25"]["calibrated"]["latency_ms"]["r2_mean"] > 0.9


# ---------------------------------------------------------------------------------------
# bad inputs (issue 19): one line, exit code 1, nothing written
# ---------------------------------------------------------------------------------------
def _one_line_error(run, *fragments: str) -> None:
    assert run.exit_code == 1, run.output
    lines = run.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.output
    assert "Traceback" not in run.output and "np.float64" not in run.output
    for f in fragments:
        assert f in lines[0], lines[0]


def test_characterize_accepts_a_shipped_platform_name():
    frame = load_measurements("cpu/torch/fp32")
    assert frame.attrs["source"].endswith("cpu_torch_fp32.csv")
    assert set(frame["variant"]) == {"cpu/torch/fp32"}
    run = CliRunner().invoke(cli, ["report", "characterize", "cpu/onnxruntime/int8", "--json"])
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert data["datasets"][0]["source"].endswith("cpu_onnxruntime_int8.csv")
    assert set(data["variants"]) == {"cpu/onnxruntime/int8"}
    bad = CliRunner().invoke(cli, ["report", "characterize", "tpu/jax/fp8"])
    _one_line_error(bad, "no shipped dataset", "dataset list")


def test_characterize_too_few_rows_says_the_minimum(tmp_path):
    from carb_nas.reports import MIN_CHARACTERIZE_ROWS

    path = _write(synthetic_rows().head(5), tmp_path / "five.csv")
    before = (tmp_path / "five.csv").read_bytes()
    run = CliRunner().invoke(
        cli, ["report", "characterize", path, "--report", str(tmp_path / "out")]
    )
    _one_line_error(run, "too few rows", f"at least {MIN_CHARACTERIZE_ROWS}", "got 5")
    assert not (tmp_path / "out").exists()
    assert (tmp_path / "five.csv").read_bytes() == before


def test_characterize_a_family_with_very_few_rows():
    # two bottleneck rows among many basic ones: that family has no adjusted model (was a
    # KeyError 'effects'), the rest is characterized
    frame = synthetic_rows()
    frame = pd.concat([frame[frame["family"] == "basic"], frame[frame["family"] != "basic"][:2]])
    res = characterize(frame)
    bottleneck = res["knob_ranges"]["synthetic/torch/fp32"]["by_family"]["bottleneck"]
    assert bottleneck["_model"]["latency_ms"]["log_r2"] is None
    basic = res["knob_ranges"]["synthetic/torch/fp32"]["by_family"]["basic"]
    assert basic["batch_size"]["latency_ms"]["adjusted_range"] == pytest.approx(128.0)


def test_the_same_dataset_twice(tmp_path):
    a = _write(synthetic_rows(), tmp_path / "a.csv")
    run = CliRunner().invoke(cli, ["report", "characterize", a, str(tmp_path / "." / "a.csv")])
    _one_line_error(run, "the same dataset given twice")
    frame = synthetic_rows()
    with pytest.raises(InputFileError, match="twice"):
        characterize([frame, frame])
    # transfer A A is a legitimate sanity check: it runs, with a warning and a note
    run = CliRunner().invoke(cli, ["report", "transfer", a, a, "--few-shot", "none", "--json"])
    assert run.exit_code == 0, run.output
    assert "warning: A and B are the same dataset" in run.stderr
    data = json.loads(run.stdout)
    assert any("same dataset" in n for n in data["meta"]["notes"])
    assert data["latency_ms"]["r2"] == pytest.approx(1.0)


@pytest.mark.parametrize("verb", ["characterize", "transfer"])
def test_unwritable_report_dir_is_refused_before_any_work(tmp_path, monkeypatch, verb):
    import carb_nas.reports._write as write

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the report directory was checked")

    monkeypatch.setattr(write, "characterize_frames", no_work)
    monkeypatch.setattr(write, "transfer_frames", no_work)
    a = _write(synthetic_rows(), tmp_path / "a.csv")
    b = _write(synthetic_rows(runtime="onnxruntime"), tmp_path / "b.csv")
    datasets = [a] if verb == "characterize" else [a, b]
    run = CliRunner().invoke(cli, ["report", verb, *datasets, "--report", "/proc/x/report"])
    _one_line_error(run, "cannot write report directory", "/proc/x/report")
    (tmp_path / "file").write_text("x")
    run = CliRunner().invoke(
        cli, ["report", verb, *datasets, "--report", str(tmp_path / "file" / "r")]
    )
    _one_line_error(run, "cannot create report directory", "in the way")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv", "file"]


def test_report_files_written_atomically_leave_other_files_alone(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    write_characterization_report(synthetic_rows(), out)
    assert (out / "notes.txt").read_text() == "mine"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_few_shot_larger_than_the_target_dataset_says_the_maximum(tmp_path):
    from carb_nas.reports import MIN_EVALUATION_ROWS

    a = _write(synthetic_rows(), tmp_path / "a.csv")
    b = _write(synthetic_rows(runtime="onnxruntime"), tmp_path / "b.csv")
    n = len(synthetic_rows())
    run = CliRunner().invoke(cli, ["report", "transfer", a, b, "--few-shot", "10,100000"])
    _one_line_error(run, f"<= {n - MIN_EVALUATION_ROWS}", "got 100000", "--few-shot")
    assert "training" not in run.output  # refused before the source model was trained
    with pytest.raises(ModelError, match="invalid repeats"):
        transfer(a, b, repeats=0)
    bad = CliRunner().invoke(cli, ["report", "transfer", a, b, "--repeats", "0"])
    assert bad.exit_code in (1, 2) and "--repeats" in bad.output  # a usage error


def test_analysis_inputs_are_validated_by_the_dataset_rules(tmp_path):
    frame = synthetic_rows()
    frame.loc[3, "latency_ms"] = -1.0
    with pytest.raises(InputFileError, match="latency_ms.*data row 4.*got -1.0"):
        characterize(frame)
    frame = synthetic_rows()
    frame.loc[2, "status"] = "great"
    with pytest.raises(InputFileError, match="status"):
        load_measurements(frame)


def test_auto_prior_pairs_read_a_damaged_fingerprint_as_an_unknown_cpu():
    """B's rows with a fingerprint that is not JSON: auto still picks its pairs (by the CPU
    name), no JSONDecodeError traceback."""
    from carb_nas.reports import prior_pairs

    rows = load_measurements("cpu/onnxruntime/int8").assign(fingerprint="{not json")
    assert list(prior_pairs("auto", "b.csv", "cpu/onnxruntime/int8", rows)) == [
        "cpu/torch/fp32:cpu/onnxruntime/fp32"
    ]


def test_features_map_takes_the_weaker_penalties_only_from_many_rows():
    """From MANY_ROWS rows on the features map may choose LOW_PENALTIES (on a Zen 3 that took
    ORT fp32 calibration 7.5 -> 4.9 %); on fewer rows the LOO choice among them overfits, so
    they are not offered. Exact log-linear data: LOO prefers the weakest penalty offered."""
    from carb_nas.costmodel import model_inputs as _inputs
    from carb_nas.costmodel._calibration import FEATURE_PENALTIES, LOW_PENALTIES, MANY_ROWS

    b = _bent("onnxruntime", "fp32", -0.5, -0.4, 0.3)
    b["latency_ms"] = synthetic_rows()["latency_ms"] * np.exp(
        -0.5 - 0.4 * np.log(b["width"]) + 0.3 * np.log(b["depth"])
    )
    chosen = {}
    for n in (MANY_ROWS - 5, MANY_ROWS + 10):
        rows = b.sample(n, random_state=0)
        cal = CalibratedModel(ExactSourceModel(), method="features")
        cal.fit(_inputs(rows), rows[["latency_ms"]])
        chosen[n] = cal.maps_["latency_ms"]["penalty"]
    assert chosen[MANY_ROWS - 5] == min(FEATURE_PENALTIES)
    assert chosen[MANY_ROWS + 10] == min(LOW_PENALTIES)


def _features_map_on(b, sizes, seed):
    """Per size n: the columns the features map fitted on n rows of ``b`` used, and its mean
    relative latency error on the other rows (the map reloaded from to_dict predicts alike)."""
    from carb_nas.costmodel import model_inputs as _inputs

    used, errors = {}, {}
    for n in sizes:
        rows = b.sample(n, random_state=seed)
        cal = CalibratedModel(ExactSourceModel(), method="features")
        cal.fit(_inputs(rows), rows[["latency_ms"]])
        names = ["log_source", *cal.feature_names_]
        used[n] = [names[c] for c in cal.maps_["latency_ms"]["columns"][1:]]
        rest = b.drop(rows.index)
        pred = cal.predict(_inputs(rest))["latency_ms"].to_numpy()
        errors[n] = float(np.mean(np.abs(pred / rest["latency_ms"].to_numpy() - 1)))
        again = CalibratedModel.from_dict(cal.to_dict(), ExactSourceModel())
        assert np.allclose(again.predict(_inputs(rest))["latency_ms"].to_numpy(), pred)
    return used, errors


def test_features_map_bends_by_compute_intensity_only_from_many_rows():
    """A machine whose time per FLOP moves with FLOPs per byte (another bandwidth-to-compute
    balance): from MANY_ROWS rows on the features map has log compute intensity as a column
    and fits it; on fewer rows the column is not offered (it cost torch -> ORT few-shot R2 at
    N = 10), and the saved map names the columns it used."""
    from carb_nas.costmodel import model_inputs as _inputs
    from carb_nas.costmodel._calibration import MANY_ROWS

    b = _bent("onnxruntime", "fp32", 0.0, 0.0, 0.0)
    intensity = _inputs(b)["compute_intensity"].to_numpy(float)
    b["latency_ms"] = synthetic_rows()["latency_ms"] * intensity**-0.3
    used, errors = _features_map_on(b, (MANY_ROWS - 5, MANY_ROWS + 10), seed=1)
    assert "log_compute_intensity" not in used[MANY_ROWS - 5]
    assert "log_compute_intensity" in used[MANY_ROWS + 10]
    assert errors[MANY_ROWS + 10] < 0.01 < errors[MANY_ROWS - 5]


def test_features_map_bends_by_the_square_of_log_flops_from_many_rows():
    """A machine with more per-op overhead and a faster compute rate than the source: its
    time per FLOP is curved in log FLOPs (small configs slower, large ones faster, the middle
    alike). From SQUARE_ROWS rows on the features map has the square as a column and follows
    the curve; below (with the other many-rows column), it cannot, and the column
    round-trips through the saved map."""
    from carb_nas.costmodel import model_inputs as _inputs
    from carb_nas.costmodel._calibration import FLOPS_SQ_CENTER, SQUARE_ROWS

    b = _bent("onnxruntime", "fp32", 0.0, 0.0, 0.0)
    log_flops = np.log(_inputs(b)["flops"].to_numpy(float))
    bend = 0.04 * (log_flops - FLOPS_SQ_CENTER) ** 2
    b["latency_ms"] = synthetic_rows()["latency_ms"] * np.exp(bend - bend.mean())
    used, errors = _features_map_on(b, (SQUARE_ROWS - 5, SQUARE_ROWS + 10), seed=2)
    assert "log_flops_sq" not in used[SQUARE_ROWS - 5]
    assert "log_compute_intensity" in used[SQUARE_ROWS - 5]
    assert "log_flops_sq" in used[SQUARE_ROWS + 10]
    # flat beyond the rows' FLOPs (log_flops_range): a little error at the ends
    assert errors[SQUARE_ROWS + 10] < 0.02 < 0.1 < errors[SQUARE_ROWS - 5]


def test_features_map_follows_the_module_ratio_from_many_rows():
    """A machine whose costs follow its own kind's module model: the target is the source
    bent by that model's ratio to it, in a shape no linear map of the knobs follows. With a
    ModuleRatio the features map takes log_module_ratio from MANY_ROWS rows on and fits the
    bend; without one, or on fewer rows, it cannot; the ratio round-trips through to_dict."""
    import lightgbm as lgb

    from carb_nas.costmodel import model_inputs as _inputs
    from carb_nas.costmodel._calibration import MANY_ROWS, MODULE_RATIO_PARAMS
    from carb_nas.costmodel.calibration import ModuleRatio

    a = synthetic_rows()
    X = _inputs(a)
    z = np.log(a["latency_ms"].to_numpy(float))
    bend = 0.4 * np.sin(3 * np.log(X["width"].astype(float))) + 0.3 * np.cos(
        2 * np.log(X["batch_size"].astype(float))
    )
    data = lgb.Dataset(ModuleRatio.inputs(X, z), bend.to_numpy())
    ratio = ModuleRatio(lgb.train(MODULE_RATIO_PARAMS, data, 200).model_to_string())
    b = _bent("onnxruntime", "fp32", 0.0, 0.0, 0.0)
    b["latency_ms"] = a["latency_ms"] * np.exp(bend)
    errors = {}
    for n, with_ratio in ((MANY_ROWS - 5, True), (MANY_ROWS + 15, True), (MANY_ROWS + 15, False)):
        rows = b.sample(n, random_state=3)
        cal = CalibratedModel(
            ExactSourceModel(), method="features", module_ratio=ratio if with_ratio else None
        )
        cal.fit(_inputs(rows), rows[["latency_ms"]])
        names = ["log_source", *cal.feature_names_]
        used = [names[c] for c in cal.maps_["latency_ms"]["columns"][1:]]
        assert ("log_module_ratio" in used) == (with_ratio and n >= MANY_ROWS)
        rest = b.drop(rows.index)
        pred = cal.predict(_inputs(rest))["latency_ms"].to_numpy()
        errors[n, with_ratio] = float(np.mean(np.abs(pred / rest["latency_ms"] - 1)))
        again = CalibratedModel.from_dict(json.loads(json.dumps(cal.to_dict())), ExactSourceModel())
        assert np.allclose(again.predict(_inputs(rest))["latency_ms"].to_numpy(), pred)
    many = MANY_ROWS + 15
    assert errors[many, True] < 0.03 < 0.1 < errors[many, False], errors
    assert errors[MANY_ROWS - 5, True] > 0.1, errors
    with pytest.raises(ModelError, match="expected a ModuleRatio"):
        CalibratedModel(ExactSourceModel(), module_ratio="x").fit(_inputs(b), b[["latency_ms"]])


def test_features_map_steps_at_batch_one_only_with_rows_on_both_sides():
    """A machine whose batch-1 kernels run faster, relative to its other batches, than the
    source's (e.g. an Intel Xeon against the Zen 3 rows): a step no log-batch slope can
    follow. With MIN_LEVEL_ROWS batch-1 rows among SQUARE_ROWS or more the features map takes
    the indicator and fits the step; with fewer batch-1 rows it leaves the column out."""
    from carb_nas.costmodel import model_inputs as _inputs
    from carb_nas.costmodel._calibration import MIN_LEVEL_ROWS, SQUARE_ROWS

    b = _bent("onnxruntime", "fp32", 0.0, 0.0, 0.0)
    b["latency_ms"] = synthetic_rows()["latency_ms"] * np.where(b["batch_size"] == 1, 0.6, 1.0)
    one, rest = b[b["batch_size"] == 1], b[b["batch_size"] > 1]
    fitted = {}
    for k in (MIN_LEVEL_ROWS - 1, MIN_LEVEL_ROWS + 3):
        rows = pd.concat(
            [one.sample(k, random_state=0), rest.sample(SQUARE_ROWS + 5, random_state=0)]
        )
        cal = CalibratedModel(ExactSourceModel(), method="features")
        cal.fit(_inputs(rows), rows[["latency_ms"]])
        names = ["log_source", *cal.feature_names_]
        used = [names[c] for c in cal.maps_["latency_ms"]["columns"][1:]]
        held = one.drop(rows.index, errors="ignore")
        pred = cal.predict(_inputs(held))["latency_ms"].to_numpy()
        fitted[k] = ("is_batch_one" in used, float(np.mean(np.abs(pred / held["latency_ms"] - 1))))
        again = CalibratedModel.from_dict(json.loads(json.dumps(cal.to_dict())), ExactSourceModel())
        assert np.allclose(again.predict(_inputs(held))["latency_ms"].to_numpy(), pred)
    few, enough = fitted[MIN_LEVEL_ROWS - 1], fitted[MIN_LEVEL_ROWS + 3]
    assert not few[0] and enough[0]
    assert enough[1] < 0.02 < 0.1 < few[1], fitted
