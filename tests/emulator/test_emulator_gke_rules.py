"""GKE's node-pool create rules and the Compute resources they read, through the official clients only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from emu_helpers import (
    CENTRAL,
    LOCATION,
    OWNER,
    PROJECT,
    ZONE,
    Kube,
    cluster_name,
    create_pool,
    tpu_pool,
    wait_operation,
)
from google.api_core import exceptions
from google.cloud import compute_v1, container_v1

SPECIFIC = container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
ZONE_A, ZONE_C = f"{LOCATION}-a", f"{LOCATION}-c"
IRONWOOD_ZONE = f"{CENTRAL}-c"


def rejected(
    gke: container_v1.ClusterManagerClient,
    cluster: str,
    pool: container_v1.NodePool,
    location: str = LOCATION,
) -> str:
    """Create must fail with GKE's 400 INVALID_ARGUMENT envelope; returns its message."""
    with pytest.raises(exceptions.BadRequest) as error:
        gke.create_node_pool(parent=cluster_name(cluster, location=location), node_pool=pool, timeout=5)
    assert error.value.response.json()["error"]["status"] == "INVALID_ARGUMENT"
    with pytest.raises(exceptions.NotFound):
        gke.get_node_pool(name=f"{cluster_name(cluster, location=location)}/nodePools/{pool.name}")
    return str(error.value.message)


def delete_pool(
    gke: container_v1.ClusterManagerClient, cluster: str, name: str, location: str = LOCATION
) -> None:
    op = gke.delete_node_pool(name=f"{cluster_name(cluster, location=location)}/nodePools/{name}", timeout=5)
    wait_operation(gke, op)


def reserved(name: str, value: str, **kw: Any) -> container_v1.NodePool:
    affinity = container_v1.ReservationAffinity(
        consume_reservation_type=SPECIFIC, key="compute.googleapis.com/reservation-name", values=[value]
    )
    return tpu_pool(name, reservation_affinity=affinity, **kw)


def workload_policy(name: str, topology: str, kind: str = "HIGH_THROUGHPUT") -> compute_v1.ResourcePolicy:
    return compute_v1.ResourcePolicy(
        name=name,
        workload_policy=compute_v1.ResourcePolicyWorkloadPolicy(type_=kind, accelerator_topology=topology),
    )


def ironwood_pool(name: str, policy: str, nodes: int = 2) -> container_v1.NodePool:
    pool = tpu_pool(name, machine_type="tpu7x-standard-4t", nodes=nodes, locations=[IRONWOOD_ZONE])
    pool.placement_policy = container_v1.NodePool.PlacementPolicy(policy_name=policy)
    return pool


def zones_of(kube: Kube, pool: str) -> list[str]:
    nodes = kube.core.list_node(label_selector=f"cloud.google.com/gke-nodepool={pool}").items
    return sorted(n.metadata.labels["topology.kubernetes.io/zone"] for n in nodes)


# --- locations and node counts --------------------------------------------------------------------------


def test_regional_cluster_pool_in_a_zone_that_does_not_offer_v6e_is_rejected(
    gke: container_v1.ClusterManagerClient,
) -> None:
    message = rejected(gke, "regional", tpu_pool("v6e-in-c", locations=[ZONE_C]))
    assert "ct6e-standard-4t is not available in zone(s) us-east5-c" in message


def test_regional_cluster_pool_without_locations_spreads_over_every_zone_so_v6e_is_rejected(
    gke: container_v1.ClusterManagerClient,
) -> None:
    message = rejected(gke, "regional", tpu_pool("v6e-everywhere"))
    assert "not available in zone(s) us-east5-c" in message and ZONE not in message.split("(it is")[0]


