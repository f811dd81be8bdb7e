"""Resumable profiling campaigns on an Optuna study (local journal file, SQLite or PostgreSQL).

A campaign is a directory holding ``manifest.json`` (platform + config source fingerprint) and,
by default, ``journal.log`` (an Optuna journal file). Each config to measure is an enqueued trial
(``study.enqueue_trial`` with the config as params and its key as a user attr). A worker takes
the next one with ``study.ask()``, records its owner (pid, process start time, boot id) as a user
attr, measures the config, stores the row as the trial's ``row`` user attr and ``tell``s the
trial complete. A config enqueued with fields of its own (``run_campaign(queue=...)``: why an
active campaign chose it) carries them as the trial's ``fields`` user attr into its row. Only
Optuna's public API is used: ``enqueue_trial``, ``ask``/``tell``,
``get_trials``, ``add_trial`` and the storage's public methods.

Crash safety: killed at any moment (``kill -9`` included), the same command continues. On start
a worker cuts a record torn by the kill from the journal (``storage.repair_journal``), then looks
for RUNNING trials whose owner is dead (same boot, pid gone or reused; or a journal written
before a reboot), and on an RDB storage for trials whose heartbeat is stale
(``optuna.storages.fail_stale_trials``; ``RetryHeartbeatStaleTrialCallback`` re-enqueues them).
A stale trial that already holds its row is completed (nothing measured is lost); otherwise it is
failed and its config re-enqueued. Export keeps one row per key, so no row is ever duplicated.

Many workers: pass the same ``--storage`` URL (``postgresql://...``, or ``sqlite:///x.db`` on one
host) to every worker, or run several workers on one local journal (its file lock makes ``ask``
atomic). An RDB storage gets heartbeats (every ``heartbeat_s``, default 60 s) so a crashed
host's trial is retried by the others once it is ``grace_s`` (default 180 s) silent: a worker
whose queue is empty waits while other workers' trials run, failing and re-enqueueing the stale
ones, so the campaign ends complete as long as one worker survives. SQLite has no row locks,
so two workers may now and then measure the same config; the campaign still holds one row per
config.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas._io import atomic_write_json
from carb_nas.datasets import SCHEMA
from carb_nas.errors import CampaignError, ConfigError, MissingFileError, StorageError
from carb_nas.measure._profiler import Profiler, frozen_heap, platform_string
from carb_nas.measure._protocol import Protocol, lost_its_core
from carb_nas.measure._runtimes import check_platform, usable_cpus
from carb_nas.space import ARCH_COLUMNS as ARCH_KNOBS
from carb_nas.space import CONFIG_COLUMNS, REQUIRED_COLUMNS, Config, frame_to_configs
from carb_nas.storage import (
    GRACE_S,
    HEARTBEAT_S,
    check_storage_url,
    is_journal,
    journal_path,
    open_storage,
    redact_url,
    repair_journal,
    resolve_storage_url,
    with_reconnect,
)

__all__ = [
    "run_campaign",
    "campaign_rows",
    "salvage_rows",
    "campaign_status",
    "campaign_storage_url",
    "open_campaign_study",
    "select_configs",
    "order_configs",
    "check_campaign_args",
    "check_heartbeat",
    "CampaignSummary",
    "MANIFEST",
    "JOURNAL",
    "STUDY_NAME",
    "MAX_CRASHES",
]

MANIFEST = "manifest.json"
JOURNAL = "journal.log"
STUDY_NAME = "carb-nas-campaign"
FORMAT = "carb-nas-campaign"
FORMAT_VERSION = 1
ARCH_COLUMNS = REQUIRED_COLUMNS  # a model and its batch size (what a prepared model serves)
#: a config whose measurement killed its worker this many times becomes an error row
MAX_CRASHES = 2


# -- selecting and ordering configs ----------------------------------------------------------
def _platform_frame(frame: pd.DataFrame, runtime: str, precision: str) -> pd.DataFrame:
    """Configs with the platform's runtime and precision, deduplicated, canonical order."""
    out = frame[list(ARCH_COLUMNS)].copy()
    out["precision"] = precision
    out["runtime"] = runtime
    out = out.drop_duplicates(list(ARCH_COLUMNS)).reset_index(drop=True)
    return out[list(CONFIG_COLUMNS)]


def source_fingerprint(frame: pd.DataFrame) -> str:
    """Hash of the set of architectures+batch sizes in a configs table (order-free)."""
    keys = sorted(
        f"{r.family};{r.depth};{float(r.width):g};{r.resolution};{r.batch_size}"
        for r in frame[list(ARCH_COLUMNS)].itertuples(index=False)
    )
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]


def select_configs(frame: pd.DataFrame, limit: int | None = None, seed: int = 0) -> pd.DataFrame:
    """``limit`` configs drawn without replacement, deterministic in ``seed``, nested in
    ``limit``: the first N of one seeded permutation, so ``--limit 1000`` is a subset of
    ``--limit 2000`` with the same seed (paired campaigns across platforms).
    """
    frame = frame.sort_values(list(ARCH_COLUMNS), kind="stable").reset_index(drop=True)
    if limit is None or limit >= len(frame):
        return frame
    if limit <= 0:
        raise ConfigError(f"invalid --limit: expected >= 1, got {limit}. Ask for at least 1.")
    perm = np.random.default_rng(seed).permutation(len(frame))
    return frame.iloc[np.sort(perm[:limit])].reset_index(drop=True)


