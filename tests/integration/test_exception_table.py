"""The design's exception table ("异常路径汇总"): one named test per row, against the emulator on
SQLite and MariaDB. Rows tested here are marked "here"; the others are tested where named.

- node pool 创建超时 → Failed/NodePoolTimeout:
  here, test_a_pool_that_never_becomes_ready_fails_with_node_pool_timeout.
- node pool 创建失败 → Failed/NodePoolFailed with GKE's text:
  refused at create, test_failures.py: test_a_refused_node_pool_fails_the_task_with_node_pool_failed,
  test_final_gke_refusals_fail_the_task_at_once_with_gkes_text and the reservation tests;
  ERROR after the create was accepted, test_failures.py:
  test_a_stockout_in_the_create_operation_fails_the_task_with_the_operation_error,
  test_a_resumed_run_finding_its_pool_in_error_reports_gkes_reason;
  gone after the create was accepted:
  here, test_a_pool_that_vanishes_while_created_fails_with_node_pool_failed.
- Job 提交失败 → Failed/JobSubmitFailed, pool deleted:
  test_failures.py, test_a_refused_job_fails_the_task_with_job_submit_failed_and_deletes_the_pool.
- Job 执行失败 → Failed/JobFailed, Job and pool deleted:
  test_failures.py, test_a_failing_container_fails_the_task_with_job_failed; pods that can never
  start, test_job_rules.py; the Job deleted by someone else (pods pending, or running):
  here, test_a_job_deleted_by_someone_else_fails_the_task_with_job_failed.
- Job 超时 → Failed/Timeout: test_failures.py, test_a_task_running_past_its_timeout_fails_with_timeout.
- node pool 删除失败 → retried, then appended to the Message, status kept:
  here, test_a_pool_deletion_that_keeps_failing_is_reported_and_swept_later; a release run dying
  mid-deletion, test_abort_and_resume.py,
  test_a_release_run_that_dies_mid_deletion_is_restarted_and_asks_gke_once.
- 孤儿 node pool → deleted:
  test_failures.py, test_an_untracked_falcon_pool_is_deleted_and_tracked_ones_are_left_alone.
- Abort (waiting / provisioning / dispatching / running) → Aborted: test_abort_phases.py, one
  test per phase (dispatching twice: before and after the Job is submitted), and an abort
  written while Falcon is down.

The step logic of each row is proven first in the unit tier (tests/unit/test_service_*.py).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from falcon.adapters.db import repository as repo
from falcon.domain.lifecycle import PoolState
from falcon.domain.model import QueueKey, Task
from falcon.domain.status import Reason, Status
from falcon.services.context import Services
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import (
    CLUSTER,
    EMULATOR,
    Driver,
    db,
    emulator_counters,
    inject_fault,
    seldom_used,
    submit,
    task_row,
    with_env,
)
from tests.integration.test_abort_phases import falcon_objects, slot_in_use

QUEUE = QueueKey(CLUSTER.id, "2x2")


def with_pool_timeout(services: Services, monkeypatch: pytest.MonkeyPatch, seconds: int) -> Services:
    """Services (and the flow runs, which read the environment) with a short node-pool deadline."""
    return with_env(services, monkeypatch, FALCON_NODE_POOL_TIMEOUT_SECONDS=str(seconds))


def pool_state(services: Services, name: str) -> PoolState | None:
    with db(services) as s:
        pool = repo.get_pool(s, CLUSTER.id, name)
    return pool.state if pool else None


def swept(services: Services, name: str) -> bool:
    gone = name not in services.node_pools.list_names(CLUSTER)
    return gone and pool_state(services, name) is PoolState.DELETED


@pytest.mark.parametrize(
    "emulator_config", [{**EMULATOR, "nodePoolProvisionSeconds": 3.0, "nodePoolDeleteSeconds": 0.3}]
)
def test_a_pool_that_never_becomes_ready_fails_with_node_pool_timeout(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GKE is still creating the pool at the deadline (2 s here): the task fails, its slot is
    freed, and the pool is deleted once GKE accepts the delete (it refuses it while creating):
    by the release, or by the reaper when the release's own deadline passed first."""
    driver = Driver(with_pool_timeout(services, monkeypatch, 2))
    submit(db_url, "t-slow", "alice", "2x2")
    driver.run_until_done(["t-slow"])
    task = task_row(services, "t-slow")
    assert (task.status, task.reason) == (Status.FAILED, Reason.NODE_POOL_TIMEOUT)
    assert task.message.startswith(
        f"Node pool creation timed out (0m): node pool {task.node_pool_name} still PROVISIONING"
    )
    driver.run_until(lambda _: slot_in_use(QUEUE) == 0, seconds=10)  # the run ends just after
    driver.run_until(lambda _: swept(services, task.node_pool_name or ""), seconds=15)
    assert emulator_counters(emulator)["nodePoolsCreated"] == 1


