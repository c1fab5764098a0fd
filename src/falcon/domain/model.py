"""Plain data the core works on: clusters, tasks, their specs, node pools and queues.

Nomenclature (also in the README): a *task* is one row of the upstream ``job`` table; a *Job*
(capital J) is the Kubernetes batch/v1 object Falcon submits for it; a *run* is a Prefect flow run.
A *queue* is one (cluster, topology) pair.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

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
        """The key of this queue's slot, stable for the queue's life (the cluster's id, not its
        name); the slot adapter shows it to people as ``slot_label``."""
        return f"{SLOT_PREFIX}{self.cluster_id}:{self.topology}"

    @classmethod
    def from_slot_name(cls, name: str) -> QueueKey | None:
        """The queue whose ``slot_name`` this is; None for any other name."""
        if not name.startswith(SLOT_PREFIX):
            return None
        cluster_id, separator, topology = name.removeprefix(SLOT_PREFIX).partition(":")
        return cls(cluster_id, topology) if separator and cluster_id and topology else None


SLOT_PREFIX = "falcon:"
RUN_TAG_LIMIT = 100  # characters of an upstream value (the actor) shown in a run's tag


def queue_label(cluster: Cluster, topology: str) -> str:
    """How a person names a queue: the cluster's name and the topology, then where the cluster
    is (``prod-a:2x4@my-project:us-east5-b``). A GKE cluster's name is unique only within its
    project and location, so the label carries both and two projects' queues never share it."""
    return f"{cluster.name}:{topology}@{cluster.project}:{cluster.location}"


def slot_label(cluster: Cluster, topology: str) -> str:
    """The name of the queue's slot (a Prefect global concurrency limit) on Prefect's
    Concurrency page: ``falcon:`` and the queue's label."""
    return f"{SLOT_PREFIX}{queue_label(cluster, topology)}"


def run_tags(task_id: str, actor: str | None, cluster: Cluster | None, topology: str | None) -> list[str]:
    """The tags of a task's flow runs, so that filtering the Prefect UI by one of them finds the
    task's whole history: ``task:<id>``, ``actor:<actor>``, ``cluster:<name>``, ``queue:<label>``
    (what is not known yet is left out)."""
    tags = ["falcon", f"task:{task_id}"]
    if actor:
        tags.append(f"actor:{actor[:RUN_TAG_LIMIT]}")
    if cluster is not None:
        tags.append(f"cluster:{cluster.name}")
        if topology:
            tags.append(f"queue:{queue_label(cluster, topology)}")
    return tags


# The variables the Job's container gets from Falcon (job_manifest._container): a spec may not set them.
FALCON_ENV = ("POD_NAME", "POD_NAMESPACE", "FALCON_TASK_ID", "FALCON_LOG_FILE", "PYTHONUNBUFFERED")
TPU_RESOURCE = "google.com/tpu"  # requested from the slice shape, never from the spec
# What a spec may request beside the TPU chips: anything else either never schedules on a TPU node
# (other extended resources) or needs more than a request (hugepages).
SPEC_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# The whole spec as JSON, in UTF-8. Linux caps each argument and variable of a process at 128 KiB
# (MAX_ARG_STRLEN) and Kubernetes an object at 1.5 MiB: a larger spec could never start.
MAX_SPEC_BYTES = 128 * 1024
MAX_PROBLEMS_SHOWN = 5
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
# A Kubernetes quantity, without the exponents no request needs (resource.Quantity's grammar).
_QUANTITY = re.compile(
    r"\+?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?"
)
_SUFFIX_POWERS = {"Ki": (2, 10), "Mi": (2, 20), "Gi": (2, 30), "Ti": (2, 40), "Pi": (2, 50), "Ei": (2, 60)}
_SUFFIX_POWERS |= {s: (10, e) for s, e in zip("numkMGTPE", (-9, -6, -3, 3, 6, 9, 12, 15, 18), strict=True)}


