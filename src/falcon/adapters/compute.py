"""Reservation capacity through google-cloud-compute: how many nodes a reservation still has free."""

from __future__ import annotations

from google.cloud import compute_v1

from falcon.adapters.errors import google_errors
from falcon.domain.scheduling import ReservationCapacity


class Reservations:
    def __init__(self, client: compute_v1.ReservationsClient, timeout: float) -> None:
        self._client = client
        self._timeout = timeout

    def capacity(self, project: str, zone: str, name: str) -> ReservationCapacity:
        """``count`` and ``inUseCount`` count VMs (= GKE nodes), not chips."""
        short = name.rsplit("/", 1)[-1]
        with google_errors(f"get reservation {name}"):
            found = self._client.get(project=project, zone=zone, reservation=short, timeout=self._timeout)
        specific = found.specific_reservation
        return ReservationCapacity(name=name, count=int(specific.count), in_use=int(specific.in_use_count))
