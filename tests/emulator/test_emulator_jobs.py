"""Job controller, scheduler and kubelet behaviour through the official kubernetes client."""

from __future__ import annotations

import json
import re

import pytest
from emu_helpers import (
    Kube,
    condition_types,
    container,
    counters,
    events_for,
    job,
    job_finished,
    pods_of,
    wait_for,
)
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from falcon_emulator.server import EmulatorServer

V6E_2X4 = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "2x4",
}


def test_single_pod_job_runs_to_complete_with_job_labels_and_owner(work: Kube, namespace: str) -> None:
    created = work.batch.create_namespaced_job(namespace, job("one"))
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    finished = wait_for(lambda: job_finished(work, namespace, "one"))
    assert condition_types(finished) == ["SuccessCriteriaMet", "Complete"]
    assert finished.status.succeeded == 1 and not finished.status.failed and not finished.status.active
    assert finished.status.start_time and finished.status.completion_time
    [pod] = pods_of(work, namespace, "one")
    assert re.fullmatch(r"one-[a-z0-9]{5}", pod.metadata.name)
    assert pod.status.phase == "Succeeded"
    labels = pod.metadata.labels
    assert labels["job-name"] == "one" and labels["controller-uid"] == created.metadata.uid
    assert labels["batch.kubernetes.io/controller-uid"] == created.metadata.uid
    assert pod.metadata.owner_references[0].kind == "Job"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    reasons = {e.reason for e in events_for(work, namespace, pod.metadata.name)}
    assert {"Scheduled", "Started"} <= reasons


def test_indexed_job_on_multi_host_slice_with_headless_service_gets_tpu_worker_env_and_completes(
    work: Kube, namespace: str
) -> None:
    spec = job(
        "slice",
        [container(tpus=4)],
        node_selector=V6E_2X4,
        tpu=True,
        completion_mode="Indexed",
        completions=2,
        parallelism=2,
        backoff_limit=0,
    )
    spec.spec.template.spec.subdomain = "slice-workers"
    service = k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name="slice-workers"),
        spec=k8s.V1ServiceSpec(cluster_ip="None", selector={"job-name": "slice"}),
    )
    work.core.create_namespaced_service(namespace, service)
    work.batch.create_namespaced_job(namespace, spec)
    finished = wait_for(lambda: job_finished(work, namespace, "slice"))
    assert "Complete" in condition_types(finished)
    assert finished.status.succeeded == 2 and finished.status.completed_indexes == "0-1"
    pods = sorted(pods_of(work, namespace, "slice"), key=lambda p: p.metadata.name)
    assert [re.fullmatch(r"slice-(\d)-[a-z0-9]{5}", p.metadata.name)[1] for p in pods] == ["0", "1"]
    assert [p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods] == ["0", "1"]
    assert [(p.spec.hostname, p.spec.subdomain) for p in pods] == [
        ("slice-0", "slice-workers"),
        ("slice-1", "slice-workers"),
    ]
    assert len({p.spec.node_name for p in pods}) == 2
    for index, pod in enumerate(pods):
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert "JOB_COMPLETION_INDEX" in env
        assert env["TPU_WORKER_ID"] == str(index)
        assert env["TPU_WORKER_HOSTNAMES"] == "slice-0.slice-workers,slice-1.slice-workers"


def test_nonzero_exit_code_is_retried_until_backoff_limit_then_job_failed(work: Kube, namespace: str) -> None:
    spec = job(
        "crash", [container(env={"EMULATOR_EXIT_CODE": "3", "EMULATOR_RUN_SECONDS": "0.1"})], backoff_limit=1
    )
    work.batch.create_namespaced_job(namespace, spec)
    finished = wait_for(lambda: job_finished(work, namespace, "crash"))
    assert condition_types(finished) == ["FailureTarget", "Failed"]
    failed = next(c for c in finished.status.conditions if c.type == "Failed")
    assert failed.reason == "BackoffLimitExceeded"
    assert finished.status.failed == 2
    pods = pods_of(work, namespace, "crash")
    assert len(pods) == 2 and all(p.status.phase == "Failed" for p in pods)
    terminated = pods[0].status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")


def test_oom_container_ends_oomkilled_with_exit_code_137(work: Kube, namespace: str) -> None:
    work.batch.create_namespaced_job(
        namespace, job("oom", [container(env={"EMULATOR_OOM": "1"})], backoff_limit=0)
    )
    wait_for(lambda: job_finished(work, namespace, "oom"))
    terminated = pods_of(work, namespace, "oom")[0].status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")


def waiting_reason(kube: Kube, namespace: str, job_name: str, reason: str) -> k8s.V1Pod | None:
    pods = pods_of(kube, namespace, job_name)
    statuses = pods[0].status.container_statuses if pods else None
    waiting = statuses[0].state.waiting if statuses else None
    return pods[0] if waiting is not None and waiting.reason == reason else None