def test_regional_cluster_pool_without_locations_gets_initial_node_count_in_every_zone(
    gke: container_v1.ClusterManagerClient, kube_for: Callable[..., Kube]
) -> None:
    create_pool(gke, "regional", tpu_pool("cpu-spread", machine_type="e2-standard-4", nodes=1))
    pool = gke.get_node_pool(name=f"{cluster_name('regional')}/nodePools/cpu-spread")
    assert list(pool.locations) == [ZONE_A, ZONE, ZONE_C]
    assert zones_of(kube_for("regional"), "cpu-spread") == [ZONE_A, ZONE, ZONE_C]
    delete_pool(gke, "regional", "cpu-spread")


def test_initial_node_count_is_per_zone_for_a_pool_in_two_zones_that_offer_v6e(
    gke: container_v1.ClusterManagerClient, kube_for: Callable[..., Kube]
) -> None:
    create_pool(gke, "regional", tpu_pool("v6e-two-zones", nodes=2, locations=[ZONE_A, ZONE]))
    assert zones_of(kube_for("regional"), "v6e-two-zones") == [ZONE_A, ZONE_A, ZONE, ZONE]
    delete_pool(gke, "regional", "v6e-two-zones")


def test_zonal_cluster_pool_defaults_to_its_zone_and_other_zones_are_rejected(
    gke: container_v1.ClusterManagerClient,
) -> None:
    create_pool(gke, "zonal", tpu_pool("in-zone"), location=ZONE)
    pool = gke.get_node_pool(name=f"{cluster_name('zonal', location=ZONE)}/nodePools/in-zone")
    assert list(pool.locations) == [ZONE]
    message = rejected(gke, "zonal", tpu_pool("elsewhere", locations=[ZONE_A]), location=ZONE)
    assert "us-east5-a is not one of the locations of cluster zonal" in message
    delete_pool(gke, "zonal", "in-zone", location=ZONE)


def test_total_and_per_zone_autoscaling_counts_together_are_rejected(
    gke: container_v1.ClusterManagerClient,
) -> None:
    pool = tpu_pool("both-counts", nodes=0)
    pool.autoscaling = container_v1.NodePoolAutoscaling(
        enabled=True, max_node_count=1, total_max_node_count=1
    )
    assert "mutually exclusive" in rejected(gke, "rules", pool)


def test_unknown_machine_type_is_rejected(gke: container_v1.ClusterManagerClient) -> None:
    assert "Invalid machine type ct6e-standard-16t" in rejected(
        gke, "rules", tpu_pool("no-such", machine_type="ct6e-standard-16t")
    )


def test_configured_tpu_zones_replace_the_documented_offer_of_that_machine_type(
    gke: container_v1.ClusterManagerClient,
) -> None:
    create_pool(gke, "rules", tpu_pool("v5e-east", machine_type="ct5lp-hightpu-4t", nodes=2, topology="2x4"))
    delete_pool(gke, "rules", "v5e-east")
    documented = tpu_pool("v5e-central", machine_type="ct5lp-hightpu-4t", locations=[f"{CENTRAL}-a"])
    assert "it is offered in us-east5-b" in rejected(gke, "shapes", documented, CENTRAL)


# --- TPU slices -----------------------------------------------------------------------------------------


def test_v6e_2x4_slice_with_two_nodes_and_compact_tpu_topology_is_accepted(
    gke: container_v1.ClusterManagerClient, kube_for: Callable[..., Kube]
) -> None:
    done = create_pool(gke, "rules", tpu_pool("v6e-2x4-ok", nodes=2, topology="2x4"))
    assert not done.error.code
    nodes = kube_for("rules").core.list_node(label_selector="cloud.google.com/gke-nodepool=v6e-2x4-ok").items
    assert [n.metadata.labels["cloud.google.com/gke-tpu-topology"] for n in nodes] == ["2x4", "2x4"]
    delete_pool(gke, "rules", "v6e-2x4-ok")


def test_v6e_2x4_slice_with_four_nodes_is_rejected(gke: container_v1.ClusterManagerClient) -> None:
    message = rejected(gke, "rules", tpu_pool("v6e-2x4-four", nodes=4, topology="2x4"))
    assert "initialNodeCount 4 does not match TPU topology 2x4" in message and "2 nodes" in message


