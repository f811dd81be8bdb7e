"""Resumable profiling campaigns on an Optuna study (local journal file, SQLite or PostgreSQL).

A campaign is a directory holding ``manifest.json`` (platform + config source fingerprint) and,
by default, ``journal.log`` (an Optuna ``JournalFileBackend``). Each config to measure is an
enqueued trial (``study.enqueue_trial`` with the config as params and its key as a user attr).
A worker pops the next waiting trial, records its owner (pid, process start time, boot id),
measures the config, stores the row as the trial's ``row`` user attr and completes the trial.

Crash safety: killed at any moment (``kill -9`` included), the same command continues. On
start a worker looks for RUNNING trials whose owner is dead (same boot, pid gone or reused; or
a journal written before a reboot), and for storages with heartbeats for trials whose heartbeat
is stale (``optuna.storages.fail_stale_trials``). A stale trial that already holds its row is
completed (nothing measured is lost); otherwise it is failed and its config re-enqueued.
Export keeps the first completed row per key, so no row is ever duplicated.

Many workers: pass the same ``--storage`` URL (``postgresql://...``, or ``sqlite:///x.db`` on
one host) to every worker, or run several workers on one local journal (a file lock makes
popping atomic). An RDB storage gets Optuna heartbeats (60 s) so a crashed host's trials are
retried by the others. SQLite has no row locks, so two workers may now and then measure the
same config; the campaign still holds one row per config.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.datasets import SCHEMA
from carb_nas.errors import CampaignError, ConfigError, MissingFileError
from carb_nas.space import CONFIG_COLUMNS, Config, frame_to_configs

__all__ = [
    "run_campaign",
    "campaign_rows",
    "salvage_rows",
    "campaign_status",
    "select_configs",
    "order_configs",
    "open_study",
    "CampaignSummary",
    "MANIFEST",
    "JOURNAL",
    "STUDY_NAME",
]

MANIFEST = "manifest.json"
JOURNAL = "journal.log"
STUDY_NAME = "carb-nas-campaign"
FORMAT = "carb-nas-campaign"
FORMAT_VERSION = 1
ARCH_COLUMNS = ("family", "depth", "width", "resolution", "batch_size")
HEARTBEAT_S = 60
GRACE_S = 180


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
    groups = ["family", "depth", "width", "resolution"]
    g = frame.groupby(groups, sort=True).ngroup().to_numpy()
    rank = np.random.default_rng(seed + 1).permutation(g.max() + 1 if len(g) else 0)
    out = frame.assign(_g=rank[g] if len(g) else g).sort_values(["_g", "batch_size"])
    return out.drop(columns="_g").reset_index(drop=True)


# -- storage -----------------------------------------------------------------------------------
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


def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "start": _process_start(os.getpid()), "boot": _boot_id()}


def _owner_alive(owner: dict | None, journal: bool) -> bool:
    if not owner:
        return False
    if owner.get("boot") != _boot_id():
        # A local journal outlived a reboot: its owner is gone. Another host on a shared
        # RDB: leave it to heartbeats.
        return not journal
    start = _process_start(int(owner.get("pid", -1)))
    return start is not None and (owner.get("start") is None or abs(start - owner["start"]) < 1)


def open_storage(out_dir: Path, storage: str | None):
    import optuna

    if storage is None:
        path = out_dir / JOURNAL
        try:
            from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

            backend = JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path)))
            st = optuna.storages.JournalStorage(backend)
        except (ValueError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise CampaignError(
                f"corrupted campaign store {str(path)!r}: expected an Optuna journal of JSON "
                f"lines, got {type(e).__name__}: {e}. Nothing was changed. Recover the measured "
                f"rows with `carb-nas dataset export {out_dir} -o rows.csv --salvage`, then "
                "start a new campaign directory."
            ) from e
        return st, True
    try:
        if storage.startswith(("sqlite", "postgresql", "mysql")):
            for attempt in range(5):  # workers starting together race to create the schema
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                        kwargs = {}
                        if storage.startswith("sqlite"):  # wait for locks, don't fail
                            kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
                        st = optuna.storages.RDBStorage(
                            storage,
                            heartbeat_interval=HEARTBEAT_S,
                            grace_period=GRACE_S,
                            **kwargs,
                        )
                    break
                except Exception:  # noqa: BLE001 - retried, then reported below
                    if attempt == 4:
                        raise
                    time.sleep(0.5 * (attempt + 1))
        else:
            st = optuna.storages.get_storage(storage)
    except Exception as e:  # noqa: BLE001 - SQLAlchemy raises many kinds
        raise CampaignError(
            f"cannot open campaign storage {storage!r}: expected a reachable Optuna storage URL "
            f"(sqlite:///file.db, postgresql://user@host/db), got {type(e).__name__}: {e}. "
            "Check the URL and that the database is running."
        ) from e
    return st, False


def open_study(out_dir: str | Path, storage: str | None = None, create: bool = False):
    """The campaign's Optuna study (and whether it lives in a local journal)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out_dir = Path(out_dir)
    st, journal = open_storage(out_dir, storage)
    if create:
        study = optuna.create_study(
            study_name=STUDY_NAME, storage=st, load_if_exists=True, direction="minimize"
        )
    else:
        try:
            study = optuna.load_study(study_name=STUDY_NAME, storage=st)
        except KeyError:
            raise CampaignError(
                f"no campaign in {str(out_dir)!r}: expected a study {STUDY_NAME!r} in its store, "
                "got none. Run `carb-nas profile ... --out DIR` first."
            ) from None
    return study, journal


