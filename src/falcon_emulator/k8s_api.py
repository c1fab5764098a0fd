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

from falcon_emulator.admission import admit_pod
from falcon_emulator.errors import json_response, kube_error, kube_response
from falcon_emulator.gke_api import emulator_state
from falcon_emulator.jobs import delete_job
from falcon_emulator.k8s_objects import prepare, stamp_job_selector
from falcon_emulator.k8s_watch import open_watch
from falcon_emulator.pods import delete_pod, fail_lost_pod, remove_pod
from falcon_emulator.selectors import SelectorError, labels_match, parse_field_selector, parse_label_selector
from falcon_emulator.service_accounts import provision_namespace
from falcon_emulator.state import ClusterState, EmulatorState
from falcon_emulator.store import RESOURCES, KubeError, ResourceType
from falcon_emulator.util import JSON, json_patch, merge_patch

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


def parse_target(path: str) -> Target:
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
    rt = RESOURCES.get((group, rest[0])) if rest else None
    if rt is None or rt.version != version or len(rest) > 3 or (namespace is not None and not rt.namespaced):
        raise kube_error(404, f"the server could not find the requested resource (path /{path})")
    name = rest[1] if len(rest) > 1 else None
    return Target(rt, namespace, name, rest[2] if len(rest) > 2 else None)


@router.api_route("/k8s/{project}/{location}/{cluster}/{path:path}", methods=_METHODS)
async def kube(project: str, location: str, cluster: str, path: str, request: Request) -> Response:
    state = emulator_state(request)
    raw = await request.body()
    try:
        with state.lock:
            target_cluster = state.cluster(project, location, cluster)
            if target_cluster is None:
                raise kube_error(
                    404, f"cluster projects/{project}/locations/{location}/clusters/{cluster} not found"
                )
            if path.strip("/") in ("version", "api", "apis"):
                return json_response(_discovery(state, path.strip("/")))
            return _handle(state, target_cluster, parse_target(path), request, raw)
    except KubeError as error:
        return kube_response(error)
    except Exception as exc:  # an emulator bug must still look like an apiserver error
        log.exception("kubernetes request failed: %s %s", request.method, request.url.path)
        return kube_response(kube_error(500, f"emulator internal error: {exc!r}"))


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
    params, method = request.query_params, request.method
    if target.name is None:
        if method == "GET" and params.get("watch") in ("true", "1", "True"):
            return open_watch(state, cluster, target.rt, target.namespace, params)
        if method == "GET":
            return json_response(_list(state, cluster, target, params))
        if method == "POST" and (target.namespace is not None or not target.rt.namespaced):
            return _create(cluster, target, _body(raw), params)
        raise kube_error(405, f"{method} is not supported on this collection")
    obj = cluster.store.require(target.rt.plural, target.namespace or "", target.name)
    if method == "GET" and target.sub == "log" and target.rt.plural == "pods":
        return _pod_log(cluster, obj, params)
    if method == "GET" and target.sub in (None, "status"):
        return json_response(obj)
    if method in ("PATCH", "PUT") and target.sub in (None, "status"):
        body = _body(raw)
        content_type = request.headers.get("content-type", "")
        return json_response(_update(cluster, target, obj, body, content_type, method))
    if method == "DELETE" and target.sub is None:
        return _delete(state, cluster, target.rt, obj, params, _body(raw))
    raise kube_error(405, f"{method} is not supported on {target.rt.plural}/{target.sub}")


def _list(state: EmulatorState, cluster: ClusterState, target: Target, params: QueryParams) -> JSON:
    try:
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"))
    except SelectorError as exc:
        raise kube_error(400, str(exc)) from exc
    items = [
        obj
        for obj in cluster.store.iter(target.rt.plural, target.namespace)
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
    if rt.plural == "jobs":
        stamp_job_selector(obj)
    if rt.plural == "pods":
        admit_pod(cluster, obj)
    if params.get("dryRun"):
        obj.update(kind=rt.kind, apiVersion=rt.api_version)
        return json_response(obj, 201)
    created = _add(cluster, rt, obj)
    if rt.plural == "namespaces":
        provision_namespace(cluster, created["metadata"]["name"])
    return json_response(created, 201)


def _add(cluster: ClusterState, rt: ResourceType, obj: JSON) -> JSON:
    """Store the object, counting Job creations accepted and refused (a name that already exists)."""
    if rt.plural != "jobs":
        return cluster.store.add(rt.plural, obj)
    key = f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
    try:
        created = cluster.store.add(rt.plural, obj)
    except KubeError as error:
        cluster.job_creates_refused += error.code == 409
        raise
    cluster.job_creations[key] += 1
    return created


_IMMUTABLE_META = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "resourceVersion")
_IMMUTABLE_SPEC = {
    "jobs": ("template", "selector", "completionMode"),
    "pods": ("containers", "nodeName", "volumes"),
}


def _update(
    cluster: ClusterState, target: Target, obj: JSON, body: Any, content_type: str, method: str
) -> JSON:
    """PUT or PATCH (main resource or /status); identity metadata and the other half stay untouched."""
    rt = target.rt
    new = (
        _replacement(rt, target.name or "", obj, body)
        if method == "PUT"
        else _patched(obj, body, content_type)
    )
    meta = dict(new.get("metadata") or {})
    for key in _IMMUTABLE_META:
        meta.pop(key, None)
        if key in obj["metadata"]:
            meta[key] = obj["metadata"][key]
    new.update(kind=rt.kind, apiVersion=rt.api_version, metadata=meta)
    if target.sub == "status":
        new = dict(obj, status=new.get("status", {}))
    else:
        _check_immutable(rt, target.name or "", obj, new)
        if "status" in obj:
            new["status"] = obj["status"]
    obj.clear()
    obj.update(new)
    cluster.store.touch(rt.plural, obj)
    return obj


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


def _check_immutable(rt: ResourceType, name: str, old: JSON, new: JSON) -> None:
    for field in _IMMUTABLE_SPEC.get(rt.plural, ()):
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
    if rt.plural == "jobs":
        gone = delete_job(state, cluster, obj, policy or "Orphan")
        return json_response(_success(rt, obj) if gone else obj)
    if rt.plural == "pods":
        delete_pod(state, cluster, obj, grace)
        return json_response(obj)
    if rt.plural == "namespaces":
        return json_response(_delete_namespace(state, cluster, obj))
    if rt.plural == "nodes":
        for pod in list(cluster.store.iter("pods")):
            if pod["spec"].get("nodeName") == obj["metadata"]["name"]:
                fail_lost_pod(cluster, pod, obj["metadata"]["name"])
    cluster.store.remove(rt.plural, obj)
    returns_object = rt.plural in ("services", "serviceaccounts")  # ReturnDeletedObject in their registries
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
    for plural in ("events", "services", "serviceaccounts"):
        for obj in list(cluster.store.iter(plural, name)):
            cluster.store.remove(plural, obj)
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


def _discovery(state: EmulatorState, what: str) -> JSON:
    if what == "version":
        return {
            "major": "1",
            "minor": "33",
            "gitVersion": f"v{state.config.gke_version}",
            "platform": "linux/amd64",
            "goVersion": "go1.24",
        }
    if what == "api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "batch",
                "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"},
            }
        ],
    }