def test_multi_host_autoscaling_maximum_must_be_the_slice(gke: container_v1.ClusterManagerClient) -> None:
    pool = tpu_pool("v6e-4x4-max", nodes=0, topology="4x4")
    pool.autoscaling = container_v1.NodePoolAutoscaling(enabled=True, total_max_node_count=8)
    assert "Autoscaling maximum 8 does not match TPU topology 4x4" in rejected(gke, "rules", pool)


def test_multi_host_slice_over_two_zones_is_rejected(gke: container_v1.ClusterManagerClient) -> None:
    pool = tpu_pool("v6e-two-zone-slice", nodes=2, topology="2x4", locations=[ZONE_A, ZONE])
    assert "must be in exactly one zone" in rejected(gke, "regional", pool)


def test_multi_host_slice_without_compact_placement_is_rejected(
    gke: container_v1.ClusterManagerClient,
) -> None:
    pool = tpu_pool("v6e-loose", nodes=2)
    pool.placement_policy = container_v1.NodePool.PlacementPolicy(tpu_topology="2x4")
    assert "needs placementPolicy type COMPACT" in rejected(gke, "rules", pool)


def test_topology_the_machine_type_cannot_form_is_rejected(gke: container_v1.ClusterManagerClient) -> None:
    message = rejected(gke, "rules", tpu_pool("v6e-3x3", nodes=2, topology="3x3"))
    assert "Topology 3x3 is not supported by machine type ct6e-standard-4t" in message
    message = rejected(gke, "rules", tpu_pool("v6e-3d", nodes=2, topology="2x2x2"))
    assert "Topology 2x2x2 is not supported" in message


@pytest.mark.parametrize(
    ("machine_type", "topology"), [("ct6e-standard-4t", "2x2"), ("ct6e-standard-8t", "2x4")]
)
def test_single_host_pool_with_tpu_topology_is_rejected(
    gke: container_v1.ClusterManagerClient, machine_type: str, topology: str
) -> None:
    pool = tpu_pool(f"single-{machine_type}", machine_type=machine_type, topology=topology)
    assert "is a single-host TPU slice" in rejected(gke, "rules", pool)


# --- TPU7x and workload policies ------------------------------------------------------------------------


def test_tpu7x_slice_with_a_workload_policy_in_its_region_is_accepted(
    gke: container_v1.ClusterManagerClient,
    policies: compute_v1.ResourcePoliciesClient,
    kube_for: Callable[..., Kube],
) -> None:
    policies.insert(
        project=PROJECT, region=CENTRAL, resource_policy_resource=workload_policy("wp-ok", "2x2x4")
    ).result(timeout=5)
    done = create_pool(gke, "ironwood", ironwood_pool("ironwood-ok", "wp-ok", nodes=4), CENTRAL)
    assert not done.error.code
    nodes = kube_for("ironwood", CENTRAL).core.list_node().items
    assert {n.metadata.labels["cloud.google.com/gke-tpu-topology"] for n in nodes} == {"2x2x4"}
    assert len(nodes) == 4
    pool = gke.get_node_pool(name=f"{cluster_name('ironwood', location=CENTRAL)}/nodePools/ironwood-ok")
    assert pool.placement_policy.policy_name == "wp-ok" and not pool.placement_policy.tpu_topology
    with pytest.raises(exceptions.BadRequest) as in_use:
        policies.delete(project=PROJECT, region=CENTRAL, resource_policy="wp-ok").result(timeout=5)
    assert "is already being used by" in in_use.value.message
    delete_pool(gke, "ironwood", "ironwood-ok", CENTRAL)
    policies.delete(project=PROJECT, region=CENTRAL, resource_policy="wp-ok").result(timeout=5)


