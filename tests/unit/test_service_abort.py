"""Aborts in every phase (design §8), and the end of running tasks followed by the dispatcher.

We test: waiting (Aborted at the next tick); acquiring (TaskEnded(Aborted) from provision,
wait_pool_ready and wait_pods_running, then a release that ends Aborted and gives the pool
back; a pool GKE is still creating is waited for and kept for a waiting task, one that never
reached GKE or broke is deleted); running (follow_running moves it to releasing with Aborted);
releasing (write_outcome turns the recorded outcome into Aborted). Then follow_running's other
endings: Job complete, Job failed, Job vanished (while running, and while its pods start),
timeout from dispatched_at; and what it leaves alone.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.unit.fakes import (
    acquiring,
    arrivals,
    cluster,
    clusters_of,
    idle_pool,
    k8s_of,
    queued,
    running,
    spec_for,
)

from falcon.domain.errors import TemporaryError
from falcon.domain.lifecycle import Outcome, Phase, PoolState, TaskEnded, succeeded
from falcon.domain.model import ProvisioningMode, QueueKey, TaskSpec, k8s_job_name_for, node_pool_name_for
from falcon.domain.node_pools import ReservationRef
from falcon.domain.scheduling import ReservationCapacity
from falcon.domain.status import Reason, Status
from falcon.domain.workloads import JobState
from falcon.services import reconcile
from falcon.services.acquisition import dispatch, provision, wait_pods_running, wait_pool_ready
from falcon.services.context import Services, load_view
from falcon.services.dispatching import Dispatcher
from falcon.services.release import record_outcome, release, write_outcome

POOL = node_pool_name_for("t1", "2x2")
JOB = k8s_job_name_for("t1")


def end_acquisition(svc: Services, task_id: str, ended: TaskEnded) -> Outcome:
    """What task_lifecycle does with a TaskEnded: record it, then release inline."""
    assert record_outcome(svc, task_id, ended.outcome, [Phase.ACQUIRING], released_inline=True)
    return release(svc, task_id)


def assert_aborted(svc: Services, task_id: str) -> None:
    task = svc.store.task(task_id)
    assert (task.status, task.reason, task.message) == (Status.ABORTED, None, "Aborted by user")
    assert task.aborted_at == svc.clock.now()
    assert svc.store.progress[task_id].phase is Phase.DONE


# -- waiting --------------------------------------------------------------------------------------


def test_waiting_task_ends_aborted_at_the_next_tick(svc: Services) -> None:
    d = Dispatcher(svc)
    try:
        svc.store.insert_task("t0")
        svc.clock.advance(1)
        svc.store.insert_task("t1")
        d.tick()
        assert svc.store.progress["t1"].phase is Phase.WAITING
        svc.store.request_abort("t1")
        svc.clock.advance(1)
        assert d.tick().aborted == ["t1"]
    finally:
        d.close()
    assert_aborted(svc, "t1")
    assert svc.launcher.acquires == [("t0", svc.store.progress["t0"].lease_id, 1)]


# -- acquiring ----------------------------------------------------------------------------------


def test_abort_before_the_decision_is_seen_by_provision(svc: Services) -> None:
    view = acquiring(svc, "t1")
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, view)
    assert ended.value.outcome.status is Status.ABORTED
    assert svc.node_pools.calls == []


def test_abort_while_reusing_an_idle_pool_is_seen_by_provision(svc: Services) -> None:
    svc.store.add_pool(idle_pool("falcon-kept", "2x2", "c1", svc.clock.now()))
    view = acquiring(svc, "t1")
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, view)
    assert ended.value.outcome.status is Status.ABORTED


def test_abort_while_the_pool_is_created_is_seen_by_wait_pool_ready(svc: Services) -> None:
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.node_pools.script(POOL, never_ready=True)
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, choice, svc.clock.now())
    assert ended.value.outcome.status is Status.ABORTED
    assert svc.node_pools.calls == []  # not even created


def test_abort_while_pods_start_is_seen_by_wait_pods_running(svc: Services) -> None:
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    wait_pool_ready(svc, view, choice, svc.clock.now())
    k8s_of(svc).script(JOB, never_running=True, waiting_reason="ContainerCreating")
    dispatch(svc, view, choice.name)
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        wait_pods_running(svc, load_view(svc, "t1"), JOB)
    assert ended.value.outcome.status is Status.ABORTED


def test_aborted_acquisition_releases_job_and_pool_and_ends_aborted(svc: Services) -> None:
    arrivals(svc, QueueKey("c1", "2x2"))  # a queue used about once an hour: its idle pools go
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    wait_pool_ready(svc, view, choice, svc.clock.now())
    k8s_of(svc).script(JOB, never_running=True)
    dispatch(svc, view, choice.name)
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        wait_pods_running(svc, load_view(svc, "t1"), JOB)
    outcome = end_acquisition(svc, "t1", ended.value)
    assert outcome.status is Status.ABORTED
    assert_aborted(svc, "t1")
    assert k8s_of(svc).jobs == {}
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc.node_pools.pools == {}


def test_abort_at_the_pool_decision_does_not_leave_the_pool_record_held(svc: Services) -> None:
    """The abort lands after the dispatcher's pick, before provision writes its decision: the pool
    is recorded (write-ahead) but the row refuses its name; the release must still free it."""
    view = acquiring(svc, "t1")
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, view)
    end_acquisition(svc, "t1", ended.value)
    assert_aborted(svc, "t1")
    pool = svc.store.pool("c1", POOL)
    assert pool is None or pool.state in (PoolState.DELETING, PoolState.DELETED), pool


def test_abort_while_gke_creates_the_pool_waits_for_it_and_keeps_it_for_the_waiter(svc: Services) -> None:
    """Design §8, abort while provisioning: wait for the create to finish, then check reuse."""
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.node_pools.script(POOL, polls_to_ready=3)
    svc.node_pools.create(view.cluster, choice.plan)  # GKE accepted the create
    queued(svc, "t2")
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, choice, svc.clock.now())
    assert end_acquisition(svc, "t1", ended.value).status is Status.ABORTED
    assert_aborted(svc, "t1")
    assert svc.store.pool("c1", POOL).state is PoolState.IDLE
    assert svc.node_pools.count("get", POOL) == 4 and svc.node_pools.count("delete") == 0
    svc.store.start_acquiring("t2", QueueKey("c1", "2x2"), "bob", "lease-2", "picked", svc.clock.now())
    assert provision(svc, load_view(svc, "t2")).name == POOL


@pytest.mark.parametrize(
    "gke",
    [
        pytest.param({}, id="create never reached GKE"),
        pytest.param({"error": "GCE_STOCKOUT: no capacity"}, id="pool went to ERROR"),
    ],
)
def test_abort_while_provisioning_deletes_a_pool_that_cannot_be_handed_on(
    svc: Services, gke: dict[str, str]
) -> None:
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    if gke:
        svc.node_pools.script(POOL, **gke)
        svc.node_pools.create(view.cluster, choice.plan)
    queued(svc, "t2")
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc, view, choice, svc.clock.now())
    assert end_acquisition(svc, "t1", ended.value).message == "Aborted by user"
    assert_aborted(svc, "t1")
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc.node_pools.pools == {}


def test_abort_while_claiming_an_idle_pool_does_not_leave_it_held(svc: Services) -> None:
    """Same race on the reuse path: the idle pool is claimed, the row refuses the pool's name."""
    svc.store.add_pool(idle_pool("falcon-kept", "2x2", "c1", svc.clock.now()))
    view = acquiring(svc, "t1")
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, view)
    end_acquisition(svc, "t1", ended.value)
    assert_aborted(svc, "t1")
    pool = svc.store.pool("c1", "falcon-kept")
    assert not (pool.state is PoolState.IN_USE and pool.holder_task_id == "t1"), pool


