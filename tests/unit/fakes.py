"""In-memory fakes of every port in ``falcon.services.ports``, a fixed clock, and ``make_services``.

The store mirrors ``falcon.adapters.db.repository`` write by write: compare-and-set on the row's
status, phase moves checked with ``check_phase_move``, status writes checked with
``check_transition``, pool moves guarded by expected state and holder, and every call one
transaction (rolled back when it raises). The GKE and Kubernetes fakes are scripted per object
and record their calls; they do nothing the real APIs would not do.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from falcon.domain.errors import BusyError, ConflictError, NotFoundError, PermanentError, TemporaryError
from falcon.domain.events import ResourceView, Stage, TaskMove
from falcon.domain.job_manifest import TASK_ID_ANNOTATION
from falcon.domain.lifecycle import (
    LIVE_POOL_STATES,
    DeleteAsk,
    NodePool,
    Outcome,
    Phase,
    PoolState,
    Progress,
    RoundSnapshot,
    Snapshot,
    TaskView,
    WaitingRow,
    check_phase_move,
    reservation_pool_counts,
)
from falcon.domain.messages import Locale
from falcon.domain.model import (
    Cluster,
    ClusterStatus,
    ProvisioningMode,
    QueueKey,
    RunningChanges,
    RunningRead,
    RunningTask,
    Task,
)
from falcon.domain.node_pools import NodePoolPlan, PoolStatus, ReservationRef
from falcon.domain.pool_economics import BusyPools, CostPolicy, QueueObservations, fleet_arrival_gaps
from falcon.domain.scheduling import ReservationCapacity, WaitingTask, pick_next
from falcon.domain.status import Reason, Status, check_transition
from falcon.domain.warm_pools import WarmRule
from falcon.domain.workloads import ClusterEvent, FalconService, JobState, PodState
from falcon.services import acquisition
from falcon.services.context import Services, load_view
from falcon.services.dispatching import Dispatcher, TickReport
from falcon.settings import Settings

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# -- clock ----------------------------------------------------------------------------------------


class FakeClock:
    """Time stands still until a test (or a step's sleep) advances it; nothing really sleeps."""

    MAX_SLEEPS = 20_000  # a step still polling after this many waits would loop forever

    def __init__(self, now: datetime = T0) -> None:
        self._now = now
        self._monotonic = 0.0
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if len(self.sleeps) > self.MAX_SLEEPS:
            raise RuntimeError(f"still waiting after {self.MAX_SLEEPS} sleeps: the step never ends")
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._monotonic += seconds


class HookedClock(FakeClock):
    """A fixed clock that runs ``hook`` once, at the ``at``-th wait of a step."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[], None] | None = None
        self.at = 0

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.hook is not None and len(self.sleeps) == self.at:
            self.hook()


# -- task store -----------------------------------------------------------------------------------

_KEEP: Any = object()  # "leave the reason as it is", as in repository._write_task


class MemoryTaskStore:
    """The TaskStore port over dicts of immutable rows, with the SQL store's semantics."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self._lock = threading.RLock()
        self._depth = 0
        self.rows: dict[str, Task] = {}
        self.job_uids: dict[str, str] = {}
        self.progress: dict[str, Progress] = {}
        self.pools: dict[tuple[str, str], NodePool] = {}
        self.pool_errors: dict[tuple[str, str], str | None] = {}
        self.pool_created: dict[tuple[str, str], datetime] = {}  # pools_in lists oldest first
        self.pool_ready_at: dict[tuple[str, str], datetime] = {}
        self.pool_deleting_at: dict[tuple[str, str], datetime] = {}
        self.pool_delete_asked_at: dict[tuple[str, str], datetime] = {}
        self.pool_deleted_at: dict[tuple[str, str], datetime] = {}
        self.queued_at: dict[str, datetime] = {}  # intake time of each task: its queue's arrivals
        self.running_at: dict[str, datetime] = {}  # when each task first reached Running
        self.beats: dict[str, datetime] = {}  # run owners' heartbeats
        self.cluster_rows: dict[str, Cluster] = {}
        self.rotation: dict[QueueKey, str] = {}
        self.warm: dict[str, WarmRule] = {}  # tidal warm rules by name
        self.pool_origins: dict[tuple[str, str], str] = {}  # warm pool -> the rule it was created for
        self.calls: list[tuple[str, str]] = []  # (method, task id or pool name) of every write

    # -- transactions: one per call, or one for everything inside cluster_locked

    @contextmanager
    def _tx(self) -> Iterator[None]:
        with self._lock:
            saved = self._state() if self._depth == 0 else None
            self._depth += 1
            try:
                yield
            except BaseException:
                if saved is not None:
                    self._restore(saved)
                raise
            finally:
                self._depth -= 1

    def _tables(self) -> tuple[dict[Any, Any], ...]:
        return (
            self.rows,
            self.job_uids,
            self.progress,
            self.pools,
            self.pool_errors,
            self.pool_ready_at,
            self.pool_deleting_at,
            self.pool_delete_asked_at,
            self.pool_deleted_at,
            self.queued_at,
            self.running_at,
            self.beats,
            self.rotation,
            self.warm,
            self.pool_origins,
        )

    def _state(self) -> tuple[dict[Any, Any], ...]:
        return tuple(dict(d) for d in self._tables())

    def _restore(self, saved: tuple[dict[Any, Any], ...]) -> None:
        for current, old in zip(self._tables(), saved, strict=True):
            current.clear()
            current.update(old)

    @contextmanager
    def together(self) -> Iterator[MemoryTaskStore]:
        """One transaction: the block's calls, nested in it, are undone together if it raises."""
        with self._tx():
            yield self

    @contextmanager
    def cluster_locked(self, cluster_id: str) -> Iterator[MemoryTaskStore]:
        """One transaction: the block writes to a copy, which replaces this store's state only
        when the block ends without raising; until then readers of this store see none of it."""
        with self._lock:
            staged = MemoryTaskStore(self.clock)
            staged._restore(self._state())
            staged.cluster_rows = self.cluster_rows
            staged.pool_created = dict(self.pool_created)
            yield staged
            self._restore(staged._state())
            self.pool_created = staged.pool_created
            self.calls.extend(staged.calls)

    # -- what upstream (and the CLI) do ------------------------------------------------------

    def add_cluster(self, cluster: Cluster) -> Cluster:
        self.cluster_rows[cluster.id] = cluster
        return cluster

    def insert_task(
        self,
        task_id: str,
        *,
        actor: str = "alice",
        name: str | None = None,
        tpu_type: str = "v6e",
        spec: Any = None,
        timeout_seconds: int | None = None,
        created_at: datetime | None = None,
    ) -> Task:
        """A new row the way upstream writes it: Pending, reason NULL."""
        task = Task(
            id=task_id,
            actor=actor,
            name=name or f"job-{task_id}",
            tpu_type=tpu_type,
            spec=spec if spec is not None else spec_for("2x2"),
            timeout_seconds=timeout_seconds,
            status=Status.PENDING,
            reason=None,
            message=None,
            cluster_id=None,
            node_pool_name=None,
            k8s_job_name=None,
            created_at=created_at or self.clock.now(),
        )
        with self._tx():
            if task_id in self.rows:
                raise ValueError(f"duplicate task id {task_id}")
            self.rows[task_id] = task
        return task

    def request_abort(self, task_id: str, now: datetime | None = None) -> bool:
        """Upstream's write: Pending or Running -> Aborting with aborting_at."""
        now = now or self.clock.now()
        with self._tx():
            row = self.rows.get(task_id)
            if row is None or row.status not in (Status.PENDING, Status.RUNNING):
                return False
            self.rows[task_id] = replace(row, status=Status.ABORTING, aborting_at=now)
            return True

    def add_pool(self, pool: NodePool) -> None:
        """Seed a pool record as it is (write_ahead_pool always writes idle_since NULL)."""
        self.pools[(pool.cluster_id, pool.name)] = pool
        self.pool_created.setdefault((pool.cluster_id, pool.name), pool.idle_since or self.clock.now())

    def pool_error(self, cluster_id: str, name: str) -> str | None:
        return self.pool_errors.get((cluster_id, name))

    def writes(self, method: str, key: str | None = None) -> int:
        return sum(1 for m, k in self.calls if m == method and (key is None or k == key))

    # -- reads ------------------------------------------------------------------------------

    def snapshot(self, intake_batch: int, with_book: bool, with_counts: bool = False) -> Snapshot:
        with self._tx():
            new = sorted(
                (t for t in self.rows.values() if t.status is Status.PENDING and t.reason is None),
                key=lambda t: (t.created_at, t.id),
            )[:intake_batch]
            return Snapshot(
                new_tasks=new,
                aborting=[
                    (t, self.progress[t.id].phase if t.id in self.progress else None)
                    for t in self.rows.values()
                    if t.status is Status.ABORTING
                ],
                acquiring_queues={_queue(p) for p in self.progress.values() if p.phase is Phase.ACQUIRING},
                clusters=self.clusters() if new else [],
                queue_lengths=self._queue_lengths() if new else {},
                idle_pools=self.pools_in([PoolState.IDLE]) if new else [],
                reservation_pools=reservation_pool_counts(self.pools.values(), LIVE_POOL_STATES)
                if new
                else {},
                waiting=self._waiting_rows() if with_book else None,
                last_actors=dict(self.rotation) if with_book else None,
                waiting_counts=self._waiting_counts() if with_counts else None,
            )

    def _queue_lengths(self) -> dict[QueueKey, int]:
        lengths: dict[QueueKey, int] = {}
        for p in self.progress.values():
            if p.phase in (Phase.WAITING, Phase.ACQUIRING):
                lengths[_queue(p)] = lengths.get(_queue(p), 0) + 1
        return lengths

    def _waiting_counts(self) -> dict[QueueKey, int]:
        """Waiting progress rows less the Aborting tasks': a row whose job is gone counts too."""
        return dict(
            Counter(
                _queue(p)
                for p in self.progress.values()
                if p.phase is Phase.WAITING
                and (p.task_id not in self.rows or self.rows[p.task_id].status is not Status.ABORTING)
            )
        )

    def _waiting_rows(self) -> list[WaitingRow]:
        rows = []
        for p in self.progress.values():
            task = self.rows.get(p.task_id)
            if p.phase is Phase.WAITING and task is not None and task.status is Status.PENDING:
                waiting = WaitingTask(task.id, task.actor, task.name, task.created_at)
                rows.append(WaitingRow(_queue(p), waiting, task.message))
        return rows

    def task(self, task_id: str) -> Task | None:
        return self.rows.get(task_id)

    def task_view_rows(self, task_id: str) -> tuple[Task | None, Cluster | None, Progress | None]:
        with self._tx():
            task = self.rows.get(task_id)
            if task is None:
                return None, None, None
            cluster = self.cluster_rows.get(task.cluster_id) if task.cluster_id else None
            return task, cluster, self.progress.get(task_id)

    def tasks(self, task_ids: Iterable[str]) -> dict[str, Task]:
        return {i: self.rows[i] for i in set(task_ids) if i in self.rows}

    def clusters(self) -> list[Cluster]:
        return sorted(self.cluster_rows.values(), key=lambda c: c.name)

    def progress_in(self, phases: Sequence[Phase]) -> list[Progress]:
        return [p for p in self.progress.values() if p.phase in phases]

    def running_tasks(self) -> list[RunningTask]:
        return self._running()

    def round_snapshot(
        self, running: RunningRead, phases: Sequence[Phase], pool_states: Sequence[PoolState]
    ) -> RoundSnapshot:
        if Phase.ACQUIRING not in phases:
            raise ValueError("ACQUIRING must be among the phases")
        since = running.since
        with self._tx():
            tasks = self._running()
            changes = RunningChanges(
                new=[
                    t
                    for t in tasks
                    if since is None or (t.id in self.running_at and self.running_at[t.id] >= since)
                ],
                aborting={t.id for t in tasks if t.status is Status.ABORTING},
                count=len(tasks),
                rechecked=[t for t in tasks if since is not None and t.id in running.recheck],
            )
            return RoundSnapshot(
                changes, self.progress_in(phases), self.takers_without_pool(), self.pools_in(pool_states)
            )

    def _running(self) -> list[RunningTask]:
        return [
            RunningTask.of(self.rows[p.task_id], p.queue)
            for p in self.progress.values()
            if p.phase is Phase.RUNNING and p.task_id in self.rows
        ]

    def waiting_count(self, queue: QueueKey, up_to: int) -> int:
        return min(up_to, sum(1 for row in self._waiting_rows() if row.queue == queue))

    def takers_without_pool(self) -> dict[QueueKey, int]:
        ready = {p.holder_task_id for p in self.pools.values() if p.state is PoolState.IN_USE}
        takers: dict[QueueKey, int] = {}
        for p in self.progress.values():
            if p.phase is Phase.ACQUIRING and p.task_id not in ready and p.queue is not None:
                takers[p.queue] = takers.get(p.queue, 0) + 1
        return takers

    def idle_count(self, queue: QueueKey) -> int:
        return sum(1 for p in self._pools_of(queue) if p.state is PoolState.IDLE)

    def deletions_marked_since(self, cluster_id: str, since: datetime) -> int:
        return sum(
            1
            for key, p in self.pools.items()
            if p.cluster_id == cluster_id
            and p.state is PoolState.DELETING
            and key in self.pool_deleting_at
            and self.pool_deleting_at[key] > since
        )

    def pool(self, cluster_id: str, name: str) -> NodePool | None:
        return self.pools.get((cluster_id, name))

    def pools_in(self, states: Sequence[PoolState]) -> list[NodePool]:
        found = [p for p in self.pools.values() if p.state in states]
        return sorted(found, key=lambda p: self.pool_created[(p.cluster_id, p.name)])

    def queue_pools(self, queue: QueueKey, states: Sequence[PoolState]) -> list[NodePool]:
        return [
            p
            for p in self.pools_in(states)
            if (p.cluster_id, p.topology) == (queue.cluster_id, queue.topology)
        ]

    def held_pool(self, cluster_id: str, task_id: str) -> NodePool | None:
        return next(
            (
                p
                for p in self.pools.values()
                if p.cluster_id == cluster_id
                and p.holder_task_id == task_id
                and p.state in (PoolState.CREATING, PoolState.IN_USE)
            ),
            None,
        )

    def _pools_of(self, queue: QueueKey) -> list[NodePool]:
        return [
            p for p in self.pools.values() if (p.cluster_id, p.topology) == (queue.cluster_id, queue.topology)
        ]

    # -- task writes --------------------------------------------------------------------------

    def _write_task(
        self,
        task_id: str,
        expect: Sequence[Status],
        values: dict[str, Any],
        status: Status | None = None,
        reason: Reason | None = _KEEP,
    ) -> bool:
        """Compare-and-set on the row's status; the status and reason written are checked first."""
        if status is not None or reason is not _KEEP:
            for current in expect:
                check_transition(current, status or current, None if reason is _KEEP else reason)
        if status is not None:
            values["status"] = status
        if reason is not _KEEP:
            values["reason"] = reason
        row = self.rows.get(task_id)
        if row is None or row.status not in expect:
            return False
        self.rows[task_id] = replace(row, **values)
        return True

    def _move_progress(
        self,
        task_id: str,
        from_phases: Sequence[Phase],
        to: Phase,
        values: dict[str, Any] | None = None,
    ) -> bool:
        for current in from_phases:
            check_phase_move(current, to)
        row = self.progress.get(task_id)
        if row is None or row.phase not in from_phases:
            return False
        self.progress[task_id] = replace(row, **(values or {}), phase=to)
        return True

    def queue_task(self, task_id: str, queue: QueueKey, now: datetime) -> bool:
        self.calls.append(("queue_task", task_id))
        with self._tx():
            values = {"cluster_id": queue.cluster_id, "message": ""}
            untaken = task_id in self.rows and self.rows[task_id].reason is None
            if not untaken or not self._write_task(
                task_id, [Status.PENDING], values, Status.PENDING, Reason.WAITING
            ):
                return False
            check_phase_move(None, Phase.WAITING)
            if task_id in self.progress:
                raise ValueError(f"progress row of {task_id} exists already (primary key)")
            self.progress[task_id] = Progress(task_id, Phase.WAITING, queue)
            self.queued_at[task_id] = now
            return True

    def queue_tasks(self, placements: Sequence[tuple[str, QueueKey]], now: datetime) -> list[str]:
        with self._tx():
            return [task_id for task_id, queue in placements if self.queue_task(task_id, queue, now)]

    def finish(self, task_id: str, outcome: Outcome, expect: Sequence[Status], now: datetime) -> bool:
        self.calls.append(("finish", task_id))
        with self._tx():
            values: dict[str, Any] = {"message": outcome.message, "finished_at": now}
            if outcome.status is Status.ABORTED:
                values["aborted_at"] = now
            moved = self._write_task(task_id, expect, values, outcome.status, outcome.reason)
            if moved:
                self._mark_done(task_id)
            return moved

    def mark_done(self, task_id: str, now: datetime) -> None:
        self.calls.append(("mark_done", task_id))
        with self._tx():
            self._mark_done(task_id)

    def _mark_done(self, task_id: str) -> None:
        ending = [Phase.WAITING, Phase.RELEASING, Phase.DONE]
        if self._move_progress(task_id, ending, Phase.DONE, {"lease_id": None}):
            return
        row = self.progress.get(task_id)
        check_phase_move(row.phase if row else None, Phase.DONE)  # raises for a task mid-way
        self.progress[task_id] = Progress(task_id, Phase.DONE, None)

    def start_acquiring(
        self, task_id: str, queue: QueueKey, actor: str, lease_id: str, message: str, now: datetime
    ) -> int | None:
        self.calls.append(("start_acquiring", task_id))
        with self._tx():
            waiting = task_id in self.rows and self.rows[task_id].reason is Reason.WAITING
            if (
                not waiting
                or self._next_in_queue(queue) != task_id
                or not self._write_task(
                    task_id, [Status.PENDING], {"message": message}, Status.PENDING, Reason.PROVISIONING
                )
            ):
                return None
            row = self.progress.get(task_id)
            attempt = (row.attempt if row else 0) + 1
            values = {"lease_id": lease_id, "attempt": attempt, "acquire_run_id": None}
            self._move_progress(task_id, [Phase.WAITING], Phase.ACQUIRING, values)
            self.rotation[queue] = actor
            return attempt

    def _next_in_queue(self, queue: QueueKey) -> str | None:
        """The pick rule over this store's own waiting tasks and rotation, as the SQL store decides."""
        waiting = [
            WaitingTask(t.id, t.actor, t.name, t.created_at)
            for t in self.rows.values()
            if (p := self.progress.get(t.id)) and p.phase is Phase.WAITING and p.queue == queue
        ]
        chosen = pick_next(waiting, self.rotation.get(queue))
        return chosen.task_id if chosen else None

    def set_acquire_run(
        self,
        task_id: str,
        run_id: str,
        now: datetime,
        lease_id: str | None = None,
        attempt: int | None = None,
    ) -> bool:
        self.calls.append(("set_acquire_run", task_id))
        values: dict[str, Any] = {"acquire_run_id": run_id}
        if attempt is not None:
            values.update(lease_id=lease_id, attempt=attempt)
        with self._tx():
            return self._move_progress(task_id, [Phase.ACQUIRING], Phase.ACQUIRING, values)

    def set_release_run(self, task_id: str, run_id: str, now: datetime) -> bool:
        self.calls.append(("set_release_run", task_id))
        with self._tx():
            return self._move_progress(
                task_id, [Phase.RELEASING], Phase.RELEASING, {"release_run_id": run_id}
            )

    def set_waiting_messages(self, messages: Mapping[str, str], now: datetime) -> int:
        with self._tx():
            for task_id, text in messages.items():
                self.calls.append(("set_waiting_messages", task_id))
                row = self.rows.get(task_id)
                if row is not None and row.status is Status.PENDING and row.reason is Reason.WAITING:
                    self.rows[task_id] = replace(row, message=text)
            return len(messages)

    def note_pending(
        self,
        task_id: str,
        message: str,
        now: datetime,
        reason: Reason | None = None,
        node_pool_name: str | None = None,
    ) -> bool:
        self.calls.append(("note_pending", task_id))
        values: dict[str, Any] = {"message": message}
        if node_pool_name is not None:
            values["node_pool_name"] = node_pool_name
        with self._tx():
            return self._write_task(
                task_id, [Status.PENDING], values, Status.PENDING if reason else None, reason or _KEEP
            )

    def mark_dispatched(self, task_id: str, job_name: str, job_uid: str, message: str, now: datetime) -> bool:
        self.calls.append(("mark_dispatched", task_id))
        with self._tx():
            row = self.rows.get(task_id)
            dispatched_at = (row.dispatched_at if row else None) or now  # coalesce(dispatched_at, now)
            values = {"k8s_job_name": job_name, "message": message, "dispatched_at": dispatched_at}
            if not self._write_task(task_id, [Status.PENDING], values):
                return False
            self.job_uids[task_id] = job_uid
            return True

    def mark_running(self, task_id: str, message: str, now: datetime) -> bool:
        self.calls.append(("mark_running", task_id))
        with self._tx():
            moved = self._write_task(task_id, [Status.PENDING], {"message": message}, Status.RUNNING, None)
            if moved:
                self._move_progress(task_id, [Phase.ACQUIRING], Phase.RUNNING, {"lease_id": None})
                self.running_at.setdefault(task_id, now)
            return moved

    def start_releasing(
        self,
        task_id: str,
        outcome: Outcome,
        from_phases: Sequence[Phase],
        message: str,
        now: datetime,
        released_inline: bool = False,
    ) -> bool:
        self.calls.append(("start_releasing", task_id))
        with self._tx():
            values: dict[str, Any] = {"outcome": outcome, "lease_id": None}
            row = self.progress.get(task_id)
            if released_inline and row is not None:
                values["release_run_id"] = row.acquire_run_id
            moved = self._move_progress(task_id, from_phases, Phase.RELEASING, values)
            if moved:
                self._write_task(task_id, [Status.RUNNING], {"message": message})
            return moved

    # -- node-pool writes ---------------------------------------------------------------------

    def write_ahead_pool(self, pool: NodePool, now: datetime, warm_rule: str | None = None) -> None:
        self.calls.append(("write_ahead_pool", pool.name))
        with self._tx():
            key = (pool.cluster_id, pool.name)
            if key not in self.pools:
                self.pools[key] = replace(pool, idle_since=None)
                self.pool_created[key] = now
                if warm_rule is not None:
                    self.pool_origins[key] = warm_rule

    def _move_pool(
        self,
        cluster_id: str,
        name: str,
        values: dict[str, Any],
        expect_states: Sequence[PoolState] | None = None,
        expect_holder: str | None = None,
    ) -> bool:
        row = self.pools.get((cluster_id, name))
        if row is None:
            return False
        if expect_states is not None and row.state not in expect_states:
            return False
        if expect_holder is not None and row.holder_task_id != expect_holder:
            return False
        self.pools[(cluster_id, name)] = replace(row, **values)
        return True

    def claim_idle_pool(self, queue: QueueKey, task_id: str, now: datetime) -> NodePool | None:
        self.calls.append(("claim_idle_pool", task_id))
        with self._tx():
            idle = [p for p in self._pools_of(queue) if p.state is PoolState.IDLE]
            for p in sorted(idle, key=lambda p: p.idle_since or now):
                values = {"state": PoolState.IN_USE, "holder_task_id": task_id, "idle_since": None}
                if self._move_pool(p.cluster_id, p.name, values, [PoolState.IDLE]):
                    return self.pools[(p.cluster_id, p.name)]
            return None

    def hand_over(
        self, queue: QueueKey, task_id: str, own: str, own_exists: bool, now: datetime
    ) -> NodePool | None:
        self.calls.append(("hand_over", task_id))
        with self._tx():
            mine = self.pools.get((queue.cluster_id, own))
            if mine is None or mine.state is not PoolState.CREATING or mine.holder_task_id != task_id:
                return None
            taken = self.claim_idle_pool(queue, task_id, now)
            if taken is not None:
                values: dict[str, Any] = {"holder_task_id": None}
                if not own_exists:
                    values["state"] = PoolState.DELETED
                self._move_pool(queue.cluster_id, own, values, [PoolState.CREATING], task_id)
            return taken

    def beat(self, owner: str, now: datetime) -> None:
        with self._tx():
            self.beats[owner] = now

    def last_beat(self, owner: str) -> datetime | None:
        with self._tx():
            return self.beats.get(owner)

    def fleet_gaps(self, arrivals: int) -> tuple[float, ...]:
        with self._tx():
            fleet = sorted(
                ((self.progress[task_id].queue, at) for task_id, at in self.queued_at.items()),
                key=lambda arrival: arrival[1],
            )[-arrivals:]
            return fleet_arrival_gaps(fleet)

    def busy_pools(self, queue: QueueKey, runs: int, now: datetime) -> BusyPools:
        with self._tx():
            held = [p.holder_task_id for p in self._pools_of(queue) if p.state is PoolState.IN_USE]
            phases = [(self.progress[t].phase, self.running_at.get(t)) for t in held if t in self.progress]
            ending = sum(1 for phase, _ in phases if phase is Phase.RELEASING)
            running_for = tuple(
                (now - at).total_seconds() if at else 0.0
                for phase, at in phases
                if phase in (Phase.ACQUIRING, Phase.RUNNING)
            )
            if not running_for and not ending:
                return BusyPools()
            return BusyPools(running_for, ending, self._past_runs(queue, runs), self._past_runs(None, runs))

    def _past_runs(self, queue: QueueKey | None, runs: int) -> tuple[float, ...]:
        done = sorted(
            (at, finished - at)
            for task_id, at in self.running_at.items()
            if self.progress[task_id].phase is Phase.DONE
            and (queue is None or self.progress[task_id].queue == queue)
            and (finished := self.rows[task_id].finished_at) is not None
        )[-runs:]
        return tuple(ran.total_seconds() for _, ran in done)

    def queue_observations(
        self, queues: Collection[QueueKey], gaps: int, creations: int
    ) -> dict[QueueKey, QueueObservations]:
        self.calls.append(("queue_observations", frozenset(queues)))
        with self._tx():
            return {queue: self._observations(queue, gaps, creations) for queue in queues}

    def _observations(self, queue: QueueKey, gaps: int, creations: int) -> QueueObservations:
        arrivals = sorted(
            at for task_id, at in self.queued_at.items() if self.progress[task_id].queue == queue
        )[-(gaps + 1) :]
        ready = sorted(
            (at, key)
            for key, at in self.pool_ready_at.items()
            if key in self.pools and self.pools[key].topology == queue.topology and key[0] == queue.cluster_id
        )[-creations:]
        by_mode: dict[ProvisioningMode, tuple[float, ...]] = {}
        for at, key in ready:
            seconds = (at - self.pool_created[key]).total_seconds()
            by_mode[self.pools[key].mode] = (*by_mode.get(self.pools[key].mode, ()), seconds)
        deleted = sorted(
            (gone, self.pool_deleting_at[key])
            for key, gone in self.pool_deleted_at.items()
            if key in self.pool_deleting_at
            and key in self.pool_ready_at
            and self.pools[key].topology == queue.topology
            and key[0] == queue.cluster_id
        )[-creations:]
        return QueueObservations(
            arrival_gaps=tuple((b - a).total_seconds() for a, b in itertools.pairwise(arrivals)),
            creation_seconds=by_mode,
            deletion_seconds=tuple((gone - marked).total_seconds() for gone, marked in deleted),
        )

    def pool_ready(self, cluster_id: str, name: str, now: datetime) -> None:
        self.calls.append(("pool_ready", name))
        with self._tx():
            if self._move_pool(cluster_id, name, {"state": PoolState.IN_USE}, [PoolState.CREATING]):
                self.pool_ready_at[(cluster_id, name)] = now

    def replan_pool(self, pool: NodePool, now: datetime) -> bool:
        self.calls.append(("replan_pool", pool.name))
        values = {"mode": pool.mode, "reservation": pool.reservation}
        with self._tx():
            return self._move_pool(
                pool.cluster_id, pool.name, values, [PoolState.CREATING], pool.holder_task_id
            )

    def keep_pool(self, cluster_id: str, name: str, holder: str, now: datetime) -> bool:
        self.calls.append(("keep_pool", name))
        values = {"state": PoolState.IDLE, "holder_task_id": None, "idle_since": now}
        with self._tx():
            return self._move_pool(cluster_id, name, values, [PoolState.IN_USE], holder)

    def start_deleting_pool(self, cluster_id: str, name: str, holder: str | None, now: datetime) -> bool:
        self.calls.append(("start_deleting_pool", name))
        expect = [PoolState.IN_USE, PoolState.CREATING] if holder is not None else [PoolState.IDLE]
        with self._tx():
            values = {"state": PoolState.DELETING, "holder_task_id": None}
            moved = self._move_pool(cluster_id, name, values, expect, holder)
            if moved:
                self.pool_deleting_at[(cluster_id, name)] = now
            return moved

    def delete_asked(self, cluster_id: str, name: str, now: datetime) -> DeleteAsk | None:
        self.calls.append(("delete_asked", name))
        with self._tx():
            marked = self.pool(cluster_id, name)
            if marked is None or marked.state is not PoolState.DELETING:
                return None
            replaced = self.pool_delete_asked_at.get((cluster_id, name))
            self.pool_delete_asked_at[(cluster_id, name)] = now
            return DeleteAsk(now, replaced)

    def delete_refused(self, cluster_id: str, name: str, ask: DeleteAsk, now: datetime) -> None:
        self.calls.append(("delete_refused", name))
        with self._tx():
            marked, key = self.pool(cluster_id, name), (cluster_id, name)
            if marked is None or marked.state is not PoolState.DELETING:
                return
            if self.pool_delete_asked_at.get(key) != ask.at:
                return  # another ask was recorded since
            if ask.replaced is None:
                del self.pool_delete_asked_at[key]
            else:
                self.pool_delete_asked_at[key] = ask.replaced

    def unmark_pool(self, cluster_id: str, name: str, now: datetime, asked_before: datetime) -> bool:
        self.calls.append(("unmark_pool", name))
        values = {"state": PoolState.IDLE, "idle_since": now}
        with self._tx():
            asked = self.pool_delete_asked_at.get((cluster_id, name))
            if asked is not None and asked > asked_before:
                return False
            moved = self._move_pool(cluster_id, name, values, [PoolState.DELETING])
            if moved:
                self.pool_deleting_at.pop((cluster_id, name), None)
                self.pool_delete_asked_at.pop((cluster_id, name), None)
                self.pool_errors[(cluster_id, name)] = None
            return moved

    def pool_deleted(self, cluster_id: str, name: str, now: datetime) -> None:
        self.calls.append(("pool_deleted", name))
        with self._tx():
            if self._move_pool(cluster_id, name, {"state": PoolState.DELETED}):
                self.pool_errors[(cluster_id, name)] = None
                self.pool_deleted_at.setdefault((cluster_id, name), now)

    def pool_delete_failed(self, cluster_id: str, name: str, error: str, now: datetime) -> None:
        self.calls.append(("pool_delete_failed", name))
        with self._tx():
            if (cluster_id, name) in self.pools:
                self.pool_errors[(cluster_id, name)] = error

    # -- tidal warm pools ---------------------------------------------------------------------

    def warm_rules(self) -> list[WarmRule]:
        with self._tx():
            return [self.warm[name] for name in sorted(self.warm)]

    def add_warm_rule(self, rule: WarmRule) -> bool:
        with self._tx():
            if rule.name in self.warm:
                return False
            self.warm[rule.name] = replace(rule, last_error=None, failed_at=None, warmed_fire_at=None)
            return True

    def remove_warm_rule(self, name: str) -> bool:
        with self._tx():
            return self.warm.pop(name, None) is not None

    def warm_origin(self, cluster_id: str, name: str) -> str | None:
        with self._tx():
            return self.pool_origins.get((cluster_id, name))

    def _unheld(self, cluster_id: str, name: str) -> bool:
        row = self.pools.get((cluster_id, name))
        return row is not None and row.holder_task_id is None

    def warm_pool_ready(self, cluster_id: str, name: str, now: datetime) -> bool:
        self.calls.append(("warm_pool_ready", name))
        values = {"state": PoolState.IDLE, "idle_since": now}
        with self._tx():
            ready = self._unheld(cluster_id, name) and self._move_pool(
                cluster_id, name, values, [PoolState.CREATING]
            )
            if ready:
                self.pool_ready_at[(cluster_id, name)] = now
            return ready

    def warm_pool_failed(self, cluster_id: str, name: str, error: str, now: datetime) -> bool:
        self.calls.append(("warm_pool_failed", name))
        with self._tx():
            if not self._unheld(cluster_id, name) or not self._move_pool(
                cluster_id, name, {"state": PoolState.DELETING}, [PoolState.CREATING]
            ):
                return False
            self.pool_errors[(cluster_id, name)] = error
            self.pool_deleting_at[(cluster_id, name)] = now
            rule = self.pool_origins.get((cluster_id, name))
            if rule is not None:
                self._rule_failed(rule, error, now)
            return True

    def warm_rule_warmed(self, name: str, fire: datetime) -> None:
        with self._tx():
            if name in self.warm:
                self.warm[name] = replace(self.warm[name], warmed_fire_at=fire)

    def warm_rule_failed(self, name: str, error: str, now: datetime) -> None:
        self.calls.append(("warm_rule_failed", name))
        with self._tx():
            self._rule_failed(name, error, now)

    def _rule_failed(self, name: str, error: str, now: datetime) -> None:
        if name in self.warm:
            self.warm[name] = replace(self.warm[name], last_error=error, failed_at=now, warmed_fire_at=None)


def _queue(progress: Progress) -> QueueKey:
    return progress.queue or QueueKey("", "")


# -- GKE node pools -------------------------------------------------------------------------------


@dataclass
class PoolScript:
    """How one pool behaves in GKE once created."""

    polls_to_ready: int = 0  # get() answers PROVISIONING this many times, then RUNNING
    error: str | None = None  # ERROR with this detail instead of becoming ready
    never_ready: bool = False
    operation_error: str | None = None  # the failed create operation's text (stockout, quota)
    polls_to_delete: int = 0  # get() answers STOPPING this many times after the delete, then 404


@dataclass
class _GkePool:
    plan: NodePoolPlan | None
    script: PoolScript
    polls: int = 0
    stopping: int | None = None  # STOPPING answers left once GKE accepted its deletion


class FakeNodePools:
    """GKE's node pools by (cluster id, name), each with a scripted life."""

    def __init__(self) -> None:
        self.pools: dict[tuple[str, str], _GkePool] = {}
        self.scripts: dict[str, PoolScript] = {}
        self.create_failures: deque[Exception] = deque()
        self.delete_failures: deque[Exception] = deque()
        self.delete_seconds = 0.0  # how long a Job deletion takes, on the fake clock
        self.calls: list[tuple[str, str]] = []  # (method, pool name)
        self.plans: list[NodePoolPlan] = []

    # -- scripting
    def script(self, name: str, **behaviour: Any) -> PoolScript:
        self.scripts[name] = PoolScript(**behaviour)
        return self.scripts[name]

    def refuse_create(self, times: int) -> None:
        """GKE busy with another operation on the cluster (FAILED_PRECONDITION, retried)."""
        for _ in range(times):
            self.create_failures.append(BusyError("cluster is running another operation"))

    def fail_create(self, message: str) -> None:
        self.create_failures.append(PermanentError(message))

    def fail_delete(self, error: Exception, times: int = 1) -> None:
        self.delete_failures.extend([error] * times)

    def add_existing(self, cluster: Cluster, name: str, **behaviour: Any) -> None:
        """A pool GKE already has (created earlier, manually, or by a lost run)."""
        self.pools[(cluster.id, name)] = _GkePool(None, PoolScript(**behaviour))

    def count(self, method: str, name: str | None = None) -> int:
        return sum(1 for m, n in self.calls if m == method and (name is None or n == name))

    # -- the port
    def create(self, cluster: Cluster, plan: NodePoolPlan) -> str:
        self.calls.append(("create", plan.name))
        if self.create_failures:
            raise self.create_failures.popleft()
        if (cluster.id, plan.name) in self.pools:
            raise ConflictError(f"node pool {plan.name} already exists")
        self.plans.append(plan)
        self.pools[(cluster.id, plan.name)] = _GkePool(plan, self.scripts.get(plan.name, PoolScript()))
        return f"operation-create-{plan.name}"

    def get(self, cluster: Cluster, name: str) -> PoolStatus:
        self.calls.append(("get", name))
        pool = self.pools.get((cluster.id, name))
        if pool is None:
            raise NotFoundError(f"node pool {name} not found")
        if pool.stopping is not None:
            return self._stopping(cluster, name, pool)
        pool.polls += 1
        if pool.script.error is not None:
            return PoolStatus(name, "ERROR", pool.script.error)
        if pool.script.never_ready or pool.polls <= pool.script.polls_to_ready:
            return PoolStatus(name, "PROVISIONING", "")
        return PoolStatus(name, "RUNNING", "")

    def list_names(self, cluster: Cluster) -> list[str]:
        self.calls.append(("list_names", cluster.id))
        return [name for cluster_id, name in self.pools if cluster_id == cluster.id]

    def delete(self, cluster: Cluster, name: str) -> str:
        self.calls.append(("delete", name))
        if self.delete_failures:
            raise self.delete_failures.popleft()
        pool = self.pools.get((cluster.id, name))
        if pool is None:
            raise NotFoundError(f"node pool {name} not found")
        if pool.stopping is not None:  # GKE runs one operation at a time: its own deletion is one
            raise TemporaryError(f"an operation is currently deleting node pool {name}")
        if pool.script.polls_to_delete:
            pool.stopping = pool.script.polls_to_delete
        else:
            del self.pools[(cluster.id, name)]
        return f"operation-delete-{name}"

    def _stopping(self, cluster: Cluster, name: str, pool: _GkePool) -> PoolStatus:
        if pool.stopping == 0:
            del self.pools[(cluster.id, name)]
            raise NotFoundError(f"node pool {name} not found")
        pool.stopping = (pool.stopping or 0) - 1
        return PoolStatus(name, "STOPPING", "")

    def create_error(self, cluster: Cluster, pool_name: str) -> str | None:
        pool = self.pools.get((cluster.id, pool_name))
        script = pool.script if pool else self.scripts.get(pool_name)
        return script.operation_error if script else None


# -- Compute reservations and TPU7x workload policies ----------------------------------------------


class FakeReservations:
    """Reservation capacity per (reference, zone); an unknown one is 404 as in Compute."""

    def __init__(self) -> None:
        self.answers: dict[tuple[ReservationRef, str], ReservationCapacity | Exception] = {}
        self.calls: list[tuple[ReservationRef, str]] = []

    def set(self, ref: ReservationRef, zone: str, answer: ReservationCapacity | Exception) -> None:
        self.answers[(ref, zone)] = answer

    def capacity(self, ref: ReservationRef, zone: str) -> ReservationCapacity:
        self.calls.append((ref, zone))
        answer = self.answers.get((ref, zone))
        if answer is None:
            raise NotFoundError(f"reservation {ref.name} not found in {ref.project}/{zone}")
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakeWorkloadPolicies:
    def __init__(self) -> None:
        self.ensured: list[tuple[str, str, str, str]] = []
        self.error: Exception | None = None

    def ensure(self, project: str, region: str, name: str, topology: str) -> None:
        self.ensured.append((project, region, name, topology))
        if self.error is not None:
            raise self.error


# -- Kubernetes ----------------------------------------------------------------------------------


@dataclass
class JobScript:
    """How a Job's pods behave; polls are get_job calls."""

    running_after: int = 0  # pods Pending for this many polls, then Running
    never_running: bool = False
    waiting_reason: str | None = None  # while Pending: ContainerCreating, ImagePullBackOff...
    waiting_message: str = ""
    unschedulable: str | None = None  # while Pending: the scheduler's word (e.g. nodes not up yet)
    complete: bool = False
    pods_succeeded: bool = False  # every pod succeeded; the Job controller has not set a condition yet
    failed_condition: str | None = None
    terminated: list[tuple[str, int]] = field(default_factory=list)
    not_created: int = 0  # pods the Job controller may not create (FailedCreate: quota, no KSA)


@dataclass
class _Job:
    namespace: str
    manifest: dict[str, Any]
    uid: str
    created_at: datetime
    script: JobScript
    polls: int = 0

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def parallelism(self) -> int:
        return int(self.manifest["spec"].get("parallelism", 1))

    @property
    def created(self) -> int:
        return self.parallelism - self.script.not_created

    @property
    def suspended(self) -> bool:
        return bool(self.manifest["spec"].get("suspend"))

    @property
    def running(self) -> bool:
        s = self.script
        stopped = s.complete or s.pods_succeeded or s.failed_condition or s.never_running or self.suspended
        return not stopped and self.polls > s.running_after

    def pods(self) -> list[PodState]:
        s = self.script
        if self.suspended:
            return []
        if s.complete or s.pods_succeeded:
            return [
                PodState(f"{self.name}-{i}", "Succeeded", job_name=self.name) for i in range(self.parallelism)
            ]
        if s.failed_condition:
            return [
                PodState(f"{self.name}-{i}", "Failed", terminated=list(s.terminated), job_name=self.name)
                for i in range(self.parallelism)
            ]
        phase = "Running" if self.running else "Pending"
        reason = None if self.running else s.waiting_reason
        message = "" if self.running else s.waiting_message
        unschedulable = None if self.running else s.unschedulable
        return [
            PodState(
                f"{self.name}-{i}", phase, reason, [], unschedulable, message, self.created_at, self.name
            )
            for i in range(self.created)
        ]

    def state(self) -> JobState:
        s, n = self.script, self.parallelism
        running = self.created if self.running else 0
        return JobState(
            name=self.name,
            uid=self.uid,
            parallelism=n,
            active=0 if (s.complete or s.pods_succeeded or s.failed_condition) else self.created,
            ready=running,
            succeeded=n if (s.complete or s.pods_succeeded) else 0,
            failed=n if s.failed_condition else 0,
            complete=s.complete,
            failed_condition=s.failed_condition,
            task_id=self.manifest["metadata"].get("annotations", {}).get(TASK_ID_ANNOTATION),
            suspended=self.suspended,
        )


class FakeClusterJobs:
    """One cluster's Kubernetes API: Jobs with scripted pods, Services, Warning events."""

    _uids = itertools.count(1)

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.namespaces: set[str] = set()
        self.jobs: dict[tuple[str, str], _Job] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, ClusterEvent]] = []
        self.scripts: dict[str, JobScript] = {}
        self.create_failures: deque[Exception] = deque()
        self.delete_failures: deque[Exception] = deque()
        self.delete_seconds = 0.0  # how long a Job deletion takes, on the fake clock
        self.resume_failures: deque[Exception] = deque()
        self.calls: list[tuple[str, str]] = []  # (method, object name)
        self.unreachable = False  # the cluster's API does not answer (list_jobs raises)

    # -- scripting
    def script(self, job_name: str, **behaviour: Any) -> JobScript:
        """Script a Job before it is created; after that, ``job(name).script`` changes it."""
        self.scripts[job_name] = JobScript(**behaviour)
        return self.scripts[job_name]

    def job(self, name: str) -> _Job:
        return next(j for j in self.jobs.values() if j.name == name)

    def warn(self, namespace: str, event: ClusterEvent) -> None:
        self.events.append((namespace, event))

    def count(self, method: str, name: str | None = None) -> int:
        return sum(1 for m, n in self.calls if m == method and (name is None or n == name))

    # -- the port
    def ensure_namespace(self, namespace: str) -> None:
        self.calls.append(("ensure_namespace", namespace))
        self.namespaces.add(namespace)

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> str:
        name = manifest["metadata"]["name"]
        self.calls.append(("create_job", name))
        if self.create_failures:
            raise self.create_failures.popleft()
        if (namespace, name) in self.jobs:
            raise ConflictError(f'jobs.batch "{name}" already exists')
        uid = f"uid-{next(self._uids)}"
        script = self.scripts.get(name, JobScript())
        self.jobs[(namespace, name)] = _Job(namespace, manifest, uid, self.clock.now(), script)
        return uid

    def resume_job(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("resume_job", name))
        if self.resume_failures:
            raise self.resume_failures.popleft()
        job = self.jobs.get((namespace, name))
        if job is None:
            raise NotFoundError(f'jobs.batch "{name}" not found')
        if job.uid != uid:
            invalid = (
                f'Job.batch "{name}" is invalid: metadata.uid: Invalid value: "{uid}": field is immutable'
            )
            raise PermanentError(invalid)
        job.manifest = {**job.manifest, "spec": {**job.manifest["spec"], "suspend": False}}

    def get_job(self, namespace: str, name: str) -> JobState:
        self.calls.append(("get_job", name))
        job = self.jobs.get((namespace, name))
        if job is None:
            raise NotFoundError(f'jobs.batch "{name}" not found')
        job.polls += 1
        return job.state()

    def list_jobs(self, namespace: str, label_selector: str) -> list[JobState]:
        self.calls.append(("list_jobs", namespace))
        if self.unreachable:
            raise TemporaryError("list Jobs: connection refused")
        key, _, value = label_selector.partition("=")
        return [
            j.state()
            for (ns, _), j in self.jobs.items()
            if ns == namespace and j.manifest["metadata"].get("labels", {}).get(key) == value
        ]

    def delete_job(self, namespace: str, name: str) -> None:
        self.calls.append(("delete_job", name))
        self.clock.advance(self.delete_seconds)
        if self.delete_failures:
            raise self.delete_failures.popleft()
        if self.jobs.pop((namespace, name), None) is None:
            raise NotFoundError(f'jobs.batch "{name}" not found')

    def ensure_service(self, namespace: str, manifest: dict[str, Any]) -> None:
        self.calls.append(("ensure_service", manifest["metadata"]["name"]))
        self.services[(namespace, manifest["metadata"]["name"])] = manifest

    def delete_service(self, namespace: str, name: str) -> None:
        self.calls.append(("delete_service", name))
        if self.services.pop((namespace, name), None) is None:
            raise NotFoundError(f'services "{name}" not found')

    def falcon_services(self, namespace: str) -> list[FalconService]:
        return [
            FalconService(name, m["metadata"].get("annotations", {}).get(TASK_ID_ANNOTATION))
            for (ns, name), m in self.services.items()
            if ns == namespace
        ]

    def warning_events(self, namespace: str) -> list[ClusterEvent]:
        self.calls.append(("warning_events", namespace))
        return [e for ns, e in self.events if ns == namespace]

    def pods_of_jobs(self, namespace: str, job_names: Collection[str]) -> list[PodState]:
        self.calls.append(("pods_of_jobs", frozenset(job_names)))
        return [
            p
            for (ns, name), j in self.jobs.items()
            if ns == namespace and name in job_names
            for p in j.pods()
        ]

    def job_pods(self, namespace: str, job_name: str) -> list[PodState]:
        self.calls.append(("job_pods", job_name))
        job = self.jobs.get((namespace, job_name))
        return job.pods() if job else []


