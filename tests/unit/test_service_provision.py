"""Provisioning (design §5): provision's decision paths and wait_pool_ready's wait.

We test each way provision decides: reuse an idle pool; a reservation with room; a reservation
short of room (ProvisioningFallback to flex-start, counting Falcon's own pools still being
created); no reservation (flex-start); an unusable or unreadable reservation and a regional
cluster without zone (NodePoolFailed, nothing recorded); a resumed task re-planning the same
pool; a TemporaryError left to retries except on the final attempt; the TPU7x workload policy.
Then wait_pool_ready: GKE's busy refusals waited out; the cluster's marked deletions asked
before the create (not another cluster's, not a stuck one, for a bounded time); ready marks the
pool in use; ERROR ends NodePoolFailed with GKE's detail; a pool never ready ends
NodePoolTimeout at the deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from tests.unit.fakes import acquiring, cluster, idle_pool, make_services, one_cluster

from falcon.domain.errors import PermanentError, TemporaryError
from falcon.domain.lifecycle import NodePool, PoolState, TaskEnded, TaskView
from falcon.domain.model import ProvisioningMode, node_pool_name_for
from falcon.domain.node_pools import ReservationRef
from falcon.domain.scheduling import ReservationCapacity
from falcon.domain.status import Reason, Status
from falcon.services.acquisition import PoolChoice, provision, wait_pool_ready
from falcon.services.context import Services

ZONE = "us-east5-b"
RES = ReservationRef("proj", "res-a", shared=False)
POOL = node_pool_name_for("t1", "2x2")


def capacity(
    count: int, in_use: int = 0, status: str = "READY", machine: str = "ct6e-standard-4t"
) -> ReservationCapacity:
    return ReservationCapacity("res-a", count, in_use, status, machine)


def assert_failed(ended: pytest.ExceptionInfo[TaskEnded], reason: Reason, text: str) -> None:
    outcome = ended.value.outcome
    assert (outcome.status, outcome.reason) == (Status.FAILED, reason)
    assert text in outcome.message, outcome.message


# -- provision: the decision --------------------------------------------------------------------


def test_reuses_an_idle_pool_of_the_queue() -> None:
    svc = one_cluster()
    svc.store.add_pool(idle_pool())
    view = acquiring(svc, "t1")
    assert provision(svc, view) == PoolChoice("falcon-2x2-kept", None)
    pool = svc.store.pool("c1", "falcon-2x2-kept")
    assert (pool.state, pool.holder_task_id, pool.idle_since) == (PoolState.IN_USE, "t1", None)
    task = svc.store.task("t1")
    assert (task.reason, task.node_pool_name) == (Reason.PROVISIONING, "falcon-2x2-kept")
    assert task.message == "Reusing idle node pool falcon-2x2-kept..."
    assert svc.node_pools.calls == [] and svc.reservations.calls == []


def test_an_idle_pool_of_another_topology_is_not_reused() -> None:
    svc = one_cluster()
    svc.store.add_pool(idle_pool("falcon-2x4-kept", "2x4"))
    choice = provision(svc, acquiring(svc, "t1"))
    assert choice.name == POOL and choice.plan is not None
    assert svc.store.pool("c1", "falcon-2x4-kept").state is PoolState.IDLE


def test_reservation_with_room_creates_on_the_reservation() -> None:
    svc = one_cluster(reservation="res-a")
    svc.reservations.set(RES, ZONE, capacity(4, 3))
    choice = provision(svc, acquiring(svc, "t1"))
    plan = choice.plan
    assert plan is not None
    assert (plan.name, plan.mode, plan.reservation, plan.zone) == (
        POOL,
        ProvisioningMode.RESERVATION,
        "res-a",
        ZONE,
    )
    assert plan.initial_nodes == 1
    pool = svc.store.pool("c1", POOL)
    assert (pool.state, pool.holder_task_id, pool.mode, pool.reservation) == (
        PoolState.CREATING,
        "t1",
        ProvisioningMode.RESERVATION,
        "res-a",
    )
    task = svc.store.task("t1")
    assert (task.reason, task.node_pool_name) == (Reason.PROVISIONING, POOL)
    assert task.message == "Creating node pool (reservation: res-a)..."
    assert svc.reservations.calls == [(RES, ZONE)]
    assert svc.node_pools.calls == []  # provision decides; wait_pool_ready creates


def test_reservation_short_of_room_falls_back_to_flex_start() -> None:
    svc = one_cluster(reservation="res-a")
    svc.reservations.set(RES, ZONE, capacity(4, 4))
    plan = provision(svc, acquiring(svc, "t1")).plan
    assert plan is not None and (plan.mode, plan.reservation) == (ProvisioningMode.FLEX_START, None)
    assert plan.initial_nodes == 0
    task = svc.store.task("t1")
    assert task.reason is Reason.PROVISIONING_FALLBACK
    assert task.message.startswith("Reservation has too little room left")


def test_reservation_room_taken_by_falcon_pools_still_creating_counts() -> None:
    svc = one_cluster(reservation="res-a")
    svc.reservations.set(RES, ZONE, capacity(1, 0))  # Compute does not count a pool being created
    svc.store.add_pool(
        NodePool(
            "c1",
            "falcon-other",
            "2x2",
            "ct6e-standard-4t",
            ProvisioningMode.RESERVATION,
            "res-a",
            PoolState.CREATING,
            "t0",
        )
    )
    plan = provision(svc, acquiring(svc, "t1")).plan
    assert plan is not None and plan.mode is ProvisioningMode.FLEX_START
    assert svc.store.task("t1").reason is Reason.PROVISIONING_FALLBACK


def test_no_reservation_creates_flex_start() -> None:
    svc = one_cluster()
    plan = provision(svc, acquiring(svc, "t1")).plan
    assert plan is not None and (plan.mode, plan.reservation) == (ProvisioningMode.FLEX_START, None)
    task = svc.store.task("t1")
    assert (task.reason, task.message) == (Reason.PROVISIONING, "Creating node pool (flex-start)...")
    assert svc.reservations.calls == []


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        pytest.param(capacity(8, status="CREATING"), "status is CREATING, not READY", id="not-ready"),
        pytest.param(
            capacity(8, machine="ct5lp-hightpu-4t"), "it reserves ct5lp-hightpu-4t", id="other-machine"
        ),
        pytest.param(PermanentError("permission denied on reservation"), "permission denied", id="forbidden"),
        pytest.param(None, "reservation res-a not found", id="not-found"),
    ],
)
def test_unusable_reservation_fails_node_pool_failed(answer: object, text: str) -> None:
    svc = one_cluster(reservation="res-a")
    if answer is not None:
        svc.reservations.set(RES, ZONE, answer)  # type: ignore[arg-type]
    view = acquiring(svc, "t1")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, view)
    assert_failed(ended, Reason.NODE_POOL_FAILED, text)
    assert svc.store.pool("c1", POOL) is None  # nothing recorded: no flex-start behind the user's back
    assert svc.store.task("t1").reason is Reason.PROVISIONING


def test_malformed_reservation_name_fails_node_pool_failed() -> None:
    svc = one_cluster(reservation="Not A Name")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, acquiring(svc, "t1"))
    assert_failed(ended, Reason.NODE_POOL_FAILED, "neither NAME nor projects/OWNER/reservations/NAME")


def test_shared_reservation_is_read_in_its_owner_project() -> None:
    svc = one_cluster(reservation="projects/owner/reservations/res-a")
    ref = ReservationRef("owner", "res-a", shared=True)
    svc.reservations.set(ref, ZONE, capacity(4))
    plan = provision(svc, acquiring(svc, "t1")).plan
    assert svc.reservations.calls == [(ref, ZONE)]
    assert plan is not None and plan.reservation == "res-a"  # the name Compute reported


def test_regional_cluster_without_zone_fails_node_pool_failed() -> None:
    svc = one_cluster(location="us-east5")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, acquiring(svc, "t1"))
    assert_failed(ended, Reason.NODE_POOL_FAILED, "is regional and has no node zone")
    assert svc.store.pools == {}


def test_regional_cluster_with_a_zone_puts_the_pool_there() -> None:
    svc = one_cluster(location="us-east5", zone="us-east5-a")
    plan = provision(svc, acquiring(svc, "t1")).plan
    assert plan is not None and plan.zone == "us-east5-a"


def test_resumed_task_finds_its_creating_pool_and_replans_the_same() -> None:
    svc = one_cluster(reservation="res-a")
    svc.reservations.set(RES, ZONE, capacity(1))
    view = acquiring(svc, "t1")
    first = provision(svc, view)
    svc.reservations.set(RES, ZONE, capacity(1, 1))  # its own pool now fills the reservation
    again = provision(svc, view)  # a retry, or a new attempt after a crash
    assert again == first
    assert svc.store.writes("write_ahead_pool") == 1
    assert len(svc.reservations.calls) == 1  # the decision is not made twice


def test_resumed_task_whose_pool_is_ready_gets_it_without_a_plan() -> None:
    svc = one_cluster()
    view = acquiring(svc, "t1")
    provision(svc, view)
    svc.store.pool_ready("c1", POOL, svc.clock.now())
    assert provision(svc, view) == PoolChoice(POOL, None)


def test_temporary_error_is_left_to_retries_before_the_final_attempt() -> None:
    svc = one_cluster(reservation="res-a")
    svc.reservations.set(RES, ZONE, TemporaryError("compute 503"))
    view = acquiring(svc, "t1")
    with pytest.raises(TemporaryError):
        provision(svc, view)
    assert svc.store.pools == {}


def test_temporary_error_on_the_final_attempt_fails_node_pool_failed() -> None:
    svc = one_cluster(reservation="res-a")
    svc.reservations.set(RES, ZONE, TemporaryError("compute 503"))
    with pytest.raises(TaskEnded) as ended:
        provision(svc, acquiring(svc, "t1"), final_attempt=True)
    assert_failed(ended, Reason.NODE_POOL_FAILED, "compute 503")


def test_tpu7x_multi_host_ensures_its_workload_policy() -> None:
    svc = one_cluster(tpu_type="v7x")
    view = acquiring(svc, "t1", "2x2x2", tpu_type="v7x")
    plan = provision(svc, view).plan
    assert plan is not None and plan.workload_policy == "falcon-tpu7x-2x2x2"
    assert svc.workload_policies.ensured == [("proj", "us-east5", "falcon-tpu7x-2x2x2", "2x2x2")]


def test_single_host_needs_no_workload_policy() -> None:
    svc = one_cluster(tpu_type="v7x")
    provision(svc, acquiring(svc, "t1", "2x2x1", tpu_type="v7x"))
    assert svc.workload_policies.ensured == []


def test_workload_policy_refused_fails_node_pool_failed() -> None:
    svc = one_cluster(tpu_type="v7x")
    svc.workload_policies.error = PermanentError("policy quota exceeded")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, acquiring(svc, "t1", "2x2x2", tpu_type="v7x"))
    assert_failed(ended, Reason.NODE_POOL_FAILED, "policy quota exceeded")


def test_abort_during_the_decision_raises_aborted() -> None:
    svc = one_cluster()
    view = acquiring(svc, "t1")
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, view)
    assert ended.value.outcome.status is Status.ABORTED
    assert svc.store.pool("c1", POOL).holder_task_id == "t1"  # recorded: the release deletes it


# -- wait_pool_ready ---------------------------------------------------------------------------


def planned(svc: Services, task_id: str = "t1") -> tuple[TaskView, PoolChoice]:
    view = acquiring(svc, task_id)
    return view, provision(svc, view)


def test_ready_pool_is_marked_in_use() -> None:
    svc = one_cluster()
    view, choice = planned(svc)
    svc.node_pools.script(POOL, polls_to_ready=3)
    started = svc.clock.now()
    wait_pool_ready(svc, view, choice, started)
    assert svc.store.pool("c1", POOL).state is PoolState.IN_USE
    assert svc.node_pools.count("create") == 1 and svc.node_pools.count("get") == 4
    assert svc.node_pools.plans == [choice.plan]
    assert svc.clock.now() == started + timedelta(seconds=3)


def test_gke_busy_refusals_are_waited_out() -> None:
    svc = one_cluster()
    view, choice = planned(svc)
    svc.node_pools.refuse_create(5)
    started = svc.clock.now()
    wait_pool_ready(svc, view, choice, started)
    assert svc.node_pools.count("create") == 6
    # Asked again after FALCON_GKE_BUSY_RETRY_SECONDS (5 s) each time, polling meanwhile.
    assert svc.clock.now() == started + timedelta(seconds=25)
    assert svc.clock.sleeps == [1.0] * 25  # each poll may take a pool that went idle (hand-over)
    assert svc.store.pool("c1", POOL).state is PoolState.IN_USE


def marked_for_deletion(svc: Services, name: str, cluster_id: str = "c1", ago: float = 0.0) -> None:
    """A pool of another queue the reaper marked ``ago`` seconds before now; GKE not done yet."""
    svc.store.add_pool(idle_pool(name, "2x4", cluster_id))
    assert svc.store.start_deleting_pool(cluster_id, name, None, svc.clock.now() - timedelta(seconds=ago))


def at_polls(svc: Services, actions: dict[int, Callable[[], None]]) -> list[int]:
    """Runs ``actions[n]`` at the end of the task's n-th poll's wait (from 1); returns the creates
    asked before each wait."""
    creates: list[int] = []
    sleep = svc.clock.sleep

    def poll(seconds: float) -> None:
        creates.append(svc.node_pools.count("create"))
        sleep(seconds)
        if len(creates) in actions:
            actions[len(creates)]()

    svc.clock.sleep = poll  # type: ignore[method-assign]
    return creates


def one_at_a_time(**cluster_fields: Any) -> Services:
    """The cluster ``c1`` on a GKE that runs one node-pool operation at a time: its marked
    deletions go before a creation (``FALCON_GKE_OPERATIONS_PER_CLUSTER`` 1)."""
    svc = make_services(gke_operations_per_cluster=1)
    svc.store.add_cluster(cluster("c1", **cluster_fields))
    return svc


def gone_after(svc: Services, polls: int, cluster_id: str, name: str) -> list[int]:
    """The reconcile round sees the pool gone at the task's ``polls``-th poll."""
    return at_polls(svc, {polls: lambda: svc.store.pool_deleted(cluster_id, name, svc.clock.now())})


