"""One way to open an Optuna storage, shared by every command (profile, dataset, search).

Accepted forms, the same everywhere:

* ``journal:PATH`` or a path ending in ``.log`` / ``.journal``: an Optuna journal file;
* ``sqlite:///file.db``, ``postgresql://user@host/db``, ``mysql://...``: Optuna's RDB storage,
  with heartbeats so a crashed worker's running trial can be failed and retried;
* ``None``: the ``CARB_NAS_STORAGE`` environment variable (as Optuna's CLI reads
  ``OPTUNA_STORAGE``), else the caller's default journal file, else no storage (in memory).

``read_only=True`` never creates anything: a journal file or SQLite database that does not
exist is an error instead of a new empty store.
"""

from __future__ import annotations

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
    return url.startswith("journal:") or (
        "://" not in url and url.endswith((".log", ".journal"))
    )


def journal_path(url: str) -> Path:
    """The file of a journal URL."""
    return Path(url.removeprefix("journal:"))


def _check_form(url: str) -> None:
    if is_journal(url) or url.startswith(_RDB_SCHEMES):
        return
    raise StorageError(
        f"unsupported storage URL: expected journal:PATH (or a .log/.journal file), "
        f"sqlite:///file.db or postgresql://user@host/db, got {url!r}. Fix --storage "
        f"(or ${STORAGE_ENV})."
    )


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
    backend = JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path)))
    return optuna.storages.JournalStorage(backend)


def _open_rdb(
    url: str, read_only: bool, heartbeat_interval_s: float | None, grace_period_s: float | None
) -> Any:
    import optuna

    if read_only and url.startswith("sqlite:///"):
        db = Path(url.removeprefix("sqlite:///"))
        if str(db) not in ("", ":memory:") and not db.is_file():
            raise StorageError(
                f"SQLite database not found: expected an existing file, got {str(db)!r}. "
                "Check the URL (a read-only command creates nothing)."
            )
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):  # wait for a writer's lock instead of failing at once
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    if heartbeat_interval_s is not None:
        kwargs["heartbeat_interval"] = max(1, round(heartbeat_interval_s))
        kwargs["grace_period"] = max(1, round(grace_period_s or 3 * heartbeat_interval_s))
    last: Exception | None = None
    for attempt in range(5):  # workers starting together race to create the schema
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **kwargs)
        except Exception as e:  # noqa: BLE001 - SQLAlchemy raises many kinds; reported below
            last = e
            time.sleep(0.5 * (attempt + 1))
    assert last is not None
    raise last


def open_storage(
    url: str | None = None,
    *,
    default_journal: str | Path | None = None,
    read_only: bool = False,
    heartbeat_interval_s: float | None = None,
    grace_period_s: float | None = None,
) -> Any:
    """An Optuna storage for ``url`` (see the module docstring), or None for in-memory.

    The URL's form is checked before anything is opened or created; a storage that does not open
    raises :class:`StorageError` naming the URL, the cause and the fix.
    """
    url = resolve_storage_url(url, default_journal)
    if url is None:
        return None
    _check_form(url)
    try:
        if is_journal(url):
            return _open_journal(journal_path(url), read_only)
        return _open_rdb(url, read_only, heartbeat_interval_s, grace_period_s)
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
