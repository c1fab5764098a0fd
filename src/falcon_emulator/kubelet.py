"""A fake kubelet: bound pods go ContainerCreating -> Running -> terminated, driven by EMULATOR_* env vars.

EMULATOR_RUN_SECONDS (default config.defaultRunSeconds), EMULATOR_EXIT_CODE (default 0), EMULATOR_OOM=1
(OOMKilled, 137), EMULATOR_STDOUT (a line of synthetic stdout). In the kubelet's order, a pod waits for its
volumes (gcsfuse mounts, see ``gcsfuse``), then for valid image references (InvalidImageName), then for
its pulls (an image tagged ``:missing`` never pulls: ErrImagePull / ImagePullBackOff, retried with a
doubling back-off). A TPU container on a multi-host slice runs only once its slice's workers are
reachable (see ``tpu``); until then it is running, not Ready, and never finishes.
"""

from __future__ import annotations

import math

from falcon_emulator import processes, secrets
from falcon_emulator.events import record_event
from falcon_emulator.gcsfuse import mount_failure
from falcon_emulator.images import invalid_reason, missing, pull_error
from falcon_emulator.logs import append_log, container_env, exit_text, start_text
from falcon_emulator.pods import (
    container_tpus,
    finish_pod,
    is_terminal,
    remove_pod,
    set_condition,
    terminate_containers,
)
from falcon_emulator.scheduler import waiting_status
from falcon_emulator.state import ClusterState, EmulatorState, PodRuntime
from falcon_emulator.tpu import unreachable_workers
from falcon_emulator.util import JSON, random_hex, rfc3339

# kubelet's volume manager retries a failed mount after 500 ms, doubling up to 2 min 2 s
# (pkg/util/goroutinemap/exponentialbackoff); image pulls back off from 10 s to 300 s (30x).
_MOUNT_RETRY_SECONDS = (0.5, 122.0)
_PULL_BACKOFF_CAP = 30.0


def run_kubelet(state: EmulatorState, cluster: ClusterState, now: float) -> None:
    for uid, runtime in list(cluster.pods.items()):
        if now < runtime.next_at:
            continue
        pod = cluster.store.get("pods", *runtime.key)
        if pod is None or pod["metadata"]["uid"] != uid:
            cluster.pods.pop(uid, None)
            continue
        _STAGES[runtime.stage](state, cluster, pod, runtime, now)


def _retry_after(first: float, cap: float, attempts: int) -> float:
    return float(min(first * 2 ** max(attempts - 1, 0), cap))


def _all_containers(pod: JSON) -> list[JSON]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


def _creating(
    state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float
) -> None:
    mount = mount_failure(state, cluster, pod)
    if mount is not None:
        event = record_event(cluster, pod, "FailedMount", mount[1], warning=True)
        runtime.next_at = now + _retry_after(*_MOUNT_RETRY_SECONDS, int(event["count"]))
        return
    invalid = [(c, r) for c in _all_containers(pod) if (r := invalid_reason(str(c["image"])))]
    if invalid:
        _invalid_image(state, cluster, pod, runtime, now, invalid[0][1])
        return
    unpullable = [c for c in _all_containers(pod) if missing(str(c["image"]))]
    if unpullable:
        _pull_failed(state, cluster, pod, runtime, now, str(unpullable[0]["image"]))
        return
    try:
        envs = {c["name"]: _environment(cluster, pod, c) for c in pod["spec"]["containers"]}
    except LookupError as error:
        _config_error(state, cluster, pod, runtime, now, str(error))
        return
    _start(state, cluster, pod, runtime, now, envs)


def _environment(cluster: ClusterState, pod: JSON, container: JSON) -> dict[str, str]:
    """The container's env with its secretKeyRefs read; LookupError (the kubelet's message) when a
    required Secret or key is missing."""
    env = container_env(pod, container)
    for var in container.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            value = secrets.resolve(cluster.store, pod["metadata"]["namespace"], ref)
            if value is None:
                env.pop(var["name"], None)
            else:
                env[var["name"]] = value
    return env


def _config_error(
    state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float, message: str
) -> None:
    """kubelet's generateContainerConfig failed: CreateContainerConfigError, retried at each sync."""
    _set_waiting(pod, "CreateContainerConfigError", message)
    cluster.store.touch("pods", pod)
    event = record_event(cluster, pod, "Failed", f"Error: {message}", warning=True)
    runtime.next_at = now + _retry_after(
        state.config.image_pull_backoff_seconds, _cap(state), int(event["count"])
    )


