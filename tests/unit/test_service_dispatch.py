"""Dispatch and the wait for pods (design phase 4), and the timeout rule while acquiring.

We test: the Job is submitted and the row records its name, uid and dispatched_at; it is created
suspended and resumed by its uid, once; a 409 finds the Job an earlier attempt submitted
(dispatched_at kept) and resumes it only if that attempt did not; a multi-host task gets its Service
first; a refused Job ends JobSubmitFailed. Polling pods: the Message is written only when it
changes; all pods running returns; a Failed condition ends JobFailed quoting the pods; an image
pull failing beyond its grace ends JobFailed, within it does not; FailedCreate ends at once;
the timeout runs from dispatched_at, pending pods included; mark_running frees the row.

And the dispatcher itself when two run at once (a rollout overlap): a stale book or a claim lost
mid-tick never picks a task twice; and its loop: a tick every period until the run is over,
a back-off after a failed tick, a stop (SIGTERM) honoured at the tick boundary, liveness.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from tests.unit.fakes import FakeClock, acquiring, cluster, k8s_of, make_services, one_cluster, spec_for

from falcon.adapters.clock import SystemClock
from falcon.domain.errors import PermanentError, TemporaryError
from falcon.domain.lifecycle import Phase, TaskEnded, TaskView
from falcon.domain.model import QueueKey, k8s_job_name_for
from falcon.domain.status import Reason, Status
from falcon.domain.workloads import ClusterEvent
from falcon.services.acquisition import dispatch, mark_running, provision, wait_pods_running, wait_pool_ready
from falcon.services.context import Services, load_view
from falcon.services.dispatching import (
    Dispatcher,
    DispatcherLoop,
    Laps,
    TickReport,
    _log_if_slow,
    all_live,
    run_beside,
)

JOB = k8s_job_name_for("t1")


def ready_task(topology: str = "2x2", **row: object) -> tuple[Services, TaskView, str]:
    """A task whose node pool is ready: the moment dispatch starts."""
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))
    view = acquiring(svc, "t1", topology, **row)
    choice = provision(svc, view)
    wait_pool_ready(svc, view, choice, svc.clock.now())
    return svc, view, choice.name


def dispatched(topology: str = "2x2", **row: object) -> tuple[Services, TaskView]:
    svc, view, pool = ready_task(topology, **row)
    dispatch(svc, view, pool)
    return svc, load_view(svc, "t1")


# -- dispatch ----------------------------------------------------------------------------------


def test_job_is_created_and_recorded() -> None:
    svc, view, pool = ready_task()
    svc.clock.advance(7)
    assert dispatch(svc, view, pool) == JOB
    task = svc.store.task("t1")
    job = k8s_of(svc).job(JOB)
    assert (task.k8s_job_name, task.dispatched_at, task.reason) == (JOB, svc.clock.now(), Reason.DISPATCHING)
    assert svc.store.job_uids["t1"] == job.uid
    assert task.message == "Kubernetes Job submitted, waiting for pods (0/1 running)"
    assert job.manifest["spec"]["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == pool
    assert k8s_of(svc).namespaces == {"falcon-jobs"}
    assert k8s_of(svc).count("ensure_service") == 0  # single host: no Service


def test_multi_host_task_gets_its_service_before_the_job() -> None:
    svc, view, pool = ready_task("2x4")
    dispatch(svc, view, pool)
    calls = [m for m, _ in k8s_of(svc).calls]
    assert calls.index("ensure_service") < calls.index("create_job")
    assert k8s_of(svc).job(JOB).parallelism == 2


def test_conflict_finds_the_job_an_earlier_attempt_submitted() -> None:
    svc, view, pool = ready_task()
    dispatch(svc, view, pool)
    first_at, uid = svc.store.task("t1").dispatched_at, svc.store.job_uids["t1"]
    svc.clock.advance(30)  # the run died after the create; a new attempt dispatches again
    assert dispatch(svc, load_view(svc, "t1"), pool) == JOB
    assert k8s_of(svc).count("create_job") == 2 and len(k8s_of(svc).jobs) == 1
    assert svc.store.job_uids["t1"] == uid
    assert svc.store.task("t1").dispatched_at == first_at  # the timeout still runs from the first


def test_the_job_is_created_suspended_and_resumed_by_its_uid() -> None:
    svc, view, pool = ready_task()
    dispatch(svc, view, pool)
    jobs = k8s_of(svc)
    assert [m for m, _ in jobs.calls if m.endswith("_job")] == ["create_job", "resume_job"]
    assert not jobs.job(JOB).suspended


def test_a_job_an_earlier_attempt_resumed_is_not_resumed_again() -> None:
    svc, view, pool = ready_task()
    dispatch(svc, view, pool)
    dispatch(svc, load_view(svc, "t1"), pool)
    assert k8s_of(svc).count("resume_job") == 1


def test_a_job_created_but_never_resumed_is_resumed_by_the_next_attempt() -> None:
    """The run died (or the resume timed out) between the create and the resume."""
    svc, view, pool = ready_task()
    k8s_of(svc).resume_failures.append(TemporaryError("resume Job: read timed out"))
    with pytest.raises(TemporaryError):
        dispatch(svc, view, pool)
    assert k8s_of(svc).job(JOB).suspended and svc.store.task("t1").dispatched_at is None
    dispatch(svc, load_view(svc, "t1"), pool)
    assert not k8s_of(svc).job(JOB).suspended
    assert svc.store.job_uids["t1"] == k8s_of(svc).job(JOB).uid


def test_a_job_replaced_under_its_name_before_its_resume_ends_job_submit_failed() -> None:
    svc, view, pool = ready_task()
    refused = f'Job.batch "{JOB}" is invalid: metadata.uid: Invalid value: "uid-1": field is immutable'
    k8s_of(svc).resume_failures.append(PermanentError(refused))
    with pytest.raises(TaskEnded) as ended:
        dispatch(svc, view, pool)
    outcome = ended.value.outcome
    assert (outcome.reason, outcome.message) == (
        Reason.JOB_SUBMIT_FAILED,
        f"Kubernetes Job submission failed: {refused}",
    )


def test_refused_job_ends_job_submit_failed() -> None:
    svc, view, pool = ready_task()
    k8s_of(svc).create_failures.append(PermanentError('admission webhook "policy" denied the request'))
    with pytest.raises(TaskEnded) as ended:
        dispatch(svc, view, pool)
    outcome = ended.value.outcome
    assert (outcome.status, outcome.reason) == (Status.FAILED, Reason.JOB_SUBMIT_FAILED)
    assert (
        outcome.message == 'Kubernetes Job submission failed: admission webhook "policy" denied the request'
    )
    assert svc.store.task("t1").dispatched_at is None


def test_abort_before_dispatch_submits_nothing() -> None:
    svc, view, pool = ready_task()
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        dispatch(svc, view, pool)
    assert ended.value.outcome.status is Status.ABORTED
    assert k8s_of(svc).jobs == {}


# -- waiting for the pods --------------------------------------------------------------------------


def test_all_pods_running_returns_their_count() -> None:
    svc, view, pool = ready_task("2x4")
    k8s_of(svc).script(JOB, running_after=3)
    dispatch(svc, view, pool)
    assert wait_pods_running(svc, load_view(svc, "t1"), JOB) == 2
    assert k8s_of(svc).count("get_job") == 4


def test_message_is_written_only_when_it_changes() -> None:
    svc, view, pool = ready_task()
    k8s_of(svc).script(JOB, running_after=6, waiting_reason="ContainerCreating")
    dispatch(svc, view, pool)
    before = svc.store.writes("note_pending", "t1")
    wait_pods_running(svc, load_view(svc, "t1"), JOB)
    assert svc.store.writes("note_pending", "t1") - before == 1  # six polls, one Message
    assert svc.store.task("t1").message == (
        f"Kubernetes Job submitted, waiting for pods (0/1 running): Pod {JOB}-0 waiting: ContainerCreating"
    )


def test_message_changes_are_written_each_time() -> None:
    svc, view, pool = ready_task()
    script = k8s_of(svc).script(JOB, never_running=True, waiting_reason="ContainerCreating")
    dispatch(svc, view, pool)
    # what the pods wait for at each following poll; then they run
    seen = deque(["ContainerCreating", None, None, "ErrImagePull", "ErrImagePull"])
    sleep = svc.clock.sleep

    def pods_change(seconds: float) -> None:
        sleep(seconds)
        if seen:
            script.waiting_reason = seen.popleft()
        else:
            script.never_running = False

    svc.clock.sleep = pods_change  # type: ignore[method-assign]
    before = svc.store.writes("note_pending", "t1")
    assert wait_pods_running(svc, load_view(svc, "t1"), JOB) == 1
    # ContainerCreating x2, none x2, ErrImagePull x2: three distinct Messages over six polls
    assert svc.store.writes("note_pending", "t1") - before == 3
    assert svc.store.task("t1").message.endswith(f"(0/1 running): Pod {JOB}-0 waiting: ErrImagePull")


def test_pods_waiting_for_their_nodes_are_polled_without_reading_the_warning_events() -> None:
    """A flex-start slice's pods wait minutes for their nodes, each with a FailedScheduling event:
    no Warning event can end such a task, so none is listed, however long the wait."""
    svc, view, pool = ready_task("2x4")
    k8s_of(svc).script(JOB, running_after=5, unschedulable="0/1 nodes are available")
    dispatch(svc, view, pool)
    assert wait_pods_running(svc, load_view(svc, "t1"), JOB) == 2
    assert k8s_of(svc).count("job_pods") == 6
    assert k8s_of(svc).count("warning_events") == 0


def test_pods_waiting_on_their_node_are_polled_with_the_warning_events() -> None:
    svc, view, pool = ready_task()
    k8s_of(svc).script(JOB, running_after=2, waiting_reason="ContainerCreating")
    dispatch(svc, view, pool)
    wait_pods_running(svc, load_view(svc, "t1"), JOB)
    assert k8s_of(svc).count("warning_events") == 2


def test_completed_job_returns() -> None:
    svc, view, pool = ready_task()
    k8s_of(svc).script(JOB, complete=True)
    dispatch(svc, view, pool)
    assert wait_pods_running(svc, load_view(svc, "t1"), JOB) == 0


def test_failed_condition_ends_job_failed_quoting_the_pods() -> None:
    svc, view, pool = ready_task()
    k8s_of(svc).script(
        JOB,
        failed_condition="BackoffLimitExceeded: Job has reached the specified backoff limit",
        terminated=[("Error", 3)],
    )
    dispatch(svc, view, pool)
    with pytest.raises(TaskEnded) as ended:
        wait_pods_running(svc, load_view(svc, "t1"), JOB)
    outcome = ended.value.outcome
    assert (outcome.status, outcome.reason) == (Status.FAILED, Reason.JOB_FAILED)
    assert outcome.message == f"Pod {JOB}-0 terminated: Error (exit code 3)"


def test_image_pull_failure_beyond_grace_ends_job_failed() -> None:
    svc, view, pool = ready_task()
    k8s_of(svc).script(
        JOB, never_running=True, waiting_reason="ImagePullBackOff", waiting_message="Back-off pulling image"
    )
    dispatch(svc, view, pool)
    dispatched_at = svc.store.task("t1").dispatched_at
    k8s_of(svc).warn(
        "falcon-jobs",
        ClusterEvent("Pod", f"{JOB}-0", "", "Failed", 'Failed to pull image "img": not found', dispatched_at),
    )
    with pytest.raises(TaskEnded) as ended:
        wait_pods_running(svc, load_view(svc, "t1"), JOB)
    # image_pull_grace_seconds, counted from the end of the event's whole second
    assert svc.clock.now() == dispatched_at + timedelta(seconds=61)
    outcome = ended.value.outcome
    assert (outcome.status, outcome.reason) == (Status.FAILED, Reason.JOB_FAILED)
    assert (
        outcome.message
        == f'Pods cannot start: Pod {JOB}-0 ImagePullBackOff: Failed to pull image "img": not found'
    )


def test_image_pull_recovering_within_grace_is_waited_out() -> None:
    svc, view, pool = ready_task()
    k8s_of(svc).script(JOB, running_after=30, waiting_reason="ImagePullBackOff")
    dispatch(svc, view, pool)
    assert wait_pods_running(svc, load_view(svc, "t1"), JOB) == 1


def test_failed_create_on_the_job_ends_at_once() -> None:
    svc, view, pool = ready_task("2x4")
    k8s_of(svc).script(JOB, never_running=True, not_created=1)
    dispatch(svc, view, pool)
    message = 'Error creating: pods "x" is forbidden: serviceaccount "ksa" not found'
    k8s_of(svc).warn(
        "falcon-jobs", ClusterEvent("Job", JOB, k8s_of(svc).job(JOB).uid, "FailedCreate", message, None)
    )
    started = svc.clock.now()
    with pytest.raises(TaskEnded) as ended:
        wait_pods_running(svc, load_view(svc, "t1"), JOB)
    assert svc.clock.now() == started
    outcome = ended.value.outcome
    assert (outcome.status, outcome.reason) == (Status.FAILED, Reason.JOB_FAILED)
    assert outcome.message == f"Pods cannot start: Job {JOB} FailedCreate: {message}"


def test_timeout_runs_from_dispatched_at_pending_pods_included() -> None:
    svc, view, pool = ready_task(timeout_seconds=45)
    svc.clock.advance(500)  # time before the dispatch does not count
    k8s_of(svc).script(JOB, never_running=True, waiting_reason="ContainerCreating")
    dispatch(svc, view, pool)
    dispatched_at = svc.store.task("t1").dispatched_at
    with pytest.raises(TaskEnded) as ended:
        wait_pods_running(svc, load_view(svc, "t1"), JOB)
    assert svc.clock.now() == dispatched_at + timedelta(seconds=45)
    outcome = ended.value.outcome
    assert (outcome.status, outcome.reason, outcome.message) == (
        Status.FAILED,
        Reason.TIMEOUT,
        "Task timed out (45s), Job cancelled",
    )


def test_pods_running_before_the_deadline_do_not_time_out() -> None:
    svc, view, pool = ready_task(timeout_seconds=45)
    k8s_of(svc).script(JOB, running_after=44)
    dispatch(svc, view, pool)
    assert wait_pods_running(svc, load_view(svc, "t1"), JOB) == 1


def finish_acquiring(svc: Services, task_id: str) -> None:
    """What the task's lifecycle run does once its pods run: Running, then the slot goes back."""
    lease = svc.store.progress[task_id].lease_id
    assert svc.store.mark_running(task_id, "running", svc.clock.now())
    svc.slots.release(lease)