def test_a_pool_marked_for_deletion_in_the_cluster_is_deleted_before_the_create_is_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc = one_at_a_time()
    view, choice = planned(svc)
    marked_for_deletion(svc, "falcon-2x4-spare")
    creates = gone_after(svc, 3, "c1", "falcon-2x4-spare")
    caplog.set_level("INFO", logger="falcon")
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert creates == [0, 0, 0]  # not asked while the deletion was under way
    assert svc.node_pools.count("create") == 1  # asked right after it, and ready at the first look
    assert svc.store.pool("c1", POOL).state is PoolState.IN_USE
    assert [r.getMessage() for r in caplog.records if "create_after_deletions" in r.getMessage()] == [
        "event=create_after_deletions task_id=t1 deletions=1"
    ]


def test_a_create_waits_for_the_clusters_deletions_twice_the_creation_prior_at_most() -> None:
    svc = one_at_a_time()
    view, choice = planned(svc)
    window = 2 * svc.settings.pool_creation_prior_seconds
    marked_for_deletion(svc, "falcon-2x4-0")
    polls = range(1, round(window) + 10)  # a pool marked at every poll, none ever gone
    creates = at_polls(svc, {n: lambda n=n: marked_for_deletion(svc, f"falcon-2x4-{n}") for n in polls})
    started = svc.clock.now()
    wait_pool_ready(svc, view, choice, started)
    assert svc.node_pools.count("create") == 1 and set(creates) == {0}
    assert svc.clock.now() == started + timedelta(seconds=window)


