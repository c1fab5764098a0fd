"""The dispatcher's pick (design phase 2): Dispatcher.tick with in-memory slots and store.

We test: one task per queue acquires, one per queue at a time; FIFO within an actor and round
robin across actors over several ticks; a slot held in Prefect is not taken; an abort landing
between the snapshot and the write releases the lease taken for it; the picks of several queues
are recorded at once, and one whose record fails gives its slot back and keeps the others; the
deployed tick hands its picks' records and runs over, collects them at its next turn and picks
nothing else of their queues meanwhile, and one refused there gives its slot back; waiting
tasks get their queue position as Message; a task aborted while waiting ends Aborted on the next
tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest
from tests.unit.fakes import events_of, k8s_of, rounds_until, running, spec_for

from falcon.domain.errors import TemporaryError
from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.model import QueueKey, k8s_job_name_for, node_pool_name_for
from falcon.domain.scheduling import WaitingTask
from falcon.domain.status import Reason, Status
from falcon.services.context import Services
from falcon.services.dispatching import UNREACHABLE_AFTER, Dispatcher
from falcon.services.queueing import QueueBook, choose


@pytest.fixture
def dispatcher(svc: Services) -> Iterator[Dispatcher]:
    d = Dispatcher(svc)
    yield d
    d.close()


def submit(svc: Services, task_id: str, actor: str = "alice", topology: str = "2x2") -> None:
    svc.clock.advance(1)  # distinct created_at, in submission order
    svc.store.insert_task(task_id, actor=actor, spec=spec_for(topology))


def finish_acquiring(svc: Services, task_id: str) -> None:
    """What the task's lifecycle run does once its pods run: Running, then the slot goes back."""
    lease = svc.store.progress[task_id].lease_id
    assert svc.store.mark_running(task_id, "running", svc.clock.now())
    svc.slots.release(lease)


def test_one_task_per_queue_acquires(svc: Services, dispatcher: Dispatcher) -> None:
    for task_id, topology in [("a", "2x2"), ("b", "2x2"), ("c", "2x4")]:
        submit(svc, task_id, topology=topology)
    report = dispatcher.tick()
    assert sorted(report.queued) == ["a", "b", "c"]
    assert sorted(report.picked) == ["a", "c"]
    for task_id in ("a", "c"):
        task, progress = svc.store.task(task_id), svc.store.progress[task_id]
        assert (task.status, task.reason) == (Status.PENDING, Reason.PROVISIONING)
        assert (progress.phase, progress.attempt) == (Phase.ACQUIRING, 1)
        assert svc.slots.leases[progress.lease_id] == progress.queue.slot_name
    assert svc.store.progress["b"].phase is Phase.WAITING
    assert sorted(t for t, _, _ in svc.launcher.acquires) == ["a", "c"]
    assert svc.store.progress["a"].acquire_run_id is not None


def test_queue_stays_busy_until_the_acquiring_task_runs(svc: Services, dispatcher: Dispatcher) -> None:
    submit(svc, "a")
    submit(svc, "b")
    assert dispatcher.tick().picked == ["a"]
    svc.clock.advance(1)
    assert dispatcher.tick().picked == []
    finish_acquiring(svc, "a")
    svc.clock.advance(1)
    assert dispatcher.tick().picked == ["b"]


def test_fifo_within_an_actor_round_robin_across_actors(svc: Services, dispatcher: Dispatcher) -> None:
    for task_id, actor in [("a1", "alice"), ("a2", "alice"), ("a3", "alice"), ("b1", "bob"), ("c1", "carol")]:
        submit(svc, task_id, actor)
    order = []
    for _ in range(5):
        svc.clock.advance(1)
        picked = dispatcher.tick().picked
        assert len(picked) == 1
        order += picked
        finish_acquiring(svc, picked[0])
    # §4: each actor's earliest task; the last actor is passed over while another has one.
    assert order == ["a1", "b1", "a2", "c1", "a3"]
    assert svc.store.rotation[QueueKey("c1", "2x2")] == "alice"


