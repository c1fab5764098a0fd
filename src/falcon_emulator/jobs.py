"""A batch/v1 Job controller: pods from the template, counts, backoffLimit, deadlines, deletion."""

from __future__ import annotations

import time

from falcon_emulator.admission import admit_pod
from falcon_emulator.events import record_event, refresh_event
from falcon_emulator.k8s_objects import CONTROLLER_UID, INDEX_ANNOTATION, JOB_NAME, prepare
from falcon_emulator.pods import condition, delete_pod, is_deleting, is_terminal, set_condition
from falcon_emulator.state import ClusterState, EmulatorState, JobRuntime
from falcon_emulator.store import BY_PLURAL, KubeError
from falcon_emulator.util import JSON, clone, parse_rfc3339, random_suffix, rfc3339

_COMPONENT = "job-controller"
_FAILED_CREATE_EVENT_SECONDS = 1.0


def finished(job: JSON) -> str | None:
    """'Complete' or 'Failed' once the Job has that condition, else None."""
    for kind in ("Complete", "Failed"):
        cond = condition(job, kind)
        if cond is not None and cond.get("status") == "True":
            return kind
    return None


def _target(job: JSON) -> JSON | None:
    for kind in ("FailureTarget", "SuccessCriteriaMet"):
        cond = condition(job, kind)
        if cond is not None and cond.get("status") == "True":
            return cond
    return None


def owned_pods(cluster: ClusterState) -> dict[str, list[JSON]]:
    owned: dict[str, list[JSON]] = {}
    for pod in cluster.store.iter("pods"):
        refs = pod["metadata"].get("ownerReferences") or []
        for ref in refs:
            if ref.get("kind") == "Job" and ref.get("controller"):
                owned.setdefault(ref["uid"], []).append(pod)
    return owned


def run_jobs(state: EmulatorState, cluster: ClusterState, now: float) -> None:
    owned = owned_pods(cluster)
    live = set()
    for job in list(cluster.store.iter("jobs")):
        uid = job["metadata"]["uid"]
        live.add(uid)
        _sync(state, cluster, job, owned.get(uid, []), now)
    for uid in set(cluster.jobs) - live:
        cluster.jobs.pop(uid, None)


def _sync(state: EmulatorState, cluster: ClusterState, job: JSON, pods: list[JSON], now: float) -> None:
    runtime = cluster.jobs.setdefault(job["metadata"]["uid"], JobRuntime())
    if is_deleting(job):
        _foreground_delete(state, cluster, job, pods)
        return
    outcome = finished(job)
    if outcome is not None:
        _ttl(state, cluster, job)
        return
    before = clone(job.get("status") or {})
    job.setdefault("status", {})
    _step(state, cluster, job, runtime, pods)
    _update_counts(job, runtime, pods)
    if job["status"] != before:
        cluster.store.touch("jobs", job)


def _step(
    state: EmulatorState, cluster: ClusterState, job: JSON, runtime: JobRuntime, pods: list[JSON]
) -> None:
    spec = job["spec"]
    _suspension(cluster, job, bool(spec.get("suspend")))
    if not spec.get("suspend") and not job["status"].get("startTime"):
        job["status"]["startTime"] = rfc3339()
    target = _target(job)
    if target is None:
        _count(runtime, pods)
        if _check_target(job, runtime) is not None:
            return  # Complete/Failed follows on a later sync, as in kube-controller-manager
    if target is not None:
        active = [p for p in pods if not is_terminal(p)]
        for pod in active:
            if not is_deleting(pod):
                delete_pod(state, cluster, pod)
        if not any(
            cluster.store.get("pods", p["metadata"]["namespace"], p["metadata"]["name"]) for p in active
        ):
            _finalize(cluster, job, target)
        return
    if spec.get("suspend"):
        for pod in pods:
            if not is_terminal(pod) and not is_deleting(pod):
                delete_pod(state, cluster, pod)
        return
    _create_missing(cluster, job, runtime, [p for p in pods if not is_terminal(p) and not is_deleting(p)])


def _suspension(cluster: ClusterState, job: JSON, suspended: bool) -> None:
    """The Suspended condition and its event, as kube-controller-manager sets them. A Job created
    unsuspended gets no condition; resuming restarts startTime (activeDeadlineSeconds counts the
    time a Job is active)."""
    current = (condition(job, "Suspended") or {}).get("status")
    if suspended and current != "True":
        set_condition(job, "Suspended", "True", "JobSuspended", "Job suspended")
        record_event(cluster, job, "Suspended", "Job suspended", component=_COMPONENT)
    elif not suspended and current == "True":
        set_condition(job, "Suspended", "False", "JobResumed", "Job resumed")
        record_event(cluster, job, "Resumed", "Job resumed", component=_COMPONENT)
        job["status"]["startTime"] = rfc3339()