# -- manifest --------------------------------------------------------------------------------
def _read_manifest(out_dir: Path) -> dict | None:
    path = out_dir / MANIFEST
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CampaignError(
            f"corrupted campaign manifest {str(path)!r}: expected JSON, got {e}. Nothing was "
            "changed; restore the file or start a new campaign directory."
        ) from None
    if doc.get("format") != FORMAT or doc.get("version") != FORMAT_VERSION:
        raise CampaignError(
            f"{path}: expected a {FORMAT} manifest version {FORMAT_VERSION}, got format="
            f"{doc.get('format')!r} version={doc.get('version')!r}. Use a new directory."
        )
    return doc


def _check_manifest(old: dict, new: dict, where: str) -> None:
    for field in (
        "platform",
        "threads",
        "protocol",
        "protocol_params",
        "meter",
        "source",
        "lock_sm_clock_mhz",
        "fresh_process",
    ):
        if old.get(field) != new.get(field):
            raise CampaignError(
                f"campaign {where} was started with another {field}: expected "
                f"{old.get(field)!r} (as recorded in its manifest), got {new.get(field)!r}. "
                "Run the same command as before to resume, or use a new --out directory."
            )


def _write_manifest(out_dir: Path, manifest: dict) -> None:
    tmp = out_dir / f".{MANIFEST}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    tmp.replace(out_dir / MANIFEST)


def _prepare_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        # unique per worker: concurrent workers on one directory must not race on the probe
        probe = out_dir / f".write-probe.{os.getpid()}.{threading.get_ident()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise CampaignError(
            f"campaign directory {str(out_dir)!r} is not writable: expected a directory this "
            f"user can create files in, got {type(e).__name__}: {e}. Choose another --out."
        ) from None


# -- trials ----------------------------------------------------------------------------------
def _config_of(trial) -> Config:
    params = trial.system_attrs.get("fixed_params") or trial.params
    return Config(**{k: params[k] for k in CONFIG_COLUMNS})


MAX_CRASHES = 2


def _recover_stale(study, journal: bool, error_row=None) -> tuple[int, int]:
    """Complete stale RUNNING trials that hold a row; fail the rest and re-enqueue them.

    A config whose measurement killed its worker ``MAX_CRASHES`` times (a segfault in a
    runtime, the kernel's OOM killer) is not retried again: ``error_row(config, message)``
    makes it an error row, so a campaign always finishes. Returns (completed, re-enqueued).
    """
    import optuna
    from optuna.trial import TrialState

    storage = study._storage
    if not journal:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
        except Exception:  # noqa: BLE001 - storages without heartbeat support
            pass
    completed = 0
    now = datetime.now(UTC)
    for t in storage.get_all_trials(study._study_id, deepcopy=False, states=(TrialState.RUNNING,)):
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
                storage.set_trial_state_values(
                    t._trial_id, TrialState.COMPLETE, [_trial_value(row)]
                )
                completed += 1
            else:
                storage.set_trial_user_attr(t._trial_id, "crashed", True)
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except Exception:  # noqa: BLE001 - another worker got there first
            continue
    # Re-enqueue every key that has neither a completed, a waiting nor a running trial.
    by_key: dict[str, set] = {}
    failed: dict[str, Any] = {}
    crashes: dict[str, int] = {}
    for t in storage.get_all_trials(study._study_id, deepcopy=False):
        key = t.user_attrs.get("key")
        if key is None:
            continue
        by_key.setdefault(key, set()).add(t.state)
        if t.state == TrialState.FAIL:
            failed.setdefault(key, t)
            crashes[key] = crashes.get(key, 0) + bool(t.user_attrs.get("crashed"))
    requeued = 0
    live = {TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING}
    for key, t in failed.items():
        if by_key[key] & live:
            continue
        cfg = _config_of(t)
        if error_row is not None and crashes.get(key, 0) >= MAX_CRASHES:
            row = _clean_row(
                error_row(
                    cfg,
                    (
                        f"WorkerCrash: the measurement killed its worker {crashes[key]} times "
                        "(segfault or the kernel's OOM killer); not retried"
                    ),
                )
            )
            study.add_trial(
                optuna.trial.create_trial(
                    state=TrialState.COMPLETE,
                    value=math.inf,
                    user_attrs={"key": key, "row": row, "attempt": _attempt(t)},
                    system_attrs={"fixed_params": cfg.as_dict()},
                )
            )
            continue
        study.enqueue_trial(cfg.as_dict(), user_attrs={"key": key})
        requeued += 1
    return completed, requeued


