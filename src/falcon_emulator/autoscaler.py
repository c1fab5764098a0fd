"""Cluster-autoscaler for flex-start pools: a pending pod that only fits an empty flex pool brings the
whole slice (autoscaling max nodes, atomically) after the cluster's flexStart.delaySeconds."""

from __future__ import annotations

from falcon_emulator.events import record_event
from falcon_emulator.nodepools import add_nodes
from falcon_emulator.nodes import template_node
from falcon_emulator.pods import condition
from falcon_emulator.scheduler import misfit, pending_pods
from falcon_emulator.state import ClusterState, EmulatorState, NodePool
from falcon_emulator.util import JSON


def autoscale(state: EmulatorState, cluster: ClusterState, now: float) -> None:
    _land_scale_ups(state, cluster, now)
    pools = [p for p in cluster.node_pools.values() if _scalable(p)]
    if not pools:
        return
    for pod in pending_pods(cluster):
        scheduled = condition(pod, "PodScheduled")
        if scheduled is None or scheduled.get("reason") != "Unschedulable":
            continue
        for pool in pools:
            if misfit(pod, template_node(pool), 0, 0) is None:
                _trigger(cluster, pool, pod, now)
                break


def _scalable(pool: NodePool) -> bool:
    return pool.flex_start and pool.status == "RUNNING" and not pool.nodes


def _slice_size(pool: NodePool) -> int:
    return pool.total_nodes or 1


def _trigger(cluster: ClusterState, pool: NodePool, pod: JSON, now: float) -> None:
    flex = cluster.config.flex_start
    group = (
        f"https://www.googleapis.com/compute/v1/projects/{cluster.project}/zones/{pool.locations[0]}"
        f"/instanceGroups/gke-{cluster.name}-{pool.name}-grp"
    )
    size = _slice_size(pool)
    uid = pod["metadata"]["uid"]
    if uid in pool.noted_pods:
        return
    pool.noted_pods.add(uid)
    if not flex.available:
        message = f"pod didn't trigger scale-up: 1 flex-start capacity unavailable in {group}"
        record_event(cluster, pod, "NotTriggerScaleUp", message, component="cluster-autoscaler")
        return
    if pool.scale_up_at is None:
        pool.scale_up_at = now + flex.delay_seconds
    message = f"pod triggered scale-up: [{{{group} 0->{size} (max: {size})}}]"
    record_event(cluster, pod, "TriggeredScaleUp", message, component="cluster-autoscaler")


def _land_scale_ups(state: EmulatorState, cluster: ClusterState, now: float) -> None:
    for pool in cluster.node_pools.values():
        if pool.scale_up_at is not None and now >= pool.scale_up_at:
            pool.scale_up_at = None
            if pool.status == "RUNNING" and not pool.nodes:
                add_nodes(state, cluster, pool, pool.locations[0], _slice_size(pool))
