"""The tasks whose Job a reconcile round saw end, released on threads beside the round.

The round only reads: which running tasks ended, and how. What an ending means is written here
(``reconcile.release_ended``): its outcome recorded, its pool kept for the queue or marked for
deletion, and when kept, its Job deleted and its terminal status written, for such a task has
nothing left to wait for. Those are five or six transactions and a call to its cluster per
task; the round that saw the Jobs end hands them over and goes on, so following the other Jobs
and reaping never wait on them (when several Jobs of a cluster ended together, they were most of
a round's time), and a task whose pool was kept needs no release run (a flow run's start is
Prefect's time, seconds when it is busy). A task left releasing (its pool deleted, or a call that
failed) gets its release run from a later round, as any other; while its release here is under
way, a round starts none.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

logger = logging.getLogger(__name__)


class ReleasesBeside:
    """Runs each release handed over (``task id -> release() -> ended``) on ``threads`` threads."""

    def __init__(self, threads: int) -> None:
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="release")
        self._lock = threading.Lock()
        self._under_way: dict[str, Future[bool]] = {}  # in hand-over order

    def hand_over(self, releases: Mapping[str, Callable[[], bool]]) -> None:
        """Run these releases, each in a copy of the caller's context (its logs reach the same
        flow run); a task already under way is not released twice."""
        with self._lock:
            for task_id, release in releases.items():
                if task_id not in self._under_way:
                    run = contextvars.copy_context().run
                    self._under_way[task_id] = self._threads.submit(run, self._guarded, task_id, release)

    def under_way(self) -> frozenset[str]:
        """The tasks handed over and not yet collected by ``done``: no release run for them."""
        with self._lock:
            return frozenset(self._under_way)

    def done(self) -> dict[str, bool]:
        """The tasks whose release here is over since the last call, in hand-over order, each with
        whether it ended the task; the ones that did not are forgotten, for a release run."""
        with self._lock:
            over = [(task_id, run) for task_id, run in self._under_way.items() if run.done()]
            for task_id, _ in over:
                del self._under_way[task_id]
        return {task_id: run.result() for task_id, run in over}

    def close(self) -> None:
        """Wait for the releases under way."""
        self._threads.shutdown(wait=True)

    @staticmethod
    def _guarded(task_id: str, release: Callable[[], bool]) -> bool:
        try:
            return release()
        except Exception:  # a database outage, or a defect: the task is left for a release run
            logger.exception("event=release_in_round_failed task_id=%s", task_id)
            return False
