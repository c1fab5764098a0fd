"""Two dispatchers on one database and one Prefect server (a rollout overlap, a second
``falcon local``): every task is taken in once, picked once and in the §4 order, dispatched once.

The claims are compare-and-set writes whose rowcount decides: intake moves only a row nobody took
in (reason NULL); a pick moves only a task still Pending/Waiting that is its queue's next by the
database's waiting tasks and rotation. Proven here on SQLite and MariaDB, first write by write
under real contention (threads released together), then end to end with two ticking dispatchers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

import pytest

from falcon.adapters.clock import SystemClock, utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.adapters.db.store import SqlTaskStore
from falcon.bootstrap import build_services
from falcon.domain.lifecycle import Phase
from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask, pick_order
from falcon.domain.status import Reason, Status
from falcon.services.context import Services
from falcon.services.dispatching import DispatcherLoop
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, Driver, db, emulator_counters, submit
from tests.integration.launcher import InProcessLauncher

T = TypeVar("T")
Q = QueueKey(CLUSTER.id, "2x2")


@pytest.fixture
def store(db_url: str) -> SqlTaskStore:
    with session_scope(db_url) as s:
        repo.add_cluster(s, CLUSTER, utc_now())
    return SqlTaskStore(db_url)


def race(calls: int, call: Callable[[int], T]) -> list[T]:
    """Run ``call(i)`` for each i in threads released at the same instant."""
    start = threading.Barrier(calls)

    def contend(i: int) -> T:
        start.wait()
        return call(i)

    with ThreadPoolExecutor(calls) as pool:
        return list(pool.map(contend, range(calls)))


def test_a_new_row_is_taken_in_by_one_dispatcher_only(store: SqlTaskStore, db_url: str) -> None:
    submit(db_url, "t1", "alice", "2x2")
    assert sorted(race(4, lambda _: store.queue_task("t1", Q, utc_now()))) == [False, False, False, True]
    assert store.start_acquiring("t1", Q, "alice", "lease-1", "picked", utc_now()) == 1
    # a dispatcher whose snapshot still showed the row as new must not put it back to Waiting
    assert not store.queue_task("t1", Q, utc_now())
    task = store.task("t1")
    assert task is not None and (task.status, task.reason) == (Status.PENDING, Reason.PROVISIONING)


def test_a_waiting_task_is_claimed_by_one_pick_only(store: SqlTaskStore, db_url: str) -> None:
    submit(db_url, "t1", "alice", "2x2")
    assert store.queue_task("t1", Q, utc_now())
    claims = race(4, lambda i: store.start_acquiring("t1", Q, "alice", f"lease-{i}", "picked", utc_now()))
    assert sorted(claims, key=str) == [1, None, None, None]
    (progress,) = store.progress_in([Phase.ACQUIRING])
    assert (progress.attempt, progress.lease_id) == (1, f"lease-{claims.index(1)}")


def test_a_pick_out_of_rule_order_is_refused(store: SqlTaskStore, db_url: str) -> None:
    """A stale book proposes; the database's waiting tasks and rotation decide (design §4)."""
    for task_id, actor in [("a1", "alice"), ("a2", "alice"), ("b1", "bob")]:
        submit(db_url, task_id, actor, "2x2")
        assert store.queue_task(task_id, Q, utc_now())
    assert store.start_acquiring("a2", Q, "alice", "lease", "picked", utc_now()) is None  # a1 is earlier
    assert store.start_acquiring("a1", Q, "alice", "lease", "picked", utc_now()) == 1
    assert store.start_acquiring("a2", Q, "alice", "lease", "picked", utc_now()) is None  # alice went last
    assert store.start_acquiring("b1", Q, "bob", "lease", "picked", utc_now()) == 1
    waiting = store.progress_in([Phase.WAITING])
    assert [p.task_id for p in waiting] == ["a2"]


