"""Dispatch and the wait for pods (design phase 4), and the timeout rule while acquiring.

We test: the Job is submitted and the row records its name, uid and dispatched_at; a 409 finds
the Job an earlier attempt submitted (dispatched_at kept); a multi-host task gets its Service
first; a refused Job ends JobSubmitFailed. Polling pods: the Message is written only when it
changes; all pods running returns; a Failed condition ends JobFailed quoting the pods; an image
pull failing beyond its grace ends JobFailed, within it does not; FailedCreate ends at once;
the timeout runs from dispatched_at, pending pods included; mark_running frees the row.
"""

from __future__ import annotations

from collections import deque
from datetime import timedelta

import pytest
from tests.unit.fakes import acquiring, cluster, k8s_of, make_services

from falcon.domain.errors import PermanentError
from falcon.domain.lifecycle import Phase, TaskEnded, TaskView
from falcon.domain.model import k8s_job_name_for
from falcon.domain.status import Reason, Status
from falcon.domain.workloads import ClusterEvent
from falcon.services.acquisition import dispatch, mark_running, provision, wait_pods_running, wait_pool_ready
from falcon.services.context import Services, load_view

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
    assert svc.clock.now() == dispatched_at + timedelta(seconds=60)  # image_pull_grace_seconds
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


def test_mark_running_moves_row_and_phase_and_drops_the_lease() -> None:
    svc, view = dispatched()
    mark_running(svc, view, 1)
    task, progress = svc.store.task("t1"), svc.store.progress["t1"]
    assert (task.status, task.reason, task.message) == (Status.RUNNING, None, "Pods running (1/1 active)")
    assert (progress.phase, progress.lease_id) == (Phase.RUNNING, None)