def test_mark_running_moves_row_and_phase_and_drops_the_lease() -> None:
    svc, view = dispatched()
    mark_running(svc, view, 1)
    task, progress = svc.store.task("t1"), svc.store.progress["t1"]
    assert (task.status, task.reason, task.message) == (Status.RUNNING, None, "Pods running (1/1 active)")
    assert (progress.phase, progress.lease_id) == (Phase.RUNNING, None)


# -- two dispatchers on one database (a rollout overlap) ---------------------------------------------


def test_a_stale_book_never_picks_a_task_twice() -> None:
    """The second dispatcher still has the first's pick in its book when the slot comes free:
    the store refuses the claim, the slot goes back, the book is read again and the next task
    goes by the rule."""
    svc = one_cluster()
    first, second = Dispatcher(svc), Dispatcher(svc)
    for task_id, actor in [("a1", "alice"), ("a2", "alice"), ("b1", "bob")]:
        svc.clock.advance(1)
        svc.store.insert_task(task_id, actor=actor, spec=spec_for("2x2"))
    slot = QueueKey("c1", "2x2").slot_name
    svc.slots.ensure_limit(slot)
    other = svc.slots.try_acquire(slot, 300)
    assert second.tick().queued == ["a1", "a2", "b1"]  # taken in, but the slot is busy
    svc.slots.release(other)
    assert first.tick().picked == ["a1"]
    finish_acquiring(svc, "a1")

    refused = second.tick()
    assert refused.picked == [] and svc.slots.holder(slot) is None
    assert [task for task, _, _ in svc.launcher.acquires] == ["a1"]
    assert second.tick().picked == ["b1"]  # re-read: alice went last
    assert svc.store.progress["a1"].attempt == 1


