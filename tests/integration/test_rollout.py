"""`prefect deploy --all` accepts prefect.yaml and creates the three deployments as designed:
the dispatcher on an interval with concurrency 1 (CANCEL_NEW) and restarted when it crashes, the
per-task flows unscheduled."""

from __future__ import annotations

import os
import subprocess
import sys

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.settings import PREFECT_API_URL

from tests.integration.harness import ROOT


def test_prefect_deploy_creates_the_three_deployments(prefect_api: None) -> None:
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
        dispatcher = client.read_deployment_by_name("dispatcher/dispatcher")
        lifecycle = client.read_deployment_by_name("task-lifecycle/task-lifecycle")
        release = client.read_deployment_by_name("task-release/task-release")
    assert dispatcher.global_concurrency_limit is not None and dispatcher.global_concurrency_limit.limit == 1
    assert dispatcher.concurrency_options is not None
    assert dispatcher.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    assert [s.schedule.interval.total_seconds() for s in dispatcher.schedules] == [600]  # type: ignore[union-attr]
    assert dispatcher.parameters == {"run_seconds": 598}
    assert lifecycle.schedules == [] and release.schedules == []
    assert {d.work_pool_name for d in (dispatcher, lifecycle, release)} == {"falcon"}
    with get_client(sync_client=True) as client:
        (restart,) = client.read_automations_by_name("falcon-dispatcher-restart")
    assert restart.trigger.expect == {"prefect.flow-run.Crashed"}  # type: ignore[union-attr]
    assert [a.deployment_id for a in restart.actions] == [dispatcher.id]  # type: ignore[union-attr]
