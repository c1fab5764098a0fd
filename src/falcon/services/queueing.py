"""Phase 2 of the design: when a queue's slot is free, pick its next task and start acquiring.

Snapshot → decide → act → record, in one pass over all queues: read every waiting task in one
query, let the pure pick rule choose, take the queue's slot, write the pick, then refresh every
waiting task's position Message (only rows whose text changed are written).
"""

from __future__ import annotations

from dataclasses import dataclass
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


def schedule(session: Session, slots: Slots, now: datetime, locale: Locale, lease_seconds: int) -> list[Pick]:
    waiting = repo.waiting_by_queue(session)
    busy = {p.queue for p in repo.progress_in(session, [repo.Phase.ACQUIRING])}
    last = repo.last_actors(session)
    picks: list[Pick] = []
    messages: dict[str, str] = {}
    for queue, tasks in waiting.items():
        if queue not in busy:
            pick = _pick_one(session, slots, queue, tasks, last.get(queue), now, locale, lease_seconds)
            if pick is not None:
                picks.append(pick)
                last[queue] = next(t.actor for t in tasks if t.task_id == pick.task_id)
                tasks = [t for t in tasks if t.task_id != pick.task_id]
        messages.update(waiting_messages(tasks, last.get(queue), locale))
    repo.set_messages(session, messages, now)
    return picks


def _pick_one(
    session: Session,
    slots: Slots,
    queue: QueueKey,
    tasks: list[WaitingTask],
    last_actor: str | None,
    now: datetime,
    locale: Locale,
    lease_seconds: int,
) -> Pick | None:
    chosen = pick_next(tasks, last_actor)
    if chosen is None:
        return None
    slots.ensure_limit(queue.slot_name)
    lease_id = slots.try_acquire(queue.slot_name, lease_seconds)
    if lease_id is None:
        return None  # held by a run the database does not know of; repair_slots frees it
    progress = repo.get_progress(session, chosen.task_id)
    attempt = (progress.attempt if progress else 0) + 1
    moved = repo.update_task(
        session,
        chosen.task_id,
        [Status.PENDING],
        now,
        reason=Reason.PROVISIONING,
        message=render(MessageKey.PROVISIONING_STARTED, locale),
    )
    if not moved:  # aborted between the read and now
        slots.release(lease_id)
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
