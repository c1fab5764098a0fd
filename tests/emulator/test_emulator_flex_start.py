"""Flex-start pools: 0 nodes until a pending pod needs the slice, then the whole slice at once."""

from __future__ import annotations

from collections.abc import Callable

from emu_helpers import (
    Kube,
    condition_types,
    container,
    create_pool,
    events_for,
    job,
    job_finished,
    pods_of,
    tpu_pool,
    wait_for,
)
from google.cloud import container_v1
from kubernetes import client as k8s

V6E_2X4 = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "2x4",
}


def flex_pool(name: str) -> container_v1.NodePool:
    pool = tpu_pool(name, nodes=0, topology="2x4", flex_start=True)
    pool.autoscaling = container_v1.NodePoolAutoscaling(
        enabled=True,
        total_max_node_count=2,
        location_policy=container_v1.NodePoolAutoscaling.LocationPolicy.ANY,
    )
    return pool


def slice_job(kube: Kube, name: str) -> k8s.V1Job:
    """An Indexed Job over the 2-host slice, with the headless Service its workers rendezvous through."""
    service = k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name=f"{name}-workers"),
        spec=k8s.V1ServiceSpec(cluster_ip="None", selector={"batch.kubernetes.io/job-name": name}),
    )
    kube.core.create_namespaced_service("default", service)
    spec = job(
        name,
        [container(tpus=4, env={"EMULATOR_RUN_SECONDS": "0.3"})],
        node_selector=V6E_2X4,
        tpu=True,
        completion_mode="Indexed",
        completions=2,
        parallelism=2,
        backoff_limit=0,
    )
    spec.spec.template.spec.subdomain = f"{name}-workers"
    return spec


def test_flex_start_pool_scales_up_the_whole_slice_for_pending_pods_which_then_run(
    gke: container_v1.ClusterManagerClient, kube_for: Callable[[str], Kube]
) -> None:
    kube = kube_for("flex")
    done = create_pool(gke, "flex", flex_pool("flex-2x4"))
    assert not done.error.code
    assert kube.core.list_node().items == []

    kube.batch.create_namespaced_job("default", slice_job(kube, "flexjob"))
    nodes = wait_for(lambda: kube.core.list_node().items)
    assert len(nodes) == 2  # atomic: both hosts of the slice together
    assert all(n.metadata.labels["cloud.google.com/gke-flex-start"] == "true" for n in nodes)
    finished = wait_for(lambda: job_finished(kube, "default", "flexjob"))
    assert "Complete" in condition_types(finished)
    pod = pods_of(kube, "default", "flexjob")[0]
    reasons = {e.reason for e in events_for(kube, "default", pod.metadata.name)}
    assert {"FailedScheduling", "TriggeredScaleUp", "Scheduled"} <= reasons


def test_flex_start_unavailable_leaves_pods_pending_unschedulable_with_failed_scheduling(
    gke: container_v1.ClusterManagerClient, kube_for: Callable[[str], Kube]
) -> None:
    kube = kube_for("noflex")
    create_pool(gke, "noflex", flex_pool("flex-none"))
    kube.batch.create_namespaced_job("default", slice_job(kube, "stuck"))
    pods = wait_for(lambda: pods_of(kube, "default", "stuck"))

    def unschedulable() -> bool:
        pod = kube.core.read_namespaced_pod(pods[0].metadata.name, "default")
        scheduled = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
        return bool(scheduled) and scheduled[0].status == "False" and scheduled[0].reason == "Unschedulable"

    wait_for(unschedulable)
    wait_for(
        lambda: "NotTriggerScaleUp" in {e.reason for e in events_for(kube, "default", pods[0].metadata.name)}
    )
    assert kube.core.list_node().items == []
    events = events_for(kube, "default", pods[0].metadata.name)
    failed = [e for e in events if e.reason == "FailedScheduling"]
    assert len(failed) == 1 and failed[0].type == "Warning"
    assert all(p.status.phase == "Pending" for p in pods_of(kube, "default", "stuck"))