def _invalid_image(
    state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float, message: str
) -> None:
    """kubelet image manager: InspectFailed, then the runtime's 'Error: InvalidImageName'; retried."""
    _set_waiting(pod, "InvalidImageName", message)
    cluster.store.touch("pods", pod)
    event = record_event(cluster, pod, "InspectFailed", message, warning=True)
    record_event(cluster, pod, "Failed", "Error: InvalidImageName", warning=True)
    delay = _retry_after(state.config.image_pull_backoff_seconds, _cap(state), int(event["count"]))
    runtime.next_at = now + delay


def _cap(state: EmulatorState) -> float:
    return state.config.image_pull_backoff_seconds * _PULL_BACKOFF_CAP


def _pull_failed(
    state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float, image: str
) -> None:
    message = pull_error(image)
    _set_waiting(pod, "ErrImagePull", message)
    cluster.store.touch("pods", pod)
    record_event(cluster, pod, "Pulling", f'Pulling image "{image}"')
    record_event(cluster, pod, "Failed", f'Failed to pull image "{image}": {message}', warning=True)
    record_event(cluster, pod, "Failed", "Error: ErrImagePull", warning=True)
    runtime.stage, runtime.next_at = "pullfail", now + state.config.image_pull_backoff_seconds


def _backoff(state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float) -> None:
    """ImagePullBackOff until the next pull; kubelet records BackOff as a Normal event (image_manager.go)."""
    image = next(str(c["image"]) for c in _all_containers(pod) if missing(str(c["image"])))
    message = f'Back-off pulling image "{image}"'
    _set_waiting(pod, "ImagePullBackOff", message)
    cluster.store.touch("pods", pod)
    event = record_event(cluster, pod, "BackOff", message)
    record_event(cluster, pod, "Failed", "Error: ImagePullBackOff", warning=True)
    delay = _retry_after(state.config.image_pull_backoff_seconds, _cap(state), int(event["count"]) + 1)
    runtime.stage, runtime.next_at = "creating", now + delay


def _set_waiting(pod: JSON, reason: str, message: str) -> None:
    pod["status"]["containerStatuses"] = [
        waiting_status(c, reason, message) for c in pod["spec"]["containers"]
    ]
    _set_readiness(pod)


def _set_readiness(pod: JSON) -> None:
    """Ready / ContainersReady from the containers' ready flags, with the kubelet's message."""
    unready = [s["name"] for s in pod["status"].get("containerStatuses", []) if not s.get("ready")]
    for kind in ("ContainersReady", "Ready"):
        if unready:
            message = f"containers with unready status: [{' '.join(unready)}]"
            set_condition(pod, kind, "False", "ContainersNotReady", message)
        else:
            set_condition(pod, kind, "True")


def _start(
    state: EmulatorState,
    cluster: ClusterState,
    pod: JSON,
    runtime: PodRuntime,
    now: float,
    envs: dict[str, dict[str, str]],
) -> None:
    started = rfc3339()
    statuses = []
    for container in pod["spec"]["containers"]:
        env = envs[container["name"]]
        runtime.envs[container["name"]] = env
        runtime.container_ends[container["name"]] = now + _run_seconds(state, env)
        statuses.append(_running_status(container, started))
    status = pod["status"]
    status.update(phase="Running", podIP=cluster.allocate_ip(), containerStatuses=statuses)
    status["podIPs"] = [{"ip": status["podIP"]}]
    status["initContainerStatuses"] = [
        _init_status(c, started) for c in pod["spec"].get("initContainers") or []
    ]
    for kind in ("PodReadyToStartContainers", "Initialized"):
        set_condition(pod, kind, "True")
    for container in pod["spec"]["containers"]:
        record_event(
            cluster, pod, "Pulled", f'Container image "{container["image"]}" already present on machine'
        )
        record_event(cluster, pod, "Started", f"Started container {container['name']}")
        append_log(cluster, pod, container, start_text(container, runtime.envs[container["name"]]))
    if cluster.config.runs_commands:
        _run_processes(state, cluster, pod, runtime)
    _await_workers(cluster, pod, runtime, statuses)
    _set_readiness(pod)
    cluster.store.touch("pods", pod)
    runtime.stage, runtime.next_at = "running", _next_wakeup(runtime, now)


def _run_processes(state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime) -> None:
    """Each container's command as a local process; it ends when the process does. A command that
    cannot start ends its container at once with 128 (the runtime's StartError)."""
    home = state.data_dir / "pods" / pod["metadata"]["uid"]
    for container in pod["spec"]["containers"]:
        name = container["name"]
        env = runtime.envs[name]
        command = processes.argv(container, env)
        try:
            runtime.processes[name] = processes.start(
                command, {**processes.image_environment(home), **env}, home / name
            )
            runtime.container_ends[name] = math.inf
        except (OSError, ValueError) as error:
            runtime.container_ends[name] = 0
            runtime.exit_codes[name] = 128
            append_log(cluster, pod, container, f"[emulator] {rfc3339()} cannot start {command}: {error}\n")


