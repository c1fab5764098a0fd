"""The events the services report (issue 11): each move of a task once, at the step that recorded
it, with what the step knew then; pool creations and reuses; orphan sweeps.

We test: intake reports new → waiting (with the row's insert time) and new → done for a row it
ends; a pick reports waiting → acquiring, a refused one nothing; dispatch and Running report
acquiring → dispatched → running, a resumed attempt's dispatch not again; a Job's end reports
running → releasing (with its dispatch time) and the release releasing → done; aborts in each
phase end in done/Aborted from the stage they hit; creations say reservation, flex-start or
fallback; reuses say kept, warm or hand_over; each orphan sweep reports per cluster and kind.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.unit.fakes import (
    FakeClock,
    acquiring,
    cluster,
    clusters_of,
    events_of,
    idle_pool,
    k8s_of,
    make_services,
    one_cluster,
    queued,
    running,
    spec_for,
)

from falcon.domain.events import Stage, TaskMove
from falcon.domain.lifecycle import NodePool, Phase, PoolState, TaskEnded
from falcon.domain.model import ProvisioningMode, QueueKey, k8s_job_name_for, node_pool_name_for
from falcon.domain.node_pools import ReservationRef
from falcon.domain.scheduling import ReservationCapacity
from falcon.domain.status import Reason, Status
from falcon.services import reconcile
from falcon.services.acquisition import dispatch, provision, wait_pool_ready
from falcon.services.context import Services, load_view
from falcon.services.intake import take_in
from falcon.services.queueing import QueueBook, schedule
from falcon.services.release import record_outcome, release

QUEUE = QueueKey("c1", "2x2")
W, A, D, R, REL, DONE = (
    Stage.WAITING,
    Stage.ACQUIRING,
    Stage.DISPATCHED,
    Stage.RUNNING,
    Stage.RELEASING,
    Stage.DONE,
)


def intake(svc: Services) -> None:
    take_in(svc.store, svc.store.snapshot(500, with_book=False), svc.say, svc.clock.now(), svc.events)


def pick(svc: Services) -> list[str]:
    snapshot = svc.store.snapshot(500, with_book=True)
    book = QueueBook()
    book.load(snapshot.waiting or [], snapshot.last_actors or {})
    now = svc.clock.now()
    result = schedule(
        svc.store, book, svc.slots, snapshot.acquiring_queues, svc.say, now, 300, events=svc.events
    )
    return [p.task_id for p in result.picks]


def last(svc: Services, task_id: str) -> TaskMove:
    return events_of(svc).of(task_id)[-1]


def test_intake_reports_each_row_taken_in_with_its_insert_time(svc: Services) -> None:
    svc.store.insert_task("t1", spec=spec_for("2X2"))  # type: ignore[attr-defined]
    inserted = svc.store.task("t1").created_at
    svc.clock.advance(3)  # type: ignore[attr-defined]
    intake(svc)
    assert events_of(svc).moves == [TaskMove("t1", QUEUE, Stage.NEW, W, svc.clock.now(), created_at=inserted)]
    assert last(svc, "t1").reason == "Waiting"


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"spec": {"image": "img", "topology": "2x2"}}, Reason.INVALID_SPEC),
        ({"spec": spec_for("2x2x1"), "tpu_type": "v5p"}, Reason.NO_ELIGIBLE_CLUSTER),
    ],
)
def test_intake_reports_a_row_it_ends_as_done_with_its_outcome(
    svc: Services, row: dict[str, object], reason: Reason
) -> None:
    svc.store.insert_task("t1", **row)  # type: ignore[attr-defined]
    intake(svc)
    [move] = events_of(svc).moves
    assert (move.queue, move.source, move.target) == (None, Stage.NEW, DONE)
    assert move.outcome is not None and (move.outcome.status, move.outcome.reason) == (Status.FAILED, reason)
    assert move.reason == reason.value


def test_a_pick_reports_waiting_to_acquiring_and_a_refused_one_nothing(svc: Services) -> None:
    queued(svc, "t1")
    queued(svc, "t2", "2x4")
    other = QueueKey("c1", "2x4")
    svc.slots.ensure_limit(other.slot_name)
    assert svc.slots.try_acquire(other.slot_name, 300) is not None  # held in Prefect: no pick there
    assert pick(svc) == ["t1"]
    assert events_of(svc).path("t1") == [(W, A)]
    assert events_of(svc).path("t2") == []
    assert last(svc, "t1").reason == "Provisioning"


def test_acquisition_reports_dispatched_then_running_once_each(svc: Services) -> None:
    running(svc, "t1")
    assert events_of(svc).path("t1") == [(A, D), (D, R)]
    assert [m.reason for m in events_of(svc).of("t1")] == ["Dispatching", ""]
    assert all(m.queue == QUEUE and m.created_at is not None for m in events_of(svc).of("t1"))


def test_a_resumed_attempt_finding_its_job_does_not_report_the_dispatch_again(svc: Services) -> None:
    view = acquiring(svc, "t1")
    pool = wait_pool_ready(svc, view, provision(svc, view), svc.clock.now())
    dispatch(svc, view, pool)
    dispatch(svc, load_view(svc, "t1"), pool)  # the next attempt reads the row dispatched
    assert events_of(svc).path("t1") == [(A, D)]


def test_a_jobs_end_reports_releasing_with_its_run_time_then_done(svc: Services) -> None:
    running(svc, "t1")
    dispatched_at = svc.store.task("t1").dispatched_at
    svc.clock.advance(600)  # type: ignore[attr-defined]
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    assert reconcile.follow_running(svc, clusters_of(svc)).offered == ["t1"]  # its pool was kept
    assert reconcile.release_kept(svc, "t1")
    to_releasing, done = events_of(svc).of("t1")[-2:]
    assert (to_releasing.source, to_releasing.target, to_releasing.reason) == (R, REL, "Succeeded")
    assert to_releasing.dispatched_at == dispatched_at
    assert to_releasing.at - dispatched_at == timedelta(seconds=600)
    assert (done.source, done.target) == (REL, DONE)
    assert done.outcome.status is Status.SUCCEEDED  # type: ignore[union-attr]


def test_a_failure_reports_its_reason_on_the_way_out(svc: Services) -> None:
    running(svc, "t1")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.failed_condition = "BackoffLimitExceeded: pods failed"
    reconcile.follow_running(svc, clusters_of(svc))
    release(svc, "t1")
    assert [(m.target, m.reason) for m in events_of(svc).of("t1")[-2:]] == [
        (REL, "JobFailed"),
        (DONE, "JobFailed"),
    ]


def test_an_abort_while_waiting_ends_done_from_waiting(svc: Services) -> None:
    queued(svc, "t1")
    svc.store.request_abort("t1")  # type: ignore[attr-defined]
    aborting = svc.store.snapshot(500, with_book=False).aborting
    assert reconcile.abort_unstarted(svc, aborting, svc.clock.now()) == ["t1"]
    assert events_of(svc).path("t1") == [(W, DONE)]
    assert last(svc, "t1").reason == "Aborted"


@pytest.mark.parametrize(("dispatched", "stage"), [(False, A), (True, D)])
def test_an_abort_while_acquiring_moves_from_the_stage_it_hit(
    svc: Services, dispatched: bool, stage: Stage
) -> None:
    view = acquiring(svc, "t1")
    pool = wait_pool_ready(svc, view, provision(svc, view), svc.clock.now())
    if dispatched:
        dispatch(svc, view, pool)
    svc.store.request_abort("t1")  # type: ignore[attr-defined]
    with pytest.raises(TaskEnded) as ended:
        svc.ensure_active("t1")
    assert record_outcome(svc, "t1", ended.value.outcome, [Phase.ACQUIRING], released_inline=True)
    release(svc, "t1")
    assert events_of(svc).path("t1")[-2:] == [(stage, REL), (REL, DONE)]
    assert [m.reason for m in events_of(svc).of("t1")[-2:]] == ["Aborted", "Aborted"]


def test_an_outcome_another_step_recorded_first_is_not_reported_twice(svc: Services) -> None:
    running(svc, "t1")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    reconcile.follow_running(svc, clusters_of(svc))
    outcome = svc.store.task_view_rows("t1")[2].outcome  # type: ignore[union-attr]
    assert outcome is not None
    assert not record_outcome(svc, "t1", outcome, [Phase.RUNNING])
    assert events_of(svc).path("t1").count((R, REL)) == 1


# -- node pools -------------------------------------------------------------------------------

RES = ReservationRef("proj", "res-a", shared=False)


@pytest.mark.parametrize(
    ("reservation", "room", "created"),
    [
        (None, 0, (ProvisioningMode.FLEX_START, False)),
        ("res-a", 4, (ProvisioningMode.RESERVATION, False)),
        ("res-a", 0, (ProvisioningMode.FLEX_START, True)),
    ],
)
def test_a_creation_reports_its_decision(
    reservation: str | None, room: int, created: tuple[ProvisioningMode, bool]
) -> None:
    svc = one_cluster(reservation=reservation)
    svc.reservations.set(  # type: ignore[attr-defined]
        RES, "us-east5-b", ReservationCapacity("res-a", 4, 4 - room, "READY", "ct6e-standard-4t")
    )
    provision(svc, acquiring(svc, "t1"))
    assert events_of(svc).created == [(QUEUE, *created)]
    assert events_of(svc).reused == []


def test_a_resumed_provision_does_not_report_the_creation_again(svc: Services) -> None:
    view = acquiring(svc, "t1")
    provision(svc, view)
    provision(svc, view)  # a retry after the write-ahead
    assert len(events_of(svc).created) == 1


def test_taking_a_kept_pool_reports_a_creation_avoided(svc: Services) -> None:
    svc.store.add_pool(idle_pool())  # type: ignore[attr-defined]
    provision(svc, acquiring(svc, "t1"))
    assert (events_of(svc).created, events_of(svc).reused) == ([], [(QUEUE, "kept")])


def test_taking_a_warm_pool_says_warm(svc: Services) -> None:
    pool = NodePool(
        "c1", "falcon-warm-1", "2x2", "ct6e-standard-4t", ProvisioningMode.FLEX_START, None,
        PoolState.CREATING, None,
    )  # fmt: skip
    svc.store.write_ahead_pool(pool, svc.clock.now(), warm_rule="nightly")
    assert svc.store.warm_pool_ready("c1", "falcon-warm-1", svc.clock.now())
    provision(svc, acquiring(svc, "t1"))
    assert events_of(svc).reused == [(QUEUE, "warm")]


def test_a_hand_over_reports_a_creation_avoided() -> None:
    svc = make_services(FakeClock())
    svc.store.add_cluster(cluster("c1"))  # type: ignore[attr-defined]
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.node_pools.refuse_create(5)  # type: ignore[attr-defined]  # GKE busy: the own pool waits
    svc.store.add_pool(idle_pool(since=svc.clock.now()))  # type: ignore[attr-defined]
    assert wait_pool_ready(svc, view, choice, svc.clock.now()) == "falcon-2x2-kept"
    assert events_of(svc).reused == [(QUEUE, "hand_over")]
    assert events_of(svc).created == [(QUEUE, ProvisioningMode.FLEX_START, False)]


# -- orphans ----------------------------------------------------------------------------------


def test_each_orphan_sweep_reports_per_cluster_and_kind_found_or_not(svc: Services) -> None:
    cl = svc.store.clusters()[0]
    running(svc, "t1")
    svc.node_pools.add_existing(cl, "falcon-orphan")  # type: ignore[attr-defined]
    reconcile.delete_orphan_pools(svc, clusters_of(svc))
    reconcile.delete_orphan_jobs(svc, clusters_of(svc))
    reconcile.delete_orphan_services(svc, clusters_of(svc))
    assert events_of(svc).swept == [
        ("c1", "node_pool", ["falcon-orphan"]),
        ("c1", "job", []),
        ("c1", "service", []),
    ]
    assert node_pool_name_for("t1", "2x2") not in events_of(svc).swept[0][2]