def _count(runtime: JobRuntime, pods: list[JSON]) -> None:
    present = set()
    for pod in pods:
        uid = pod["metadata"]["uid"]
        present.add(uid)
        runtime.known.add(uid)
        if uid in runtime.counted or not is_terminal(pod):
            continue
        runtime.counted.add(uid)
        if pod["status"]["phase"] == "Succeeded":
            runtime.succeeded += 1
            index = _index(pod)
            if index is not None:
                runtime.succeeded_indexes.add(index)
        else:
            runtime.failed += 1
    for uid in runtime.known - present - runtime.counted:  # vanished before finishing: a failure
        runtime.counted.add(uid)
        runtime.failed += 1


def _index(pod: JSON) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION)
    return int(value) if value is not None and str(value).isdigit() else None


def _succeeded(job: JSON, runtime: JobRuntime) -> bool:
    completions = job["spec"].get("completions")
    if job["spec"].get("completionMode") == "Indexed":
        return len(runtime.succeeded_indexes) >= int(completions or 0)
    return runtime.succeeded >= (1 if completions is None else int(completions))


def _check_target(job: JSON, runtime: JobRuntime) -> JSON | None:
    spec = job["spec"]
    deadline = spec.get("activeDeadlineSeconds")
    started = job["status"].get("startTime")
    if runtime.failed > int(spec.get("backoffLimit", 6)):
        reason, message, kind = (
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            "FailureTarget",
        )
    elif deadline is not None and started and time.time() - parse_rfc3339(started) >= float(deadline):
        reason, message, kind = (
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
            "FailureTarget",
        )
    elif _succeeded(job, runtime):
        reason, message, kind = (
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            "SuccessCriteriaMet",
        )
    else:
        return None
    set_condition(job, kind, "True", reason, message)
    return condition(job, kind)


def _finalize(cluster: ClusterState, job: JSON, target: JSON) -> None:
    if target["type"] == "SuccessCriteriaMet":
        set_condition(job, "Complete", "True", target.get("reason"), target.get("message"))
        job["status"]["completionTime"] = rfc3339()
        record_event(cluster, job, "Completed", "Job completed", component=_COMPONENT)
        return
    set_condition(job, "Failed", "True", target.get("reason"), target.get("message"))
    record_event(
        cluster,
        job,
        str(target.get("reason")),
        str(target.get("message")),
        warning=True,
        component=_COMPONENT,
    )


def _create_missing(cluster: ClusterState, job: JSON, runtime: JobRuntime, active: list[JSON]) -> None:
    spec = job["spec"]
    parallelism = int(spec.get("parallelism", 1))
    if spec.get("completionMode") == "Indexed":
        busy = {_index(p) for p in active}
        free = parallelism - len(active)
        for index in range(int(spec.get("completions") or 0)):
            if free <= 0:
                break
            if index not in runtime.succeeded_indexes and index not in busy:
                if not _create_pod(cluster, job, runtime, index):
                    return
                free -= 1
        return
    completions = spec.get("completions")
    if completions is None:
        wanted = parallelism if runtime.succeeded == 0 else 0
    else:
        wanted = min(parallelism, int(completions) - runtime.succeeded)
    for _ in range(wanted - len(active)):
        if not _create_pod(cluster, job, runtime, None):
            return


def _create_pod(cluster: ClusterState, job: JSON, runtime: JobRuntime, index: int | None) -> bool:
    """Create one pod through admission; False when admission refused it (retried on a later sync)."""
    pod = _pod_from_template(job, index)
    namespace = job["metadata"]["namespace"]
    for _ in range(5):
        pod["metadata"]["name"] = pod["metadata"]["generateName"] + random_suffix()
        if cluster.store.get("pods", namespace, pod["metadata"]["name"]) is None:
            break
    prepared = prepare(BY_PLURAL["pods"], namespace, pod)
    try:
        admit_pod(cluster, prepared)
        cluster.store.add("pods", prepared)
    except KubeError as error:
        if error.code == 403:
            _failed_create(cluster, job, error.message)
        return False
    runtime.known.add(prepared["metadata"]["uid"])
    cluster.job_runs[f"{namespace}/{job['metadata']['name']}"].add(job["metadata"]["uid"])
    record_event(
        cluster, job, "SuccessfulCreate", f"Created pod: {prepared['metadata']['name']}", component=_COMPONENT
    )
    return True


def _failed_create(cluster: ClusterState, job: JSON, message: str) -> None:
    """The Job controller's FailedCreate warning; it retries every sync, the event is bumped at most once
    per _FAILED_CREATE_EVENT_SECONDS (the real controller backs off, the recorder aggregates)."""
    text = f"Error creating: {message}"
    existing = refresh_event(cluster, job, "FailedCreate", text)
    last = parse_rfc3339(str(existing.get("lastTimestamp"))) if existing else None
    if last is None or time.time() - last >= _FAILED_CREATE_EVENT_SECONDS:
        record_event(cluster, job, "FailedCreate", text, warning=True, component=_COMPONENT)