def test_a_claim_lost_mid_tick_to_the_other_dispatcher_gives_the_slot_back() -> None:
    """Both books propose the same task; the other dispatcher claims it while this one takes the
    slot (its lifecycle run frees the slot at once): one claim, one launch."""
    svc = one_cluster()
    first, second = Dispatcher(svc), Dispatcher(svc)
    for task_id in ("a1", "a2"):
        svc.clock.advance(1)
        svc.store.insert_task(task_id, spec=spec_for("2x2"))
    slot = QueueKey("c1", "2x2").slot_name
    svc.slots.ensure_limit(slot)
    other = svc.slots.try_acquire(slot, 300)
    first.tick()
    second.tick()  # both books hold a1 and a2; neither could pick
    svc.slots.release(other)

    def other_dispatcher_wins(_name: str) -> None:
        svc.slots.on_acquire.clear()
        assert second.tick().picked == ["a1"]
        finish_acquiring(svc, "a1")

    svc.slots.on_acquire.append(other_dispatcher_wins)
    assert first.tick().picked == []
    assert svc.slots.holder(slot) is None
    assert [task for task, _, _ in svc.launcher.acquires] == ["a1"]
    assert first.tick().picked == ["a2"]


# -- the dispatcher loop: period, deadline, SIGTERM's stop, liveness ---------------------------------


