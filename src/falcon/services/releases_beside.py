"""The tasks whose pool a reconcile round kept, released on threads beside the round.

Such a task has nothing left to wait for: its pods are done and its pool is its queue's. What is
left is its Job's deletion and its terminal status, a call to its cluster and a write. The round
that saw the Job end hands the task over here and goes on, so following the other Jobs and
reaping never wait on Job deletions (when many Jobs end together, they were the tail of a
round's time), and the task needs no release run (a flow run's start is Prefect's time, seconds
when it is busy). A release that fails leaves its task releasing: the next round starts a
release run for it, as for any other; while its release here is under way, a round starts none.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

logger = logging.getLogger(__name__)


class ReleasesBeside:
    """Runs ``release(task_id) -> ended`` for each task handed over, on ``threads`` threads."""

    def __init__(self, release: Callable[[str], bool], threads: int) -> None:
        self._release = release
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="release")
        self._lock = threading.Lock()
        self._under_way: dict[str, Future[bool]] = {}  # in hand-over order

    def hand_over(self, task_ids: Iterable[str]) -> None:
        """Release these tasks, each in a copy of the caller's context (its logs reach the same
        flow run); a task already under way is not released twice."""
        with self._lock:
            for task_id in task_ids:
                if task_id not in self._under_way:
                    run = contextvars.copy_context().run
                    self._under_way[task_id] = self._threads.submit(run, self._guarded, task_id)

    def under_way(self) -> frozenset[str]:
        """The tasks handed over and not yet collected by ``ended``: no release run for them."""
        with self._lock:
            return frozenset(self._under_way)

    def ended(self) -> list[str]:
        """The tasks whose release here ended them since the last call, in hand-over order; the
        ones whose release failed are forgotten, for a release run to finish."""
        with self._lock:
            done = [(task_id, run) for task_id, run in self._under_way.items() if run.done()]
            for task_id, _ in done:
                del self._under_way[task_id]
        return [task_id for task_id, run in done if run.result()]

    def close(self) -> None:
        """Wait for the releases under way."""
        self._threads.shutdown(wait=True)

    def _guarded(self, task_id: str) -> bool:
        try:
            return self._release(task_id)
        except Exception:  # a database outage, or a defect: the task stays releasing for a run
            logger.exception("event=release_in_round_failed task_id=%s", task_id)
            return False