def test_a_deletion_in_another_cluster_does_not_hold_the_create() -> None:
    svc = one_cluster()
    view, choice = planned(svc)
    svc.store.add_cluster(cluster("c2"))
    marked_for_deletion(svc, "falcon-2x4-spare", cluster_id="c2")
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert svc.node_pools.plans == [choice.plan]
    assert svc.clock.sleeps == []  # asked at once, ready at the first look


def test_where_gke_runs_operations_side_by_side_a_create_does_not_wait_for_the_deletions() -> None:
    svc = one_cluster()  # the default: GKE's quota of operations side by side
    view, choice = planned(svc)
    marked_for_deletion(svc, "falcon-2x4-spare")
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert svc.node_pools.plans == [choice.plan]
    assert svc.clock.sleeps == []  # asked at once beside the deletion, ready at the first look


def test_a_deletion_marked_longer_ago_than_twice_the_creation_prior_is_not_waited_for() -> None:
    svc = one_at_a_time()
    view, choice = planned(svc)
    prior = svc.settings.pool_creation_prior_seconds
    marked_for_deletion(svc, "falcon-2x4-stuck", ago=2 * prior + 1)
    marked_for_deletion(svc, "falcon-2x4-fresh", ago=prior)
    creates = gone_after(svc, 2, "c1", "falcon-2x4-fresh")
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert creates == [0, 0] and svc.node_pools.count("create") == 1  # the fresh one waited for
    assert svc.store.pool("c1", "falcon-2x4-stuck").state is PoolState.DELETING


