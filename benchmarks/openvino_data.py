"""Export the OpenVINO fp32 / int8 campaigns of the zoo configs into the shipped datasets
(issue 15), paired with the torch rows of the same machine (``--torch``, default
``cpu/torch/fp32/zoo``), and describe them.

    PYTHONPATH=$PWD python benchmarks/openvino_data.py export PASS [PASS ...]
        [--out-dir carb_nas/data/zoo] [--torch cpu/torch/fp32/zoo] [--name zoo]
    PYTHONPATH=$PWD python benchmarks/openvino_data.py describe [DATASET ...]
        [--torch cpu/torch/fp32/zoo]

The passes are ``carb-nas profile CONFIGS --runtime openvino --precision fp32|int8
--threads 1`` campaigns over configs of the torch zoo dataset (``configs.csv``: family, depth,
width, resolution, batch_size), given as campaign directories (read read-only with
``carb_nas.measure.campaign_rows``: one row per key) or as row tables exported from them
(``research/runs/passes/cpu_openvino_*/``). ``export`` groups the passes by platform; a platform
with
several passes keeps each config's median-latency ok row (``datasets.median_of_passes``: with
two passes the faster one, contention only slows a run down). It keeps the rows whose config
pairs with a torch zoo row (on family, depth, width, resolution, batch_size), sorts them by key
and writes ``<platform>_<name>.csv`` per platform (``cpu_openvino_fp32_zoo.csv``,
``cpu_openvino_int8_zoo.csv``), so `carb-nas dataset list` names them ``cpu/openvino/fp32/zoo``
and ``load_dataset("cpu/openvino/int8")`` finds them. ``--torch`` names the torch dataset of the
same machine to pair with and ``--name`` the qualifier (``--torch cpu/torch/fp32/zoo-zen5
--name zoo-zen5`` for the Zen 5 passes). A partial campaign exports what it has;
the same command on the finished passes rewrites the files.

``describe`` prints, per dataset: rows (ok), paired torch rows, latency CV median / p90, rows
with CV > 0.10, the time span, the runtime versions, conversion, quantization scheme and
calibration set (from the fingerprints), the peak-memory method, and on the paired keys the
median latency ratio to torch fp32 and (both OpenVINO sets present) int8 over fp32. The last
line: ``ov_fp32_rows=.. ov_int8_rows=.. ov_fp32_cv_median=.. ov_int8_cv_median=..
ov_int8_speedup_median=..``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "carb_nas" / "data" / "zoo"
TORCH = "cpu/torch/fp32/zoo"
PAIR = ["family", "depth", "width", "resolution", "batch_size"]
PLATFORMS = ("cpu/openvino/fp32", "cpu/openvino/int8")


def _pair_keys(frame: pd.DataFrame) -> pd.Series:
    f = frame[PAIR]
    return (
        f["family"].astype(str)
        + "|"
        + f["depth"].astype(int).astype(str)
        + "|"
        + f["width"].astype(float).round(6).astype(str)
        + "|"
        + f["resolution"].astype(int).astype(str)
        + "|"
        + f["batch_size"].astype(int).astype(str)
    )


def _pass_rows(source: str) -> pd.DataFrame:
    from carb_nas.datasets import load_dataset
    from carb_nas.measure.campaign import campaign_rows

    if Path(source).is_dir():
        return campaign_rows(source)
    return load_dataset(source)


def export(passes: list[str], out_dir: Path, torch: str = TORCH, name: str = "zoo") -> list[Path]:
    from carb_nas.datasets import load_dataset, machines, median_of_passes, write_table

    torch_rows = load_dataset(torch)
    torch_keys = set(_pair_keys(torch_rows))
    torch_cpu = machines(torch_rows)
    by_platform: dict[str, list[tuple[str, pd.DataFrame]]] = {}
    for source in passes:
        rows = _pass_rows(source)
        if rows.empty:
            print(f"{source}: no rows yet, skipped")
            continue
        if machines(rows) != torch_cpu:  # a pairing across machines would compare two CPUs
            sys.exit(
                f"{source}: measured on another machine than {torch}: expected its CPU "
                f"{sorted(torch_cpu)}, got {sorted(machines(rows))}. Pass the torch dataset of "
                "the passes' machine with --torch."
            )
        platforms = sorted(rows["platform"].astype(str).unique())
        if len(platforms) != 1 or platforms[0] not in PLATFORMS:
            sys.exit(f"{source}: expected one platform of {PLATFORMS}, got {platforms}")
        by_platform.setdefault(platforms[0], []).append((source, rows))
    written = []
    for platform, found in sorted(by_platform.items()):
        sources = [s for s, _ in found]
        if len(found) == 1:
            rows = found[0][1]
        else:
            rows = median_of_passes([r for _, r in found], sources=sources)
        paired = _pair_keys(rows).isin(torch_keys)
        if (~paired).any():
            print(f"{platform}: dropped {int((~paired).sum())} rows without a row in {torch}")
        rows = rows[paired.to_numpy()].sort_values("key").reset_index(drop=True)
        out = out_dir / f"{platform.replace('/', '_')}_{name}.csv"
        load_dataset(rows, name=str(out))  # the shipped rule, before writing
        write_table(rows, out)
        counts = rows["status"].value_counts().to_dict()
        print(f"wrote {len(rows)} rows ({counts}) of {len(found)} pass(es) {sources} to {out}")
        written.append(out)
    return written


def _fingerprint(frame: pd.DataFrame) -> dict:
    text = frame["fingerprint"].dropna().astype(str).value_counts().index[0]
    return json.loads(text)


def describe(paths: list[Path], torch_name: str = TORCH) -> str:
    from carb_nas.datasets import load_dataset

    torch = load_dataset(torch_name, ok_only=True)
    tlat = dict(zip(_pair_keys(torch), torch["latency_ms"]))
    figures: dict[str, float | int] = {}
    lat: dict[str, dict[str, float]] = {}
    for path in paths:
        frame = load_dataset(path)
        ok = frame[frame["status"] == "ok"]
        plat = str(frame["platform"].iloc[0])
        tag = "ov_" + plat.rsplit("/", 1)[1]
        cv = ok["latency_cv"].astype(float)
        fp = _fingerprint(ok)
        keys = _pair_keys(ok)
        lat[tag] = dict(zip(keys, ok["latency_ms"].astype(float)))
        ratio = np.array([v / tlat[k] for k, v in lat[tag].items() if k in tlat])
        ts = pd.to_datetime(ok["timestamp"])
        print(f"## {plat} ({path.name})")
        print(f"rows {len(frame)} (ok {len(ok)}), paired with rows of {torch_name}: {len(ratio)}")
        print(
            f"latency CV median {cv.median():.1%} / p90 {cv.quantile(0.9):.1%}; "
            f"rows with CV > 0.10: {int((cv > 0.10).sum())}"
        )
        print(f"measured {ts.min():%Y-%m-%d %H:%M}-{ts.max():%H:%M} UTC")
        versions = {k: fp.get(k) for k in ("openvino", "nncf", "torch", "python", "carb_nas")}
        print(f"versions {json.dumps({k: v for k, v in versions.items() if v})}")
        print(
            f"device {fp.get('cpu_model')}, threads {fp.get('threads')}, "
            f"protocol {fp.get('protocol')} {json.dumps(fp.get('protocol_params'))}"
        )
        print(f"scheme {json.dumps(fp.get('scheme'))}")
        print(f"peak memory: {ok['peak_mem_method'].iloc[0]}")
        if "reference_ms" in ok.columns and (ok["reference_ms"].astype(float) > 0).any():
            ref = ok["reference_ms"].astype(float)
            print(
                f"speed probe: {int((ref > 0).sum())} rows timed it, median {ref.median():.3f} ms, "
                f"p10-p90 {ref.quantile(0.1):.3f}-{ref.quantile(0.9):.3f} ms"
            )
        print(
            f"latency / torch fp32 on the paired configs: p10 {np.quantile(ratio, 0.1):.2f}, "
            f"median {np.median(ratio):.2f}, p90 {np.quantile(ratio, 0.9):.2f}"
        )
        figures[f"{tag}_rows"] = int(len(ok))
        figures[f"{tag}_cv_median"] = round(float(cv.median()), 4)
    if {"ov_fp32", "ov_int8"} <= set(lat):
        common = lat["ov_fp32"].keys() & lat["ov_int8"].keys()
        speed = np.array([lat["ov_fp32"][k] / lat["ov_int8"][k] for k in common])
        print(
            f"int8 speedup over fp32 ({len(common)} configs): p10 "
            f"{np.quantile(speed, 0.1):.2f}, median {np.median(speed):.2f}, p90 "
            f"{np.quantile(speed, 0.9):.2f}"
        )
        figures["ov_int8_speedup_median"] = round(float(np.median(speed)), 3)
    return " ".join(f"{k}={v}" for k, v in figures.items())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="passes -> the shipped OpenVINO zoo datasets")
    e.add_argument("passes", nargs="+", help="campaign directories or exported row tables")
    e.add_argument("--out-dir", default=str(ZOO))
    e.add_argument("--name", default="zoo", help="the datasets' qualifier (file <platform>_NAME)")
    d = sub.add_parser("describe", help="provenance figures of the datasets")
    d.add_argument("datasets", nargs="*", help="dataset names or files (default: the zoo ones)")
    for sp in (e, d):
        sp.add_argument("--torch", default=TORCH, help="the torch fp32 dataset to pair with")
    args = p.parse_args()
    from carb_nas.datasets import dataset_path
    from carb_nas.errors import CarbNasError

    try:  # a wrong name or path: its one-line message, no traceback
        if args.cmd == "export":
            paths = export(args.passes, Path(args.out_dir), args.torch, args.name)
        else:
            names = args.datasets or [f"{x}/zoo" for x in PLATFORMS]
            paths = [dataset_path(x) for x in names]
        print(describe(paths, args.torch))
    except CarbNasError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
