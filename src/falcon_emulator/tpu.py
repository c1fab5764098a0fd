"""What GKE does for TPU pods beyond scheduling: the TPU webhook's worker environment, and whether the
TPU runtime of a multi-host slice can reach its workers.

Webhook (GKE "Deploy TPU workloads in GKE Standard", multi-host section): when a Job with
``completionMode: Indexed``, a pod-template ``subdomain`` and ``parallelism > 1`` creates pods that request
``google.com/tpu``, GKE's mutating webhook adds to each TPU container ``TPU_WORKER_ID`` (the completion
index) and ``TPU_WORKER_HOSTNAMES`` (``<job>-<i>.<subdomain>`` for every index). Nothing else injects them
for a multi-host slice: GKE's TPU device plugin sets ``TPU_WORKER_ID=0`` / ``TPU_WORKER_HOSTNAMES=localhost``
only for single-host slices (its InitEnvs table).

Rendezvous: the workers of a multi-host slice (topology chips / chips per VM > 1 hosts) find each other
through those hostnames. ``<hostname>.<subdomain>`` resolves only when a headless Service named as the
subdomain exists in the pod's namespace and selects that pod (kubernetes.io "DNS for Services and Pods",
"Job with Pod-to-Pod Communication"). Until every worker resolves, libtpu waits: the container runs but
never finishes and is not Ready.
"""

from __future__ import annotations

import math

from falcon_emulator.k8s_objects import INDEX_ANNOTATION
from falcon_emulator.pods import TPU_RESOURCE, container_tpus
from falcon_emulator.state import ClusterState
from falcon_emulator.util import JSON

TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
WORKER_ID = "TPU_WORKER_ID"
WORKER_HOSTNAMES = "TPU_WORKER_HOSTNAMES"


def _owning_job(cluster: ClusterState, pod: JSON) -> JSON | None:
    meta = pod["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller"):
            job = cluster.store.get("jobs", meta["namespace"], ref.get("name", ""))
            if job is not None and job["metadata"]["uid"] == ref.get("uid"):
                return job
    return None


def inject_worker_env(cluster: ClusterState, pod: JSON) -> None:
    """GKE's TPU webhook on pod creation (the conditions are in the module docstring)."""
    subdomain = pod["spec"].get("subdomain")
    index = (pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION)
    job = _owning_job(cluster, pod)
    if not subdomain or index is None or job is None:
        return
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed" or int(spec.get("parallelism", 1)) <= 1:
        return
    name = job["metadata"]["name"]
    hosts = ",".join(f"{name}-{i}.{subdomain}" for i in range(int(spec.get("completions") or 0)))
    for container in pod["spec"]["containers"]:
        if container_tpus(container) <= 0:
            continue
        env = container.setdefault("env", [])
        present = {var.get("name") for var in env}
        for var, value in ((WORKER_ID, str(index)), (WORKER_HOSTNAMES, hosts)):
            if var not in present:
                env.append({"name": var, "value": value})


def slice_hosts(node: JSON) -> int:
    """VMs in the node's TPU slice: chips of the topology label / google.com/tpu per VM."""
    topology = (node["metadata"].get("labels") or {}).get(TOPOLOGY_LABEL, "")
    chips_per_vm = int(node["status"].get("allocatable", {}).get(TPU_RESOURCE, 0) or 0)
    dims = topology.split("x")
    if chips_per_vm <= 0 or not all(d.isdigit() for d in dims):
        return 1
    return max(1, math.prod(int(d) for d in dims) // chips_per_vm)


def unreachable_workers(cluster: ClusterState, pod: JSON, env: dict[str, str]) -> str | None:
    """Why this TPU container cannot complete its slice's rendezvous yet (None: it can, or is single-host)."""
    node = cluster.store.get("nodes", "", pod["spec"].get("nodeName") or "")
    hosts = slice_hosts(node) if node is not None else 1
    if hosts <= 1:
        return None
    names = [h for h in env.get(WORKER_HOSTNAMES, "").split(",") if h]
    if not names:
        return f"{WORKER_HOSTNAMES} is not set; the slice has {hosts} hosts"
    if len(names) != hosts:
        return f"{WORKER_HOSTNAMES} lists {len(names)} workers; the slice has {hosts} hosts"
    worker = env.get(WORKER_ID, "")
    if not worker.isdigit() or int(worker) >= hosts:
        return f"{WORKER_ID}={worker!r} is not a worker of a {hosts}-host slice"
    namespace = pod["metadata"]["namespace"]
    published = published_names(cluster, namespace)
    for name in names:
        parts = name.split(".")
        if ".".join(parts[:2]) not in published or (len(parts) > 2 and parts[2] != namespace):
            return f"cannot resolve worker {name}"
    return None


def published_names(cluster: ClusterState, namespace: str) -> set[str]:
    """``<hostname>.<subdomain>`` names cluster DNS answers in the namespace: Running pods with that hostname
    and subdomain, selected by the headless Service of that name. Running pods are published whether Ready or
    not (a pod without a readiness probe is Ready as soon as it runs)."""
    selectors = {
        service["metadata"]["name"]: spec.get("selector") or {}
        for service in cluster.store.iter("services", namespace)
        if (spec := service.get("spec") or {}).get("clusterIP") == "None" and spec.get("selector")
    }
    names = set()
    for pod in cluster.store.iter("pods", namespace):
        hostname, subdomain = pod["spec"].get("hostname"), pod["spec"].get("subdomain")
        selector = selectors.get(subdomain or "")
        running = pod["status"].get("phase") == "Running" and pod["status"].get("podIP")
        labels = pod["metadata"].get("labels") or {}
        if hostname and selector and running and all(labels.get(k) == v for k, v in selector.items()):
            names.add(f"{hostname}.{subdomain}")
    return names