def fallen_back(svc: Services) -> tuple[TaskView, PoolChoice]:
    """A task whose reservation was full when it decided: its pool is planned flex-start."""
    svc.reservations.set(RES, ZONE, capacity(1, 1))
    view, choice = planned(svc)
    assert choice.plan is not None and choice.plan.mode is ProvisioningMode.FLEX_START
    return view, choice


def room_freed(svc: Services, polls: int, name: str | None = None) -> list[int]:
    """At the task's ``polls``-th poll the reservation has room again (``name``: the deletion that
    went first is done)."""

    def freed() -> None:
        if name is not None:
            svc.store.pool_deleted("c1", name, svc.clock.now())
        svc.reservations.set(RES, ZONE, capacity(1, 0))

    return at_polls(svc, {polls: freed})


def test_a_fallback_that_waited_for_a_deletion_takes_the_reservation_room_the_deletion_freed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc = one_at_a_time(reservation="res-a")
    view, choice = fallen_back(svc)
    marked_for_deletion(svc, "falcon-2x4-spare")
    room_freed(svc, 2, "falcon-2x4-spare")
    caplog.set_level("INFO", logger="falcon")
    wait_pool_ready(svc, view, choice, svc.clock.now())
    [asked] = svc.node_pools.plans
    assert (asked.name, asked.mode, asked.reservation, asked.initial_nodes) == (
        POOL,
        ProvisioningMode.RESERVATION,
        "res-a",
        1,
    )
    pool = svc.store.pool("c1", POOL)
    assert (pool.state, pool.mode, pool.reservation) == (
        PoolState.IN_USE,
        ProvisioningMode.RESERVATION,
        "res-a",
    )
    task = svc.store.task("t1")
    assert (task.reason, task.message) == (Reason.PROVISIONING, "Creating node pool (reservation: res-a)...")
    assert f"event=fallback_withdrawn task_id=t1 pool={POOL}" in caplog.messages


