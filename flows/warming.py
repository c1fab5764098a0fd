"""The warm-pool flow: bring one queue's idle node pools up to its tidal warm target.

Started by the dispatcher (``Warmer``) for a queue short of its target, or with warm pools a dead
run left being created. Plan (decide placement, record each pool before GKE is asked), retried
on TemporaryError like a task's provisioning; then create and wait, a loop that owns its waits.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from falcon.adapters.runs import tag_run
from falcon.bootstrap import services
from falcon.domain.lifecycle import RunStopped
from falcon.tasks import create_warm_pools, plan_warm_pools, queue_tags, retried


@flow(name="warm-pools", flow_run_name="warm-{cluster_id}-{topology}")
def warm_pools(cluster_id: str, topology: str) -> list[str]:
    tag_run(queue_tags(cluster_id, topology))
    names = retried(plan_warm_pools, services().settings.node_pool_retry)(cluster_id, topology)
    try:
        ready = create_warm_pools(cluster_id, topology, names) if names else []
    except RunStopped:  # the pools stay recorded as being created: the next run resumes them
        return []
    get_run_logger().info(
        "event=warm_pools cluster_id=%s topology=%s recorded=%s ready=%s", cluster_id, topology, names, ready
    )
    return ready