def test_waiting_tasks_get_their_queue_position(svc: Services, dispatcher: Dispatcher) -> None:
    for task_id, actor in [("a1", "alice"), ("a2", "alice"), ("b1", "bob")]:
        submit(svc, task_id, actor)
    dispatcher.tick()
    assert (
        svc.store.task("b1").message
        == "Queue position #1, waiting for the current task to acquire its resources"
    )
    assert svc.store.task("a2").message == "Queue position #2, 1 task(s) ahead (bob: job-b1)"
    written = svc.store.writes("set_waiting_messages")
    svc.clock.advance(1)
    dispatcher.tick()
    assert svc.store.writes("set_waiting_messages") == written  # unchanged messages are not rewritten


def test_a_slot_held_in_prefect_is_not_taken(svc: Services, dispatcher: Dispatcher) -> None:
    name = QueueKey("c1", "2x2").slot_name
    svc.slots.ensure_limit(name)
    other = svc.slots.try_acquire(name, 300)
    submit(svc, "a")
    report = dispatcher.tick()
    assert report.picked == []
    assert svc.slots.holder(name) == other
    task = svc.store.task("a")
    assert (task.status, task.reason) == (Status.PENDING, Reason.WAITING)
    assert svc.launcher.acquires == []


def test_a_slot_held_with_nobody_acquiring_is_reset_after_the_confirm_time(
    svc: Services, dispatcher: Dispatcher
) -> None:
    name = QueueKey("c1", "2x2").slot_name
    svc.slots.ensure_limit(name)
    svc.slots.try_acquire(name, 300)  # leaked: no task of the queue is acquiring
    submit(svc, "a")
    assert dispatcher.tick().repaired == []
    svc.clock.advance(5)
    assert dispatcher.tick().repaired == [name]
    svc.clock.advance(1)
    assert dispatcher.tick().picked == ["a"]


def test_abort_between_snapshot_and_write_releases_the_lease(svc: Services, dispatcher: Dispatcher) -> None:
    submit(svc, "a")
    dispatcher.tick()  # queued and picked by the same tick
    finish_acquiring(svc, "a")
    submit(svc, "b")
    # upstream aborts b while the dispatcher takes its slot: after the snapshot, before the write
    svc.slots.on_acquire.append(lambda name: svc.store.request_abort("b"))
    svc.clock.advance(1)
    report = dispatcher.tick()
    assert report.picked == []
    name = QueueKey("c1", "2x2").slot_name
    assert svc.slots.holder(name) is None  # the lease taken for b went back
    assert svc.store.progress["b"].phase is Phase.WAITING
    assert [t for t, _, _ in svc.launcher.acquires] == ["a"]
    svc.slots.on_acquire.clear()
    svc.clock.advance(1)
    report = dispatcher.tick()
    assert report.aborted == ["b"]
    task = svc.store.task("b")
    assert (task.status, task.message) == (Status.ABORTED, "Aborted by user")
    assert svc.store.progress["b"].phase is Phase.DONE


def test_the_picks_of_several_queues_are_recorded_at_once(svc: Services, dispatcher: Dispatcher) -> None:
    """Each record is a transaction of its own (30-40 ms on a busy database at scale): a tick
    of three picks used to wait for three in a row."""
    submit(svc, "a", topology="2x2")
    submit(svc, "c", topology="2x4")
    both_in = threading.Barrier(2, timeout=5)  # broken, so the tick fails, if they come in turn
    record = svc.store.start_acquiring

    def together(*args, **kwargs):  # type: ignore[no-untyped-def]
        both_in.wait()
        return record(*args, **kwargs)

    svc.store.start_acquiring = together  # type: ignore[method-assign]
    assert sorted(dispatcher.tick().picked) == ["a", "c"]
    assert {svc.store.progress[t].phase for t in ("a", "c")} == {Phase.ACQUIRING}