def test_a_fallback_refused_while_gke_was_busy_takes_reservation_room_that_came_meanwhile() -> None:
    svc = one_cluster(reservation="res-a")
    view, choice = fallen_back(svc)
    svc.node_pools.refuse_create(1)
    room_freed(svc, 1)  # the operation GKE was busy with freed the room
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert svc.node_pools.count("create") == 2  # refused as flex-start, accepted on the reservation
    assert [p.mode for p in svc.node_pools.plans] == [ProvisioningMode.RESERVATION]
    assert svc.store.pool("c1", POOL).mode is ProvisioningMode.RESERVATION


def test_a_fallback_still_short_of_room_after_its_wait_stays_flex_start() -> None:
    svc = one_cluster(reservation="res-a")
    view, choice = fallen_back(svc)
    marked_for_deletion(svc, "falcon-2x4-spare")
    gone_after(svc, 2, "c1", "falcon-2x4-spare")  # a flex-start pool: no room freed
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert svc.node_pools.plans == [choice.plan]
    assert svc.store.pool("c1", POOL).mode is ProvisioningMode.FLEX_START
    assert svc.store.task("t1").reason is Reason.PROVISIONING_FALLBACK


def test_a_fallback_gke_already_has_keeps_its_mode_even_when_room_came() -> None:
    svc = one_cluster(reservation="res-a")
    view, choice = fallen_back(svc)
    svc.node_pools.add_existing(svc.store.clusters()[0], POOL, polls_to_ready=2)  # an earlier attempt's
    marked_for_deletion(svc, "falcon-2x4-spare")
    room_freed(svc, 1, "falcon-2x4-spare")
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert svc.node_pools.plans == []  # 409 for the flex-start create it asked again
    assert svc.store.pool("c1", POOL).mode is ProvisioningMode.FLEX_START
    assert len(svc.reservations.calls) == 1  # the decision only: GKE's answer settled it


def test_a_fallback_whose_reservation_cannot_be_read_after_its_wait_stays_flex_start() -> None:
    svc = one_cluster(reservation="res-a")
    view, choice = fallen_back(svc)
    marked_for_deletion(svc, "falcon-2x4-spare")
    at_polls(svc, {1: lambda: svc.reservations.set(RES, ZONE, TemporaryError("compute 503"))})
    gone_after(svc, 2, "c1", "falcon-2x4-spare")
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert svc.node_pools.plans == [choice.plan]
    assert svc.store.task("t1").reason is Reason.PROVISIONING_FALLBACK


def test_a_fallback_asked_at_once_reads_the_reservation_only_for_its_decision() -> None:
    svc = one_cluster(reservation="res-a")
    view, choice = fallen_back(svc)
    svc.reservations.set(RES, ZONE, capacity(1, 0))  # room came, but nothing made the task wait
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert svc.node_pools.plans == [choice.plan] and len(svc.reservations.calls) == 1


