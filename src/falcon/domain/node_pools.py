"""What a node pool for one slice must look like, decided before any GKE call (pure data)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from falcon.domain.model import ProvisioningMode
from falcon.domain.topology import Placement, SliceShape

_SHARED = re.compile(r"^projects/(?P<project>[^/]+)/reservations/(?P<name>[^/]+)$")
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class ReservationRef:
    """A cluster's reservation: its own project's ``NAME``, or another project's shared one.

    GKE's reservation affinity takes ``NAME`` for a reservation of the cluster's project and
    ``projects/OWNER/reservations/NAME`` for one shared by OWNER; Compute reads it in OWNER's
    project, in the pool's zone (reservations are zonal)."""

    project: str
    name: str
    shared: bool

    @classmethod
    def parse(cls, value: str, cluster_project: str) -> ReservationRef:
        shared = _SHARED.match(value)
        if shared:
            project, name = shared["project"], shared["name"]
        else:
            project, name = cluster_project, value
        if not _NAME.match(name):
            raise ValueError(f"reservation {value!r} is neither NAME nor projects/OWNER/reservations/NAME")
        return cls(project, name, project != cluster_project)

    @property
    def affinity_value(self) -> str:
        """What the pool's reservationAffinity.values carries."""
        return f"projects/{self.project}/reservations/{self.name}" if self.shared else self.name


@dataclass(frozen=True)
class NodePoolPlan:
    name: str
    shape: SliceShape
    mode: ProvisioningMode
    reservation: str | None  # reservationAffinity value, set in reservation mode
    zone: str  # the one zone of the slice: GKE spreads a pool without locations over all cluster zones

    def __post_init__(self) -> None:
        if (self.mode is ProvisioningMode.RESERVATION) != (self.reservation is not None):
            raise ValueError(f"pool {self.name}: a reservation is named exactly in reservation mode")

    @property
    def initial_nodes(self) -> int:
        # Flex-start pools start empty and the autoscaler brings the whole slice when pods ask.
        return self.shape.nodes if self.mode is ProvisioningMode.RESERVATION else 0

    @property
    def workload_policy(self) -> str | None:
        """Name of the TPU7x workload policy that carries a multi-host topology, when one is needed.

        One per (generation, topology), shared by every pool of that shape in the region: the
        policy only describes the slice shape, so reusing it is what xpk does too."""
        if self.shape.placement is not Placement.WORKLOAD_POLICY:
            return None
        return f"falcon-{self.shape.generation.accelerator_label}-{self.shape.topology}"


@dataclass(frozen=True)
class PoolStatus:
    """A node pool as GKE reports it."""

    name: str
    status: str  # PROVISIONING, RUNNING, RUNNING_WITH_ERROR, RECONCILING, STOPPING, ERROR
    detail: str  # status message or conditions, for people

    @property
    def ready(self) -> bool:
        return self.status in ("RUNNING", "RECONCILING")

    @property
    def broken(self) -> bool:
        return self.status in ("ERROR", "RUNNING_WITH_ERROR", "STOPPING")
