"""One Falcon process of the chaos run: the dispatcher flow, with the lifecycle and release flows in
threads of the same process, over services whose effects may be followed by this process's own
SIGKILL: right after a node-pool create or delete was accepted, a Job created, resumed or deleted, or a row
written, before the next step could record it. The chaos run also kills the process from outside
at random moments, and restarts it each time.

Run as ``python -m tests.chaos.worker`` from the project's root. Settings come from the FALCON_*
variables; the crash plan from CHAOS_SEED and CHAOS_CRASH_PROBABILITY; what happened (picks and
crashes, one JSON object a line) goes to the file CHAOS_EVENTS names.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from flows.dispatcher import dispatcher

from falcon.bootstrap import build_services, serving
from falcon.domain.model import Cluster
from falcon.services.context import Services
from falcon.settings import get_settings
from tests.integration.launcher import InProcessLauncher

# The calls after which a crash leaves an effect unrecorded, or a row half-way through its steps.
CRASH_AFTER = {
    "node_pools": {"create", "delete"},
    "jobs": {"create_job", "resume_job", "delete_job", "ensure_service"},
    "store": {
        "start_acquiring",
        "set_acquire_run",
        "write_ahead_pool",
        "pool_ready",
        "mark_dispatched",
        "mark_running",
        "start_releasing",
        "keep_pool",
        "start_deleting_pool",
        "finish",
    },
}


class EventLog:
    """Appends one JSON line per event and flushes it: it must be on disk before a SIGKILL."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
        self._lock = threading.Lock()

    def write(self, **event: Any) -> None:
        with self._lock:
            self._file.write(json.dumps({"t": time.time(), "pid": os.getpid(), **event}) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())


class Crashing:
    """Calls through to ``target``; after one of ``methods`` returns, SIGKILLs this process when
    ``crash_now`` says so. ``start_acquiring`` is also logged as a pick (rule-3 order is checked
    from the picks)."""

    def __init__(self, kind: str, target: Any, crash_now: Callable[[], bool], log: EventLog) -> None:
        self._kind, self._target, self._crash_now, self._log = kind, target, crash_now, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name not in CRASH_AFTER[self._kind] or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if name == "start_acquiring" and result is not None:
                queue = args[1]
                self._log.write(event="pick", task=args[0], queue=queue.slot_name, actor=args[2])
            if self._crash_now():
                self._log.write(event="crash", after=f"{self._kind}.{name}")
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return call


def chaotic(services: Services, crash_now: Callable[[], bool], log: EventLog) -> Services:
    jobs = services.jobs

    def jobs_of(cluster: Cluster) -> Any:
        return Crashing("jobs", jobs(cluster), crash_now, log)

    return replace(
        services,
        store=Crashing("store", services.store, crash_now, log),
        node_pools=Crashing("node_pools", services.node_pools, crash_now, log),
        jobs=jobs_of,
    )


def main() -> None:
    rng, lock = random.Random(int(os.environ["CHAOS_SEED"])), threading.Lock()
    chance = float(os.environ.get("CHAOS_CRASH_PROBABILITY", "0"))

    def crash_now() -> bool:
        with lock:
            return rng.random() < chance

    log = EventLog(os.environ["CHAOS_EVENTS"])
    log.write(event="start")
    settings = get_settings()
    with serving(chaotic(build_services(settings, InProcessLauncher()), crash_now, log)):
        while True:  # a dispatcher run that could not start (the Prefect server was away) is tried again
            try:
                dispatcher(run_seconds=3600, tick_seconds=settings.tick_seconds)
                return  # stopped by SIGTERM
            except Exception as exc:
                log.write(event="dispatcher_failed", error=str(exc)[:200])
                time.sleep(1)


if __name__ == "__main__":
    main()
