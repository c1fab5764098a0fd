"""GKE node pools through google-cloud-container (REST transport), mapped to Falcon's errors.

The only module that talks to the GKE API. In emulator mode the same calls go to the local
emulator; nothing here knows the difference. Calls pass ``retry=None``: the client's default
retry repeats a 503 inside one call for 20 s, while Falcon classifies the error at once and the
step that owns the wait retries it (Prefect's retries, or the polling loop).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud import container_v1

from falcon.adapters.errors import google_errors
from falcon.domain.model import Cluster, ProvisioningMode
from falcon.domain.node_pools import NodePoolPlan, PoolStatus
from falcon.domain.topology import Placement

RESERVATION_KEY = "compute.googleapis.com/reservation-name"


@dataclass(frozen=True)
class ClusterEndpoint:
    endpoint: str
    ca_certificate_b64: str


def cluster_path(cluster: Cluster) -> str:
    return f"projects/{cluster.project}/locations/{cluster.location}/clusters/{cluster.name}"


class GkeNodePools:
    def __init__(self, client: container_v1.ClusterManagerClient, timeout: float) -> None:
        self._client = client
        self._timeout = timeout

    def endpoint(self, cluster: Cluster) -> ClusterEndpoint:
        with google_errors(f"get cluster {cluster.name}", "gke", "get_cluster"):
            found = self._client.get_cluster(name=cluster_path(cluster), retry=None, timeout=self._timeout)
        return ClusterEndpoint(found.endpoint, found.master_auth.cluster_ca_certificate)

    def get(self, cluster: Cluster, name: str) -> PoolStatus:
        with google_errors(f"get node pool {name}", "gke", "get_node_pool"):
            pool = self._client.get_node_pool(
                name=f"{cluster_path(cluster)}/nodePools/{name}", retry=None, timeout=self._timeout
            )
        texts = [pool.status_message, *(c.message for c in pool.conditions)]
        detail = "; ".join(dict.fromkeys(t for t in texts if t))  # GKE often repeats one text in both
        return PoolStatus(pool.name, container_v1.NodePool.Status(pool.status).name, detail)

    def list_names(self, cluster: Cluster) -> list[str]:
        with google_errors(f"list node pools of {cluster.name}", "gke", "list_node_pools"):
            found = self._client.list_node_pools(
                parent=cluster_path(cluster), retry=None, timeout=self._timeout
            )
        return [p.name for p in found.node_pools]

    def create(self, cluster: Cluster, plan: NodePoolPlan) -> str:
        """Start creating the pool; returns the operation name. ConflictError if it exists."""
        with google_errors(f"create node pool {plan.name}", "gke", "create_node_pool"):
            op = self._client.create_node_pool(
                parent=cluster_path(cluster), node_pool=to_node_pool(plan), retry=None, timeout=self._timeout
            )
        return str(op.name)

    def delete(self, cluster: Cluster, name: str) -> str:
        """Start deleting the pool; returns the operation name. NotFoundError if it is gone."""
        with google_errors(f"delete node pool {name}", "gke", "delete_node_pool"):
            op = self._client.delete_node_pool(
                name=f"{cluster_path(cluster)}/nodePools/{name}", retry=None, timeout=self._timeout
            )
        return str(op.name)

    def create_error(self, cluster: Cluster, pool_name: str) -> str | None:
        """The error text of the failed create operation of a pool, found by its target.

        For a run that resumed after the create call (the operation name was not kept) and
        finds the pool in ERROR or gone: GKE's reason lives on the operation, not the pool."""
        parent = f"projects/{cluster.project}/locations/{cluster.location}"
        target = f"/clusters/{cluster.name}/nodePools/{pool_name}"
        with google_errors(f"list operations of {cluster.name}", "gke", "list_operations"):
            found = self._client.list_operations(parent=parent, retry=None, timeout=self._timeout)
        errors = [
            error
            for op in found.operations
            if op.operation_type == container_v1.Operation.Type.CREATE_NODE_POOL
            and op.target_link.endswith(target)
            and (error := _operation_error(op))
        ]
        return errors[-1] if errors else None


def _operation_error(op: container_v1.Operation) -> str | None:
    """An operation failed when ``error.code`` is set (google.rpc.Status)."""
    return (op.error.message or f"error code {op.error.code}") if op.error and op.error.code else None


def to_node_pool(plan: NodePoolPlan) -> container_v1.NodePool:
    """The GKE NodePool for a plan: one zone, reservation or flex-start, slice placement.

    No ``consolidationDelay``: GKE documents it only as a recent gcloud update flag for flex-start
    pools; Falcon deletes idle pools itself (``reap_idle_pools``), which covers both modes."""
    shape = plan.shape
    config = container_v1.NodeConfig(
        machine_type=shape.machine_type,
        labels={"managed-by": "falcon"},
        workload_metadata_config=container_v1.WorkloadMetadataConfig(
            mode=container_v1.WorkloadMetadataConfig.Mode.GKE_METADATA
        ),
    )
    if plan.reservation:  # set exactly in reservation mode (NodePoolPlan checks it)
        config.reservation_affinity = container_v1.ReservationAffinity(
            consume_reservation_type=container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION,
            key=RESERVATION_KEY,
            values=[plan.reservation],
        )
    else:
        config.flex_start = True
        config.reservation_affinity = container_v1.ReservationAffinity(
            consume_reservation_type=container_v1.ReservationAffinity.Type.NO_RESERVATION
        )
    pool = container_v1.NodePool(
        name=plan.name,
        config=config,
        locations=[plan.zone],
        initial_node_count=plan.initial_nodes,
        autoscaling=container_v1.NodePoolAutoscaling(
            enabled=True,
            total_min_node_count=0,
            total_max_node_count=shape.nodes,
            location_policy=container_v1.NodePoolAutoscaling.LocationPolicy.ANY,
        ),
        management=container_v1.NodeManagement(
            auto_repair=plan.mode is ProvisioningMode.RESERVATION, auto_upgrade=True
        ),
    )
    if shape.placement is Placement.TPU_TOPOLOGY:
        pool.placement_policy = container_v1.NodePool.PlacementPolicy(
            type_=container_v1.NodePool.PlacementPolicy.Type.COMPACT, tpu_topology=shape.topology
        )
    elif plan.workload_policy:
        pool.placement_policy = container_v1.NodePool.PlacementPolicy(policy_name=plan.workload_policy)
    return pool
