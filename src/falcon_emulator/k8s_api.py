"""One Kubernetes API per emulated cluster under /k8s/{project}/{location}/{cluster}/..."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from starlette.datastructures import QueryParams
from starlette.responses import PlainTextResponse, Response

from falcon_emulator import apps, crds, secrets
from falcon_emulator.admission import admit_pod
from falcon_emulator.apps import APPS
from falcon_emulator.crds import CRD_PLURAL, has_status, served_types
from falcon_emulator.errors import json_response, kube_error, kube_response
from falcon_emulator.gke_api import emulator_state
from falcon_emulator.jobs import delete_job
from falcon_emulator.k8s_objects import next_generation, prepare, stamp_job_selector
from falcon_emulator.k8s_watch import open_watch
from falcon_emulator.pods import delete_pod, fail_lost_pod, remove_pod
from falcon_emulator.selectors import SelectorError, labels_match, parse_field_selector, parse_label_selector
from falcon_emulator.service_accounts import provision_namespace
from falcon_emulator.state import ClusterState, EmulatorState
from falcon_emulator.store import KubeError, KubeStore, ResourceType
from falcon_emulator.util import JSON, clone, json_patch, merge_patch

log = logging.getLogger(__name__)
router = APIRouter()
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
_PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class Target:
    rt: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None


def parse_target(store: KubeStore, path: str) -> Target:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise kube_error(404, f"the server could not find the requested resource (path /{path})")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    rt = store.resource(group, version, rest[0]) if rest else None
    if rt is None or len(rest) > 3 or (namespace is not None and not rt.namespaced):
        raise kube_error(404, f"the server could not find the requested resource (path /{path})")
    name = rest[1] if len(rest) > 1 else None
    return Target(rt, namespace, name, rest[2] if len(rest) > 2 else None)


@router.api_route("/k8s/{project}/{location}/{cluster}/{path:path}", methods=_METHODS)
async def kube(project: str, location: str, cluster: str, path: str, request: Request) -> Response:
    state = emulator_state(request)
    if state.shutting_down:
        return _shutting_down()
    raw = await request.body()
    try:
        with state.lock:
            target_cluster = state.cluster(project, location, cluster)
            if target_cluster is None:
                raise kube_error(
                    404, f"cluster projects/{project}/locations/{location}/clusters/{cluster} not found"
                )
            parts = [p for p in path.split("/") if p]
            if parts in (["version"], ["api"], ["api", "v1"]) or (parts[:1] == ["apis"] and len(parts) <= 3):
                return json_response(_discovery(state, target_cluster.store, parts))
            return _handle(state, target_cluster, parse_target(target_cluster.store, path), request, raw)
    except KubeError as error:
        return kube_response(error)
    except Exception as exc:  # an emulator bug must still look like an apiserver error
        log.exception("kubernetes request failed: %s %s", request.method, request.url.path)
        return kube_response(kube_error(500, f"emulator internal error: {exc!r}"))


def _shutting_down() -> Response:
    """kube-apiserver's answer to a new request once its shutdown delay has passed (its
    WithRetryAfter filter, an ``http.Error``: plain text, not a Status): 429 with ``Retry-After:
    5``, and the connection closed so that the client comes back on a new one."""
    return PlainTextResponse(
        "The apiserver is shutting down, please try again later.\n",
        status_code=429,
        headers={"Retry-After": "5", "Connection": "close"},
    )


def _body(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise kube_error(400, f"the request body is not valid JSON: {exc}") from exc


def _handle(
    state: EmulatorState, cluster: ClusterState, target: Target, request: Request, raw: bytes
) -> Response:
    params, method, rt = request.query_params, request.method, target.rt
    if target.name is None:
        if method == "GET" and params.get("watch") in ("true", "1", "True"):
            return open_watch(state, cluster, rt, target.namespace, params)
        if method == "GET":
            return json_response(_list(state, cluster, target, params))
        if method == "POST" and (target.namespace is not None or not rt.namespaced):
            return _create(cluster, target, _body(raw), params)
        raise kube_error(405, f"{method} is not supported on this collection")
    obj = cluster.store.require(rt.key, target.namespace or "", target.name)
    content_type = request.headers.get("content-type", "")
    if target.sub == "log" and rt.key == "pods" and method == "GET":
        return _pod_log(cluster, obj, params)
    if target.sub == "scale" and rt.key in APPS:
        return json_response(_scale(cluster, target, obj, method, _body(raw), content_type))
    if target.sub not in (None, "status") or (target.sub == "status" and not has_status(rt)):
        raise kube_error(
            404, f"the server could not find the requested resource ({rt.qualified}/{target.sub})"
        )
    if method == "GET":
        return json_response(obj)
    if method in ("PATCH", "PUT"):
        return json_response(_update(cluster, target, obj, _body(raw), content_type, method))
    if method == "DELETE" and target.sub is None:
        return _delete(state, cluster, rt, obj, params, _body(raw))
    raise kube_error(405, f"{method} is not supported on {rt.plural}/{target.sub}")


def _scale(
    cluster: ClusterState, target: Target, obj: JSON, method: str, body: Any, content_type: str
) -> JSON:
    """GET, PATCH or PUT of a workload's autoscaling/v1 Scale; a write changes only spec.replicas."""
    if method == "GET":
        return apps.scale_of(obj)
    if method not in ("PATCH", "PUT"):
        raise kube_error(405, f"{method} is not supported on {target.rt.plural}/scale")
    scale = apps.scale_of(obj)
    written = (
        _replacement(target.rt, obj["metadata"]["name"], obj, body)
        if method == "PUT"
        else _patched(scale, body, content_type)
    )
    before = clone(obj)
    if apps.rescale(obj, written):
        obj["metadata"]["generation"] = next_generation(before, obj, status_apart=True)
        apps.follow(target.rt, obj)
        cluster.store.touch(target.rt.key, obj)
    return apps.scale_of(obj)