def looping(
    ticks: list[float], fail_at: frozenset[int] = frozenset(), stop_at: int = 0
) -> tuple[DispatcherLoop, FakeClock]:
    """A loop on a fake clock whose ticks take 0.2 s and note their start in ``ticks``; tick number
    ``fail_at`` raises, tick number ``stop_at`` ends with a stop as the SIGTERM handler sets it."""
    clock = FakeClock()

    def tick() -> TickReport:
        ticks.append(clock.monotonic())
        clock.advance(0.2)
        if len(ticks) in fail_at:
            raise OSError("database unreachable")
        if len(ticks) == stop_at:
            loop.stop.set()
        return TickReport()

    loop = DispatcherLoop(tick, clock, 0.5, logging.getLogger(__name__), wait=clock.sleep)
    return loop, clock


def test_a_tick_starts_every_period_until_the_run_is_over() -> None:
    ticks: list[float] = []
    loop, clock = looping(ticks)
    assert loop.run(2.0) == 4
    assert ticks == [0.0, 0.5, 1.0, 1.5]
    assert clock.sleeps == [pytest.approx(0.3)] * 4


def test_a_failed_tick_backs_off_and_the_loop_goes_on() -> None:
    ticks: list[float] = []
    loop, _ = looping(ticks, fail_at=frozenset({1}))
    assert loop.run(3.0) == 3
    # the failed tick takes 0.2 s, then 4 periods of back-off; the next starts at once, then on time
    assert ticks == [0.0, pytest.approx(2.2), pytest.approx(2.7)]