class FakeJobsOf:
    """``JobsOf``: the Kubernetes API of each cluster, made on first use."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.by_cluster: dict[str, FakeClusterJobs] = {}

    def __call__(self, cluster: Cluster) -> FakeClusterJobs:
        return self[cluster.id]

    def __getitem__(self, cluster_id: str) -> FakeClusterJobs:
        return self.by_cluster.setdefault(cluster_id, FakeClusterJobs(self.clock))


# -- queue slots and flow runs ---------------------------------------------------------------------


class FakeSlots:
    """Global concurrency limits of 1 per name, with leases."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.limits: set[str] = set()
        self.leases: dict[str, str] = {}  # lease id -> slot name
        self.released: list[str] = []
        self.resets: list[str] = []
        self.on_acquire: list[Any] = []  # callables run inside try_acquire (to race a write)

    def holder(self, name: str) -> str | None:
        return next((lease for lease, slot in self.leases.items() if slot == name), None)

    def ensure_limit(self, name: str, fail_fast: bool = False) -> None:
        self.limits.add(name)

    def try_acquire(self, name: str, lease_seconds: int, fail_fast: bool = False) -> str | None:
        for hook in self.on_acquire:
            hook(name)
        with self._lock:
            if name not in self.limits:
                raise PermanentError(f"concurrency limit {name!r} does not exist")  # as PrefectSlots
            if self.holder(name) is not None:
                return None
            lease = f"lease-{next(self._ids)}"
            self.leases[lease] = name
            return lease

    def renew(self, lease_id: str, lease_seconds: int) -> bool:
        return lease_id in self.leases

    def release(self, lease_id: str, fail_fast: bool = False) -> None:
        with self._lock:
            self.released.append(lease_id)
            self.leases.pop(lease_id, None)

    def reset(self, name: str) -> None:
        with self._lock:
            self.resets.append(name)
            for lease in [lease for lease, slot in self.leases.items() if slot == name]:
                del self.leases[lease]


