"""Kubernetes Jobs, Pods and Events on one edge cluster, through the official client.

The only module that talks to a cluster's Kubernetes API. Results come back as small frozen
dataclasses so the services never see client models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from falcon.adapters.errors import kubernetes_errors
from falcon.domain.errors import ConflictError


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

    def describe(self) -> str:
        if self.terminated:
            return "; ".join(f"Pod {self.name} terminated: {r} (exit code {c})" for r, c in self.terminated)
        if self.waiting_reason:
            return f"Pod {self.name} waiting: {self.waiting_reason}"
        if self.unschedulable:
            return f"Pod {self.name} unschedulable: {self.unschedulable}"
        return f"Pod {self.name} {self.phase}"


class KubernetesJobs:
    def __init__(self, api_client: k8s.ApiClient, timeout: float) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._batch = k8s.BatchV1Api(api_client)
        self._timeout = timeout

    def ensure_namespace(self, namespace: str) -> None:
        body = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))
        try:
            with kubernetes_errors(f"create namespace {namespace}"):
                self._core.create_namespace(body, _request_timeout=self._timeout)
        except ConflictError:
            pass

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> str:
        """Create the Job and return its uid; ConflictError if a Job of that name exists."""
        with kubernetes_errors(f"create Job {manifest['metadata']['name']}"):
            # The manifest stays a plain dict (rendered by the pure core); the client serialises it.
            created = self._batch.create_namespaced_job(
                namespace,
                manifest,  # type: ignore[arg-type]
                _request_timeout=self._timeout,
            )
        return str(created.metadata.uid if created.metadata else "")

    def get_job(self, namespace: str, name: str) -> JobState:
        with kubernetes_errors(f"get Job {name}"):
            job = self._batch.read_namespaced_job(name, namespace, _request_timeout=self._timeout)
        return _job_state(job)

    def list_jobs(self, namespace: str, label_selector: str) -> list[JobState]:
        with kubernetes_errors(f"list Jobs in {namespace}"):
            found = self._batch.list_namespaced_job(
                namespace, label_selector=label_selector, _request_timeout=self._timeout
            )
        return [_job_state(j) for j in found.items]

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete the Job and its pods (Background: the batch/v1 default would orphan them)."""
        with kubernetes_errors(f"delete Job {name}"):
            self._batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _request_timeout=self._timeout
            )

    def job_pods(self, namespace: str, job_name: str) -> list[PodState]:
        with kubernetes_errors(f"list pods of Job {job_name}"):
            found = self._core.list_namespaced_pod(
                namespace,
                label_selector=f"batch.kubernetes.io/job-name={job_name}",
                _request_timeout=self._timeout,
            )
        return [_pod_state(p) for p in found.items]


def _job_state(job: Any) -> JobState:
    status = job.status or k8s.V1JobStatus()
    conditions = {c.type: c for c in (status.conditions or []) if c.status == "True"}
    failed = conditions.get("Failed") or conditions.get("FailureTarget")
    annotations = job.metadata.annotations or {}
    return JobState(
        name=job.metadata.name,
        uid=job.metadata.uid or "",
        parallelism=job.spec.parallelism or 1,
        active=status.active or 0,
        ready=status.ready or 0,
        succeeded=status.succeeded or 0,
        failed=status.failed or 0,
        complete="Complete" in conditions,
        failed_condition=f"{failed.reason}: {failed.message}" if failed else None,
        task_id=annotations.get("falcon.dev/task-id"),
    )


def _pod_state(pod: Any) -> PodState:
    status = pod.status
    waiting = None
    terminated: list[tuple[str, int]] = []
    for cs in status.container_statuses or []:
        if cs.state and cs.state.waiting and cs.state.waiting.reason not in (None, "ContainerCreating"):
            waiting = cs.state.waiting.reason
        if cs.state and cs.state.terminated and cs.state.terminated.exit_code != 0:
            terminated.append((cs.state.terminated.reason or "Error", cs.state.terminated.exit_code))
    unschedulable = next(
        (c.message for c in status.conditions or [] if c.type == "PodScheduled" and c.status == "False"), None
    )
    return PodState(pod.metadata.name, status.phase or "Pending", waiting, terminated, unschedulable)
