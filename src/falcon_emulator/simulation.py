"""The background loop: operations, ServiceAccount and Job controllers, scheduler, flex-start autoscaler,
kubelet."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from falcon_emulator.autoscaler import autoscale
from falcon_emulator.events import expire_events
from falcon_emulator.jobs import run_jobs
from falcon_emulator.kubelet import run_kubelet
from falcon_emulator.nodepools import advance_operations
from falcon_emulator.scheduler import schedule
from falcon_emulator.service_accounts import sync_service_accounts
from falcon_emulator.state import ClusterState, EmulatorState

log = logging.getLogger(__name__)
_GC_INTERVAL_SECONDS = 10.0


def tick(state: EmulatorState) -> None:
    """Advance every simulated controller by one step (holds the state lock)."""
    with state.lock:
        now = state.now()
        advance_operations(state, now)
        for cluster in state.clusters.values():
            sync_service_accounts(cluster)
            run_jobs(state, cluster, now)
            schedule(state, cluster, now)
            autoscale(state, cluster, now)
            run_kubelet(state, cluster, now)
            _collect_garbage(state, cluster, now)


def _collect_garbage(state: EmulatorState, cluster: ClusterState, now: float) -> None:
    if now >= cluster.next_gc:
        cluster.next_gc = now + _GC_INTERVAL_SECONDS
        expire_events(cluster, state.config.event_ttl_seconds, time.time())


async def run_loop(state: EmulatorState, stop: asyncio.Event) -> None:
    """Tick every config.tickSeconds until stop is set; a failing tick is logged, never fatal."""
    while not stop.is_set():
        try:
            tick(state)
        except Exception:
            log.exception("emulator simulation tick failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=state.config.tick_seconds)