def _pod_from_template(job: JSON, index: int | None) -> JSON:
    meta, template = job["metadata"], clone(job["spec"]["template"])
    pod_meta = template.get("metadata") or {}
    uid, name = meta["uid"], meta["name"]
    labels = dict(pod_meta.get("labels") or {})
    labels.update({CONTROLLER_UID: uid, "controller-uid": uid, JOB_NAME: name, "job-name": name})
    pod: JSON = {
        "metadata": {
            "generateName": f"{name}-",
            "labels": labels,
            "annotations": dict(pod_meta.get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template["spec"],
    }
    if index is not None:
        _add_index(pod, name, index)
    return pod


def _add_index(pod: JSON, job_name: str, index: int) -> None:
    """What the Job controller adds for completionMode Indexed."""
    meta, spec = pod["metadata"], pod["spec"]
    meta["annotations"][INDEX_ANNOTATION] = str(index)
    meta["labels"][INDEX_ANNOTATION] = str(index)
    meta["generateName"] = f"{job_name}-{index}-"
    spec.setdefault("hostname", f"{job_name}-{index}")
    field_path = f"metadata.annotations['{INDEX_ANNOTATION}']"
    env_var = {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field_path}},
    }
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        container["env"] = [env_var, *(container.get("env") or [])]


def _update_counts(job: JSON, runtime: JobRuntime, pods: list[JSON]) -> None:
    status = job["status"]
    active = [p for p in pods if not is_terminal(p) and not is_deleting(p)]
    ready = [p for p in active if (condition(p, "Ready") or {}).get("status") == "True"]
    indexed = job["spec"].get("completionMode") == "Indexed"
    succeeded = len(runtime.succeeded_indexes) if indexed else runtime.succeeded
    for key, value in (("active", len(active)), ("succeeded", succeeded), ("failed", runtime.failed)):
        if value:
            status[key] = value
        else:
            status.pop(key, None)  # omitempty, like the real apiserver
    status["ready"] = len(ready)
    status["terminating"] = len([p for p in pods if is_deleting(p) and not is_terminal(p)])
    status["uncountedTerminatedPods"] = {}
    if indexed:
        text = _ranges(sorted(runtime.succeeded_indexes))
        if text:
            status["completedIndexes"] = text


def _ranges(values: list[int]) -> str:
    parts: list[str] = []
    start = prev = None
    for value in [*values, None]:
        if value is not None and prev is not None and value == prev + 1:
            prev = value
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = value
    return ",".join(parts)


def _ttl(state: EmulatorState, cluster: ClusterState, job: JSON) -> None:
    ttl = job["spec"].get("ttlSecondsAfterFinished")
    kind = finished(job)
    cond = condition(job, kind) if kind else None
    if ttl is None or cond is None or not cond.get("lastTransitionTime"):
        return
    if time.time() >= parse_rfc3339(cond["lastTransitionTime"]) + float(ttl):
        delete_job(state, cluster, job, "Background")


def _foreground_delete(state: EmulatorState, cluster: ClusterState, job: JSON, pods: list[JSON]) -> None:
    remaining = [p for p in pods if not delete_pod(state, cluster, p)]
    if not remaining:
        cluster.store.remove("jobs", job)
        cluster.jobs.pop(job["metadata"]["uid"], None)


def delete_job(state: EmulatorState, cluster: ClusterState, job: JSON, policy: str) -> bool:
    """Delete with a propagation policy; False when the Job stays (Foreground, pods still terminating)."""
    pods = owned_pods(cluster).get(job["metadata"]["uid"], [])
    if policy == "Foreground":
        if not is_deleting(job):
            job["metadata"]["deletionTimestamp"] = rfc3339()
            job["metadata"]["finalizers"] = [*job["metadata"].get("finalizers", []), "foregroundDeletion"]
            cluster.store.touch("jobs", job)
        _foreground_delete(state, cluster, job, pods)
        return cluster.store.get("jobs", job["metadata"]["namespace"], job["metadata"]["name"]) is None
    cluster.store.remove("jobs", job)
    cluster.jobs.pop(job["metadata"]["uid"], None)
    for pod in pods:
        if policy == "Background":
            delete_pod(state, cluster, pod)
        else:
            _orphan(cluster, pod, job["metadata"]["uid"])
    return True


def _orphan(cluster: ClusterState, pod: JSON, owner_uid: str) -> None:
    refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
    if refs:
        pod["metadata"]["ownerReferences"] = refs
    else:
        pod["metadata"].pop("ownerReferences", None)
    cluster.store.touch("pods", pod)
