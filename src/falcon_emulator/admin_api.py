"""Admin/test endpoints outside the real API paths: state, faults, watch-history compaction, health."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from falcon_emulator.errors import GoogleError, json_response
from falcon_emulator.gke_api import emulator_state
from falcon_emulator.nodepools import break_node_pool, pool_json, upgrade_control_plane, vanish_node_pool
from falcon_emulator.state import ClusterState, EmulatorState, NodePool, PoolRecord
from falcon_emulator.util import JSON

router = APIRouter()


@router.get("/healthz")
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get("/emulator/state")
async def get_state(request: Request) -> Response:
    state = emulator_state(request)
    with state.lock:
        return json_response(snapshot(state))


@router.get("/emulator/faults")
async def list_faults(request: Request) -> Response:
    state = emulator_state(request)
    with state.lock:
        return json_response({"rules": [r.to_json() for r in state.faults.rules]})


@router.post("/emulator/faults")
async def add_faults(request: Request) -> Response:
    state = emulator_state(request)
    try:
        body: Any = json.loads(await request.body() or b"[]")
        rules = body.get("rules", []) if isinstance(body, dict) else body
        seed = body.get("seed") if isinstance(body, dict) else None
        with state.lock:
            state.faults.add(list(rules), None if seed is None else int(seed))
            return json_response({"rules": [r.to_json() for r in state.faults.rules]})
    except (ValueError, TypeError) as exc:
        return json_response({"error": str(exc)}, 400)


@router.delete("/emulator/faults")
async def clear_faults(request: Request) -> Response:
    state = emulator_state(request)
    with state.lock:
        state.faults.clear()
    return json_response({"rules": []})


@router.post("/emulator/clusters/{project}/{location}/{name}/compact")
async def compact(project: str, location: str, name: str, request: Request) -> Response:
    """Drop the cluster's watch history so that any older resourceVersion answers 410 Expired."""
    state = emulator_state(request)
    with state.lock:
        cluster = state.cluster(project, location, name)
        if cluster is None:
            return json_response({"error": "no such cluster"}, 404)
        cluster.store.compact()
        return json_response({"compactedResourceVersion": str(cluster.store.compacted_rv)})


@router.post("/emulator/clusters/{project}/{location}/{name}/nodePools/{pool}/break")
async def break_pool(project: str, location: str, name: str, pool: str, request: Request) -> Response:
    """Body ``{"message": "..."}``: the pool goes to ERROR with that statusMessage (see break_node_pool)."""
    state = emulator_state(request)
    try:
        body: Any = json.loads(await request.body() or b"{}")
        message = str(body.get("message") or "node pool is in ERROR") if isinstance(body, dict) else ""
        with state.lock:
            cluster = state.cluster(project, location, name)
            if cluster is None:
                return json_response({"error": "no such cluster"}, 404)
            return json_response(pool_json(state, cluster, break_node_pool(state, cluster, pool, message)))
    except GoogleError as error:
        return error.response()
    except ValueError as exc:
        return json_response({"error": str(exc)}, 400)


@router.post("/emulator/clusters/{project}/{location}/{name}/nodePools/{pool}/vanish")
async def vanish_pool(project: str, location: str, name: str, pool: str, request: Request) -> Response:
    """The pool is gone at once, even mid-create (see vanish_node_pool)."""
    state = emulator_state(request)
    try:
        with state.lock:
            cluster = state.cluster(project, location, name)
            if cluster is None:
                return json_response({"error": "no such cluster"}, 404)
            vanish_node_pool(state, cluster, pool)
            return json_response({})
    except GoogleError as error:
        return error.response()


@router.post("/emulator/clusters/{project}/{location}/{name}/upgrade")
async def upgrade(project: str, location: str, name: str, request: Request) -> Response:
    """Body ``{"seconds": N}``: a control-plane upgrade runs that long (see upgrade_control_plane)."""
    state = emulator_state(request)
    try:
        body: Any = json.loads(await request.body() or b"{}")
        seconds = float(body.get("seconds", 1.0)) if isinstance(body, dict) else -1.0
        if not 0 <= seconds <= 3600:
            raise ValueError("seconds must be within [0, 3600]")
    except ValueError as exc:
        return json_response({"error": str(exc)}, 400)
    with state.lock:
        cluster = state.cluster(project, location, name)
        if cluster is None:
            return json_response({"error": "no such cluster"}, 404)
        return json_response(upgrade_control_plane(state, cluster, seconds).to_json())


def snapshot(state: EmulatorState) -> JSON:
    return {
        "clusters": [_cluster(c) for c in state.clusters.values()],
        "reservations": [
            {
                "project": r.project,
                "zone": r.zone,
                "name": r.name,
                "machineType": r.machine_type,
                "count": r.count,
                "inUseCount": r.in_use,
                "status": r.status,
                "shareWith": list(r.share_with),
            }
            for r in state.reservations.values()
        ],
        "resourcePolicies": [p.to_json() for p in state.resource_policies.values()],
        "operations": [op.to_json() for op in state.operations.values() if op.status != "DONE"],
        "resourceVersion": str(state.versions.current),
        "faultsInjected": dict(state.faults.injected),
        "apiRequests": state.faults.requests,
    }


def _records(records: list[PoolRecord]) -> list[JSON]:
    return [{"name": r.name, "time": r.time, "operation": r.operation} for r in records]


def _pool(pool: NodePool) -> JSON:
    return {
        "name": pool.name,
        "status": pool.status,
        "mode": pool.mode,
        "machineType": pool.machine_type,
        "nodes": list(pool.nodes),
        "nodeCount": len(pool.nodes),
        "locations": list(pool.locations),
        "topology": pool.topology,
        "reservation": pool.taken[0][0].name if pool.taken else None,
        "scaleUpPending": pool.scale_up_at is not None,
    }


def _cluster(cluster: ClusterState) -> JSON:
    objects = {plural: len(items) for plural, items in cluster.store.objects.items()}
    return {
        "project": cluster.project,
        "location": cluster.location,
        "name": cluster.name,
        "k8sPath": f"/k8s/{cluster.project}/{cluster.location}/{cluster.name}",
        "nodePools": [_pool(p) for p in cluster.node_pools.values()],
        "counters": {
            "nodePoolsCreated": len(cluster.created),
            "nodePoolsDeleted": len(cluster.deleted),
            "created": _records(cluster.created),
            "deleted": _records(cluster.deleted),
            "jobsCreated": sum(cluster.job_creations.values()),
            "jobCreatesRefused": cluster.job_creates_refused,
            "jobsCreatedMoreThanOnce": sorted(k for k, n in cluster.job_creations.items() if n > 1),
            "jobsRunMoreThanOnce": sorted(k for k, uids in cluster.job_runs.items() if len(uids) > 1),
        },
        "objects": objects,
    }