def order_configs(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Measurement order: models (family, depth, width, resolution) in a seeded random order,
    each model's batch sizes consecutive and ascending, so a prepared model (an exported or
    quantized ONNX file) serves all its batch sizes.
    """
    groups = list(ARCH_KNOBS)
    g = frame.groupby(groups, sort=True).ngroup().to_numpy()
    rank = np.random.default_rng(seed + 1).permutation(g.max() + 1 if len(g) else 0)
    out = frame.assign(_g=rank[g] if len(g) else g).sort_values(["_g", "batch_size"])
    return out.drop(columns="_g").reset_index(drop=True)


# -- storage -----------------------------------------------------------------------------------
def campaign_storage_url(out_dir: str | Path, storage: str | None = None) -> str:
    """The storage URL of the campaign ``out_dir``.

    ``storage``, else ``$CARB_NAS_STORAGE``, else the URL its manifest records (a campaign
    started with ``--storage URL`` resumes without it), else ``journal:OUT_DIR/journal.log``.
    """
    out_dir = Path(out_dir)
    url = resolve_storage_url(storage)
    if url is None:
        recorded = (_read_manifest(out_dir) or {}).get("storage")
        url = recorded if recorded and recorded != JOURNAL else f"journal:{out_dir / JOURNAL}"
    return url


def _recorded_storage(out_dir: Path, url: str) -> str:
    """How the manifest names ``url``: ``journal.log`` for the directory's own journal."""
    if is_journal(url) and journal_path(url).absolute() == (out_dir / JOURNAL).absolute():
        return JOURNAL
    return url if is_journal(url) else redact_url(url)  # no password in a manifest


def _open(
    out_dir: Path,
    url: str,
    *,
    read_only: bool,
    heartbeat_s: float = HEARTBEAT_S,
    grace_s: float = GRACE_S,
) -> Any:
    """The campaign's storage; a corrupted journal names the salvage command."""
    import optuna

    callback = None
    if not read_only and not is_journal(url):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # a crashed host's trial comes back once; the next crash makes it an error row
            callback = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_CRASHES - 1)
    try:
        return open_storage(
            url,
            read_only=read_only,
            heartbeat_interval_s=None if read_only else heartbeat_s,
            grace_period_s=grace_s,
            stale_trial_callback=callback,
        )
    except StorageError as e:
        if is_journal(url) and str(e).startswith("corrupted journal"):
            raise CampaignError(
                f"corrupted campaign store {str(journal_path(url))!r}: {e} Recover the measured "
                f"rows with `carb-nas dataset export {out_dir} -o rows.csv --salvage`, then "
                "start a new campaign directory."
            ) from e
        raise


def _load(storage: Any, out_dir: Path, url: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(
            study_name=STUDY_NAME, storage=storage, sampler=optuna.samplers.RandomSampler(0)
        )
    except KeyError:
        raise CampaignError(
            f"no campaign in {redact_url(url)!r}: expected a study {STUDY_NAME!r} in its store, "
            "got none. "
            f"Run `carb-nas profile ... -o {out_dir}` first, or pass the --storage it used."
        ) from None


def _check_readable(out_dir: Path, url: str) -> None:
    """A read-only command creates nothing: its campaign must exist."""
    if not is_journal(url):
        return
    path = journal_path(url)
    if not out_dir.is_dir() and path.parent == out_dir:
        raise MissingFileError(
            f"no campaign store: expected a campaign directory made by `carb-nas profile -o "
            f"DIR`, got no such directory {str(out_dir)!r}. Check the path."
        )
    if not path.is_file():
        raise MissingFileError(
            f"no campaign store: expected {str(path)!r} (made by `carb-nas profile -o DIR`), "
            "got no such file. Check the directory, or pass --storage URL."
        )


def open_campaign_study(out_dir: str | Path, storage: str | None = None) -> Any:
    """The Optuna study of an existing campaign, opened read-only (nothing is created)."""
    out_dir = Path(out_dir)
    url = campaign_storage_url(out_dir, storage)
    _check_readable(out_dir, url)
    return _load(_open(out_dir, url, read_only=True), out_dir, url)


# -- owners of running trials ------------------------------------------------------------------
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "unknown"


def _process_start(pid: int) -> float | None:
    try:
        import psutil

        return round(psutil.Process(pid).create_time(), 2)
    except Exception:  # noqa: BLE001 - no such process or no psutil
        return None


#: names this worker's host in its trials (default: the hostname); containers on one machine
#: share a boot id but not their pids, so each needs a host name of its own
HOST_ENV = "CARB_NAS_HOST"


def _host() -> str:
    import socket

    return os.environ.get(HOST_ENV) or socket.gethostname()


def _owner() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "start": _process_start(os.getpid()),
        "boot": _boot_id(),
        "host": _host(),
    }


def _owner_alive(owner: dict | None, journal: bool) -> bool:
    if not owner:
        return False
    if owner.get("boot") != _boot_id():
        # A local journal outlived a reboot: its owner is gone. Another host on a shared
        # RDB: leave it to heartbeats.
        return not journal
    if not journal and owner.get("host", _host()) != _host():
        return True  # another host (or container) on this machine: its pids are not ours
    start = _process_start(int(owner.get("pid", -1)))
    return start is not None and (owner.get("start") is None or abs(start - owner["start"]) < 1)


# -- manifest --------------------------------------------------------------------------------
def _read_manifest(out_dir: Path) -> dict | None:
    path = out_dir / MANIFEST
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CampaignError(
            f"corrupted campaign manifest {str(path)!r}: expected JSON, got {e}. Nothing was "
            "changed; restore the file or start a new campaign directory."
        ) from None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != FORMAT
        or doc.get("version") != FORMAT_VERSION
    ):
        got = doc if not isinstance(doc, dict) else (doc.get("format"), doc.get("version"))
        raise CampaignError(
            f"{path}: expected a {FORMAT} manifest version {FORMAT_VERSION}, got (format, "
            f"version) {got!r}. Use a new directory."
        )
    return doc


