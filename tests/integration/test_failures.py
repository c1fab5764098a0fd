"""The design's exception table: each failure ends Failed with its Reason and a readable Message,
and leaves no Job and no node pool behind (nothing waits in the queue in these tests)."""

from __future__ import annotations

import pytest

from falcon.adapters.db import repository as repo
from falcon.domain.status import Reason, Status
from falcon.services.context import Services
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, Driver, emulator_counters, inject_fault, submit


def finished(services: Services, task_id: str) -> repo.Progress:
    Driver(services).run_until_done([task_id])
    with services.db() as s:
        progress = repo.get_progress(s, task_id)
    assert progress is not None and progress.phase == repo.Phase.DONE
    return progress


def task_of(services: Services, task_id: str):  # type: ignore[no-untyped-def]
    with services.db() as s:
        return repo.get_task(s, task_id)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({"EMULATOR_OOM": "1"}, "terminated: OOMKilled (exit code 137)", id="oom"),
        pytest.param({"EMULATOR_EXIT_CODE": "3"}, "terminated: Error (exit code 3)", id="exit code 3"),
    ],
)
def test_a_failing_container_fails_the_task_with_job_failed(
    services: Services, db_url: str, emulator: EmulatorServer, env: dict[str, str], expected: str
) -> None:
    submit(db_url, "t-fail", "alice", "2x2", run_seconds=0.5, env=env)
    finished(services, "t-fail")
    task = task_of(services, "t-fail")
    assert task.status is Status.FAILED and task.reason is Reason.JOB_FAILED
    assert expected in task.message
    assert task.finished_at is not None
    assert emulator_counters(emulator)["nodePoolsDeleted"] == 1


def test_a_task_running_past_its_timeout_fails_with_timeout(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    submit(db_url, "t-slow", "alice", "2x2", run_seconds=600, timeout=3)
    finished(services, "t-slow")
    task = task_of(services, "t-slow")
    assert task.status is Status.FAILED and task.reason is Reason.TIMEOUT
    assert task.message == "Task timed out (3s), Job cancelled"
    assert emulator_counters(emulator)["nodePoolsDeleted"] == 1


def test_a_refused_node_pool_fails_the_task_with_node_pool_failed(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    inject_fault(emulator, "POST", r"/nodePools$", 403, "quota 'TPUS_PER_PROJECT' exceeded")
    submit(db_url, "t-quota", "alice", "2x2")
    finished(services, "t-quota")
    task = task_of(services, "t-quota")
    assert task.status is Status.FAILED and task.reason is Reason.NODE_POOL_FAILED
    assert "TPUS_PER_PROJECT" in task.message
    with services.db() as s:
        pool = repo.get_pool(s, CLUSTER.id, task.node_pool_name)
    assert pool is not None and pool.state == repo.PoolState.DELETED  # written ahead, then closed out


def test_a_refused_job_fails_the_task_with_job_submit_failed_and_deletes_the_pool(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    inject_fault(emulator, "POST", r"/jobs$", 403, "admission webhook denied the request")
    submit(db_url, "t-denied", "alice", "2x2")
    finished(services, "t-denied")
    task = task_of(services, "t-denied")
    assert task.status is Status.FAILED and task.reason is Reason.JOB_SUBMIT_FAILED
    assert "admission webhook denied" in task.message
    assert emulator_counters(emulator)["nodePoolsDeleted"] == 1


def test_gke_busy_and_rate_limits_are_retried_not_failed(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    inject_fault(emulator, "POST", r"/nodePools$", 429, "Too many operations", times=2)
    submit(db_url, "t-busy", "alice", "2x2")
    finished(services, "t-busy")
    assert task_of(services, "t-busy").status is Status.SUCCEEDED


def test_an_untracked_falcon_pool_is_deleted_and_tracked_ones_are_left_alone(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    from datetime import timedelta

    from falcon.domain.model import ProvisioningMode
    from falcon.domain.node_pools import NodePoolPlan
    from falcon.domain.topology import resolve_shape
    from falcon.services.reconcile import delete_orphan_pools

    submit(db_url, "t-live", "alice", "2x2", run_seconds=600)
    driver = Driver(services)
    driver.run_until(lambda t: t["t-live"].status is Status.RUNNING)
    orphan = NodePoolPlan(
        "falcon-2x2-orphan00",
        resolve_shape("v6e", "2x2"),
        ProvisioningMode.FLEX_START,
        None,
        timedelta(hours=6),
        None,
    )
    gke = services.gateways.node_pools
    driver.run_until(lambda _: _created(gke, orphan), seconds=30)

    assert delete_orphan_pools(services) == ["falcon-2x2-orphan00"]
    # GKE refuses a delete while the create still runs; the periodic scan asks again.
    driver.run_until(lambda _: not delete_orphan_pools(services), seconds=30)
    assert "falcon-2x2-orphan00" not in gke.list_names(CLUSTER)
    assert task_of(services, "t-live").node_pool_name in gke.list_names(CLUSTER)


def _created(gke, plan) -> bool:  # type: ignore[no-untyped-def]
    """Create the pool behind Falcon's back; GKE may be busy with the task's own pool first."""
    from falcon.domain.errors import ConflictError, TemporaryError

    try:
        gke.create(CLUSTER, plan)
    except ConflictError:
        return True
    except TemporaryError:
        return False
    return True


def test_a_pool_that_never_became_ready_is_not_handed_to_the_next_task(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    inject_fault(emulator, "POST", r"/nodePools$", 403, "quota exceeded", times=1)
    submit(db_url, "t-refused", "alice", "2x2")
    submit(db_url, "t-after", "bob", "2x2")
    Driver(services).run_until_done(["t-refused", "t-after"])
    refused, after = task_of(services, "t-refused"), task_of(services, "t-after")
    assert refused.reason is Reason.NODE_POOL_FAILED and after.status is Status.SUCCEEDED
    assert after.node_pool_name != refused.node_pool_name
    with services.db() as s:
        assert repo.get_pool(s, CLUSTER.id, refused.node_pool_name).state == repo.PoolState.DELETED  # type: ignore[union-attr]