def shown(value: object, limit: int = 40) -> str:
    """A value quoted for a Message: escaped (no control, bidi or lone surrogate reaches the row),
    and cut, so a hostile value cannot make the Message unreadable or too long for its column."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


def _container_text(value: str) -> str:
    """A string that reaches a container (argv, environment): exec cannot pass NUL, and a lone
    surrogate (JSON can carry one, UTF-8 cannot) would reach the pod changed."""
    if "\0" in value:
        raise ValueError("contains a NUL character")
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise ValueError("contains a lone UTF-16 surrogate, not UTF-8 text")
    return value


def _image(value: str) -> str:
    if not value.isprintable() or any(c.isspace() for c in value):
        raise ValueError(f"{shown(value)} has whitespace or unprintable characters, no image reference does")
    return value


def quantity_value(quantity: str) -> Decimal:
    """The number a Kubernetes quantity stands for (``64Gi``, ``500m``, ``1.5``, ``1e3``)."""
    match = _QUANTITY.fullmatch(quantity)
    if match is None:
        raise ValueError(f"{shown(quantity)} is not a Kubernetes quantity (e.g. 500m, 4, 64Gi)")
    suffix = match["suffix"] or ""
    base, exponent = (
        (10, int(suffix[1:])) if suffix[:1] in ("e", "E") else _SUFFIX_POWERS.get(suffix, (10, 0))
    )
    return Decimal(match["number"]) * Decimal(base) ** exponent


def _quantity(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return value  # left to the str type's own error
    quantity = str(value)
    quantity_value(quantity)
    return quantity


def _resource_name(name: str) -> str:
    if name == TPU_RESOURCE:
        raise ValueError(f"{TPU_RESOURCE} is requested by Falcon from the topology")
    if name not in SPEC_RESOURCES:
        raise ValueError(f"{shown(name)} is not one of {', '.join(SPEC_RESOURCES)}")
    return name


ContainerText = Annotated[str, AfterValidator(_container_text)]
Quantity = Annotated[str, BeforeValidator(_quantity), Field(max_length=32)]
ResourceName = Annotated[str, AfterValidator(_resource_name)]


class Resources(BaseModel):
    """The spec's own requests and limits: CPU, memory and ephemeral storage beside the TPU chips."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: dict[ResourceName, Quantity] = Field(default_factory=dict)
    limits: dict[ResourceName, Quantity] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        """The API server refuses a request above its limit; say so before a pool is made for it."""
        for name, limit in self.limits.items():
            request = self.requests.get(name)
            if request is not None and quantity_value(request) > quantity_value(limit):
                raise ValueError(f"requests.{name} ({request}) is above limits.{name} ({limit})")
        return self


class TaskSpec(BaseModel):
    """The ``spec`` JSON column: what to run. Validated at intake; bad specs fail the one task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_image)]
    command: list[ContainerText] = Field(min_length=1)
    args: list[ContainerText] = Field(default_factory=list)
    env: dict[str, ContainerText] = Field(default_factory=dict)
    topology: str = Field(min_length=3, max_length=32)
    resources: Resources | None = None

    @field_validator("topology", mode="before")
    @classmethod
    def _normalise_topology(cls, topology: object) -> object:
        return normalise_topology(topology) if isinstance(topology, str) else topology

    @field_validator("command")
    @classmethod
    def _program(cls, command: list[str]) -> list[str]:
        if not command[0]:
            raise ValueError("the program (its first item) is empty")
        return command

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{shown(name)} is not a valid variable name")
            if name in FALCON_ENV:
                raise ValueError(f"{name} is set by Falcon in every pod and cannot be overridden")
        return env

    @classmethod
    def parse(cls, raw: object) -> TaskSpec:
        """Validate the raw JSON value, turning every problem into one InvalidSpecError."""
        size = len(json.dumps(raw, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
        if size > MAX_SPEC_BYTES:
            raise InvalidSpecError(f"invalid spec: spec: {size} bytes of JSON, at most {MAX_SPEC_BYTES}")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = [f"{_where(e['loc'])}: {e['msg']}" for e in exc.errors()]
            more = len(problems) - MAX_PROBLEMS_SHOWN
            listed = "; ".join(problems[:MAX_PROBLEMS_SHOWN]) + (f"; …+{more}" if more > 0 else "")
            raise InvalidSpecError(f"invalid spec: {listed}") from exc


def _where(loc: tuple[int | str, ...]) -> str:
    """The field a problem is in, as ``env.MY_VAR``; a key the spec made up is quoted and cut."""
    parts = [str(p) if isinstance(p, int) or (p.isprintable() and len(p) <= 40) else shown(p) for p in loc]
    return ".".join(parts) or "spec"


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


@dataclass(frozen=True)
class RunningTask:
    """What following a running task's Job needs of its row and its progress (the queue it runs
    in). The reconcile round keeps these for every running task and reads the new ones each
    second; their spec and Message, most of a row's bytes, and the rest of their progress stay
    unread."""

    id: str
    status: Status
    k8s_job_name: str | None
    dispatched_at: datetime | None
    timeout_seconds: int | None
    queue: QueueKey | None

    @classmethod
    def of(cls, task: Task, queue: QueueKey | None) -> RunningTask:
        return cls(task.id, task.status, task.k8s_job_name, task.dispatched_at, task.timeout_seconds, queue)


@dataclass(frozen=True)
class RunningRead:
    """What a round that keeps the running tasks in memory (``RunningBook``) asks the round's
    read to take of them."""

    since: datetime | None  # the tasks that reached Running at or after it; None: every one
    recheck: tuple[str, ...] = ()  # tasks the memory holds, read again whether or not they changed


@dataclass(frozen=True)
class RunningChanges:
    """What changed among the running tasks since a moment, for a round that keeps them in
    memory (``RunningBook``): the tasks that reached Running since then, the running ones
    upstream set to Aborting, and how many are running in all (read together, so the count
    says whether the memory still holds them all); and those of the tasks asked to be read
    again that still run, as their rows read now."""

    new: list[RunningTask]
    aborting: set[str]
    count: int
    rechecked: list[RunningTask] = field(default_factory=list)


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