def test_a_pick_whose_record_fails_gives_its_slot_back_and_the_others_are_kept(
    svc: Services, dispatcher: Dispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    submit(svc, "a", topology="2x2")
    submit(svc, "c", topology="2x4")
    record = svc.store.start_acquiring

    def fails_for_a(task_id: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if task_id == "a":
            raise RuntimeError("connection lost")
        return record(task_id, *args, **kwargs)

    svc.store.start_acquiring = fails_for_a  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        assert dispatcher.tick().picked == ["c"]  # the tick goes on: intake and the other picks
    assert "event=pick_record_failed task_id=a" in caplog.text
    assert svc.slots.holder(QueueKey("c1", "2x2").slot_name) is None
    assert svc.store.progress["a"].phase is Phase.WAITING
    c = svc.store.progress["c"]
    assert c.phase is Phase.ACQUIRING and svc.slots.leases[c.lease_id] == QueueKey("c1", "2x4").slot_name
    assert not dispatcher.book.loaded  # read again from the database at the next tick
    svc.store.start_acquiring = record  # type: ignore[method-assign]
    assert dispatcher.tick().picked == ["a"]


def test_a_slot_call_that_fails_outright_gives_back_the_slots_taken_before_it(
    svc: Services, dispatcher: Dispatcher
) -> None:
    """The slots are all taken before any pick is recorded: one the tick took for a pick it will
    not record goes back at once, not when the leak repair finds it seconds later."""
    submit(svc, "a", topology="2x2")
    submit(svc, "c", topology="2x4")
    taken: list[str] = []

    def second_fails(name: str) -> None:
        taken.append(name)
        if len(taken) == 2:
            raise RuntimeError("Prefect answered 400")

    svc.slots.on_acquire.append(second_fails)
    with pytest.raises(RuntimeError, match="400"):
        dispatcher.tick()
    assert svc.slots.holder(taken[0]) is None
    assert {svc.store.progress[t].phase for t in ("a", "c")} == {Phase.WAITING}


def test_the_deployed_tick_hands_its_picks_over_and_collects_them_at_its_next_turn(svc: Services) -> None:
    """A pick's record and its run's start are writes to the database (two records at once took
    about 100 ms in the full-size benchmark's slowest ticks): the deployed tick leaves them to
    threads beside it. Until its record is collected the queue counts as acquiring, so nothing
    else of it is picked, and the database's count of its waiting tasks is no drift."""
    dispatcher = Dispatcher(svc, beside=True)
    submit(svc, "a")
    submit(svc, "b")
    recorded, started = threading.Event(), threading.Event()
    record, start = svc.store.start_acquiring, svc.launcher.start_acquire

    def slow_record(*args, **kwargs):  # type: ignore[no-untyped-def]
        assert recorded.wait(5)
        return record(*args, **kwargs)

    def slow_start(*args, **kwargs):  # type: ignore[no-untyped-def]
        assert started.wait(5)
        return start(*args, **kwargs)

    svc.store.start_acquiring = slow_record  # type: ignore[method-assign]
    svc.launcher.start_acquire = slow_start  # type: ignore[method-assign]
    report = dispatcher.tick()
    assert (sorted(report.queued), report.picked) == (["a", "b"], [])  # back while the record waits
    assert svc.store.progress["a"].phase is Phase.WAITING
    svc.clock.advance(30)  # the book's count check is due
    assert dispatcher.tick().picked == []
    assert dispatcher.book.loaded  # the database counts a as waiting still: no drift
    assert list(svc.slots.leases.values()) == [QueueKey("c1", "2x2").slot_name]  # a's alone
    recorded.set()
    until(lambda: svc.store.progress["a"].phase is Phase.ACQUIRING)
    assert svc.store.progress["a"].acquire_run_id is None  # its run's start waits in turn
    svc.clock.advance(1)
    assert dispatcher.tick().picked == ["a"]
    assert svc.store.progress["b"].phase is Phase.WAITING
    started.set()
    dispatcher.close()  # waits for the starts handed over
    assert [t for t, _, _ in svc.launcher.acquires] == ["a"]
    assert svc.store.progress["a"].acquire_run_id is not None


def test_a_pick_refused_beside_the_tick_gives_its_slot_back_and_the_book_is_read_again(
    svc: Services,
) -> None:
    dispatcher = Dispatcher(svc, beside=True)
    submit(svc, "a")
    record = svc.store.start_acquiring

    def aborted_first(*args, **kwargs):  # type: ignore[no-untyped-def]
        svc.store.request_abort("a")  # upstream, between the tick's snapshot and the record
        return record(*args, **kwargs)

    svc.store.start_acquiring = aborted_first  # type: ignore[method-assign]
    reports = [dispatcher.tick()]

    def slot_free() -> bool:  # a tick collects the refusal, the database's abort ends the task
        svc.clock.advance(1)
        reports.append(dispatcher.tick())
        return svc.slots.holder(QueueKey("c1", "2x2").slot_name) is None

    until(slot_free)
    assert [t for r in reports for t in r.picked] == []
    assert [t for r in reports for t in r.aborted] == ["a"]
    assert svc.store.task("a").status is Status.ABORTED
    dispatcher.close()
    assert svc.launcher.acquires == []


def test_a_pick_whose_record_is_under_way_is_its_queues_taker_for_the_reaper(svc: Services) -> None:
    """The round's reaper keeps a queue's idle pool while a task of the queue will take it. A pick
    whose record is under way has left the book but is not yet acquiring in the database: it
    still counts, or the pool it is about to take could be deleted under it."""
    running(svc, "t1")
    for lease in list(svc.slots.leases):  # as t1's run did once it ran
        svc.slots.release(lease)
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    dispatcher = Dispatcher(svc, beside=True)
    recorded = threading.Event()
    record = svc.store.start_acquiring

    def slow_record(*args, **kwargs):  # type: ignore[no-untyped-def]
        assert recorded.wait(5)
        return record(*args, **kwargs)

    try:
        rounds_until(dispatcher, lambda r: bool(r.released))  # t1 done, its pool the queue's spare
        pool = node_pool_name_for("t1", "2x2")
        assert svc.store.pool("c1", pool).state is PoolState.IDLE
        svc.clock.advance(600)  # past the spare's horizon (a replacement: 300 s), not a taker's
        svc.store.start_acquiring = slow_record  # type: ignore[method-assign]
        submit(svc, "a")
        assert dispatcher.tick().picked == []  # recorded beside
        assert svc.store.progress["a"].phase is Phase.WAITING  # its record waits
        assert dispatcher.reconcile().reaped == []
        assert svc.store.pool("c1", pool).state is PoolState.IDLE
    finally:
        recorded.set()
        dispatcher.close()


def until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not done():
        assert time.monotonic() < deadline, "not within 5 s"
        time.sleep(0.01)


def test_aborted_while_waiting_ends_aborted_at_the_next_tick(svc: Services, dispatcher: Dispatcher) -> None:
    submit(svc, "a")
    submit(svc, "b")
    dispatcher.tick()
    assert svc.store.request_abort("b")
    svc.clock.advance(1)
    report = dispatcher.tick()
    assert report.aborted == ["b"]
    task = svc.store.task("b")
    assert (task.status, task.reason, task.aborted_at) == (Status.ABORTED, None, svc.clock.now())
    assert svc.store.progress["b"].phase is Phase.DONE
    finish_acquiring(svc, "a")
    svc.clock.advance(1)
    assert dispatcher.tick().picked == []  # b is out of the book


def test_aborted_before_intake_ends_aborted(svc: Services, dispatcher: Dispatcher) -> None:
    submit(svc, "a")
    svc.store.request_abort("a")
    report = dispatcher.tick()
    assert report.aborted == ["a"] and report.queued == []
    assert svc.store.task("a").status is Status.ABORTED


def test_dead_acquire_run_is_restarted_with_a_new_lease_and_attempt(
    svc: Services, dispatcher: Dispatcher
) -> None:
    submit(svc, "a")
    dispatcher.tick()
    first = svc.store.progress["a"]
    svc.launcher.end(first.acquire_run_id)
    svc.clock.advance(timedelta(seconds=2).total_seconds())
    assert dispatcher.tick().started == []  # its start is handed over, beside the round ...
    assert rounds_until(dispatcher, lambda r: bool(r.started)).started == ["a"]  # ... and told once over
    again = svc.store.progress["a"]
    assert again.attempt == 2 and again.lease_id != first.lease_id
    assert first.lease_id in svc.slots.released
    assert svc.launcher.acquires[-1] == ("a", again.lease_id, 2)


def rounds(svc: Services, dispatcher: Dispatcher, count: int) -> list[str]:
    """``count`` ticks, each a reconcile round apart; the tasks they picked."""
    picked = []
    for _ in range(count):
        svc.clock.advance(svc.settings.reconcile_seconds)
        picked += dispatcher.tick().picked
    return picked


def test_tasks_of_an_unreachable_cluster_wait_told_why_until_it_answers(
    svc: Services, dispatcher: Dispatcher
) -> None:
    submit(svc, "a")
    submit(svc, "b")
    assert dispatcher.tick().picked == ["a"]
    k8s_of(svc).unreachable = True
    assert rounds(svc, dispatcher, UNREACHABLE_AFTER) == []  # a still acquires
    finish_acquiring(svc, "a")
    assert rounds(svc, dispatcher, 2) == []  # the slot is free, but the cluster is held
    name = svc.store.clusters()[0].name
    message = svc.store.task("b").message
    assert message.startswith(f"Cluster {name} unreachable since ")
    assert message.endswith("; the task waits in its queue: list Jobs: connection refused")
    k8s_of(svc).unreachable = False
    assert rounds(svc, dispatcher, 2) == ["b"]  # one probe answers, the next tick picks


def test_a_cluster_failing_fewer_probes_in_a_row_is_not_held(svc: Services, dispatcher: Dispatcher) -> None:
    submit(svc, "a")
    submit(svc, "b")
    assert dispatcher.tick().picked == ["a"]
    k8s_of(svc).unreachable = True
    assert rounds(svc, dispatcher, UNREACHABLE_AFTER - 1) == []
    k8s_of(svc).unreachable = False
    finish_acquiring(svc, "a")
    assert rounds(svc, dispatcher, 1) == ["b"]


def test_a_held_cluster_holds_only_its_own_queues() -> None:
    book = QueueBook()
    for cluster_id in ("c1", "c2"):
        book.add(
            QueueKey(cluster_id, "2x2"), WaitingTask(f"t-{cluster_id}", "alice", "job", datetime(2026, 1, 1))
        )
    assert choose(book, set(), {"c1": "Cluster c1 unreachable"}) == [
        (QueueKey("c2", "2x2"), WaitingTask("t-c2", "alice", "job", datetime(2026, 1, 1)))
    ]


def test_a_busy_slot_service_skips_that_queue_for_one_tick_only(
    svc: Services, dispatcher: Dispatcher
) -> None:
    """A Prefect API too busy to answer is not waited out inside the tick: the other queues are
    picked, the busy one is not taken for a held (leaked) slot, and the next tick picks it."""
    submit(svc, "a", topology="2x2")
    submit(svc, "c", topology="2x4")
    busy = QueueKey("c1", "2x2").slot_name

    def busy_once(name: str) -> None:
        if name == busy:
            svc.slots.on_acquire.clear()
            raise TemporaryError("Prefect API busy: 503")

    svc.slots.on_acquire.append(busy_once)
    first = dispatcher.tick()
    assert (first.picked, first.deferred) == (["c"], [busy])
    assert events_of(svc).deferred == [(QueueKey("c1", "2x2"), "Prefect API busy: 503")]
    assert svc.store.progress["a"].phase is Phase.WAITING
    second = dispatcher.tick()
    assert (second.picked, second.deferred) == (["a"], [])
    assert dispatcher.tick().repaired == []
    assert len(events_of(svc).deferred) == 1


def test_a_limit_the_slot_service_cannot_confirm_is_asked_again_next_tick(
    svc: Services, dispatcher: Dispatcher
) -> None:
    """Making sure of a queue's limit fails fast like the slot call: the queue waits one tick."""
    submit(svc, "a", topology="2x2")
    calls: list[bool] = []
    original = svc.slots.ensure_limit

    def busy_once(name: str, fail_fast: bool = False) -> None:
        calls.append(fail_fast)
        if len(calls) == 1:
            raise TemporaryError("Prefect API busy: 503")
        original(name, fail_fast)

    svc.slots.ensure_limit = busy_once  # type: ignore[method-assign]
    assert dispatcher.tick().deferred == [QueueKey("c1", "2x2").slot_name]
    assert dispatcher.tick().picked == ["a"]
    assert calls == [True, True]
