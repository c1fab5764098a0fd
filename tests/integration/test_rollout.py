"""`prefect deploy --all` accepts prefect.yaml and creates the five deployments as designed: the
long-running dispatcher and tidal controller on an interval with concurrency 2 and 1 (CANCEL_NEW)
and restarted when they crash; the per-task and warm-pool flows unscheduled."""

from __future__ import annotations

import os
import subprocess
import sys

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.settings import PREFECT_API_URL

from tests.integration.harness import ROOT

LONG_RUNNING = {
    "dispatcher": "falcon-dispatcher-restart",
    "tidal-controller": "falcon-tidal-controller-restart",
}
STARTED_ON_DEMAND = ("task-lifecycle", "task-release", "warm-pools")
# Each run ends before the next interval: the dispatcher's in-process runs stop first, and the
# controller's successor (submitted up to 20 s early) must find the one slot free.
RUN_SECONDS = {"dispatcher": 590, "tidal-controller": 570}
# Two dispatchers overlap at a handover (safe); two controllers never run at once.
CONCURRENCY = {"dispatcher": 2, "tidal-controller": 1}


def test_prefect_deploy_creates_the_five_deployments(prefect_api: None) -> None:
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="falcon", type="process"), overwrite=True)
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "FALCON_CODE_DIR": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with get_client(sync_client=True) as client:
        looping = {name: client.read_deployment_by_name(f"{name}/{name}") for name in LONG_RUNNING}
        on_demand = [client.read_deployment_by_name(f"{name}/{name}") for name in STARTED_ON_DEMAND]
        restarts = {
            name: client.read_automations_by_name(automation) for name, automation in LONG_RUNNING.items()
        }
    for name, deployment in looping.items():
        assert deployment.global_concurrency_limit is not None, name
        assert deployment.global_concurrency_limit.limit == CONCURRENCY[name]
        assert deployment.concurrency_options is not None
        assert deployment.concurrency_options.collision_strategy.value == "CANCEL_NEW"
        assert [s.schedule.interval.total_seconds() for s in deployment.schedules] == [600]  # type: ignore[union-attr]
        assert deployment.parameters == {"run_seconds": RUN_SECONDS[name]}
        (restart,) = restarts[name]
        assert restart.trigger.expect == {"prefect.flow-run.Crashed"}  # type: ignore[union-attr]
        assert [a.deployment_id for a in restart.actions] == [deployment.id]  # type: ignore[union-attr]
    assert all(d.schedules == [] for d in on_demand)
    assert {d.work_pool_name for d in [*looping.values(), *on_demand]} == {"falcon"}
