"""All emulator state (GKE clusters and node pools, operations, reservations, per-cluster Kubernetes stores).

One ``EmulatorState`` lives per app; every handler and the simulation loop hold ``state.lock`` while they
read or change it.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from falcon_emulator.config import ClusterConfig, EmulatorConfig
from falcon_emulator.faults import Faults
from falcon_emulator.store import KubeStore, ResourceVersions
from falcon_emulator.util import JSON, numeric_id, rfc3339, rfc3339_micro

if TYPE_CHECKING:
    from falcon_emulator.processes import Process

GKE_BASE = "https://container.googleapis.com/v1"
COMPUTE_BASE = "https://www.googleapis.com/compute/v1"


@dataclass
class Reservation:
    project: str
    name: str
    zone: str
    machine_type: str
    count: int
    in_use: int = 0
    status: str = "READY"
    share_with: list[str] = field(default_factory=list)  # consumer projects besides the owner
    created: str = field(default_factory=rfc3339)

    @property
    def free(self) -> int:
        return self.count - self.in_use

    @property
    def self_link(self) -> str:
        return f"{COMPUTE_BASE}/projects/{self.project}/zones/{self.zone}/reservations/{self.name}"

    def shared_with(self, project: str) -> bool:
        return project == self.project or project in self.share_with

    def share_settings(self) -> JSON:
        """LOCAL, or SPECIFIC_PROJECTS with a projectMap keyed by project id (Compute ShareSettings)."""
        if not self.share_with:
            return {"shareType": "LOCAL"}
        projects = {p: {"projectId": p} for p in self.share_with}
        return {"shareType": "SPECIFIC_PROJECTS", "projectMap": projects}

    def to_json(self) -> JSON:
        return {
            "kind": "compute#reservation",
            "id": numeric_id(self.self_link),
            "name": self.name,
            "zone": f"{COMPUTE_BASE}/projects/{self.project}/zones/{self.zone}",
            "selfLink": self.self_link,
            "creationTimestamp": self.created,
            "status": self.status,
            "specificReservationRequired": True,
            "specificReservation": {
                "count": str(self.count),
                "inUseCount": str(self.in_use),
                "assuredCount": str(self.count),
                "instanceProperties": {"machineType": self.machine_type},
            },
            "shareSettings": self.share_settings(),
        }


@dataclass
class ResourcePolicy:
    """A regional Compute resource policy; a workload policy (workloadPolicy) places a TPU7x slice."""

    project: str
    region: str
    name: str
    body: JSON  # the ResourcePolicy as inserted (camelCase JSON)
    created: str = field(default_factory=rfc3339)

    @property
    def self_link(self) -> str:
        return f"{COMPUTE_BASE}/projects/{self.project}/regions/{self.region}/resourcePolicies/{self.name}"

    @property
    def workload_policy(self) -> JSON:
        policy: JSON = self.body.get("workloadPolicy", {})
        return policy

    def to_json(self) -> JSON:
        return dict(
            self.body,
            kind="compute#resourcePolicy",
            id=numeric_id(self.self_link),
            name=self.name,
            region=f"{COMPUTE_BASE}/projects/{self.project}/regions/{self.region}",
            selfLink=self.self_link,
            creationTimestamp=self.created,
            status="READY",
        )


@dataclass
class NodePool:
    name: str
    spec: JSON  # the NodePool as created (camelCase JSON, string enums)
    locations: list[str]  # the zones its nodes live in (validated at create)
    topology: str | None = None  # TPU topology of the slice (None for non-TPU machines)
    status: str = "PROVISIONING"
    status_message: str = ""
    conditions: list[JSON] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    taken: list[tuple[Reservation, int]] = field(default_factory=list)  # reservation capacity its nodes hold
    scale_up_at: float | None = None  # flex-start: when the pending scale-up lands
    noted_pods: set[str] = field(default_factory=set)  # pods already told NotTriggerScaleUp

    @property
    def config(self) -> JSON:
        config: JSON = self.spec.get("config", {})
        return config

    @property
    def machine_type(self) -> str:
        return str(self.config.get("machineType", "e2-medium"))

    @property
    def flex_start(self) -> bool:
        return bool(self.config.get("flexStart"))

    @property
    def reservation_ref(self) -> tuple[str | None, str] | None:
        """(owner project or None for the cluster's own, name) of a SPECIFIC_RESERVATION affinity."""
        affinity = self.config.get("reservationAffinity", {})
        if affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION" or not affinity.get("values"):
            return None
        value = str(affinity["values"][0])
        match = re.fullmatch(r"projects/([^/]+)/reservations/([^/]+)", value)
        return (match.group(1), match.group(2)) if match else (None, value)

    @property
    def mode(self) -> str:
        if self.reservation_ref is not None:
            return "reservation"
        if self.flex_start:
            return "flex-start"
        return "spot" if self.config.get("spot") else "standard"

    def zone_counts(self) -> dict[str, int]:
        """Nodes per zone when the create operation ends: initialNodeCount in every zone (it is per zone),
        else the autoscaling maximum (totalMaxNodeCount spread over the zones, maxNodeCount per zone)."""
        autoscaling = self.spec.get("autoscaling", {})
        per_zone = int(self.spec.get("initialNodeCount") or autoscaling.get("maxNodeCount") or 0)
        if per_zone or not autoscaling.get("totalMaxNodeCount"):
            return {zone: per_zone for zone in self.locations}
        total = int(autoscaling["totalMaxNodeCount"])
        share, extra = divmod(total, len(self.locations))
        return {zone: share + (i < extra) for i, zone in enumerate(self.locations)}

    @property
    def total_nodes(self) -> int:
        return sum(self.zone_counts().values())


@dataclass
class Operation:
    name: str
    project: str
    location: str
    cluster: str
    pool: str  # "" for a cluster-level operation
    op_type: str  # CREATE_NODE_POOL | DELETE_NODE_POOL | UPGRADE_MASTER
    done_at: float  # monotonic time the operation finishes
    status: str = "RUNNING"
    start: str = field(default_factory=rfc3339_micro)
    end: str = ""
    error: JSON | None = None

    @property
    def verb(self) -> str:
        return {"CREATE_NODE_POOL": "creating", "DELETE_NODE_POOL": "deleting"}.get(self.op_type, "upgrading")

    def to_json(self) -> JSON:
        base = f"{GKE_BASE}/projects/{self.project}/locations/{self.location}"
        body: JSON = {
            "name": self.name,
            "zone": self.location,
            "location": self.location,
            "operationType": self.op_type,
            "status": self.status,
            "selfLink": f"{base}/operations/{self.name}",
            "targetLink": f"{base}/clusters/{self.cluster}{f'/nodePools/{self.pool}' if self.pool else ''}",
            "startTime": self.start,
        }
        if self.end:
            body["endTime"] = self.end
        if self.error:
            body["error"] = dict(self.error, details=[])
            body["statusMessage"] = self.error["message"]
        return body


@dataclass
class PoolRecord:
    name: str
    time: str
    operation: str


@dataclass
class PodRuntime:
    """Kubelet bookkeeping for one bound pod."""

    key: tuple[str, str]  # (namespace, name)
    stage: str  # creating | pullfail | backoff | running | done | terminating
    next_at: float
    container_ends: dict[str, float] = field(default_factory=dict)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)  # container -> resolved environment
    processes: dict[str, Process] = field(default_factory=dict)  # container -> its process (runsCommands)
    exit_codes: dict[str, int] = field(default_factory=dict)  # container -> its process's exit status