def test_pool_created_by_an_earlier_attempt_is_not_created_again() -> None:
    svc = one_cluster()
    view, choice = planned(svc)
    svc.node_pools.add_existing(svc.store.clusters()[0], POOL, polls_to_ready=1)
    wait_pool_ready(svc, view, choice, svc.clock.now())
    assert svc.node_pools.plans == []  # 409: already there
    assert svc.store.pool("c1", POOL).state is PoolState.IN_USE


def test_broken_pool_fails_node_pool_failed_with_gke_detail() -> None:
    svc = one_cluster()
    view, choice = planned(svc)
    svc.node_pools.script(
        POOL,
        polls_to_ready=1,
        error="no TPU capacity",
        operation_error="GCE_STOCKOUT: zone us-east5-b has no capacity",
    )
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, choice, svc.clock.now())
    assert ended.value.outcome.message == (
        f"Node pool creation failed: node pool {POOL} is ERROR: no TPU capacity; "
        "operation: GCE_STOCKOUT: zone us-east5-b has no capacity"
    )
    assert ended.value.outcome.reason is Reason.NODE_POOL_FAILED


def test_create_refused_for_good_fails_node_pool_failed() -> None:
    svc = one_cluster()
    view, choice = planned(svc)
    svc.node_pools.fail_create("Quota TPUS exceeded")
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, choice, svc.clock.now())
    assert_failed(ended, Reason.NODE_POOL_FAILED, "Quota TPUS exceeded")


def test_pool_that_disappears_fails_node_pool_failed() -> None:
    svc = one_cluster()
    view, choice = planned(svc)
    svc.node_pools.script(POOL, never_ready=True)
    cl = svc.store.clusters()[0]
    svc.node_pools.create(cl, choice.plan)  # type: ignore[arg-type]
    svc.node_pools.delete(cl, POOL)
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, PoolChoice(POOL, None), svc.clock.now())
    assert_failed(ended, Reason.NODE_POOL_FAILED, f"node pool {POOL} disappeared")


def test_pool_never_ready_times_out_at_the_deadline() -> None:
    svc = make_services(node_pool_timeout_seconds=120)
    svc.store.add_cluster(cluster("c1"))
    view, choice = planned(svc)
    svc.node_pools.script(POOL, never_ready=True)
    started = svc.clock.now()
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, choice, started)
    assert svc.clock.now() == started + timedelta(seconds=120)
    outcome = ended.value.outcome
    assert (outcome.status, outcome.reason) == (Status.FAILED, Reason.NODE_POOL_TIMEOUT)
    assert outcome.message == f"Node pool creation timed out (2m): node pool {POOL} still PROVISIONING"
    assert svc.store.pool("c1", POOL).state is PoolState.CREATING


def test_deadline_runs_from_the_start_of_acquisition() -> None:
    svc = make_services(node_pool_timeout_seconds=120)
    svc.store.add_cluster(cluster("c1"))
    view, choice = planned(svc)
    svc.node_pools.script(POOL, never_ready=True)
    started = svc.clock.now()
    svc.clock.advance(100)  # a resumed run: most of the time is gone
    with pytest.raises(TaskEnded):
        wait_pool_ready(svc, view, choice, started)
    assert svc.clock.now() == started + timedelta(seconds=120)


def test_gke_refusing_until_the_deadline_times_out_saying_so() -> None:
    svc = make_services(node_pool_timeout_seconds=30)
    svc.store.add_cluster(cluster("c1"))
    view, choice = planned(svc)
    svc.node_pools.refuse_create(100)
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, choice, svc.clock.now())
    assert ended.value.outcome.reason is Reason.NODE_POOL_TIMEOUT
    assert "GKE kept refusing: cluster is running another operation" in ended.value.outcome.message


def test_a_deletion_not_done_by_the_deadline_times_out_saying_the_pool_was_not_asked_for() -> None:
    svc = make_services(node_pool_timeout_seconds=60, gke_operations_per_cluster=1)
    svc.store.add_cluster(cluster("c1"))
    view, choice = planned(svc)
    marked_for_deletion(svc, "falcon-2x4-slow")
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, choice, svc.clock.now())
    assert ended.value.outcome.message == (
        f"Node pool creation timed out (1m): node pool {POOL} not asked for: "
        "the cluster's deletions went first"
    )
    assert svc.node_pools.count("create") == 0
