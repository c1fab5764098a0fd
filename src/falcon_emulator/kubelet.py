"""A fake kubelet: bound pods go ContainerCreating -> Running -> terminated, driven by EMULATOR_* env vars.

EMULATOR_RUN_SECONDS (default config.defaultRunSeconds), EMULATOR_EXIT_CODE (default 0), EMULATOR_OOM=1
(OOMKilled, 137), EMULATOR_STDOUT (a line of synthetic stdout). An image tagged ``:missing`` never pulls.
"""

from __future__ import annotations

from falcon_emulator.events import record_event
from falcon_emulator.logs import append_log, container_env, exit_text, start_text
from falcon_emulator.pods import finish_pod, is_terminal, remove_pod, set_condition, terminate_containers
from falcon_emulator.scheduler import waiting_status
from falcon_emulator.state import ClusterState, EmulatorState, PodRuntime
from falcon_emulator.util import JSON, random_hex, rfc3339


def run_kubelet(state: EmulatorState, cluster: ClusterState, now: float) -> None:
    for uid, runtime in list(cluster.pods.items()):
        if now < runtime.next_at:
            continue
        pod = cluster.store.get("pods", *runtime.key)
        if pod is None or pod["metadata"]["uid"] != uid:
            cluster.pods.pop(uid, None)
            continue
        _STAGES[runtime.stage](state, cluster, pod, runtime, now)


def _creating(
    state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float
) -> None:
    missing = [c for c in pod["spec"]["containers"] if str(c["image"]).endswith(":missing")]
    if missing:
        _pull_failed(cluster, pod, missing[0]["image"])
        runtime.stage, runtime.next_at = "pullfail", now + state.config.image_pull_backoff_seconds
        return
    _start(state, cluster, pod, runtime, now)


def _pull_failed(cluster: ClusterState, pod: JSON, image: str) -> None:
    message = f'failed to pull and unpack image "{image}": not found'
    _set_waiting(pod, "ErrImagePull", message)
    cluster.store.touch("pods", pod)
    record_event(cluster, pod, "Pulling", f'Pulling image "{image}"')
    record_event(cluster, pod, "Failed", f'Failed to pull image "{image}": {message}', warning=True)
    record_event(cluster, pod, "Failed", "Error: ErrImagePull", warning=True)


def _backoff(state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float) -> None:
    image = next(c["image"] for c in pod["spec"]["containers"] if str(c["image"]).endswith(":missing"))
    _set_waiting(pod, "ImagePullBackOff", f'Back-off pulling image "{image}"')
    cluster.store.touch("pods", pod)
    record_event(cluster, pod, "BackOff", f'Back-off pulling image "{image}"')
    record_event(cluster, pod, "Failed", "Error: ImagePullBackOff", warning=True)
    runtime.stage, runtime.next_at = "backoff", float("inf")


def _set_waiting(pod: JSON, reason: str, message: str) -> None:
    pod["status"]["containerStatuses"] = [
        waiting_status(c, reason, message) for c in pod["spec"]["containers"]
    ]
    set_condition(pod, "Ready", "False", "ContainersNotReady", "containers with unready status")
    set_condition(pod, "ContainersReady", "False", "ContainersNotReady", "containers with unready status")


def _start(state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float) -> None:
    started = rfc3339()
    statuses = []
    for container in pod["spec"]["containers"]:
        env = container_env(pod, container)
        runtime.envs[container["name"]] = env
        runtime.container_ends[container["name"]] = now + _run_seconds(state, env)
        statuses.append(_running_status(container, started))
    status = pod["status"]
    status.update(phase="Running", podIP=cluster.allocate_ip(), containerStatuses=statuses)
    status["podIPs"] = [{"ip": status["podIP"]}]
    status["initContainerStatuses"] = [
        _init_done(c, started) for c in pod["spec"].get("initContainers") or []
    ]
    for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"):
        set_condition(pod, kind, "True")
    cluster.store.touch("pods", pod)
    for container in pod["spec"]["containers"]:
        record_event(
            cluster, pod, "Pulled", f'Container image "{container["image"]}" already present on machine'
        )
        record_event(cluster, pod, "Started", f"Started container {container['name']}")
        append_log(state, cluster, pod, container, start_text(container, runtime.envs[container["name"]]))
    runtime.stage, runtime.next_at = "running", min(runtime.container_ends.values())


def _run_seconds(state: EmulatorState, env: dict[str, str]) -> float:
    try:
        return float(env.get("EMULATOR_RUN_SECONDS", state.config.default_run_seconds))
    except ValueError:
        return state.config.default_run_seconds


def _running_status(container: JSON, started: str) -> JSON:
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": f"{container['image']}@sha256:{'0' * 64}",
        "containerID": f"containerd://{random_hex(64)}",
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": started}},
    }


def _init_done(container: JSON, at: str) -> JSON:
    terminated = {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "state": {"terminated": terminated},
    }


def outcome(env: dict[str, str]) -> tuple[int, str]:
    if env.get("EMULATOR_OOM") in ("1", "true", "True"):
        return 137, "OOMKilled"
    try:
        code = int(env.get("EMULATOR_EXIT_CODE", "0"))
    except ValueError:
        code = 1
    return code, "Completed" if code == 0 else "Error"


def _running(state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float) -> None:
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    for status in pod["status"]["containerStatuses"]:
        name = status["name"]
        if "running" in status["state"] and runtime.container_ends.get(name, 0) <= now:
            code, reason = outcome(runtime.envs.get(name, {}))
            status["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    "finishedAt": rfc3339(),
                    "startedAt": status["state"]["running"]["startedAt"],
                    "containerID": status.get("containerID", ""),
                }
            }
            status.update(ready=False, started=False)
            append_log(state, cluster, pod, containers[name], exit_text(containers[name], code, reason))
    statuses = pod["status"]["containerStatuses"]
    if all("terminated" in s["state"] for s in statuses):
        failed = any(s["state"]["terminated"]["exitCode"] != 0 for s in statuses)
        finish_pod(pod, "Failed" if failed else "Succeeded")
        runtime.stage, runtime.next_at = "done", float("inf")
    else:
        set_condition(pod, "Ready", "False", "ContainersNotReady")
        remaining = [end for end in runtime.container_ends.values() if end > now]
        runtime.next_at = min(remaining) if remaining else now
    cluster.store.touch("pods", pod)


def _terminating(
    state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float
) -> None:
    if not is_terminal(pod):
        for container in pod["spec"]["containers"]:
            record_event(cluster, pod, "Killing", f"Stopping container {container['name']}")
        terminate_containers(pod, 143, "Error")
        finish_pod(pod, "Failed")
        cluster.store.touch("pods", pod)
    remove_pod(cluster, pod)


def _idle(state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float) -> None:
    runtime.next_at = float("inf")


_STAGES = {
    "creating": _creating,
    "pullfail": _backoff,
    "backoff": _idle,
    "running": _running,
    "done": _idle,
    "terminating": _terminating,
}