def test_abort_at_a_reservation_decision_does_not_keep_holding_reservation_room(svc: Services) -> None:
    """Consequence of the same race: the aborted task's pool record stays `creating` and keeps
    counting against the reservation, so the next task falls back to flex-start."""
    svc.store.cluster_rows["c1"] = cluster("c1", reservation="res-a")
    svc.reservations.set(
        ReservationRef("proj", "res-a", False),
        "us-east5-b",
        ReservationCapacity("res-a", 1, 0, "READY", "ct6e-standard-4t"),
    )
    view = acquiring(svc, "t1")
    svc.store.request_abort("t1")
    with pytest.raises(TaskEnded) as ended:
        provision(svc, view)
    end_acquisition(svc, "t1", ended.value)
    svc.slots.release(svc.slots.holder(view.queue.slot_name) or "")
    plan = provision(svc, acquiring(svc, "t2")).plan
    assert plan is not None and plan.mode is ProvisioningMode.RESERVATION, plan


# -- running ----------------------------------------------------------------------------------


def test_running_task_aborted_moves_to_releasing_with_aborted(svc: Services) -> None:
    running(svc, "t1")
    svc.store.request_abort("t1")
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t1"]
    progress = svc.store.progress["t1"]
    assert progress.phase is Phase.RELEASING
    assert progress.outcome == Outcome(Status.ABORTED, None, "Aborted by user")
    assert svc.store.task("t1").status is Status.ABORTING  # the release writes Aborted
    assert reconcile.supervise_runs(svc) == ["t1"]
    assert svc.launcher.releases == [("t1", 1)]
    assert release(svc, "t1").status is Status.ABORTED
    assert_aborted(svc, "t1")


