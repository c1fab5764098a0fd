"""The queues' observations the reaper prices idle pools from, read on a thread beside the round.

Each pool that goes idle is priced once, from its queue's history (arrivals, creations,
deletions): a read of four statements. At scale pools go idle every second, and traces of the
slowest rounds found most of them spending 25-49 ms in that read. The price needs no answer
within the round: it is a horizon of minutes, and a pool not priced yet is kept. So the
deployed dispatcher asks here for the queues it needs, and prices their pools at a later round,
from observations read at most ``FRESH_SECONDS`` before: what the price weighs moves little in
that time (a few arrivals among the dozens it averages). Tests that look at a round's reaping
read within the round, as ``reap_idle_pools`` does by default.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor

from falcon.domain.model import QueueKey
from falcon.domain.pool_economics import QueueObservations

logger = logging.getLogger(__name__)

FRESH_SECONDS = 10.0  # how old a queue's observations may be when they price a pool

Observe = Callable[[Collection[QueueKey]], Mapping[QueueKey, QueueObservations]]


class ObservationsBeside:
    """Answers with the fresh observations it holds, and reads the rest on a thread of its own,
    one read at a time. ``read``: the queues' observations from the database; ``monotonic``:
    the clock their freshness is counted on."""

    def __init__(self, read: Observe, monotonic: Callable[[], float]) -> None:
        self._read, self._monotonic = read, monotonic
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="observe")
        self._lock = threading.Lock()
        self._held: dict[QueueKey, tuple[float, QueueObservations]] = {}  # read at, observations
        self._reading = False
        self._closing = False

    def __call__(self, queues: Collection[QueueKey]) -> dict[QueueKey, QueueObservations]:
        """The observations of ``queues`` read within ``FRESH_SECONDS``; the others are read
        beside, for a later call."""
        now = self._monotonic()
        with self._lock:
            fresh = {q: held for q in queues if (held := self._fresh(q, now)) is not None}
            missing = [q for q in queues if q not in fresh]
            if missing and not self._reading and not self._closing:
                self._reading = True
                self._thread.submit(contextvars.copy_context().run, self._read_beside, missing)
        return fresh

    def close(self) -> None:
        """Wait for the read under way."""
        with self._lock:
            self._closing = True
        self._thread.shutdown(wait=True)

    def _fresh(self, queue: QueueKey, now: float) -> QueueObservations | None:
        held = self._held.get(queue)
        return held[1] if held is not None and now - held[0] < FRESH_SECONDS else None

    def _read_beside(self, queues: list[QueueKey]) -> None:
        read_at = self._monotonic()
        try:
            seen = self._read(queues)
        except Exception:  # a database outage, or a defect: the next round asks again
            logger.exception("event=observations_read_failed queues=%d", len(queues))
            seen = {}
        with self._lock:
            self._reading = False
            now = self._monotonic()
            self._held = {q: held for q, held in self._held.items() if now - held[0] < FRESH_SECONDS}
            self._held.update({q: (read_at, s) for q, s in seen.items()})
