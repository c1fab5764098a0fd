"""Intake (design phase 1) against the in-memory store.

We test: a valid row is queued Pending/Waiting with a progress row; a bad spec, a bad timeout
or an unreadable column ends Failed/InvalidSpec with a message; no active cluster for the TPU
type ends Failed/NoEligibleCluster; later rows of one batch see the queues earlier rows joined;
an idle pool of the topology attracts the row; among equal queues a reservation with room does,
its room the last read less what Falcon's pools (being created, in use, being deleted) hold now;
a row aborted before intake is left alone.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.unit.fakes import MemoryTaskStore, cluster, idle_pool, make_services, spec_for

from falcon.domain.lifecycle import NodePool, Outcome, Phase, PoolState
from falcon.domain.model import ClusterStatus, ProvisioningMode, QueueKey
from falcon.domain.scheduling import ReservationBasis, ReservationCapacity
from falcon.domain.status import IllegalTransitionError, Reason, Status
from falcon.services.context import Services
from falcon.services.intake import IntakeReport, take_in


def intake(svc: Services) -> IntakeReport:
    return take_in(svc.store, svc.store.snapshot(500, with_book=False), svc.say, svc.clock.now(), svc.events)


def test_valid_row_is_queued_waiting() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))
    svc.store.insert_task("t1", spec=spec_for("2X4"))
    report = intake(svc)
    task = svc.store.task("t1")
    assert (task.status, task.reason, task.message, task.cluster_id) == (
        Status.PENDING,
        Reason.WAITING,
        "",
        "c1",
    )
    assert svc.store.progress["t1"].phase is Phase.WAITING
    assert svc.store.progress["t1"].queue == QueueKey("c1", "2x4")  # topology normalised
    assert [(q, t.task_id) for q, t in report.queued] == [(QueueKey("c1", "2x4"), "t1")]
    assert report.failed == []


def test_invalid_spec_fails_with_invalid_spec_and_says_why() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))
    svc.store.insert_task("t1", spec={"image": "img", "topology": "2x2"})  # no command
    report = intake(svc)
    task = svc.store.task("t1")
    assert (task.status, task.reason) == (Status.FAILED, Reason.INVALID_SPEC)
    assert task.message.startswith("Invalid task: invalid spec: command:")
    assert task.finished_at == svc.clock.now()
    assert svc.store.progress["t1"].phase is Phase.DONE
    assert report.failed == ["t1"]


def test_unknown_topology_for_the_tpu_type_is_invalid_spec() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))
    svc.store.insert_task("t1", spec=spec_for("3x3"))
    intake(svc)
    task = svc.store.task("t1")
    assert (task.status, task.reason) == (Status.FAILED, Reason.INVALID_SPEC)
    assert "3x3" in task.message


def test_non_positive_timeout_is_invalid_spec() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))
    svc.store.insert_task("t1", timeout_seconds=0)
    intake(svc)
    task = svc.store.task("t1")
    assert (task.status, task.reason) == (Status.FAILED, Reason.INVALID_SPEC)
    assert "timeout_seconds must be positive" in task.message


def test_unreadable_columns_fail_the_row_with_its_problems() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))
    svc.store.insert_task("t1")
    svc.store.rows["t1"] = replace(svc.store.rows["t1"], problems=("spec is not JSON: '{'",))
    intake(svc)
    task = svc.store.task("t1")
    assert (task.status, task.reason) == (Status.FAILED, Reason.INVALID_SPEC)
    assert "spec is not JSON" in task.message


def test_no_active_cluster_for_the_tpu_type_fails_no_eligible_cluster() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1", tpu_type="v5p"))
    svc.store.add_cluster(cluster("c2", status=ClusterStatus.MAINTENANCE))
    svc.store.insert_task("t1", tpu_type="v6e")
    intake(svc)
    task = svc.store.task("t1")
    assert (task.status, task.reason) == (Status.FAILED, Reason.NO_ELIGIBLE_CLUSTER)
    assert task.message == "No active cluster offers v6e"


def test_a_bad_row_does_not_hold_up_the_rows_after_it() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))
    svc.store.insert_task("bad", spec={"nonsense": True})
    svc.store.insert_task("good")
    report = intake(svc)
    assert report.failed == ["bad"]
    assert [t.task_id for _, t in report.queued] == ["good"]


def test_later_rows_of_a_batch_see_the_queue_lengths_of_earlier_ones() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1", name="a-edge"))
    svc.store.add_cluster(cluster("c2", name="b-edge"))
    for i in range(4):
        svc.store.insert_task(f"t{i}", created_at=svc.clock.now().replace(second=i))
    intake(svc)
    placed = [svc.store.task(f"t{i}").cluster_id for i in range(4)]
    assert placed == ["c1", "c2", "c1", "c2"]  # ties fall to the name, then the shorter queue


def test_queue_lengths_already_in_the_store_count() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1", name="a-edge"))
    svc.store.add_cluster(cluster("c2", name="b-edge"))
    svc.store.insert_task("old")
    assert svc.store.queue_task("old", QueueKey("c1", "2x2"), svc.clock.now())
    svc.store.insert_task("new")
    intake(svc)
    assert svc.store.task("new").cluster_id == "c2"


def test_an_idle_pool_of_the_topology_beats_a_shorter_queue() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1", name="a-edge"))
    svc.store.add_cluster(cluster("c2", name="b-edge"))
    svc.store.add_pool(idle_pool("falcon-2x2-kept", "2x2", "c2", svc.clock.now()))
    svc.store.insert_task("old")
    svc.store.queue_task("old", QueueKey("c2", "2x2"), svc.clock.now())
    svc.store.insert_task("new")
    intake(svc)
    assert svc.store.task("new").cluster_id == "c2"


def test_a_row_aborted_before_intake_is_not_taken_in() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))
    svc.store.insert_task("t1")
    snapshot = svc.store.snapshot(500, with_book=False)
    assert svc.store.request_abort("t1")  # between the snapshot and the write
    report = take_in(svc.store, snapshot, svc.say, svc.clock.now(), svc.events)
    assert report.queued == [] and report.failed == []
    assert svc.store.task("t1").status is Status.ABORTING
    assert "t1" not in svc.store.progress


def test_store_refuses_an_illegal_status_write() -> None:
    store = MemoryTaskStore()
    store.insert_task("t1")
    with pytest.raises(IllegalTransitionError):
        store.finish("t1", Outcome(Status.SUCCEEDED), [Status.PENDING], store.clock.now())
    assert store.task("t1").status is Status.PENDING


def reservation_pool(name: str, topology: str, cluster_id: str, state: PoolState) -> NodePool:
    mode = ProvisioningMode.RESERVATION
    return NodePool(cluster_id, name, topology, "ct6e-standard-4t", mode, "res", state, None)


def read(count: int, in_use: int = 0) -> ReservationCapacity:
    return ReservationCapacity("res", count, in_use, "READY", "ct6e-standard-4t")


def chosen_beside(pool: NodePool, bases: dict[str, ReservationBasis] | None) -> str | None:
    """The cluster a new 2x2 row joins, of a-edge (c1, holding ``pool``) and b-edge (c2), both of
    empty queues, with the reservations as last read (None: never read)."""
    svc = make_services()
    svc.store.add_cluster(cluster("c1", name="a-edge", reservation="res"))
    svc.store.add_cluster(cluster("c2", name="b-edge", reservation="res"))
    svc.store.add_pool(pool)
    svc.store.insert_task("t1", spec=spec_for("2x2"))
    take_in(svc.store, svc.store.snapshot(500, with_book=False), svc.say, svc.clock.now(), svc.events, bases)
    return svc.store.task("t1").cluster_id


def test_among_equal_queues_the_reservation_with_room_wins_counting_falcons_pools_now() -> None:
    # Read when both were empty; since then Falcon began creating a 4x4 pool on a's 4 nodes.
    creating = reservation_pool("falcon-4x4-new", "4x4", "c1", PoolState.CREATING)
    assert (
        chosen_beside(creating, {"c1": ReservationBasis(read(4), 0), "c2": ReservationBasis(read(4), 0)})
        == "c2"
    )


def test_a_pool_being_deleted_still_holds_its_reservation_nodes() -> None:
    going = reservation_pool("falcon-2x2-going", "2x2", "c1", PoolState.DELETING)
    bases = {"c1": ReservationBasis(read(1, in_use=1), 1), "c2": ReservationBasis(read(1), 0)}
    assert chosen_beside(going, bases) == "c2"


def test_without_a_reservation_read_equal_queues_fall_to_the_name() -> None:
    assert chosen_beside(reservation_pool("falcon-4x4-new", "4x4", "c1", PoolState.IN_USE), None) == "c1"