class FakeLauncher:
    """Records the runs it starts; a started run is alive until ``end`` says otherwise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.acquires: list[tuple[str, str, int]] = []  # (task id, lease id, attempt)
        self.releases: list[tuple[str, int]] = []
        self.warms: list[QueueKey] = []  # the queue of each warm run started
        self.alive: set[str] = set()

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        with self._lock:
            run = f"run-acquire-{next(self._ids)}"
            self.acquires.append((task_id, lease_id, attempt))
            self.alive.add(run)
            return run

    def start_release(self, task_id: str, attempt: int) -> str:
        with self._lock:
            run = f"run-release-{next(self._ids)}"
            self.releases.append((task_id, attempt))
            self.alive.add(run)
            return run

    def start_warm(self, queue: QueueKey) -> str:
        with self._lock:
            run = f"run-warm-{next(self._ids)}"
            self.warms.append(queue)
            self.alive.add(run)
            return run

    def end(self, run_id: str) -> None:
        self.alive.discard(run_id)

    def is_alive(self, run_id: str) -> bool:
        return run_id in self.alive


# -- wiring ---------------------------------------------------------------------------------------


# -- events ------------------------------------------------------------------------------------


class FakeTaskEvents:
    """Records what the services report, in order."""

    def __init__(self) -> None:
        self.moves: list[TaskMove] = []
        self.created: list[tuple[QueueKey, ProvisioningMode, bool]] = []
        self.reused: list[tuple[QueueKey, str]] = []
        self.deferred: list[tuple[QueueKey, str]] = []
        self.swept: list[tuple[str, str, list[str]]] = []
        self.views: list[ResourceView] = []

    def moved(self, move: TaskMove) -> None:
        self.moves.append(move)

    def pick_deferred(self, queue: QueueKey, error: str) -> None:
        self.deferred.append((queue, error))

    def pool_created(self, queue: QueueKey, mode: ProvisioningMode, fallback: bool) -> None:
        self.created.append((queue, mode, fallback))

    def pool_reused(self, queue: QueueKey, how: str) -> None:
        self.reused.append((queue, how))

    def orphans_swept(self, cluster_id: str, kind: str, names: Sequence[str]) -> None:
        self.swept.append((cluster_id, kind, list(names)))

    def resources_seen(self, view: ResourceView) -> None:
        self.views.append(view)

    def path(self, task_id: str) -> list[tuple[Stage, Stage]]:
        """The task's moves as (from, to), in order."""
        return [(m.source, m.target) for m in self.moves if m.task_id == task_id]

    def of(self, task_id: str) -> list[TaskMove]:
        return [m for m in self.moves if m.task_id == task_id]


