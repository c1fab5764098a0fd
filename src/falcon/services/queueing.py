"""Phase 2 of the design: when a queue's slot is free, pick its next task and start acquiring.

The dispatcher is the only writer of waiting tasks (intake adds them, picks and aborts remove
them; no other step touches them), so it keeps them in a ``QueueBook`` in memory instead of
re-reading every waiting row each tick. The book is loaded from the database at start. As a
safety net it is checked every ``queue_refresh_seconds`` (the database's count of waiting tasks
per queue against the book's: an aggregate over the progress table's index) and read again when
they differ, and every ``FULL_RELOAD_EVERY`` checks regardless (a drift that keeps the counts,
one task for another).
A reload of thousands of rows, and the slot checks after it, used to be every 30 s and was the
tick's p99 at scale.

One pass runs in kueue's order: the snapshot is already read (and its transaction over); the
picks are decided purely; then each pick's slot is taken, and only then is the pick recorded,
in a short write of its own, which the deployed dispatcher leaves to threads beside the tick
(``PickRecords``). No transaction is open while Prefect is called.

Two dispatchers may run at once (a rollout overlap, a second ``falcon local`` on one database).
The book then only proposes: the store records a pick only if the task still waits and is the
queue's next by the database's own waiting tasks and rotation, under the queue's slot; a refused
pick frees the slot and makes the book reload, so every task is picked once and in rule order.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from falcon.domain.errors import TemporaryError
from falcon.domain.events import Stage, TaskMove
from falcon.domain.lifecycle import WaitingRow
from falcon.domain.messages import MessageKey, Messages
from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask, pick_next, waiting_messages
from falcon.services.pick_records import Answer, PickRecords, Slotted
from falcon.services.ports import Slots, TaskEvents, TaskStore

logger = logging.getLogger(__name__)

# Writes waiting tasks' Messages (task id -> text), as TaskStore.set_waiting_messages does.
MessageWrite = Callable[[Mapping[str, str], datetime], object]


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
    limits: set[QueueKey] = field(default_factory=set)  # slots made sure of by this dispatcher
    # Waiting rows the database counts but the book cannot hold (their job row is neither Pending
    # nor Aborting: deleted or edited by hand), per queue, as of the last load.
    unbooked: dict[QueueKey, int] = field(default_factory=dict)

    def load(
        self,
        rows: Iterable[WaitingRow],
        last_actors: Mapping[QueueKey, str],
        counted: Mapping[QueueKey, int] | None = None,
    ) -> None:
        """``counted``: the database's count of waiting tasks read with ``rows`` (``drift``'s)."""
        self.waiting.clear()
        self.written.clear()
        for row in rows:
            self.waiting.setdefault(row.queue, []).append(row.task)
            self.written[row.task.task_id] = row.message
        self.last_actor = dict(last_actors)
        self.dirty = set(self.waiting)
        self.limits.clear()  # made sure of again: a failed tick (a limit deleted) reloads the book
        self.loaded = True
        held = self.counts()
        self.unbooked = {q: n - held.get(q, 0) for q, n in (counted or {}).items() if n != held.get(q, 0)}

    def add(self, queue: QueueKey, task: WaitingTask) -> None:
        self.waiting.setdefault(queue, []).append(task)
        self.written[task.task_id] = None
        self.dirty.add(queue)

    def remove(self, task_ids: Iterable[str], queues: Iterable[QueueKey] | None = None) -> None:
        """Take these tasks out, looking in ``queues`` when the caller knows them (a pick's), else
        in every queue: at 10 000 waiting tasks a look through all of them is 4 ms of a tick."""
        gone = set(task_ids)
        if not gone:
            return
        for queue in set(self.waiting if queues is None else queues):
            tasks = self.waiting.get(queue, [])
            kept = [t for t in tasks if t.task_id not in gone]
            if len(kept) != len(tasks):
                self.waiting[queue] = kept
                self.dirty.add(queue)
        for task_id in gone:
            self.written.pop(task_id, None)

    def picked(self, queue: QueueKey, task: WaitingTask) -> None:
        """The task leaves the book to acquire; its actor is the queue's last, for round robin."""
        self.remove([task.task_id], [queue])
        self.last_actor[queue] = task.actor

    def counts(self) -> dict[QueueKey, int]:
        return {queue: len(tasks) for queue, tasks in self.waiting.items() if tasks}

    def drift(
        self, counted: Mapping[QueueKey, int], leaving: Set[str], unsettled: Set[QueueKey] = frozenset()
    ) -> dict[QueueKey, tuple[int, int]]:
        """Queues whose waiting tasks in the database (``counted``) are not the book's, as
        (book, database). ``leaving``: tasks the database no longer counts as waiting but the
        book may still hold, as the tick that read the counts has yet to remove them (aborts).
        The rows the book could not hold at its last load (``unbooked``) are not a drift. Queues
        in ``unsettled`` are left to the next check: their pick's record is under way, and the
        database counts its task until the record commits, the book no longer."""
        mine = Counter(
            queue for queue, tasks in self.waiting.items() for t in tasks if t.task_id not in leaving
        )
        theirs = Counter(counted)
        theirs.subtract(self.unbooked)
        return {
            queue: (mine[queue], theirs[queue])
            for queue in mine.keys() | theirs.keys()
            if mine[queue] != theirs[queue] and queue not in unsettled
        }


@dataclass
class ScheduleResult:
    picks: list[Pick] = field(default_factory=list)
    slot_held: list[QueueKey] = field(default_factory=list)  # free in the database, held in Prefect
    deferred: list[QueueKey] = field(default_factory=list)  # the slot service answered busy, or not at all
    messages_written: int = 0


def choose(
    book: QueueBook, acquiring: Set[QueueKey], held: Mapping[str, str] | None = None
) -> list[tuple[QueueKey, WaitingTask]]:
    """The next task of every queue whose slot is free in the database and whose cluster is not
    held (unreachable: an acquisition there would only burn its retries) (pure)."""
    chosen = []
    for queue, tasks in book.waiting.items():
        if tasks and queue not in acquiring and queue.cluster_id not in (held or {}):
            task = pick_next(tasks, book.last_actor.get(queue))
            if task is not None:
                chosen.append((queue, task))
    return chosen


def schedule(
    store: TaskStore,
    book: QueueBook,
    slots: Slots,
    acquiring: Set[QueueKey],
    say: Messages,
    now: datetime,
    lease_seconds: int,
    events: TaskEvents,
    held: Mapping[str, str] | None = None,
    write_messages: MessageWrite | None = None,
    records: PickRecords | None = None,
    on_recorded: Callable[[Pick], None] | None = None,
) -> ScheduleResult:
    """Pick and claim the next task of every free queue, then rewrite the Messages that changed.
    ``held`` maps the clusters that cannot be reached to the Message their waiting tasks show;
    ``events`` is told of each pick recorded, and of each left to the next tick because the slot
    service answered busy or not at all. ``write_messages`` writes the Messages (the store's
    ``set_waiting_messages`` unless given: the deployed dispatcher writes them beside the tick).

    The slots are taken one queue after another; the picks are then recorded through
    ``records`` (one after another on this thread unless given), and ``on_recorded`` (which must
    not raise) is called on the recording thread with each pick the database took. The book
    moves on at once: the picked tasks leave it and its Messages are rewritten whether or not
    the records are done. ``result.picks`` are the picks whose record is over (``settle``),
    those of earlier calls' records among them.

    New tasks get their position before any slot is asked for: a slot is a Prefect API call,
    which a busy Prefect server can make last seconds, and the rows inserted meanwhile must not
    wait for it. A queue whose task is picked then has its positions written again."""
    write = write_messages or store.set_waiting_messages
    result = ScheduleResult(messages_written=_refresh_messages(write, book, say, now, held or {}))
    slotted: list[Slotted] = []
    try:
        for queue, task in choose(book, acquiring, held):
            if (lease_id := _take_slot(slots, book, queue, lease_seconds, result, events)) is not None:
                slotted.append(Slotted(queue, task, lease_id, now))
    except BaseException:
        for pick in slotted:  # no pick recorded: nobody may hold these slots
            slots.release(pick.lease_id)
        raise
    for pick in slotted:
        book.picked(pick.queue, pick.task)
    records = records or PickRecords()
    records.hand_over(slotted, partial(_record, store, say(MessageKey.PROVISIONING_STARTED), on_recorded))
    result.picks = settle(records.done(), book, slots, events)
    result.messages_written += _refresh_messages(write, book, say, now, held or {})
    return result


def settle(
    done: Iterable[tuple[Slotted, Answer]], book: QueueBook, slots: Slots, events: TaskEvents
) -> list[Pick]:
    """What the picks' records did. A pick the database took is its queue's acquiring task (its
    move told to ``events``). One it refused (aborted since the snapshot, picked already, or not
    next by the database's own waiting tasks: another dispatcher was at work) or whose record
    failed gives its slot back, for nobody may hold it, and the book, stale, is read again."""
    picks = []
    for pick, answer in done:
        queue, task = pick.queue, pick.task
        if isinstance(answer, int):
            picks.append(_recorded(pick, answer))
            book.picked(queue, task)  # again: the book may have been read while the record was under way
            events.moved(
                TaskMove(task.task_id, queue, Stage.WAITING, Stage.ACQUIRING, pick.at, task.submitted_at)
            )
            continue
        slots.release(pick.lease_id)
        book.loaded = False
        if answer is not None:
            logger.error("event=pick_record_failed task_id=%s", task.task_id, exc_info=answer)
    return picks


def _record(
    store: TaskStore, message: str, on_recorded: Callable[[Pick], None] | None, pick: Slotted
) -> int | None:
    task = pick.task
    attempt = store.start_acquiring(task.task_id, pick.queue, task.actor, pick.lease_id, message, pick.at)
    if attempt is not None and on_recorded is not None:
        on_recorded(_recorded(pick, attempt))
    return attempt


def _recorded(pick: Slotted, attempt: int) -> Pick:
    return Pick(pick.task.task_id, pick.queue, pick.lease_id, attempt)


def _take_slot(
    slots: Slots,
    book: QueueBook,
    queue: QueueKey,
    lease_seconds: int,
    result: ScheduleResult,
    events: TaskEvents,
) -> str | None:
    """The queue's slot, or None: the slot service answered busy or not at all (deferred to the
    next tick), or the slot is held though the database says it is free (``slot_held``)."""
    try:
        if queue not in book.limits:
            slots.ensure_limit(queue.slot_name, fail_fast=True)
            book.limits.add(queue)
        lease_id = slots.try_acquire(queue.slot_name, lease_seconds, fail_fast=True)
    except TemporaryError as exc:
        result.deferred.append(queue)  # asked again next tick
        events.pick_deferred(queue, str(exc))
        return None
    if lease_id is None:
        result.slot_held.append(queue)
    return lease_id


def _refresh_messages(
    write: MessageWrite, book: QueueBook, say: Messages, now: datetime, held: Mapping[str, str]
) -> int:
    changed: dict[str, str] = {}
    for queue in book.dirty:
        waiting = book.waiting.get(queue, [])
        texts = (
            {t.task_id: held[queue.cluster_id] for t in waiting}
            if queue.cluster_id in held
            else waiting_messages(waiting, book.last_actor.get(queue), say.locale)
        )
        for task_id, text in texts.items():
            if book.written.get(task_id) != text:
                changed[task_id] = text
    book.dirty.clear()
    if changed:
        write(changed, now)
        book.written.update(changed)
    return len(changed)
