"""Keep a queue-slot lease alive while a lifecycle run acquires resources, then give it back."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def held_lease(
    lease_id: str, lease_seconds: int, renew: Callable[[str, int], bool], release: Callable[[str], None]
) -> Iterator[None]:
    """Renew every 3/4 of the lease in a daemon thread; release on exit, whatever happened."""
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(lease_seconds * 0.75):
            try:
                if not renew(lease_id, lease_seconds):
                    return  # expired: the dispatcher sees the drift and repairs it
            except Exception:
                continue

    thread = threading.Thread(target=keep, daemon=True, name=f"lease-{lease_id}")
    if lease_id:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if lease_id:
            release(lease_id)