class _ExplicitSettings(Settings):
    """Settings from the arguments only: no FALCON_* environment, no dotenv."""

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, **_sources):  # type: ignore[no-untyped-def,override]
        return (init_settings,)


TEST_SETTINGS: dict[str, Any] = {
    "message_locale": Locale.EN,
    "tick_seconds": 0.1,
    "reconcile_seconds": 1.0,
    "queue_refresh_seconds": 30.0,
    "intake_batch": 500,
    "slot_lease_seconds": 300,
    "node_pool_timeout_seconds": 600,
    "pool_creation_prior_seconds": 120.0,
    "orphan_scan_seconds": 300.0,
    "poll_seconds": 1.0,
    "api_timeout_seconds": 5.0,
    "image_pull_grace_seconds": 60.0,
    "mount_grace_seconds": 300.0,
}


def make_settings(**overrides: Any) -> Settings:
    return _ExplicitSettings(**{**TEST_SETTINGS, **overrides})


def make_services(clock: FakeClock | None = None, **settings: Any) -> Services:
    """Services wired to fresh fakes and a fixed clock; keyword arguments override settings."""
    clock = clock or FakeClock()
    return Services(
        settings=make_settings(**settings),
        store=MemoryTaskStore(clock),
        node_pools=FakeNodePools(),
        reservations=FakeReservations(),
        workload_policies=FakeWorkloadPolicies(),
        jobs=FakeJobsOf(clock),
        slots=FakeSlots(),
        launcher=FakeLauncher(),
        clock=clock,
        keep_policy=CostPolicy(TEST_SETTINGS["pool_creation_prior_seconds"]),
        events=FakeTaskEvents(),
    )


