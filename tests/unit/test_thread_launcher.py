"""ThreadLauncher: flow runs in a bounded pool of this process's threads (FALCON_RUNS_IN=dispatcher).

The flows here are plain functions standing in for the Prefect flows at the edge of the unit, and
the heartbeats go to the unit tests' in-memory store; what is tested is the launcher's own
bookkeeping: one run per (task, attempt), liveness by owner and heartbeat, a bound on runs at
once, and a cooperative stop through the steps' clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED,
    temporary_settings,
)
from tests.unit.fakes import MemoryTaskStore

from falcon.adapters.clock import StoppableClock, utc_now
from falcon.adapters.runs import OWNER_STALE_SECONDS, ThreadLauncher
from falcon.domain.lifecycle import RunStopped
from falcon.domain.model import QueueKey


def _wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


class Gate:
    """A flow that records its calls and runs until ``open`` is set."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.open = threading.Event()

    def __call__(self, **parameters: Any) -> str:
        self.calls.append(parameters)
        self.open.wait(5)
        return "done"


def _launcher(
    threads: int = 4, flow: Callable[..., Any] | None = None, owners: MemoryTaskStore | None = None
) -> tuple[ThreadLauncher, Gate]:
    gate = Gate()
    run = flow or gate
    return ThreadLauncher((run, run, run), threads, owners or MemoryTaskStore()), gate


def test_a_run_is_alive_until_its_flow_returns() -> None:
    launcher, gate = _launcher()
    run_id = launcher.start_acquire("t1", "lease-1", 1)
    assert run_id == f"{launcher.owner}/acquire-t1-1"
    _wait_for(lambda: len(gate.calls) == 1)
    assert gate.calls == [{"task_id": "t1", "lease_id": "lease-1"}]
    assert launcher.is_alive(run_id)
    gate.open.set()
    _wait_for(lambda: not launcher.is_alive(run_id))
    launcher.stop(1)


def test_the_same_attempt_started_twice_runs_once() -> None:
    launcher, gate = _launcher()
    first = launcher.start_release("t1", 2)
    second = launcher.start_release("t1", 2)
    third = launcher.start_release("t1", 3)
    assert first == second != third
    _wait_for(lambda: len(gate.calls) == 2)
    gate.open.set()
    _wait_for(lambda: not launcher.is_alive(third))
    assert gate.calls == [{"task_id": "t1"}, {"task_id": "t1"}]
    launcher.stop(1)


def test_runs_beyond_the_thread_bound_wait_and_count_as_alive() -> None:
    launcher, gate = _launcher(threads=2)
    runs = [launcher.start_acquire(f"t{n}", "", 1) for n in range(5)]
    _wait_for(lambda: len(gate.calls) == 2)
    time.sleep(0.05)
    assert len(gate.calls) == 2, "only as many runs execute at once as there are threads"
    assert all(launcher.is_alive(run) for run in runs)
    gate.open.set()
    _wait_for(lambda: not any(launcher.is_alive(run) for run in runs))
    assert len(gate.calls) == 5
    launcher.stop(1)


def test_warm_runs_of_one_queue_are_distinct_runs() -> None:
    launcher, gate = _launcher()
    gate.open.set()
    queue = QueueKey("c1", "2x4")
    assert launcher.start_warm(queue) != launcher.start_warm(queue)
    _wait_for(lambda: len(gate.calls) == 2)
    assert gate.calls[0] == {"cluster_id": "c1", "topology": "2x4"}
    launcher.stop(1)


def test_stop_ends_runs_at_their_next_wait_and_skips_queued_ones() -> None:
    stopped: list[str] = []
    holder: dict[str, ThreadLauncher] = {}
    started = threading.Event()

    def waiting_flow(**parameters: Any) -> None:
        clock = StoppableClock(holder["launcher"].stopping)
        started.set()
        try:
            while True:
                clock.sleep(0.01)
        except RunStopped:
            stopped.append(parameters["task_id"])
            raise

    owners = MemoryTaskStore()
    launcher = ThreadLauncher((waiting_flow, waiting_flow, waiting_flow), 1, owners)
    holder["launcher"] = launcher
    running = launcher.start_acquire("t1", "", 1)
    queued = launcher.start_acquire("t2", "", 1)
    _wait_for(started.is_set)
    assert launcher.stop(2) == []
    successor, _ = _launcher(owners=owners)
    assert not successor.is_alive(running), "all stopped: its owner is gone at once, not 15 s later"
    successor.stop(1)
    assert stopped == ["t1"], "the queued run never started"
    assert not launcher.is_alive(running) and not launcher.is_alive(queued)


def test_stop_reports_a_run_that_does_not_reach_a_wait_in_time() -> None:
    launcher, gate = _launcher(threads=1)
    launcher.start_acquire("t1", "", 1)
    _wait_for(lambda: len(gate.calls) == 1)
    assert launcher.stop(0.05) == ["acquire-t1-1"]
    gate.open.set()


def test_another_owners_runs_are_alive_while_it_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its beat is read at most once per BEAT_READ_SECONDS, however many of its runs are asked about."""
    monkeypatch.setattr("falcon.adapters.runs.BEAT_READ_SECONDS", 0.2)
    owners = MemoryTaskStore()
    first, _ = _launcher(owners=owners)
    second, _ = _launcher(owners=owners)
    assert owners.last_beat(first.owner) is not None, "it beats as soon as it exists"
    run = f"{first.owner}/acquire-t1-1"
    assert second.is_alive(run)
    owners.beat(first.owner, utc_now() - timedelta(seconds=OWNER_STALE_SECONDS + 1))  # it went silent
    assert second.is_alive(f"{first.owner}/acquire-t2-1"), "the beat read a moment ago"
    time.sleep(0.25)
    assert not second.is_alive(run)
    assert not second.is_alive("never-seen/acquire-t1-1")
    first.stop(1)
    second.stop(1)


def test_the_beat_goes_on_every_few_seconds_until_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("falcon.adapters.runs.BEAT_SECONDS", 0.01)
    owners = MemoryTaskStore()
    launcher, _ = _launcher(owners=owners)
    first = owners.last_beat(launcher.owner)
    _wait_for(lambda: owners.last_beat(launcher.owner) != first)
    launcher.stop(1)
    time.sleep(0.05)
    last = owners.last_beat(launcher.owner)
    time.sleep(0.05)
    assert owners.last_beat(launcher.owner) == last, "a stopped launcher beats no more"


def test_its_runs_use_the_prefect_settings_it_was_made_under() -> None:
    """A new thread does not inherit ``temporary_settings``: without the launcher's own, its runs
    would not see the API (the economics benchmark's Prefect on PostgreSQL is set so)."""
    seen: list[str | None] = []
    settings = {
        PREFECT_API_URL: "http://prefect.test/api",
        PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED: False,  # the shared client is entered, not used
    }
    with temporary_settings(settings):
        launcher, _ = _launcher(threads=1, flow=lambda **_: seen.append(PREFECT_API_URL.value()))
    run_id = launcher.start_acquire("t1", "", 1)
    _wait_for(lambda: not launcher.is_alive(run_id))
    assert seen == ["http://prefect.test/api"]
    assert launcher.stop(5) == []
