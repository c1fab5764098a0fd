"""Test configuration and helpers shared by the emulator tests (official clients only)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from google.cloud import container_v1
from kubernetes import client as k8s

PROJECT = "proj-a"
LOCATION = "us-east5"
ZONE = "us-east5-b"

T = TypeVar("T")


OWNER = "proj-owner"  # owns reservations shared with PROJECT
CENTRAL = "us-central1"  # TPU7x (us-central1-c), v5e (us-central1-a) and v6e (us-central1-b) live here
NEW_GKE = "1.34.1-gke.1829001"


def _cluster(
    delay: float = 0.4,
    available: bool = True,
    location: str = LOCATION,
    zones: list[str] | None = None,
    version: str | None = None,
) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "location": location,
        "zones": [ZONE] if zones is None else zones,
        "flexStart": {"available": available, "delaySeconds": delay},
    }
    if version:
        cluster["gkeVersion"] = version
    return cluster


_CLUSTERS = (
    "pools",
    "concurrent",
    "reserved",
    "stockout",
    "faults",
    "raw",
    "work",
    "flex",
    "lost",
    "load",
    "rules",
    "upgrading",
)
_CENTRAL_ZONES = [f"{CENTRAL}-a", f"{CENTRAL}-b", f"{CENTRAL}-c"]
_RULE_CLUSTERS = {
    # regional, three zones of which only a and b offer v6e
    "regional": _cluster(zones=[f"{LOCATION}-a", ZONE, f"{LOCATION}-c"]),
    "zonal": _cluster(location=ZONE, zones=[]),
    "shapes": _cluster(location=CENTRAL, zones=_CENTRAL_ZONES, version=NEW_GKE),
    "ironwood": _cluster(location=CENTRAL, zones=_CENTRAL_ZONES, version=NEW_GKE),
    "ironwood-old": _cluster(location=CENTRAL, zones=_CENTRAL_ZONES, version="1.34.0-gke.1662000"),
    # flex-start for TPUs needs 1.33.0-gke.1712000: gke.999000 is older although it sorts later as text
    "flex-old": _cluster(version="1.33.0-gke.999000"),
    "flex-min": _cluster(version="1.33.0-gke.1712000"),
}


def _reservation(
    count: int = 4, zone: str = ZONE, machine: str = "ct6e-standard-4t", **extra: Any
) -> dict[str, Any]:
    return {"zone": zone, "machineType": machine, "count": count, **extra}


TEST_CONFIG: dict[str, Any] = {
    "nodePoolProvisionSeconds": 0.3,
    "podStartSeconds": 0.2,
    "defaultRunSeconds": 0.5,
    "imagePullBackoffSeconds": 0.2,
    "tickSeconds": 0.05,
    "schedulerEventRefreshSeconds": 0.5,
    "someFutureKnob": "ignored",
    # the docs list v5e in us-central1-a but not us-east5-b; the tests reshape that offer
    "tpuZones": {"ct5lp-hightpu-4t": [ZONE]},
    "projects": {
        PROJECT: {
            "reservations": {
                "res-big": _reservation(8),
                "res-small": _reservation(2),
                "res-zone-a": _reservation(zone=f"{LOCATION}-a"),
                "res-creating": _reservation(status="CREATING"),
                "res-v5e": _reservation(machine="ct5lp-hightpu-4t"),
            },
            "clusters": {name: _cluster() for name in _CLUSTERS}
            | {"noflex": _cluster(available=False)}
            | _RULE_CLUSTERS,
        },
        OWNER: {
            "reservations": {
                "res-shared": _reservation(shareWith=[PROJECT]),
                "res-private": _reservation(),
            }
        },
        "proj-b": {"clusters": {"edge-b": {"location": "us-central1"}}},
    },
}


@dataclass
class Kube:
    api: k8s.ApiClient
    core: k8s.CoreV1Api
    batch: k8s.BatchV1Api
    path: str


def cluster_name(cluster: str, project: str = PROJECT, location: str = LOCATION) -> str:
    return f"projects/{project}/locations/{location}/clusters/{cluster}"


def wait_for(check: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def wait_operation(
    gke: container_v1.ClusterManagerClient, op: container_v1.Operation
) -> container_v1.Operation:
    name = f"projects/{PROJECT}/locations/{op.location or LOCATION}/operations/{op.name}"

    def done() -> container_v1.Operation | None:
        current = gke.get_operation(name=name, timeout=5)
        return current if current.status == container_v1.Operation.Status.DONE else None

    return wait_for(done)


def tpu_pool(
    name: str,
    machine_type: str = "ct6e-standard-4t",
    nodes: int = 1,
    topology: str | None = None,
    locations: list[str] | None = None,
    **config: Any,
) -> container_v1.NodePool:
    pool = container_v1.NodePool(
        name=name,
        initial_node_count=nodes,
        locations=locations or [],
        config=container_v1.NodeConfig(machine_type=machine_type, **config),
    )
    if topology:
        pool.placement_policy = container_v1.NodePool.PlacementPolicy(
            type_=container_v1.NodePool.PlacementPolicy.Type.COMPACT, tpu_topology=topology
        )
    return pool


def create_pool(
    gke: container_v1.ClusterManagerClient,
    cluster: str,
    pool: container_v1.NodePool,
    location: str = LOCATION,
) -> container_v1.Operation:
    op = gke.create_node_pool(parent=cluster_name(cluster, location=location), node_pool=pool, timeout=5)
    return wait_operation(gke, op)


def container(
    name: str = "main",
    image: str = "busybox:1.36",
    env: dict[str, str] | None = None,
    tpus: int = 0,
    extra_env: list[k8s.V1EnvVar] | None = None,
    **kw: Any,
) -> k8s.V1Container:
    resources = k8s.V1ResourceRequirements(limits={"google.com/tpu": str(tpus)}) if tpus else None
    env_vars = [k8s.V1EnvVar(name=k, value=v) for k, v in (env or {}).items()]
    return k8s.V1Container(
        name=name, image=image, env=env_vars + (extra_env or []), resources=resources, **kw
    )


def job(
    name: str,
    containers: list[k8s.V1Container] | None = None,
    node_selector: dict[str, str] | None = None,
    tpu: bool = False,
    volumes: list[k8s.V1Volume] | None = None,
    **spec: Any,
) -> k8s.V1Job:
    """A Job with restartPolicy Never; TPU jobs tolerate the TPU taint, others go to the 'cpu' pool."""
    tolerations = (
        [k8s.V1Toleration(key="google.com/tpu", operator="Exists", effect="NoSchedule")] if tpu else None
    )
    selector = node_selector or (None if tpu else {"cloud.google.com/gke-nodepool": "cpu"})
    pod_spec = k8s.V1PodSpec(
        restart_policy="Never",
        containers=containers or [container()],
        node_selector=selector,
        tolerations=tolerations,
        volumes=volumes,
    )
    return k8s.V1Job(
        metadata=k8s.V1ObjectMeta(name=name, labels={"app": "falcon-test"}),
        spec=k8s.V1JobSpec(template=k8s.V1PodTemplateSpec(spec=pod_spec), **spec),
    )


def job_finished(kube: Kube, namespace: str, name: str) -> k8s.V1Job | None:
    current = kube.batch.read_namespaced_job(name, namespace)
    conditions = current.status.conditions or []
    done = any(c.type in ("Complete", "Failed") and c.status == "True" for c in conditions)
    return current if done else None


def condition_types(job_obj: k8s.V1Job) -> list[str]:
    return [c.type for c in job_obj.status.conditions or [] if c.status == "True"]


def pods_of(kube: Kube, namespace: str, job_name: str) -> list[k8s.V1Pod]:
    items: list[k8s.V1Pod] = kube.core.list_namespaced_pod(
        namespace, label_selector=f"batch.kubernetes.io/job-name={job_name}"
    ).items
    return items


def events_for(kube: Kube, namespace: str, name: str) -> list[k8s.CoreV1Event]:
    items: list[k8s.CoreV1Event] = kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    ).items
    return items


def admin(url: str, path: str, method: str = "GET", body: Any = None) -> Any:
    """The emulator's own admin endpoints (not part of any real API)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data=data, method=method)
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def counters(url: str, cluster: str) -> dict[str, Any]:
    """One emulated cluster's counters (Job creations, runs, refusals) from the admin state."""
    state = admin(url, "/emulator/state")
    found: dict[str, Any] = next(c for c in state["clusters"] if c["name"] == cluster)["counters"]
    return found
