"""The process's console log, written by a thread of its own.

Prefect's console handler (on the root logger) renders each record and writes it to stdout while
holding the handler's lock. Under a runner (``prefect serve``, ``falcon local``) or a worker, a
flow run's stdout is a pipe the runner copies line by line: when the runner falls behind, the
write waits, and so does every thread that logs after it. In the dispatcher's process that is the
tick, the reconcile round and every flow run in its threads (a profile at 400 + 4 000 found the
round's threads queued on that lock). A ``QueueHandler`` (the logging module's own remedy for a
handler that may block) takes the record instead, and one thread writes them, in order.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from logging.handlers import QueueHandler, QueueListener


@contextmanager
def console_beside(logger: logging.Logger | None = None) -> Iterator[None]:
    """For the block, ``logger``'s (default: the root's) stream handlers write on a thread of
    their own; at the end what is queued is written and the handlers are put back."""
    target = logger or logging.getLogger()
    streams: list[logging.Handler] = [h for h in target.handlers if isinstance(h, logging.StreamHandler)]
    swaps: list[tuple[logging.Handler, QueueHandler, QueueListener]] = []
    for handler in streams:
        records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        hand_over = QueueHandler(records)
        hand_over.setLevel(handler.level)
        swaps.append((handler, hand_over, QueueListener(records, handler, respect_handler_level=True)))
    for handler, hand_over, listener in swaps:
        listener.start()
        target.addHandler(hand_over)
        target.removeHandler(handler)
    try:
        yield
    finally:
        for handler, hand_over, listener in swaps:
            target.addHandler(handler)
            target.removeHandler(hand_over)
            listener.stop()  # writes what is queued first
