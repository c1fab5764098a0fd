"""Every node-pool request Falcon can produce is one GKE accepts; a mismatched one is refused.

For each TPU type and topology of Falcon's table (shared/reference/gke-compute-k8s-api.md §2),
in both modes (reservation, flex-start), the plan is serialised by ``falcon.adapters.gke`` with
the real ``container_v1`` types and created through the official client against the emulator,
which judges it by GKE's documented rules (machine type offered in the zone, tpuTopology
consistent with machine type and node count, workload policy for TPU7x, reservation affinity).
The create operation must end without an error and the pool must be RUNNING.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud.container_v1 import NodePool, Operation

from falcon.adapters.credentials import gke_client
from falcon.adapters.gke import cluster_path, to_node_pool
from falcon.bootstrap import Gateways
from falcon.domain.errors import PermanentError
from falcon.domain.model import Cluster, ClusterStatus, ProvisioningMode
from falcon.domain.node_pools import NodePoolPlan
from falcon.domain.topology import GENERATIONS, SliceShape, resolve_shape
from falcon.settings import Settings
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer

ZONE = "us-east5-b"
MACHINE_TYPES = [
    f"{g.machine_prefix}-{chips}t"
    for g in GENERATIONS.values()
    for chips in (1, 4)
    if chips == 4 or g.single_chip_vm
]
CONFIG = {
    "nodePoolProvisionSeconds": 0.05,
    "tickSeconds": 0.02,
    # The documented zones differ per generation; one zone offering them all keeps one cluster.
    "tpuZones": {machine: [ZONE] for machine in MACHINE_TYPES},
    "projects": {
        "proj-c": {
            "reservations": {
                f"res-{machine}": {"zone": ZONE, "machineType": machine, "count": 4096}
                for machine in MACHINE_TYPES
            },
            "clusters": {"edge-c": {"location": "us-east5", "zones": ["us-east5-a", ZONE, "us-east5-c"]}},
        }
    },
}
CLUSTER = Cluster("c-c", "edge-c", "proj-c", "us-east5", "v6e", "b", None, ClusterStatus.ACTIVE, "ns", ZONE)

TABLE = {
    "v5e": ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"],
    "v6e": ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"],
    "v5p": ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "16x20x28"],
    "v7x": ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "16x24x24"],
}
CASES = [
    pytest.param(tpu_type, topology, mode, id=f"{tpu_type} {topology} {mode.value}")
    for tpu_type, topologies in TABLE.items()
    for topology in topologies
    for mode in ProvisioningMode
]


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    data_dir: Path = tmp_path_factory.mktemp("emu")
    with EmulatorServer(EmulatorConfig.from_dict(CONFIG), data_dir) as server:
        yield Gateways(Settings(emulator_url=server.url, poll_seconds=0.05))


def plan_for(shape: SliceShape, mode: ProvisioningMode) -> NodePoolPlan:
    reservation = f"res-{shape.machine_type}" if mode is ProvisioningMode.RESERVATION else None
    name = f"falcon-{shape.tpu_type}-{shape.topology}-{mode.value[:4]}".replace("_", "")
    return NodePoolPlan(name, shape, mode, reservation, ZONE)


def wait_done(gateways: Gateways, operation: str) -> str | None:
    """Poll the operation to DONE with the official client; its error text, or None."""
    client = gke_client(gateways.settings, AnonymousCredentials())  # type: ignore[no-untyped-call]
    path = f"projects/{CLUSTER.project}/locations/{CLUSTER.location}/operations/{operation}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = client.get_operation(name=path)
        if found.status == Operation.Status.DONE:
            return (found.error.message or str(found.error.code)) if found.error.code else None
        time.sleep(0.05)
    raise AssertionError(f"operation {operation} never finished")


@pytest.mark.parametrize(("tpu_type", "topology", "mode"), CASES)
def test_every_pool_falcon_can_request_is_accepted(
    gateways: Gateways, tpu_type: str, topology: str, mode: ProvisioningMode
) -> None:
    shape = resolve_shape(tpu_type, topology)
    plan = plan_for(shape, mode)
    if plan.workload_policy:
        gateways.workload_policies.ensure(CLUSTER.project, CLUSTER.region, plan.workload_policy, topology)
    assert wait_done(gateways, gateways.node_pools.create(CLUSTER, plan)) is None
    try:
        assert gateways.node_pools.get(CLUSTER, plan.name).status == "RUNNING"
    finally:
        assert wait_done(gateways, gateways.node_pools.delete(CLUSTER, plan.name)) is None


def test_the_workload_policy_is_got_or_created_idempotently(gateways: Gateways) -> None:
    for _ in range(2):
        gateways.workload_policies.ensure(CLUSTER.project, CLUSTER.region, "falcon-tpu7x-4x4x4", "4x4x4")


def test_a_same_named_workload_policy_of_another_shape_is_refused(gateways: Gateways) -> None:
    gateways.workload_policies.ensure(CLUSTER.project, CLUSTER.region, "falcon-tpu7x-2x4x4", "2x4x4")
    with pytest.raises(PermanentError, match="exists as HIGH_THROUGHPUT 2x4x4, not HIGH_THROUGHPUT 4x4x4"):
        gateways.workload_policies.ensure(CLUSTER.project, CLUSTER.region, "falcon-tpu7x-2x4x4", "4x4x4")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: setattr(p, "initial_node_count", 3), id="wrong node count"),
        pytest.param(lambda p: setattr(p.placement_policy, "tpu_topology", "4x8"), id="wrong topology"),
        pytest.param(lambda p: p.locations.append("us-east5-c"), id="slice over two zones"),
    ],
)
def test_a_mismatched_pool_request_is_refused(gateways: Gateways, change: Callable[[NodePool], None]) -> None:
    """The same serialisation with one field wrong: GKE's 400, not a pool."""
    pool = to_node_pool(plan_for(resolve_shape("v6e", "4x4"), ProvisioningMode.RESERVATION))
    pool.name = "falcon-mismatched"
    change(pool)
    client = gke_client(gateways.settings, AnonymousCredentials())  # type: ignore[no-untyped-call]
    with pytest.raises(gexc.BadRequest):
        client.create_node_pool(parent=cluster_path(CLUSTER), node_pool=pool)
