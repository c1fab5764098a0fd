"""Create-time validation and defaulting of Kubernetes objects (what the apiserver adds on POST)."""

from __future__ import annotations

from typing import Any

from falcon_emulator.store import KubeError, ResourceType
from falcon_emulator.util import JSON, RANDOM, random_suffix

JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def invalid(rt: ResourceType, name: str, message: str) -> KubeError:
    text = f'{rt.kind} "{name}" is invalid: {message}'
    return KubeError(422, "Invalid", text, {"name": name, "group": rt.group, "kind": rt.kind})


def prepare(rt: ResourceType, namespace: str, body: Any) -> JSON:
    """Return the object to store, or raise 422 Invalid like the apiserver."""
    if not isinstance(body, dict):
        raise KubeError(400, "BadRequest", "the request body must be a JSON object")
    meta = body.setdefault("metadata", {})
    if not meta.get("name"):
        if not meta.get("generateName"):
            raise invalid(rt, "", "metadata.name: Required value: name or generateName is required")
        meta["name"] = meta["generateName"] + random_suffix()
    for stamped in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
        meta.pop(stamped, None)
    if rt.namespaced:
        if meta.get("namespace") not in (None, "", namespace):
            raise KubeError(400, "BadRequest", "the namespace of the object does not match the request")
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    if rt.definition is None:
        _DEFAULTERS.get(rt.plural, _noop)(rt, body)
    return body


def next_generation(old: JSON, new: JSON, status_apart: bool) -> int:
    """metadata.generation counts changes of the desired state: anything but metadata, and but status when a
    status subresource writes it apart."""
    ignored = ("metadata", "status") if status_apart else ("metadata",)
    before = {k: v for k, v in old.items() if k not in ignored}
    after = {k: v for k, v in new.items() if k not in ignored}
    generation = int(old["metadata"].get("generation", 1))
    return generation + 1 if before != after else generation


def _noop(rt: ResourceType, body: JSON) -> None:
    return None


def _namespace(rt: ResourceType, body: JSON) -> None:
    name = body["metadata"]["name"]
    body["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    body["spec"] = {"finalizers": ["kubernetes"]}
    body["status"] = {"phase": "Active"}


def default_pod_spec(rt: ResourceType, name: str, spec: Any, path: str) -> JSON:
    if not isinstance(spec, dict) or not spec.get("containers"):
        raise invalid(rt, name, f"{path}.containers: Required value")
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        if not container.get("name") or not container.get("image"):
            raise invalid(rt, name, f"{path}.containers: name and image are required")
        tag = container["image"].rsplit("/", 1)[-1]
        pull = "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent"
        container.setdefault("imagePullPolicy", pull)
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("securityContext", {})
    return spec


def _pod(rt: ResourceType, body: JSON) -> None:
    name = body["metadata"]["name"]
    default_pod_spec(rt, name, body.get("spec"), "spec")
    body["status"] = {"phase": "Pending", "qosClass": "BestEffort"}


def _job(rt: ResourceType, body: JSON) -> None:
    name = body["metadata"]["name"]
    spec = body.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("template"), dict):
        raise invalid(rt, name, "spec.template: Required value")
    template = spec["template"]
    pod_spec = default_pod_spec(rt, name, template.get("spec"), "spec.template.spec")
    if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
        raise invalid(
            rt, name, 'spec.template.spec.restartPolicy: Unsupported value: must be "OnFailure" or "Never"'
        )
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        raise invalid(rt, name, "spec.completions: Required value: when completion mode is Indexed")
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    body["status"] = {}


def stamp_job_selector(job: JSON) -> None:
    """After the uid exists: the selector and template labels the apiserver adds to a Job."""
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    job["spec"].setdefault("selector", {"matchLabels": {CONTROLLER_UID: uid}})
    labels = job["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})
    labels.update({CONTROLLER_UID: uid, "controller-uid": uid, JOB_NAME: name, "job-name": name})


def _service(rt: ResourceType, body: JSON) -> None:
    spec = body.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") != "None":
        spec["clusterIP"] = f"10.96.{RANDOM.randint(0, 255)}.{RANDOM.randint(1, 254)}"
    spec["clusterIPs"] = [spec["clusterIP"]]
    for port in spec.get("ports", []):
        if "port" not in port:
            raise invalid(rt, body["metadata"]["name"], "spec.ports.port: Required value")
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port["port"])
    body["status"] = {"loadBalancer": {}}


_DEFAULTERS = {"namespaces": _namespace, "pods": _pod, "jobs": _job, "services": _service}