@pytest.mark.parametrize("emulator_config", [{**EMULATOR, "nodePoolProvisionSeconds": 3.0}])
def test_a_pool_that_vanishes_while_created_fails_with_node_pool_failed(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "t-gone", "alice", "2x2")
    driver.run_until(lambda t: emulator_counters(emulator)["nodePoolsCreated"] == 1)
    pool = task_row(services, "t-gone").node_pool_name or ""
    # GKE refuses a delete while the create runs; the emulator's admin API takes the pool away
    # other than by a delete.
    cluster = f"{CLUSTER.project}/{CLUSTER.location}/{CLUSTER.name}"
    httpx.post(f"{emulator.url}/emulator/clusters/{cluster}/nodePools/{pool}/vanish").raise_for_status()
    driver.run_until_done(["t-gone"])
    task = task_row(services, "t-gone")
    assert (task.status, task.reason) == (Status.FAILED, Reason.NODE_POOL_FAILED)
    # Seen while GKE deletes it (STOPPING) or once it is gone: either way GKE's state is named.
    assert task.message in (
        f"Node pool creation failed: node pool {pool} {end}" for end in ("is STOPPING", "disappeared")
    )
    assert pool_state(services, pool) is PoolState.DELETED
    driver.run_until(lambda _: slot_in_use(QUEUE) == 0, seconds=10)  # the run ends just after


def test_a_pool_deletion_that_keeps_failing_is_reported_and_swept_later(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retried (with growing waits) until the deadline, then appended to the Message of the
    Job's own result; the pool stays recorded as deleting and the reaper deletes it later."""
    seldom_used(services)  # a queue used about once an hour: its pool goes at release
    inject_fault(emulator, "DELETE", r"/nodePools/falcon-", 500, "Internal error encountered.")
    # The deadline bounds the deletion's retries; it must leave the creation (about 1 s) room
    # on a loaded machine: 2 s failed the creation now and then.
    driver = Driver(with_pool_timeout(services, monkeypatch, 4))
    submit(db_url, "t-ok", "alice", "2x2")
    driver.run_until_done(["t-ok"])
    task = task_row(services, "t-ok")
    assert task.status is Status.SUCCEEDED and task.reason is None
    assert task.message.startswith("(node pool deletion failed: ")
    assert task.message.endswith("Internal error encountered.)")
    assert pool_state(services, task.node_pool_name or "") is PoolState.DELETING
    httpx.delete(f"{emulator.url}/emulator/faults").raise_for_status()
    driver.run_until(lambda _: swept(services, task.node_pool_name or ""), seconds=15)
    assert task_row(services, "t-ok") == task  # the row keeps its result


@pytest.mark.parametrize(
    ("image", "reached"),
    [
        pytest.param("trainer:1", lambda t: t.status is Status.RUNNING, id="running"),
        pytest.param("trainer:missing", lambda t: t.k8s_job_name is not None, id="pods pending"),
    ],
)
def test_a_job_deleted_by_someone_else_fails_the_task_with_job_failed(
    services: Services,
    db_url: str,
    emulator: EmulatorServer,
    image: str,
    reached: Callable[[Task], bool],
) -> None:
    """Never left Running, and never submitted again (the pending case used to be)."""
    seldom_used(services)  # a queue used about once an hour: its pool goes at release
    driver = Driver(services)
    submit(db_url, "t-del", "alice", "2x2", run_seconds=600, image=image)
    driver.run_until(lambda t: reached(t["t-del"]))
    job = task_row(services, "t-del").k8s_job_name
    jobs = f"{emulator.url}/k8s/proj-a/us-east5/edge-a/apis/batch/v1/namespaces/falcon-jobs/jobs"
    httpx.delete(f"{jobs}/{job}", params={"propagationPolicy": "Background"}).raise_for_status()
    driver.run_until_done(["t-del"])
    task = task_row(services, "t-del")
    assert (task.status, task.reason) == (Status.FAILED, Reason.JOB_FAILED)
    assert task.message == f"Kubernetes Job {job} disappeared from the cluster"
    assert pool_state(services, task.node_pool_name or "") is PoolState.DELETED
    assert falcon_objects(emulator, "t-del") == []
