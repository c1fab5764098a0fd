"""When the dispatcher's process collects its cyclic garbage: between two ticks, not inside one.

A full collection walks every object the process holds (~0.3-0.5 s at 400 running and 4 000
waiting tasks, `falcon_gc_pause_seconds{generation="2"}`) and stops every thread while it does.
Python starts one whenever enough objects have survived the younger collections, so it landed
in whatever ran then: at that scale one tick in twenty paid for one, which set the tick's p99.

So, for the dispatcher's run: the objects its imports made (which live as long as the process)
are frozen out of every collection; Python's own full collections are turned off; and the tick
loop runs one itself after a tick, at most every ``FULL_COLLECTION_SECONDS``, in the time before
the next. The younger generations are collected as before (under a millisecond each).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Python's own rule ran a full collection every ~8 s at the scale above; garbage in cycles
# lives at most this long.
FULL_COLLECTION_SECONDS = 10.0

# A generation-2 threshold no process reaches: it counts generation-1 collections.
_NEVER = 2**31 - 1


class FullCollections:
    """A full collection once ``every`` seconds have passed since the last one: for the time
    between two ticks (``DispatcherLoop``'s ``between_ticks``)."""

    def __init__(
        self,
        every: float = FULL_COLLECTION_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        collect: Callable[[], object] = gc.collect,
    ) -> None:
        self._every, self._monotonic, self._collect = every, monotonic, collect
        self._last = monotonic()

    def between_ticks(self) -> None:
        if self._monotonic() - self._last >= self._every:
            self._collect()
            self._last = self._monotonic()


@contextmanager
def full_collections_between_ticks(every: float = FULL_COLLECTION_SECONDS) -> Iterator[FullCollections]:
    """Within: what is alive now is frozen, and full collections run only when the returned
    ``FullCollections`` is asked between ticks. Python's thresholds and the frozen objects are
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