def _attempt(t) -> int:
    return int(t.user_attrs.get("attempt", 0))


def _best_rows(trials) -> dict[str, tuple[Any, dict]]:
    """The row kept per key among completed trials holding one.

    A key has several rows only when it was re-measured (``--remeasure-cv-above``,
    ``--retry-errors``): the ok row with the lowest ``latency_cv`` wins (the first on ties);
    without an ok row, the first row. Selection is on measurement quality, never on the value.
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
        if old.get("status") != "ok" or _cv(row) < _cv(old):
            best[key] = (t, row)
    return best


def _cv(row: dict) -> float:
    v = row.get("latency_cv")
    return math.inf if v is None else float(v)


def _queue_remeasures(study, cv_above: float | None, retry_errors: bool, max_attempts: int) -> int:
    """Enqueue another attempt for keys whose kept row is noisy (cv > cv_above) or an error."""
    from optuna.trial import TrialState

    trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
    pending, attempts = set(), {}
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
        noisy = cv_above is not None and row.get("status") == "ok" and _cv(row) > cv_above
        broken = retry_errors and row.get("status") == "error"
        if noisy or broken:
            study.enqueue_trial(
                _config_of(t).as_dict(),
                user_attrs={"key": key, "attempt": attempts.get(key, 0) + 1},
            )
            queued += 1
    return queued


def _trial_value(row: dict) -> float:
    v = row.get("latency_ms")
    return float(v) if row.get("status") == "ok" and v is not None else math.inf


def _pop_waiting(study) -> Any | None:
    """Atomically move the oldest WAITING trial to RUNNING (same rule as Optuna's ask()).

    A waiting trial whose config already has an earlier live trial of the same attempt, or a
    completed one of the same or a later attempt (two workers enqueueing at once), is a
    duplicate: it is popped and failed, never measured.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = study._storage
    trials = sorted(storage.get_all_trials(study._study_id, deepcopy=False), key=lambda t: t.number)
    first_live: dict[tuple, int] = {}
    done: dict[str, int] = {}
    for t in trials:
        key = t.user_attrs.get("key")
        if t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE):
            first_live.setdefault((key, _attempt(t)), t.number)
        if t.state == TrialState.COMPLETE:
            done[key] = max(done.get(key, -1), _attempt(t))
    for t in trials:
        if t.state != TrialState.WAITING:
            continue
        key, attempt = t.user_attrs.get("key"), _attempt(t)
        duplicate = (
            first_live.get((key, attempt), t.number) < t.number or done.get(key, -1) >= attempt
        )
        try:
            if not storage.set_trial_state_values(t._trial_id, TrialState.RUNNING):
                continue
        except UpdateFinishedTrialError:
            continue
        if duplicate:
            storage.set_trial_user_attr(t._trial_id, "duplicate", True)
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            continue
        return t
    return None


