"""Picks whose slot is taken and whose record (the database's check and claim) is under way.

A pick's record is a short transaction, but on a busy database at scale a tick that recorded
two or three picks waited about 100 ms for them, most of its slowest turns. The deployed
dispatcher leaves them to threads beside the tick: it hands them over and goes on; the next
tick collects what they did (``done``) before it reads the database. Until then the pick's
queue counts as acquiring (``queues``), so it is never picked twice, and the database may still
count its task as waiting. Tests that look at a tick's picks have the hand-over wait.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from concurrent import futures
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import datetime

from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask

# A record's answer: the task's attempt, None when the database refused the pick, or the error.
Answer = int | None | Exception


@dataclass(frozen=True)
class Slotted:
    """A task picked at ``at`` whose queue's slot is held under ``lease_id``."""

    queue: QueueKey
    task: WaitingTask
    lease_id: str
    at: datetime


class PickRecords:
    """Records handed over, one per queue at most, on ``threads`` (on the caller's thread when
    None); ``wait``: each hand-over returns only once its records are done. Used by the tick's
    thread alone."""

    def __init__(self, threads: Executor | None = None, wait: bool = True) -> None:
        self._threads, self._wait = threads, wait
        self._under_way: dict[QueueKey, tuple[Slotted, Future[Answer]]] = {}

    def hand_over(self, picks: Iterable[Slotted], record: Callable[[Slotted], int | None]) -> None:
        """Record each pick, in a copy of the caller's context (its logs reach the same flow run)."""
        handed = []
        for pick in picks:
            assert pick.queue not in self._under_way, "a queue's pick is recorded once at a time"
            if self._threads is None:
                answer = _done(record, pick)
            else:
                answer = self._threads.submit(contextvars.copy_context().run, _answer, record, pick)
            self._under_way[pick.queue] = (pick, answer)
            handed.append(answer)
        if self._wait:
            futures.wait(handed)

    def queues(self) -> frozenset[QueueKey]:
        """The queues whose pick was handed over and not yet collected by ``done``."""
        return frozenset(self._under_way)

    def done(self) -> list[tuple[Slotted, Answer]]:
        """The picks whose record is over since the last call, each with its answer."""
        over = [queue for queue, (_, answer) in self._under_way.items() if answer.done()]
        return [(pick, answer.result()) for pick, answer in (self._under_way.pop(q) for q in over)]


def _answer(record: Callable[[Slotted], int | None], pick: Slotted) -> Answer:
    try:
        return record(pick)
    except Exception as exc:  # answered with the others, so that each recorded pick is kept
        return exc


def _done(record: Callable[[Slotted], int | None], pick: Slotted) -> Future[Answer]:
    answer: Future[Answer] = Future()
    answer.set_result(_answer(record, pick))
    return answer