def _list(state: EmulatorState, cluster: ClusterState, target: Target, params: QueryParams) -> JSON:
    try:
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"))
    except SelectorError as exc:
        raise kube_error(400, str(exc)) from exc
    items = [
        obj
        for obj in cluster.store.iter(target.rt.key, target.namespace)
        if labels_match(labels, obj["metadata"].get("labels")) and fields(obj)
    ]
    items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    meta: JSON = {"resourceVersion": str(state.versions.current)}
    offset = int(params.get("continue") or 0) if (params.get("continue") or "0").isdigit() else 0
    limit = int(params.get("limit") or 0)
    if limit > 0 and offset + limit < len(items):
        meta.update({"continue": str(offset + limit), "remainingItemCount": len(items) - offset - limit})
        items = items[offset : offset + limit]
    elif offset:
        items = items[offset:]
    return {
        "kind": f"{target.rt.kind}List",
        "apiVersion": target.rt.api_version,
        "metadata": meta,
        "items": items,
    }


def _create(cluster: ClusterState, target: Target, body: Any, params: QueryParams) -> Response:
    rt, namespace = target.rt, target.namespace or ""
    if rt.namespaced and cluster.store.get("namespaces", "", namespace) is None:
        raise KubeError(
            404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}
        )
    obj = prepare(rt, namespace, body)
    obj["metadata"]["uid"] = str(uuid.uuid4())
    if rt.key == "jobs":
        stamp_job_selector(obj)
    if rt.key == "pods":
        admit_pod(cluster, obj)
    _admit_create(rt, obj)
    if params.get("dryRun"):
        obj.update(kind=rt.kind, apiVersion=rt.api_version)
        return json_response(obj, 201)
    created = _add(cluster, rt, obj)
    if rt.key == "namespaces":
        provision_namespace(cluster, created["metadata"]["name"])
    if rt.key == CRD_PLURAL:
        cluster.store.serve(served_types(created))
    return json_response(created, 201)


