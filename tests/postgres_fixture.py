"""A throwaway PostgreSQL cluster for tests: initdb in a temporary directory, 127.0.0.1 only.

``initdb`` refuses to run as root, so as root the cluster belongs to the unprivileged
``postgres`` user (``runuser``). :func:`unavailable` says why no cluster can be started here
(no binaries, no unprivileged user, no driver), or returns None.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

BIN_DIRS = (
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/17/bin",
)
USER = "carb"
PASSWORD = "secret"


def _bin_dir() -> Path | None:
    env = os.environ.get("CARB_NAS_PG_BIN")
    for d in ([env] if env else []) + list(BIN_DIRS):
        if d and (Path(d) / "initdb").is_file():
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _as_user() -> list[str] | None:
    """The command prefix running a program as an unprivileged user ([] when not root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return None
    runuser = shutil.which("runuser")
    return [runuser, "-u", "postgres", "--"] if runuser else None


def unavailable() -> str | None:
    """Why no cluster can be started here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg not installed (pip install 'carb-nas[postgres]')"
    if _bin_dir() is None:
        return "no PostgreSQL binaries (initdb) found"
    if _as_user() is None:
        return "running as root without a 'postgres' user and runuser for initdb"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    root: Path
    port: int
    bin_dir: Path
    prefix: list[str]

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, db: str = "postgres", password: str = PASSWORD, user: str = USER) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{db}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run(
            [*self.prefix, str(self.bin_dir / args[0]), *args[1:]],
            check=True,
            capture_output=True,
            timeout=timeout,
        )

    def _ctl(self, action: str, *extra: str) -> None:
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.root} -F"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-o",
            opts,
            action,
            *extra,
        )

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def stop(self) -> None:
        self._ctl("stop", "-m", "immediate")

    def createdb(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def start_cluster() -> Cluster:
    """initdb + pg_ctl start; the caller stops it (``Cluster.stop``) and removes ``root``."""
    bin_dir, prefix = _bin_dir(), _as_user()
    assert bin_dir is not None and prefix is not None, unavailable()
    root = Path(tempfile.mkdtemp(prefix="carb-nas-pg-"))
    os.chmod(root, 0o755)
    if prefix:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    os.chmod(pwfile, 0o644)
    cluster = Cluster(root, _free_port(), bin_dir, prefix)
    cluster._run(
        "initdb",
        "-D",
        str(cluster.data),
        "-U",
        USER,
        f"--pwfile={pwfile}",
        "--auth-local=trust",
        "--auth-host=scram-sha-256",
        "--no-sync",
        "-E",
        "UTF8",
    )
    cluster.start()
    return cluster
