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
moved one out of Running), the book reads every running row again, in the same round. It does
so every ``FULL_READ_SECONDS`` too, for what a count cannot see (a row moved in as another
moved out; a column upstream rewrote).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from falcon.domain.model import RunningChanges, RunningTask
from falcon.domain.status import Status
from falcon.services.ports import TaskStore

logger = logging.getLogger(__name__)

# How far before the last read a task's running_at may lie and still be read as new: the writer's
# clock against the dispatcher's, and a commit that lands after the read that began before it.
OVERLAP = timedelta(seconds=10)

# Every running row is read again at least this often (dispatcher clock seconds).
FULL_READ_SECONDS = 60.0

_NEVER = datetime.min.replace(tzinfo=UTC)  # before the first read: a full one is due


class RunningBook:
    """The running tasks by id. ``update`` brings it up to date; ``forget`` drops tasks the round
    moved out of Running (or found moved by another step); ``leaving`` drops tasks whose end the
    round handed over to be written beside it, which may still read as running until ``settled``."""

    def __init__(self, full_read_seconds: float = FULL_READ_SECONDS) -> None:
        self._tasks: dict[str, RunningTask] = {}
        self._leaving: set[str] = set()
        self._full_read_seconds = full_read_seconds
        self._read_at = _NEVER  # dispatcher clock, at the last read
        self._full_at = _NEVER  # ... and at the last full one

    def since(self, now: datetime) -> datetime | None:
        """From when the round's read (``TaskStore.round_snapshot``) is to take the tasks that
        reached Running: ``None``, every running task, when a full read is due."""
        if (now - self._full_at).total_seconds() >= self._full_read_seconds:
            return None
        return self._read_at - OVERLAP

    def update(
        self, changes: RunningChanges, since: datetime | None, now: datetime, store: TaskStore
    ) -> list[RunningTask]:
        """The running tasks now, from ``changes`` read from ``since``; every running row is read
        again from ``store`` when the changes disagree with the book."""
        if since is None:
            return self._fill(changes.new, now)
        self._tasks.update((task.id, task) for task in changes.new if task.id not in self._leaving)
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

    def _fill(self, every: Iterable[RunningTask], now: datetime) -> list[RunningTask]:
        self._tasks = {task.id: task for task in every if task.id not in self._leaving}
        self._read_at = self._full_at = now
        return list(self._tasks.values())
