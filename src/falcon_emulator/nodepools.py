"""GKE node-pool lifecycle: create/delete operations, reservation capacity, nodes appearing and leaving."""

from __future__ import annotations

import json
import time
from typing import Any

from google.cloud import container_v1

from falcon_emulator.errors import GoogleError, google_not_found
from falcon_emulator.nodes import build_node, new_node_name
from falcon_emulator.pods import fail_lost_pod
from falcon_emulator.state import ClusterState, EmulatorState, NodePool, Operation, PoolRecord
from falcon_emulator.util import JSON, random_hex, rfc3339_micro


def normalize_node_pool(raw: Any) -> JSON:
    """Parse like the real API (int or string enums, unknown fields ignored) and return string enums."""
    if not isinstance(raw, dict):
        raise GoogleError(400, "Invalid JSON payload: nodePool must be an object.")
    try:
        message = container_v1.NodePool.from_json(json.dumps(raw), ignore_unknown_fields=True)
    except Exception as exc:  # json_format.ParseError and friends
        raise GoogleError(400, f"Invalid JSON payload received. {exc}") from exc
    result: JSON = container_v1.NodePool.to_dict(
        message,
        use_integers_for_enums=False,
        preserving_proto_field_name=False,
        always_print_fields_with_no_presence=False,
    )
    return result


def _new_operation(
    state: EmulatorState, cluster: ClusterState, pool: str, kind: str, seconds: float
) -> Operation:
    name = f"operation-{int(time.time() * 1000)}-{random_hex(8)}"
    op = Operation(name, cluster.project, cluster.location, cluster.name, pool, kind, state.now() + seconds)
    state.operations[name] = op
    return op


def _check_no_running_operation(state: EmulatorState, cluster: ClusterState) -> None:
    active = state.active_operation(cluster)
    if active is not None and state.config.reject_concurrent_operations:
        raise GoogleError(
            400,
            f"Operation {active.name} is currently {active.verb} a node pool for cluster {cluster.name}. "
            "Please wait and try again once it is done.",
            "FAILED_PRECONDITION",
        )


def create_node_pool(state: EmulatorState, cluster: ClusterState, body: Any) -> Operation:
    raw = body.get("nodePool") if isinstance(body, dict) else None
    spec = normalize_node_pool(raw)
    name = spec.get("name", "")
    if not name:
        raise GoogleError(400, "Node pool name must be specified.")
    if name in cluster.node_pools:
        raise GoogleError(409, f"Already exists: {cluster.path}/nodePools/{name}.")
    _check_no_running_operation(state, cluster)
    cluster.node_pools[name] = NodePool(name, spec)
    op = _new_operation(state, cluster, name, "CREATE_NODE_POOL", state.config.node_pool_provision_seconds)
    cluster.created.append(PoolRecord(name, op.start, op.name))
    return op


def delete_node_pool(state: EmulatorState, cluster: ClusterState, name: str) -> Operation:
    pool = cluster.node_pools.get(name)
    if pool is None:
        raise google_not_found(f"{cluster.path}/nodePools/{name}")
    _check_no_running_operation(state, cluster)
    pool.status, pool.scale_up_at = "STOPPING", None
    op = _new_operation(state, cluster, name, "DELETE_NODE_POOL", state.config.delete_seconds)
    cluster.deleted.append(PoolRecord(name, op.start, op.name))
    return op


def advance_operations(state: EmulatorState, now: float) -> None:
    for op in list(state.operations.values()):
        if op.status == "DONE" or now < op.done_at:
            continue
        cluster = state.cluster(op.project, op.location, op.cluster)
        pool = cluster.node_pools.get(op.pool) if cluster else None
        if cluster is not None and pool is not None:
            if op.op_type == "CREATE_NODE_POOL":
                _finish_create(state, cluster, pool, op, now)
            else:
                _finish_delete(state, cluster, pool)
        op.status, op.end = "DONE", rfc3339_micro()


