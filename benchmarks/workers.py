"""Campaign throughput with 1 and 2 workers on one PostgreSQL, and the storage cost per config.

The same campaign of N tiny CPU configs (basic ResNets, width 0.1, resolution 32, batch 1-4,
the adaptive protocol's 0.15 s time cap, no energy meter) is profiled by 1, then 2
``carb-nas profile --storage postgresql://...`` processes, each on a new database;
``configs_per_s_K`` is N over the longest worker's wall time (its JSON summary: storage open
to last config, so interpreter start and the torch import are left out). The storage cost per
config is the same campaign with a profiler that measures nothing (an instant row), so all
that is left is what the campaign does in the database per config: enqueue, ask, the owner
attribute, heartbeats, the row and tell.

    .venv/bin/python benchmarks/workers.py [--configs 12] [--url postgresql://...]

Without ``--url`` a throwaway cluster is started (tests/postgres_fixture.py: PostgreSQL 15
binaries, as the ``postgres`` user when run as root). The last line is
``configs_per_s_1=<..> configs_per_s_2=<..> db_overhead_ms_per_config=<..>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from carb_nas.measure.campaign import run_campaign  # noqa: E402
from carb_nas.space import CONFIG_COLUMNS  # noqa: E402


def tiny_configs(n: int) -> pd.DataFrame:
    depths = [8, 10, 12, 14, 16, 18, 20, 26, 34, 50]
    rows = [
        dict(family="basic", depth=d, width=0.1, resolution=32, batch_size=b)
        for d in depths
        for b in (1, 2, 4)
    ]
    return pd.DataFrame(rows[:n])


def new_db(admin_url: str) -> str:
    """A new database on the server of ``admin_url``; its URL."""
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(admin_url)
    name = f"bench_{uuid.uuid4().hex[:8]}"
    params = dict(host=u.host, port=u.port, user=u.username, password=u.password)
    with psycopg.connect(dbname=u.database, autocommit=True, **params) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return u.set(database=name).render_as_string(hide_password=False)


def workers(csv: Path, url: str, k: int, tmp: Path) -> float:
    """Configs per second of ``k`` concurrent profile processes on a new campaign."""
    cmd = [sys.executable, "-c", "from carb_nas.cli import main; main()", "profile", str(csv)]
    opts = ["--storage", url, "--threads", "1", "--time-cap-s", "0.15", "--meter", "none"]
    opts += ["--no-progress", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(
            [*cmd, "-o", str(tmp / f"k{k}-w{i}"), *opts],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(k)
    ]
    summaries = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"worker failed: {err.strip().splitlines()[-1:]}")
        summaries.append(json.loads(out))
    n = max(s["total"] for s in summaries)
    wall = max(s["wall_s"] for s in summaries)
    each = ", ".join(f"{s['measured_now']} in {s['wall_s']:.1f} s" for s in summaries)
    print(f"{k} worker(s): {n} configs, {each}; {n / wall:.2f} configs/s", file=sys.stderr)
    return n / wall


class _InstantProfiler:
    """Measures nothing: a fixed ok row per config, so only the storage's work is timed."""

    platform = "cpu/torch/fp32"

    def profile(self, config) -> dict:
        return {
            **{c: getattr(config, c) for c in CONFIG_COLUMNS},
            "key": config.key,
            "status": "ok",
            "platform": self.platform,
            "latency_ms": 1.0,
            "latency_cv": 0.01,
        }

    def error_row(self, config, message: str) -> dict:
        return {**self.profile(config), "status": "error", "error": message}

    def close(self) -> None:
        pass


def db_overhead_ms(frame: pd.DataFrame, url: str, tmp: Path) -> float:
    t0 = time.perf_counter()
    summary = run_campaign(
        frame,
        tmp / "overhead",
        threads=1,
        meter="none",
        storage=url,
        progress=False,
        profiler=_InstantProfiler(),
    )
    wall = time.perf_counter() - t0
    assert summary.done == len(frame), summary
    return 1000 * wall / len(frame)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=12, help="N tiny configs (at most 30)")
    ap.add_argument("--url", default=None, help="an admin URL (CREATE DATABASE) of a server")
    args = ap.parse_args()
    cluster = None
    if args.url is None:
        from tests.postgres_fixture import start_cluster, unavailable

        why = unavailable()
        if why:
            raise SystemExit(f"no PostgreSQL cluster: {why}; pass --url")
        cluster = start_cluster()
        admin = cluster.url()
    else:
        admin = args.url
    tmp = Path(tempfile.mkdtemp(prefix="carb-nas-workers-"))
    try:
        frame = tiny_configs(args.configs)
        csv = tmp / "configs.csv"
        frame.to_csv(csv, index=False)
        overhead = db_overhead_ms(frame, new_db(admin), tmp)
        print(f"storage work per config: {overhead:.1f} ms", file=sys.stderr)
        rate1 = workers(csv, new_db(admin), 1, tmp)
        rate2 = workers(csv, new_db(admin), 2, tmp)
        print(f"a measured config takes {1000 / rate1:.0f} ms with one worker", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.root, ignore_errors=True)
    print(
        f"configs_per_s_1={rate1:.3f} configs_per_s_2={rate2:.3f} "
        f"db_overhead_ms_per_config={overhead:.1f}"
    )


if __name__ == "__main__":
    main()
