"""Starting the per-task flow runs and the queues' warm-pool runs, and telling whether one is alive.

``DeploymentLauncher`` is production: ``run_deployment(timeout=0)`` with an idempotency key per
(task, attempt), so a dispatcher that restarts mid-launch can never start a second run. A warm
run needs none: a second one for the same queue counts again under the cluster's lock and
creates nothing the first did.
"""

from __future__ import annotations

from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment

from falcon.domain.model import QueueKey

ACQUIRE_DEPLOYMENT = "task-lifecycle/task-lifecycle"
RELEASE_DEPLOYMENT = "task-release/task-release"
WARM_DEPLOYMENT = "warm-pools/warm-pools"


class DeploymentLauncher:
    def __init__(self, as_subflow: bool = True) -> None:
        self._as_subflow = as_subflow

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        run = run_deployment(
            ACQUIRE_DEPLOYMENT,
            parameters={"task_id": task_id, "lease_id": lease_id},
            timeout=0,
            idempotency_key=f"acquire-{task_id}-{attempt}",
            as_subflow=self._as_subflow,
            flow_run_name=f"acquire-{task_id}-{attempt}",
        )
        return str(run.id)  # type: ignore[union-attr]

    def start_release(self, task_id: str, attempt: int) -> str:
        run = run_deployment(
            RELEASE_DEPLOYMENT,
            parameters={"task_id": task_id},
            timeout=0,
            idempotency_key=f"release-{task_id}-{attempt}",
            as_subflow=self._as_subflow,
            flow_run_name=f"release-{task_id}-{attempt}",
        )
        return str(run.id)  # type: ignore[union-attr]

    def start_warm(self, queue: QueueKey) -> str:
        run = run_deployment(
            WARM_DEPLOYMENT,
            parameters={"cluster_id": queue.cluster_id, "topology": queue.topology},
            timeout=0,
            as_subflow=self._as_subflow,
            flow_run_name=f"warm-{queue.cluster_id}-{queue.topology}",
        )
        return str(run.id)  # type: ignore[union-attr]

    def is_alive(self, run_id: str) -> bool:
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(UUID(run_id))
        return run.state is None or not run.state.is_final()