def test_tpu7x_slice_naming_a_missing_policy_is_rejected(
    gke: container_v1.ClusterManagerClient, policies: compute_v1.ResourcePoliciesClient
) -> None:
    message = rejected(gke, "ironwood", ironwood_pool("ironwood-none", "wp-missing"), CENTRAL)
    assert "projects/proj-a/regions/us-central1/resourcePolicies/wp-missing was not found" in message
    # a policy of the same name in another region is not the pool's
    policies.insert(
        project=PROJECT, region=LOCATION, resource_policy_resource=workload_policy("wp-east", "2x2x2")
    ).result(timeout=5)
    assert "was not found" in rejected(gke, "ironwood", ironwood_pool("ironwood-east", "wp-east"), CENTRAL)


def test_tpu7x_with_tpu_topology_or_compact_placement_is_rejected(
    gke: container_v1.ClusterManagerClient, policies: compute_v1.ResourcePoliciesClient
) -> None:
    pool = tpu_pool("ironwood-compact", machine_type="tpu7x-standard-4t", nodes=2, topology="2x2x2")
    pool.locations = [IRONWOOD_ZONE]
    assert "does not support tpuTopology" in rejected(gke, "ironwood", pool, CENTRAL)
    policies.insert(
        project=PROJECT, region=CENTRAL, resource_policy_resource=workload_policy("wp-mixed", "2x2x2")
    ).result(timeout=5)
    mixed = ironwood_pool("ironwood-mixed", "wp-mixed")
    mixed.placement_policy.type_ = container_v1.NodePool.PlacementPolicy.Type.COMPACT
    assert "cannot be combined with COMPACT" in rejected(gke, "ironwood", mixed, CENTRAL)


def test_tpu7x_node_count_must_match_the_policy_topology(
    gke: container_v1.ClusterManagerClient, policies: compute_v1.ResourcePoliciesClient
) -> None:
    policies.insert(
        project=PROJECT, region=CENTRAL, resource_policy_resource=workload_policy("wp-count", "2x2x2")
    ).result(timeout=5)
    message = rejected(gke, "ironwood", ironwood_pool("ironwood-count", "wp-count", nodes=4), CENTRAL)
    assert "initialNodeCount 4 does not match TPU topology 2x2x2" in message


def test_tpu7x_on_a_gke_version_before_1_34_0_gke_2201000_is_rejected(
    gke: container_v1.ClusterManagerClient, policies: compute_v1.ResourcePoliciesClient
) -> None:
    single = tpu_pool("ironwood-single", machine_type="tpu7x-standard-4t", locations=[IRONWOOD_ZONE])
    message = rejected(gke, "ironwood-old", single, CENTRAL)
    assert "requires GKE version 1.34.0-gke.2201000 or later" in message and "1.34.0-gke.1662000" in message


# --- reservations ---------------------------------------------------------------------------------------


def in_use(reservations: compute_v1.ReservationsClient, project: str, name: str) -> int:
    reservation = reservations.get(project=project, zone=ZONE, reservation=name, timeout=5)
    return int(reservation.specific_reservation.in_use_count)


def test_shared_reservation_by_owner_path_is_consumed_when_shared_with_the_cluster_project(
    gke: container_v1.ClusterManagerClient, reservations: compute_v1.ReservationsClient
) -> None:
    shared = reservations.get(project=OWNER, zone=ZONE, reservation="res-shared")
    assert shared.share_settings.share_type == "SPECIFIC_PROJECTS"
    assert PROJECT in shared.share_settings.project_map
    create_pool(gke, "rules", reserved("on-shared", f"projects/{OWNER}/reservations/res-shared"))
    assert in_use(reservations, OWNER, "res-shared") == 1
    delete_pool(gke, "rules", "on-shared")
    assert in_use(reservations, OWNER, "res-shared") == 0


def test_reservation_of_another_project_not_shared_with_the_cluster_project_is_rejected(
    gke: container_v1.ClusterManagerClient,
) -> None:
    message = rejected(gke, "rules", reserved("on-private", f"projects/{OWNER}/reservations/res-private"))
    assert "is not shared with project proj-a" in message
    # a bare name is looked up in the cluster's own project, where the owner's reservation is not
    assert "was not found" in rejected(gke, "rules", reserved("bare-shared", "res-shared"))


