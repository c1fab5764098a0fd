"""What Kubernetes reports about Falcon's Jobs, and the rule that says when pods can never start.

Plain frozen dataclasses filled by the Kubernetes adapter, so the services and the rules never
see client models; ``start_failure`` is pure (the clock comes in as ``now``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True)
class JobState:
    name: str
    uid: str
    parallelism: int
    active: int
    ready: int
    succeeded: int
    failed: int
    complete: bool
    failed_condition: str | None  # reason: message of a Failed condition
    task_id: str | None
    suspended: bool = False  # spec.suspend: created so, and not resumed yet

    @property
    def finished(self) -> bool:
        return self.complete or self.failed_condition is not None


@dataclass(frozen=True)
class PodState:
    name: str
    phase: str
    waiting_reason: str | None = None
    terminated: list[tuple[str, int]] = field(default_factory=list)  # (reason, exit code) per container
    unschedulable: str | None = None
    waiting_message: str = ""
    started: datetime | None = None  # status.startTime: the kubelet accepted the pod
    job_name: str | None = None  # Falcon's task label: the Job the pod belongs to

    def describe(self) -> str:
        if self.terminated:
            return "; ".join(f"Pod {self.name} terminated: {r} (exit code {c})" for r, c in self.terminated)
        if self.waiting_reason:
            return f"Pod {self.name} waiting: {self.waiting_reason}"
        if self.unschedulable:
            return f"Pod {self.name} unschedulable: {self.unschedulable}"
        return f"Pod {self.name} {self.phase}"


@dataclass(frozen=True)
class ClusterEvent:
    """One Warning Event (core/v1) and the object it is about."""

    kind: str
    name: str
    uid: str
    reason: str
    message: str
    first_seen: datetime | None


@dataclass(frozen=True)
class FalconService:
    name: str
    task_id: str | None


@dataclass(frozen=True)
class StartGrace:
    """How long a start failure the kubelet keeps retrying may last before the task is ended."""

    image_pull: timedelta
    mount: timedelta


# Waiting reasons that no retry by the kubelet can cure: the spec itself is wrong.
_FINAL_WAITING = {"InvalidImageName", "CreateContainerConfigError"}
# Pull failures are retried with back-off: a registry hiccup heals, a missing image does not.
_PULL_WAITING = {"ErrImagePull", "ImagePullBackOff"}
# gRPC codes of a GCS FUSE MountVolume.SetUp failure that need a change of IAM, bucket or spec
# (gcs-fuse-csi-driver docs/troubleshooting.md); Unauthenticated, Aborted and Internal may pass.
_FINAL_MOUNT_CODES = (
    "PermissionDenied",
    "NotFound",
    "FailedPrecondition",
    "InvalidArgument",
    "ResourceExhausted",
)


def start_failure(
    job: JobState, pods: Iterable[PodState], events: Iterable[ClusterEvent], now: datetime, grace: StartGrace
) -> str | None:
    """Why the Job's pods can never start, quoting Kubernetes, or None while they still may.

    The Job controller reports pods it may not create (missing ServiceAccount, quota, forbidden)
    as FailedCreate on the Job; the kubelet reports volumes it cannot mount as FailedMount on
    the pod and image or config problems as the container's waiting reason."""
    events = list(events)
    for event in events:
        if (
            event.kind == "Job"
            and event.name == job.name
            and event.uid in ("", job.uid)
            and event.reason == "FailedCreate"
            and job.active < job.parallelism  # still missing pods: not a refusal since overcome
        ):
            return f"Job {job.name} FailedCreate: {event.message}"
    for pod in pods:
        if _on_a_node_and_pending(pod):
            found = _pod_failure(
                pod, [e for e in events if e.kind == "Pod" and e.name == pod.name], now, grace
            )
            if found:
                return found
    return None


def events_may_decide(job: JobState, pods: Iterable[PodState]) -> bool:
    """Whether Warning events could change ``start_failure``'s answer for this Job: only while it
    lacks pods (a FailedCreate) or one of its pods waits on its node (a mount, a pull). Listing
    them means every Warning event of the namespace, hundreds at scale (each flex-start pod's
    FailedScheduling while its nodes come up), so a caller that has the Job and its pods asks
    this first: pods that run, or wait for a node, need none."""
    return job.active < job.parallelism or any(_on_a_node_and_pending(p) for p in pods)


def _on_a_node_and_pending(pod: PodState) -> bool:
    """Pending with no word of being unschedulable: only such a pod can fail to mount or pull
    (both happen on a node), or wait on a spec no retry cures."""
    return pod.phase == "Pending" and pod.unschedulable is None


def _pod_failure(pod: PodState, events: list[ClusterEvent], now: datetime, grace: StartGrace) -> str | None:
    for event in events:
        if event.reason == "FailedMount" and (
            any(f"code = {code}" in event.message for code in _FINAL_MOUNT_CODES)
            or _lasted(event.first_seen, now, grace.mount)
        ):
            return f"Pod {pod.name} FailedMount: {event.message}"
    reason = pod.waiting_reason
    if reason in _FINAL_WAITING:
        return f"Pod {pod.name} {reason}: {pod.waiting_message}".rstrip(": ")
    if reason in _PULL_WAITING:
        pulls = [e for e in events if e.reason in ("Failed", "BackOff")]
        since = min((e.first_seen for e in pulls if e.first_seen), default=pod.started)
        if _lasted(since, now, grace.image_pull):
            # The kubelet's "Failed to pull image ..." event says why; "Error: <reason>" does not.
            quote = next(
                (
                    e.message
                    for e in reversed(pulls)
                    if e.reason == "Failed" and not e.message.startswith("Error:")
                ),
                pod.waiting_message,
            )
            return f"Pod {pod.name} {reason}: {quote}".rstrip(": ")
    return None


# Kubernetes serialises event and pod times (metav1.Time) to whole seconds: one seen at 12:00:05
# happened before 12:00:06, so a grace counted from the end of that second is never cut short.
_TIMESTAMP_RESOLUTION = timedelta(seconds=1)


def _lasted(since: datetime | None, now: datetime, grace: timedelta) -> bool:
    return since is not None and now - since >= grace + _TIMESTAMP_RESOLUTION
