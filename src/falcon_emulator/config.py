"""Emulator configuration: timings, knobs, projects, reservations and clusters (YAML, camelCase keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from falcon_emulator.tpu_catalog import parse_version

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default.yaml")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class FlexStartConfig(_Model):
    """Whether flex-start (DWS) capacity comes for this cluster and how long it takes."""

    available: bool = True
    delay_seconds: float = 2.0


class StandingPoolConfig(_Model):
    """A node pool the cluster has from the start (GKE's default-pool, say): RUNNING, its nodes Ready."""

    machine_type: str = "e2-standard-8"
    node_count: int = Field(default=1, ge=1)


class ClusterConfig(_Model):
    location: str
    flex_start: FlexStartConfig = Field(default_factory=FlexStartConfig)
    zones: list[str] = Field(default_factory=list)  # node zones; default: the location or <region>-a
    gke_version: str | None = None  # this cluster's GKE version; default: the top-level gkeVersion
    # Kubernetes ServiceAccounts ("namespace/name") that exist from the start, besides each namespace's
    # "default" (created by the ServiceAccount controller on a real cluster).
    service_accounts: list[str] = Field(default_factory=list)
    node_pools: dict[str, StandingPoolConfig] = Field(default_factory=dict)
    # The kubelet runs each container's command as a local process (falcon_emulator.processes): a
    # central cluster whose pods are Prefect flow runs.
    runs_commands: bool = False

    @field_validator("gke_version")
    @classmethod
    def _gke_version(cls, value: str | None) -> str | None:
        """Reject a version the node-pool rules could not compare (e.g. 1.33 without a patch)."""
        if value is not None:
            parse_version(value)
        return value

    def node_zones(self) -> list[str]:
        if self.zones:
            return list(self.zones)
        return [self.location] if self.location.count("-") >= 2 else [f"{self.location}-a"]


class ReservationConfig(_Model):
    zone: str
    machine_type: str
    count: int
    in_use_count: int = 0  # capacity taken by something outside the emulated clusters
    status: str = "READY"  # CREATING | READY | UPDATING | DELETING | INVALID
    share_with: list[str] = Field(default_factory=list)  # consumer projects (shareType SPECIFIC_PROJECTS)


class BucketConfig(_Model):
    """A GCS bucket of the project and the Workload Identity principals that may write to it,
    as IAM spells a Kubernetes ServiceAccount: ``serviceAccount:<project>.svc.id.goog[<namespace>/<ksa>]``."""

    writers: list[str] = Field(default_factory=list)


class ProjectConfig(_Model):
    # What testIamPermissions says the caller holds on the project; None: every permission asked.
    iam_permissions: list[str] | None = None
    reservations: dict[str, ReservationConfig] = Field(default_factory=dict)
    buckets: dict[str, BucketConfig] = Field(default_factory=dict)
    clusters: dict[str, ClusterConfig] = Field(default_factory=dict)


class EmulatorConfig(_Model):
    """Everything the emulator can be told. Unknown keys are ignored."""

    node_pool_provision_seconds: float = 3.0
    node_pool_delete_seconds: float | None = None  # default: same as nodePoolProvisionSeconds
    pod_start_seconds: float = 0.5  # ContainerCreating time before Running
    default_run_seconds: float = 3.0  # container run time when EMULATOR_RUN_SECONDS is not set
    image_pull_backoff_seconds: float = 1.0  # ErrImagePull -> ImagePullBackOff
    pod_termination_seconds: float = 0.0  # graceful deletion time of a running pod
    # GKE's node-pool operations running at once on one cluster. GKE documents one operation per
    # node pool (docs/troubleshooting/concurrent-operations): different pools' run side by side, up
    # to a quota (429 past it; 5 in the error terraform-provider-google#15205 quotes), one on the same
    # pool is 400 FAILED_PRECONDITION. 1 is the stricter rule of the reference's 400: any other refused.
    node_pool_operations_per_cluster: int = Field(default=5, ge=1)
    tick_seconds: float = 0.1
    scheduler_event_refresh_seconds: float = 5.0  # FailedScheduling count/lastTimestamp refresh period
    watch_history_size: int = 10000  # events kept per cluster for watch resume; older RVs get 410
    watch_max_seconds: float = 1800.0  # server-side cap on a watch without timeoutSeconds
    watch_bookmark_seconds: float = 30.0
    event_ttl_seconds: float = 3600.0  # like kube-apiserver --event-ttl
    gke_version: str = "1.34.1-gke.1829001"
    # Zones offering a TPU machine type, replacing the documented list (tpu_catalog.py) for that type.
    tpu_zones: dict[str, list[str]] = Field(default_factory=dict)
    projects: dict[str, ProjectConfig] = Field(default_factory=dict)

    @field_validator("gke_version")
    @classmethod
    def _gke_version(cls, value: str) -> str:
        parse_version(value)
        return value

    @property
    def delete_seconds(self) -> float:
        if self.node_pool_delete_seconds is None:
            return self.node_pool_provision_seconds
        return self.node_pool_delete_seconds

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmulatorConfig:
        return cls.model_validate(data)

    @classmethod
    def load(cls, path: Path | None) -> EmulatorConfig:
        """Read a YAML file, or the built-in default.yaml when path is None."""
        source = DEFAULT_CONFIG_PATH if path is None else path
        data = yaml.safe_load(source.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{source}: top level must be a mapping")
        return cls.from_dict(data)
