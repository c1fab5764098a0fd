"""Render a task's spec into its Kubernetes Job (design §6, §7): one task, one Job.

The pods are pinned to the task's own node pool, request all TPU chips of their node, and
write stdout/stderr through a GCS FUSE volume to ``gs://<bucket>/logs/<task id>/<pod name>.log``.
A multi-host slice runs as an Indexed Job with one pod per node, its pods addressable through a
headless Service (GKE "multi-host TPU with Indexed Job"): pod hostnames are
``<job>-<index>.<service>``, and GKE's TPU webhook derives ``TPU_WORKER_ID`` and
``TPU_WORKER_HOSTNAMES`` from the index and that ``subdomain``; without it the workers of a
slice cannot find each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from falcon.domain.model import FALCON_ENV, TPU_RESOURCE, Cluster, Resources, TaskSpec
from falcon.domain.topology import SliceShape

MANAGED_BY = "falcon"
TASK_ID_ANNOTATION = "falcon.dev/task-id"
TASK_LABEL = "falcon.dev/task"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"

# Runs the user's command with stdout+stderr teed to $FALCON_LOG_FILE, keeps its exit code
# (pipefail through process substitution) and forwards SIGTERM to it (the shell is PID 1).
LOG_WRAPPER = """set -o pipefail
mkdir -p "$(dirname "$FALCON_LOG_FILE")"
exec > >(tee -a "$FALCON_LOG_FILE") 2>&1; tee_pid=$!
"$@" & child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
wait "$child"; rc=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
exec >&- 2>&-; wait "$tee_pid" 2>/dev/null
exit "$rc"
"""


@dataclass(frozen=True)
class JobTarget:
    task_id: str
    job_name: str
    node_pool: str
    cluster: Cluster
    shape: SliceShape
    gcs_mount_path: str = "/gcs"
    service_account: str | None = None

    @property
    def log_dir(self) -> str:
        return f"logs/{self.task_id}"

    @property
    def service_name(self) -> str:
        return service_name_for(self.job_name)


def service_name_for(job_name: str) -> str:
    """The headless Service of a multi-host task: named as its Job (a DNS-1035 label, and Jobs
    and Services do not share a namespace of names), so release and the orphan sweep find it."""
    return job_name


def log_object(task_id: str, pod_name: str) -> str:
    """Object path of a pod's log inside the cluster's bucket (design §7)."""
    return f"logs/{task_id}/{pod_name}.log"


def _labels(target: JobTarget) -> dict[str, str]:
    return {"managed-by": MANAGED_BY, TASK_LABEL: target.job_name}


def render_service(target: JobTarget) -> dict[str, Any]:
    """The headless Service a multi-host Job's pods name as ``subdomain``; created before the Job.

    It selects only this task's pods, and publishes them before they are Ready: workers resolve
    each other while they start, which is before any of them is Ready."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": target.service_name,
            "labels": _labels(target),
            "annotations": {TASK_ID_ANNOTATION: target.task_id},
        },
        "spec": {
            "clusterIP": "None",
            "selector": {TASK_LABEL: target.job_name},
            "publishNotReadyAddresses": True,
        },
    }


def render_job(spec: TaskSpec, target: JobTarget) -> dict[str, Any]:
    """The task's Job, created suspended: dispatch resumes it once, by uid.

    A create the client gave up on (its answer came after the timeout) may still reach the API
    server later, even after this task's Job ran, ended and was deleted. Created suspended, that
    late copy never starts a pod; the orphan sweep deletes it. Kueue admits Jobs the same way."""
    shape = target.shape
    labels = _labels(target)
    job_spec: dict[str, Any] = {
        "suspend": True,
        "backoffLimit": 0,
        "parallelism": shape.nodes,
        "completions": shape.nodes,
        "template": {
            "metadata": {
                "labels": labels,
                "annotations": {"gke-gcsfuse/volumes": "true", TASK_ID_ANNOTATION: target.task_id},
            },
            "spec": _pod_spec(spec, target),
        },
    }
    if shape.multi_host:
        job_spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": target.job_name,
            "labels": labels,
            "annotations": {TASK_ID_ANNOTATION: target.task_id},
        },
        "spec": job_spec,
    }


def _pod_spec(spec: TaskSpec, target: JobTarget) -> dict[str, Any]:
    shape = target.shape
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {
            "cloud.google.com/gke-nodepool": target.node_pool,
            "cloud.google.com/gke-tpu-accelerator": shape.generation.accelerator_label,
            "cloud.google.com/gke-tpu-topology": shape.topology,
        },
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [_container(spec, target)],
        "volumes": [
            {
                "name": "gcs-logs",
                "csi": {
                    "driver": GCSFUSE_DRIVER,
                    "readOnly": False,
                    "volumeAttributes": {
                        "bucketName": target.cluster.gcs_bucket,
                        "mountOptions": "implicit-dirs",
                    },
                },
            }
        ],
    }
    if shape.multi_host:
        pod["subdomain"] = target.service_name
    if target.service_account:
        pod["serviceAccountName"] = target.service_account
    return pod


def _container(spec: TaskSpec, target: JobTarget) -> dict[str, Any]:
    chips = {TPU_RESOURCE: str(target.shape.chips_per_node)}
    own = spec.resources or Resources()
    log_file = _literal(f"{target.gcs_mount_path}/{target.log_dir}") + "/$(POD_NAME).log"
    falcon_env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "FALCON_TASK_ID", "value": _literal(target.task_id)},
        {"name": "FALCON_LOG_FILE", "value": log_file},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    return {
        "name": "main",
        "image": spec.image,
        "command": ["/bin/bash", "-c", LOG_WRAPPER, "falcon-run", *spec.command],
        "args": list(spec.args),
        "env": [*falcon_env, *({"name": k, "value": v} for k, v in spec.env.items() if k not in FALCON_ENV)],
        # The chips last: the TPU request is the slice shape's, whatever the spec says.
        "resources": {"requests": {**own.requests, **chips}, "limits": {**own.limits, **chips}},
        "volumeMounts": [{"name": "gcs-logs", "mountPath": target.gcs_mount_path}],
    }


def _literal(value: str) -> str:
    """An env value Kubernetes passes as it is: it expands ``$(VAR)``, and ``$$`` is its escape."""
    return value.replace("$", "$$")
