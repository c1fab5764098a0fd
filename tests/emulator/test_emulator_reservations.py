"""Compute reservations through the official client, and GKE pools that consume them."""

from __future__ import annotations

import pytest
from emu_helpers import PROJECT, ZONE, cluster_name, create_pool, tpu_pool, wait_operation
from google.api_core import exceptions
from google.cloud import compute_v1, container_v1

SPECIFIC = container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION


def reserved_pool(name: str, reservation: str, nodes: int) -> container_v1.NodePool:
    affinity = container_v1.ReservationAffinity(
        consume_reservation_type=SPECIFIC,
        key="compute.googleapis.com/reservation-name",
        values=[reservation],
    )
    return tpu_pool(name, nodes=nodes, topology="4x4" if nodes == 4 else None, reservation_affinity=affinity)


def in_use(reservations: compute_v1.ReservationsClient, name: str) -> int:
    reservation = reservations.get(project=PROJECT, zone=ZONE, reservation=name, timeout=5)
    return int(reservation.specific_reservation.in_use_count)


def test_reservation_get_reports_count_machine_type_and_ready_status(
    reservations: compute_v1.ReservationsClient,
) -> None:
    reservation = reservations.get(project=PROJECT, zone=ZONE, reservation="res-small")
    assert reservation.specific_reservation.count == 2
    assert reservation.specific_reservation.instance_properties.machine_type == "ct6e-standard-4t"
    assert reservation.status == "READY"
    names = {r.name for r in reservations.list(project=PROJECT, zone=ZONE)}
    assert {"res-big", "res-small"} <= names


def test_unknown_reservation_is_404_not_found(reservations: compute_v1.ReservationsClient) -> None:
    with pytest.raises(exceptions.NotFound):
        reservations.get(project=PROJECT, zone=ZONE, reservation="nope")


def test_reservation_pool_raises_in_use_count_by_its_nodes_and_delete_gives_it_back(
    gke: container_v1.ClusterManagerClient, reservations: compute_v1.ReservationsClient
) -> None:
    before = in_use(reservations, "res-big")
    create_pool(gke, "reserved", reserved_pool("v6e-4x4-res", "res-big", 4))
    assert in_use(reservations, "res-big") == before + 4
    op = gke.delete_node_pool(name=f"{cluster_name('reserved')}/nodePools/v6e-4x4-res", timeout=5)
    wait_operation(gke, op)
    assert in_use(reservations, "res-big") == before


def test_shared_reservation_path_form_is_understood(
    gke: container_v1.ClusterManagerClient, reservations: compute_v1.ReservationsClient
) -> None:
    before = in_use(reservations, "res-big")
    create_pool(gke, "reserved", reserved_pool("shared", f"projects/{PROJECT}/reservations/res-big", 1))
    assert in_use(reservations, "res-big") == before + 1
    wait_operation(gke, gke.delete_node_pool(name=f"{cluster_name('reserved')}/nodePools/shared", timeout=5))


def test_pool_larger_than_free_reservation_ends_done_with_stockout_error_and_pool_error(
    gke: container_v1.ClusterManagerClient, reservations: compute_v1.ReservationsClient
) -> None:
    done = create_pool(gke, "stockout", reserved_pool("too-big", "res-small", 4))
    assert done.status == container_v1.Operation.Status.DONE
    assert done.error.code == 8
    assert "GCE_STOCKOUT" in done.error.message and "does not have enough capacity" in done.error.message
    pool = gke.get_node_pool(name=f"{cluster_name('stockout')}/nodePools/too-big")
    assert pool.status == container_v1.NodePool.Status.ERROR
    assert pool.conditions[0].code == container_v1.StatusCondition.Code.GCE_STOCKOUT
    assert in_use(reservations, "res-small") == 0
