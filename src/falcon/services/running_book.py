"""The running tasks as the reconcile round last read them, so that a round reads what changed.

A round follows every running task's Job each second. Reading every running row each time was
the round's heaviest step at scale (at 1 000 running tasks, a thousand rows decoded every
second, for the one or two that changed). What following needs of a running row does not
change while it runs (its Job's name, its dispatch time and timeout, its queue), but for one
thing upstream may write at any moment: Aborting. So the round reads, in its one statement, the
tasks that reached Running since its last read (their running_at, with ``OVERLAP`` for the
clocks of the processes that wrote it and for their commits), the running ones set to
Aborting, and how many run in all. The count is the safety net: when it is not the number the
book holds (a task reached Running with a running_at older than the overlap, or another step
moved one out of Running), the book reads every running row again, in the same round. For what
a count cannot see (a row moved in as another moved out; a column upstream rewrote), each read
also takes again a share of the tasks the book holds, so that every one is read again within
``RECHECK_ROUNDS`` rounds: a task no longer running is dropped (and the count then sends the book
back to every row), a rewritten one is taken as it reads. Reading every row every minute
instead took 20 ms at 1 000 running tasks on an idle MariaDB (36 ms beside a busy thread), and
was the round's costliest turn in CPU; its share costs each round a few rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from falcon.domain.model import RunningChanges, RunningRead, RunningTask
from falcon.domain.status import Status
from falcon.services.ports import TaskStore

logger = logging.getLogger(__name__)

# How far before the last read a task's running_at may lie and still be read as new: the writer's
# clock against the dispatcher's, and a commit that lands after the read that began before it.
OVERLAP = timedelta(seconds=10)

# Every task the book holds is read again within this many rounds (a round a second: a minute).
RECHECK_ROUNDS = 60


def recheck_share(held: int, rounds: int = RECHECK_ROUNDS) -> int:
    """How many of ``held`` tasks a round reads again, so that all are read within ``rounds``."""
    return -(-held // rounds)


class RunningBook:
    """The running tasks by id. ``update`` brings it up to date; ``forget`` drops tasks the round
    moved out of Running (or found moved by another step); ``leaving`` drops tasks whose end the
    round handed over to be written beside it, which may still read as running until ``settled``."""

    def __init__(self, recheck_rounds: int = RECHECK_ROUNDS) -> None:
        self._tasks: dict[str, RunningTask] = {}
        self._leaving: set[str] = set()
        self._recheck_rounds = recheck_rounds
        self._unchecked: list[str] = []  # the tasks not read again yet in this pass over the book
        self._read_at: datetime | None = None  # dispatcher clock, at the last read

    def next_read(self) -> RunningRead:
        """What the round's read (``TaskStore.round_snapshot``) is to take of the running tasks:
        every one at first, then those that reached Running since the last read and the next
        share of the book to read again."""
        if self._read_at is None:
            return RunningRead(since=None)
        if not self._unchecked:
            self._unchecked = list(self._tasks)
        share = recheck_share(len(self._tasks), self._recheck_rounds)
        recheck, self._unchecked = self._unchecked[:share], self._unchecked[share:]
        return RunningRead(self._read_at - OVERLAP, tuple(recheck))

    def update(
        self, changes: RunningChanges, asked: RunningRead, now: datetime, store: TaskStore
    ) -> list[RunningTask]:
        """The running tasks now, from ``changes`` read as ``asked`` (at ``now``, by the dispatcher's
        clock); every running row is read again from ``store`` when the changes disagree with the book."""
        if asked.since is None:
            return self._fill(changes.new, now)
        for task_id in set(asked.recheck).difference(task.id for task in changes.rechecked):
            self._tasks.pop(task_id, None)  # no longer running: the count tells whether it ended unseen
        self._take(changes.rechecked)
        self._take(changes.new)
        for task_id in changes.aborting & self._tasks.keys():
            self._tasks[task_id] = replace(self._tasks[task_id], status=Status.ABORTING)
        held = len(self._tasks)
        if not held <= changes.count <= held + len(self._leaving) or not (
            changes.aborting - self._leaving <= self._tasks.keys()
        ):
            logger.info("event=running_book_drift book=%d running=%d", held, changes.count)
            return self._fill(store.running_tasks(), now)
        self._read_at = now
        return list(self._tasks.values())

    def forget(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            self._tasks.pop(task_id, None)

    def leaving(self, task_ids: Iterable[str]) -> None:
        """Tasks whose end is being written beside the round: not followed again meanwhile."""
        for task_id in task_ids:
            self._tasks.pop(task_id, None)
            self._leaving.add(task_id)

    def settled(self, task_ids: Iterable[str]) -> None:
        """Those writes are over (a task still running after them, its write failed, is read
        again: the count then disagrees with the book)."""
        self._leaving.difference_update(task_ids)

    def _take(self, read: Iterable[RunningTask]) -> None:
        self._tasks.update((task.id, task) for task in read if task.id not in self._leaving)

    def _fill(self, every: Iterable[RunningTask], now: datetime) -> list[RunningTask]:
        self._tasks = {}
        self._take(every)
        self._read_at = now
        return list(self._tasks.values())
