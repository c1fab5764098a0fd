"""Named cases of `start_failure`: which Kubernetes reports end a task whose pods cannot start,
and which it waits out (retried by the kubelet) before it gives up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from falcon.domain.workloads import (
    ClusterEvent,
    JobState,
    PodState,
    StartGrace,
    events_may_decide,
    start_failure,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GRACE = StartGrace(image_pull=timedelta(seconds=60), mount=timedelta(seconds=300))
FORBIDDEN = (
    'Error creating: pods "j-0-" is forbidden: error looking up service account '
    'falcon-jobs/ksa: serviceaccount "ksa" not found'
)


def job(active: int = 0, parallelism: int = 2) -> JobState:
    return JobState("j", "uid-1", parallelism, active, 0, 0, 0, False, None, "t1")


def pod(waiting: str | None = None, message: str = "", started: datetime | None = NOW) -> PodState:
    return PodState("j-0-abc", "Pending", waiting, waiting_message=message, started=started)


def event(kind: str, reason: str, message: str, age: float, name: str = "j-0-abc") -> ClusterEvent:
    uid = "uid-1" if kind == "Job" else ""
    return ClusterEvent(kind, name, uid, reason, message, NOW - timedelta(seconds=age))


def test_failed_create_on_the_job_ends_it_while_pods_are_missing() -> None:
    found = start_failure(job(), [], [event("Job", "FailedCreate", FORBIDDEN, 1, name="j")], NOW, GRACE)
    assert found == f"Job j FailedCreate: {FORBIDDEN}"


def test_a_failed_create_since_overcome_is_ignored_once_every_pod_exists() -> None:
    events = [event("Job", "FailedCreate", FORBIDDEN, 30, name="j")]
    assert start_failure(job(active=2), [], events, NOW, GRACE) is None


def test_a_failed_create_of_another_job_with_the_same_name_is_ignored() -> None:
    other = ClusterEvent("Job", "j", "uid-old", "FailedCreate", FORBIDDEN, NOW)
    assert start_failure(job(), [], [other], NOW, GRACE) is None


@pytest.mark.parametrize(
    ("message", "age", "ends"),
    [
        ("rpc error: code = PermissionDenied desc = failed to get GCS bucket", 0, True),
        ("rpc error: code = FailedPrecondition desc = failed to find the sidecar container", 0, True),
        ("rpc error: code = Internal desc = transient", 10, False),
        ("rpc error: code = Internal desc = transient", 301, True),
    ],
    ids=["permission-denied-at-once", "no-sidecar-at-once", "internal-within-grace", "internal-past-grace"],
)
def test_failed_mount(message: str, age: float, ends: bool) -> None:
    found = start_failure(job(active=1), [pod()], [event("Pod", "FailedMount", message, age)], NOW, GRACE)
    assert (found == f"Pod j-0-abc FailedMount: {message}") is ends
    assert (found is None) is not ends


@pytest.mark.parametrize("reason", ["InvalidImageName", "CreateContainerConfigError"])
def test_a_spec_no_retry_can_cure_ends_at_once(reason: str) -> None:
    found = start_failure(job(active=1), [pod(reason, "bad spec")], [], NOW, GRACE)
    assert found == f"Pod j-0-abc {reason}: bad spec"


def test_pull_failures_are_waited_out_for_the_grace_then_quote_the_kubelet() -> None:
    failed = 'Failed to pull image "trainer:missing": not found'
    early = [event("Pod", "Failed", failed, 20), event("Pod", "Failed", "Error: ErrImagePull", 20)]
    assert start_failure(job(active=1), [pod("ImagePullBackOff")], early, NOW, GRACE) is None
    late = [event("Pod", "Failed", failed, 61), event("Pod", "Failed", "Error: ErrImagePull", 5)]
    found = start_failure(job(active=1), [pod("ImagePullBackOff")], late, NOW, GRACE)
    assert found == f"Pod j-0-abc ImagePullBackOff: {failed}"


@pytest.mark.parametrize(("age", "ends"), [(60, False), (60.9, False), (61, True)])
def test_the_grace_counts_from_the_end_of_the_whole_second_kubernetes_wrote(age: float, ends: bool) -> None:
    """An event stamped :05 happened during :05, so 60 s of grace are sure to have passed only at :06+60."""
    events = [event("Pod", "Failed", 'Failed to pull image "x": not found', age)]
    found = start_failure(job(active=1), [pod("ImagePullBackOff")], events, NOW, GRACE)
    assert (found is not None) is ends


def test_pull_failures_without_events_count_from_the_pod_start() -> None:
    started = NOW - timedelta(seconds=90)
    found = start_failure(job(active=1), [pod("ErrImagePull", "not found", started)], [], NOW, GRACE)
    assert found == "Pod j-0-abc ErrImagePull: not found"


def test_running_pods_and_other_pods_events_do_not_end_the_task() -> None:
    running = PodState("j-1-def", "Running")
    events = [event("Pod", "FailedMount", "code = PermissionDenied", 0, name="someone-else")]
    assert start_failure(job(active=2), [pod(), running], events, NOW, GRACE) is None


# When a caller may skip the Warning events (``events_may_decide``): named cases, then the
# property that skipping them never changes the answer.


def test_events_are_needed_while_the_job_lacks_pods() -> None:
    assert events_may_decide(job(active=1), [PodState("j-1-def", "Running")])


def test_events_are_needed_for_a_pod_pending_on_its_node() -> None:
    assert events_may_decide(job(active=2), [pod(), PodState("j-1-def", "Running")])


def test_no_events_are_needed_for_pods_that_run_or_wait_for_a_node() -> None:
    waiting_for_a_node = PodState("j-0-abc", "Pending", unschedulable="0/3 nodes are available")
    assert not events_may_decide(job(active=2), [waiting_for_a_node, PodState("j-1-def", "Running")])
    assert not events_may_decide(
        job(active=2), [PodState("j-0-abc", "Succeeded"), PodState("j-1-def", "Running")]
    )


_pods = st.builds(
    PodState,
    name=st.sampled_from(["j-0-abc", "j-1-def"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    waiting_reason=st.sampled_from(
        [None, "ContainerCreating", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"]
    ),
    unschedulable=st.sampled_from([None, "0/3 nodes are available"]),
    waiting_message=st.sampled_from(["", "not found"]),
    started=st.sampled_from([None, NOW - timedelta(seconds=90), NOW]),
)
_reports = [
    ("Job", "FailedCreate", FORBIDDEN),
    ("Pod", "FailedMount", "rpc error: code = PermissionDenied desc = no bucket"),
    ("Pod", "Failed", 'Failed to pull image "x": not found'),
    ("Pod", "FailedScheduling", "0/3 nodes are available"),
]
_events = st.builds(
    lambda report, age, pod_name: event(*report, age, name="j" if report[0] == "Job" else pod_name),
    st.sampled_from(_reports),
    st.sampled_from([0, 30, 400]),
    st.sampled_from(["j-0-abc", "j-1-def"]),
)


@settings(max_examples=300)
@given(
    active=st.integers(0, 3),
    parallelism=st.integers(1, 3),
    pods=st.lists(_pods, max_size=3),
    events=st.lists(_events, max_size=4),
)
def test_skipping_the_events_when_they_may_not_decide_never_changes_the_answer(
    active: int, parallelism: int, pods: list[PodState], events: list[ClusterEvent]
) -> None:
    the_job = job(active=active, parallelism=parallelism)
    if not events_may_decide(the_job, pods):
        assert start_failure(the_job, pods, events, NOW, GRACE) == start_failure(
            the_job, pods, [], NOW, GRACE
        )