# -- releasing --------------------------------------------------------------------------------


def test_abort_during_release_turns_the_outcome_into_aborted(svc: Services) -> None:
    running(svc, "t1")
    k8s_of(svc).job(JOB).script.complete = True
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t1"]
    assert svc.store.progress["t1"].outcome == succeeded(svc.say)
    svc.store.request_abort("t1")  # the row is still Running: upstream may abort it
    assert write_outcome(svc, svc.store.task("t1"), succeeded(svc.say)).status is Status.ABORTED
    assert_aborted(svc, "t1")


def test_release_of_a_task_aborted_while_releasing_ends_aborted(svc: Services) -> None:
    running(svc, "t1")
    k8s_of(svc).job(JOB).script.complete = True
    reconcile.follow_running(svc, clusters_of(svc))
    svc.store.request_abort("t1")
    assert release(svc, "t1").status is Status.ABORTED
    assert_aborted(svc, "t1")


# -- follow_running's other endings --------------------------------------------------------------


def test_completed_job_moves_to_releasing_with_succeeded(svc: Services) -> None:
    running(svc, "t1")
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == []
    k8s_of(svc).job(JOB).script.complete = True
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t1"]
    assert svc.store.task("t1").message == "Job finished, cleaning up the node pool..."
    assert release(svc, "t1") == Outcome(Status.SUCCEEDED, None, "")
    task = svc.store.task("t1")
    assert (task.status, task.finished_at) == (Status.SUCCEEDED, svc.clock.now())


def test_failed_job_moves_to_releasing_with_job_failed(svc: Services) -> None:
    running(svc, "t1")
    script = k8s_of(svc).job(JOB).script
    script.failed_condition, script.terminated = "BackoffLimitExceeded: limit", [("OOMKilled", 137)]
    reconcile.follow_running(svc, clusters_of(svc))
    assert svc.store.progress["t1"].outcome == Outcome(
        Status.FAILED, Reason.JOB_FAILED, f"Pod {JOB}-0 terminated: OOMKilled (exit code 137)"
    )
    assert release(svc, "t1").status is Status.FAILED
    assert svc.store.task("t1").reason is Reason.JOB_FAILED


def test_vanished_job_fails_the_task(svc: Services) -> None:
    running(svc, "t1")
    del k8s_of(svc).jobs[("falcon-jobs", JOB)]
    reconcile.follow_running(svc, clusters_of(svc))
    assert svc.store.progress["t1"].outcome == Outcome(
        Status.FAILED, Reason.JOB_FAILED, f"Kubernetes Job {JOB} disappeared from the cluster"
    )


def test_job_deleted_while_its_pods_start_fails_the_task_and_is_not_submitted_again(svc: Services) -> None:
    arrivals(svc, QueueKey("c1", "2x2"))  # a queue used about once an hour: its idle pools go
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    wait_pool_ready(svc, view, choice, svc.clock.now())
    k8s_of(svc).script(JOB, never_running=True)
    dispatch(svc, view, choice.name)
    del k8s_of(svc).jobs[("falcon-jobs", JOB)]
    with pytest.raises(TaskEnded) as ended:
        wait_pods_running(svc, load_view(svc, "t1"), JOB)
    assert ended.value.outcome == Outcome(
        Status.FAILED, Reason.JOB_FAILED, f"Kubernetes Job {JOB} disappeared from the cluster"
    )
    assert end_acquisition(svc, "t1", ended.value).reason is Reason.JOB_FAILED
    assert k8s_of(svc).count("create_job") == 1
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED


def test_running_task_times_out_from_dispatched_at(svc: Services) -> None:
    running(svc, "t1", timeout_seconds=3600)
    dispatched_at = svc.store.task("t1").dispatched_at
    svc.clock.advance((dispatched_at + timedelta(seconds=3599) - svc.clock.now()).total_seconds())
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == []
    svc.clock.advance(1)
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t1"]
    assert svc.store.progress["t1"].outcome == Outcome(
        Status.FAILED, Reason.TIMEOUT, "Task timed out (3600s), Job cancelled"
    )
    release(svc, "t1")
    assert (svc.store.task("t1").status, k8s_of(svc).jobs) == (Status.FAILED, {})


