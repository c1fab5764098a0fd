"""The Cloud Storage FUSE CSI driver as a pod meets it: the sidecar webhook and the volume mount.

Sources: GoogleCloudPlatform/gcs-fuse-csi-driver ``pkg/webhook/sidecar_spec.go`` (sidecar name, volumes,
native sidecar), ``docs/troubleshooting.md`` (FailedMount texts), ``docs/authentication.md`` and GKE
"Access Cloud Storage buckets with the Cloud Storage FUSE CSI driver" (the Kubernetes ServiceAccount is the
Workload Identity principal that needs a role on the bucket).

* Webhook: only a pod annotated ``gke-gcsfuse/volumes: "true"`` gets the ``gke-gcsfuse-sidecar`` init
  container (``restartPolicy: Always``) and its ``gke-gcsfuse-tmp|buffer|cache`` emptyDir volumes.
* Mount (kubelet -> CSI NodePublishVolume): without the sidecar, FailedPrecondition; with it, the pod's
  principal ``serviceAccount:<project>.svc.id.goog[<namespace>/<ksa>]`` must be a writer of the bucket in
  the cluster's project config (a bucket not configured is not readable), else PermissionDenied (403).
"""

from __future__ import annotations

from falcon_emulator.state import ClusterState, EmulatorState
from falcon_emulator.util import JSON

DRIVER = "gcsfuse.csi.storage.gke.io"
ANNOTATION = "gke-gcsfuse/volumes"
SIDECAR = "gke-gcsfuse-sidecar"
SIDECAR_IMAGE = "gke.gcr.io/gcs-fuse-csi-driver-sidecar-mounter:v1.17.3-gke.1"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")  # Go's strconv.ParseBool, which the webhook uses
_NOBODY = 65534


def inject_sidecar(pod: JSON) -> None:
    """The driver's mutating webhook on pod creation."""
    if (pod["metadata"].get("annotations") or {}).get(ANNOTATION) not in _TRUE:
        return
    spec = pod["spec"]
    if any(c.get("name") == SIDECAR for c in [*spec.get("initContainers", []), *spec["containers"]]):
        return
    spec["initContainers"] = [_sidecar(), *spec.get("initContainers", [])]
    present = {v.get("name") for v in spec.get("volumes") or []}
    volumes = spec.setdefault("volumes", [])
    for name in ("gke-gcsfuse-tmp", "gke-gcsfuse-buffer", "gke-gcsfuse-cache"):
        if name not in present:
            volumes.append({"name": name, "emptyDir": {}})


def _sidecar() -> JSON:
    mounts = [{"name": f"gke-gcsfuse-{n}", "mountPath": f"/gcsfuse-{n}"} for n in ("tmp", "buffer", "cache")]
    return {
        "name": SIDECAR,
        "image": SIDECAR_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "args": ["--v=5"],
        "env": [{"name": "NATIVE_SIDECAR", "value": "TRUE"}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
            "runAsNonRoot": True,
            "runAsUser": _NOBODY,
            "runAsGroup": _NOBODY,
        },
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "5Gi"}},
        "volumeMounts": mounts,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def principal(project: str, namespace: str, account: str) -> str:
    """How IAM names a Kubernetes ServiceAccount through Workload Identity."""
    return f"serviceAccount:{project}.svc.id.goog[{namespace}/{account}]"


def mount_failure(state: EmulatorState, cluster: ClusterState, pod: JSON) -> tuple[str, str] | None:
    """(volume, FailedMount message) for the first gcsfuse volume that cannot be mounted, else None."""
    spec = pod["spec"]
    has_sidecar = any(
        c.get("name") == SIDECAR for c in [*spec.get("initContainers", []), *spec["containers"]]
    )
    for volume in spec.get("volumes") or []:
        csi = volume.get("csi") or {}
        if csi.get("driver") != DRIVER:
            continue
        name = volume.get("name", "")
        if not has_sidecar:
            return name, _setup_failed(
                name, "FailedPrecondition", "failed to find the sidecar container in Pod spec"
            )
        bucket = str((csi.get("volumeAttributes") or {}).get("bucketName", ""))
        if not _may_write(state, cluster, pod, bucket):
            denied = (
                f'failed to get GCS bucket "{bucket}": googleapi: Error 403: Caller does not have '
                "storage.objects.list access to the Google Cloud Storage bucket. Permission "
                "'storage.objects.list' denied on resource (or it may not exist)., forbidden"
            )
            return name, _setup_failed(name, "PermissionDenied", denied)
    return None


def _setup_failed(volume: str, code: str, detail: str) -> str:
    return f'MountVolume.SetUp failed for volume "{volume}" : rpc error: code = {code} desc = {detail}'


def _may_write(state: EmulatorState, cluster: ClusterState, pod: JSON, bucket: str) -> bool:
    project = state.config.projects.get(cluster.project)
    config = project.buckets.get(bucket) if project is not None else None
    account = pod["spec"].get("serviceAccountName") or "default"
    who = principal(cluster.project, pod["metadata"]["namespace"], account)
    return config is not None and who in config.writers
