"""Restarting dead lifecycle runs without ever letting two attempts act (found by the chaos run:
a restart decided on a stale read started a run for a task that had meanwhile run and ended,
and that run submitted its Job a second time), nor asking the slot service for a run that
ended after the round's read."""

from __future__ import annotations

import threading

import pytest
from tests.unit.fakes import acquiring, rounds_until, running

from falcon.domain.errors import TemporaryError
from falcon.domain.lifecycle import Phase, RunSuperseded
from falcon.services import acquisition, reconcile
from falcon.services.context import Services, load_attempt
from falcon.services.dispatching import Dispatcher


def test_the_recorded_attempt_loads_its_task(svc: Services) -> None:
    acquiring(svc, "t1")
    lease = svc.store.progress["t1"].lease_id  # type: ignore[attr-defined]
    assert load_attempt(svc, "t1", lease).task.id == "t1"


def test_a_run_holding_another_lease_is_superseded(svc: Services) -> None:
    acquiring(svc, "t1")
    with pytest.raises(RunSuperseded, match="not acquiring under lease 'lease-old'"):
        load_attempt(svc, "t1", "lease-old")


def test_a_run_for_a_task_that_moved_on_is_superseded(svc: Services) -> None:
    running(svc, "t1")
    with pytest.raises(RunSuperseded, match="phase running"):
        load_attempt(svc, "t1", "")


def _runs_to_running(svc: Services, task_id: str, lease: str) -> None:
    """The task's lifecycle attempt under ``lease``, to Running."""
    view = load_attempt(svc, task_id, lease)
    choice = acquisition.provision(svc, view)
    acquisition.wait_pool_ready(svc, view, choice, svc.clock.now())
    job = acquisition.dispatch(svc, view, choice.name)
    acquisition.mark_running(svc, view, acquisition.wait_pods_running(svc, view, job))


def test_a_restart_decided_on_a_stale_read_starts_nothing_and_gives_its_lease_back(svc: Services) -> None:
    acquiring(svc, "t1")
    stale = svc.store.progress_in([Phase.ACQUIRING])[0]  # read while t1 still acquired ...
    _runs_to_running(svc, "t1", stale.lease_id or "")  # ... then it ran
    launched = list(svc.launcher.acquires)  # type: ignore[attr-defined]
    reconcile._restart_acquire(svc, stale)
    assert svc.launcher.acquires == launched  # type: ignore[attr-defined]
    assert svc.slots.leases == {}  # type: ignore[attr-defined]
    assert svc.store.progress["t1"].phase is Phase.RUNNING  # type: ignore[attr-defined]


def test_a_restarted_attempt_is_recorded_before_its_run_starts(svc: Services) -> None:
    acquiring(svc, "t1")
    recorded = []
    launcher = svc.launcher
    original = launcher.start_acquire

    def start(task_id: str, lease_id: str, attempt: int) -> str:
        progress = svc.store.progress[task_id]  # type: ignore[attr-defined]
        recorded.append((progress.lease_id, progress.attempt))
        return original(task_id, lease_id, attempt)

    launcher.start_acquire = start  # type: ignore[method-assign]
    assert reconcile.supervise_runs(svc) == ["t1"]  # its run-1 is not alive
    (_, lease, attempt) = svc.launcher.acquires[-1]  # type: ignore[attr-defined]
    assert recorded == [(lease, attempt)] and attempt == 2
    assert load_attempt(svc, "t1", lease).task.id == "t1"


def test_a_busy_slot_service_defers_a_restart_to_the_next_round(svc: Services) -> None:
    """The round asks with fail_fast: a busy Prefect is not waited out (its client's back-off
    reached 62 s in bench_scale, holding every Job's follow-up), the task keeps its attempt, and
    the next round restarts it."""
    acquiring(svc, "t1")

    def busy_once(_name: str) -> None:
        svc.slots.on_acquire.clear()  # type: ignore[attr-defined]
        raise TemporaryError("Prefect API busy: 503")

    svc.slots.on_acquire.append(busy_once)  # type: ignore[attr-defined]
    attempt = svc.store.progress["t1"].attempt  # type: ignore[attr-defined]
    launched = list(svc.launcher.acquires)  # type: ignore[attr-defined]
    assert reconcile.supervise_runs(svc) == []  # not started: the report says so
    assert svc.launcher.acquires == launched  # type: ignore[attr-defined]
    assert svc.store.progress["t1"].attempt == attempt  # type: ignore[attr-defined]
    assert reconcile.supervise_runs(svc) == ["t1"]
    assert svc.store.progress["t1"].attempt == attempt + 1  # type: ignore[attr-defined]


def test_rows_the_round_read_before_a_run_ended_start_nothing_and_ask_no_slot(svc: Services) -> None:
    """The dispatcher reads the rows to supervise with the rest of its round, before it follows
    the Jobs: a run that ended meanwhile (its task moved on) is told from a dead one by its row,
    read again, and costs no call to the slot service (Prefect's API)."""
    acquiring(svc, "t1")
    read = svc.store.progress_in(reconcile.SUPERVISED)  # the round's read, while t1 acquired
    _runs_to_running(svc, "t1", read[0].lease_id or "")
    launched, asked = list(svc.launcher.acquires), []  # type: ignore[attr-defined]
    svc.slots.on_acquire.append(asked.append)  # type: ignore[attr-defined]
    assert reconcile.supervise_runs(svc, progress=read) == []
    assert asked == [] and svc.launcher.acquires == launched  # type: ignore[attr-defined]
    assert svc.store.progress["t1"].phase is Phase.RUNNING  # type: ignore[attr-defined]


def test_the_round_starts_runs_beside_it_once_and_tells_each_start_when_over(svc: Services) -> None:
    """A start asks Prefect's API for the slot (after a dispatcher's handover, one per run the
    old one's stop ended: 1.5 s in one round at full size); the round hands it over and goes on,
    and hands nothing twice while it is under way."""
    acquiring(svc, "t1")
    gate, asked = threading.Event(), []

    def slow_slot_service(name: str) -> None:
        asked.append(name)
        assert gate.wait(5)

    svc.slots.on_acquire.append(slow_slot_service)  # type: ignore[attr-defined]
    dispatcher = Dispatcher(svc)
    try:
        assert dispatcher.reconcile().started == []  # handed over, not waited for
        assert dispatcher.reconcile().started == [] and len(asked) == 1  # under way: not again
        gate.set()
        assert rounds_until(dispatcher, lambda r: bool(r.started)).started == ["t1"]
        assert dispatcher.reconcile().started == [] and len(asked) == 1  # its new run is alive
    finally:
        gate.set()
        dispatcher.close()
    assert svc.store.progress["t1"].attempt == 2  # type: ignore[attr-defined]