def test_a_running_task_whose_pods_can_no_longer_start_ends_and_only_its_pods_are_read(
    svc: Services,
) -> None:
    """A round reads the pods of the Jobs with a pod not started, not every Falcon pod: at a
    thousand running Jobs those are a few, and listing all of them was most of the round. A Job
    whose pods all succeeded, its condition not set yet, is not one of them."""
    for task_id, topology in (("t1", "2x2"), ("t2", "2x4"), ("t3", "4x4")):
        running(svc, task_id, topology)
    restarted = k8s_of(svc).job(k8s_job_name_for("t2")).script
    restarted.never_running, restarted.waiting_reason = True, "InvalidImageName"
    k8s_of(svc).job(k8s_job_name_for("t3")).script.pods_succeeded = True

    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t2"]
    assert svc.store.progress["t2"].outcome.message.startswith("Pods cannot start: ")  # type: ignore[union-attr]
    assert [c for c in k8s_of(svc).calls if c[0] == "pods_of_jobs"] == [
        ("pods_of_jobs", frozenset({k8s_job_name_for("t2")}))
    ]


def test_a_round_reads_no_pods_or_events_for_jobs_whose_pods_all_ended(svc: Services) -> None:
    """Pods that all succeeded can no longer fail to start: until the Job controller sets the
    Job's condition, the round follows it from the Job alone."""
    running(svc, "t1")
    k8s_of(svc).job(JOB).script.pods_succeeded = True
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == []
    assert [c for c in k8s_of(svc).calls if c[0] in ("pods_of_jobs", "warning_events")] == []
    k8s_of(svc).job(JOB).script.complete = True
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t1"]


def test_a_round_reads_the_warning_events_only_for_pods_they_could_end(svc: Services) -> None:
    """A running task's pod replaced and waiting for a node (its FailedScheduling events can end
    nothing) costs the round its pods and not the namespace's Warning events; once it waits on
    its node (a mount, a pull), the events are read."""
    running(svc, "t1")
    replaced = k8s_of(svc).job(JOB).script
    replaced.never_running, replaced.unschedulable = True, "0/1 nodes are available"
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == []
    assert (k8s_of(svc).count("pods_of_jobs"), k8s_of(svc).count("warning_events")) == (1, 0)
    replaced.unschedulable, replaced.waiting_reason = None, "ContainerCreating"
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == []
    assert (k8s_of(svc).count("pods_of_jobs"), k8s_of(svc).count("warning_events")) == (2, 1)


def test_unreachable_cluster_is_tried_again_next_round(svc: Services) -> None:
    running(svc, "t1")
    k8s_of(svc).job(JOB).script.complete = True
    jobs = k8s_of(svc)
    original = jobs.list_jobs

    def down(namespace: str, selector: str) -> list[JobState]:
        raise TemporaryError("connection refused")

    jobs.list_jobs = down  # type: ignore[method-assign]
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == []
    jobs.list_jobs = original  # type: ignore[method-assign]
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t1"]


def test_a_job_missing_from_the_list_is_read_by_name_before_it_counts_as_vanished(svc: Services) -> None:
    """A list answered from a watch may not hold yet a Job created a moment ago."""
    running(svc, "t1")
    jobs = k8s_of(svc)
    jobs.list_jobs = lambda namespace, selector: []  # type: ignore[method-assign]
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == []
    assert jobs.calls[-1] == ("get_job", JOB)

    original = jobs.get_job

    def unanswered(namespace: str, name: str) -> JobState:
        raise TemporaryError("connection reset")

    jobs.get_job = unanswered  # type: ignore[method-assign]
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == []  # unknown this round
    jobs.get_job = original  # type: ignore[method-assign]
    del jobs.jobs[("falcon-jobs", JOB)]
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t1"]
    assert svc.store.progress["t1"].outcome == Outcome(
        Status.FAILED, Reason.JOB_FAILED, f"Kubernetes Job {JOB} disappeared from the cluster"
    )


def test_release_is_safe_to_run_again(svc: Services) -> None:
    running(svc, "t1")
    k8s_of(svc).job(JOB).script.complete = True
    reconcile.follow_running(svc, clusters_of(svc))
    first = release(svc, "t1")
    assert release(svc, "t1") == first
    assert svc.store.task("t1").status is Status.SUCCEEDED


def test_spec_helper_is_a_valid_spec() -> None:
    assert TaskSpec.parse(spec_for("2x2")).topology == "2x2"