# -- scenario builders shared by the service tests --------------------------------------------------


def spec_for(topology: str, **fields: Any) -> dict[str, Any]:
    return {
        "image": "us-docker.pkg.dev/p/r/train:1",
        "command": ["python", "train.py"],
        "topology": topology,
        **fields,
    }


def cluster(
    cluster_id: str = "c1",
    *,
    name: str | None = None,
    tpu_type: str = "v6e",
    location: str = "us-east5-b",
    zone: str | None = None,
    reservation: str | None = None,
    status: ClusterStatus = ClusterStatus.ACTIVE,
) -> Cluster:
    return Cluster(
        id=cluster_id,
        name=name or f"edge-{cluster_id}",
        project="proj",
        location=location,
        tpu_type=tpu_type,
        gcs_bucket="logs-bucket",
        default_reservation=reservation,
        status=status,
        namespace="falcon-jobs",
        zone=zone,
    )


def queued(
    svc: Services, task_id: str, topology: str = "2x2", *, cluster_id: str | None = None, **row: Any
) -> QueueKey:
    """A row taken in: Pending/Waiting in its cluster's queue (default the first registered one)."""
    store: Any = svc.store
    store.insert_task(task_id, spec=spec_for(topology), **row)
    queue = QueueKey(cluster_id or store.clusters()[0].id, topology)
    assert store.queue_task(task_id, queue, svc.clock.now())
    return queue