def _admit_create(rt: ResourceType, obj: JSON) -> None:
    """Custom objects, CRDs and apps workloads: validated and defaulted, their generation starts at 1."""
    if rt.definition is not None:
        if has_status(rt):
            obj.pop("status", None)  # the status subresource alone writes status
        crds.admit(rt, obj, None)
    elif rt.key == CRD_PLURAL:
        _check_definition(rt, obj)
    elif rt.key in APPS:
        apps.admit(rt, obj)
    else:
        if rt.key == "secrets":
            secrets.admit(obj)
        return
    obj["metadata"]["generation"] = 1


def _check_definition(rt: ResourceType, crd: JSON) -> None:
    errors = crds.check_definition(crd)
    if errors:
        raise crds.invalid_error(rt, crd["metadata"]["name"], errors)
    crds.accept(crd)


def _add(cluster: ClusterState, rt: ResourceType, obj: JSON) -> JSON:
    """Store the object, counting Job creations accepted and refused (a name that already exists)."""
    if rt.key != "jobs":
        return cluster.store.add(rt.key, obj)
    key = f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
    try:
        created = cluster.store.add(rt.key, obj)
    except KubeError as error:
        cluster.job_creates_refused += error.code == 409
        raise
    cluster.job_creations[key] += 1
    return created


_IMMUTABLE_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "resourceVersion",
    "generation",
)
_IMMUTABLE_SPEC = {
    "jobs": ("template", "selector", "completionMode"),
    "pods": ("containers", "nodeName", "volumes"),
    "deployments": ("selector",),
    "statefulsets": ("selector",),
    CRD_PLURAL: ("scope",),
}
_UNSUPPORTED_PATCH = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def _update(
    cluster: ClusterState, target: Target, obj: JSON, body: Any, content_type: str, method: str
) -> JSON:
    """PUT or PATCH (main resource or /status); identity metadata and the other half stay untouched."""
    rt = target.rt
    if rt.definition is not None and "strategic-merge-patch" in content_type:
        raise KubeError(415, "UnsupportedMediaType", _UNSUPPORTED_PATCH)
    if method == "PUT" and isinstance(body, dict):  # a precondition: checked before resourceVersion
        _check_uid_precondition(rt, target.name or "", obj, body.get("metadata") or {})
    new = (
        _replacement(rt, target.name or "", obj, body)
        if method == "PUT"
        else _patched(obj, body, content_type)
    )
    meta = dict(new.get("metadata") or {})
    if method == "PATCH":
        _check_uid_kept(rt, target.name or "", obj, meta)
    for key in _IMMUTABLE_META:
        meta.pop(key, None)
        if key in obj["metadata"]:
            meta[key] = obj["metadata"][key]
    new.update(kind=rt.kind, apiVersion=rt.api_version, metadata=meta)
    if target.sub == "status":
        new = dict(obj, status=new.get("status", {}))
    else:
        _check_immutable(rt, target.name or "", obj, new)
        if has_status(rt):
            new.pop("status", None)
            if "status" in obj:
                new["status"] = obj["status"]
    _admit_update(rt, obj, new)
    obj.clear()
    obj.update(new)
    cluster.store.touch(rt.key, obj)
    if rt.key == CRD_PLURAL:
        cluster.store.serve(served_types(obj))
    return obj


def _admit_update(rt: ResourceType, old: JSON, new: JSON) -> None:
    """Validate the new state like a create, then count a spec change in metadata.generation."""
    if rt.definition is not None:
        crds.admit(rt, new, old)
    elif rt.key == CRD_PLURAL:
        _check_definition(rt, new)
    elif rt.key in APPS:
        apps.check_replicas(rt, new["metadata"]["name"], (new.get("spec") or {}).get("replicas"))
    elif rt.key == "secrets":
        secrets.admit(new)
    if "generation" in old["metadata"]:
        new["metadata"]["generation"] = next_generation(old, new, status_apart=has_status(rt))
    if rt.key in APPS:
        apps.follow(rt, new)


