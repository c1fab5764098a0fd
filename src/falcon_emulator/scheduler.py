"""A small kube-scheduler: bind pending pods to Ready nodes whose labels, taints and TPUs fit."""

from __future__ import annotations

from collections import Counter

from falcon_emulator.events import record_event
from falcon_emulator.pods import TPU_RESOURCE, condition, is_deleting, is_terminal, set_condition, tpu_request
from falcon_emulator.selectors import match_expressions
from falcon_emulator.state import ClusterState, EmulatorState, PodRuntime
from falcon_emulator.util import JSON, rfc3339


def tolerates(tolerations: list[JSON], taint: JSON) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        operator = toleration.get("operator") or "Equal"
        if not toleration.get("key"):
            if operator == "Exists":
                return True
            continue
        if toleration["key"] != taint.get("key"):
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _affinity_ok(pod: JSON, labels: dict[str, str]) -> bool:
    selector = pod["spec"].get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(match_expressions(t.get("matchExpressions") or [], labels) for t in terms)


def misfit(pod: JSON, node: JSON, used_tpu: int, used_pods: int) -> str | None:
    """Why the pod cannot run on this node (None: it fits)."""
    ready = next((c for c in node["status"].get("conditions", []) if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True" or node["spec"].get("unschedulable"):
        return "node(s) were unschedulable"
    if not _affinity_ok(pod, node["metadata"].get("labels") or {}):
        return "node(s) didn't match Pod's node affinity/selector"
    tolerations = pod["spec"].get("tolerations") or []
    for taint in node["spec"].get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
    allocatable = node["status"].get("allocatable", {})
    if tpu_request(pod) > int(allocatable.get(TPU_RESOURCE, 0)) - used_tpu:
        return f"Insufficient {TPU_RESOURCE}"
    if used_pods >= int(allocatable.get("pods", 110)):
        return "Too many pods"
    return None


def pending_pods(cluster: ClusterState) -> list[JSON]:
    pods = [
        p
        for p in cluster.store.iter("pods")
        if not p["spec"].get("nodeName") and not is_terminal(p) and not is_deleting(p)
    ]
    return sorted(pods, key=lambda p: int(p["metadata"]["resourceVersion"]))


def node_usage(cluster: ClusterState) -> dict[str, tuple[int, int]]:
    usage: dict[str, tuple[int, int]] = {}
    for pod in cluster.store.iter("pods"):
        node = pod["spec"].get("nodeName")
        if node and not is_terminal(pod):
            tpu, count = usage.get(node, (0, 0))
            usage[node] = (tpu + tpu_request(pod), count + 1)
    return usage


def schedule(state: EmulatorState, cluster: ClusterState, now: float) -> None:
    pending = pending_pods(cluster)
    if not pending:
        return
    nodes = sorted(cluster.store.iter("nodes"), key=lambda n: str(n["metadata"]["name"]))
    usage = node_usage(cluster)
    for pod in pending:
        reasons: Counter[str] = Counter()
        for node in nodes:
            name = node["metadata"]["name"]
            used_tpu, used_pods = usage.get(name, (0, 0))
            why = misfit(pod, node, used_tpu, used_pods)
            if why is None:
                bind(state, cluster, pod, node, now)
                usage[name] = (used_tpu + tpu_request(pod), used_pods + 1)
                break
            reasons[why] += 1
        else:
            mark_unschedulable(state, cluster, pod, _message(len(nodes), reasons), now)


def _message(total: int, reasons: Counter[str]) -> str:
    if total == 0:
        return "no nodes available to schedule pods"
    detail = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
    return f"0/{total} nodes are available: {detail}. preemption: not eligible due to preemptionPolicy=Never."


def bind(state: EmulatorState, cluster: ClusterState, pod: JSON, node: JSON, now: float) -> None:
    name = node["metadata"]["name"]
    host_ip = node["status"]["addresses"][0]["address"] if node["status"].get("addresses") else "10.0.0.1"
    pod["spec"]["nodeName"] = name
    status = pod["status"]
    status.update(hostIP=host_ip, hostIPs=[{"ip": host_ip}], startTime=rfc3339())
    set_condition(pod, "PodScheduled", "True")
    for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
        set_condition(pod, kind, "True" if kind == "Initialized" else "False")
    status["containerStatuses"] = [waiting_status(c, "ContainerCreating") for c in pod["spec"]["containers"]]
    cluster.store.touch("pods", pod)
    cluster.unschedulable_since.pop(pod["metadata"]["uid"], None)
    key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
    cluster.pods[pod["metadata"]["uid"]] = PodRuntime(key, "creating", now + state.config.pod_start_seconds)
    meta = pod["metadata"]
    message = f"Successfully assigned {meta['namespace']}/{meta['name']} to {name}"
    record_event(cluster, pod, "Scheduled", message, component="default-scheduler")


def waiting_status(container: JSON, reason: str, message: str | None = None) -> JSON:
    waiting: JSON = {"reason": reason}
    if message:
        waiting["message"] = message
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"waiting": waiting},
    }


def mark_unschedulable(
    state: EmulatorState, cluster: ClusterState, pod: JSON, message: str, now: float
) -> None:
    uid = pod["metadata"]["uid"]
    current = condition(pod, "PodScheduled")
    unchanged = current is not None and current.get("status") == "False" and current.get("message") == message
    last = cluster.unschedulable_since.get(uid)
    if unchanged and last is not None and now - last < state.config.scheduler_event_refresh_seconds:
        return
    cluster.unschedulable_since[uid] = now
    if not unchanged:
        set_condition(pod, "PodScheduled", "False", "Unschedulable", message)
        cluster.store.touch("pods", pod)
    record_event(cluster, pod, "FailedScheduling", message, warning=True, component="default-scheduler")
