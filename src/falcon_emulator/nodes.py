"""What GKE puts on a node: TPU labels, taints and allocatable derived from the node pool."""

from __future__ import annotations

import re
from dataclasses import dataclass

from falcon.domain.topology import GENERATIONS
from falcon_emulator.state import ClusterState, NodePool
from falcon_emulator.util import JSON, random_hex, random_suffix, rfc3339

TPU_RESOURCE = "google.com/tpu"
_TAINT_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
    "NO_EXECUTE": "NoExecute",
}
_DEFAULT_2D = {1: "1x1", 4: "2x2", 8: "2x4"}
_DEFAULT_3D = {1: "1x1x1", 4: "2x2x1", 8: "2x4x1"}


@dataclass(frozen=True)
class MachineInfo:
    machine_type: str
    accelerator: str | None  # cloud.google.com/gke-tpu-accelerator, None for non-TPU machines
    chips: int  # google.com/tpu per VM
    dims: int


def machine_info(machine_type: str) -> MachineInfo:
    match = re.fullmatch(r"(.+)-(\d+)t", machine_type)
    if match:
        for generation in GENERATIONS.values():
            if generation.machine_prefix == match.group(1):
                return MachineInfo(
                    machine_type, generation.accelerator_label, int(match.group(2)), generation.dims
                )
    return MachineInfo(machine_type, None, 0, 2)


def pool_topology(pool: NodePool, info: MachineInfo) -> str | None:
    """tpuTopology, else a trailing AxB[xC] of the workload policy name, else the single-host default."""
    if info.accelerator is None:
        return None
    placement = pool.spec.get("placementPolicy", {})
    if placement.get("tpuTopology"):
        return str(placement["tpuTopology"])
    match = re.search(r"(\d+x\d+(?:x\d+)?)$", str(placement.get("policyName", "")))
    if match:
        return match.group(1)
    defaults = _DEFAULT_3D if info.dims == 3 else _DEFAULT_2D
    return defaults.get(info.chips, f"{info.chips}x1")


def node_zone(cluster: ClusterState, pool: NodePool) -> str:
    if pool.reservation is not None:
        return pool.reservation.zone
    locations = pool.spec.get("locations") or cluster.config.node_zones()
    return str(locations[0])


def node_labels(cluster: ClusterState, pool: NodePool, name: str = "") -> dict[str, str]:
    info = machine_info(pool.machine_type)
    zone = node_zone(cluster, pool)
    labels = {
        "cloud.google.com/gke-nodepool": pool.name,
        "cloud.google.com/gke-provisioning": {"flex-start": "flex-start", "spot": "spot"}.get(
            pool.mode, "standard"
        ),
        "cloud.google.com/machine-family": pool.machine_type.split("-")[0],
        "node.kubernetes.io/instance-type": pool.machine_type,
        "topology.kubernetes.io/region": cluster.location if zone.count("-") < 2 else zone.rsplit("-", 1)[0],
        "topology.kubernetes.io/zone": zone,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    if name:
        labels["kubernetes.io/hostname"] = name
    if info.accelerator:
        labels["cloud.google.com/gke-tpu-accelerator"] = info.accelerator
        labels["cloud.google.com/gke-tpu-topology"] = pool_topology(pool, info) or ""
    if pool.flex_start:
        labels["cloud.google.com/gke-flex-start"] = "true"
    if pool.config.get("spot"):
        labels["cloud.google.com/gke-spot"] = "true"
    ref = pool.reservation_ref
    if ref is not None:
        labels["cloud.google.com/reservation-name"] = ref[1]
    labels.update({str(k): str(v) for k, v in pool.config.get("labels", {}).items()})
    return labels


def node_taints(pool: NodePool) -> list[JSON]:
    taints: list[JSON] = []
    if machine_info(pool.machine_type).accelerator:
        taints.append({"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
    for taint in pool.config.get("taints", []):
        effect = _TAINT_EFFECTS.get(str(taint.get("effect", "")), "NoSchedule")
        taints.append({"key": taint.get("key", ""), "value": taint.get("value", ""), "effect": effect})
    return taints


def allocatable(pool: NodePool) -> dict[str, str]:
    info = machine_info(pool.machine_type)
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    if info.accelerator:
        resources.update(
            cpu="180" if info.chips >= 4 else "44", memory="720Gi", **{TPU_RESOURCE: str(info.chips)}
        )
    return resources


def template_node(cluster: ClusterState, pool: NodePool) -> JSON:
    """The node a scale-up of this pool would create (used to decide whether a pending pod fits)."""
    return {
        "metadata": {"name": f"template-{pool.name}", "labels": node_labels(cluster, pool)},
        "spec": {"taints": node_taints(pool)},
        "status": {"allocatable": allocatable(pool), "conditions": [{"type": "Ready", "status": "True"}]},
    }


def new_node_name(cluster: ClusterState, pool: NodePool) -> str:
    return f"gke-{cluster.name}-{pool.name}-{random_hex(8)}-{random_suffix(4)}"[:63]


def build_node(cluster: ClusterState, pool: NodePool, name: str) -> JSON:
    now = rfc3339()
    ip = cluster.allocate_ip()
    resources = allocatable(pool)
    return {
        "metadata": {"name": name, "labels": node_labels(cluster, pool, name), "annotations": {}},
        "spec": {
            "taints": node_taints(pool),
            "providerID": f"gce://{cluster.project}/{node_zone(cluster, pool)}/{name}",
            "podCIDR": "10.100.0.0/24",
        },
        "status": {
            "capacity": dict(resources),
            "allocatable": resources,
            "phase": "Running",
            "conditions": _node_conditions(now),
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": _node_info(name),
        },
    }


def _node_conditions(now: str) -> list[JSON]:
    conditions = []
    for kind, status, reason in (
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    ):
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": reason,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
    return conditions


def _node_info(name: str) -> JSON:
    return {
        "architecture": "amd64",
        "bootID": random_hex(32),
        "containerRuntimeVersion": "containerd://1.7.24",
        "kernelVersion": "6.6.72+",
        "kubeProxyVersion": "v1.33.5-gke.1080000",
        "kubeletVersion": "v1.33.5-gke.1080000",
        "machineID": random_hex(32),
        "operatingSystem": "linux",
        "osImage": "Container-Optimized OS from Google",
        "systemUUID": f"emulated-{name}",
    }
