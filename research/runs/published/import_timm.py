"""Import timm's published inference benchmarks and ImageNet accuracies into carb_nas.

Reads every ``results/benchmark-infer-*.csv`` and ``results/results-imagenet.csv`` of one commit
of huggingface/pytorch-image-models (Apache-2.0) from a git directory, validates each against
the published schema (``carb_nas.datasets._published``), and writes them byte for byte
(gzip, mtime 0, so the output is reproducible) into ``carb_nas/data/published/timm/``, with
``manifest.json`` (provenance per file) and the licence (``LICENSE``, ``NOTICE``).

    git clone https://github.com/huggingface/pytorch-image-models /tmp/timm
    python research/runs/published/import_timm.py /tmp/timm/.git \
        --commit aa4b5850c1543fa488abf260f18390eda46cf85d

Training benchmarks (``benchmark-train-*``) and the robustness test sets are not imported.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import subprocess
from pathlib import Path

from carb_nas._io import atomic_directory
from carb_nas.datasets._published import (  # the importer of the shipped files: its parsers
    git_blob_sha1,
    parse_benchmark_name,
    read_published_accuracy,
    read_published_benchmark,
)

REPO = "huggingface/pytorch-image-models"
ACCURACY_FILES = {"results-imagenet.csv": "published/accuracy/imagenet"}
OUT = Path(__file__).resolve().parents[2] / "carb_nas" / "data" / "published"

FIGURES = {
    "latency_ms": "infer_step_time: mean wall time of one inference step (one batch of "
    "batch_size images) over 50 timed steps after 10 warm-up steps, ms (timm benchmark.py)",
    "latency_ms_per_image": "1000 / infer_samples_per_sec: images per second over the timed "
    "steps (throughput, not single-image latency)",
    "architecture": "infer_gmacs (GMACs per image), infer_macts (activations per image, 10^6), "
    "param_count (10^6), as timm's profiler counts them",
}
BATCH = (
    "per row: timm starts at the file's largest batch size and lowers it when the model "
    "does not fit; CPUs run batch 1"
)


def git(git_dir: str, *args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True
    ).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir")
    ap.add_argument("--commit", default="HEAD")
    args = ap.parse_args()
    commit = git(args.git_dir, "rev-parse", args.commit).decode().strip()
    committed = git(args.git_dir, "show", "-s", "--format=%cI", commit).decode().strip()
    names = git(args.git_dir, "ls-tree", "--name-only", commit, "results/").decode().split()
    files: list[dict] = []
    blobs: dict[str, bytes] = {}
    for path in names:
        base = Path(path).name
        if base.startswith("benchmark-infer-"):
            kind = "benchmark"
        elif base in ACCURACY_FILES:
            kind = "accuracy"
        else:
            continue
        content = git(args.git_dir, "show", f"{commit}:{path}")
        entry = {
            "kind": kind,
            "repository": REPO,
            "commit": commit,
            "commit_date": committed,
            "file": base,
            "path": path,
            "git_blob": git_blob_sha1(content),
            "sha256": hashlib.sha256(content).hexdigest(),
            "license": "Apache-2.0",
            "shipped": f"timm/{base}.gz",
        }
        if kind == "benchmark":
            frame = read_published_benchmark(content, base)
            entry = {**parse_benchmark_name(base), **entry}
            entry.update(
                batch_size_max=int(frame["batch_size"].max()),
                batch_size=BATCH,
                figures=FIGURES,
                rows=int(len(frame)),
                rows_without_result=int((frame["status"] != "ok").sum()),
                models=int(frame["model"].nunique()),
            )
        else:
            frame = read_published_accuracy(content, base)
            entry = {"name": ACCURACY_FILES[base], **entry}
            entry.update(
                device=None,
                figures={"top1": "ImageNet-1k validation top-1, %", "top5": "top-5, %"},
                rows=int(len(frame)),
                models=int(frame["model"].nunique()),
            )
        files.append(entry)
        blobs[entry["shipped"]] = content
    license_text = git(args.git_dir, "show", f"{commit}:LICENSE")
    with atomic_directory(OUT) as tmp:
        tmp = Path(tmp)
        (tmp / "timm").mkdir()
        for shipped, content in blobs.items():
            # mtime=0 and no file name in the header: the same input gives the same bytes
            with (
                open(tmp / shipped, "wb") as fh,
                gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz,
            ):
                gz.write(content)
        (tmp / "LICENSE").write_bytes(license_text)
        (tmp / "NOTICE").write_text(
            "The files under timm/ are copied unchanged (gzip-compressed) from the results/"
            " folder\n"
            f"of {REPO} (https://github.com/{REPO}), commit {commit},\n"
            "Copyright 2019 Ross Wightman and the pytorch-image-models contributors, licensed\n"
            "under the Apache License, Version 2.0 (LICENSE in this folder). manifest.json"
            " records\n"
            "each file's path, git blob id and SHA-256. carb_nas reads them as published\n"
            "measurements (other people's benchmarks), never as its own.\n"
        )
        (tmp / "manifest.json").write_text(
            json.dumps({"source": REPO, "commit": commit, "files": files}, indent=1) + "\n"
        )
    print(f"wrote {len(files)} files from {REPO}@{commit[:12]} to {OUT}")


if __name__ == "__main__":
    main()
