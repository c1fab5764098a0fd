"""Keep a queue-slot lease alive while a lifecycle run acquires resources, then give it back."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from falcon.services.ports import Slots


@contextmanager
def held_lease(lease_id: str, lease_seconds: int, slots: Slots) -> Iterator[None]:
    """Renew every 3/4 of the lease in a daemon thread; release on exit, whatever happened."""
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(lease_seconds * 0.75):
            try:
                if not slots.renew(lease_id, lease_seconds):
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
            slots.release(lease_id)
