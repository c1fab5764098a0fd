"""Runs the lifecycle and release flows in threads of the test process: real flow runs (a
Prefect server records them), no runner or deployment needed."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from typing import Any


class InProcessLauncher:
    def __init__(
        self, acquire: Callable[..., Any] | None = None, release: Callable[..., Any] | None = None
    ) -> None:
        if acquire is None or release is None:
            from flows.lifecycle import task_lifecycle, task_release

            acquire, release = acquire or task_lifecycle, release or task_release
        self._acquire, self._release = acquire, release
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._warm_runs = itertools.count(1)

    def _start(self, key: str, target: Callable[..., Any], **kwargs: Any) -> str:
        with self._lock:
            if key not in self._threads:
                thread = threading.Thread(
                    target=self._quietly, args=(target,), kwargs=kwargs, daemon=True, name=key
                )
                self._threads[key] = thread
                thread.start()
        return key

    @staticmethod
    def _quietly(target: Callable[..., Any], **kwargs: Any) -> None:
        # The flow run records its own failure; the dispatcher restarts it.
        with contextlib.suppress(Exception):
            target(**kwargs)

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        return self._start(f"acquire-{task_id}-{attempt}", self._acquire, task_id=task_id, lease_id=lease_id)

    def start_release(self, task_id: str, attempt: int) -> str:
        return self._start(f"release-{task_id}-{attempt}", self._release, task_id=task_id)

    def start_warm(self, queue: Any) -> str:
        from flows.warming import warm_pools

        key = f"warm-{queue.cluster_id}-{queue.topology}-{next(self._warm_runs)}"
        return self._start(key, warm_pools, cluster_id=queue.cluster_id, topology=queue.topology)

    def is_alive(self, run_id: str) -> bool:
        thread = self._threads.get(run_id)
        return thread is not None and thread.is_alive()

    def join(self, timeout: float) -> list[str]:
        """Wait for every run started; returns the names of those still running after ``timeout``."""
        for thread in list(self._threads.values()):
            thread.join(timeout)
        return [name for name, thread in self._threads.items() if thread.is_alive()]