def acquiring(
    svc: Services, task_id: str, topology: str = "2x2", *, cluster_id: str | None = None, **row: Any
) -> TaskView:
    """A task picked by the dispatcher (holding its queue's slot), as its lifecycle run loads it."""
    queue = queued(svc, task_id, topology, cluster_id=cluster_id, **row)
    svc.slots.ensure_limit(queue.slot_name)
    lease = svc.slots.try_acquire(queue.slot_name, 300) or ""
    attempt = svc.store.start_acquiring(
        task_id, queue, row.get("actor", "alice"), lease, "picked", svc.clock.now()
    )
    assert attempt == 1
    assert svc.store.set_acquire_run(task_id, "run-1", svc.clock.now())
    return load_view(svc, task_id)


def running(
    svc: Services, task_id: str, topology: str = "2x2", *, cluster_id: str | None = None, **row: Any
) -> TaskView:
    """A task taken all the way through acquisition: pool ready, Job submitted, pods Running."""
    view = acquiring(svc, task_id, topology, cluster_id=cluster_id, **row)
    choice = acquisition.provision(svc, view)
    pool = acquisition.wait_pool_ready(svc, view, choice, svc.clock.now())
    job = acquisition.dispatch(svc, view, pool)
    pods = acquisition.wait_pods_running(svc, view, job)
    acquisition.mark_running(svc, view, pods)
    return load_view(svc, task_id)