@dataclass
class JobRuntime:
    """Job-controller bookkeeping: which pods were created and already counted."""

    known: set[str] = field(default_factory=set)
    counted: set[str] = field(default_factory=set)
    succeeded: int = 0
    failed: int = 0
    succeeded_indexes: set[int] = field(default_factory=set)


@dataclass
class ClusterState:
    project: str
    location: str
    name: str
    config: ClusterConfig
    store: KubeStore
    index: int
    node_pools: dict[str, NodePool] = field(default_factory=dict)
    created: list[PoolRecord] = field(default_factory=list)
    deleted: list[PoolRecord] = field(default_factory=list)
    pods: dict[str, PodRuntime] = field(default_factory=dict)  # by pod uid
    jobs: dict[str, JobRuntime] = field(default_factory=dict)  # by job uid
    events: dict[tuple[str, str, str], tuple[str, str]] = field(default_factory=dict)
    logs: dict[tuple[str, str], dict[str, str]] = field(
        default_factory=dict
    )  # (ns, pod) -> container -> text
    unschedulable_since: dict[str, float] = field(default_factory=dict)  # pod uid -> last FailedScheduling
    job_creations: Counter[str] = field(default_factory=Counter)  # "namespace/name" -> creations accepted
    job_creates_refused: int = 0  # Job POSTs refused because the name already existed (409)
    job_runs: defaultdict[str, set[str]] = field(
        default_factory=lambda: defaultdict(set)
    )  # name -> uids with pods
    next_ip: int = 2
    next_gc: float = 0.0  # monotonic time of the next event expiry sweep

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.project, self.location, self.name)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.name}"

    def allocate_ip(self) -> str:
        self.next_ip += 1
        return f"10.{self.index % 250}.{self.next_ip // 250}.{self.next_ip % 250 + 1}"


class EmulatorState:
    def __init__(self, config: EmulatorConfig, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        self.lock = threading.RLock()
        self.versions = ResourceVersions()
        self.clusters: dict[tuple[str, str, str], ClusterState] = {}
        self.reservations: dict[tuple[str, str, str], Reservation] = {}  # (project, zone, name)
        self.resource_policies: dict[tuple[str, str, str], ResourcePolicy] = {}  # (project, region, name)
        self.compute_operations: dict[tuple[str, str], JSON] = {}  # (project, name) -> Compute Operation
        self.operations: dict[str, Operation] = {}
        self.faults = Faults()
        self.shutting_down = False  # set once; the Kubernetes API then refuses new requests
        self._load(config)

    def _load(self, config: EmulatorConfig) -> None:
        for project, pconf in config.projects.items():
            for name, rconf in pconf.reservations.items():
                reservation = Reservation(
                    project,
                    name,
                    rconf.zone,
                    rconf.machine_type,
                    rconf.count,
                    rconf.in_use_count,
                    rconf.status,
                    list(rconf.share_with),
                )
                self.reservations[(project, rconf.zone, name)] = reservation
            for name, cconf in pconf.clusters.items():
                store = KubeStore(self.versions, config.watch_history_size)
                cluster = ClusterState(project, cconf.location, name, cconf, store, len(self.clusters) + 1)
                self.clusters[cluster.key] = cluster

    def cluster(self, project: str, location: str, name: str) -> ClusterState | None:
        return self.clusters.get((project, location, name))

    def gke_version(self, cluster: ClusterState) -> str:
        return cluster.config.gke_version or self.config.gke_version

    def active_operations(self, cluster: ClusterState) -> list[Operation]:
        """The cluster's operations still running (node pools', and cluster-level ones), oldest first."""
        return [
            op
            for op in self.operations.values()
            if op.status != "DONE" and (op.project, op.location, op.cluster) == cluster.key
        ]

    @staticmethod
    def now() -> float:
        return time.monotonic()
