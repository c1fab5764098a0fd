"""GKE node-pool lifecycle: create (validated by GKE's documented rules), delete, operations, reservation
capacity, nodes appearing and leaving.

Every rule below cites the page it comes from; the message texts are modelled on GKE's, not copied from it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from google.cloud import container_v1

from falcon_emulator.errors import GoogleError, google_not_found
from falcon_emulator.nodes import build_node, new_node_name
from falcon_emulator.pods import fail_lost_pod
from falcon_emulator.state import ClusterState, EmulatorState, NodePool, Operation, PoolRecord, Reservation
from falcon_emulator.tpu_catalog import (
    FLEX_START_MIN_VERSION,
    TpuMachineType,
    is_known_machine_type,
    offering_zones,
    tpu_machine,
    version_at_least,
)
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


def _check_room_for_operation(state: EmulatorState, cluster: ClusterState, pool: str) -> None:
    """Refuse a node-pool operation the way GKE does while others run on the cluster.

    GKE documents one operation per node pool at a time (its troubleshooting page on concurrent
    operations; Terraform's provider locks per node pool since magic-modules#6748): operations on
    different pools run side by side, one on the same pool is refused, and past the cluster's quota
    GKE answers 429 ("hits the concurrent operations quota 5"). With a quota of one
    (``nodePoolOperationsPerCluster: 1``, the rule the reference's 400 shows) any running operation
    refuses it. A cluster-level operation (a control-plane upgrade) refuses every one, with the
    400 GKE gave rancher/gke-operator#509 ("Cluster is running incompatible operation ...")."""
    active = state.active_operations(cluster)
    for op in active:
        if not op.pool:
            message = f"Cluster is running incompatible operation {op.name}."
            raise GoogleError(400, message, "FAILED_PRECONDITION")
    limit = state.config.node_pool_operations_per_cluster
    blocking = active if limit == 1 else [op for op in active if op.pool == pool]
    if blocking:
        op = blocking[0]
        raise GoogleError(
            400,
            f"Operation {op.name} is currently {op.verb} a node pool for cluster {cluster.name}. "
            "Please wait and try again once it is done.",
            "FAILED_PRECONDITION",
        )
    if len(active) >= limit:
        raise GoogleError(
            429,
            f'Too many operations: cluster "{cluster.name}" hits the concurrent operations quota {limit}, '
            "please try again later.",
            "RESOURCE_EXHAUSTED",
        )


def upgrade_control_plane(state: EmulatorState, cluster: ClusterState, seconds: float) -> Operation:
    """A control-plane upgrade, as GKE starts one in a maintenance window: a cluster-level operation
    that holds every node-pool operation off for ``seconds``."""
    return _new_operation(state, cluster, "", "UPGRADE_MASTER", seconds)


def create_node_pool(state: EmulatorState, cluster: ClusterState, body: Any) -> Operation:
    raw = body.get("nodePool") if isinstance(body, dict) else None
    spec = normalize_node_pool(raw)
    name = spec.get("name", "")
    if not name:
        raise GoogleError(400, "Node pool name must be specified.")
    if name in cluster.node_pools:
        raise GoogleError(409, f"Already exists: {cluster.path}/nodePools/{name}.")
    pool = validated_pool(state, cluster, spec)
    _check_room_for_operation(state, cluster, name)
    cluster.node_pools[name] = pool
    op = _new_operation(state, cluster, name, "CREATE_NODE_POOL", state.config.node_pool_provision_seconds)
    cluster.created.append(PoolRecord(name, op.start, op.name))
    return op


def validated_pool(state: EmulatorState, cluster: ClusterState, spec: JSON) -> NodePool:
    """The pool GKE would create from this spec, or 400 INVALID_ARGUMENT naming the first rule it breaks."""
    pool = NodePool(spec["name"], spec, _pool_locations(cluster, spec))
    machine = _check_machine_type(state, pool)
    if machine is not None:
        _check_versions(state, cluster, pool, machine)
    _check_counts(pool)
    pool.topology = _check_slice(state, cluster, pool, machine)
    _check_reservation(state, cluster, pool)
    return pool


def _invalid(message: str) -> GoogleError:
    return GoogleError(400, message, "INVALID_ARGUMENT")


def _pool_locations(cluster: ClusterState, spec: JSON) -> list[str]:
    """NodePool.locations: "If this value is unspecified during node pool creation, the Cluster.Locations
    value will be used" (reference/rest/v1/projects.locations.clusters.nodePools#NodePool.FIELDS.locations).
    A zonal cluster's only location is its zone; a regional cluster's are its node zones (config zones)."""
    cluster_zones = cluster.config.node_zones()
    locations = [str(z) for z in spec.get("locations") or cluster_zones]
    for zone in locations:
        if zone not in cluster_zones:
            raise _invalid(
                f"Node pool location {zone} is not one of the locations of cluster {cluster.name} "
                f"({', '.join(cluster_zones)})."
            )
    if len(set(locations)) != len(locations):
        raise _invalid(f"Node pool locations contain duplicates: {', '.join(locations)}.")
    return locations


def _check_machine_type(state: EmulatorState, pool: NodePool) -> TpuMachineType | None:
    """TPU machine types exist only in the zones of https://cloud.google.com/tpu/docs/regions-zones (or the
    config's tpuZones)."""
    name = pool.machine_type
    if not is_known_machine_type(name):
        raise _invalid(f"Invalid machine type {name}: it does not exist.")
    machine = tpu_machine(name)
    if machine is None:
        return None
    offered = offering_zones(machine, state.config.tpu_zones)
    missing = [zone for zone in pool.locations if zone not in offered]
    if missing:
        raise _invalid(
            f"Machine type {name} is not available in zone(s) {', '.join(missing)} of node pool {pool.name} "
            f"(it is offered in {', '.join(offered) or 'no configured zone'}). Set the node pool locations "
            "to zones that offer it."
        )
    return machine


def _check_versions(
    state: EmulatorState, cluster: ClusterState, pool: NodePool, machine: TpuMachineType
) -> None:
    """TPU7x needs 1.34.0-gke.2201000 (concepts/tpu-ironwood), flex-start TPUs 1.33.0-gke.1712000
    (concepts/dws); versions compare numerically, so gke.999000 is older than gke.1712000."""
    version = state.gke_version(cluster)
    if machine.min_version and not version_at_least(version, machine.min_version):
        raise _invalid(
            f"Machine type {machine.name} requires GKE version {machine.min_version} or later; "
            f"cluster {cluster.name} runs {version}."
        )
    if pool.flex_start and not version_at_least(version, FLEX_START_MIN_VERSION):
        raise _invalid(
            f"Flex-start TPU node pools require GKE version {FLEX_START_MIN_VERSION} or later; "
            f"cluster {cluster.name} runs {version}."
        )


def _check_counts(pool: NodePool) -> None:
    """NodePoolAutoscaling: min/maxNodeCount are "for one location", totalMin/totalMaxNodeCount for the whole
    pool, and "The total_*_node_count fields are mutually exclusive with the *_node_count fields"
    (https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/NodePool#NodePoolAutoscaling)."""
    autoscaling = pool.spec.get("autoscaling", {})
    per_zone = [int(autoscaling.get(k, 0)) for k in ("minNodeCount", "maxNodeCount")]
    total = [int(autoscaling.get(k, 0)) for k in ("totalMinNodeCount", "totalMaxNodeCount")]
    if any(per_zone) and any(total):
        raise _invalid("Autoscaling total node counts and per-location node counts are mutually exclusive.")
    if int(pool.spec.get("initialNodeCount", 0)) < 0 or min(per_zone + total) < 0:
        raise _invalid("Node counts must be greater than or equal to 0.")
    for low, high in (per_zone, total):
        if high and low > high:
            raise _invalid(f"Autoscaling minimum node count {low} is greater than its maximum {high}.")


def _check_slice(
    state: EmulatorState, cluster: ClusterState, pool: NodePool, machine: TpuMachineType | None
) -> str | None:
    """The slice topology: tpuTopology or the workload policy's acceleratorTopology, never from a name."""
    placement: JSON = pool.spec.get("placementPolicy", {})
    policy_topology = (
        _policy_topology(state, cluster, pool, placement) if placement.get("policyName") else None
    )
    if machine is None:
        if placement.get("tpuTopology"):
            raise _invalid(
                f"tpuTopology is set on node pool {pool.name}, but {pool.machine_type} is not a TPU."
            )
        return None
    if placement.get("tpuTopology") and machine.generation == "tpu7x":
        # TPU7x multi-host slices take a workload policy, not COMPACT/tpuTopology (concepts/tpu-ironwood).
        raise _invalid(
            f"Machine type {machine.name} does not support tpuTopology: create a workload policy "
            "(HIGH_THROUGHPUT, acceleratorTopology) and name it in placementPolicy.policyName."
        )
    topology = policy_topology or placement.get("tpuTopology")
    if not topology:
        return None  # a single-host slice: its topology is the machine type's own
    vms = machine.vms(str(topology))
    if vms is None:
        raise _invalid(f"Topology {topology} is not supported by machine type {machine.name}.")
    if vms == 1:
        # Single-host slices are created without a topology (xpk PR #822; how-to/tpus single-host steps).
        raise _invalid(
            f"Topology {topology} on {machine.name} is a single-host TPU slice: create it without "
            "placementPolicy.tpuTopology or a placement policy."
        )
    _check_multi_host(pool, placement, vms, str(topology))
    return str(topology)


def _policy_topology(state: EmulatorState, cluster: ClusterState, pool: NodePool, placement: JSON) -> str:
    """PlacementPolicy.policyName: "The resource policy must be in the same project and region as the node
    pool. If not found, InvalidArgument error is returned." (container_v1 NodePool.PlacementPolicy). A
    TPU7x workload policy is HIGH_THROUGHPUT with an acceleratorTopology, without COMPACT
    (concepts/tpu-ironwood)."""
    name = str(placement["policyName"])
    if placement.get("type") == "COMPACT" or placement.get("tpuTopology"):
        raise _invalid("placementPolicy.policyName cannot be combined with COMPACT placement or tpuTopology.")
    region = pool.locations[0].rsplit("-", 1)[0]
    path = f"projects/{cluster.project}/regions/{region}/resourcePolicies/{name}"
    policy = state.resource_policies.get((cluster.project, region, name))
    if policy is None:
        raise _invalid(f"Resource policy {path} was not found.")
    workload = policy.workload_policy
    if workload.get("type") != "HIGH_THROUGHPUT" or not workload.get("acceleratorTopology"):
        raise _invalid(
            f"Resource policy {path} is not a HIGH_THROUGHPUT workload policy with an accelerator topology."
        )
    return str(workload["acceleratorTopology"])


def _check_multi_host(pool: NodePool, placement: JSON, vms: int, topology: str) -> None:
    """Multi-host slices (https://cloud.google.com/kubernetes-engine/docs/how-to/tpus, reference section 2):
    COMPACT placement with tpuTopology (unless a workload policy places them), a single node zone (the
    slice's VMs are interconnected), a node count of 0 or exactly the slice's VMs, and that many as the
    autoscaling maximum."""
    if not placement.get("policyName") and placement.get("type") != "COMPACT":
        raise _invalid(f"A multi-host TPU slice (topology {topology}) needs placementPolicy type COMPACT.")
    if len(pool.locations) != 1:
        raise _invalid(
            f"A multi-host TPU slice node pool must be in exactly one zone; {pool.name} would be in "
            f"{', '.join(pool.locations)}. Set the node pool locations to one zone."
        )
    initial = int(pool.spec.get("initialNodeCount", 0))
    if initial not in (0, vms):
        raise _invalid(
            f"initialNodeCount {initial} does not match TPU topology {topology} on {pool.machine_type}: "
            f"the slice has {vms} nodes (or use 0)."
        )
    autoscaling = pool.spec.get("autoscaling", {})
    maximum = int(autoscaling.get("totalMaxNodeCount") or autoscaling.get("maxNodeCount") or 0)
    if autoscaling.get("enabled") and maximum != vms:
        raise _invalid(
            f"Autoscaling maximum {maximum} does not match TPU topology {topology} on {pool.machine_type}: "
            f"it must be the slice's {vms} nodes."
        )


def _check_reservation(state: EmulatorState, cluster: ClusterState, pool: NodePool) -> None:
    """SPECIFIC_RESERVATION: NAME in the cluster's project or projects/OWNER/reservations/NAME shared with it
    (https://cloud.google.com/compute/docs/instances/reservations-shared); a reservation is zonal, so it must
    exist in each zone of the pool, READY, for the pool's machine type
    (https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations)."""
    ref = pool.reservation_ref
    if ref is None:
        return
    owner, name = ref[0] or cluster.project, ref[1]
    for zone in pool.locations:
        path = f"projects/{owner}/zones/{zone}/reservations/{name}"
        _check_zone_reservation(state.reservations.get((owner, zone, name)), path, cluster, pool)


def _check_zone_reservation(
    reservation: Reservation | None, path: str, cluster: ClusterState, pool: NodePool
) -> None:
    if reservation is None:
        raise _invalid(
            f"Reservation {path} was not found: a specific reservation must be in the node pool's zone."
        )
    if not reservation.shared_with(cluster.project):
        raise _invalid(f"Reservation {path} is not shared with project {cluster.project}.")
    if reservation.status != "READY":
        raise _invalid(f"Reservation {path} is not ready (status {reservation.status}).")
    if reservation.machine_type != pool.machine_type:
        raise _invalid(
            f"Reservation {path} is for machine type {reservation.machine_type}; node pool {pool.name} "
            f"uses {pool.machine_type}."
        )


def delete_node_pool(state: EmulatorState, cluster: ClusterState, name: str) -> Operation:
    pool = cluster.node_pools.get(name)
    if pool is None:
        raise google_not_found(f"{cluster.path}/nodePools/{name}")
    _check_room_for_operation(state, cluster, name)
    pool.status, pool.scale_up_at = "STOPPING", None
    op = _new_operation(state, cluster, name, "DELETE_NODE_POOL", state.config.delete_seconds)
    cluster.deleted.append(PoolRecord(name, op.start, op.name))
    return op


def break_node_pool(state: EmulatorState, cluster: ClusterState, name: str, message: str) -> NodePool:
    """Put an existing pool in ERROR with ``message``, as GKE does on a stockout or a failed repair.

    A create still running ends at once with that error on its operation (where GKE reports it),
    so the pool never turns RUNNING afterwards."""
    pool = cluster.node_pools.get(name)
    if pool is None:
        raise google_not_found(f"{cluster.path}/nodePools/{name}")
    for op in state.active_operations(cluster):
        if op.op_type == "CREATE_NODE_POOL" and op.pool == name:
            op.error = {"code": 2, "message": message}  # google.rpc.Code UNKNOWN
            op.status, op.end = "DONE", rfc3339_micro()
    pool.status, pool.status_message, pool.scale_up_at = "ERROR", message, None
    pool.conditions = [{"code": "UNKNOWN", "message": message, "canonicalCode": "UNKNOWN"}]
    return pool


def vanish_node_pool(state: EmulatorState, cluster: ClusterState, name: str) -> None:
    """Take a pool away at once, nodes and all, ending its running operations: what a client sees
    of a pool that went other than by its own delete, which GKE refuses while a create runs."""
    pool = cluster.node_pools.get(name)
    if pool is None:
        raise google_not_found(f"{cluster.path}/nodePools/{name}")
    for op in state.active_operations(cluster):
        if op.pool == name:
            op.status, op.end = "DONE", rfc3339_micro()
    _finish_delete(state, cluster, pool)


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
    counts = pool.zone_counts()
    error = _take_reservation(state, cluster, pool, counts)
    if error is not None:
        op.error = {"code": 8, "message": error}
        pool.status, pool.status_message = "ERROR", error
        pool.conditions = [{"code": "GCE_STOCKOUT", "message": error, "canonicalCode": "RESOURCE_EXHAUSTED"}]
        return
    for zone, count in counts.items():
        add_nodes(state, cluster, pool, zone, count)
    pool.status = "RUNNING"


def _take_reservation(
    state: EmulatorState, cluster: ClusterState, pool: NodePool, counts: dict[str, int]
) -> str | None:
    """Hold each zone's nodes on that zone's reservation, or return the GCE_STOCKOUT text if one is short."""
    ref = pool.reservation_ref
    if ref is None:
        return None
    owner = ref[0] or cluster.project  # validated in every zone of the pool at create
    wanted = [(state.reservations[(owner, zone, ref[1])], counts[zone]) for zone in pool.locations]
    for reservation, needed in wanted:
        if reservation.free < needed:
            path = f"projects/{reservation.project}/reservations/{reservation.name}"
            return (
                f"GCE_STOCKOUT: reservation {path} does not have enough capacity for node pool {pool.name}: "
                f"{needed} nodes needed, {reservation.free} available ({reservation.count} reserved, "
                f"{reservation.in_use} in use) in zone {reservation.zone}."
            )
    for reservation, needed in wanted:
        reservation.in_use += needed
    pool.taken = wanted
    return None


def add_nodes(state: EmulatorState, cluster: ClusterState, pool: NodePool, zone: str, count: int) -> None:
    version = state.gke_version(cluster)
    for _ in range(count):
        name = new_node_name(cluster, pool)
        cluster.store.add("nodes", build_node(cluster, pool, name, zone, version))
        pool.nodes.append(name)


def add_standing_pools(state: EmulatorState, cluster: ClusterState) -> None:
    """The node pools the config gives the cluster from the start, RUNNING with their nodes."""
    for name, conf in cluster.config.node_pools.items():
        zones = cluster.config.node_zones()[:1]
        spec: JSON = {
            "name": name,
            "config": {"machineType": conf.machine_type},
            "initialNodeCount": conf.node_count,
            "locations": zones,
        }
        pool = NodePool(name, spec, zones, status="RUNNING")
        cluster.node_pools[name] = pool
        add_nodes(state, cluster, pool, zones[0], conf.node_count)


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
    for reservation, held in pool.taken:
        reservation.in_use = max(0, reservation.in_use - held)
    pool.nodes, pool.taken = [], []


def _finish_delete(state: EmulatorState, cluster: ClusterState, pool: NodePool) -> None:
    remove_nodes(cluster, pool)
    cluster.node_pools.pop(pool.name, None)


def pool_json(state: EmulatorState, cluster: ClusterState, pool: NodePool) -> JSON:
    body = dict(pool.spec)
    base = f"https://container.googleapis.com/v1/{cluster.path}/nodePools/{pool.name}"
    body.update(
        status=pool.status,
        selfLink=base,
        version=state.gke_version(cluster),
        locations=pool.locations,
        podIpv4CidrSize=24,
        etag=random_hex(8),
        instanceGroupUrls=[
            f"https://www.googleapis.com/compute/v1/projects/{cluster.project}/zones/{z}/instanceGroupManagers/"
            f"gke-{cluster.name}-{pool.name}-grp"
            for z in pool.locations
        ],
    )
    if pool.status_message:
        body["statusMessage"] = pool.status_message
    if pool.conditions:
        body["conditions"] = pool.conditions
    return body
