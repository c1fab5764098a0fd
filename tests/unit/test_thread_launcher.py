"""ThreadLauncher: flow runs in a bounded pool of this process's threads (FALCON_RUNS_IN=dispatcher).

The flows here are plain functions standing in for the Prefect flows at the edge of the unit;
what is tested is the launcher's own bookkeeping: one run per (task, attempt), liveness by owner,
a bound on runs at once, and a cooperative stop through the steps' clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from falcon.adapters.clock import StoppableClock
from falcon.adapters.runs import ThreadLauncher
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


def _launcher(threads: int = 4, flow: Callable[..., Any] | None = None) -> tuple[ThreadLauncher, Gate]:
    gate = Gate()
    run = flow or gate
    return ThreadLauncher((run, run, run), threads, owner="00000000-0000-4000-8000-000000000001"), gate


def test_a_run_is_alive_until_its_flow_returns() -> None:
    launcher, gate = _launcher()
    run_id = launcher.start_acquire("t1", "lease-1", 1)
    assert run_id == "00000000-0000-4000-8000-000000000001/acquire-t1-1"
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

    launcher = ThreadLauncher((waiting_flow, waiting_flow, waiting_flow), 1, owner="o")
    holder["launcher"] = launcher
    running = launcher.start_acquire("t1", "", 1)
    queued = launcher.start_acquire("t2", "", 1)
    _wait_for(started.is_set)
    assert launcher.stop(2) == []
    assert stopped == ["t1"], "the queued run never started"
    assert not launcher.is_alive(running) and not launcher.is_alive(queued)


def test_stop_reports_a_run_that_does_not_reach_a_wait_in_time() -> None:
    launcher, gate = _launcher(threads=1)
    launcher.start_acquire("t1", "", 1)
    _wait_for(lambda: len(gate.calls) == 1)
    assert launcher.stop(0.05) == ["acquire-t1-1"]
    gate.open.set()


@pytest.mark.parametrize("run_id", ["process-1234/acquire-t1-1", "not-a-uuid/release-t1-1"])
def test_a_run_of_an_owner_outside_any_flow_run_is_not_alive_elsewhere(run_id: str) -> None:
    launcher, _ = _launcher()
    assert not launcher.is_alive(run_id)
    launcher.stop(1)