def test_stop_during_a_tick_finishes_that_tick_and_waits_no_more() -> None:
    ticks: list[float] = []
    loop, clock = looping(ticks, stop_at=3)
    assert loop.run(3600) == 3
    assert len(clock.sleeps) == 2  # no wait after the third tick: the loop returns at once


def test_housekeeping_between_ticks_takes_from_the_wait_not_from_the_next_tick() -> None:
    """A tick of 0.2 s, then 0.1 s of housekeeping: the wait is 0.2 s and ticks stay on the
    period. The tick a stop ends is not followed by housekeeping."""
    clock, ticks, between = FakeClock(), [], []

    def tick() -> TickReport:
        ticks.append(clock.monotonic())
        clock.advance(0.2)
        if len(ticks) == 3:
            loop.stop.set()
        return TickReport()

    def housekeeping() -> None:
        between.append(clock.monotonic())
        clock.advance(0.1)

    log = logging.getLogger(__name__)
    loop = DispatcherLoop(tick, clock, 0.5, log, wait=clock.sleep, between_ticks=housekeeping)
    assert loop.run(3600) == 3
    assert ticks == [0.0, 0.5, 1.0]
    assert between == [pytest.approx(0.2), pytest.approx(0.7)]
    assert clock.sleeps == [pytest.approx(0.2)] * 2


def test_each_tick_runs_inside_the_loops_turn_and_what_runs_between_ticks_outside() -> None:
    clock, inside, seen = FakeClock(), [False], []

    @contextmanager
    def turn() -> Iterator[None]:
        inside[0] = True
        yield
        inside[0] = False

    def tick() -> TickReport:
        seen.append(("tick", inside[0]))
        return TickReport()

    log = logging.getLogger(__name__)
    loop = DispatcherLoop(
        tick,
        clock,
        0.5,
        log,
        wait=clock.sleep,
        between_ticks=lambda: seen.append(("between", inside[0])),
        turn=turn,
    )
    loop.run(1.0)
    assert seen == [("tick", True), ("between", False)] * 2


def test_stop_before_the_first_tick_runs_none() -> None:
    ticks: list[float] = []
    loop, _ = looping(ticks)
    loop.stop.set()
    assert loop.run(3600) == 0 and ticks == []


def test_liveness_follows_the_last_tick() -> None:
    ticks: list[float] = []
    loop, clock = looping(ticks)
    assert loop.liveness(15).healthy  # started, no tick yet
    loop.run(1.0)
    clock.advance(15 - 0.3)  # 15 s after the last tick ended
    assert loop.liveness(15).healthy
    clock.advance(0.1)
    verdict = loop.liveness(15)
    assert not verdict.healthy and verdict.checks == {"loop": "no tick for 15.1 s (bound 15 s)"}


