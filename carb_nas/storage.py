"""One way to open an Optuna storage, shared by every command (profile, dataset, search).

Accepted forms, the same everywhere:

* ``journal:PATH`` or a path ending in ``.log`` / ``.journal``: an Optuna journal file;
* ``sqlite:///file.db``, ``postgresql://user@host/db``, ``mysql://...``: Optuna's RDB storage,
  with heartbeats so a crashed worker's running trial can be failed and retried;
* ``None``: the ``CARB_NAS_STORAGE`` environment variable (as Optuna's CLI reads
  ``OPTUNA_STORAGE``), else the caller's default journal file, else no storage (in memory).

``read_only=True`` never creates anything: a journal file or SQLite database that does not
exist is an error instead of a new empty store, and an RDB's tables are never created.

A writable journal is repaired first (:func:`repair_journal`): a record torn by a killed writer
(no final newline) would otherwise be glued to the next record appended, and the journal would
no longer open.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

from carb_nas.errors import StorageError

__all__ = [
    "STORAGE_ENV",
    "HEARTBEAT_S",
    "GRACE_S",
    "resolve_storage_url",
    "is_journal",
    "journal_path",
    "check_storage_url",
    "repair_journal",
    "open_storage",
]

#: environment default for every ``--storage`` option
STORAGE_ENV = "CARB_NAS_STORAGE"
#: RDB heartbeat interval and the grace after which a silent worker's trial counts as stale
HEARTBEAT_S = 60
GRACE_S = 180

_RDB_SCHEMES = ("sqlite:", "postgresql:", "postgresql+", "postgres:", "mysql:", "mysql+")


def resolve_storage_url(url: str | None, default_journal: str | Path | None = None) -> str | None:
    """The storage URL to use: ``url``, else ``$CARB_NAS_STORAGE``, else ``journal:DEFAULT``."""
    if url is None or url == "":
        url = os.environ.get(STORAGE_ENV) or None
    if url is None and default_journal is not None:
        url = f"journal:{default_journal}"
    return url


def is_journal(url: str) -> bool:
    """True for the journal-file forms (``journal:PATH``, ``*.log``, ``*.journal``)."""
    return url.startswith("journal:") or ("://" not in url and url.endswith((".log", ".journal")))


def journal_path(url: str) -> Path:
    """The file of a journal URL."""
    return Path(url.removeprefix("journal:"))


def check_storage_url(url: str) -> None:
    """Refuse a URL of none of the accepted forms (nothing is opened or created)."""
    if is_journal(url) or url.startswith(_RDB_SCHEMES):
        return
    raise StorageError(
        f"unsupported storage URL: expected journal:PATH (or a .log/.journal file), "
        f"sqlite:///file.db or postgresql://user@host/db, got {url!r}. Fix --storage "
        f"(or ${STORAGE_ENV})."
    )


def _torn_tail(data: bytes) -> int:
    """Where the part of journal ``data`` that no reader applies begins (``len(data)``: none).

    Optuna's reader skips a last line without a newline (a record torn by a killed writer) and a
    last line that is not JSON. Both are cut, so the next record appended starts a line of its own.
    """
    end = data.rfind(b"\n") + 1  # 0: not one complete line
    if end == 0:
        return 0
    start = data.rfind(b"\n", 0, end - 1) + 1
    try:
        json.loads(data[start:end])
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return start
    return end


def repair_journal(path: str | Path) -> int:
    """Cut a torn last record from the journal file ``path``; returns the number of bytes cut.

    Only bytes that Optuna's reader never applies are cut (a last line without a newline, or one
    that is not JSON), so every complete record survives; the cut bytes are appended to
    ``PATH.torn``, never thrown away. The cut happens under the journal's own file lock, so no
    writer appends meanwhile.
    """
    from optuna.storages.journal import JournalFileOpenLock

    p = Path(path)
    if not p.is_file():
        return 0
    data = p.read_bytes()
    if _torn_tail(data) == len(data):  # healthy (the common case): no lock taken
        return 0
    lock = JournalFileOpenLock(str(p))
    lock.acquire()
    try:
        data = p.read_bytes()  # again, under the lock: a writer may have finished its record
        cut = _torn_tail(data)
        if cut == len(data):
            return 0
        with open(p.with_name(p.name + ".torn"), "ab") as side:
            side.write(data[cut:].rstrip(b"\n") + b"\n")
        with open(p, "r+b") as f:
            f.truncate(cut)
            os.fsync(f.fileno())
        return len(data) - cut
    finally:
        lock.release()


def _open_journal(path: Path, read_only: bool) -> Any:
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    if read_only and not path.is_file():
        raise StorageError(
            f"journal file not found: expected an existing Optuna journal, got {str(path)!r}. "
            "Check the path (a read-only command creates nothing)."
        )
    if not path.parent.is_dir():
        raise StorageError(
            f"journal directory does not exist: expected an existing directory for "
            f"{str(path)!r}. Create {str(path.parent)!r} first."
        )
    if not read_only:
        repair_journal(path)
    backend = JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path)))
    try:
        return optuna.storages.JournalStorage(backend)
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise StorageError(
            f"corrupted journal {str(path)!r}: expected an Optuna journal of JSON lines, got "
            f"{type(e).__name__}: {e}. Nothing was changed."
        ) from e


def _open_rdb(
    url: str,
    read_only: bool,
    heartbeat_interval_s: float | None,
    grace_period_s: float | None,
    stale_trial_callback: Any,
) -> Any:
    import optuna

    if url.startswith("sqlite:///"):
        db = Path(url.removeprefix("sqlite:///").split("?")[0])
        on_disk = str(db) not in ("", ":memory:")
        if on_disk and read_only and not db.is_file():
            raise StorageError(
                f"SQLite database not found: expected an existing file, got {str(db)!r}. "
                "Check the URL (a read-only command creates nothing)."
            )
        if on_disk and not db.parent.is_dir():
            raise StorageError(
                f"SQLite database directory does not exist: expected an existing directory "
                f"for {str(db)!r}. Create {str(db.parent)!r} first or fix the URL."
            )
    kwargs: dict[str, Any] = {"skip_table_creation": read_only}
    if url.startswith("sqlite"):  # wait for a writer's lock instead of failing at once
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    if heartbeat_interval_s is not None:
        kwargs["heartbeat_interval"] = max(1, round(heartbeat_interval_s))
        kwargs["grace_period"] = max(1, round(grace_period_s or 3 * heartbeat_interval_s))
        if stale_trial_callback is not None:
            kwargs["heartbeat_stale_trial_callback"] = stale_trial_callback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for attempt in range(4):  # workers starting together race to create the schema
            try:
                return optuna.storages.RDBStorage(url, **kwargs)
            except Exception:  # noqa: BLE001 - SQLAlchemy raises many kinds; the last is reported
                time.sleep(0.5 * (attempt + 1))
        return optuna.storages.RDBStorage(url, **kwargs)


def open_storage(
    url: str | None = None,
    *,
    default_journal: str | Path | None = None,
    read_only: bool = False,
    heartbeat_interval_s: float | None = None,
    grace_period_s: float | None = None,
    stale_trial_callback: Any = None,
) -> Any:
    """An Optuna storage for ``url`` (see the module docstring), or None for in-memory.

    ``heartbeat_interval_s`` / ``grace_period_s`` turn on an RDB storage's heartbeats (ignored by
    journals); ``stale_trial_callback`` (e.g. ``RetryHeartbeatStaleTrialCallback``) is called by
    ``optuna.storages.fail_stale_trials`` for every trial it fails. The URL's form is checked
    before anything is opened or created; a storage that does not open raises
    :class:`StorageError` naming the URL, the cause and the fix.
    """
    url = resolve_storage_url(url, default_journal)
    if url is None:
        return None
    check_storage_url(url)
    try:
        if is_journal(url):
            return _open_journal(journal_path(url), read_only)
        return _open_rdb(url, read_only, heartbeat_interval_s, grace_period_s, stale_trial_callback)
    except StorageError:
        raise
    except Exception as e:  # noqa: BLE001 - optuna/sqlalchemy/drivers raise many kinds
        first = str(e).splitlines()[0] if str(e) else ""
        hint = ""
        if isinstance(e, ModuleNotFoundError) and "psycopg" in str(e):
            hint = " Install the driver: pip install 'carb-nas[postgres]'."
        raise StorageError(
            f"cannot open the Optuna storage {url!r}: expected a reachable storage, got "
            f"{type(e).__name__}: {first}.{hint} Check the URL, the driver and that the "
            "database is running."
        ) from e