def test_missing_image_stays_pending_in_image_pull_backoff_with_kubelet_events(
    work: Kube, namespace: str
) -> None:
    work.batch.create_namespaced_job(namespace, job("pull", [container(image="repo/trainer:missing")]))
    pod = wait_for(lambda: waiting_reason(work, namespace, "pull", "ImagePullBackOff"))
    assert pod.status.phase == "Pending"
    assert (
        pod.status.container_statuses[0].state.waiting.message
        == 'Back-off pulling image "repo/trainer:missing"'
    )
    events = events_for(work, namespace, pod.metadata.name)
    ref = "docker.io/repo/trainer:missing"
    pulled = [e for e in events if e.reason == "Failed" and e.message.startswith("Failed to pull image")]
    assert pulled[0].type == "Warning"
    assert pulled[0].message == (
        f'Failed to pull image "repo/trainer:missing": rpc error: code = NotFound desc = failed to pull and '
        f'unpack image "{ref}": failed to resolve reference "{ref}": {ref}: not found'
    )
    backoff = [e for e in events if e.reason == "BackOff"]
    assert backoff[0].message == 'Back-off pulling image "repo/trainer:missing"'
    assert {"Error: ErrImagePull", "Error: ImagePullBackOff"} <= {
        e.message for e in events if e.reason == "Failed"
    }
    wait_for(lambda: waiting_reason(work, namespace, "pull", "ErrImagePull"))  # the kubelet pulls again
    job_now = work.batch.read_namespaced_job("pull", namespace)
    assert job_now.status.active == 1 and not job_now.status.conditions


def test_invalid_image_reference_stays_pending_with_invalid_image_name(work: Kube, namespace: str) -> None:
    work.batch.create_namespaced_job(namespace, job("badref", [container(image="Repo/Trainer:v1")]))
    pod = wait_for(lambda: waiting_reason(work, namespace, "badref", "InvalidImageName"))
    assert pod.status.phase == "Pending"
    message = (
        'Failed to apply default image tag "Repo/Trainer:v1": couldn\'t parse image name "Repo/Trainer:v1": '
        "invalid reference format: repository name (Trainer) must be lowercase"
    )
    assert pod.status.container_statuses[0].state.waiting.message == message
    events = events_for(work, namespace, pod.metadata.name)
    assert [(e.type, e.message) for e in events if e.reason == "InspectFailed"] == [("Warning", message)]
    assert "Error: InvalidImageName" in {e.message for e in events if e.reason == "Failed"}


def test_pod_without_toleration_or_tpu_capacity_is_unschedulable_with_one_failed_scheduling_event(
    work: Kube, namespace: str
) -> None:
    spec = job("greedy", [container(tpus=16)], node_selector=V6E_2X4, tpu=True)
    work.batch.create_namespaced_job(namespace, spec)
    pods = wait_for(lambda: pods_of(work, namespace, "greedy"))
    name = pods[0].metadata.name
    failed = wait_for(
        lambda: [e for e in events_for(work, namespace, name) if e.reason == "FailedScheduling"]
    )
    assert len(failed) == 1 and "Insufficient google.com/tpu" in failed[0].message
    untolerated = job("notol", [container()], node_selector={"cloud.google.com/gke-nodepool": "v6e-1t"})
    work.batch.create_namespaced_job(namespace, untolerated)
    pod = wait_for(lambda: pods_of(work, namespace, "notol"))[0]
    events = wait_for(
        lambda: [e for e in events_for(work, namespace, pod.metadata.name) if e.reason == "FailedScheduling"]
    )
    assert "untolerated taint {google.com/tpu: present}" in events[0].message
    scheduled = [
        c
        for c in work.core.read_namespaced_pod(pod.metadata.name, namespace).status.conditions
        if c.type == "PodScheduled"
    ]
    assert (scheduled[0].status, scheduled[0].reason) == ("False", "Unschedulable")


def test_active_deadline_fails_the_job_with_deadline_exceeded(work: Kube, namespace: str) -> None:
    spec = job("slow", [container(env={"EMULATOR_RUN_SECONDS": "30"})], active_deadline_seconds=1)
    work.batch.create_namespaced_job(namespace, spec)
    finished = wait_for(lambda: job_finished(work, namespace, "slow"))
    failed = next(c for c in finished.status.conditions if c.type == "Failed")
    assert failed.reason == "DeadlineExceeded"
    wait_for(lambda: not pods_of(work, namespace, "slow"))


def test_delete_job_with_background_propagation_removes_its_pods(work: Kube, namespace: str) -> None:
    work.batch.create_namespaced_job(namespace, job("bg", [container(env={"EMULATOR_RUN_SECONDS": "30"})]))
    wait_for(lambda: [p for p in pods_of(work, namespace, "bg") if p.status.phase == "Running"])
    work.batch.delete_namespaced_job("bg", namespace, propagation_policy="Background")
    wait_for(lambda: not pods_of(work, namespace, "bg"))
    assert not work.batch.list_namespaced_job(namespace).items


