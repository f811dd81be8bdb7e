"""Many workers on a real PostgreSQL server: campaigns, crashed workers, search, bad input.

A throwaway cluster (tests/postgres_fixture.py) is started once per session on 127.0.0.1 and
stopped at the end; every test gets a database of its own. Without PostgreSQL binaries, an
unprivileged user for initdb, or the psycopg driver, these tests skip with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from carb_nas.cli import cli
from tests import postgres_fixture

pytestmark = pytest.mark.postgres

LIMIT = "carb_nas.space.max_gflops_per_batch"
CLI = [sys.executable, "-c", "from carb_nas.cli import main; main()"]
TINY = ["--threads", "1", "--time-cap-s", "0.15", "--meter", "none", "--no-progress"]
BEATS = ["--heartbeat-s", "1", "--grace-s", "3"]


@pytest.fixture(scope="session")
def pg_cluster():
    why = postgres_fixture.unavailable()
    if why:
        pytest.skip(f"no PostgreSQL cluster: {why}")
    cluster = postgres_fixture.start_cluster()
    try:
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_cluster):
    """A new, empty database on the session's cluster."""
    return pg_cluster.createdb(f"t_{uuid.uuid4().hex[:10]}")


def _configs_csv(path: Path, depths=(8, 10), batches=(1, 2)) -> Path:
    rows = [
        dict(family="basic", depth=d, width=0.1, resolution=32, batch_size=b)
        for d in depths
        for b in batches
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _env() -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.getcwd()}