_CHECKED_FIELDS = (
    "platform",
    "threads",
    "protocol",
    "protocol_params",
    "meter",
    "source",
    "lock_sm_clock_mhz",
    "fresh_process",
    "storage",
)


def _check_manifest(old: dict, new: dict, where: str) -> None:
    for field in _CHECKED_FIELDS:
        if field == "storage" and "storage" not in old:
            continue
        if old.get(field) != new.get(field):
            fix = "Run the same command as before to resume, or use a new -o directory."
            if field == "storage":
                fix = (
                    f"Pass --storage {old.get(field)} (or unset $CARB_NAS_STORAGE) to resume, "
                    "or use a new -o directory."
                )
            raise CampaignError(
                f"campaign {where} was started with another {field}: expected "
                f"{old.get(field)!r} (as recorded in its manifest), got {new.get(field)!r}. {fix}"
            )


def check_campaign_args(
    *,
    threads: int | None = None,
    max_attempts: int = 3,
    remeasure_cv_above: float | None = None,
    wait_quiet_s: float = 0.0,
    max_configs: int | None = None,
    limit: int | None = None,
    max_host_mem_mb: float | None = None,
    lock_sm_clock_mhz: int | None = None,
) -> None:
    """Refuse a campaign argument out of range with one line (before anything is created).

    ``threads`` may not exceed the CPUs this process may run on: more intra-op threads than
    cores time the machine's oversubscription, not the platform.
    """
    cpus = usable_cpus()

    def bad(name: str, expected: str, got: object, fix: str) -> ConfigError:
        return ConfigError(f"invalid {name}: expected {expected}, got {got!r}. {fix}")

    if threads is not None and not 1 <= threads <= cpus:
        raise bad(
            "--threads",
            f"1 to {cpus} (the CPUs this process may use)",
            threads,
            "More threads than cores measure oversubscription; use at most the core count.",
        )
    if max_attempts < 1:
        raise bad("--max-attempts", ">= 1", max_attempts, "Use 1 (no re-measures) or more.")
    if remeasure_cv_above is not None and not (
        math.isfinite(remeasure_cv_above) and remeasure_cv_above >= 0
    ):
        raise bad(
            "--remeasure-cv-above",
            "a CV >= 0 (e.g. 0.10)",
            remeasure_cv_above,
            "Drop it or give a CV >= 0.",
        )
    if not (math.isfinite(wait_quiet_s) and wait_quiet_s >= 0):
        raise bad("--wait-quiet-s", "seconds >= 0", wait_quiet_s, "Use 0 (no wait) or more.")
    if max_configs is not None and max_configs < 0:
        raise bad("--max-configs", ">= 0", max_configs, "Use 0 (recovery only) or more.")
    if limit is not None and limit < 1:
        raise bad("--limit", ">= 1", limit, "Ask for at least 1.")
    if max_host_mem_mb is not None and not max_host_mem_mb > 0:
        raise bad("--max-host-mem-mb", "> 0", max_host_mem_mb, "Give a positive cap in MB.")
    if lock_sm_clock_mhz is not None and lock_sm_clock_mhz <= 0:
        raise bad("--lock-sm-clock-mhz", "> 0 MHz", lock_sm_clock_mhz, "Give a supported SM clock.")


def check_heartbeat(
    heartbeat_s: float | None = None, grace_s: float | None = None
) -> tuple[float, float]:
    """The heartbeat interval and grace period (seconds) to use; one line for a bad pair.

    Defaults: 60 s and 180 s (a third of a grace when only the grace is given; three beats when
    only the interval is). Optuna counts whole seconds: both are at least 1 and the grace
    exceeds the interval, else a worker alive but between beats would look dead.
    """
    if heartbeat_s is None:
        heartbeat_s = HEARTBEAT_S if grace_s is None else max(1.0, grace_s / 3)
    if grace_s is None:
        grace_s = GRACE_S if heartbeat_s == HEARTBEAT_S else 3 * heartbeat_s
    for name, v in (("--heartbeat-s", heartbeat_s), ("--grace-s", grace_s)):
        if not (math.isfinite(v) and v >= 1):
            raise ConfigError(
                f"invalid {name}: expected whole seconds >= 1 (Optuna's heartbeat unit), "
                f"got {v!r}. Use e.g. --heartbeat-s 60 --grace-s 180."
            )
    if grace_s <= heartbeat_s:
        raise ConfigError(
            f"invalid --grace-s: expected more than --heartbeat-s ({heartbeat_s:g} s), got "
            f"{grace_s:g} s. A grace of 3 beats (--grace-s {3 * heartbeat_s:g}) is typical."
        )
    return float(heartbeat_s), float(grace_s)


@contextmanager
def _new_dir_removed_on_failure(out_dir: Path) -> Iterator[None]:
    """Create ``out_dir`` (and parents); a failure before the block ends removes what it made."""
    missing = []
    p = out_dir
    while not p.exists():
        missing.append(p)
        p = p.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        # unique per worker: concurrent workers on one directory must not race on the probe
        probe = out_dir / f".write-probe.{os.getpid()}.{threading.get_ident()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise CampaignError(
            f"campaign directory {str(out_dir)!r} is not writable: expected a directory this "
            f"user can create files in, got {type(e).__name__}: {e}. Choose another -o."
        ) from None
    try:
        yield
    except BaseException:
        import shutil

        if missing:  # made by this call: nothing of another run is inside
            shutil.rmtree(missing[-1], ignore_errors=True)
        raise