def test_delete_job_without_propagation_policy_orphans_its_pods(work: Kube, namespace: str) -> None:
    work.batch.create_namespaced_job(namespace, job("orphan"))
    wait_for(lambda: pods_of(work, namespace, "orphan"))
    work.batch.delete_namespaced_job("orphan", namespace)
    pods = pods_of(work, namespace, "orphan")
    assert len(pods) == 1 and not pods[0].metadata.owner_references
    wait_for(lambda: pods_of(work, namespace, "orphan")[0].status.phase == "Succeeded")


def test_delete_job_with_foreground_keeps_job_until_pods_are_gone(work: Kube, namespace: str) -> None:
    work.batch.create_namespaced_job(namespace, job("fg", [container(env={"EMULATOR_RUN_SECONDS": "30"})]))
    wait_for(lambda: [p for p in pods_of(work, namespace, "fg") if p.status.phase == "Running"])
    options = k8s.V1DeleteOptions(propagation_policy="Foreground")
    work.batch.delete_namespaced_job("fg", namespace, body=options)
    wait_for(lambda: not work.batch.list_namespaced_job(namespace).items)
    assert not pods_of(work, namespace, "fg")


def test_a_job_created_suspended_runs_no_pod_until_resumed_and_starts_its_clock_then(
    work: Kube, namespace: str
) -> None:
    created = work.batch.create_namespaced_job(namespace, job("held", suspend=True))
    held = wait_for(lambda: _with_condition(work, namespace, "held", "Suspended", "True"))
    assert held.status.start_time is None and not pods_of(work, namespace, "held")
    resume = {"metadata": {"uid": created.metadata.uid}, "spec": {"suspend": False}}
    work.batch.patch_namespaced_job("held", namespace, resume)
    finished = wait_for(lambda: job_finished(work, namespace, "held"))
    [suspended] = [c for c in finished.status.conditions if c.type == "Suspended"]
    assert (suspended.status, suspended.reason, suspended.message) == ("False", "JobResumed", "Job resumed")
    assert finished.status.start_time and len(pods_of(work, namespace, "held")) == 1
    assert {"Suspended", "Resumed"} <= {e.reason for e in events_for(work, namespace, "held")}


def test_a_write_naming_another_objects_uid_is_refused_and_changes_nothing(
    work: Kube, namespace: str
) -> None:
    """The uid in a body guards against a write landing on a namesake made after a deletion: a
    PATCH fails validation (uid is immutable, 422), a PUT its precondition (409)."""
    work.batch.create_namespaced_job(namespace, job("namesake", suspend=True))
    stale = {"metadata": {"uid": "0b6f2c1e-0000-4000-8000-000000000000"}, "spec": {"suspend": False}}
    with pytest.raises(ApiException) as patched:
        work.batch.patch_namespaced_job("namesake", namespace, stale)
    assert patched.value.status == 422
    assert json.loads(patched.value.body)["message"] == (
        'Job.batch "namesake" is invalid: metadata.uid: Invalid value: '
        '"0b6f2c1e-0000-4000-8000-000000000000": field is immutable'
    )
    current = work.batch.read_namespaced_job("namesake", namespace)
    current.metadata.uid = "0b6f2c1e-0000-4000-8000-000000000000"
    with pytest.raises(ApiException) as replaced:
        work.batch.replace_namespaced_job("namesake", namespace, current)
    assert replaced.value.status == 409 and "Precondition failed: UID in precondition" in str(
        replaced.value.body
    )
    assert work.batch.read_namespaced_job("namesake", namespace).spec.suspend is True


def test_a_name_counts_as_run_twice_only_once_a_second_job_of_that_name_made_pods(
    emulator: EmulatorServer, work: Kube, namespace: str
) -> None:
    key = f"{namespace}/again"
    work.batch.create_namespaced_job(namespace, job("again"))
    wait_for(lambda: job_finished(work, namespace, "again"))
    _delete(work, namespace, "again")
    work.batch.create_namespaced_job(namespace, job("again", suspend=True))  # a late copy, held
    wait_for(lambda: _with_condition(work, namespace, "again", "Suspended", "True"))
    seen = counters(emulator.url, "work")
    assert key in seen["jobsCreatedMoreThanOnce"] and key not in seen["jobsRunMoreThanOnce"]
    _delete(work, namespace, "again")
    work.batch.create_namespaced_job(namespace, job("again"))
    wait_for(lambda: key in counters(emulator.url, "work")["jobsRunMoreThanOnce"])


def _delete(kube: Kube, namespace: str, name: str) -> None:
    kube.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
    wait_for(
        lambda: not [j for j in kube.batch.list_namespaced_job(namespace).items if j.metadata.name == name]
    )


def _with_condition(kube: Kube, namespace: str, name: str, kind: str, status: str) -> k8s.V1Job | None:
    current = kube.batch.read_namespaced_job(name, namespace)
    found = [c for c in current.status.conditions or [] if c.type == kind and c.status == status]
    return current if found else None
