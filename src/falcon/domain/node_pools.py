"""What a node pool for one slice must look like, decided before any GKE call (pure data)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from falcon.domain.model import ProvisioningMode
from falcon.domain.topology import SliceShape


@dataclass(frozen=True)
class NodePoolPlan:
    name: str
    shape: SliceShape
    mode: ProvisioningMode
    reservation: str | None
    scale_down_delay: timedelta
    zone: str | None  # node location; None lets GKE use the cluster's default locations

    @property
    def initial_nodes(self) -> int:
        # Flex-start pools start empty and the autoscaler brings the whole slice when pods ask.
        return self.shape.nodes if self.mode is ProvisioningMode.RESERVATION else 0

    @property
    def workload_policy(self) -> str:
        """Name of the TPU7x workload policy that carries a multi-host topology."""
        return f"falcon-{self.shape.tpu_type}-{self.shape.topology}"
