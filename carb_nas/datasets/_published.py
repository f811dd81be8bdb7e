"""Published measurements: read-only datasets of other people's benchmarks, never mixed with ours.

carb_nas ships the inference benchmarks and ImageNet accuracies that the pytorch-image-models
repository (``huggingface/pytorch-image-models``, Apache-2.0) publishes in its ``results/``
folder, byte for byte (gzip-compressed), with a manifest of where each file came from
(repository, commit, path, git blob id, SHA-256) and what it holds (device, PyTorch and CUDA
versions, precision, memory format, eager or ``torch.compile``, batch size, what each figure
is). See ``carb_nas/data/published/NOTICE`` for the licence and ``docs/published/`` for how the
files were imported (``docs/published/import_timm.py``).

A published dataset is **not** a table of ``SCHEMA`` rows: it has no config key, no platform
fingerprint of ours, no timing protocol of ours, no energy, no peak memory. It is read only by
``load_published`` (validated against ``BENCHMARK_COLUMNS`` / ``ACCURACY_COLUMNS``, a schema
of its own) and refused, with one line, wherever measured rows are required (``load_dataset``,
``--append``, ``calibrate``; see ``refuse_published``).

Names: ``published/<device>/<precision>-<layout>-pt<torch>-<cuda or cpu>[-dynamo]``, e.g.
``published/rtx4090/amp-nchw-pt291-cu128``; ``published/<device>`` alone names the device's
newest eager AMP NCHW file (for CPUs: the newest fp32 file). ``list_published()`` lists them.

A normalized benchmark frame has one row per (model, image size), see ``PUBLISHED_SCHEMA``:
``latency_ms`` is timm's ``infer_step_time`` (mean wall time of one inference step, one batch of
``batch_size`` images, 10 warm-up and 50 timed steps), ``latency_ms_per_image`` is
``1000 / infer_samples_per_sec`` (throughput). The architecture columns are per image as timm
counts them (GMACs, activations in millions, parameters in millions); ``published_inputs``
turns them into the cost model's inputs (``flops`` per batch = 2 x MACs x batch, as
``carb_nas.features`` counts FLOPs). They carry no per-layer detail (no operator mix, no
layer shapes, no kernel choice), which limits what any model of them can tell apart: two
networks with equal MACs, activations and parameters but different operators (depthwise vs
dense convolution, attention vs convolution) look the same.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.errors import InputFileError, MissingFileError

__all__ = [
    "ACCURACY_COLUMNS",
    "BENCHMARK_COLUMNS",
    "PUBLISHED_PREFIX",
    "PUBLISHED_SCHEMA",
    "PublishedDatasetError",
    "git_blob_sha1",
    "is_published",
    "list_published",
    "load_published",
    "load_published_accuracy",
    "model_family",
    "parse_benchmark_name",
    "published_dir",
    "published_inputs",
    "read_published_benchmark",
    "read_published_accuracy",
    "refuse_published",
    "resolve_published",
]

PUBLISHED_PREFIX = "published/"

# column -> (kind, description): timm's own columns; no others are accepted, and all but the
# OPTIONAL ones must be there (the oldest CPU file has no MAC or activation counts)
OPTIONAL_COLUMNS = ("infer_gmacs", "infer_macts")
BENCHMARK_COLUMNS: dict[str, tuple[str, str]] = {
    "model": ("str", "timm model name (architecture, no pretrained tag)"),
    "infer_img_size": ("int", "input height = width, pixels"),
    "infer_samples_per_sec": ("float", "throughput: images per second over the timed steps"),
    "infer_step_time": ("float", "mean wall time of one inference step (one batch), ms"),
    "infer_batch_size": ("int", "images per step (the largest that fit, see the manifest)"),
    "infer_gmacs": ("float", "multiply-accumulates per image, 10^9 (timm's counter)"),
    "infer_macts": ("float", "activations per image, 10^6 elements (timm's counter)"),
    "param_count": ("float", "parameters, 10^6"),
}
ACCURACY_COLUMNS: dict[str, tuple[str, str]] = {
    "model": ("str", "timm model name with its pretrained tag (arch.tag)"),
    "img_size": ("int", "evaluation input height = width, pixels"),
    "top1": ("float", "ImageNet-1k validation top-1 accuracy, %"),
    "top1_err": ("float", "100 - top1, %"),
    "top5": ("float", "ImageNet-1k validation top-5 accuracy, %"),
    "top5_err": ("float", "100 - top5, %"),
    "param_count": ("float", "parameters, 10^6"),
    "crop_pct": ("float", "centre-crop fraction used in evaluation"),
    "interpolation": ("str", "resize interpolation used in evaluation"),
}
# the normalized benchmark frame load_published returns
PUBLISHED_SCHEMA: dict[str, tuple[str, str]] = {
    "model": ("str", "timm model name"),
    "family": ("str", "model family: the name's first part, digits and variants stripped"),
    "entry": ("str", "model@resolution: the row key (a model may be published at two sizes)"),
    "resolution": ("int", "input height = width, pixels (infer_img_size)"),
    "batch_size": ("int", "images per step (infer_batch_size)"),
    "latency_ms": ("float", "mean wall time of one step (one batch), ms (infer_step_time)"),
    "latency_ms_per_image": ("float", "1000 / infer_samples_per_sec, ms per image"),
    "samples_per_s": ("float", "throughput, images per second (infer_samples_per_sec)"),
    "gmacs": ("float", "MACs per image, 10^9 (infer_gmacs)"),
    "macts_m": ("float", "activations per image, 10^6 (infer_macts)"),
    "params_m": ("float", "parameters, 10^6 (param_count)"),
    "status": ("str", "ok | no_result (timm published the model without a figure)"),
}

_BENCH = re.compile(
    r"^benchmark-infer-(?P<precision>amp_bf16|amp|bf16|fp16|fp32)-(?P<layout>nchw|nhwc)"
    r"-pt(?P<torch>\d+)-(?:cu(?P<cuda>\d+)|(?P<cpu>cpu))-(?P<device>[a-z0-9_]+?)"
    r"(?P<dynamo>-dynamo)?\.csv$"
)
_DEVICE_IDS = {"4090": "rtx4090", "5090": "rtx5090", "3090": "rtx3090"}
DEVICE_NAMES = {
    "rtx3090": "NVIDIA GeForce RTX 3090",
    "rtx4090": "NVIDIA GeForce RTX 4090",
    "rtx5090": "NVIDIA GeForce RTX 5090",
    "pro6000maxq": "NVIDIA RTX PRO 6000 Blackwell Max-Q",
    "i9_10940x": "Intel Core i9-10940X",
    "i7_12700h": "Intel Core i7-12700H",
}
PRECISIONS = {
    "amp": "torch.autocast float16 (weights fp32)",
    "amp_bf16": "torch.autocast bfloat16 (weights fp32)",
    "bf16": "weights and inputs bfloat16",
    "fp16": "weights and inputs float16",
    "fp32": "float32",
}


class PublishedDatasetError(InputFileError):
    """A published (read-only, not ours) dataset where measured rows are required, or a
    published file or name that is not what it should be."""


def published_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "published"


def git_blob_sha1(content: bytes) -> str:
    """Git's object id of a file's bytes (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _torch_version(digits: str) -> str:
    # pt113 -> 1.13, pt291 -> 2.9.1 (timm's file names drop the dots)
    return f"1.{digits[1:]}" if digits.startswith("1") else ".".join(digits)


def parse_benchmark_name(file_name: str) -> dict[str, Any]:
    """Provenance a timm benchmark file's name carries: device, PyTorch/CUDA, precision, ...

    ``benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv`` -> name
    ``published/rtx4090/amp-nchw-pt291-cu128-dynamo``, device cuda, torch 2.9.1, cuda 12.8, ...
    """
    m = _BENCH.match(Path(file_name).name)
    if m is None:
        raise PublishedDatasetError(
            f"unrecognized published benchmark file name: expected "
            "'benchmark-infer-<precision>-<nchw|nhwc>-pt<NNN>-<cuNNN|cpu>-<device>[-dynamo].csv'"
            f" as in timm's results/ folder, got {Path(file_name).name!r}. Import timm's "
            "benchmark-infer-*.csv files under their own names."
        )
    g = m.groupdict()
    device_id = _DEVICE_IDS.get(g["device"], g["device"])
    cuda = None if g["cuda"] is None else f"{g['cuda'][:-1]}.{g['cuda'][-1]}"
    backend = "cpu" if g["cpu"] else f"cu{g['cuda']}"
    variant = f"{g['precision']}-{g['layout']}-pt{g['torch']}-{backend}" + (g["dynamo"] or "")
    return {
        "name": f"{PUBLISHED_PREFIX}{device_id}/{variant}",
        "device": "cpu" if g["cpu"] else "cuda",
        "device_id": device_id,
        "device_name": DEVICE_NAMES.get(device_id, device_id),
        "torch": _torch_version(g["torch"]),
        "cuda": cuda,
        "precision": g["precision"],
        "precision_meaning": PRECISIONS[g["precision"]],
        "memory_format": g["layout"],
        "compile": "torch.compile (dynamo)" if g["dynamo"] else "eager",
    }


def model_family(model: str | pd.Series) -> Any:
    """A timm model's family from its name: the first ``_`` part, trailing digits stripped,
    a ported-weights prefix (``tf_``, ``gluon_``, ``legacy_``) skipped.

    ``resnet50`` -> ``resnet``; ``resnetv2_50x1_bit`` -> ``resnetv2``; ``tf_efficientnet_b0``
    -> ``efficientnet``; ``vit_base_patch16_224`` -> ``vit``. Used to split by family.
    """
    if isinstance(model, pd.Series):
        return model.map(model_family)
    parts = str(model).split(".")[0].split("_")
    if len(parts) > 1 and parts[0] in ("tf", "gluon", "legacy", "timm"):
        parts = parts[1:]
    head = parts[0]
    stripped = re.sub(r"\d+[a-z]?$", "", head) if not re.search(r"v\d+$", head) else head
    return stripped or head


def _read_csv(content: bytes, label: str) -> pd.DataFrame:
    try:
        return pd.read_csv(io.BytesIO(content), thousands=",", dtype={"model": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise PublishedDatasetError(
            f"{label}: unreadable published CSV: expected a comma-separated table with a header "
            f"row, got a parse error ({' '.join(str(e).split())[:120]}). Re-import the file."
        ) from None


def _check_columns(frame: pd.DataFrame, schema: dict[str, tuple[str, str]], label: str) -> None:
    cols = [str(c) for c in frame.columns]
    unknown = [c for c in cols if c not in schema]
    missing = [c for c in schema if c not in cols and c not in OPTIONAL_COLUMNS]
    if unknown or missing:
        optional = [c for c in schema if c in OPTIONAL_COLUMNS]
        raise PublishedDatasetError(
            f"{label}: columns do not match the published schema: expected {list(schema)}"
            f"{f' ({optional} may be absent)' if optional else ''}, got unknown {unknown} and "
            f"missing {missing}. The upstream format "
            "changed or this is not a timm results file: update the published schema "
            "(carb_nas.datasets._published) before importing it."
        )


def _check_values(
    frame: pd.DataFrame, schema: dict[str, tuple[str, str]], key: list[str], label: str
) -> pd.DataFrame:
    out = frame.copy()
    for col in schema:
        if col not in out.columns:
            out[col] = np.nan  # an optional column the file lacks
    for col, (kind, _) in schema.items():
        if kind == "str":
            out[col] = out[col].astype("string")
            continue
        num = pd.to_numeric(out[col], errors="coerce")
        bad = num.isna() & out[col].notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise PublishedDatasetError(
                f"{label}: non-numeric value in column {col!r} at row {i + 2}: expected a "
                f"number or an empty cell, got {out[col].iloc[i]!r}. Fix or re-import the file."
            )
        if (num.dropna() < 0).any():
            i = int(np.flatnonzero((num < 0).to_numpy())[0])
            raise PublishedDatasetError(
                f"{label}: negative value in column {col!r} at row {i + 2}: expected >= 0, "
                f"got {num.iloc[i]}. Fix or re-import the file."
            )
        out[col] = num.astype("Int64") if kind == "int" else num.astype(float)
    if out["model"].isna().any():
        i = int(np.flatnonzero(out["model"].isna().to_numpy())[0])
        raise PublishedDatasetError(
            f"{label}: empty model name at row {i + 2}: expected a timm model name in every row, "
            "got an empty cell. Fix or re-import the file."
        )
    dup = out.duplicated(key, keep=False)
    if dup.any():
        rows = np.flatnonzero(dup.to_numpy())
        first = out.iloc[rows[0]]
        same = rows[(out.iloc[rows][key] == first[key]).all(axis=1).to_numpy()]
        raise PublishedDatasetError(
            f"{label}: model {first['model']!r} appears twice at image size "
            f"{first[key[1]]} (rows {same[0] + 2} and {same[1] + 2}): expected one row per "
            "model and image size. Remove the repeated row or re-import the file."
        )
    return out


def read_published_benchmark(content: bytes, file_name: str, label: str | None = None):
    """A timm ``benchmark-infer-*.csv`` (its bytes), validated, as the normalized frame
    (``PUBLISHED_SCHEMA``) with ``attrs["provenance"]`` from the file name."""
    label = label or file_name
    prov = parse_benchmark_name(file_name)
    raw = _read_csv(content, label)
    _check_columns(raw, BENCHMARK_COLUMNS, label)
    raw = _check_values(raw, BENCHMARK_COLUMNS, ["model", "infer_img_size"], label)
    out = pd.DataFrame(
        {
            "model": raw["model"].astype(str),
            "family": model_family(raw["model"].astype(str)),
            "entry": raw["model"].astype(str) + "@" + raw["infer_img_size"].astype(str),
            "resolution": raw["infer_img_size"],
            "batch_size": raw["infer_batch_size"],
            "latency_ms": raw["infer_step_time"],
            "latency_ms_per_image": 1000.0
            / raw["infer_samples_per_sec"].where(raw["infer_samples_per_sec"] > 0),
            "samples_per_s": raw["infer_samples_per_sec"],
            "gmacs": raw["infer_gmacs"],
            "macts_m": raw["infer_macts"],
            "params_m": raw["param_count"],
        }
    )
    measured = out[["latency_ms", "latency_ms_per_image", "batch_size"]].notna().all(axis=1)
    out["status"] = np.where(measured, "ok", "no_result")
    out.attrs = {"source": label, "provenance": prov}
    return out


def read_published_accuracy(content: bytes, label: str) -> pd.DataFrame:
    """A timm ``results-imagenet*.csv`` (its bytes), validated: one row per (model with tag,
    image size), plus ``arch`` (the name before the tag) and ``family``."""
    raw = _read_csv(content, label)
    _check_columns(raw, ACCURACY_COLUMNS, label)
    out = _check_values(raw, ACCURACY_COLUMNS, ["model", "img_size"], label)
    out = out.rename(columns={"img_size": "resolution", "param_count": "params_m"})
    out["model"] = out["model"].astype(str)
    out.insert(1, "arch", out["model"].str.split(".").str[0])
    out.insert(2, "family", model_family(out["arch"]))
    out.attrs = {"source": label}
    return out


# -- the shipped files -----------------------------------------------------------------------
@lru_cache(maxsize=1)
def _manifest() -> dict[str, Any]:
    path = published_dir() / "manifest.json"
    if not path.is_file():
        return {"files": []}
    return json.loads(path.read_text())


def _entries(kind: str = "benchmark") -> list[dict[str, Any]]:
    return [f for f in _manifest()["files"] if f["kind"] == kind]


def _aliases() -> dict[str, str]:
    """``published/<device>`` -> that device's newest eager AMP NCHW (CPU: fp32) file."""
    best: dict[str, tuple[tuple, str]] = {}
    for f in _entries():
        preferred = f["precision"] == ("fp32" if f["device"] == "cpu" else "amp")
        rank = (
            preferred,
            f["memory_format"] == "nchw",
            f["compile"] == "eager",
            tuple(int(x) for x in f["torch"].split(".")),
        )
        key = f"{PUBLISHED_PREFIX}{f['device_id']}"
        if key not in best or rank > best[key][0]:
            best[key] = (rank, f["name"])
    return {k: v for k, (_, v) in best.items()}


def is_published(name: Any) -> bool:
    """True when ``name`` names a published dataset (``published/...``) or a shipped published
    file; no file is read."""
    if isinstance(name, pd.DataFrame):
        return "infer_samples_per_sec" in name.columns or "provenance" in name.attrs
    text = str(name)
    if text.startswith(PUBLISHED_PREFIX):
        return True
    try:
        p = Path(text).resolve()
    except (OSError, ValueError):
        return False
    root = published_dir().resolve()
    return p == root or root in p.parents


def resolve_published(name: str) -> dict[str, Any]:
    """The manifest entry of a published benchmark name (or device alias)."""
    text = str(name).rstrip("/")
    text = _aliases().get(text, text)
    for f in _entries():
        if f["name"] == text:
            return f
    names = sorted(_aliases()) + [f["name"] for f in _entries()]
    devices = ", ".join(sorted(_aliases()))
    raise MissingFileError(
        f"no published dataset {str(name)!r}: expected one of the published devices ({devices}) "
        f"or a full name such as {names[-1] if names else 'published/rtx4090/...'!r}; the "
        "published data has no other platform. See `carb-nas dataset list --source published`."
    )


def _content(entry: dict[str, Any]) -> bytes:
    path = published_dir() / entry["shipped"]
    data = gzip.decompress(path.read_bytes())
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise PublishedDatasetError(
            f"{path}: damaged published file: expected SHA-256 {entry['sha256'][:12]}... as "
            "recorded in the manifest, got other content. Reinstall carb_nas or re-run "
            "docs/published/import_timm.py."
        )
    return data


def load_published(name: str, ok_only: bool = True) -> pd.DataFrame:
    """A shipped published benchmark (``published/rtx4090`` or a full name), validated, as the
    normalized frame of ``PUBLISHED_SCHEMA``; ``attrs["provenance"]`` is its manifest entry.

    ``ok_only`` drops the rows timm published without a figure (``status == "no_result"``).
    """
    entry = resolve_published(name)
    frame = read_published_benchmark(_content(entry), entry["file"], label=entry["name"])
    if ok_only:
        frame = frame[frame["status"] == "ok"].reset_index(drop=True)
    frame.attrs = {"source": entry["name"], "provenance": dict(entry)}
    return frame


def load_published_accuracy(
    name: str | bytes = "imagenet", label: str | None = None
) -> pd.DataFrame:
    """A published accuracy table, validated: the shipped one named ``name`` (``imagenet``:
    timm's ``results-imagenet.csv``), or ``name`` given as the bytes of such a CSV (``label``
    names it in messages)."""
    if isinstance(name, bytes):
        return read_published_accuracy(name, label or "<accuracy bytes>")
    for f in _entries("accuracy"):
        if f["name"] in (name, f"{PUBLISHED_PREFIX}accuracy/{name}"):
            frame = read_published_accuracy(_content(f), f["name"])
            frame.attrs = {"source": f["name"], "provenance": dict(f)}
            return frame
    names = [f["name"] for f in _entries("accuracy")]
    raise MissingFileError(
        f"no published accuracy table {name!r}: expected one of {names or '(none shipped)'}. "
        "See `carb-nas dataset list --source published`."
    )


def list_published() -> list[dict[str, Any]]:
    """One dict per shipped published table: name, source ("published"), kind, device, ...,
    rows, repository, commit, file, licence (the manifest entry, without the hashes)."""
    aliases = {v: k for k, v in _aliases().items()}
    out = []
    for f in _manifest()["files"]:
        item = {"platform": f["name"], "source": "published"}
        item.update({k: v for k, v in f.items() if k not in ("sha256", "git_blob", "shipped")})
        item["alias"] = aliases.get(f["name"])
        item["upstream_path"] = f["path"]
        item["path"] = str((published_dir() / f["shipped"]).resolve())
        out.append(item)
    return out


def refuse_published(
    name: Any, where: str, need: str = "measured rows of SCHEMA", label: str | None = None
) -> None:
    """Raise ``PublishedDatasetError`` when ``name`` (a name, path or frame; ``label`` names
    it in the message) is a published dataset: every command that needs our own measurements
    calls it (``--append``, ``calibrate``, ``load_dataset``)."""
    if is_published(name):
        shown = label or ("<frame>" if isinstance(name, pd.DataFrame) else str(name))
        raise PublishedDatasetError(
            f"{shown} is a published dataset (read-only, measured by others, no config keys or "
            f"fingerprints of ours): {where} needs {need}, got a published one. Use a dataset "
            "measured with `carb-nas profile`, or the published commands (`carb-nas published "
            "...`, `carb-nas report transfer published/A published/B`)."
        )


def published_inputs(frame: pd.DataFrame) -> pd.DataFrame:
    """The cost model's inputs for a normalized published frame (one row per entry).

    ``flops`` per batch (2 x MACs x batch, as ``carb_nas.features`` counts), ``params``
    (count), ``activations`` per batch (count), ``resolution``, ``batch_size``. Rows lacking
    an architecture column stay, with NaN (XGBoost and LightGBM read NaN as missing).
    """
    batch = frame["batch_size"].astype(float)
    return pd.DataFrame(
        {
            "flops": 2e9 * frame["gmacs"].astype(float) * batch,
            "params": 1e6 * frame["params_m"].astype(float),
            "activations": 1e6 * frame["macts_m"].astype(float) * batch,
            "resolution": frame["resolution"].astype(float),
            "batch_size": batch,
        },
        index=frame.index,
    )