def _replacement(rt: ResourceType, name: str, obj: JSON, body: Any) -> JSON:
    if not isinstance(body, dict):
        raise kube_error(400, "the request body must be an object")
    sent_rv = (body.get("metadata") or {}).get("resourceVersion")
    if sent_rv and sent_rv != obj["metadata"]["resourceVersion"]:
        message = (
            f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again"
        )
        raise KubeError(409, "Conflict", message)
    return dict(body)


def _patched(obj: JSON, body: Any, content_type: str) -> JSON:
    if isinstance(body, list) or "json-patch" in content_type:
        return _json_patch(obj, body)
    patched: JSON = merge_patch(obj, body or {})
    return patched


def _json_patch(obj: JSON, body: Any) -> JSON:
    try:
        return json_patch(obj, list(body or []))
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise kube_error(422, f"the JSON patch could not be applied: {exc}") from exc


def _check_uid_precondition(rt: ResourceType, name: str, obj: JSON, sent: JSON) -> None:
    """A PUT's uid is a precondition (GuaranteedUpdate): another object's is refused with 409.
    Clients send a uid so that a write never lands on a namesake made after theirs was deleted."""
    uid, actual = sent.get("uid"), obj["metadata"]["uid"]
    if uid and uid != actual:
        key = f"/registry/{rt.key}/{obj['metadata'].get('namespace', '')}/{name}"
        raise KubeError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {rt.qualified} "{name}": StorageError: invalid object, '
            f"Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in "
            f"precondition: {uid}, UID in object meta: {actual}",
        )


def _check_uid_kept(rt: ResourceType, name: str, obj: JSON, patched: JSON) -> None:
    """A PATCH carries no preconditions: a uid it sets fails validation, uid being immutable (422).
    kubelet's status patches send the pod's uid for that."""
    uid = patched.get("uid")
    if uid and uid != obj["metadata"]["uid"]:
        kind = f'{rt.kind}.{rt.group} "{name}"' if rt.group else f'{rt.kind} "{name}"'
        message = f'{kind} is invalid: metadata.uid: Invalid value: "{uid}": field is immutable'
        raise KubeError(422, "Invalid", message, {"name": name, "group": rt.group, "kind": rt.kind})


def _check_immutable(rt: ResourceType, name: str, old: JSON, new: JSON) -> None:
    for field in _IMMUTABLE_SPEC.get(rt.key, ()):
        if (old.get("spec") or {}).get(field) != (new.get("spec") or {}).get(field):
            kind = f'{rt.kind}.{rt.group or "core"} "{name}"'
            message = f"{kind} is invalid: spec.{field}: Invalid value: field is immutable"
            raise KubeError(422, "Invalid", message, {"name": name, "group": rt.group, "kind": rt.kind})


def _delete_options(params: QueryParams, body: Any) -> tuple[str | None, int | None]:
    options = body if isinstance(body, dict) else {}
    policy = params.get("propagationPolicy") or options.get("propagationPolicy")
    grace = params.get("gracePeriodSeconds") or options.get("gracePeriodSeconds")
    return policy, None if grace is None else int(grace)


def _success(rt: ResourceType, obj: JSON) -> JSON:
    meta = obj["metadata"]
    details = {"name": meta["name"], "group": rt.group, "kind": rt.plural, "uid": meta.get("uid", "")}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def _delete(
    state: EmulatorState, cluster: ClusterState, rt: ResourceType, obj: JSON, params: QueryParams, body: Any
) -> Response:
    policy, grace = _delete_options(params, body)
    if rt.key == "jobs":
        gone = delete_job(state, cluster, obj, policy or "Orphan")
        return json_response(_success(rt, obj) if gone else obj)
    if rt.key == "pods":
        delete_pod(state, cluster, obj, grace)
        return json_response(obj)
    if rt.key == "namespaces":
        return json_response(_delete_namespace(state, cluster, obj))
    if rt.key == CRD_PLURAL:
        cluster.store.forget(obj["metadata"]["name"])
    if rt.key == "nodes":
        for pod in list(cluster.store.iter("pods")):
            if pod["spec"].get("nodeName") == obj["metadata"]["name"]:
                fail_lost_pod(cluster, pod, obj["metadata"]["name"])
    cluster.store.remove(rt.key, obj)
    returns_object = rt.key in ("services", "serviceaccounts")  # ReturnDeletedObject in their registries
    return json_response(obj if returns_object else _success(rt, obj))