class CountingLauncher(InProcessLauncher):
    """The one Prefect server both dispatchers start runs on: a start with the same idempotency
    key (task, attempt) returns the run already started, as ``run_deployment`` does. Notes the
    acquire runs each task got."""

    def __init__(self) -> None:
        super().__init__()
        self.acquire_runs: dict[str, set[str]] = {}

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        run = super().start_acquire(task_id, lease_id, attempt)
        self.acquire_runs.setdefault(task_id, set()).add(run)
        return run


class ClaimNotingStore(SqlTaskStore):
    """One dispatcher's store, noting the picks it won (a tick that fails later loses its report)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.claimed: list[str] = []

    def start_acquiring(
        self, task_id: str, queue: QueueKey, actor: str, lease_id: str, message: str, now: datetime
    ) -> int | None:
        attempt = super().start_acquiring(task_id, queue, actor, lease_id, message, now)
        if attempt is not None:
            self.claimed.append(task_id)
        return attempt


# per queue, its tasks' actors in submission order: alice's second task waits for bob's
QUEUES = {"2x2": ["alice", "alice", "bob"], "2x4": ["carol", "alice"]}


def test_two_dispatchers_ticking_at_once_run_every_task_once_in_rule_order(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    launcher = CountingLauncher()
    stores = [ClaimNotingStore(db_url), ClaimNotingStore(db_url)]
    # each dispatcher its own store, slots and cloud clients, as two processes would have
    drivers = [
        Driver(replace(services, store=stores[0]), launcher),
        Driver(replace(build_services(services.settings), store=stores[1]), launcher),
    ]
    ids = [f"{topology}-{i}" for topology, actors in QUEUES.items() for i in range(len(actors))]
    for topology, actors in QUEUES.items():
        for i, actor in enumerate(actors):
            submit(db_url, f"{topology}-{i}", actor, topology, run_seconds=0.1)
    loops = [
        DispatcherLoop(d.dispatcher.tick, SystemClock(), 0.25, logging.getLogger(__name__)) for d in drivers
    ]
    threads = [threading.Thread(target=loop.run, args=(120,)) for loop in loops]
    for thread in threads:
        thread.start()
    try:
        _wait_until_succeeded(services, ids, 60)
    finally:
        for loop in loops:
            loop.stop.set()
        for thread in threads:
            thread.join()

    assert sorted(stores[0].claimed + stores[1].claimed) == sorted(ids)  # every task claimed, none twice
    assert launcher.acquire_runs == {task_id: {f"acquire-{task_id}-1"} for task_id in ids}
    counters = emulator_counters(emulator, CLUSTER.name)
    assert (counters["jobsCreated"], counters["jobsCreatedMoreThanOnce"]) == (len(ids), [])
    created = [pool["name"] for pool in counters["created"]]  # type: ignore[attr-defined]
    assert len(created) == len(set(created)) <= len(ids)  # never a second pool for one acquisition
    for topology in QUEUES:
        assert _dispatch_order(services, topology) == _rule_order(services, topology)


def _wait_until_succeeded(services: Services, ids: list[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with db(services) as s:
            if all(t.status is Status.SUCCEEDED for t in repo.tasks_by_id(s, ids).values()):
                return
        time.sleep(0.1)
    with db(services) as s:
        states = {t.id: (t.status.value, t.reason, t.message) for t in repo.tasks_by_id(s, ids).values()}
    raise AssertionError(f"not all Succeeded within {seconds} s: {states}")


def _dispatch_order(services: Services, topology: str) -> list[str]:
    """A queue's tasks in the order their Jobs were submitted: its slot admits one at a time."""
    with db(services) as s:
        tasks = [t for t in repo.list_tasks(s, 100) if t.id.startswith(f"{topology}-")]
    return [t.id for t in sorted(tasks, key=lambda t: t.dispatched_at or utc_now())]


def _rule_order(services: Services, topology: str) -> list[str]:
    with db(services) as s:
        tasks = [t for t in repo.list_tasks(s, 100) if t.id.startswith(f"{topology}-")]
    waiting = [WaitingTask(t.id, t.actor, t.name, t.created_at) for t in tasks]
    return [t.task_id for t in pick_order(waiting, None)]