def one_cluster(**cluster_fields: Any) -> Services:
    """Services on fakes with the one cluster ``c1`` registered (fields as ``cluster`` takes them)."""
    svc = make_services()
    svc.store.add_cluster(cluster("c1", **cluster_fields))
    return svc


def events_of(svc: Services) -> FakeTaskEvents:
    """The fake events port the services report to."""
    assert isinstance(svc.events, FakeTaskEvents)
    return svc.events


def k8s_of(svc: Services) -> FakeClusterJobs:
    """The fake Kubernetes API of the first registered cluster."""
    return svc.jobs(svc.store.clusters()[0])  # type: ignore[return-value]


def clusters_of(svc: Services) -> dict[str, Cluster]:
    return {c.id: c for c in svc.store.clusters()}


def idle_pool(
    name: str = "falcon-2x2-kept",
    topology: str = "2x2",
    cluster_id: str = "c1",
    since: datetime | None = None,
) -> NodePool:
    """A flex-start pool kept idle for its queue (as release leaves one)."""
    return NodePool(
        cluster_id,
        name,
        topology,
        "ct6e-standard-4t",
        ProvisioningMode.FLEX_START,
        None,
        PoolState.IDLE,
        None,
        since,
    )


SELDOM = (3600.0,) * 5  # arrival gaps of a queue used about once an hour: far longer than a creation


def arrivals(svc: Services, queue: QueueKey, gaps: Sequence[float] = SELDOM) -> None:
    """The queue's history as intake recorded it: finished tasks taken in ``gaps`` seconds apart,
    the last one now. With the default the cost rule deletes an idle pool nobody waits for at once."""
    store = svc.store
    assert isinstance(store, MemoryTaskStore)
    at = svc.clock.now() - timedelta(seconds=sum(gaps))
    for n, gap in enumerate([0.0, *gaps]):
        at += timedelta(seconds=gap)
        task_id = f"past-{queue.cluster_id}-{queue.topology}-{n}"
        store.progress[task_id] = Progress(task_id, Phase.DONE, queue)
        store.queued_at[task_id] = at


def rounds_until(dispatcher: Dispatcher, seen: Callable[[TickReport], bool]) -> TickReport:
    """Rounds until one reports what ``seen`` looks for: releases and run starts happen on
    threads beside the round (``WorkBeside``), so a later round reports each once it is over."""
    deadline = time.monotonic() + 5
    while not seen(report := dispatcher.reconcile()):
        assert time.monotonic() < deadline, "no round reported it within 5 s"
        time.sleep(0.01)
    return report
