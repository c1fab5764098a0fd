"""One contract for the TaskStore port, run against the SQL store and the unit tests' fake.

The service tests trust ``MemoryTaskStore`` to behave like ``SqlTaskStore``; every test here runs
the same body against both (the SQL one on SQLite and on MariaDB). Rows upstream writes go in
through ``Upstream``, which hides how each implementation seeds them. Where the two disagree,
the test asserts what the SQL store (production) does.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from falcon.adapters.db import repository as repo
from falcon.adapters.db.orm import JobRow, NodePoolRow
from falcon.adapters.db.session import session_scope
from falcon.adapters.db.store import SqlTaskStore
from falcon.domain.lifecycle import (
    DeleteAsk,
    IllegalPhaseMoveError,
    NodePool,
    Outcome,
    Phase,
    PoolState,
    Progress,
    WaitingRow,
)
from falcon.domain.model import (
    Cluster,
    ProvisioningMode,
    QueueKey,
    RunningChanges,
    RunningRead,
    RunningTask,
    Task,
)
from falcon.domain.pool_economics import BusyPools, QueueObservations
from falcon.domain.scheduling import WaitingTask
from falcon.domain.status import IllegalTransitionError, Reason, Status
from falcon.domain.warm_pools import WarmRule
from falcon.services.ports import TaskStore
from tests.unit.fakes import FakeClock, MemoryTaskStore, cluster, spec_for

T0 = datetime(2026, 11, 29, 12, 0, 0, 250000, tzinfo=UTC)
T1, T2 = T0 + timedelta(seconds=30), T0 + timedelta(seconds=60)
Q = QueueKey("c1", "2x2")
Q2 = QueueKey("c1", "4x4")
C1 = cluster("c1")

# `store` is memory or sql; the sql variant uses `db_url` on SQLite and on MariaDB. The memory
# variant runs once: its db_url (a throwaway SQLite file) is set up but never opened.
pytestmark = pytest.mark.parametrize(
    ("store", "db_url"),
    [
        pytest.param("memory", "sqlite", id="memory"),
        pytest.param("sql", "sqlite", id="sql-sqlite"),
        pytest.param("sql", "mysql", id="sql-mysql"),
    ],
    indirect=True,
)


class Upstream:
    """What upstream (and the CLI) write, and what the port does not read back."""

    def __init__(self, store: TaskStore, db_url: str) -> None:
        self.memory = store if isinstance(store, MemoryTaskStore) else None
        self.url = db_url

    def insert(self, task_id: str, actor: str = "alice", at: datetime = T0) -> None:
        row: dict[str, Any] = {"actor": actor, "name": f"job-{task_id}", "tpu_type": "v6e"}
        row.update(spec=spec_for(Q.topology), timeout_seconds=600)
        if self.memory is not None:
            self.memory.insert_task(task_id, created_at=at, **row)
            return
        with session_scope(self.url) as s:
            repo.insert_task(s, task_id=task_id, now=at, **row)

    def abort(self, task_id: str, at: datetime = T1) -> bool:
        if self.memory is not None:
            return self.memory.request_abort(task_id, at)
        with session_scope(self.url) as s:
            return repo.request_abort(s, task_id, at)

    def delete(self, task_id: str) -> None:
        if self.memory is not None:
            del self.memory.rows[task_id]
            return
        with session_scope(self.url) as s:
            s.execute(sa.delete(JobRow).where(JobRow.id == task_id))

    def add_cluster(self, c: Cluster) -> None:
        if self.memory is not None:
            self.memory.add_cluster(c)
            return
        with session_scope(self.url) as s:
            repo.add_cluster(s, c, T0)

    def pool_error(self, cluster_id: str, name: str) -> str | None:
        if self.memory is not None:
            return self.memory.pool_error(cluster_id, name)
        with session_scope(self.url) as s:
            row = s.get(NodePoolRow, (cluster_id, name))
            return row.last_error if row else None


@pytest.fixture
def store(request: pytest.FixtureRequest, db_url: str) -> TaskStore:
    return MemoryTaskStore(FakeClock(T0)) if request.param == "memory" else SqlTaskStore(db_url)


@pytest.fixture
def upstream(store: TaskStore, db_url: str) -> Upstream:
    up = Upstream(store, db_url)
    up.add_cluster(C1)
    return up


def queued(store: TaskStore, up: Upstream, task_id: str, queue: QueueKey = Q, at: datetime = T0) -> None:
    up.insert(task_id, at=at)
    assert store.queue_task(task_id, queue, T0)


def acquiring(store: TaskStore, up: Upstream, task_id: str, actor: str = "alice") -> None:
    queued(store, up, task_id)
    assert store.start_acquiring(task_id, Q, actor, f"lease-{task_id}", "picked", T0) == 1


def running(store: TaskStore, up: Upstream, task_id: str) -> None:
    acquiring(store, up, task_id)
    assert store.mark_running(task_id, "running", T1)


def row(store: TaskStore, task_id: str) -> Task:
    task = store.task(task_id)
    assert task is not None
    return task


def progress(store: TaskStore, task_id: str) -> Progress | None:
    return store.task_view_rows(task_id)[2]


def pool(
    name: str, holder: str | None = "t1", state: PoolState = PoolState.CREATING, queue: QueueKey = Q
) -> NodePool:
    mode = ProvisioningMode.RESERVATION
    return NodePool(queue.cluster_id, name, queue.topology, "ct6e-standard-4t", mode, "res", state, holder)


def idle_pool(store: TaskStore, name: str, at: datetime, queue: QueueKey = Q) -> None:
    store.write_ahead_pool(pool(name, f"h-{name}", PoolState.IN_USE, queue), T0)
    assert store.keep_pool(queue.cluster_id, name, f"h-{name}", at)


# -- reads -----------------------------------------------------------------------------------------


def test_snapshot_lists_new_aborting_acquiring_and_the_book_or_its_counts_only_when_asked(
    store: TaskStore, upstream: Upstream
) -> None:
    upstream.insert("late", at=T0 + timedelta(seconds=9))
    upstream.insert("early", at=T0)
    queued(store, upstream, "waits", at=T0 + timedelta(seconds=1))
    acquiring(store, upstream, "picked", actor="bob")
    upstream.insert("gone")
    upstream.abort("gone")  # never taken in
    queued(store, upstream, "gone-waiting")
    upstream.abort("gone-waiting")
    queued(store, upstream, "orphan")
    upstream.delete("orphan")  # by hand: Falcon's progress row stays

    snap = store.snapshot(10, with_book=False)
    assert [t.id for t in snap.new_tasks] == ["early", "late"]
    assert sorted((t.id, phase) for t, phase in snap.aborting) == [
        ("gone", None),
        ("gone-waiting", Phase.WAITING),
    ]
    assert snap.acquiring_queues == {Q}
    assert snap.clusters == [C1]
    assert snap.queue_lengths == {Q: 4}  # waiting or acquiring progress rows, whatever the status
    assert (snap.idle_pools, snap.reservation_pools) == ([], {})
    assert snap.waiting is None and snap.last_actors is None and snap.waiting_counts is None
    # the waiting rows but the aborted one: the book's, and the orphan it cannot hold
    assert store.snapshot(0, with_book=False, with_counts=True).waiting_counts == {Q: 2}

    booked = store.snapshot(1, with_book=True)
    assert [t.id for t in booked.new_tasks] == ["early"]
    waits = WaitingTask("waits", "alice", "job-waits", T0 + timedelta(seconds=1))
    assert booked.waiting == [WaitingRow(Q, waits, "")]
    assert booked.last_actors == {Q: "bob"}

    quiet = store.snapshot(0, with_book=False)  # no new rows: clusters and pools are not read
    assert (quiet.new_tasks, quiet.clusters, quiet.queue_lengths, quiet.idle_pools) == ([], [], {}, [])


def test_snapshot_counts_the_live_reservation_pools_when_new_rows_came(
    store: TaskStore, upstream: Upstream
) -> None:
    store.write_ahead_pool(pool("creating", "t1"), T0)
    idle_pool(store, "kept", T0)
    store.write_ahead_pool(pool("going", "t2", PoolState.IN_USE), T0)
    assert store.start_deleting_pool(Q.cluster_id, "going", "t2", T0)
    store.write_ahead_pool(pool("gone", "t3", PoolState.IN_USE), T0)
    assert store.start_deleting_pool(Q.cluster_id, "gone", "t3", T0)
    store.pool_deleted(Q.cluster_id, "gone", T1)
    store.write_ahead_pool(
        replace(pool("flex", "t4"), mode=ProvisioningMode.FLEX_START, reservation=None), T0
    )
    store.write_ahead_pool(pool("elsewhere", "t5", queue=QueueKey(Q.cluster_id, "4x4")), T0)
    assert store.snapshot(10, with_book=False).reservation_pools == {}  # no new row: not read
    upstream.insert("new")
    snap = store.snapshot(10, with_book=False)
    # creating, kept and going, not gone nor on flex-start
    assert snap.reservation_pools == {Q: 3, QueueKey(Q.cluster_id, "4x4"): 1}
    assert [p.name for p in snap.idle_pools] == ["kept"]


def test_running_tasks_are_the_phase_running_ones_with_their_rows(
    store: TaskStore, upstream: Upstream
) -> None:
    acquiring(store, upstream, "runs")
    assert store.mark_dispatched("runs", "falcon-runs", "uid-1", "dispatched", T1)
    assert store.mark_running("runs", "running", T1)
    acquiring(store, upstream, "acquires")
    queued(store, upstream, "waits")
    [task] = store.running_tasks()
    assert task == RunningTask.of(row(store, "runs"), Q)  # the columns following a Job needs, as read
    assert (task.id, task.status, task.k8s_job_name, task.dispatched_at) == (
        "runs",
        Status.RUNNING,
        "falcon-runs",
        T1,
    )


def test_the_round_snapshot_reads_the_tasks_running_since_a_moment_the_aborting_ones_and_the_count(
    store: TaskStore, upstream: Upstream
) -> None:
    for task_id, at in (("early", T0), ("late", T2)):
        acquiring(store, upstream, task_id)
        assert store.mark_dispatched(task_id, f"falcon-{task_id}", f"uid-{task_id}", "dispatched", at)
        assert store.mark_running(task_id, "running", at)
    acquiring(store, upstream, "acquires")
    assert upstream.abort("early")
    assert upstream.abort("acquires")  # aborting, but not running

    def changes(since: datetime | None) -> RunningChanges:
        return store.round_snapshot(RunningRead(since), [Phase.ACQUIRING], []).running

    assert [task.id for task in changes(T1).new] == ["late"]
    assert changes(T1).new == [RunningTask.of(row(store, "late"), Q)]
    assert (changes(T1).aborting, changes(T1).count) == ({"early"}, 2)
    assert [task.id for task in changes(T2).new] == ["late"]  # at the moment: included
    every = sorted(changes(None).new, key=lambda task: task.id)
    assert every == sorted(store.running_tasks(), key=lambda task: task.id)
    assert [(task.id, task.status) for task in every] == [
        ("early", Status.ABORTING),
        ("late", Status.RUNNING),
    ]
    upstream.delete("late")  # its progress row stays: it counts nowhere, as running_tasks reads it
    assert (changes(T0).count, len(store.running_tasks())) == (1, 1)


def test_the_round_snapshot_reads_again_those_of_the_tasks_asked_for_that_still_run(
    store: TaskStore, upstream: Upstream
) -> None:
    for task_id in ("runs", "ends", "gone"):
        acquiring(store, upstream, task_id)
        assert store.mark_dispatched(task_id, f"falcon-{task_id}", f"uid-{task_id}", "dispatched", T0)
        assert store.mark_running(task_id, "running", T0)
    acquiring(store, upstream, "acquires")
    ended = Outcome(Status.SUCCEEDED, None, "done")
    assert store.start_releasing("ends", ended, [Phase.RUNNING], "releasing", T1)
    upstream.delete("gone")  # a progress row without its job row runs nowhere
    assert upstream.abort("runs")

    def rechecked(asked: RunningRead) -> list[RunningTask]:
        return store.round_snapshot(asked, [Phase.ACQUIRING], []).running.rechecked

    asked = ("runs", "ends", "gone", "acquires", "unknown")
    assert rechecked(RunningRead(T2, asked)) == [RunningTask.of(row(store, "runs"), Q)]  # as it reads now
    assert rechecked(RunningRead(T2, asked)) == [t for t in store.running_tasks() if t.id == "runs"]
    assert rechecked(RunningRead(T2)) == []
    assert rechecked(RunningRead(None, asked)) == []  # every running task is read as new then


def test_tasks_returns_only_the_known_ids(store: TaskStore, upstream: Upstream) -> None:
    upstream.insert("t1")
    upstream.insert("t2")
    found = store.tasks(["t2", "unknown", "t1", "t2"])
    assert sorted(found) == ["t1", "t2"]
    assert found["t1"] == store.task("t1")
    assert store.tasks([]) == {}
    assert store.task("unknown") is None
    assert store.task_view_rows("unknown") == (None, None, None)


def test_waiting_and_idle_counts_are_per_queue(store: TaskStore, upstream: Upstream) -> None:
    queued(store, upstream, "w1")
    queued(store, upstream, "w2")
    queued(store, upstream, "other", queue=Q2)
    acquiring(store, upstream, "acq")
    queued(store, upstream, "aborted")
    upstream.abort("aborted")
    idle_pool(store, "p1", T1)
    idle_pool(store, "p2", T1)
    idle_pool(store, "p3", T1, queue=Q2)
    store.write_ahead_pool(pool("p4", "acq", PoolState.IN_USE), T0)
    assert (store.waiting_count(Q, 5), store.waiting_count(Q2, 5)) == (2, 1)
    assert (store.waiting_count(Q, 1), store.waiting_count(Q2, 1)) == (1, 1), "counted up to"
    assert (store.idle_count(Q), store.idle_count(Q2)) == (2, 1)


# -- task writes -----------------------------------------------------------------------------------


def test_queue_then_start_acquiring_returns_attempt_1_and_records_the_pick(
    store: TaskStore, upstream: Upstream
) -> None:
    queued(store, upstream, "t1")
    task, c, prog = store.task_view_rows("t1")
    assert task == row(store, "t1") and (task.status, task.reason) == (Status.PENDING, Reason.WAITING)
    assert (task.cluster_id, task.message, c, prog) == ("c1", "", C1, Progress("t1", Phase.WAITING, Q))

    assert store.start_acquiring("t1", Q, "bob", "lease-1", "picked", T1) == 1
    assert (row(store, "t1").reason, row(store, "t1").message) == (Reason.PROVISIONING, "picked")
    assert progress(store, "t1") == Progress("t1", Phase.ACQUIRING, Q, "lease-1", 1)
    assert store.snapshot(0, with_book=True).last_actors == {Q: "bob"}


def test_queue_tasks_takes_in_a_batch_and_leaves_out_rows_taken_already(
    store: TaskStore, upstream: Upstream
) -> None:
    for task_id in ("t1", "t2", "t3"):
        upstream.insert(task_id)
    assert store.queue_task("t2", Q, T0)  # another dispatcher took it in first
    assert store.queue_tasks([("t1", Q), ("t2", Q), ("t3", Q2), ("ghost", Q)], T1) == ["t1", "t3"]
    assert [progress(store, t).queue for t in ("t1", "t2", "t3")] == [Q, Q, Q2]
    assert store.queue_tasks([], T1) == []


def test_a_second_start_acquiring_of_the_same_task_is_refused(store: TaskStore, upstream: Upstream) -> None:
    """Only a waiting task can be picked: a stale pick of a task already acquiring changes nothing."""
    acquiring(store, upstream, "t1")
    before = row(store, "t1")
    assert store.start_acquiring("t1", Q, "carol", "lease-2", "picked again", T1) is None
    assert progress(store, "t1") == Progress("t1", Phase.ACQUIRING, Q, "lease-t1", 1)
    assert row(store, "t1") == before
    assert store.snapshot(0, with_book=True).last_actors == {Q: "alice"}


def test_every_status_write_loses_to_an_upstream_abort(store: TaskStore, upstream: Upstream) -> None:
    acquiring(store, upstream, "t1")
    assert upstream.abort("t1")
    before, before_progress = row(store, "t1"), progress(store, "t1")
    assert (before.status, before.aborting_at) == (Status.ABORTING, T1)

    assert not store.note_pending("t1", "creating pool", T2, Reason.PROVISIONING_FALLBACK, "pool-1")
    assert not store.note_pending("t1", "still creating", T2)
    assert not store.mark_dispatched("t1", "job-1", "uid-1", "dispatched", T2)
    assert not store.mark_running("t1", "running", T2)
    assert store.task("t1") == before
    assert progress(store, "t1") == before_progress


def test_finish_writes_the_terminal_status_and_marks_the_phase_done(
    store: TaskStore, upstream: Upstream
) -> None:
    queued(store, upstream, "aborted")
    upstream.abort("aborted")
    assert store.finish("aborted", Outcome(Status.ABORTED, None, "aborted"), [Status.ABORTING], T2)
    task = row(store, "aborted")
    assert (task.status, task.reason, task.message) == (Status.ABORTED, None, "aborted")
    assert (task.finished_at, task.aborted_at) == (T2, T2)
    assert progress(store, "aborted") == Progress("aborted", Phase.DONE, Q)

    upstream.insert("invalid")  # never taken in: the progress row is created done
    failed = Outcome(Status.FAILED, Reason.INVALID_SPEC, "bad spec")
    assert store.finish("invalid", failed, [Status.PENDING], T2)
    task = row(store, "invalid")
    assert (task.status, task.reason, task.message) == (Status.FAILED, Reason.INVALID_SPEC, "bad spec")
    assert (task.finished_at, task.aborted_at) == (T2, None)
    assert progress(store, "invalid") == Progress("invalid", Phase.DONE, None)
    assert not store.finish("invalid", failed, [Status.PENDING], T2)  # no longer Pending


def test_finish_refuses_an_illegal_transition_and_an_illegal_phase_move(
    store: TaskStore, upstream: Upstream
) -> None:
    queued(store, upstream, "waits")
    with pytest.raises(IllegalTransitionError):
        store.finish("waits", Outcome(Status.SUCCEEDED), [Status.PENDING], T2)  # never ran
    with pytest.raises(IllegalTransitionError):
        store.finish("waits", Outcome(Status.FAILED, None, "why?"), [Status.PENDING], T2)

    acquiring(store, upstream, "acq")
    before, before_progress = store.task("acq"), progress(store, "acq")
    with pytest.raises(IllegalPhaseMoveError):  # acquiring -> done skips releasing
        store.finish("acq", Outcome(Status.FAILED, Reason.NODE_POOL_FAILED, "x"), [Status.PENDING], T2)
    assert store.task("acq") == before  # the status write rolled back with it
    assert progress(store, "acq") == before_progress


def test_start_releasing_records_the_outcome_and_the_inline_release_run(
    store: TaskStore, upstream: Upstream
) -> None:
    failed = Outcome(Status.FAILED, Reason.NODE_POOL_TIMEOUT, "no capacity")
    acquiring(store, upstream, "acq")
    assert store.set_acquire_run("acq", "run-a", T0)
    assert store.start_releasing("acq", failed, [Phase.ACQUIRING], "releasing", T1, released_inline=True)
    assert progress(store, "acq") == Progress("acq", Phase.RELEASING, Q, None, 1, "run-a", "run-a", failed)
    assert row(store, "acq").message == "picked"  # only a Running row gets the message

    running(store, upstream, "runs")
    succeeded = Outcome(Status.SUCCEEDED, None, "done")
    assert store.start_releasing("runs", succeeded, [Phase.RUNNING], "cleaning up", T2)
    assert progress(store, "runs") == Progress("runs", Phase.RELEASING, Q, None, 1, None, None, succeeded)
    assert row(store, "runs").message == "cleaning up"
    assert not store.start_releasing("runs", succeeded, [Phase.RUNNING], "again", T2)


def test_mark_dispatched_keeps_the_first_dispatched_at(store: TaskStore, upstream: Upstream) -> None:
    acquiring(store, upstream, "t1")
    assert store.mark_dispatched("t1", "job-1", "uid-1", "dispatched", T1)
    assert store.mark_dispatched("t1", "job-2", "uid-2", "dispatched again", T2)
    task = row(store, "t1")
    assert (task.dispatched_at, task.k8s_job_name, task.message) == (T1, "job-2", "dispatched again")


# -- node pools ------------------------------------------------------------------------------------


def test_write_ahead_pool_is_idempotent_and_held_pool_finds_creating_and_in_use(store: TaskStore) -> None:
    store.write_ahead_pool(pool("p1"), T0)
    store.write_ahead_pool(pool("p1", "t2", PoolState.IDLE), T1)  # a retry: the first record stays
    assert store.pool("c1", "p1") == pool("p1")
    assert store.held_pool("c1", "t1") == pool("p1")
    store.pool_ready("c1", "p1", T1)
    assert store.held_pool("c1", "t1") == pool("p1", state=PoolState.IN_USE)
    assert store.held_pool("c2", "t1") is None
    assert store.held_pool("c1", "t2") is None
    assert store.keep_pool("c1", "p1", "t1", T2)
    assert store.held_pool("c1", "t1") is None  # idle pools are held by nobody


def test_claim_idle_pool_gives_the_oldest_idle_pool_to_exactly_one_task(store: TaskStore) -> None:
    idle_pool(store, "newer", T2)
    idle_pool(store, "older", T1)
    idle_pool(store, "other-queue", T0, queue=Q2)
    first = store.claim_idle_pool(Q, "t1", T2)
    assert first == pool("older", "t1", PoolState.IN_USE)
    assert store.claim_idle_pool(Q, "t2", T2) == pool("newer", "t2", PoolState.IN_USE)
    assert store.claim_idle_pool(Q, "t3", T2) is None
    assert store.pool("c1", "older") == first  # nobody took it from t1
    assert store.idle_count(Q) == 0 and store.idle_count(Q2) == 1


def test_hand_over_swaps_a_creating_pool_for_the_oldest_idle_one_in_one_write(store: TaskStore) -> None:
    store.write_ahead_pool(pool("mine"), T0)
    assert store.hand_over(Q, "t1", "mine", own_exists=True, now=T1) is None  # nothing idle: unchanged
    assert store.held_pool("c1", "t1") == pool("mine")
    idle_pool(store, "kept", T1)
    taken = store.hand_over(Q, "t1", "mine", own_exists=True, now=T2)
    assert taken == pool("kept", "t1", PoolState.IN_USE)
    assert store.pool("c1", "mine") == pool("mine", None)  # GKE has it: unheld, still being created
    assert store.held_pool("c1", "t1") == taken


def test_hand_over_closes_a_pool_gke_never_got_and_never_gives_a_pool_twice(store: TaskStore) -> None:
    store.write_ahead_pool(pool("mine"), T0)
    store.write_ahead_pool(pool("theirs", "t2"), T0)
    idle_pool(store, "kept", T1)
    assert store.hand_over(Q, "t1", "mine", own_exists=False, now=T2) is not None
    assert store.pool("c1", "mine") == pool("mine", None, PoolState.DELETED)
    assert store.hand_over(Q, "t2", "theirs", own_exists=False, now=T2) is None
    assert store.pool("c1", "theirs") == pool("theirs", "t2")  # t2 keeps its own


def test_hand_over_needs_the_tasks_own_pool_still_creating(store: TaskStore) -> None:
    store.write_ahead_pool(pool("mine"), T0)
    store.pool_ready("c1", "mine", T1)
    idle_pool(store, "kept", T1)
    assert store.hand_over(Q, "t1", "mine", own_exists=True, now=T2) is None
    assert store.hand_over(Q, "t9", "mine", own_exists=True, now=T2) is None  # not t9's
    assert store.idle_count(Q) == 1


def test_takers_without_pool_are_acquiring_tasks_holding_no_ready_pool(
    store: TaskStore, upstream: Upstream
) -> None:
    acquiring(store, upstream, "t1")
    queued(store, upstream, "t2", Q2)
    assert store.start_acquiring("t2", Q2, "alice", "lease-t2", "picked", T0) == 1
    queued(store, upstream, "t3")  # waiting: counted by waiting_count, not here
    assert store.takers_without_pool() == {Q: 1, Q2: 1}
    store.write_ahead_pool(pool("p1", "t1"), T0)
    assert store.takers_without_pool() == {Q: 1, Q2: 1}  # still being created: it would swap
    store.pool_ready("c1", "p1", T1)
    assert store.takers_without_pool() == {Q2: 1}


def test_the_round_snapshot_reads_the_supervised_progress_its_takers_and_the_pools_as_apart(
    store: TaskStore, upstream: Upstream
) -> None:
    acquiring(store, upstream, "t1")
    acquiring(store, upstream, "t2")
    queued(store, upstream, "t3")
    store.write_ahead_pool(pool("p1", "t1"), T0)
    store.pool_ready("c1", "p1", T1)
    store.write_ahead_pool(pool("late", "t2"), T2)
    idle_pool(store, "kept", T1, Q2)  # recorded at T0, idle since T1
    phases, states = [Phase.ACQUIRING, Phase.RELEASING], [PoolState.CREATING, PoolState.IDLE]
    read = store.round_snapshot(RunningRead(T0), phases, states)
    assert sorted(p.task_id for p in read.supervised) == ["t1", "t2"]
    assert sorted(read.supervised, key=lambda p: p.task_id) == sorted(
        store.progress_in(phases), key=lambda p: p.task_id
    )
    assert read.takers_without_pool == store.takers_without_pool() == {Q: 1}  # t1 holds a ready pool
    assert [p.name for p in read.pools] == ["kept", "late"]  # oldest record first
    assert read.pools == store.pools_in(states)  # every field as the read apart decodes it
    assert read.pools[0].idle_since == T1
    with pytest.raises(ValueError, match="ACQUIRING"):
        store.round_snapshot(RunningRead(T0), [Phase.RELEASING], states)


def test_queue_observations_are_intake_gaps_and_creation_times_per_mode(
    store: TaskStore, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n, at in enumerate([T0, T0 + timedelta(seconds=10), T0 + timedelta(seconds=40)]):
        upstream.insert(f"t{n}", at=at)
        assert store.queue_task(f"t{n}", Q, at)
    upstream.insert("other")
    assert store.queue_task("other", Q2, T2)
    store.write_ahead_pool(pool("p1"), T0)
    store.pool_ready("c1", "p1", T0 + timedelta(seconds=7))
    store.write_ahead_pool(pool("warm", None), T1)
    assert store.warm_pool_ready("c1", "warm", T1 + timedelta(seconds=5))
    store.write_ahead_pool(pool("unready", "t2"), T1)
    seen = store.queue_observations([Q], gaps=10, creations=10)[Q]
    assert seen.arrival_gaps == (10.0, 30.0)
    assert dict(seen.creation_seconds) == {ProvisioningMode.RESERVATION: (7.0, 5.0)}
    assert store.queue_observations([Q], gaps=1, creations=1)[Q].arrival_gaps == (30.0,)
    both = store.queue_observations([Q2, Q, Q2], gaps=10, creations=10)  # read together, each once
    assert both == {Q: seen, Q2: QueueObservations()}
    monkeypatch.setattr(repo, "QUEUES_PER_UNION", 1)  # a statement per queue: the same answer
    assert store.queue_observations([Q2, Q], gaps=10, creations=10) == both
    assert store.queue_observations([], gaps=10, creations=10) == {}


def test_fleet_gaps_are_every_queues_gaps_among_the_fleets_newest_arrivals(
    store: TaskStore, upstream: Upstream
) -> None:
    arrivals = [("a0", Q, 0), ("b0", Q2, 5), ("a1", Q, 10), ("b1", Q2, 30), ("a2", Q, 35), ("b2", Q2, 36)]
    for task_id, queue, second in arrivals:
        upstream.insert(task_id, at=T0 + timedelta(seconds=second))
        assert store.queue_task(task_id, queue, T0 + timedelta(seconds=second))
    fleet = (10.0, 25.0, 25.0, 6.0)  # a1-a0, b1-b0, a2-a1, b2-b1: each queue's own, by the later arrival
    assert store.fleet_gaps(10) == fleet
    # The newest four: a1, b1, a2, b2; b0 and a0 are older, so b1 and a1 start no gap.
    assert store.fleet_gaps(4) == (25.0, 6.0)


def test_queue_observations_count_the_deletions_of_ready_pools_from_marked_to_gone(store: TaskStore) -> None:
    def deleted(name: str, marked: datetime, seconds: float, holder: str | None = None) -> None:
        assert store.start_deleting_pool("c1", name, holder, marked)
        store.pool_deleted("c1", name, marked + timedelta(seconds=seconds))

    for name in ("p1", "p2", "spare"):
        store.write_ahead_pool(pool(name, f"h-{name}"), T0)
        store.pool_ready("c1", name, T0 + timedelta(seconds=5))
    deleted("p2", T1, 12, holder="h-p2")
    deleted("p1", T2, 4, holder="h-p1")
    store.pool_deleted("c1", "p2", T2 + timedelta(seconds=99))  # seen gone again: its time stays
    assert store.keep_pool("c1", "spare", "h-spare", T1)
    deleted("spare", T2, 3)  # a kept pool the policy let go
    store.write_ahead_pool(pool("unready", "t9"), T0)
    deleted("unready", T1, 40, holder="t9")  # never ready: what GKE did with it is not a deletion's cost
    store.write_ahead_pool(pool("elsewhere", "t8", queue=Q2), T0)
    store.pool_ready("c1", "elsewhere", T0 + timedelta(seconds=5))
    deleted("elsewhere", T1, 50, holder="t8")
    both = store.queue_observations([Q, Q2], gaps=10, creations=10)
    assert both[Q].deletion_seconds == (12.0, 3.0, 4.0)
    assert both[Q2].deletion_seconds == (50.0,)
    assert store.queue_observations([Q, Q2], gaps=10, creations=2)[Q].deletion_seconds == (3.0, 4.0)


def test_busy_pools_are_the_queues_pools_in_use_by_phase_with_the_past_runs_when_any(
    store: TaskStore, upstream: Upstream
) -> None:
    done = Outcome(Status.SUCCEEDED, None, "done")

    def ran(task_id: str, start: float, end: float | None = None, queue: QueueKey = Q) -> None:
        """A task Running from ``start`` seconds after T0, and to its end at ``end``."""
        upstream.insert(task_id)
        assert store.queue_task(task_id, queue, T0)
        assert store.start_acquiring(task_id, queue, "alice", f"lease-{task_id}", "picked", T0) == 1
        assert store.mark_running(task_id, "running", T0 + timedelta(seconds=start))
        if end is not None:
            at = T0 + timedelta(seconds=end)
            assert store.start_releasing(task_id, done, [Phase.RUNNING], "releasing", at)
            assert store.finish(task_id, done, [Status.RUNNING], at)

    def in_use(name: str, holder: str, queue: QueueKey = Q) -> None:
        store.write_ahead_pool(pool(name, holder, queue=queue), T0)
        store.pool_ready(queue.cluster_id, name, T0)

    ran("d1", 0, 100)
    ran("e1", 5, 505, queue=Q2)
    ran("d2", 10, 70)
    assert store.busy_pools(Q, runs=10, now=T2) == BusyPools(), "nothing busy: no past runs read"
    ran("r1", 30)
    in_use("p-r1", "r1")
    acquiring(store, upstream, "a1")  # its pool ready, its Job not started
    in_use("p-a1", "a1")
    ran("x1", 20)
    in_use("p-x1", "x1")
    assert store.start_releasing("x1", done, [Phase.RUNNING], "releasing", T2)  # its Job ended
    idle_pool(store, "spare", T1)  # idle: not busy
    ran("q2", 0, queue=Q2)
    in_use("p-q2", "q2", queue=Q2)
    busy = store.busy_pools(Q, runs=10, now=T2)
    assert sorted(busy.running_for) == [0.0, 30.0]
    assert busy.ending == 1
    assert busy.past_runs == (100.0, 60.0)  # by when they ran, oldest first
    assert busy.fleet_runs == (100.0, 500.0, 60.0)
    newest = store.busy_pools(Q, runs=2, now=T2)
    assert (newest.past_runs, newest.fleet_runs) == ((100.0, 60.0), (500.0, 60.0))
    assert store.busy_pools(Q2, runs=10, now=T2).running_for == (60.0,)


def test_run_owners_beat_and_the_last_beat_is_kept(store: TaskStore) -> None:
    assert store.last_beat("owner-1") is None
    store.beat("owner-1", T0)
    store.beat("owner-1", T1)
    store.beat("owner-2", T0)
    assert (store.last_beat("owner-1"), store.last_beat("owner-2")) == (T1, T0)


def test_keep_pool_only_from_in_use_with_the_right_holder(store: TaskStore) -> None:
    store.write_ahead_pool(pool("p1"), T0)
    assert not store.keep_pool("c1", "p1", "t1", T1)  # still creating
    store.pool_ready("c1", "p1", T1)
    assert not store.keep_pool("c1", "p1", "t2", T1)
    assert store.keep_pool("c1", "p1", "t1", T2)
    assert store.pool("c1", "p1") == replace(pool("p1", None, PoolState.IDLE), idle_since=T2)
    assert not store.keep_pool("c1", "p1", "t1", T2)


def test_replan_pool_changes_the_mode_of_its_holders_pool_only_before_gke_has_it(store: TaskStore) -> None:
    flex = replace(pool("p1"), mode=ProvisioningMode.FLEX_START, reservation=None)
    store.write_ahead_pool(flex, T0)
    assert not store.replan_pool(pool("p1", "t2"), T1)  # not its pool
    assert store.replan_pool(pool("p1"), T1)
    assert store.pool("c1", "p1") == pool("p1")
    store.pool_ready("c1", "p1", T2)
    assert not store.replan_pool(flex, T2)  # ready: its mode is settled
    assert store.pool("c1", "p1") == pool("p1", state=PoolState.IN_USE)


def test_start_deleting_pool_needs_its_holder_or_an_idle_pool(store: TaskStore) -> None:
    store.write_ahead_pool(pool("creating"), T0)
    store.write_ahead_pool(pool("in-use", state=PoolState.IN_USE), T0)
    idle_pool(store, "idle", T1)
    assert not store.start_deleting_pool("c1", "creating", None, T2)
    assert not store.start_deleting_pool("c1", "creating", "t2", T2)
    assert not store.start_deleting_pool("c1", "idle", "h-idle", T2)  # idle: held by nobody
    for name, holder, idle_since in [("creating", "t1", None), ("in-use", "t1", None), ("idle", None, T1)]:
        assert store.start_deleting_pool("c1", name, holder, T2)
        assert store.pool("c1", name) == replace(pool(name, None, PoolState.DELETING), idle_since=idle_since)
    assert not store.start_deleting_pool("c1", "idle", None, T2)


def test_unmark_pool_makes_only_a_marked_pool_idle_again_and_forgets_its_deletion(
    store: TaskStore, upstream: Upstream
) -> None:
    store.write_ahead_pool(pool("p1"), T0)
    store.pool_ready("c1", "p1", T0)
    assert not store.unmark_pool("c1", "p1", T1, T1)  # in use: not marked
    assert store.start_deleting_pool("c1", "p1", "t1", T1)
    store.pool_delete_failed("c1", "p1", "GKE busy", T1)
    assert store.deletions_marked_since("c1", T0) == 1
    assert store.unmark_pool("c1", "p1", T2, T2)
    assert store.pool("c1", "p1") == replace(pool("p1", None, PoolState.IDLE), idle_since=T2)
    assert upstream.pool_error("c1", "p1") is None
    assert store.deletions_marked_since("c1", T0) == 0
    assert not store.unmark_pool("c1", "p1", T2, T2)  # idle now: unmarked once
    assert store.claim_idle_pool(Q, "t2", T2) is not None
    assert store.start_deleting_pool("c1", "p1", "t2", T2 + timedelta(seconds=5))
    store.pool_deleted("c1", "p1", T2 + timedelta(seconds=12))
    assert store.queue_observations([Q], gaps=10, creations=10)[Q].deletion_seconds == (7.0,), (
        "the deletion taken back is not counted, the one that went through is"
    )
    assert not store.unmark_pool("c1", "p1", T2, T2)  # deleted: gone for good
    assert not store.unmark_pool("c1", "unknown", T2, T2)


def test_an_unanswered_deletion_keeps_a_marked_pool_from_being_unmarked_until_it_can_no_longer_arrive(
    store: TaskStore,
) -> None:
    store.write_ahead_pool(pool("p1"), T0)
    assert store.delete_asked("c1", "p1", T0) is None, "not marked: nothing to ask"
    assert store.start_deleting_pool("c1", "p1", "t1", T0)
    assert store.delete_asked("c1", "p1", T1) == DeleteAsk(T1, None)
    assert not store.unmark_pool("c1", "p1", T2, asked_before=T0), "asked at T1: it may still arrive"
    assert store.unmark_pool("c1", "p1", T2, asked_before=T1)
    assert store.start_deleting_pool("c1", "p1", None, T2)
    assert store.unmark_pool("c1", "p1", T2, asked_before=T0), "the take-back forgot the old ask"


def test_a_refused_deletion_is_on_its_way_no_more(store: TaskStore) -> None:
    store.write_ahead_pool(pool("p1"), T0)
    assert store.start_deleting_pool("c1", "p1", "t1", T0)
    ask = store.delete_asked("c1", "p1", T1)
    assert ask == DeleteAsk(T1, None)
    store.delete_refused("c1", "p1", ask, T1)
    assert store.unmark_pool("c1", "p1", T2, asked_before=T0)
    store.delete_refused("c1", "unknown", ask, T2)  # nothing to clear: no error


def test_a_refusal_puts_back_the_ask_it_replaced_and_never_a_later_ask(store: TaskStore) -> None:
    """GKE refusing a second ask says nothing of the first, which may still be on its way; nor
    does a refusal of one ask undo an ask recorded after it."""
    store.write_ahead_pool(pool("p1"), T0)
    assert store.start_deleting_pool("c1", "p1", "t1", T0)
    first = store.delete_asked("c1", "p1", T0)
    second = store.delete_asked("c1", "p1", T1)
    assert second == DeleteAsk(T1, T0)
    store.delete_refused("c1", "p1", second, T1)
    assert not store.unmark_pool("c1", "p1", T2, asked_before=T0 - timedelta(seconds=1)), "the first is back"
    third = store.delete_asked("c1", "p1", T2)
    assert third == DeleteAsk(T2, T0)
    assert first is not None
    store.delete_refused("c1", "p1", first, T2)  # an ask since: nothing changes
    assert not store.unmark_pool("c1", "p1", T2, asked_before=T1), "the third is left"
    store.delete_refused("c1", "p1", third, T2)
    assert store.unmark_pool("c1", "p1", T2, asked_before=T0), "the first's time, which can no longer arrive"


def test_pool_deleted_and_pool_delete_failed(store: TaskStore, upstream: Upstream) -> None:
    store.write_ahead_pool(pool("p1"), T0)
    assert store.start_deleting_pool("c1", "p1", "t1", T1)
    store.pool_delete_failed("c1", "p1", "GKE said no", T1)
    assert store.pool("c1", "p1") == pool("p1", None, PoolState.DELETING)
    assert upstream.pool_error("c1", "p1") == "GKE said no"
    store.pool_deleted("c1", "p1", T2)
    assert store.pool("c1", "p1") == pool("p1", None, PoolState.DELETED)
    assert upstream.pool_error("c1", "p1") is None
    store.pool_delete_failed("c1", "unknown", "nothing to record", T2)
    store.pool_deleted("c1", "unknown", T2)
    assert store.pool("c1", "unknown") is None


def test_deletions_marked_since_counts_a_clusters_pools_marked_after_and_not_yet_gone(
    store: TaskStore,
) -> None:
    elsewhere = QueueKey("c2", "2x2")
    for name, queue in [("early", Q), ("late", Q2), ("gone", Q), ("other-cluster", elsewhere)]:
        store.write_ahead_pool(pool(name, f"h-{name}", queue=queue), T0)
        assert store.start_deleting_pool(queue.cluster_id, name, f"h-{name}", T2 if name != "early" else T1)
    store.pool_deleted("c1", "gone", T2)
    store.write_ahead_pool(pool("creating", "t9"), T0)
    assert store.deletions_marked_since("c1", T0) == 2  # early and late: every topology of the cluster
    assert store.deletions_marked_since("c1", T1) == 1  # marked at T1 is not after T1
    assert store.deletions_marked_since("c1", T2) == 0
    assert store.deletions_marked_since("c2", T0) == 1
    assert store.deletions_marked_since("c3", T0) == 0


def test_pools_in_lists_the_states_asked_oldest_record_first(store: TaskStore) -> None:
    store.write_ahead_pool(pool("late"), T2)
    store.write_ahead_pool(pool("early"), T1)  # recorded second, with an earlier time
    store.write_ahead_pool(pool("used", state=PoolState.IN_USE), T0)
    assert [p.name for p in store.pools_in([PoolState.CREATING])] == ["early", "late"]
    both = store.pools_in([PoolState.IN_USE, PoolState.CREATING])
    assert [p.name for p in both] == ["used", "early", "late"]


# -- transactions ----------------------------------------------------------------------------------


def test_cluster_locked_commits_together_and_rolls_back_as_a_whole(
    store: TaskStore, upstream: Upstream
) -> None:
    upstream.insert("t1")
    with store.cluster_locked("c1") as locked:
        assert locked.queue_task("t1", Q, T0)
        locked.write_ahead_pool(pool("p1"), T0)
        assert locked.pool("c1", "p1") == pool("p1")  # its own writes are visible inside
    assert progress(store, "t1") == Progress("t1", Phase.WAITING, Q)
    before = store.task("t1")

    with pytest.raises(RuntimeError, match="decided wrong"), store.cluster_locked("c1") as locked:
        assert locked.start_acquiring("t1", Q, "alice", "lease-1", "picked", T1) == 1
        locked.pool_ready("c1", "p1", T1)
        assert locked.keep_pool("c1", "p1", "t1", T1)
        raise RuntimeError("decided wrong")
    assert store.task("t1") == before
    assert progress(store, "t1") == Progress("t1", Phase.WAITING, Q)
    assert store.pool("c1", "p1") == pool("p1")
    assert store.snapshot(0, with_book=True).last_actors == {}


def test_together_reads_and_writes_in_one_transaction_undone_as_a_whole(
    store: TaskStore, upstream: Upstream
) -> None:
    upstream.insert("t1")
    with store.together() as one:
        assert one.queue_task("t1", Q, T0)
        assert one.waiting_count(Q, 5) == 1  # its own writes are visible inside
    assert progress(store, "t1") == Progress("t1", Phase.WAITING, Q)
    before = store.task("t1")

    with pytest.raises(RuntimeError, match="decided wrong"), store.together() as one:
        assert one.start_acquiring("t1", Q, "alice", "lease-1", "picked", T1) == 1
        raise RuntimeError("decided wrong")
    assert store.task("t1") == before
    assert progress(store, "t1") == Progress("t1", Phase.WAITING, Q)


def test_cluster_locked_writes_stay_invisible_outside_until_the_block_ends(
    store: TaskStore, upstream: Upstream
) -> None:
    upstream.insert("t1")
    with store.cluster_locked("c1") as locked:
        assert locked.queue_task("t1", Q, T0)
        assert row(store, "t1").reason is None  # another transaction reads the last commit
        assert progress(store, "t1") is None
    assert row(store, "t1").reason is Reason.WAITING


# -- tidal warm pools ------------------------------------------------------------------------------


def warm_rule(name: str, pools: int = 2, queue: QueueKey = Q) -> WarmRule:
    return WarmRule(name, queue, "CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5", pools, T0)


def test_warm_rules_are_added_once_by_name_listed_by_name_and_removed(store: TaskStore) -> None:
    assert store.add_warm_rule(warm_rule("morning"))
    assert store.add_warm_rule(warm_rule("evening", 0, Q2))
    assert not store.add_warm_rule(warm_rule("morning", 5))  # the name is taken: nothing replaced
    assert store.warm_rules() == [warm_rule("evening", 0, Q2), warm_rule("morning")]
    assert store.remove_warm_rule("evening") and not store.remove_warm_rule("evening")
    assert [r.name for r in store.warm_rules()] == ["morning"]


def test_a_warm_pool_is_recorded_without_holder_and_goes_idle_when_ready(store: TaskStore) -> None:
    store.write_ahead_pool(pool("warm", holder=None), T0, warm_rule="morning")
    store.write_ahead_pool(pool("task"), T0)
    assert store.warm_origin("c1", "warm") == "morning" and store.warm_origin("c1", "task") is None
    assert not store.warm_pool_ready("c1", "task", T1)  # a task's pool is its holder's
    assert store.warm_pool_ready("c1", "warm", T1)
    assert store.pool("c1", "warm") == replace(pool("warm", None, PoolState.IDLE), idle_since=T1)
    assert not store.warm_pool_ready("c1", "warm", T2)  # idle already: a second run changes nothing
    assert store.claim_idle_pool(Q, "t9", T2) == pool("warm", "t9", PoolState.IN_USE)
    assert store.warm_origin("c1", "warm") == "morning"  # its origin stays with it


def test_a_failed_warm_pool_goes_deleting_and_its_rule_remembers_why(
    store: TaskStore, upstream: Upstream
) -> None:
    assert store.add_warm_rule(warm_rule("morning"))
    store.warm_rule_warmed("morning", T0)
    assert store.warm_rules() == [replace(warm_rule("morning"), warmed_fire_at=T0)]
    store.write_ahead_pool(pool("warm", holder=None), T0, warm_rule="morning")
    store.write_ahead_pool(pool("task"), T0)
    assert not store.warm_pool_failed("c1", "task", "stockout", T1)
    assert store.warm_pool_failed("c1", "warm", "stockout", T1)
    assert store.pool("c1", "warm").state is PoolState.DELETING  # type: ignore[union-attr]
    assert upstream.pool_error("c1", "warm") == "stockout"
    # the fire is to be topped up again once the hold is over
    assert store.warm_rules() == [replace(warm_rule("morning"), last_error="stockout", failed_at=T1)]
    assert not store.warm_pool_failed("c1", "warm", "again", T2)
    store.warm_rule_failed("morning", "reservation res is not READY", T2)
    store.warm_rule_failed("gone", "nobody to tell", T2)  # a removed rule: nothing to write
    assert store.warm_rules()[0].last_error == "reservation res is not READY"


def test_queue_pools_lists_one_queues_pools_in_the_states_asked_oldest_record_first(store: TaskStore) -> None:
    store.write_ahead_pool(pool("late", "t-late"), T1)
    store.write_ahead_pool(pool("early", "t-early"), T0)
    store.write_ahead_pool(pool("other-topology", "t-other", queue=Q2), T0)
    store.write_ahead_pool(pool("in-use", "t-in-use"), T2)
    store.pool_ready("c1", "in-use", T2)
    assert store.start_deleting_pool("c1", "late", "t-late", T2)
    assert [p.name for p in store.queue_pools(Q, [PoolState.CREATING, PoolState.DELETING])] == [
        "early",
        "late",
    ]
    assert [p.name for p in store.queue_pools(Q, [PoolState.IN_USE])] == ["in-use"]
    assert [p.name for p in store.queue_pools(Q2, [PoolState.CREATING])] == ["other-topology"]
    assert store.queue_pools(QueueKey("c2", "2x2"), list(PoolState)) == []