def _worker(
    csv: Path, out: Path, url: str, *extra: str, env: dict | None = None
) -> subprocess.Popen:
    cmd = [*CLI, "profile", str(csv), "-o", str(out), "--storage", url, *TINY, *extra]
    return subprocess.Popen(
        cmd,
        env={**_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = 240) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return err


def _export(out: Path, url: str, tmp_path: Path) -> pd.DataFrame:
    csv = tmp_path / f"rows-{uuid.uuid4().hex[:6]}.csv"
    res = subprocess.run(
        [*CLI, "dataset", "export", str(out), "-o", str(csv), "--storage", url],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return pd.read_csv(csv)


def _trials(url: str):
    import optuna

    from carb_nas.measure.campaign import STUDY_NAME

    return optuna.load_study(study_name=STUDY_NAME, storage=url).get_trials(deepcopy=False)


# -- campaigns -------------------------------------------------------------------------------
@pytest.mark.slow  # real workers on a real cluster (~14 s); CI runs them as 'postgres and slow'
def test_three_workers_measure_each_config_once(pg_url, tmp_path):
    csv = _configs_csv(tmp_path / "c.csv", depths=(8, 10, 14), batches=(1, 2))
    procs = [_worker(csv, tmp_path / f"host{i}", pg_url) for i in range(3)]
    for p in procs:
        _finish(p)
    rows = _export(tmp_path / "host0", pg_url, tmp_path)
    assert len(rows) == 6 and rows["key"].is_unique and set(rows["status"]) == {"ok"}
    measured = [t.user_attrs["key"] for t in _trials(pg_url) if "row" in t.user_attrs]
    assert sorted(measured) == sorted(rows["key"])  # row locks: nothing measured twice
    # every host's directory holds only its manifest, which names no password
    for i in range(3):
        manifest = json.loads((tmp_path / f"host{i}" / "manifest.json").read_text())
        assert postgres_fixture.PASSWORD not in manifest["storage"]
        assert sorted(p.name for p in (tmp_path / f"host{i}").iterdir()) == ["manifest.json"]


@pytest.mark.slow  # real workers on a real cluster (~14 s); CI runs them as 'postgres and slow'
def test_a_worker_killed_mid_config_is_retried_by_a_survivor(pg_url, tmp_path):
    from optuna.trial import TrialState

    csv = _configs_csv(tmp_path / "c.csv", depths=(8, 10), batches=(1, 2, 4))
    # another host name: the survivor cannot see the victim's pid die and must wait for the
    # heartbeat grace (Optuna's fail_stale_trials + RetryHeartbeatStaleTrialCallback)
    victim = _worker(csv, tmp_path / "victim", pg_url, *BEATS, env={"CARB_NAS_HOST": "victim"})
    survivor = _worker(csv, tmp_path / "survivor", pg_url, *BEATS)
    killed_key = None
    try:
        deadline = time.monotonic() + 120
        while killed_key is None and time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                trials = _trials(pg_url)
            except Exception:  # noqa: BLE001 - the study is not created yet
                continue
            for t in trials:
                owner = t.user_attrs.get("_owner") or {}
                if t.state == TrialState.RUNNING and owner.get("pid") == victim.pid:
                    killed_key = t.user_attrs["key"]
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    assert killed_key is not None, "the victim never ran a config"
    _finish(survivor)
    rows = _export(tmp_path / "survivor", pg_url, tmp_path)
    assert len(rows) == 6 and rows["key"].is_unique and set(rows["status"]) == {"ok"}
    trials = _trials(pg_url)
    completed = [t.user_attrs["key"] for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(completed) == sorted(rows["key"])  # 0 lost, 0 duplicated
    of_key = [t for t in trials if t.user_attrs.get("key") == killed_key]
    assert {t.state for t in of_key} == {TrialState.FAIL, TrialState.COMPLETE}
    failed = next(t for t in of_key if t.state == TrialState.FAIL)
    retried = next(t for t in of_key if t.state == TrialState.COMPLETE)
    assert retried.system_attrs.get("failed_trial") == failed.number  # the heartbeat's retry
    assert retried.user_attrs["_owner"]["host"] != "victim"
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]


@pytest.mark.slow  # a server restart with two workers mid-campaign: ~20 s
def test_workers_ride_out_a_database_restart(pg_cluster, pg_url, tmp_path):
    csv = _configs_csv(tmp_path / "c.csv", depths=(8, 10, 14, 18), batches=(1, 2, 4))
    procs = [_worker(csv, tmp_path / f"host{i}", pg_url) for i in range(2)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # restart once some, not all, configs are done
        try:
            done = sum("row" in t.user_attrs for t in _trials(pg_url))
        except Exception:  # noqa: BLE001 - the study is not created yet
            done = 0
        if done >= 2:
            break
        time.sleep(0.1)
    pg_cluster.restart()
    errs = [_finish(p) for p in procs]
    assert any("storage connection lost" in e for e in errs), errs
    assert any("storage connection back" in e for e in errs), errs
    rows = _export(tmp_path / "host0", pg_url, tmp_path)
    assert len(rows) == 12 and rows["key"].is_unique and set(rows["status"]) == {"ok"}


def test_another_host_with_another_meter_is_refused(pg_url, tmp_path):
    csv = _configs_csv(tmp_path / "c.csv", depths=(8,), batches=(1,))
    first = ["profile", str(csv), "-o", str(tmp_path / "a"), "--storage", pg_url, *TINY]
    assert CliRunner().invoke(cli, first).exit_code == 0
    other = [a if a != "none" else "auto" for a in TINY]
    out = tmp_path / "b"
    _refused(["profile", str(csv), "-o", str(out), "--storage", pg_url, *other], out, "meter")


# -- bad input -------------------------------------------------------------------------------
def _refused(args: list[str], out: Path, words: str) -> None:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], res.stderr
    assert "Traceback" not in res.output and postgres_fixture.PASSWORD not in res.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "make_url, words",
    [
        (lambda c: "postgresql://carb@127.0.0.1:notaport/db", "unparsable PostgreSQL URL"),
        (lambda c: "postgresql://carb@127.0.0.1:1/db", "Connection refused"),
        (lambda c: c.url(password="wrong"), "password authentication failed"),
        (lambda c: c.url(user="nobody"), "password authentication failed"),
        (lambda c: c.url("no_such_db"), 'database "no_such_db" does not exist'),
        (lambda c: f"postgresql://carb:x@127.0.0.1:{c.port}", "URL without a database"),
    ],
    ids=["unparsable", "refused", "password", "role", "no-database", "no-database-name"],
)
def test_bad_postgres_urls_are_one_line_and_write_nothing(pg_cluster, tmp_path, make_url, words):
    csv = _configs_csv(tmp_path / "c.csv", depths=(8,), batches=(1,))
    url = make_url(pg_cluster)
    out = tmp_path / "camp"
    _refused(["profile", str(csv), "-o", str(out), "--storage", url, *TINY], out, words)
    res = CliRunner().invoke(
        cli,
        ["search", "cpu", "--backend", "optuna", "--storage", url, "--study-name", "s"]
        + ["--trials", "4", "--pop-size", "2", "-o", str(tmp_path / "p.csv")],
    )
    assert res.exit_code == 1 and words in res.stderr and not (tmp_path / "p.csv").exists()


def test_missing_driver_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    csv = _configs_csv(tmp_path / "c.csv", depths=(8,), batches=(1,))
    out = tmp_path / "camp"
    url = "postgresql://carb@127.0.0.1:5432/db"
    _refused(["profile", str(csv), "-o", str(out), "--storage", url, *TINY], out, "psycopg")
    res = CliRunner().invoke(cli, ["profile", str(csv), "-o", str(out), "--storage", url])
    assert "pip install 'carb-nas[postgres]'" in res.stderr


def test_bad_heartbeat_options(tmp_path):
    csv = _configs_csv(tmp_path / "c.csv", depths=(8,), batches=(1,))
    out = tmp_path / "camp"
    base = ["profile", str(csv), "-o", str(out), *TINY]
    _refused([*base, "--heartbeat-s", "0.2"], out, "invalid --heartbeat-s")
    _refused([*base, "--heartbeat-s", "5", "--grace-s", "5"], out, "expected more than")


# -- search ----------------------------------------------------------------------------------
def _search(model: Path, url: str, seed: int, *extra: str) -> subprocess.Popen:
    cmd = [*CLI, "search", "cpu", "--source", str(model), "--backend", "optuna"]
    cmd += ["--storage", url, "--study-name", "S", "--budget", "latency_ms=6"]
    cmd += ["--trials", "16", "--pop-size", "8", "--seed", str(seed), "--json", *extra]
    return subprocess.Popen(
        cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow  # two fresh interpreters loading a cost model: ~12 s
def test_two_search_processes_share_one_study(pg_url, model_dirs, tmp_path):
    import optuna

    src, other = model_dirs
    procs = [_search(src, pg_url, seed) for seed in (0, 1)]
    for p in procs:
        _finish(p)
    study = optuna.load_study(study_name="S", storage=pg_url)
    trials = study.get_trials(deepcopy=False)
    workers = {t.user_attrs["carb_nas.worker"] for t in trials}
    assert len(trials) == 32 and len(workers) == 2
    assert {w.rsplit(":", 1)[1] for w in workers} == {str(p.pid) for p in procs}
    assert all(set(t.constraints) == {"carb_nas.latency_ms", LIMIT} for t in trials)
    # the Pareto set read afterwards is taken over both processes' trials
    from optuna.study import StudyDirection

    sign = [-1 if d == StudyDirection.MAXIMIZE else 1 for d in study.directions]
    feasible = [
        [s * v for s, v in zip(sign, t.values)]
        for t in trials
        if all(c <= 0 for c in t.constraints.values())
    ]

    def dominated(a):
        return any(all(x <= y for x, y in zip(b, a)) and b != a for b in feasible)

    front = {tuple(a) for a in feasible if not dominated(a)}
    best = {tuple(s * v for s, v in zip(sign, t.values)) for t in study.best_trials}
    assert best == front and best
    # another space, or a model of another platform, on the same study: refused clearly
    import carb_nas

    narrow = tmp_path / "narrow.toml"  # the cpu space without its largest batch size
    narrow.write_text(
        (Path(carb_nas.__file__).parent / "search_spaces" / "cpu.toml")
        .read_text()
        .replace(", 192, 256]", ", 192]")
    )
    res = CliRunner().invoke(
        cli,
        ["search", str(narrow), "--source", str(src), "--backend", "optuna", "--storage", pg_url]
        + ["--study-name", "S", "--budget", "latency_ms=6", "--trials", "4", "--pop-size", "2"],
    )
    assert res.exit_code == 1 and "already exists with another space" in res.stderr
    res = CliRunner().invoke(
        cli,
        ["search", "cpu", "--source", str(other), "--backend", "optuna", "--storage", pg_url]
        + ["--study-name", "S", "--budget", "latency_ms=6", "--trials", "4", "--pop-size", "2"],
    )
    assert res.exit_code == 1 and "already exists with another platform" in res.stderr
    assert len(optuna.load_study(study_name="S", storage=pg_url).trials) == 32


# -- optuna-dashboard ------------------------------------------------------------------------
@pytest.mark.slow  # starts a web server: a few seconds
def test_optuna_dashboard_reads_the_studies(pg_cluster, pg_url, model_dirs, tmp_path):
    pytest.importorskip("optuna_dashboard")
    import socket
    import urllib.request

    _finish(_search(model_dirs[0], pg_url, 0))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dash = shutil.which("optuna-dashboard") or str(Path(sys.executable).parent / "optuna-dashboard")
    server = subprocess.Popen(
        # SQLAlchemy's default PostgreSQL driver is psycopg2: name psycopg 3 in the URL
        [
            dash,
            pg_url.replace("postgresql://", "postgresql+psycopg://"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}/api"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/studies", timeout=5) as r:
                    studies = json.load(r)["study_summaries"]
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.3)
        study = next(s for s in studies if s["study_name"] == "S")
        with urllib.request.urlopen(f"{base}/studies/{study['study_id']}", timeout=30) as r:
            detail = json.load(r)
        trial = detail["trials"][0]
        attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
        assert "carb_nas.predicted.latency_ms" in attrs and "carb_nas.worker" in attrs
        # optuna-dashboard 0.21 shows constraints_func's "constraints" list only, not Optuna 5's
        # named constraints (Trial.set_constraint); the carb_nas.constraints attribute shows them
        constraints = json.loads(attrs["carb_nas.constraints"])
        assert {"carb_nas.latency_ms", "carb_nas.space.max_gflops_per_batch"} == set(constraints)
        assert float(constraints["carb_nas.latency_ms"]) == pytest.approx(
            float(attrs["carb_nas.predicted.latency_ms"]) / 6 - 1
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


# -- without a server ------------------------------------------------------------------------
def test_a_lost_connection_is_retried_with_a_bounded_back_off(monkeypatch, capsys):
    import sqlalchemy.exc

    import carb_nas.storage as storage

    sleeps: list[float] = []
    monkeypatch.setattr(storage.time, "sleep", sleeps.append)
    lost = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed"))
    calls = iter([lost, lost, "ok"])

    def flaky():
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    assert storage.with_reconnect(flaky) == "ok"
    assert sleeps == [0.5, 1.0]
    err = capsys.readouterr().err
    assert err.count("storage connection lost") == 2 and "storage connection back" in err
    # other errors are not retried; a connection lost for longer than the budget is raised
    with pytest.raises(ValueError):
        storage.with_reconnect(lambda: (_ for _ in ()).throw(ValueError("bad")))
    monkeypatch.setenv(storage.RETRY_ENV, "3")  # sleeps mocked: only the delays count
    sleeps.clear()

    def always_lost():
        raise lost

    with pytest.raises(sqlalchemy.exc.OperationalError):
        storage.with_reconnect(always_lost)
    assert sleeps == [0.5, 1.0, 2.0]  # the next, 4 s, would pass the 3 s budget


def test_passwords_are_redacted():
    from carb_nas.storage import redact_url

    assert redact_url("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert redact_url("journal:x.log") == "journal:x.log"
