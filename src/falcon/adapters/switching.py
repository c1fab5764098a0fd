"""How often the dispatcher's process hands the interpreter lock from one thread to another.

The dispatcher's loops spend most of a turn waiting for answers (the database, the Kubernetes
API), and a thread whose answer came back must then take the interpreter lock again. A thread
that holds it is made to let go only every ``sys.getswitchinterval()``, 5 ms by default: beside
a single busy thread (a lifecycle run's step, a watch decoding events, the other loop's turn)
each round trip waited up to 5 ms more for it. A round makes a dozen round trips, and at 1 000
running tasks its database time was 38-49 ms at the median. A loopback round trip next to a
thread that counts in a loop (benchmarks/bench_switch_interval.py): ~5 ms at 5 ms, ~1 ms at
1 ms, 0.03 ms alone.

A shorter interval costs CPU-bound threads a hand-over more often (a few microseconds each),
which the dispatcher's process, waiting most of the time, can spare.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

DISPATCHER_SWITCH_SECONDS = 0.001


@contextmanager
def switching_every(seconds: float = DISPATCHER_SWITCH_SECONDS) -> Iterator[None]:
    """Within: the interpreter lock changes hands every ``seconds``; Python's interval after."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
