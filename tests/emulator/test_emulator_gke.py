"""GKE container/v1 conformance through the official REST client."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from emu_helpers import (
    CENTRAL,
    LOCATION,
    PROJECT,
    TEST_CONFIG,
    Kube,
    admin,
    cluster_name,
    create_pool,
    tpu_pool,
    wait_operation,
)
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1, container_v1

from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer

Status = container_v1.Operation.Status
PoolStatus = container_v1.NodePool.Status


def test_get_cluster_is_running_with_k8s_endpoint_on_this_port_and_base64_ca(
    gke: container_v1.ClusterManagerClient, emulator: EmulatorServer
) -> None:
    cluster = gke.get_cluster(name=cluster_name("pools"), timeout=5)
    assert cluster.status == container_v1.Cluster.Status.RUNNING
    assert cluster.endpoint == f"{emulator.url.removeprefix('http://')}/k8s/{PROJECT}/{LOCATION}/pools"
    assert base64.b64decode(cluster.master_auth.cluster_ca_certificate).startswith(b"-----BEGIN CERTIFICATE")


def test_list_clusters_returns_the_configured_clusters_of_the_location(
    gke: container_v1.ClusterManagerClient,
) -> None:
    names = {c.name for c in gke.list_clusters(parent=f"projects/{PROJECT}/locations/{LOCATION}").clusters}
    assert {"pools", "work", "flex", "noflex"} <= names
    other = gke.list_clusters(parent="projects/proj-b/locations/-").clusters
    assert [c.name for c in other] == ["edge-b"]


def test_node_pool_create_provisions_then_runs_and_delete_stops_then_removes_it(
    gke: container_v1.ClusterManagerClient, kube_for: Callable[[str], Kube], emulator: EmulatorServer
) -> None:
    parent = cluster_name("pools")
    op = gke.create_node_pool(parent=parent, node_pool=tpu_pool("np-a", nodes=2, topology="2x4"), timeout=5)
    assert op.name.startswith("operation-") and "/" not in op.name
    assert op.status in (Status.PENDING, Status.RUNNING)
    assert op.operation_type == container_v1.Operation.Type.CREATE_NODE_POOL
    assert op.target_link.endswith(f"{parent}/nodePools/np-a")
    assert gke.get_node_pool(name=f"{parent}/nodePools/np-a").status == PoolStatus.PROVISIONING

    done = wait_operation(gke, op)
    assert not done.error.code and done.start_time and done.end_time
    pool = gke.get_node_pool(name=f"{parent}/nodePools/np-a")
    assert pool.status == PoolStatus.RUNNING
    assert pool.placement_policy.tpu_topology == "2x4"
    assert pool.config.machine_type == "ct6e-standard-4t"
    assert [p.name for p in gke.list_node_pools(parent=parent).node_pools] == ["np-a"]
    nodes = kube_for("pools").core.list_node(label_selector="cloud.google.com/gke-nodepool=np-a").items
    assert len(nodes) == 2

    delete = gke.delete_node_pool(name=f"{parent}/nodePools/np-a", timeout=5)
    assert delete.operation_type == container_v1.Operation.Type.DELETE_NODE_POOL
    assert gke.get_node_pool(name=f"{parent}/nodePools/np-a").status == PoolStatus.STOPPING
    wait_operation(gke, delete)
    with pytest.raises(exceptions.NotFound):
        gke.get_node_pool(name=f"{parent}/nodePools/np-a")
    assert kube_for("pools").core.list_node().items == []
    counters = next(c for c in admin(emulator.url, "/emulator/state")["clusters"] if c["name"] == "pools")[
        "counters"
    ]
    assert counters["nodePoolsCreated"] == 1 and counters["nodePoolsDeleted"] == 1
    assert counters["created"][0]["name"] == counters["deleted"][0]["name"] == "np-a"


def test_tpu_nodes_carry_gke_labels_taint_and_tpu_allocatable(
    gke: container_v1.ClusterManagerClient,
    kube_for: Callable[..., Kube],
    policies: compute_v1.ResourcePoliciesClient,
) -> None:
    zone = {gen: f"{CENTRAL}-{suffix}" for gen, suffix in (("v5e", "a"), ("v6e", "b"), ("tpu7x", "c"))}
    create_pool(gke, "shapes", tpu_pool("v6e-single", locations=[zone["v6e"]]), CENTRAL)
    policy = compute_v1.ResourcePolicy(
        name="wp-shapes",
        workload_policy=compute_v1.ResourcePolicyWorkloadPolicy(
            type_="HIGH_THROUGHPUT", accelerator_topology="2x2x2"
        ),
    )
    policies.insert(project=PROJECT, region=CENTRAL, resource_policy_resource=policy).result(timeout=5)
    pool7 = tpu_pool("tpu7x-slice", machine_type="tpu7x-standard-4t", nodes=2, locations=[zone["tpu7x"]])
    pool7.placement_policy = container_v1.NodePool.PlacementPolicy(policy_name="wp-shapes")
    create_pool(gke, "shapes", pool7, CENTRAL)
    v5e_pool = tpu_pool("v5e-1t", machine_type="ct5lp-hightpu-1t", locations=[zone["v5e"]], spot=True)
    create_pool(gke, "shapes", v5e_pool, CENTRAL)
    nodes = {
        n.metadata.labels["cloud.google.com/gke-nodepool"]: n
        for n in kube_for("shapes", CENTRAL).core.list_node().items
    }
    single = nodes["v6e-single"]
    assert single.metadata.labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    assert single.metadata.labels["cloud.google.com/gke-tpu-topology"] == "2x2"
    assert single.metadata.labels["topology.kubernetes.io/zone"] == zone["v6e"]
    assert single.status.allocatable["google.com/tpu"] == "4"
    assert [(t.key, t.value, t.effect) for t in single.spec.taints] == [
        ("google.com/tpu", "present", "NoSchedule")
    ]
    assert any(c.type == "Ready" and c.status == "True" for c in single.status.conditions)
    ironwood = nodes["tpu7x-slice"].metadata.labels
    assert ironwood["cloud.google.com/gke-tpu-topology"] == "2x2x2"  # from the policy, not the pool's name
    assert ironwood["cloud.google.com/gke-tpu-accelerator"] == "tpu7x"
    v5e = nodes["v5e-1t"].metadata.labels
    assert (v5e["cloud.google.com/gke-tpu-topology"], v5e["cloud.google.com/gke-spot"]) == ("1x1", "true")
    assert nodes["v5e-1t"].status.allocatable["google.com/tpu"] == "1"


def test_duplicate_node_pool_name_is_409_conflict(gke: container_v1.ClusterManagerClient) -> None:
    create_pool(gke, "concurrent", tpu_pool("dup"))
    with pytest.raises(exceptions.Conflict) as error:
        gke.create_node_pool(parent=cluster_name("concurrent"), node_pool=tpu_pool("dup"), timeout=5)
    assert error.value.code == 409


def test_by_default_other_pools_operations_run_side_by_side_and_the_same_pools_is_400(
    gke: container_v1.ClusterManagerClient,
) -> None:
    """GKE's troubleshooting page on concurrent operations: one operation per node pool at a time."""
    parent = cluster_name("concurrent")
    first = gke.create_node_pool(parent=parent, node_pool=tpu_pool("busy-1"), timeout=5)
    second = gke.create_node_pool(parent=parent, node_pool=tpu_pool("busy-2"), timeout=5)
    with pytest.raises(exceptions.BadRequest) as error:
        gke.delete_node_pool(name=f"{parent}/nodePools/busy-1", timeout=5)
    assert (
        f"Operation {first.name} is currently creating a node pool for cluster concurrent"
        in error.value.message
    )
    assert "Please wait and try again once it is done." in error.value.message
    for op in (first, second):
        assert wait_operation(gke, op).status == Status.DONE


