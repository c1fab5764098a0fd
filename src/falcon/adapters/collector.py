"""When the dispatcher's process collects its cyclic garbage: between turns, not inside one.

A full collection walks every object the process holds (~0.1-0.5 s at 400-1 000 running and
4 000-10 000 waiting tasks, `falcon_gc_pause_seconds{generation="2"}`) and stops every thread
while it does. Python starts one whenever enough objects have survived the younger collections,
so it landed in whatever ran then: at that scale one tick in twenty paid for one, which set the
tick's p99.

So, for the dispatcher's run: the objects its imports made (which live as long as the process)
are frozen out of every collection; Python's own full collections are turned off; and one runs
at most every ``FULL_COLLECTION_SECONDS``, after a loop's turn, when none of the dispatcher's
loops (the tick, the reconcile round, housekeeping: each a thread) is in a turn. Run after the
tick alone, it landed inside the round that turned beside it, one round in ten. The younger
generations are collected as before (under a millisecond each).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Python's own rule ran a full collection every ~8 s at the scale above; garbage in cycles
# lives at most this long while the loops leave a moment between their turns.
FULL_COLLECTION_SECONDS = 10.0

# Loops whose turns overlap for this many periods in a row get their collection all the same:
# garbage in cycles must not grow without bound.
OVERDUE_PERIODS = 3

# A generation-2 threshold no process reaches: it counts generation-1 collections.
_NEVER = 2**31 - 1


class FullCollections:
    """A full collection once ``every`` seconds have passed since the last one, at a moment when
    no turn is under way: each loop runs its turns inside ``turn()`` and calls ``between_ticks``
    after each (``DispatcherLoop``)."""

    def __init__(
        self,
        every: float = FULL_COLLECTION_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        collect: Callable[[], object] = gc.collect,
    ) -> None:
        self._every, self._monotonic, self._collect = every, monotonic, collect
        self._last = monotonic()
        self._lock = threading.Lock()
        self._turns = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        """A loop's turn: no full collection starts inside it (one under way ends first)."""
        with self._lock:
            self._turns += 1
        try:
            yield
        finally:
            with self._lock:
                self._turns -= 1

    def between_ticks(self) -> None:
        with self._lock:
            since = self._monotonic() - self._last
            if since < self._every or (self._turns and since < self._every * OVERDUE_PERIODS):
                return
            self._collect()
            self._last = self._monotonic()


@contextmanager
def full_collections_between_ticks(every: float = FULL_COLLECTION_SECONDS) -> Iterator[FullCollections]:
    """Within: what is alive now is frozen, and full collections run only when the returned
    ``FullCollections`` is asked between turns. Python's thresholds and the frozen objects are
    given back on the way out."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(thresholds[0], thresholds[1], _NEVER)
    try:
        yield FullCollections(every)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