class _Heartbeat(threading.Thread):
    def __init__(self, storage, trial_id: int) -> None:
        super().__init__(daemon=True)
        self.storage, self.trial_id = storage, trial_id
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(HEARTBEAT_S / 2):
            try:
                self.storage.record_heartbeat(self.trial_id)
            except Exception:  # noqa: BLE001 - a missed beat is retried
                pass


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

    def as_dict(self) -> dict:
        return dict(self.__dict__)


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
) -> CampaignSummary:
    """Profile ``configs`` on one platform into the campaign ``out_dir``; resumable.

    ``source`` names the config source in the manifest (defaults to the configs' fingerprint);
    resuming with another platform or source raises CampaignError. ``limit``/``seed`` sample
    configs (``select_configs``); ``max_configs`` stops this call after that many measurements
    (the campaign stays resumable). ``remeasure_cv_above`` (e.g. 0.10) queues another
    attempt for done configs whose kept row has a larger ``latency_cv``; ``retry_errors``
    does the same for error rows; at most ``max_attempts`` measurements per config. Export
    keeps one row per config (``_best_rows``). ``fresh_process`` measures each config in a
    process of its own (``Profiler``), recorded in the manifest: a resume must keep it.
    ``profiler`` injects a ready ``Profiler`` (tests).
    """
    from carb_nas.measure import Profiler, Protocol
    from carb_nas.measure._profiler import platform_string
    from carb_nas.measure._runtimes import check_platform

    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    check_platform(device, runtime, precision)
    frame = (
        configs
        if isinstance(configs, pd.DataFrame)
        else pd.DataFrame([c.as_dict() for c in configs], columns=list(CONFIG_COLUMNS))
    )
    if frame.empty:
        raise ConfigError("no configs to profile: expected at least one config, got none.")
    frame = _platform_frame(frame, runtime, precision)
    src_fp = source_fingerprint(frame)
    proto = Protocol.named(protocol, **(protocol_overrides or {}))
    selected = order_configs(select_configs(frame, limit, seed), seed)
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "platform": platform_string(device, runtime, precision),
        "device": device,
        "threads": threads,
        "protocol": proto.name,
        "protocol_params": proto.params(),
        "meter": meter,
        "source": source or f"configs:{src_fp}",
        "source_fingerprint": src_fp,
        "storage": storage or JOURNAL,
    }
    if lock_sm_clock_mhz is not None:  # absent (= clocks as found) in older manifests
        manifest["lock_sm_clock_mhz"] = lock_sm_clock_mhz
    if fresh_process:  # absent (= one process for all configs) in older manifests
        manifest["fresh_process"] = True
    if wait_quiet_s:  # hygiene only: may change between sittings, not checked on resume
        manifest["wait_quiet_s"] = wait_quiet_s
    _prepare_dir(out_dir)
    old = _read_manifest(out_dir)
    if old is not None:
        _check_manifest(old, manifest, str(out_dir))
    elif (out_dir / JOURNAL).exists():
        raise CampaignError(
            f"campaign directory {str(out_dir)!r} has a journal but no {MANIFEST}: expected "
            "both (or an empty directory). Restore the manifest or use a new --out."
        )
    # Validate the platform (device, meter) before anything is written.
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
    if prof.platform != manifest["platform"]:
        raise CampaignError(
            f"profiler platform mismatch: expected {manifest['platform']!r}, got {prof.platform!r}."
        )
    if old is None:  # the manifest before the store: a store never exists without one
        _write_manifest(
            out_dir, {**manifest, "created": datetime.now(UTC).isoformat(timespec="seconds")}
        )
    study, journal = open_study(out_dir, storage, create=True)
    study_manifest = study.user_attrs.get("manifest")
    if study_manifest is not None:
        _check_manifest(study_manifest, manifest, str(storage or out_dir))
    else:
        study.set_user_attr("manifest", manifest)

    recovered, requeued = _recover_stale(study, journal, prof.error_row)
    existing = {
        t.user_attrs.get("key")
        for t in study._storage.get_all_trials(study._study_id, deepcopy=False)
    }
    added = 0
    for cfg in frame_to_configs(selected):
        if cfg.key not in existing:
            study.enqueue_trial(cfg.as_dict(), user_attrs={"key": cfg.key})
            existing.add(cfg.key)
            added += 1
    total = len(existing - {None})
    if max_attempts < 1:
        raise ConfigError(f"invalid max_attempts: expected >= 1, got {max_attempts}.")
    remeasures = 0
    if remeasure_cv_above is not None or retry_errors:
        remeasures = _queue_remeasures(study, remeasure_cv_above, retry_errors, max_attempts)

    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    done_attempt: dict[str, int] = {}
    n_waiting = 0
    for t in study._storage.get_all_trials(study._study_id, deepcopy=False):
        if t.state == TrialState.COMPLETE:
            key = t.user_attrs.get("key")
            done_attempt[key] = max(done_attempt.get(key, -1), _attempt(t))
        elif t.state == TrialState.WAITING:
            n_waiting += 1
    done_keys = set(done_attempt)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=len(done_keys) + n_waiting,
            initial=len(done_keys),
            unit="cfg",
            file=sys.stderr,
            desc=manifest["platform"],
            dynamic_ncols=True,
            smoothing=0.05,
        )
    storage_obj = study._storage
    heartbeat = not journal and hasattr(storage_obj, "record_heartbeat")
    measured = ok = failed = 0
    t_measure = time.perf_counter()
    # The store's trials and the imported libraries are long-lived: freeze them so the
    # per-config gc.collect() (hygiene) scans only what each measurement creates.
    gc.collect()
    gc.freeze()
    try:
        while max_configs is None or measured < max_configs:
            t = _pop_waiting(study)
            if t is None:
                break
            key = t.user_attrs.get("key")
            storage_obj.set_trial_user_attr(t._trial_id, "_owner", _owner())
            beat = None
            if heartbeat:
                storage_obj.record_heartbeat(t._trial_id)
                beat = _Heartbeat(storage_obj, t._trial_id)
                beat.start()
            try:
                row = _clean_row(prof.profile(_config_of(t)))
            finally:
                if beat is not None:
                    beat.stop_event.set()
            try:
                storage_obj.set_trial_user_attr(t._trial_id, "row", row)
                storage_obj.set_trial_state_values(
                    t._trial_id, TrialState.COMPLETE, [_trial_value(row)]
                )
            except UpdateFinishedTrialError:
                # SQLite has no row locks: two workers can pop the same trial. The other
                # one finished it first; its row is kept (export keeps one row per config).
                continue
            done_keys.add(key)
            done_attempt[key] = max(done_attempt.get(key, -1), _attempt(t))
            measured += 1
            ok += row["status"] == "ok"
            failed += row["status"] != "ok"
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{row['status']} {key}", refresh=False)
    finally:
        gc.unfreeze()
        if bar is not None:
            bar.close()
        if profiler is None:
            prof.close()
    measure_s = time.perf_counter() - t_measure
    return CampaignSummary(
        out_dir=str(out_dir),
        platform=manifest["platform"],
        total=total,
        done=len(done_keys),
        measured_now=measured,
        ok=ok,
        failed=failed,
        recovered=recovered,
        requeued=requeued,
        added=added,
        remeasures_queued=remeasures,
        wall_s=time.perf_counter() - t_start,
        mean_s_per_config=measure_s / measured if measured else None,
    )


