"""What GKE puts on a node: TPU labels, taints and allocatable derived from the node pool."""

from __future__ import annotations

from falcon_emulator.state import ClusterState, NodePool
from falcon_emulator.tpu_catalog import tpu_machine
from falcon_emulator.util import JSON, random_hex, random_suffix, rfc3339

TPU_RESOURCE = "google.com/tpu"
_TAINT_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
    "NO_EXECUTE": "NoExecute",
}


def node_labels(pool: NodePool, zone: str, name: str = "") -> dict[str, str]:
    machine = tpu_machine(pool.machine_type)
    labels = {
        "cloud.google.com/gke-nodepool": pool.name,
        "cloud.google.com/gke-provisioning": {"flex-start": "flex-start", "spot": "spot"}.get(
            pool.mode, "standard"
        ),
        "cloud.google.com/machine-family": pool.machine_type.split("-")[0],
        "node.kubernetes.io/instance-type": pool.machine_type,
        "topology.kubernetes.io/region": zone.rsplit("-", 1)[0],
        "topology.kubernetes.io/zone": zone,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    if name:
        labels["kubernetes.io/hostname"] = name
    if machine is not None:
        labels["cloud.google.com/gke-tpu-accelerator"] = machine.accelerator
        labels["cloud.google.com/gke-tpu-topology"] = pool.topology or machine.single_host_topology
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
    if tpu_machine(pool.machine_type) is not None:
        taints.append({"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
    for taint in pool.config.get("taints", []):
        effect = _TAINT_EFFECTS.get(str(taint.get("effect", "")), "NoSchedule")
        taints.append({"key": taint.get("key", ""), "value": taint.get("value", ""), "effect": effect})
    return taints


def allocatable(pool: NodePool) -> dict[str, str]:
    machine = tpu_machine(pool.machine_type)
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    if machine is not None:
        resources.update(
            cpu="180" if machine.chips >= 4 else "44", memory="720Gi", **{TPU_RESOURCE: str(machine.chips)}
        )
    return resources


def template_node(pool: NodePool) -> JSON:
    """The node a scale-up of this pool would create (used to decide whether a pending pod fits)."""
    return {
        "metadata": {
            "name": f"template-{pool.name}",
            "labels": node_labels(pool, pool.locations[0]),
        },
        "spec": {"taints": node_taints(pool)},
        "status": {"allocatable": allocatable(pool), "conditions": [{"type": "Ready", "status": "True"}]},
    }


def new_node_name(cluster: ClusterState, pool: NodePool) -> str:
    return f"gke-{cluster.name}-{pool.name}-{random_hex(8)}-{random_suffix(4)}"[:63]


def build_node(cluster: ClusterState, pool: NodePool, name: str, zone: str, version: str) -> JSON:
    now = rfc3339()
    ip = cluster.allocate_ip()
    resources = allocatable(pool)
    return {
        "metadata": {"name": name, "labels": node_labels(pool, zone, name), "annotations": {}},
        "spec": {
            "taints": node_taints(pool),
            "providerID": f"gce://{cluster.project}/{zone}/{name}",
            "podCIDR": "10.100.0.0/24",
        },
        "status": {
            "capacity": dict(resources),
            "allocatable": resources,
            "phase": "Running",
            "conditions": _node_conditions(now),
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": _node_info(name, version),
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


def _node_info(name: str, version: str) -> JSON:
    return {
        "architecture": "amd64",
        "bootID": random_hex(32),
        "containerRuntimeVersion": "containerd://1.7.24",
        "kernelVersion": "6.6.72+",
        "kubeProxyVersion": f"v{version}",
        "kubeletVersion": f"v{version}",
        "machineID": random_hex(32),
        "operatingSystem": "linux",
        "osImage": "Container-Optimized OS from Google",
        "systemUUID": f"emulated-{name}",
    }
