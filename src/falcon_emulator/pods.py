"""Pod status helpers shared by the scheduler, the kubelet, the Job controller and the API."""

from __future__ import annotations

from typing import Any

from falcon_emulator.events import record_event
from falcon_emulator.state import ClusterState, EmulatorState
from falcon_emulator.util import JSON, rfc3339

TPU_RESOURCE = "google.com/tpu"
TERMINAL = ("Succeeded", "Failed")


def is_terminal(pod: JSON) -> bool:
    return pod.get("status", {}).get("phase") in TERMINAL


def is_deleting(obj: JSON) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def set_condition(
    obj: JSON, kind: str, status: str, reason: str | None = None, message: str | None = None
) -> None:
    """Set a status condition, keeping lastTransitionTime when the status itself did not change."""
    conditions: list[JSON] = obj.setdefault("status", {}).setdefault("conditions", [])
    current = next((c for c in conditions if c.get("type") == kind), None)
    now = rfc3339()
    if current is None:
        current = {"type": kind}
        conditions.append(current)
    if current.get("status") != status:
        current["lastTransitionTime"] = now
    current.update(status=status, lastProbeTime=None)
    for key, value in (("reason", reason), ("message", message)):
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value


def condition(obj: JSON, kind: str) -> JSON | None:
    for cond in obj.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == kind:
            result: JSON = cond
            return result
    return None


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def container_tpus(container: JSON) -> int:
    """The google.com/tpu chips one container asks for (limits or requests, whichever is larger)."""
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    return max(_quantity(limits.get(TPU_RESOURCE, 0)), _quantity(requests.get(TPU_RESOURCE, 0)))


def tpu_request(pod: JSON) -> int:
    return sum(container_tpus(c) for c in pod["spec"].get("containers", []))


def terminate_containers(pod: JSON, exit_code: int, reason: str, message: str | None = None) -> None:
    """Every container that is not terminated yet ends now with this exit code."""
    for status in pod["status"].get("containerStatuses", []):
        _terminate(status, exit_code, reason, message)


def _terminate(status: JSON, exit_code: int, reason: str, message: str | None = None) -> None:
    state = status.get("state", {})
    if "terminated" in state:
        return
    now = rfc3339()
    terminated: JSON = {"exitCode": exit_code, "reason": reason, "finishedAt": now}
    terminated["startedAt"] = state.get("running", {}).get("startedAt", now)
    if message:
        terminated["message"] = message
    status.update(state={"terminated": terminated}, ready=False, started=False)


def finish_pod(pod: JSON, phase: str) -> None:
    """The pod ends; its sidecars (init containers with restartPolicy Always) are stopped after the main
    containers and end Completed, as the kubelet does since Kubernetes 1.29."""
    for status in pod["status"].get("initContainerStatuses", []):
        _terminate(status, 0, "Completed")
    pod["status"]["phase"] = phase
    reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
    for kind in ("Ready", "ContainersReady"):
        set_condition(pod, kind, "False", reason)


def delete_pod(state: EmulatorState, cluster: ClusterState, pod: JSON, grace: int | None = None) -> bool:
    """Delete a pod; a bound, still running pod terminates gracefully first. True if it is gone already."""
    runtime = cluster.pods.get(pod["metadata"]["uid"])
    if runtime is None or is_terminal(pod) or grace == 0:
        remove_pod(cluster, pod)
        return True
    if not is_deleting(pod):
        seconds = 30 if grace is None else grace
        pod["metadata"].update(deletionTimestamp=rfc3339(), deletionGracePeriodSeconds=seconds)
        cluster.store.touch("pods", pod)
        runtime.stage = "terminating"
        runtime.next_at = state.now() + state.config.pod_termination_seconds
    return False


def remove_pod(cluster: ClusterState, pod: JSON) -> None:
    meta = pod["metadata"]
    cluster.pods.pop(meta["uid"], None)
    cluster.unschedulable_since.pop(meta["uid"], None)
    cluster.logs.pop((meta["namespace"], meta["name"]), None)
    cluster.store.remove("pods", pod)


def fail_lost_pod(cluster: ClusterState, pod: JSON, node: str) -> None:
    """The pod's node was deleted (its node pool went away): the pod ends Failed."""
    if is_terminal(pod):
        return
    terminate_containers(pod, 137, "Error", f"node {node} was deleted")
    finish_pod(pod, "Failed")
    pod["status"].update(
        reason="NodeLost", message=f"Node {node} which was running pod {pod['metadata']['name']} was deleted"
    )
    set_condition(pod, "DisruptionTarget", "True", "DeletionByPodGC", "PodGC: node no longer exists")
    runtime = cluster.pods.get(pod["metadata"]["uid"])
    if runtime is not None:
        runtime.stage, runtime.next_at = "done", float("inf")
    cluster.store.touch("pods", pod)
    record_event(
        cluster, pod, "NodeLost", f"Node {node} was deleted", warning=True, component="node-controller"
    )