def _collect_processes(cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float) -> bool:
    """Move each process's output into its container's log; a process that exited ends its container
    with its exit code. True if a container ended."""
    ended = False
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    for name, process in runtime.processes.items():
        if text := process.take_output():
            append_log(cluster, pod, containers[name], text)
        code = process.exit_code()
        if code is not None and math.isinf(runtime.container_ends.get(name, 0)):
            runtime.container_ends[name] = now
            runtime.exit_codes[name] = code
            ended = True
    return ended


def stop_processes(state: EmulatorState) -> None:
    """Kill every container process still running (the emulator is shutting down)."""
    with state.lock:
        running = [p for c in state.clusters.values() for r in c.pods.values() for p in r.processes.values()]
    for process in running:
        processes.kill(process)


def _await_workers(cluster: ClusterState, pod: JSON, runtime: PodRuntime, statuses: list[JSON]) -> None:
    """TPU containers of a multi-host slice whose workers are unreachable wait (run end = infinity)."""
    for container, status in zip(pod["spec"]["containers"], statuses, strict=True):
        if container_tpus(container) <= 0:
            continue
        blocker = unreachable_workers(cluster, pod, runtime.envs[container["name"]])
        if blocker is not None:
            runtime.container_ends[container["name"]] = math.inf
            status["ready"] = False
            append_log(cluster, pod, container, f"[emulator] {rfc3339()} TPU runtime waiting: {blocker}\n")


def _join_workers(
    state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float
) -> bool:
    """Start the run of waiting TPU containers whose workers became reachable; True if any did."""
    joined = False
    for status in pod["status"]["containerStatuses"]:
        name = status["name"]
        env = runtime.envs.get(name, {})
        if name in runtime.processes:  # a process's container ends with it, not after a run time
            continue
        if not math.isinf(runtime.container_ends.get(name, 0)) or unreachable_workers(cluster, pod, env):
            continue
        runtime.container_ends[name] = now + _run_seconds(state, env)
        status["ready"] = joined = True
    return joined


def _next_wakeup(runtime: PodRuntime, now: float) -> float:
    """The next container end; every tick while a container waits for its slice's workers."""
    ends = runtime.container_ends.values()
    if any(math.isinf(end) for end in ends):
        return now
    remaining = [end for end in ends if end > now]
    return min(remaining) if remaining else now


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


def _init_status(container: JSON, at: str) -> JSON:
    """Init containers ran to completion; native sidecars (restartPolicy Always) keep running."""
    if container.get("restartPolicy") == "Always":
        return _running_status(container, at)
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


def _ended(runtime: PodRuntime, container: str) -> tuple[int, str]:
    """How a container ended: its process's exit status, else as its EMULATOR_* env scripts it."""
    if container in runtime.exit_codes:
        code = runtime.exit_codes[container]
        return code, "Completed" if code == 0 else "Error"
    return outcome(runtime.envs.get(container, {}))


def _running(state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float) -> None:
    changed = _join_workers(state, cluster, pod, runtime, now)
    if runtime.processes:
        changed = _collect_processes(cluster, pod, runtime, now) or changed
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    for status in pod["status"]["containerStatuses"]:
        name = status["name"]
        if "running" in status["state"] and runtime.container_ends.get(name, 0) <= now:
            code, reason = _ended(runtime, name)
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
            append_log(cluster, pod, containers[name], exit_text(containers[name], code, reason))
            changed = True
    statuses = pod["status"]["containerStatuses"]
    if all("terminated" in s["state"] for s in statuses):
        failed = any(s["state"]["terminated"]["exitCode"] != 0 for s in statuses)
        finish_pod(pod, "Failed" if failed else "Succeeded")
        runtime.stage, runtime.next_at = "done", float("inf")
    else:
        _set_readiness(pod)
        runtime.next_at = _next_wakeup(runtime, now)
    if changed:
        cluster.store.touch("pods", pod)


def _terminating(
    state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float
) -> None:
    if not is_terminal(pod):
        for container in pod["spec"]["containers"]:
            record_event(cluster, pod, "Killing", f"Stopping container {container['name']}")
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        for process in runtime.processes.values():
            processes.terminate(process, grace)
        terminate_containers(pod, 143, "Error")
        finish_pod(pod, "Failed")
        cluster.store.touch("pods", pod)
    remove_pod(cluster, pod)


def _idle(state: EmulatorState, cluster: ClusterState, pod: JSON, runtime: PodRuntime, now: float) -> None:
    runtime.next_at = float("inf")


_STAGES = {
    "creating": _creating,
    "pullfail": _backoff,
    "running": _running,
    "done": _idle,
    "terminating": _terminating,
}
