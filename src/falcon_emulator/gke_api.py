"""container.googleapis.com/v1 REST routes (clusters, node pools, operations) as the REST client sends."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from falcon_emulator.errors import GoogleError, google_not_found, json_response
from falcon_emulator.nodepools import create_node_pool, delete_node_pool, pool_json
from falcon_emulator.state import ClusterState, EmulatorState
from falcon_emulator.util import JSON

log = logging.getLogger(__name__)
router = APIRouter()
_CA = base64.b64encode(
    b"-----BEGIN CERTIFICATE-----\nZmFsY29uLWVtdWxhdG9y\n-----END CERTIFICATE-----\n"
).decode()


def emulator_state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


async def read_json(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise GoogleError(400, f"Invalid JSON payload received. {exc}") from exc


@router.api_route("/v1/{path:path}", methods=["GET", "POST", "PUT", "DELETE"])
async def gke(path: str, request: Request) -> Response:
    state = emulator_state(request)
    try:
        body = await read_json(request) if request.method in ("POST", "PUT") else None
        with state.lock:
            return json_response(_dispatch(state, request, path.split("/"), body))
    except GoogleError as error:
        return error.response()
    except Exception as exc:  # an emulator bug must still look like a Google API error
        log.exception("GKE request failed: %s %s", request.method, request.url.path)
        return GoogleError(500, f"emulator internal error: {exc!r}").response()


def _dispatch(state: EmulatorState, request: Request, parts: list[str], body: Any) -> JSON:
    if len(parts) < 5 or parts[0] != "projects" or parts[2] not in ("locations", "zones"):
        raise GoogleError(404, f"Requested entity was not found: {request.url.path}", "NOT_FOUND")
    project, location, rest, method = parts[1], parts[3], parts[4:], request.method
    host = request.headers.get("host", "127.0.0.1")
    match rest:
        case ["clusters"] if method == "GET":
            clusters = [c for c in state.clusters.values() if _in(c, project, location)]
            return {"clusters": [_cluster_json(state, c, host) for c in clusters]}
        case ["clusters", name] if method == "GET":
            return _cluster_json(state, _cluster(state, project, location, name), host)
        case ["clusters", name, "nodePools"] if method == "GET":
            cluster = _cluster(state, project, location, name)
            return {"nodePools": [pool_json(state, cluster, p) for p in cluster.node_pools.values()]}
        case ["clusters", name, "nodePools"] if method == "POST":
            return create_node_pool(state, _cluster(state, project, location, name), body).to_json()
        case ["clusters", name, "nodePools", pool] if method == "GET":
            cluster = _cluster(state, project, location, name)
            if pool not in cluster.node_pools:
                raise google_not_found(f"{cluster.path}/nodePools/{pool}")
            return pool_json(state, cluster, cluster.node_pools[pool])
        case ["clusters", name, "nodePools", pool] if method == "DELETE":
            return delete_node_pool(state, _cluster(state, project, location, name), pool).to_json()
        case ["operations"] if method == "GET":
            ops = [
                o for o in state.operations.values() if o.project == project and location in ("-", o.location)
            ]
            return {"operations": [o.to_json() for o in ops]}
        case ["operations", name] if method == "GET":
            op = state.operations.get(name)
            if op is None or op.project != project or location not in ("-", op.location):
                raise google_not_found(f"operation {name}")
            return op.to_json()
    raise GoogleError(501, f"Method {method} {request.url.path} is not implemented by the emulator.")


def _in(cluster: ClusterState, project: str, location: str) -> bool:
    return cluster.project == project and location in ("-", cluster.location)


def _cluster(state: EmulatorState, project: str, location: str, name: str) -> ClusterState:
    for cluster in state.clusters.values():
        if _in(cluster, project, location) and cluster.name == name:
            return cluster
    raise google_not_found(f"projects/{project}/locations/{location}/clusters/{name}")


def _cluster_json(state: EmulatorState, cluster: ClusterState, host: str) -> JSON:
    version = state.gke_version(cluster)
    return {
        "name": cluster.name,
        "location": cluster.location,
        "zone": cluster.location,
        "locations": cluster.config.node_zones(),
        "status": "RUNNING",
        "endpoint": f"{host}/k8s/{cluster.project}/{cluster.location}/{cluster.name}",
        "masterAuth": {"clusterCaCertificate": _CA},
        "currentMasterVersion": version,
        "currentNodeVersion": version,
        "initialClusterVersion": version,
        "selfLink": f"https://container.googleapis.com/v1/{cluster.path}",
        "workloadIdentityConfig": {"workloadPool": f"{cluster.project}.svc.id.goog"},
        "addonsConfig": {"gcsFuseCsiDriverConfig": {"enabled": True}},
        "autoscaling": {"autoscalingProfile": "BALANCED"},
        "nodePools": [pool_json(state, cluster, p) for p in cluster.node_pools.values()],
    }