# -- trials ----------------------------------------------------------------------------------
def _trial_config(t: Any, configs: Mapping[str, Config]) -> Config:
    """A trial's config: by key among this call's configs (the source is checked to match)."""
    key = t.user_attrs.get("key")
    if key in configs:
        return configs[key]
    # a key outside this call's configs: the params enqueue_trial fixed
    params = t.system_attrs.get("fixed_params") or t.params
    try:
        return Config(**{k: params[k] for k in CONFIG_COLUMNS})
    except (KeyError, TypeError) as e:
        raise CampaignError(
            f"campaign trial {t.number} has no config: expected params {list(CONFIG_COLUMNS)} "
            f"or a key among the configs given, got key {key!r}. Use a new campaign directory."
        ) from e


def _crashes(trials: Sequence[Any]) -> dict[str, int]:
    """Failed trials per key that were not duplicates: each one's worker died measuring it."""
    from optuna.trial import TrialState

    out: dict[str, int] = {}
    for t in trials:
        key = t.user_attrs.get("key")
        if key is not None and t.state == TrialState.FAIL and not t.user_attrs.get("duplicate"):
            out[key] = out.get(key, 0) + 1
    return out


def _recover_stale(
    study: Any, journal: bool, configs: Mapping[str, Config], error_row: Any = None
) -> tuple[int, int]:
    """Complete stale RUNNING trials that hold a row; fail the rest and re-enqueue them.

    A config whose measurement killed its worker ``MAX_CRASHES`` times (a segfault in a
    runtime, the kernel's OOM killer) is not retried again: ``error_row(config, message)``
    makes it an error row, so a campaign always finishes. Returns (completed, re-enqueued).
    """
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    if not journal:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            with_reconnect(optuna.storages.fail_stale_trials, study)
    completed = 0
    now = datetime.now(UTC)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.user_attrs.get("_owner")
        if owner is None and t.datetime_start is not None:
            age = (now - t.datetime_start.astimezone(UTC)).total_seconds()
            if age < 60:
                continue  # a worker between popping and recording its owner
        if _owner_alive(owner, journal):
            continue
        row = t.user_attrs.get("row")
        try:
            if row is not None:
                study.tell(t.number, _trial_value(row))
                completed += 1
            else:
                study.tell(t.number, state=TrialState.FAIL)
        except (UpdateFinishedTrialError, ValueError):  # another worker got there first
            continue
    # Re-enqueue every key that has neither a completed, a waiting nor a running trial.
    trials = study.get_trials(deepcopy=False)
    by_key: dict[str, set] = {}
    failed: dict[str, Any] = {}
    for t in trials:
        key = t.user_attrs.get("key")
        if key is None:
            continue
        by_key.setdefault(key, set()).add(t.state)
        if t.state == TrialState.FAIL:
            failed.setdefault(key, t)
    crashes = _crashes(trials)
    requeued = 0
    live = {TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING}
    for key, t in failed.items():
        if by_key[key] & live:
            continue
        cfg = _trial_config(t, configs)
        if error_row is not None and crashes.get(key, 0) >= MAX_CRASHES:
            message = (
                f"WorkerCrash: the measurement killed its worker {crashes[key]} times "
                "(segfault or the kernel's OOM killer); not retried"
            )
            study.add_trial(
                optuna.trial.create_trial(
                    state=TrialState.COMPLETE,
                    value=math.inf,
                    user_attrs={
                        "key": key,
                        "row": _clean_row({**error_row(cfg, message), **_fields(t)}),
                        "attempt": _attempt(t),
                        **_carried(t),
                    },
                )
            )
            continue
        study.enqueue_trial(
            cfg.as_dict(), user_attrs={"key": key, "attempt": _attempt(t), **_carried(t)}
        )
        requeued += 1
    return completed, requeued


def _queue_remeasures(
    study: Any,
    configs: Mapping[str, Config],
    cv_above: float | None,
    retry_errors: bool,
    max_attempts: int,
) -> int:
    """Enqueue another attempt for keys whose kept row is noisy (cv > cv_above, or timed while
    another process held its core: ``lost_its_core``) or an error."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    pending: set[str] = set()
    attempts: dict[str, int] = {}
    for t in trials:
        key = t.user_attrs.get("key")
        if key is None:
            continue
        attempts[key] = max(attempts.get(key, 0), _attempt(t))
        if t.state in (TrialState.WAITING, TrialState.RUNNING):
            pending.add(key)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    queued = 0
    for key, (t, row) in _best_rows(done).items():
        if key in pending or attempts.get(key, 0) + 1 >= max_attempts:
            continue
        noisy = cv_above is not None and (
            (row.get("status") == "ok" and _cv(row) > cv_above) or lost_its_core(row)
        )
        broken = retry_errors and row.get("status") == "error"
        if noisy or broken:
            study.enqueue_trial(
                _trial_config(t, configs).as_dict(),
                user_attrs={"key": key, "attempt": attempts.get(key, 0) + 1, **_carried(t)},
            )
            queued += 1
    return queued


def _trial_value(row: dict) -> float:
    v = row.get("latency_ms")
    return float(v) if row.get("status") == "ok" and v is not None else math.inf


def _is_duplicate(trials: Sequence[Any], trial: Any) -> bool:
    """An earlier live trial of the same key and attempt, or a completed one of the same or a
    later attempt, exists (two workers enqueued the same config at once)."""
    from optuna.trial import TrialState

    key, attempt = trial.user_attrs.get("key"), _attempt(trial)
    live = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
    for t in trials:
        if t.number == trial.number or t.user_attrs.get("key") != key:
            continue
        if t.state == TrialState.COMPLETE and _attempt(t) >= attempt:
            return True
        if t.state in live and _attempt(t) == attempt and t.number < trial.number:
            return True
    return False


def _ask(study: Any) -> Any:
    with warnings.catch_warnings():  # heartbeats are recorded by _Heartbeat, not optimize()
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        return study.ask()


def _next_trial(study: Any) -> tuple[Any, Any] | None:
    """The oldest waiting trial, now RUNNING and ours (``study.ask``), and its frozen view;
    None when none is left.

    A duplicate (see ``_is_duplicate``) is failed with a ``duplicate`` user attr, never measured.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        trial = _ask(study)
        if trial.user_attrs.get("key") is None:
            # another worker took the last waiting trial meanwhile; ask() made a new, empty one
            study.tell(trial, state=TrialState.FAIL)
            return None
        trials = study.get_trials(deepcopy=False)
        if _is_duplicate(trials, trial):
            try:
                trial.set_user_attr("duplicate", True)
                study.tell(trial, state=TrialState.FAIL)
            except UpdateFinishedTrialError:
                pass  # SQLite: another worker popped it too and finished it first
            continue
        return trial, next(t for t in trials if t.number == trial.number)
    return None


