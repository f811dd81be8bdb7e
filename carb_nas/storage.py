"""One way to open an Optuna storage, shared by every command (profile, dataset, search).

Accepted forms, the same everywhere:

* ``journal:PATH`` or a path ending in ``.log`` / ``.journal``: an Optuna journal file;
* ``sqlite:///file.db``, ``postgresql://user@host/db``, ``mysql://...``: Optuna's RDB storage,
  with heartbeats so a crashed worker's running trial can be failed and retried;
* ``None``: the ``CARB_NAS_STORAGE`` environment variable (as Optuna's CLI reads
  ``OPTUNA_STORAGE``), else the caller's default journal file, else no storage (in memory).

``read_only=True`` never creates anything: a journal file or SQLite database that does not
exist is an error instead of a new empty store, and an RDB's tables are never created.

PostgreSQL (``postgresql://`` or ``postgres://``, driver psycopg 3: ``pip install
'carb-nas[postgres]'``) is checked before anything is created: the URL must parse, the driver
must import, and the server must accept a connection to the database (:func:`check_postgres`),
each failure one line naming the fix. An opened RDB storage retries a lost connection with a
bounded back-off (:data:`RETRY_ENV`, default 120 s in all), saying so on stderr, so a database
restart does not stop the workers.

A writable journal is repaired first (:func:`repair_journal`): a record torn by a killed writer
(no final newline) would otherwise be glued to the next record appended, and the journal would
no longer open.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
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
    "RETRY_ENV",
    "check_storage_url",
    "check_postgres",
    "redact_url",
    "with_reconnect",
    "repair_journal",
    "open_storage",
]

#: environment default for every ``--storage`` option
STORAGE_ENV = "CARB_NAS_STORAGE"
#: RDB heartbeat interval and the grace after which a silent worker's trial counts as stale
HEARTBEAT_S = 60
GRACE_S = 180
#: seconds (in all) an RDB storage call retries a lost connection before giving up
RETRY_ENV = "CARB_NAS_DB_RETRY_S"
RETRY_S = 120.0
_PG_SCHEMES = ("postgresql:", "postgresql+", "postgres:")

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
    if is_journal(url):
        return
    if _is_postgres(url):
        _pg_url(url)
        _require_psycopg()
        return
    if url.startswith(_RDB_SCHEMES):
        return
    raise StorageError(
        f"unsupported storage URL: expected journal:PATH (or a .log/.journal file), "
        f"sqlite:///file.db or postgresql://user@host/db, got {redact_url(url)!r}. Fix --storage "
        f"(or ${STORAGE_ENV})."
    )


def _is_postgres(url: str) -> bool:
    return url.startswith(_PG_SCHEMES)


def _pg_url(url: str) -> Any:
    """The SQLAlchemy URL of a PostgreSQL ``url``, with psycopg 3 as its driver by default."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception as e:  # noqa: BLE001 - ArgumentError, ValueError (a bad port)
        raise StorageError(
            f"unparsable PostgreSQL URL: expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DB, "
            f"got {_redact_text(url)!r} ({type(e).__name__}: {e}). Fix --storage "
            f"(or ${STORAGE_ENV})."
        ) from None
    if not parsed.database:
        raise StorageError(
            f"PostgreSQL URL without a database: expected postgresql://USER@HOST[:PORT]/DB, "
            f"got {redact_url(url)!r}. Add the database name after the host."
        )
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _redact_text(url: str) -> str:
    """``url`` with any password between ``:`` and ``@`` replaced by ``***``."""
    head, sep, tail = url.partition("://")
    if not sep or "@" not in tail:
        return url
    creds, _, rest = tail.rpartition("@")
    user, colon, _ = creds.partition(":")
    return f"{head}://{user}{':***' if colon else ''}@{rest}"


def redact_url(url: str) -> str:
    """``url`` as shown in messages and manifests: a password becomes ``***``."""
    return _redact_text(url)


def _require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        raise StorageError(
            f"the PostgreSQL driver is not installed: expected the psycopg 3 package, got "
            f"{type(e).__name__}: {e}. Install it: pip install 'carb-nas[postgres]'."
        ) from None


_PG_FIXES = (
    ("password authentication failed", "Check the password in the URL (or ~/.pgpass)."),
    ("role ", "Use an existing role in the URL, or create it (CREATE ROLE ... LOGIN)."),
    ("database ", "Create the database first (createdb NAME) or fix its name in the URL."),
    ("refused", "Start the server, or fix the host and port in the URL."),
    ("timeout", "Check the host, the port and the network."),
)


