"""Emulator configuration: timings, knobs, projects, reservations and clusters (YAML, camelCase keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default.yaml")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class FlexStartConfig(_Model):
    """Whether flex-start (DWS) capacity comes for this cluster and how long it takes."""

    available: bool = True
    delay_seconds: float = 2.0


class ClusterConfig(_Model):
    location: str
    flex_start: FlexStartConfig = Field(default_factory=FlexStartConfig)
    zones: list[str] = Field(default_factory=list)  # node zones; default: the location or <region>-a

    def node_zones(self) -> list[str]:
        if self.zones:
            return list(self.zones)
        return [self.location] if self.location.count("-") >= 2 else [f"{self.location}-a"]


class ReservationConfig(_Model):
    zone: str
    machine_type: str
    count: int
    in_use_count: int = 0  # capacity taken by something outside the emulated clusters


class ProjectConfig(_Model):
    reservations: dict[str, ReservationConfig] = Field(default_factory=dict)
    clusters: dict[str, ClusterConfig] = Field(default_factory=dict)


class EmulatorConfig(_Model):
    """Everything the emulator can be told. Unknown keys are ignored."""

    node_pool_provision_seconds: float = 3.0
    node_pool_delete_seconds: float | None = None  # default: same as nodePoolProvisionSeconds
    pod_start_seconds: float = 0.5  # ContainerCreating time before Running
    default_run_seconds: float = 3.0  # container run time when EMULATOR_RUN_SECONDS is not set
    image_pull_backoff_seconds: float = 1.0  # ErrImagePull -> ImagePullBackOff
    pod_termination_seconds: float = 0.0  # graceful deletion time of a running pod
    reject_concurrent_operations: bool = True
    tick_seconds: float = 0.1
    scheduler_event_refresh_seconds: float = 5.0  # FailedScheduling count/lastTimestamp refresh period
    watch_history_size: int = 10000  # events kept per cluster for watch resume; older RVs get 410
    watch_max_seconds: float = 1800.0  # server-side cap on a watch without timeoutSeconds
    watch_bookmark_seconds: float = 30.0
    event_ttl_seconds: float = 3600.0  # like kube-apiserver --event-ttl
    gke_version: str = "1.33.5-gke.1080000"
    projects: dict[str, ProjectConfig] = Field(default_factory=dict)

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