def _finish_create(
    state: EmulatorState, cluster: ClusterState, pool: NodePool, op: Operation, now: float
) -> None:
    if pool.flex_start and pool.reservation_ref is None:
        pool.status = "RUNNING"
        if pool.spec.get("initialNodeCount") and cluster.config.flex_start.available:
            pool.scale_up_at = now + cluster.config.flex_start.delay_seconds
        return
    needed = pool.target_nodes
    error = _take_reservation(state, cluster, pool, needed)
    if error is not None:
        op.error = error
        pool.status, pool.status_message = "ERROR", error["message"]
        pool.conditions = [
            {
                "code": "GCE_STOCKOUT" if error["code"] == 8 else "UNKNOWN",
                "message": error["message"],
                "canonicalCode": _canonical(error["code"]),
            }
        ]
        return
    add_nodes(cluster, pool, needed)
    pool.status = "RUNNING"


def _canonical(code: int) -> str:
    return {8: "RESOURCE_EXHAUSTED", 5: "NOT_FOUND", 9: "FAILED_PRECONDITION"}.get(code, "UNKNOWN")


def _take_reservation(
    state: EmulatorState, cluster: ClusterState, pool: NodePool, needed: int
) -> JSON | None:
    ref = pool.reservation_ref
    if ref is None:
        return None
    project = ref[0] or cluster.project
    zones = pool.spec.get("locations") or cluster.config.node_zones()
    reservation = state.find_reservation(project, ref[1], list(zones))
    path = f"projects/{project}/reservations/{ref[1]}"
    if reservation is None:
        return {"code": 5, "message": f"Reservation {path} was not found for node pool {pool.name}."}
    if reservation.machine_type != pool.machine_type:
        return {
            "code": 9,
            "message": f"Reservation {path} is for machine type {reservation.machine_type}, "
            f"node pool {pool.name} asks for {pool.machine_type}.",
        }
    if reservation.free < needed:
        return {
            "code": 8,
            "message": (
                f"GCE_STOCKOUT: reservation {path} does not have enough capacity for node pool {pool.name}: "
                f"{needed} nodes needed, {reservation.free} available ({reservation.count} reserved, "
                f"{reservation.in_use} in use) in zone {reservation.zone}."
            ),
        }
    reservation.in_use += needed
    pool.reservation = reservation
    return None


def add_nodes(cluster: ClusterState, pool: NodePool, count: int) -> None:
    for _ in range(count):
        name = new_node_name(cluster, pool)
        cluster.store.add("nodes", build_node(cluster, pool, name))
        pool.nodes.append(name)


def remove_nodes(cluster: ClusterState, pool: NodePool) -> None:
    doomed = set(pool.nodes)
    for pod in list(cluster.store.iter("pods")):
        node = pod["spec"].get("nodeName")
        if node in doomed:
            fail_lost_pod(cluster, pod, node)
    for name in pool.nodes:
        node_obj = cluster.store.get("nodes", "", name)
        if node_obj is not None:
            cluster.store.remove("nodes", node_obj)
    if pool.reservation is not None:
        pool.reservation.in_use = max(0, pool.reservation.in_use - len(pool.nodes))
    pool.nodes = []


def _finish_delete(state: EmulatorState, cluster: ClusterState, pool: NodePool) -> None:
    remove_nodes(cluster, pool)
    pool.reservation = None
    cluster.node_pools.pop(pool.name, None)


def pool_json(state: EmulatorState, cluster: ClusterState, pool: NodePool) -> JSON:
    body = dict(pool.spec)
    base = f"https://container.googleapis.com/v1/{cluster.path}/nodePools/{pool.name}"
    zones = pool.spec.get("locations") or cluster.config.node_zones()
    body.update(
        status=pool.status,
        selfLink=base,
        version=state.config.gke_version,
        locations=zones,
        podIpv4CidrSize=24,
        etag=random_hex(8),
        instanceGroupUrls=[
            f"https://www.googleapis.com/compute/v1/projects/{cluster.project}/zones/{z}/instanceGroupManagers/"
            f"gke-{cluster.name}-{pool.name}-grp"
            for z in zones
        ],
    )
    if pool.status_message:
        body["statusMessage"] = pool.status_message
    if pool.conditions:
        body["conditions"] = pool.conditions
    return body