def test_reservation_in_another_zone_is_rejected(gke: container_v1.ClusterManagerClient) -> None:
    message = rejected(gke, "rules", reserved("wrong-zone", "res-zone-a"))
    assert f"projects/{PROJECT}/zones/{ZONE}/reservations/res-zone-a was not found" in message


def test_reservation_that_is_not_ready_is_rejected(gke: container_v1.ClusterManagerClient) -> None:
    assert "is not ready (status CREATING)" in rejected(gke, "rules", reserved("not-ready", "res-creating"))


def test_reservation_for_another_machine_type_is_rejected(gke: container_v1.ClusterManagerClient) -> None:
    message = rejected(gke, "rules", reserved("wrong-machine", "res-v5e"))
    assert "is for machine type ct5lp-hightpu-4t" in message and "uses ct6e-standard-4t" in message


# --- flex-start version ---------------------------------------------------------------------------------


def flex(name: str) -> container_v1.NodePool:
    pool = tpu_pool(name, nodes=0, topology="2x4", flex_start=True)
    pool.autoscaling = container_v1.NodePoolAutoscaling(enabled=True, total_max_node_count=2)
    return pool


def test_flex_start_on_a_gke_version_before_1_33_0_gke_1712000_is_rejected(
    gke: container_v1.ClusterManagerClient,
) -> None:
    message = rejected(gke, "flex-old", flex("flex-too-old"))
    assert "Flex-start TPU node pools require GKE version 1.33.0-gke.1712000" in message


def test_flex_start_on_exactly_the_minimum_version_is_accepted(
    gke: container_v1.ClusterManagerClient,
) -> None:
    assert not create_pool(gke, "flex-min", flex("flex-at-min")).error.code


# --- Compute resources ----------------------------------------------------------------------------------


def test_reservation_is_read_in_its_own_zone_only_and_reports_its_status(
    reservations: compute_v1.ReservationsClient,
) -> None:
    assert reservations.get(project=PROJECT, zone=ZONE_A, reservation="res-zone-a").status == "READY"
    assert reservations.get(project=PROJECT, zone=ZONE, reservation="res-creating").status == "CREATING"
    local = reservations.get(project=PROJECT, zone=ZONE, reservation="res-big")
    assert local.share_settings.share_type == "LOCAL"
    with pytest.raises(exceptions.NotFound):
        reservations.get(project=PROJECT, zone=ZONE, reservation="res-zone-a")


def test_resource_policy_insert_get_list_duplicate_and_delete(
    policies: compute_v1.ResourcePoliciesClient,
) -> None:
    region = "europe-west4"
    policies.insert(
        project=PROJECT, region=region, resource_policy_resource=workload_policy("wp-crud", "4x4x4")
    ).result(timeout=5)
    got = policies.get(project=PROJECT, region=region, resource_policy="wp-crud")
    assert (got.workload_policy.type_, got.workload_policy.accelerator_topology) == (
        "HIGH_THROUGHPUT",
        "4x4x4",
    )
    assert got.region.endswith(f"/regions/{region}") and got.self_link.endswith("/resourcePolicies/wp-crud")
    assert [p.name for p in policies.list(project=PROJECT, region=region)] == ["wp-crud"]
    with pytest.raises(exceptions.Conflict) as duplicate:
        policies.insert(
            project=PROJECT, region=region, resource_policy_resource=workload_policy("wp-crud", "4x4x4")
        )
    assert "already exists" in duplicate.value.message
    policies.delete(project=PROJECT, region=region, resource_policy="wp-crud").result(timeout=5)
    with pytest.raises(exceptions.NotFound):
        policies.get(project=PROJECT, region=region, resource_policy="wp-crud")
    with pytest.raises(exceptions.BadRequest):
        policies.insert(
            project=PROJECT, region=region, resource_policy_resource=workload_policy("Bad_Name", "2x2x2")
        )