# -- reading a campaign ----------------------------------------------------------------------
def _rows_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(SCHEMA))
    for col, (kind, _, _) in SCHEMA.items():
        if kind == "float":
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
        elif kind == "int":
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    return frame


def campaign_rows(
    out_dir: str | Path, storage: str | None = None, statuses: Sequence[str] | None = None
) -> pd.DataFrame:
    """The measured rows of a campaign, one per key (see ``_best_rows``), columns per SCHEMA."""
    from optuna.trial import TrialState

    out_dir = Path(out_dir)
    if storage is None and not (out_dir / JOURNAL).exists():
        raise MissingFileError(
            f"no campaign store: expected {str(out_dir / JOURNAL)!r} (made by `carb-nas profile "
            "--out DIR`), got no such file. Check the directory, or pass --storage URL."
        )
    study, _ = open_study(out_dir, storage)
    trials = study._storage.get_all_trials(
        study._study_id, deepcopy=False, states=(TrialState.COMPLETE,)
    )
    frame = _rows_frame([row for _, row in _best_rows(trials).values()])
    if statuses is not None:
        frame = frame[frame["status"].isin(list(statuses))].reset_index(drop=True)
    return frame


def salvage_rows(out_dir: str | Path) -> pd.DataFrame:
    """Rows read line by line from a (possibly corrupted) journal, skipping broken lines.

    Every ``row`` user attr that was written is recovered (one per key, the same rule as
    ``campaign_rows``), whether or not the trial's completion made it to the file.
    """
    path = Path(out_dir) / JOURNAL
    if not path.exists():
        raise MissingFileError(f"no campaign journal: expected {str(path)!r}, got no such file.")
    rows: list[dict] = []
    with open(path, "rb") as f:
        for line in f:
            try:
                op = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            row = op.get("user_attr", {}).get("row") if isinstance(op, dict) else None
            if isinstance(row, dict):
                rows.append(row)
    best: dict[str, dict] = {}
    for row in rows:  # the same rule as _best_rows, in write order
        old = best.get(row.get("key"))
        if old is None or (
            row.get("status") == "ok" and (old.get("status") != "ok" or _cv(row) < _cv(old))
        ):
            best[row.get("key")] = row
    return _rows_frame(list(best.values()))


def campaign_status(out_dir: str | Path, storage: str | None = None) -> dict:
    """Counts of a campaign: total configs, done, waiting, running, failed rows, ok rows."""

    from optuna.trial import TrialState

    study, _ = open_study(out_dir, storage)
    trials = study._storage.get_all_trials(study._study_id, deepcopy=False)  # one snapshot
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
