"""Pod deletion, node-pool deletion under running pods, and many Jobs at once."""

from __future__ import annotations

from collections.abc import Callable

from emu_helpers import (
    Kube,
    cluster_name,
    condition_types,
    container,
    create_pool,
    job,
    job_finished,
    pods_of,
    tpu_pool,
    wait_for,
    wait_operation,
)
from google.cloud import container_v1


def test_deleting_a_running_pod_fails_it_and_the_job_replaces_it(work: Kube, namespace: str) -> None:
    work.batch.create_namespaced_job(
        namespace, job("replace", [container(env={"EMULATOR_RUN_SECONDS": "30"})])
    )
    first = wait_for(lambda: [p for p in pods_of(work, namespace, "replace") if p.status.phase == "Running"])[
        0
    ]
    deleted = work.core.delete_namespaced_pod(first.metadata.name, namespace)
    assert deleted.metadata.deletion_timestamp is not None
    names = wait_for(
        lambda: {p.metadata.name for p in pods_of(work, namespace, "replace")} - {first.metadata.name} or None
    )
    assert len(names) == 1
    assert wait_for(lambda: work.batch.read_namespaced_job("replace", namespace).status.failed) == 1
    work.batch.delete_namespaced_job("replace", namespace, propagation_policy="Background")


def test_deleting_a_node_pool_removes_its_nodes_and_fails_their_pods(
    gke: container_v1.ClusterManagerClient, kube_for: Callable[[str], Kube]
) -> None:
    kube = kube_for("lost")
    create_pool(gke, "lost", tpu_pool("doomed", machine_type="e2-standard-4", nodes=1))
    spec = job("victim", [container(env={"EMULATOR_RUN_SECONDS": "30"})], backoff_limit=0)
    spec.spec.template.spec.node_selector = {"cloud.google.com/gke-nodepool": "doomed"}
    kube.batch.create_namespaced_job("default", spec)
    wait_for(lambda: [p for p in pods_of(kube, "default", "victim") if p.status.phase == "Running"])
    wait_operation(gke, gke.delete_node_pool(name=f"{cluster_name('lost')}/nodePools/doomed", timeout=5))
    assert kube.core.list_node().items == []
    [pod] = pods_of(kube, "default", "victim")
    assert pod.status.phase == "Failed"
    assert any(c.type == "DisruptionTarget" and c.status == "True" for c in pod.status.conditions)
    finished = wait_for(lambda: job_finished(kube, "default", "victim"))
    assert condition_types(finished)[-1] == "Failed"


def test_two_hundred_jobs_all_run_to_complete(
    gke: container_v1.ClusterManagerClient, kube_for: Callable[[str], Kube]
) -> None:
    kube = kube_for("load")
    create_pool(gke, "load", tpu_pool("cpu", machine_type="e2-standard-4", nodes=2))
    for i in range(200):
        kube.batch.create_namespaced_job(
            "default", job(f"bulk-{i}", node_selector={"kubernetes.io/os": "linux"})
        )

    def all_complete() -> bool:
        jobs = kube.batch.list_namespaced_job("default").items
        return len(jobs) == 200 and all("Complete" in condition_types(j) for j in jobs)

    wait_for(all_complete, timeout=20, interval=0.3)
    assert len(kube.core.list_namespaced_pod("default", field_selector="status.phase=Succeeded").items) == 200
