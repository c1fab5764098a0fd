"""How soon a thread of the dispatcher's process gets the interpreter lock back.

The dispatcher's loops spend their turns in short round trips to the database and the APIs, in a
process whose other threads compute: the flow runs in threads, the reconcile round, the watches
reading JSON. A thread back from a round trip waits until the computing thread lets go of the
lock, which Python asks it to do once per switch interval: 5 ms by default, so a transaction of
five statements could wait 25 ms for the lock alone. ``benchmarks/bench_dispatch_pass.py --sizes
10000 --backends mariadb --busy-threads 1``: a pass that picks one task took 93 ms beside one
busy thread at 5 ms, 50 ms at 1 ms, and 25 ms with no thread beside. The computing threads pay
for handing the lock over more often in context switches: two threads of pure-Python work took
the same time at both intervals (0.167 and 0.168 s, best of three).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

DISPATCHER_SWITCH_INTERVAL = 0.001  # seconds


@contextmanager
def lock_handed_over_every(seconds: float = DISPATCHER_SWITCH_INTERVAL) -> Iterator[None]:
    """Within: a computing thread lets the interpreter lock go every ``seconds``; Python's
    interval is given back on the way out."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