def _delete_namespace(state: EmulatorState, cluster: ClusterState, namespace: JSON) -> JSON:
    name = namespace["metadata"]["name"]
    if name in _PROTECTED_NAMESPACES:
        raise KubeError(
            403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted'
        )
    for job in list(cluster.store.iter("jobs", name)):
        delete_job(state, cluster, job, "Background")
    for pod in list(cluster.store.iter("pods", name)):
        remove_pod(cluster, pod)
    for key, rt in list(cluster.store.types.items()):
        if rt.namespaced and key not in ("jobs", "pods"):
            for obj in list(cluster.store.iter(key, name)):
                cluster.store.remove(key, obj)
    namespace["status"] = {"phase": "Terminating"}
    cluster.store.remove("namespaces", namespace)
    return namespace


def _pod_log(cluster: ClusterState, pod: JSON, params: QueryParams) -> Response:
    meta = pod["metadata"]
    names = [c["name"] for c in pod["spec"]["containers"]]
    container = params.get("container") or (names[0] if len(names) == 1 else None)
    if container is None:
        raise kube_error(
            400,
            f"a container name must be specified for pod {meta['name']}, choose one of: [{' '.join(names)}]",
        )
    if container not in names:
        raise kube_error(400, f"container {container} is not valid for pod {meta['name']}")
    text = cluster.logs.get((meta["namespace"], meta["name"]), {}).get(container)
    if text is None:
        raise kube_error(
            400, f'container "{container}" in pod "{meta["name"]}" is waiting to start: ContainerCreating'
        )
    tail = params.get("tailLines")
    if tail and tail.isdigit():
        text = "".join(text.splitlines(keepends=True)[-int(tail) :])
    return PlainTextResponse(text)


def _discovery(state: EmulatorState, store: KubeStore, parts: list[str]) -> JSON:
    """/version, /api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>: what the store serves now."""
    if parts == ["version"]:
        return {
            "major": "1",
            "minor": "33",
            "gitVersion": f"v{state.config.gke_version}",
            "platform": "linux/amd64",
            "goVersion": "go1.24",
        }
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    versions: dict[str, list[str]] = {}
    for group, version, _ in store.served:
        if version not in versions.setdefault(group, []):
            versions[group].append(version)
    if parts == ["apis"]:
        groups = [_api_group(g, vs) for g, vs in versions.items() if g]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    group = "" if parts[0] == "api" else parts[1]
    if group not in versions or (len(parts) == 3 and parts[2] not in versions[group]):
        raise kube_error(404, f"the server could not find the requested resource (path /{'/'.join(parts)})")
    if len(parts) == 2 and parts[0] == "apis":
        return dict(_api_group(group, versions[group]), kind="APIGroup", apiVersion="v1")
    return _resource_list(store, group, parts[-1])


def _api_group(group: str, versions: list[str]) -> JSON:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def _resource_list(store: KubeStore, group: str, version: str) -> JSON:
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    resources: list[JSON] = []
    for (g, v, plural), rt in store.served.items():
        if (g, v) != (group, version):
            continue
        entry = {
            "name": plural,
            "singularName": rt.kind.lower(),
            "namespaced": rt.namespaced,
            "kind": rt.kind,
        }
        resources.append(dict(entry, verbs=verbs))
        if has_status(rt):
            resources.append(dict(entry, name=f"{plural}/status", verbs=["get", "patch", "update"]))
        if rt.key in APPS:
            scale = dict(entry, name=f"{plural}/scale", kind="Scale", group="autoscaling", version="v1")
            resources.append(dict(scale, verbs=["get", "patch", "update"]))
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }
