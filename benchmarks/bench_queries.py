"""Database load of Falcon, counted as SQL statements (SELECTs, all) and transactions.

(1) One task's runs: the ``task_lifecycle`` run that acquires it (load task, provision pool,
    wait ready, submit Job, wait pods running, mark running) and its ``task_release`` run. A real
    Dispatcher (tests/integration/harness.py Driver, services from falcon.bootstrap.build_services)
    starts both through tests.integration.launcher.InProcessLauncher as threads named
    acquire-<task>-<attempt> and release-<task>-<attempt>; only statements issued on those
    threads are counted for them.
(2) One dispatcher tick with N tasks in phase running over 4 clusters, reconciliation every tick
    and no new rows. The rows are inserted directly (job status Running, progress phase running);
    each has a suspended Job of its name in the emulator, so follow_running finds every Job alive
    and records no outcome (checked: the tick must report nothing ended). ``--idle-queues K``
    adds one idle pool, kept moments ago, in each of K queues (the 4 clusters times 5 topologies):
    the reaper reads what each of those queues was observed doing, and deletes none (checked).

SQLite file database, in-process emulator, temporary Prefect server (prefect_test_harness).
Counting: SQLAlchemy events on the Engine class: before_cursor_execute (classified by the first
SQL keyword), begin (= transactions), commit.

Run:  .venv/bin/python benchmarks/bench_queries.py [--sizes 0,10,100,1000]
      [--repeat 3] [--idle-queues 0] [--skip-lifecycle]   (from the repository root; about 25 s)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from prefect.context import TaskRunContext  # noqa: E402
from tests.integration.harness import CLUSTER, EMULATOR, Driver, submit  # noqa: E402

from falcon.adapters.clock import utc_now  # noqa: E402
from falcon.adapters.db import repository as repo  # noqa: E402
from falcon.adapters.db.migrate import upgrade  # noqa: E402
from falcon.adapters.db.orm import JobRow, NodePoolRow, TaskProgressRow  # noqa: E402
from falcon.adapters.db.session import session_scope  # noqa: E402
from falcon.bootstrap import build_services  # noqa: E402
from falcon.domain.lifecycle import Phase  # noqa: E402
from falcon.domain.model import Cluster  # noqa: E402
from falcon.services.context import Services  # noqa: E402
from falcon.settings import get_settings  # noqa: E402
from falcon_emulator.config import EmulatorConfig  # noqa: E402
from falcon_emulator.server import EmulatorServer  # noqa: E402

# --- counting -----------------------------------------------------------------------------------

# (thread name, kind, Prefect task run); kind: SELECT/INSERT/UPDATE/... or BEGIN/COMMIT
EVENTS: list[tuple[str, str, str]] = []


def _record(kind: str) -> None:
    context = TaskRunContext.get()
    step = context.task_run.name.rsplit("-", 1)[0] if context else "(flow)"
    EVENTS.append((threading.current_thread().name, kind, step))


def _statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
    _record(statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "?")


sa.event.listen(sa.engine.Engine, "before_cursor_execute", _statement)
sa.event.listen(sa.engine.Engine, "begin", lambda conn: _record("BEGIN"))
sa.event.listen(sa.engine.Engine, "commit", lambda conn: _record("COMMIT"))


@contextmanager
def counted(thread_prefix: str | None = None) -> Iterator[Counter[str]]:
    """Counter of kinds issued inside the block (on threads whose name starts with the prefix)."""
    counts: Counter[str] = Counter()
    start = len(EVENTS)
    yield counts
    for name, kind, _ in EVENTS[start:]:
        if thread_prefix is None or name.startswith(thread_prefix):
            counts[kind] += 1


def summary(c: Counter[str]) -> str:
    statements = sum(n for k, n in c.items() if k not in ("BEGIN", "COMMIT"))
    rest = ", ".join(f"{k} {n}" for k, n in sorted(c.items()) if k not in ("SELECT", "BEGIN", "COMMIT"))
    return f"SELECT {c['SELECT']:5d}  statements {statements:5d}  transactions {c['BEGIN']:4d}  ({rest})"


# --- set-up -------------------------------------------------------------------------------------


def configure(env: dict[str, str]) -> Any:
    os.environ.update(env)
    get_settings.cache_clear()
    return get_settings()


def fresh_db(tmp: Path, name: str) -> str:
    url = f"sqlite:///{tmp / name}"
    upgrade(url)
    return url


# --- (1) one task's lifecycle and release runs --------------------------------------------------


def lifecycle(tmp: Path) -> None:
    with EmulatorServer(EmulatorConfig.from_dict(EMULATOR), tmp / "emu-lifecycle") as emu:
        url = fresh_db(tmp, "lifecycle.db")
        settings = configure(
            {
                "FALCON_DATABASE_URL": url,
                "FALCON_EMULATOR_URL": emu.url,
                "FALCON_POLL_SECONDS": "0.2",
                "FALCON_RECONCILE_SECONDS": "0.3",
                "FALCON_MESSAGE_LOCALE": "en",
            }
        )
        with session_scope(url) as s:
            repo.add_cluster(s, CLUSTER, utc_now())
        submit(url, "t1", "alice", "2x2", run_seconds=1.0)
        driver = Driver(build_services(settings))
        start = len(EVENTS)
        t0 = time.monotonic()
        driver.run_until_done(["t1"], seconds=120)
        driver.close(30)  # launches waited for, flow threads joined
        print(f"task t1 history: {driver.history['t1']}  ({time.monotonic() - t0:.1f} s)")
        events = EVENTS[start:]
        print("events (statements, begin, commit) per thread:", dict(Counter(e[0] for e in events)))
        for prefix, label in (("acquire-t1-", "task_lifecycle (acquire)"), ("release-t1-", "task_release")):
            print(f"{label:26s} {summary(Counter(k for n, k, _ in events if n.startswith(prefix)))}")
            for step in dict.fromkeys(s for n, _, s in events if n.startswith(prefix)):
                c = Counter(k for n, k, s in events if n.startswith(prefix) and s == step)
                print(f"  {step:24s} {summary(c)}")


# --- (2) one dispatcher tick with N running tasks ----------------------------------------------

CLUSTER_NAMES = ["edge-a", "edge-b", "edge-c", "edge-d"]


def fleet() -> dict[str, Any]:
    project = dict(EMULATOR["projects"]["proj-a"])  # type: ignore[index]
    project["clusters"] = {n: project["clusters"]["edge-a"] for n in CLUSTER_NAMES}
    return {**EMULATOR, "projects": {"proj-a": project}}


def clusters() -> list[Cluster]:
    """The harness's cluster, once per emulated cluster name."""
    return [replace(CLUSTER, id=f"c-{n[-1]}", name=n) for n in CLUSTER_NAMES]


def suspended_job(name: str, task_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {"managed-by": "falcon"},
            "annotations": {"falcon.dev/task-id": task_id},
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1"}]}
            },
        },
    }


def insert_running(services: Services, url: str, n: int) -> None:
    now = utc_now()
    fleet_clusters = clusters()
    jobs, progress = [], []
    for i in range(n):
        cluster = fleet_clusters[i % len(fleet_clusters)]
        task_id, job_name = f"run-{i:05d}", f"falcon-run-{i:05d}"
        jobs.append(
            JobRow(
                id=task_id,
                actor=f"user-{i % 20}",
                name=f"job-{i}",
                tpu_type="v6e",
                spec={"image": "trainer:1", "command": ["train"], "topology": "2x2"},
                timeout_seconds=86400,
                status="Running",
                cluster_id=cluster.id,
                node_pool_name=f"falcon-pool-{i:05d}",
                k8s_job_name=job_name,
                created_at=now - timedelta(minutes=5),
                updated_at=now,
                dispatched_at=now,
            )
        )
        progress.append(
            TaskProgressRow(
                task_id=task_id,
                phase=Phase.RUNNING.value,
                cluster_id=cluster.id,
                topology="2x2",
                attempt=0,
                updated_at=now,
            )
        )
        services.jobs(cluster).create_job(cluster.namespace, suspended_job(job_name, task_id))
    with session_scope(url) as s:
        s.add_all(jobs)
        s.flush()
        s.add_all(progress)


IDLE_TOPOLOGIES = ["1x1", "2x2", "2x4", "4x4", "4x8"]


def insert_idle_pools(url: str, queues: int) -> None:
    """One pool idle since now in each of ``queues`` queues, clusters first."""
    now = utc_now()
    fleet_clusters = clusters()
    assert queues <= len(fleet_clusters) * len(IDLE_TOPOLOGIES), "more queues than this fleet has"
    with session_scope(url) as s:
        for q in range(queues):
            cluster, topology = (
                fleet_clusters[q % len(fleet_clusters)],
                IDLE_TOPOLOGIES[q // len(fleet_clusters)],
            )
            s.add(
                NodePoolRow(
                    cluster_id=cluster.id,
                    name=f"falcon-idle-{q:02d}",
                    topology=topology,
                    machine_type="ct6e-standard-4t",
                    mode="flex_start",
                    state="idle",
                    idle_since=now,
                    created_at=now - timedelta(minutes=10),
                    ready_at=now - timedelta(minutes=5),
                    updated_at=now,
                )
            )


def ticks(tmp: Path, n: int, repeat: int, idle_queues: int) -> None:
    with EmulatorServer(EmulatorConfig.from_dict(fleet()), tmp / f"emu-{n}") as emu:
        url = fresh_db(tmp, f"ticks-{n}.db")
        settings = configure(
            {
                "FALCON_DATABASE_URL": url,
                "FALCON_EMULATOR_URL": emu.url,
                "FALCON_POLL_SECONDS": "0.2",
                "FALCON_RECONCILE_SECONDS": "0.000001",  # must be > 0: reconcile on every tick
                "FALCON_MESSAGE_LOCALE": "en",
            }
        )
        services = build_services(settings)
        with session_scope(url) as s:
            for cluster in clusters():
                repo.add_cluster(s, cluster, utc_now())
        for cluster in clusters():
            services.jobs(cluster).ensure_namespace(cluster.namespace)
        insert_running(services, url, n)
        insert_idle_pools(url, idle_queues)
        assert len(services.store.running_tasks()) == n  # every row is one follow_running reads
        driver = Driver(services)
        results = []
        for _ in range(1 + repeat):
            time.sleep(0.01)
            with counted() as c:
                report = driver.dispatcher.tick()
            assert not (report.ended or report.picked or report.started or report.reaped), report
            results.append(c)
        label = f"N={n:5d} idle queues={idle_queues:2d}"
        print(f"{label} first tick (book load, orphan scan)  {summary(results[0])}")
        steady = results[1:]
        assert all(r == steady[0] for r in steady), steady
        print(f"{label} steady tick ({repeat} identical)        {summary(steady[0])}")
        driver.close(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0,10,100,1000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle-queues", type=int, default=0, help="queues with an idle pool (up to 20)")
    parser.add_argument("--skip-lifecycle", action="store_true")
    args = parser.parse_args()
    import falcon

    print("falcon from", falcon.__file__)
    from prefect.testing.utilities import prefect_test_harness

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # its telemetry only adds noise

    with tempfile.TemporaryDirectory() as d, prefect_test_harness(server_startup_timeout=120):
        tmp = Path(d)
        if not args.skip_lifecycle:
            lifecycle(tmp)
        for n in (int(x) for x in args.sizes.split(",")):
            ticks(tmp, n, args.repeat, args.idle_queues)


if __name__ == "__main__":
    main()
