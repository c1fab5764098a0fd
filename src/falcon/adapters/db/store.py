"""The task store port over SQLAlchemy: each call one short transaction, or all calls inside
``cluster_locked`` one transaction holding the cluster's row lock."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime

from sqlalchemy.orm import Session

from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import read_scope, session_scope
from falcon.adapters.metrics import IN_DATABASE
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
)
from falcon.domain.model import Cluster, QueueKey, RunningRead, RunningTask, Task
from falcon.domain.pool_economics import BusyPools, QueueObservations
from falcon.domain.status import Reason, Status
from falcon.domain.warm_pools import WarmRule


class SqlTaskStore:
    def __init__(self, url: str, session: Session | None = None) -> None:
        self._url = url
        self._session = session

    def _tx(self) -> AbstractContextManager[Session]:
        return self._within(session_scope)

    def _read(self) -> AbstractContextManager[Session]:
        """For a read of one statement: ``read_scope``, unless inside a transaction already."""
        return self._within(read_scope)

    @contextmanager
    def _within(self, scope: Callable[[str], AbstractContextManager[Session]]) -> Iterator[Session]:
        if self._session is not None:
            yield self._session
        else:
            with IN_DATABASE.timing(), scope(self._url) as session:
                yield session

    @contextmanager
    def together(self) -> Iterator[SqlTaskStore]:
        with self._tx() as session:
            yield self if self._session is not None else SqlTaskStore(self._url, session)

    @contextmanager
    def cluster_locked(self, cluster_id: str) -> Iterator[SqlTaskStore]:
        with session_scope(self._url) as session:
            repo.lock_cluster(session, cluster_id)
            yield SqlTaskStore(self._url, session)

    # -- reads

    def snapshot(self, intake_batch: int, with_book: bool, with_counts: bool = False) -> Snapshot:
        # A steady tick's read is one statement. The waiting rows and the queues' last actors
        # are read in one transaction: the book loads from both as of one moment.
        with self._tx() if with_book else self._read() as s:
            steady = repo.tick_reads(s, intake_batch, with_counts)
            new = steady.new
            return Snapshot(
                new_tasks=new,
                aborting=steady.aborting,
                acquiring_queues=steady.acquiring_queues,
                clusters=repo.list_clusters(s) if new else [],
                queue_lengths=repo.queue_lengths(s) if new else {},
                idle_pools=repo.pools_in(s, [PoolState.IDLE]) if new else [],
                reservation_pools=repo.reservation_pool_counts(s, LIVE_POOL_STATES) if new else {},
                waiting=repo.waiting_rows(s) if with_book else None,
                last_actors=repo.last_actors(s) if with_book else None,
                waiting_counts=steady.waiting_counts,
            )

    def task(self, task_id: str) -> Task | None:
        with self._read() as s:
            return repo.get_task(s, task_id)

    def task_view_rows(self, task_id: str) -> tuple[Task | None, Cluster | None, Progress | None]:
        with self._read() as s:
            return repo.task_view_rows(s, task_id)

    def tasks(self, task_ids: Iterable[str]) -> dict[str, Task]:
        with self._read() as s:
            return repo.tasks_by_id(s, task_ids)

    def clusters(self) -> list[Cluster]:
        with self._read() as s:
            return repo.list_clusters(s)

    def progress_in(self, phases: Sequence[Phase]) -> list[Progress]:
        with self._read() as s:
            return repo.progress_in(s, phases)

    def running_tasks(self) -> list[RunningTask]:
        with self._read() as s:
            return repo.running_tasks(s)

    def round_snapshot(
        self, running: RunningRead, phases: Sequence[Phase], pool_states: Sequence[PoolState]
    ) -> RoundSnapshot:
        with self._read() as s:
            return repo.round_reads(s, running, phases, pool_states)

    def waiting_count(self, queue: QueueKey, up_to: int) -> int:
        with self._read() as s:
            return repo.waiting_count(s, queue, up_to)

    def takers_without_pool(self) -> dict[QueueKey, int]:
        with self._read() as s:
            return repo.takers_without_pool(s)

    def idle_count(self, queue: QueueKey) -> int:
        with self._read() as s:
            return repo.idle_count(s, queue)

    def deletions_marked_since(self, cluster_id: str, since: datetime) -> int:
        with self._read() as s:
            return repo.deletions_marked_since(s, cluster_id, since)

    def pool(self, cluster_id: str, name: str) -> NodePool | None:
        with self._read() as s:
            return repo.get_pool(s, cluster_id, name)

    def pools_in(self, states: Sequence[PoolState]) -> list[NodePool]:
        with self._read() as s:
            return repo.pools_in(s, states)

    def queue_pools(self, queue: QueueKey, states: Sequence[PoolState]) -> list[NodePool]:
        with self._read() as s:
            return repo.queue_pools(s, queue, states)

    def held_pool(self, cluster_id: str, task_id: str) -> NodePool | None:
        with self._read() as s:
            return repo.held_pool(s, cluster_id, task_id)

    # -- task writes

    def queue_task(self, task_id: str, queue: QueueKey, now: datetime) -> bool:
        with self._tx() as s:
            return repo.queue_task(s, task_id, queue, now)

    def queue_tasks(self, placements: Sequence[tuple[str, QueueKey]], now: datetime) -> list[str]:
        with self._tx() as s:
            return [task_id for task_id, queue in placements if repo.queue_task(s, task_id, queue, now)]

    def finish(self, task_id: str, outcome: Outcome, expect: Sequence[Status], now: datetime) -> bool:
        with self._tx() as s:
            return repo.finish(s, task_id, outcome, expect, now)

    def mark_done(self, task_id: str, now: datetime) -> None:
        with self._tx() as s:
            repo.mark_done(s, task_id, now)

    def start_acquiring(
        self, task_id: str, queue: QueueKey, actor: str, lease_id: str, message: str, now: datetime
    ) -> int | None:
        with self._tx() as s:
            return repo.start_acquiring(s, task_id, queue, actor, lease_id, message, now)

    def set_acquire_run(
        self,
        task_id: str,
        run_id: str,
        now: datetime,
        lease_id: str | None = None,
        attempt: int | None = None,
    ) -> bool:
        with self._tx() as s:
            return repo.set_acquire_run(s, task_id, run_id, now, lease_id, attempt)

    def set_release_run(self, task_id: str, run_id: str, now: datetime) -> bool:
        with self._tx() as s:
            return repo.set_release_run(s, task_id, run_id, now)

    def set_waiting_messages(self, messages: Mapping[str, str], now: datetime) -> int:
        with self._tx() as s:
            return repo.set_messages(s, dict(messages), now)

    def note_pending(
        self,
        task_id: str,
        message: str,
        now: datetime,
        reason: Reason | None = None,
        node_pool_name: str | None = None,
    ) -> bool:
        with self._tx() as s:
            return repo.note_pending(s, task_id, message, now, reason, node_pool_name)

    def mark_dispatched(self, task_id: str, job_name: str, job_uid: str, message: str, now: datetime) -> bool:
        with self._tx() as s:
            return repo.mark_dispatched(s, task_id, job_name, job_uid, message, now)

    def mark_running(self, task_id: str, message: str, now: datetime) -> bool:
        with self._tx() as s:
            return repo.mark_running(s, task_id, message, now)

    def start_releasing(
        self,
        task_id: str,
        outcome: Outcome,
        from_phases: Sequence[Phase],
        message: str,
        now: datetime,
        released_inline: bool = False,
    ) -> bool:
        with self._tx() as s:
            return repo.start_releasing(s, task_id, outcome, from_phases, message, now, released_inline)

    # -- node-pool writes

    def write_ahead_pool(self, pool: NodePool, now: datetime, warm_rule: str | None = None) -> None:
        with self._tx() as s:
            repo.write_ahead_pool(s, pool, now, warm_rule)

    def claim_idle_pool(self, queue: QueueKey, task_id: str, now: datetime) -> NodePool | None:
        with self._tx() as s:
            return repo.claim_idle_pool(s, queue, task_id, now)

    def hand_over(
        self, queue: QueueKey, task_id: str, own: str, own_exists: bool, now: datetime
    ) -> NodePool | None:
        with self._tx() as s:
            return repo.hand_over(s, queue, task_id, own, own_exists, now)

    def queue_observations(
        self, queues: Collection[QueueKey], gaps: int, creations: int
    ) -> dict[QueueKey, QueueObservations]:
        with self._tx() as s:
            return repo.queue_observations(s, queues, gaps, creations)

    def busy_pools(self, queue: QueueKey, runs: int, now: datetime) -> BusyPools:
        with self._read() as s:
            return repo.busy_pools(s, queue, runs, now)

    def fleet_gaps(self, arrivals: int) -> tuple[float, ...]:
        with self._read() as s:
            return repo.fleet_gaps(s, arrivals)

    def beat(self, owner: str, now: datetime) -> None:
        with self._tx() as s:
            repo.beat(s, owner, now)

    def last_beat(self, owner: str) -> datetime | None:
        with self._read() as s:
            return repo.last_beat(s, owner)

    def pool_ready(self, cluster_id: str, name: str, now: datetime) -> None:
        with self._tx() as s:
            repo.pool_ready(s, cluster_id, name, now)

    def replan_pool(self, pool: NodePool, now: datetime) -> bool:
        with self._tx() as s:
            return repo.replan_pool(s, pool, now)

    def keep_pool(self, cluster_id: str, name: str, holder: str, now: datetime) -> bool:
        with self._tx() as s:
            return repo.keep_pool(s, cluster_id, name, holder, now)

    def start_deleting_pool(self, cluster_id: str, name: str, holder: str | None, now: datetime) -> bool:
        with self._tx() as s:
            return repo.start_deleting_pool(s, cluster_id, name, holder, now)

    def delete_asked(self, cluster_id: str, name: str, now: datetime) -> DeleteAsk | None:
        with self._tx() as s:
            return repo.delete_asked(s, cluster_id, name, now)

    def delete_refused(self, cluster_id: str, name: str, ask: DeleteAsk, now: datetime) -> None:
        with self._tx() as s:
            repo.delete_refused(s, cluster_id, name, ask, now)

    def unmark_pool(self, cluster_id: str, name: str, now: datetime, asked_before: datetime) -> bool:
        with self._tx() as s:
            return repo.unmark_pool(s, cluster_id, name, now, asked_before)

    def pool_deleted(self, cluster_id: str, name: str, now: datetime) -> None:
        with self._tx() as s:
            repo.pool_deleted(s, cluster_id, name, now)

    def pool_delete_failed(self, cluster_id: str, name: str, error: str, now: datetime) -> None:
        with self._tx() as s:
            repo.pool_delete_failed(s, cluster_id, name, error, now)

    # -- tidal warm pools

    def warm_rules(self) -> list[WarmRule]:
        with self._read() as s:
            return repo.warm_rules(s)

    def add_warm_rule(self, rule: WarmRule) -> bool:
        with self._tx() as s:
            return repo.add_warm_rule(s, rule)

    def remove_warm_rule(self, name: str) -> bool:
        with self._tx() as s:
            return repo.remove_warm_rule(s, name)

    def warm_origin(self, cluster_id: str, name: str) -> str | None:
        with self._read() as s:
            return repo.warm_origin(s, cluster_id, name)

    def warm_pool_ready(self, cluster_id: str, name: str, now: datetime) -> bool:
        with self._tx() as s:
            return repo.warm_pool_ready(s, cluster_id, name, now)

    def warm_pool_failed(self, cluster_id: str, name: str, error: str, now: datetime) -> bool:
        with self._tx() as s:
            return repo.warm_pool_failed(s, cluster_id, name, error, now)

    def warm_rule_warmed(self, name: str, fire: datetime) -> None:
        with self._tx() as s:
            repo.warm_rule_warmed(s, name, fire)

    def warm_rule_failed(self, name: str, error: str, now: datetime) -> None:
        with self._tx() as s:
            repo.warm_rule_failed(s, name, error, now)
