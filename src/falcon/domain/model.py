"""Plain data the core works on: clusters, tasks, their specs, node pools and queues.

Nomenclature (also in the README): a *task* is one row of the upstream ``job`` table; a *Job*
(capital J) is the Kubernetes batch/v1 object Falcon submits for it; a *run* is a Prefect flow run.
A *queue* is one (cluster, topology) pair.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from falcon.domain.errors import InvalidSpecError
from falcon.domain.status import Reason, Status
from falcon.domain.topology import normalise_topology


class ClusterStatus(StrEnum):
    ACTIVE = "active"  # gets new tasks
    MAINTENANCE = "maintenance"  # keeps what it runs, gets nothing new
    OFFLINE = "offline"


@dataclass(frozen=True)
class Cluster:
    id: str
    name: str
    project: str
    location: str
    tpu_type: str
    gcs_bucket: str
    default_reservation: str | None
    status: ClusterStatus
    namespace: str  # Kubernetes namespace Falcon submits Jobs into
    zone: str | None = None  # the zone of every node pool and of the reservation; None: location is a zone

    @property
    def node_zone(self) -> str:
        """Where pools go: a slice lives in one zone, so a regional cluster must name one."""
        if self.zone:
            return self.zone
        if not is_zone(self.location):
            raise ValueError(f"cluster {self.name} is regional ({self.location}) and has no zone")
        return self.location

    @property
    def region(self) -> str:
        return region_of(self.node_zone)


_ZONE = re.compile(r"^[a-z]+(?:-[a-z0-9]+)+-[a-z]$")


def is_zone(location: str) -> bool:
    """GCP zones are ``<region>-<letter>`` (``us-east5-b``); regions end in a digit (``us-east5``)."""
    return bool(_ZONE.match(location))


def region_of(location: str) -> str:
    """The region of a zone (``us-east5-b`` → ``us-east5``); a region is its own region."""
    return location.rsplit("-", 1)[0] if is_zone(location) else location


@dataclass(frozen=True)
class QueueKey:
    """One (cluster, topology) queue: at most one of its tasks acquires resources at a time."""

    cluster_id: str
    topology: str

    @property
    def slot_name(self) -> str:
        """Name of the Prefect global concurrency limit that is this queue's slot."""
        return f"falcon:{self.cluster_id}:{self.topology}"


class TaskSpec(BaseModel):
    """The ``spec`` JSON column: what to run. Validated at intake; bad specs fail the one task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(min_length=1)
    command: list[str] = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    topology: str = Field(min_length=3)
    resources: dict[str, Any] | None = None

    @field_validator("topology", mode="before")
    @classmethod
    def _normalise_topology(cls, topology: object) -> object:
        return normalise_topology(topology) if isinstance(topology, str) else topology

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        bad = [k for k in env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", k)]
        if bad:
            raise ValueError(f"invalid env var names: {bad}")
        return env

    @classmethod
    def parse(cls, raw: object) -> TaskSpec:
        """Validate the raw JSON value, turning every problem into one InvalidSpecError."""
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()
            )
            raise InvalidSpecError(f"invalid spec: {problems}") from exc


@dataclass(frozen=True)
class Task:
    """A job-table row as Falcon reads it. ``spec`` stays raw until validated at intake."""

    id: str
    actor: str
    name: str
    tpu_type: str
    spec: Any
    timeout_seconds: int | None
    status: Status
    reason: Reason | None
    message: str | None
    cluster_id: str | None
    node_pool_name: str | None
    k8s_job_name: str | None
    created_at: datetime
    dispatched_at: datetime | None = None
    finished_at: datetime | None = None
    aborting_at: datetime | None = None
    aborted_at: datetime | None = None
    # What Falcon could not read in the row (an upstream bug): intake fails the task with these.
    problems: tuple[str, ...] = ()

    @property
    def topology(self) -> str | None:
        spec = self.spec if isinstance(self.spec, dict) else {}
        value = spec.get("topology")
        return normalise_topology(value) if isinstance(value, str) else None


class ProvisioningMode(StrEnum):
    RESERVATION = "reservation"
    FLEX_START = "flex_start"


NODE_POOL_PREFIX = "falcon-"  # every pool Falcon creates; the orphan scan looks only at these
_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")


def _digest(value: str, length: int) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:length]


def node_pool_name_for(task_id: str, topology: str) -> str:
    """Deterministic name of the pool created for a task: re-running never makes a second one.

    GKE pool names: lowercase, digits and '-', at most 40 characters, starting with a letter.
    """
    return f"{NODE_POOL_PREFIX}{topology.lower()}-{_digest(task_id, 10)}"


def k8s_job_name_for(task_id: str) -> str:
    """Deterministic Job name (DNS-1123 label, at most 63 characters) readable as the task id."""
    slug = _NAME_UNSAFE.sub("-", task_id.lower()).strip("-")[:40].strip("-")
    return f"falcon-{slug}-{_digest(task_id, 8)}" if slug else f"falcon-{_digest(task_id, 8)}"