def check_postgres(url: str, timeout_s: float = 10.0) -> None:
    """Refuse a PostgreSQL ``url`` that does not parse, whose driver is not installed or whose
    server does not accept a connection to its database; one line each, nothing created."""
    parsed = _pg_url(url)
    _require_psycopg()
    import psycopg

    params: dict[str, Any] = {
        "host": parsed.host,
        "port": parsed.port,
        "user": parsed.username,
        "password": parsed.password,
        "dbname": parsed.database,
        "connect_timeout": max(1, round(timeout_s)),
        **{k: v for k, v in parsed.query.items() if isinstance(v, str)},
    }
    try:
        with psycopg.connect(**{k: v for k, v in params.items() if v is not None}):
            pass
    except psycopg.Error as e:
        text = " ".join(str(e).split())
        detail = text.split("failed: ", 1)[-1] if "failed: " in text else text
        fix = next(
            (f for needle, f in _PG_FIXES if needle in detail.lower()),
            "Check the URL and that the server is running.",
        )
        raise StorageError(
            f"cannot connect to PostgreSQL {redact_url(url)!r}: expected a server accepting "
            f"this user on an existing database, got {detail}. {fix}"
        ) from None


def _connection_lost(e: BaseException) -> bool:
    """True when ``e`` (or what caused it) is a lost or refused database connection."""
    import sqlalchemy.exc

    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, sqlalchemy.exc.DBAPIError) and seen.connection_invalidated:
            return True
        if isinstance(seen, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
            return True
        mod = type(seen).__module__
        if mod.startswith("psycopg") and type(seen).__name__ in (
            "OperationalError",
            "InterfaceError",
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_reconnecting = threading.local()


def with_reconnect(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, retried while the database connection is lost.

    Back-off 0.5 s doubling to 8 s, ``$CARB_NAS_DB_RETRY_S`` (default 120) seconds in all, each
    retry said on stderr; then the last error is raised. Nested calls retry only at the outside.
    """
    if getattr(_reconnecting, "active", False):
        return fn(*args, **kwargs)
    budget_s = float(os.environ.get(RETRY_ENV) or RETRY_S)
    _reconnecting.active = True
    try:
        t0 = time.monotonic()
        delay, attempt = 0.5, 0
        while True:
            try:
                out = fn(*args, **kwargs)
                if attempt:
                    print(
                        f"carb-nas: storage connection back after {time.monotonic() - t0:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                return out
            except Exception as e:
                if not _connection_lost(e) or time.monotonic() - t0 + delay > budget_s:
                    raise
                attempt += 1
                first = " ".join(str(e).split())[:160]
                print(
                    f"carb-nas: storage connection lost ({type(e).__name__}: {first}); retry "
                    f"{attempt} in {delay:g} s (gives up after {budget_s:g} s, ${RETRY_ENV})",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(delay)
                delay = min(8.0, delay * 2)
    finally:
        _reconnecting.active = False


@functools.cache
def _reconnecting_rdb_class() -> type:
    """``optuna.storages.RDBStorage`` whose public storage methods retry a lost connection."""
    import optuna

    base = optuna.storages.RDBStorage
    names = [
        n
        for n in (*optuna.storages.BaseStorage.__abstractmethods__, "record_heartbeat", "get_trial")
        if hasattr(base, n)
    ]

    def wrap(name: str) -> Callable[..., Any]:
        method = getattr(base, name)

        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return with_reconnect(method, self, *args, **kwargs)

        return call

    return type("ReconnectingRDBStorage", (base,), {n: wrap(n) for n in sorted(set(names))})


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
    cls: Any = optuna.storages.RDBStorage
    if _is_postgres(url):
        check_postgres(url)
        url = _pg_url(url).render_as_string(hide_password=False)
        cls = _reconnecting_rdb_class()
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
                return cls(url, **kwargs)
            except Exception:  # noqa: BLE001 - SQLAlchemy raises many kinds; the last is reported
                time.sleep(0.5 * (attempt + 1))
        return cls(url, **kwargs)


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
            f"cannot open the Optuna storage {redact_url(url)!r}: expected a reachable storage, "
            f"got {type(e).__name__}: {first}.{hint} Check the URL, the driver and that the "
            "database is running."
        ) from e