def test_liveness_names_the_loop_that_stopped_turning() -> None:
    clock, log = FakeClock(), logging.getLogger(__name__)
    ticking = DispatcherLoop(TickReport, clock, 0.5, log, clock.sleep, "tick")
    reconciling = DispatcherLoop(TickReport, clock, 1.0, log, clock.sleep, "reconcile")
    clock.advance(10)
    ticking.run(0.1)  # one tick at 10 s, then its 0.5 s wait; the reconcile loop never turned
    verdict = all_live([ticking, reconciling], 5)
    assert not verdict.healthy
    assert verdict.checks == {"tick": "ok", "reconcile": "no tick for 10.5 s (bound 5 s)"}
    assert all_live([ticking, reconciling], 15).healthy


def test_the_loops_beside_turn_meanwhile_and_stop_with_the_main_one() -> None:
    """Real threads on the real clock: the main loop stops itself at its 5th tick (as SIGTERM
    would); the loops beside (the round, housekeeping) have turned meanwhile and are stopped and
    joined, long before the hour they were given."""
    log, clock = logging.getLogger(__name__), SystemClock()
    turns = {"main": 0, "reconcile": 0, "housekeeping": 0}

    def turn(name: str) -> TickReport:
        turns[name] += 1
        if name == "main" and turns[name] == 5:
            main.stop.set()
        return TickReport()

    main = DispatcherLoop(lambda: turn("main"), clock, 0.02, log, name="tick")
    beside = [
        DispatcherLoop(lambda name=name: turn(name), clock, 0.01, log, name=name)  # type: ignore[misc]
        for name in ("reconcile", "housekeeping")
    ]
    assert run_beside(main, beside, 3600) == 5
    assert all(loop.stop.is_set() for loop in beside)
    assert turns["reconcile"] >= 1 and turns["housekeeping"] >= 1
    assert not any(t.name in ("reconcile", "housekeeping") for t in threading.enumerate())


def test_a_nudge_ends_the_wait_for_the_next_tick_at_once() -> None:
    """Real threads on the real clock, a loop that ticks once an hour: a nudge during a tick
    (a pool offered while the round ran) brings the next tick right after it, a nudge during the
    wait (from the loop beside) ends the wait, and a stop still ends the wait for good."""
    log, ticked, third = logging.getLogger(__name__), [], threading.Event()

    def tick() -> TickReport:
        ticked.append(time.monotonic())
        if len(ticked) == 1:
            loop.nudge()
        if len(ticked) == 3:
            third.set()
        return TickReport()

    loop = DispatcherLoop(tick, SystemClock(), 3600, log, name="tick")
    thread = threading.Thread(target=loop.run, args=(7200,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len(ticked) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(ticked) == 2
    loop.nudge()
    assert third.wait(10)
    loop.stop.set()
    thread.join(10)
    assert not thread.is_alive() and len(ticked) == 3


def test_laps_say_how_long_each_phase_of_a_turn_took_and_how_much_of_it_was_cpu() -> None:
    clock, cpu = FakeClock(), iter([2.0, 2.25])
    laps = Laps(clock, thread_cpu=lambda: next(cpu))
    clock.advance(0.01)
    laps.lap("snapshot")
    clock.advance(1.5)
    laps.lap("follow")
    assert laps.total == pytest.approx(1.51)
    assert laps.cpu == pytest.approx(0.25)
    assert str(laps) == "snapshot=0.010 follow=1.500"


def test_a_slow_turn_is_logged_with_its_cpu_time_and_phases(caplog: pytest.LogCaptureFixture) -> None:
    clock, cpu = FakeClock(), iter([0.0, 0.0, 0.125])
    fast, slow = Laps(clock, thread_cpu=lambda: next(cpu)), Laps(clock, thread_cpu=lambda: next(cpu))
    _log_if_slow("tick", fast)
    clock.advance(0.75)
    slow.lap("schedule")
    with caplog.at_level(logging.WARNING, logger="falcon.services.dispatching"):
        _log_if_slow("tick", slow)
    assert [r.getMessage() for r in caplog.records] == [
        "event=slow_tick seconds=0.750 cpu=0.125 schedule=0.750"
    ]
