"""Phase 2 of the design: when a queue's slot is free, pick its next task and start acquiring.

The dispatcher is the only writer of waiting tasks (intake adds them, picks and aborts remove
them; no other step touches them), so it keeps them in a ``QueueBook`` in memory instead of
re-reading every waiting row each tick. The book is reloaded from the database at start and
every ``queue_refresh_seconds`` as a safety net. A pass then costs one small query (which queues
are acquiring) plus writes for the Messages that actually changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from falcon.adapters.db import repository as repo
from falcon.domain.messages import Locale, MessageKey, render
from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask, pick_next, waiting_messages
from falcon.domain.status import Reason, Status
from falcon.services.ports import Slots


@dataclass(frozen=True)
class Pick:
    task_id: str
    queue: QueueKey
    lease_id: str
    attempt: int


@dataclass
class QueueBook:
    """Waiting tasks per queue, the round-robin state, and the Messages last written."""

    waiting: dict[QueueKey, list[WaitingTask]] = field(default_factory=dict)
    last_actor: dict[QueueKey, str] = field(default_factory=dict)
    written: dict[str, str | None] = field(default_factory=dict)
    dirty: set[QueueKey] = field(default_factory=set)
    loaded: bool = False

    def load(self, session: Session) -> None:
        self.waiting.clear()
        self.written.clear()
        for row in repo.waiting_rows(session):
            self.waiting.setdefault(row.queue, []).append(row.task)
            self.written[row.task.task_id] = row.message
        self.last_actor = repo.last_actors(session)
        self.dirty = set(self.waiting)
        self.loaded = True

    def add(self, queue: QueueKey, task: WaitingTask) -> None:
        self.waiting.setdefault(queue, []).append(task)
        self.written[task.task_id] = None
        self.dirty.add(queue)

    def remove(self, task_ids: Iterable[str]) -> None:
        gone = set(task_ids)
        for queue, tasks in self.waiting.items():
            kept = [t for t in tasks if t.task_id not in gone]
            if len(kept) != len(tasks):
                self.waiting[queue] = kept
                self.dirty.add(queue)
        for task_id in gone:
            self.written.pop(task_id, None)

    def counts(self) -> dict[QueueKey, int]:
        return {queue: len(tasks) for queue, tasks in self.waiting.items() if tasks}


@dataclass
class ScheduleResult:
    picks: list[Pick] = field(default_factory=list)
    slot_held: list[QueueKey] = field(default_factory=list)  # free in the database, held in Prefect
    messages_written: int = 0


def schedule(
    session: Session, book: QueueBook, slots: Slots, now: datetime, locale: Locale, lease_seconds: int
) -> ScheduleResult:
    result = ScheduleResult()
    busy = {p.queue for p in repo.progress_in(session, [repo.Phase.ACQUIRING])}
    for queue, tasks in book.waiting.items():
        if not tasks or queue in busy:
            continue
        chosen = pick_next(tasks, book.last_actor.get(queue))
        if chosen is None:
            continue
        slots.ensure_limit(queue.slot_name)
        lease_id = slots.try_acquire(queue.slot_name, lease_seconds)
        if lease_id is None:
            result.slot_held.append(queue)
            continue
        pick = _start_acquiring(session, queue, chosen, lease_id, now, locale)
        if pick is None:
            slots.release(lease_id)  # aborted between the read and now; the abort pass ends it
            continue
        result.picks.append(pick)
        book.last_actor[queue] = chosen.actor
    book.remove(p.task_id for p in result.picks)
    result.messages_written = _refresh_messages(session, book, now, locale)
    return result


def _start_acquiring(
    session: Session, queue: QueueKey, chosen: WaitingTask, lease_id: str, now: datetime, locale: Locale
) -> Pick | None:
    progress = repo.get_progress(session, chosen.task_id)
    attempt = (progress.attempt if progress else 0) + 1
    message = render(MessageKey.PROVISIONING_STARTED, locale)
    if not repo.update_task(
        session, chosen.task_id, [Status.PENDING], now, reason=Reason.PROVISIONING, message=message
    ):
        return None
    repo.update_progress(
        session,
        chosen.task_id,
        now,
        [repo.Phase.WAITING],
        phase=repo.Phase.ACQUIRING,
        lease_id=lease_id,
        attempt=attempt,
        acquire_run_id=None,
    )
    repo.record_pick(session, queue, chosen.actor, now)
    return Pick(chosen.task_id, queue, lease_id, attempt)


def _refresh_messages(session: Session, book: QueueBook, now: datetime, locale: Locale) -> int:
    changed: dict[str, str] = {}
    for queue in book.dirty:
        for task_id, text in waiting_messages(
            book.waiting.get(queue, []), book.last_actor.get(queue), locale
        ).items():
            if book.written.get(task_id) != text:
                changed[task_id] = text
    book.dirty.clear()
    if changed:
        repo.set_messages(session, changed, now)
        book.written.update(changed)
    return len(changed)
