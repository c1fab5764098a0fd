"""The reaper's GKE calls, made on threads beside the reconcile round.

The reaper asks GKE to delete the pools it marked and confirms the deletions asked for: one GKE
round trip per pool, and a call that waits for its cluster's lock. At scale, with pools deleted
every few seconds, those calls were most of the round's ``reap`` step, and its tail was GKE's
(a second for one answer). They need no answer within the round: the marks are in the database
first, and a deletion's end is written by the call that sees it. So the round hands each
cluster's calls over here and goes on. A cluster whose calls from an earlier round are still
under way gets none more: the next round that finds its pools due calls again (a marked pool not
yet asked for is asked again when its deletion is confirmed: ``reconcile._confirm_deleted``).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

logger = logging.getLogger(__name__)

Calls = Mapping[str, Sequence[Callable[[], None]]]  # cluster id -> its calls, to make in turn


def one_cluster_after_another(calls: Calls) -> None:
    """Make every call now, on the caller's thread (``reap_idle_pools``' default)."""
    for cluster_calls in calls.values():
        _in_turn(cluster_calls)


class ReaperCallsBeside:
    """Makes each cluster's calls in turn, the clusters' at once, on ``threads`` threads."""

    def __init__(self, threads: int) -> None:
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="reap")
        self._lock = threading.Lock()
        self._under_way: dict[str, Future[None]] = {}

    def hand_over(self, calls: Calls) -> None:
        """Start each cluster's calls in a copy of the caller's context (its logs reach the same
        flow run), unless that cluster's calls from before are still under way."""
        with self._lock:
            for cluster_id, cluster_calls in calls.items():
                earlier = self._under_way.get(cluster_id)
                if cluster_calls and (earlier is None or earlier.done()):
                    run = contextvars.copy_context().run
                    self._under_way[cluster_id] = self._threads.submit(run, self._guarded, cluster_calls)

    def close(self) -> None:
        """Wait for the calls under way."""
        self._threads.shutdown(wait=True)

    @staticmethod
    def _guarded(calls: Sequence[Callable[[], None]]) -> None:
        try:
            _in_turn(calls)
        except Exception:  # a database outage, or a defect: the next round calls again
            logger.exception("event=reaper_calls_failed")


def _in_turn(calls: Sequence[Callable[[], None]]) -> None:
    for call in calls:
        call()