def test_a_control_plane_upgrade_holds_off_every_node_pool_operation_until_it_is_done(
    gke: container_v1.ClusterManagerClient, emulator: EmulatorServer
) -> None:
    """GKE allows one cluster-level operation at a time, and no node-pool operation beside it."""
    path = f"/emulator/clusters/{PROJECT}/{LOCATION}/upgrading/upgrade"
    started = admin(emulator.url, path, "POST", {"seconds": 0.5})
    upgrade = container_v1.Operation.from_json(json.dumps(started))
    assert upgrade.operation_type == container_v1.Operation.Type.UPGRADE_MASTER
    assert upgrade.target_link.endswith("/clusters/upgrading")
    parent = cluster_name("upgrading")
    with pytest.raises(exceptions.BadRequest) as error:
        gke.create_node_pool(parent=parent, node_pool=tpu_pool("after-upgrade"), timeout=5)
    assert error.value.message.endswith(f": Cluster is running incompatible operation {upgrade.name}.")
    assert wait_operation(gke, upgrade).status == Status.DONE
    create = gke.create_node_pool(parent=parent, node_pool=tpu_pool("after-upgrade"), timeout=5)
    assert wait_operation(gke, create).error.code == 0  # created, not refused nor failed


def serve_with(tmp_path_factory: pytest.TempPathFactory, operations: int) -> Iterator[EmulatorServer]:
    config = EmulatorConfig.from_dict({**TEST_CONFIG, "nodePoolOperationsPerCluster": operations})
    with EmulatorServer(config, tmp_path_factory.mktemp(f"operations-{operations}")) as server:
        yield server


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    """An emulator that runs one node-pool operation per cluster, the rule of the reference's 400."""
    yield from serve_with(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def quota_of_two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    """An emulator that runs two node-pool operations per cluster at once, as GKE does with a quota."""
    yield from serve_with(tmp_path_factory, 2)


def test_with_one_operation_per_cluster_a_second_is_400_failed_precondition(
    one_at_a_time: EmulatorServer,
) -> None:
    gke, parent = gke_of(one_at_a_time), cluster_name("concurrent")
    first = gke.create_node_pool(parent=parent, node_pool=tpu_pool("busy-1"), timeout=5)
    with pytest.raises(exceptions.BadRequest) as error:
        gke.create_node_pool(parent=parent, node_pool=tpu_pool("busy-2"), timeout=5)
    assert (
        f"Operation {first.name} is currently creating a node pool for cluster concurrent"
        in error.value.message
    )
    wait_operation(gke, first)
    wait_operation(gke, gke.create_node_pool(parent=parent, node_pool=tpu_pool("busy-2"), timeout=5))


def gke_of(server: EmulatorServer) -> container_v1.ClusterManagerClient:
    return container_v1.ClusterManagerClient(
        transport="rest", credentials=AnonymousCredentials(), client_options={"api_endpoint": server.url}
    )


def test_with_a_quota_other_pools_operations_run_side_by_side_and_the_next_is_429(
    quota_of_two: EmulatorServer,
) -> None:
    gke, parent = gke_of(quota_of_two), cluster_name("concurrent")
    first = gke.create_node_pool(parent=parent, node_pool=tpu_pool("side-1"), timeout=5)
    second = gke.create_node_pool(parent=parent, node_pool=tpu_pool("side-2"), timeout=5)
    with pytest.raises(exceptions.TooManyRequests) as error:
        gke.create_node_pool(parent=parent, node_pool=tpu_pool("side-3"), timeout=5)
    assert 'cluster "concurrent" hits the concurrent operations quota 2' in error.value.message
    with pytest.raises(exceptions.BadRequest) as busy:
        gke.delete_node_pool(name=f"{parent}/nodePools/side-1", timeout=5)
    assert f"Operation {first.name} is currently creating a node pool" in busy.value.message
    other = gke.create_node_pool(parent=cluster_name("pools"), node_pool=tpu_pool("elsewhere"), timeout=5)
    for op in (first, second, other):
        assert wait_operation(gke, op).status == Status.DONE
    wait_operation(gke, gke.create_node_pool(parent=parent, node_pool=tpu_pool("side-3"), timeout=5))


def test_a_pool_taken_away_behind_gke_is_gone_mid_create(quota_of_two: EmulatorServer) -> None:
    gke, parent = gke_of(quota_of_two), cluster_name("work")
    op = gke.create_node_pool(parent=parent, node_pool=tpu_pool("taken-away"), timeout=5)
    admin(
        quota_of_two.url, f"/emulator/clusters/{PROJECT}/{LOCATION}/work/nodePools/taken-away/vanish", "POST"
    )
    with pytest.raises(exceptions.NotFound):
        gke.get_node_pool(name=f"{parent}/nodePools/taken-away", timeout=5)
    assert wait_operation(gke, op).status == Status.DONE


def test_unknown_cluster_pool_and_operation_are_404_not_found(gke: container_v1.ClusterManagerClient) -> None:
    with pytest.raises(exceptions.NotFound):
        gke.get_cluster(name=cluster_name("nope"))
    with pytest.raises(exceptions.NotFound):
        gke.get_node_pool(name=f"{cluster_name('pools')}/nodePools/nope")
    with pytest.raises(exceptions.NotFound):
        gke.delete_node_pool(name=f"{cluster_name('pools')}/nodePools/nope")
    with pytest.raises(exceptions.NotFound):
        gke.get_operation(name=f"projects/{PROJECT}/locations/{LOCATION}/operations/operation-1-deadbeef")


def test_list_operations_includes_finished_node_pool_operations(
    gke: container_v1.ClusterManagerClient,
) -> None:
    op = create_pool(gke, "concurrent", tpu_pool("listed"))
    ops = gke.list_operations(parent=f"projects/{PROJECT}/locations/{LOCATION}").operations
    assert any(o.name == op.name and o.status == Status.DONE for o in ops)


def test_fault_injection_429_raises_too_many_requests_then_clears(
    gke: container_v1.ClusterManagerClient, emulator: EmulatorServer
) -> None:
    quota = 'Too many operations: cluster "faults" hits the concurrent operations quota 5, please try again.'
    rule = {"method": "POST", "pathRegex": "/clusters/faults/nodePools$", "status": 429, "message": quota}
    admin(emulator.url, "/emulator/faults", "POST", [rule])
    with pytest.raises(exceptions.TooManyRequests) as error:
        gke.create_node_pool(parent=cluster_name("faults"), node_pool=tpu_pool("f1"), timeout=5)
    assert "concurrent operations quota" in error.value.message
    wait_operation(
        gke, gke.create_node_pool(parent=cluster_name("faults"), node_pool=tpu_pool("f1"), timeout=5)
    )

    forever = {"method": "GET", "pathRegex": "/clusters/faults$", "status": 503, "times": 0}
    admin(emulator.url, "/emulator/faults", "POST", {"rules": [forever]})
    for _ in range(2):
        with pytest.raises(exceptions.ServiceUnavailable):
            gke.get_cluster(name=cluster_name("faults"), retry=None)
    admin(emulator.url, "/emulator/faults", "DELETE")
    assert gke.get_cluster(name=cluster_name("faults")).name == "faults"


def test_string_enums_in_a_raw_request_body_are_accepted(emulator: EmulatorServer) -> None:
    """The wire format itself (string instead of int enums), so this one request is hand-made."""
    body = {
        "nodePool": {
            "name": "strenum",
            "initialNodeCount": 1,
            "config": {
                "machineType": "ct6e-standard-4t",
                "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"},
            },
            "placementPolicy": {"type": "COMPACT"},
        }
    }
    url = f"{emulator.url}/v1/{cluster_name('raw')}/nodePools?%24alt=json%3Benum-encoding%3Dint"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request) as response:
        op = json.loads(response.read())
    assert op["operationType"] == "CREATE_NODE_POOL" and op["status"] in ("PENDING", "RUNNING")
