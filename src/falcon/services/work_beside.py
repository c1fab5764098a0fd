"""Work a reconcile round decided for some of its tasks, done on threads beside the round.

The round only reads: which running tasks ended and how, which tasks need a run started again.
What that means is written beside it, so following the other Jobs and reaping never wait on it:

- **Releases** (``reconcile.release_ended``): an ending's outcome recorded, its pool kept for the
  queue or marked for deletion, and when kept, its Job deleted and its terminal status written,
  for such a task has nothing left to wait for. Those are five or six transactions and a call to
  its cluster per task; when several Jobs of a cluster ended together they were most of a
  round's time, and a task whose pool was kept needs no release run (a flow run's start is
  Prefect's time, seconds when it is busy). A task left releasing (its pool deleted, or a call
  that failed) gets its release run from a later round, as any other; while its release here is
  under way, a round starts none.
- **Run starts** (``reconcile.start_run``): a task whose run died gets its slot again and a new
  attempt. Each start reads its row again and asks Prefect's API for the slot; after a
  dispatcher's handover the new one restarts every run the old one's stop ended, and those calls
  (1.5 s in one round at full size) were the round's worst turn.

Each task's work is under way at most once: a later round handing it over again is ignored
until ``done`` has told its end.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

logger = logging.getLogger(__name__)


class WorkBeside:
    """Runs each piece of work handed over (``task id -> work() -> done what it set out to``) on
    ``threads`` threads named after ``what``; a raise is logged as ``event=<what>_in_round_failed``."""

    def __init__(self, threads: int, what: str) -> None:
        self._what = what
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=what)
        self._lock = threading.Lock()
        self._under_way: dict[str, Future[bool]] = {}  # in hand-over order

    def hand_over(self, work: Mapping[str, Callable[[], bool]]) -> None:
        """Run this work, each piece in a copy of the caller's context (its logs reach the same
        flow run); a task whose work is already under way is not worked on twice."""
        with self._lock:
            for task_id, piece in work.items():
                if task_id not in self._under_way:
                    run = contextvars.copy_context().run
                    self._under_way[task_id] = self._threads.submit(run, self._guarded, task_id, piece)

    def under_way(self) -> frozenset[str]:
        """The tasks handed over and not yet collected by ``done``."""
        with self._lock:
            return frozenset(self._under_way)

    def done(self) -> dict[str, bool]:
        """The tasks whose work here is over since the last call, in hand-over order, each with
        whether it did what it set out to; a piece that raised counts as not done."""
        with self._lock:
            over = [(task_id, run) for task_id, run in self._under_way.items() if run.done()]
            for task_id, _ in over:
                del self._under_way[task_id]
        return {task_id: run.result() for task_id, run in over}

    def close(self) -> None:
        """Wait for the work under way."""
        self._threads.shutdown(wait=True)

    def _guarded(self, task_id: str, work: Callable[[], bool]) -> bool:
        try:
            return work()
        except Exception:  # a database outage, or a defect: a later round sees the task again
            logger.exception("event=%s_in_round_failed task_id=%s", self._what, task_id)
            return False