def _wait_for_running(study: Any, heartbeat_s: float, poll_s: float = 1.0) -> bool:
    """Wait up to ``heartbeat_s`` while the study has RUNNING trials; True if some still run.

    A cheap filtered query every ``poll_s``: a worker sees another's trial end within a second
    while the stale check (a full read of the study) runs once a heartbeat.
    """
    from optuna.trial import TrialState

    deadline = time.monotonic() + heartbeat_s
    while True:
        running = with_reconnect(study.get_trials, deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


class _Heartbeat(threading.Thread):
    """Records an RDB storage's heartbeat for one trial until stopped."""

    def __init__(self, storage: Any, trial_id: int, interval_s: float = HEARTBEAT_S) -> None:
        super().__init__(daemon=True)
        self.storage, self.trial_id, self.interval_s = storage, trial_id, interval_s
        self.stop_event = threading.Event()
        self.storage.record_heartbeat(trial_id)

    def run(self) -> None:
        while not self.stop_event.wait(self.interval_s / 2):
            try:
                self.storage.record_heartbeat(self.trial_id)
            except Exception:  # noqa: BLE001 - a missed beat is retried
                pass


def _start_heartbeat(storage: Any, study_id: int, number: int, interval_s: float) -> _Heartbeat:
    """A running heartbeat of trial ``number`` (its first beat recorded)."""
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    beat = _Heartbeat(storage, trial_id, interval_s)
    beat.start()
    return beat


def _attempt(t) -> int:
    return int(t.user_attrs.get("attempt", 0))


def _fields(t) -> dict[str, Any]:
    """The fields a trial was enqueued with, for its row (none for a plain campaign)."""
    return dict(t.user_attrs.get("fields") or {})


def _carried(t) -> dict[str, Any]:
    """The user attrs a re-enqueued trial keeps from ``t`` (its fields, if any)."""
    fields = t.user_attrs.get("fields")
    return {"fields": fields} if fields else {}


def _queue_fields(
    queue: pd.DataFrame,
    by_key: Mapping[str, Config],
    runtime: str,
    precision: str,
    limit: int | None,
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """The configs of ``queue`` in its order, and the fields each carries into its row (the
    columns beyond the config columns). Every config must be one of the campaign's."""
    if limit is not None:
        raise ConfigError(
            f"invalid --limit with a queue of chosen configs: expected one or the other, got "
            f"--limit {limit}. Drop --limit."
        )
    extra = [c for c in queue.columns if c not in CONFIG_COLUMNS]
    clash = [c for c in extra if c in SCHEMA]
    if clash:
        raise ConfigError(
            f"invalid queue fields {clash}: expected names outside the row schema, got columns "
            "that a measurement fills. Rename them."
        )
    if not len(queue):
        return pd.DataFrame(columns=list(CONFIG_COLUMNS)), {}
    plat = queue[list(ARCH_COLUMNS)].assign(precision=precision, runtime=runtime)
    configs = frame_to_configs(plat[list(CONFIG_COLUMNS)].reset_index(drop=True))
    fields: dict[str, dict[str, Any]] = {}
    for cfg, values in zip(configs, queue[extra].to_dict("records"), strict=True):
        if cfg.key not in by_key:
            raise ConfigError(
                f"queued config {cfg.key!r} is not among the campaign's configs: expected "
                "configs of its source (space or table), got another. Choose among them."
            )
        fields.setdefault(cfg.key, _clean_row(values))
    keep = ~plat.duplicated(list(ARCH_COLUMNS)).to_numpy()
    return plat[list(CONFIG_COLUMNS)][keep].reset_index(drop=True), fields


def _best_rows(trials) -> dict[str, tuple[Any, dict]]:
    """The row kept per key among completed trials holding one.

    A key has several rows only when it was re-measured (``--remeasure-cv-above``,
    ``--retry-errors``): among the ok rows, one that kept its core (``lost_its_core``) beats one
    that lost it, then the lowest ``latency_cv`` wins (the first on ties); without an ok row, the
    first row. Selection is on measurement quality, never on the value.
    """
    best: dict[str, tuple[Any, dict]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        row = t.user_attrs.get("row")
        if row is None:
            continue
        key = row.get("key")
        if key not in best:
            best[key] = (t, row)
            continue
        old = best[key][1]
        if row.get("status") != "ok":
            continue
        if old.get("status") != "ok" or _quality(row) < _quality(old):
            best[key] = (t, row)
    return best


def _quality(row: dict) -> tuple[bool, float]:
    """Sort key of an ok row, best first: kept its core, then the lowest CV."""
    return lost_its_core(row), _cv(row)


def _cv(row: dict) -> float:
    v = row.get("latency_cv")
    return math.inf if v is None else float(v)


def _clean_row(row: dict) -> dict:
    """JSON-safe row: NaN/inf -> None, numpy scalars -> Python."""
    out = {}
    for k, v in row.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


@dataclass
class CampaignSummary:
    out_dir: str
    platform: str
    total: int
    done: int
    measured_now: int
    ok: int
    failed: int
    recovered: int
    requeued: int
    added: int
    remeasures_queued: int
    wall_s: float
    mean_s_per_config: float | None
    #: bytes of a torn last journal record cut before resuming (kept in ``journal.log.torn``)
    torn_bytes_cut: int = 0
    #: ok one-thread rows measured now while other processes took their core (``lost_its_core``)
    descheduled: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _configs_frame(
    configs: pd.DataFrame | Sequence[Config], runtime: str, precision: str
) -> pd.DataFrame:
    frame = (
        configs
        if isinstance(configs, pd.DataFrame)
        else pd.DataFrame([c.as_dict() for c in configs], columns=list(CONFIG_COLUMNS))
    )
    if frame.empty:
        raise ConfigError("no configs to profile: expected at least one config, got none.")
    return _platform_frame(frame, runtime, precision)


def run_campaign(
    configs: pd.DataFrame | Sequence[Config],
    out_dir: str | Path,
    *,
    device: str = "cpu",
    runtime: str = "torch",
    precision: str = "fp32",
    threads: int | None = None,
    protocol: str = "adaptive",
    protocol_overrides: dict | None = None,
    meter: str = "auto",
    storage: str | None = None,
    source: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    max_host_mem_mb: float | None = None,
    max_configs: int | None = None,
    remeasure_cv_above: float | None = None,
    retry_errors: bool = False,
    max_attempts: int = 3,
    lock_sm_clock_mhz: int | None = None,
    wait_quiet_s: float = 0.0,
    fresh_process: bool = False,
    progress: bool = True,
    profiler: Any = None,
    heartbeat_s: float | None = None,
    grace_s: float | None = None,
    queue: pd.DataFrame | None = None,
) -> CampaignSummary:
    """Profile ``configs`` on one platform into the campaign ``out_dir``; resumable.

    ``queue`` (instead of ``limit``): the configs of ``configs`` to enqueue now, in this order;
    its columns beyond the config columns (e.g. ``active_reason``) are carried into each
    config's row and the export (an active campaign records why it chose each config). An
    empty queue enqueues nothing new: the call measures what is waiting.

    ``storage`` is an Optuna storage URL (``carb_nas.storage.open_storage`` forms; default
    ``$CARB_NAS_STORAGE``, else the one the manifest records, else ``OUT_DIR/journal.log``).
    ``source`` names the config source in the manifest (defaults to the configs' fingerprint);
    resuming with another platform, source or storage raises CampaignError. ``limit``/``seed``
    sample configs (``select_configs``); ``max_configs`` stops this call after that many
    measurements (the campaign stays resumable). ``remeasure_cv_above`` (e.g. 0.10) queues
    another attempt for done configs whose kept row has a larger ``latency_cv``;
    ``retry_errors`` does the same for error rows; at most ``max_attempts`` measurements per
    config. Export keeps one row per config (``_best_rows``). ``fresh_process`` measures each
    config in a process of its own (``Profiler``), recorded in the manifest: a resume must keep
    it. ``profiler`` injects a ready ``Profiler`` (tests). ``heartbeat_s`` / ``grace_s`` (RDB
    storages; default 60 / 180 s): how often a running trial's heartbeat is recorded, and how
    long a silent one waits before another worker fails and retries it.

    Every argument, the platform and the meter are checked before anything is created: a call
    that fails leaves no directory behind.
    """
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    # -- everything checked before anything is written ------------------------------------
    check_platform(device, runtime, precision)
    check_campaign_args(
        threads=threads,
        max_attempts=max_attempts,
        remeasure_cv_above=remeasure_cv_above,
        wait_quiet_s=wait_quiet_s,
        max_configs=max_configs,
        limit=limit,
        max_host_mem_mb=max_host_mem_mb,
        lock_sm_clock_mhz=lock_sm_clock_mhz,
    )
    frame = _configs_frame(configs, runtime, precision)
    src_fp = source_fingerprint(frame)
    proto = Protocol.named(protocol, **(protocol_overrides or {}))
    by_key = {cfg.key: cfg for cfg in frame_to_configs(frame)}
    fields: dict[str, dict[str, Any]]
    if queue is None:
        selected, fields = order_configs(select_configs(frame, limit, seed), seed), {}
    else:
        selected, fields = _queue_fields(queue, by_key, runtime, precision, limit)
    if out_dir.exists() and not out_dir.is_dir():
        raise CampaignError(
            f"campaign directory {str(out_dir)!r} is not writable: expected a directory, got "
            "a file. Choose another -o."
        )
    url = campaign_storage_url(out_dir, storage)
    check_storage_url(url)
    heartbeat_s, grace_s = check_heartbeat(heartbeat_s, grace_s)
    journal = is_journal(url)
    platform = platform_string(device, runtime, precision)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "platform": platform,
        "device": device,
        "threads": threads,
        "protocol": proto.name,
        "protocol_params": proto.params(),
        "meter": meter,
        "source": source or f"configs:{src_fp}",
        "source_fingerprint": src_fp,
        "storage": _recorded_storage(out_dir, url),
    }
    if lock_sm_clock_mhz is not None:  # key absent from a manifest = clocks as found
        manifest["lock_sm_clock_mhz"] = lock_sm_clock_mhz
    if fresh_process:  # key absent from a manifest = one process for all
        manifest["fresh_process"] = True
    if wait_quiet_s:  # hygiene only: may change between sittings, not checked on resume
        manifest["wait_quiet_s"] = wait_quiet_s
    old = _read_manifest(out_dir) if out_dir.is_dir() else None
    if old is not None:
        _check_manifest(old, manifest, str(out_dir))
    elif (out_dir / JOURNAL).exists():
        raise CampaignError(
            f"campaign directory {str(out_dir)!r} has a journal but no {MANIFEST}: expected "
            "both (or an empty directory). Restore the manifest or use a new -o."
        )
    # the platform (device, meter) is validated by building the profiler
    prof = profiler or Profiler(
        device,
        runtime,
        precision,
        threads,
        proto,
        meter,
        max_host_mem_mb=max_host_mem_mb,
        lock_sm_clock_mhz=lock_sm_clock_mhz,
        wait_quiet_s=wait_quiet_s,
        idle_s=1.0,
        fresh_process=fresh_process,
    )
    try:
        if prof.platform != manifest["platform"]:
            raise CampaignError(
                f"profiler platform mismatch: expected {manifest['platform']!r}, got "
                f"{prof.platform!r}."
            )
        beats = {"heartbeat_s": heartbeat_s, "grace_s": grace_s}
        st = None if journal else _open(out_dir, url, read_only=False, **beats)  # reachable
        with _new_dir_removed_on_failure(out_dir):
            torn = repair_journal(journal_path(url)) if journal else 0
            if old is None:  # the manifest before the store: a store never exists without one
                created = datetime.now(UTC).isoformat(timespec="seconds")
                atomic_write_json(
                    out_dir / MANIFEST, {**manifest, "created": created}, indent=2, sort_keys=True
                )
            if st is None:
                st = _open(out_dir, url, read_only=False, **beats)
            study = _create(st)
            study_manifest = study.user_attrs.get("manifest")
            if study_manifest is not None:
                _check_manifest(
                    study_manifest, manifest, str(out_dir) if journal else redact_url(url)
                )
            else:
                study.set_user_attr("manifest", manifest)
        recovered, requeued = _recover_stale(study, journal, by_key, prof.error_row)
        existing = {t.user_attrs.get("key") for t in study.get_trials(deepcopy=False)}
        added = 0
        for cfg in frame_to_configs(selected):
            if cfg.key not in existing:
                attrs: dict[str, Any] = {"key": cfg.key}
                if cfg.key in fields:
                    attrs["fields"] = fields[cfg.key]
                study.enqueue_trial(cfg.as_dict(), user_attrs=attrs)
                existing.add(cfg.key)
                added += 1
        remeasures = 0
        if remeasure_cv_above is not None or retry_errors:
            remeasures = _queue_remeasures(
                study, by_key, remeasure_cv_above, retry_errors, max_attempts
            )
        counts = _measure_queue(
            study,
            st,
            prof,
            by_key,
            journal=journal,
            max_configs=max_configs,
            progress=progress,
            desc=platform,
            heartbeat_s=heartbeat_s,
            error_row=prof.error_row,
        )
        measure_s = counts.pop("measure_s")
        return CampaignSummary(
            out_dir=str(out_dir),
            platform=platform,
            total=len(existing - {None}),
            recovered=recovered + counts.pop("recovered"),
            requeued=requeued,
            added=added,
            remeasures_queued=remeasures,
            wall_s=time.perf_counter() - t_start,
            mean_s_per_config=measure_s / counts["measured_now"]
            if counts["measured_now"]
            else None,
            torn_bytes_cut=torn,
            **counts,
        )
    finally:
        if profiler is None:
            prof.close()


def _create(storage: Any) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=STUDY_NAME,
        storage=storage,
        load_if_exists=True,
        direction="minimize",
        sampler=optuna.samplers.RandomSampler(0),
    )


def _measure_queue(
    study: Any,
    storage: Any,
    prof: Any,
    configs: Mapping[str, Config],
    *,
    journal: bool,
    max_configs: int | None,
    progress: bool,
    desc: str,
    heartbeat_s: float = HEARTBEAT_S,
    error_row: Any = None,
) -> dict[str, Any]:
    """Measure waiting trials until none is left (or ``max_configs``); returns the counts.

    On an RDB storage a worker whose queue is empty waits while other workers' trials run,
    checking every ``heartbeat_s`` for stale ones (their worker died) to fail and retry.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    done_keys = set()
    n_waiting = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.COMPLETE:
            done_keys.add(t.user_attrs.get("key"))
        elif t.state == TrialState.WAITING:
            n_waiting += 1
    done_keys.discard(None)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=len(done_keys) + n_waiting,
            initial=len(done_keys),
            unit="cfg",
            file=sys.stderr,
            desc=desc,
            dynamic_ncols=True,
            smoothing=0.05,
        )
    heartbeat = not journal and hasattr(storage, "record_heartbeat")
    study_id = storage.get_study_id_from_name(STUDY_NAME) if heartbeat else None
    measured = ok = failed = recovered = descheduled = 0
    t_measure = time.perf_counter()
    # The store's trials and the imported libraries are long-lived: frozen, so the
    # per-config gc.collect() (hygiene) scans only what each measurement creates.
    # the bar, too, closes when the loop ends or raises (tqdm's own context manager)
    with frozen_heap(), bar if bar is not None else contextlib.nullcontext():
        while max_configs is None or measured < max_configs:
            popped = with_reconnect(_next_trial, study)
            if popped is None:
                # another worker's trial runs: wait until it ends, or its heartbeat goes stale
                if not heartbeat or not _wait_for_running(study, heartbeat_s):
                    break
                more = with_reconnect(_recover_stale, study, journal, configs, error_row)
                recovered += more[0]
                continue
            trial, frozen = popped
            key = trial.user_attrs.get("key")
            row = trial.user_attrs.get("row")  # a retried stale trial that was measured
            if row is not None:
                with_reconnect(study.tell, trial, _trial_value(row), skip_if_finished=True)
                done_keys.add(key)
                recovered += 1
                continue
            beat = None
            if heartbeat:
                # the first beat before the owner: Optuna never finds a trial stale that has
                # no beat, and another host's owned trial is left to beats, so a worker
                # killed between the two would hold its trial RUNNING for ever (an ownerless
                # one is failed after a minute by _recover_stale)
                # every call on the storage per trial rides out a database restart
                beat = with_reconnect(
                    _start_heartbeat, storage, study_id, trial.number, heartbeat_s
                )
            try:
                with_reconnect(trial.set_user_attr, "_owner", _owner())
            except UpdateFinishedTrialError:
                if beat is not None:
                    beat.stop_event.set()
                continue  # SQLite: another worker popped this trial too and finished it first
            try:
                row = _clean_row({**prof.profile(_trial_config(frozen, configs)), **_fields(trial)})
            finally:
                if beat is not None:
                    beat.stop_event.set()
            try:
                with_reconnect(trial.set_user_attr, "row", row)
                with_reconnect(study.tell, trial, _trial_value(row), skip_if_finished=True)
            except UpdateFinishedTrialError:
                # SQLite has no row locks: two workers can pop the same trial. The other
                # one finished it first; its row is kept (export keeps one row per config).
                continue
            done_keys.add(key)
            measured += 1
            ok += row["status"] == "ok"
            failed += row["status"] != "ok"
            descheduled += lost_its_core(row)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{row['status']} {key}", refresh=False)
    return {
        "done": len(done_keys),
        "measured_now": measured,
        "ok": ok,
        "failed": failed,
        "descheduled": descheduled,
        "recovered": recovered,
        "measure_s": time.perf_counter() - t_measure,
    }


# -- reading a campaign ----------------------------------------------------------------------
def _rows_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a table: the SCHEMA columns, then any carried fields (``run_campaign(queue=)``)
    in sorted order; a campaign without them exports exactly the SCHEMA columns."""
    extra = sorted({k for row in rows for k in row} - set(SCHEMA))
    frame = pd.DataFrame(rows, columns=[*SCHEMA, *extra])
    for col, (kind, _, _) in SCHEMA.items():
        if kind == "float":
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
        elif kind == "int":
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    return frame


def campaign_rows(
    out_dir: str | Path, storage: str | None = None, statuses: Sequence[str] | None = None
) -> pd.DataFrame:
    """The measured rows of a campaign, one per key (see ``_best_rows``), columns per SCHEMA.

    Read-only: nothing is created or changed, even for a directory or database that does not
    exist (that is a MissingFileError / StorageError).
    """
    from optuna.trial import TrialState

    study = open_campaign_study(out_dir, storage)
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    frame = _rows_frame([row for _, row in _best_rows(trials).values()])
    if statuses is not None:
        frame = frame[frame["status"].isin(list(statuses))].reset_index(drop=True)
    return frame


_ROW_FIELDS = frozenset(("key", "status", "platform", *CONFIG_COLUMNS))


def _rows_in(value: Any) -> Iterator[dict]:
    """Every measured row inside a decoded JSON value, found by the row's own fields."""
    if isinstance(value, dict):
        if _ROW_FIELDS <= value.keys():
            yield value
            return
        for v in value.values():
            yield from _rows_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from _rows_in(v)


def salvage_rows(out_dir: str | Path) -> pd.DataFrame:
    """Rows read line by line from a (possibly corrupted) journal, skipping broken lines.

    Every row that was written is recovered (one per key, the same rule as ``campaign_rows``),
    whether or not the trial's completion made it to the file. Rows are found by their own
    fields (key, status, platform, the config columns) in each JSON line, not by the layout of
    Optuna's journal records, which Optuna may change.
    """
    path = Path(out_dir) / JOURNAL
    if not path.is_file():
        raise MissingFileError(f"no campaign journal: expected {str(path)!r}, got no such file.")
    rows: list[dict] = []
    with open(path, "rb") as f:
        for line in f:
            try:
                rows.extend(_rows_in(json.loads(line)))
            except ValueError:  # JSONDecodeError, UnicodeDecodeError: a broken line
                continue
    best: dict[str, dict] = {}
    for row in rows:  # the same rule as _best_rows, in write order
        key = str(row["key"])
        old = best.get(key)
        if old is None or (
            row.get("status") == "ok" and (old.get("status") != "ok" or _cv(row) < _cv(old))
        ):
            best[key] = row
    return _rows_frame(list(best.values()))


def campaign_status(out_dir: str | Path, storage: str | None = None) -> dict:
    """Counts of a campaign: total configs, done, waiting, running, failed rows, ok rows.

    Read-only, as ``campaign_rows``.
    """
    from optuna.trial import TrialState

    study = open_campaign_study(out_dir, storage)
    trials = study.get_trials(deepcopy=False)  # one snapshot
    counts: dict[str, set] = {}
    for t in trials:
        key = t.user_attrs.get("key")
        if key is not None:
            counts.setdefault(t.state.name.lower(), set()).add(key)
    done = counts.get("complete", set())
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    rows = _rows_frame([row for _, row in _best_rows(complete).values()])
    cv = rows.loc[rows["status"] == "ok", "latency_cv"].dropna()
    return {
        "manifest": study.user_attrs.get("manifest"),
        "total": len(set().union(*counts.values())) if counts else 0,
        "done": len(done),
        "waiting": len(counts.get("waiting", set()) - done),
        "running": len(counts.get("running", set()) - done),
        "ok": int((rows["status"] == "ok").sum()),
        "oom": int((rows["status"] == "oom").sum()),
        "error": int((rows["status"] == "error").sum()),
        "latency_cv_median": float(cv.median()) if len(cv) else None,
        "latency_cv_p90": float(cv.quantile(0.9)) if len(cv) else None,
        "cv_above_0.10": int((cv > 0.10).sum()),
    }
