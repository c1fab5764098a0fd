"""The reaper's marks and GKE calls, made on threads beside the reconcile round.

The reaper marks the pools it found expired and asks GKE to delete them, and confirms the
deletions asked for: a write and a GKE round trip per pool, and a call that waits for its
cluster's lock. At scale, with pools deleted every few seconds, those calls were most of the
round's ``reap`` step, and its tail was GKE's (a second for one answer), then the marks'
commits. They need no answer within the round: each mark is a compare-and-set on the pool's
idle state, made before its ask (a pool a task took meanwhile is left alone), and a deletion's
end is written by the call that sees it. So the round hands each cluster's calls over here and
goes on. Each cluster's calls run one batch at a time, as the cluster's lock would have them
anyway: a round's calls for a cluster whose earlier ones are still under way (GKE slow to
answer) wait for them, and a later round's supersede them: that round finds again the expired
pools not marked yet, confirms, and so asks GKE again for, every pool marked since (none was
confirmed yet), and the rest come back at their next confirmation.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

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
        self._busy: set[str] = set()  # clusters whose calls are under way
        self._next: dict[str, tuple[contextvars.Context, Sequence[Callable[[], None]]]] = {}
        self._closing = False

    def hand_over(self, calls: Calls) -> None:
        """Start each cluster's calls in a copy of the caller's context (its logs reach the same
        flow run), or once that cluster's calls under way are done."""
        with self._lock:
            for cluster_id, cluster_calls in calls.items():
                if not cluster_calls or self._closing:
                    continue
                if cluster_id in self._busy:
                    self._next[cluster_id] = (contextvars.copy_context(), cluster_calls)
                else:
                    self._start(cluster_id, contextvars.copy_context(), cluster_calls)

    def close(self) -> None:
        """Wait for the calls under way; those still waiting for them are dropped."""
        with self._lock:
            self._closing = True
            self._next.clear()
        self._threads.shutdown(wait=True)

    def _start(
        self, cluster_id: str, context: contextvars.Context, calls: Sequence[Callable[[], None]]
    ) -> None:
        self._busy.add(cluster_id)
        self._threads.submit(context.run, self._run, cluster_id, calls)

    def _run(self, cluster_id: str, calls: Sequence[Callable[[], None]]) -> None:
        try:
            _in_turn(calls)
        except Exception:  # a database outage, or a defect: the next round calls again
            logger.exception("event=reaper_calls_failed cluster_id=%s", cluster_id)
        finally:
            with self._lock:
                self._busy.discard(cluster_id)
                waiting = self._next.pop(cluster_id, None)
                if waiting is not None and not self._closing:
                    self._start(cluster_id, *waiting)


def _in_turn(calls: Sequence[Callable[[], None]]) -> None:
    for call in calls:
        call()
