"""Abort in every phase (design §8) and resumption after a run dies (no duplicate pool or Job).

Each abort ends Aborted with aborted_at and finished_at set, the Job (and a multi-host task's
headless Service) deleted and the node pool deleted (nothing waits in its queue), whatever phase
the task was in.
"""

from __future__ import annotations

import time

import httpx
import pytest

from falcon.adapters.db import repository as repo
from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.status import Reason, Status
from falcon.services.acquisition import provision
from falcon.services.context import Services, load_view
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, EMULATOR, Driver, db, emulator_counters, request_abort, submit
from tests.integration.launcher import InProcessLauncher


def assert_aborted_and_clean(services: Services, emulator: EmulatorServer, task_id: str) -> None:
    with db(services) as s:
        task = repo.get_task(s, task_id)
        progress = repo.get_progress(s, task_id)
        pool = repo.get_pool(s, CLUSTER.id, task.node_pool_name) if task and task.node_pool_name else None
    assert task is not None and task.status is Status.ABORTED and task.reason is None
    assert task.aborted_at is not None and task.finished_at is not None
    assert task.message == "Aborted by user"
    assert progress is not None and progress.phase == Phase.DONE
    if pool is not None:
        assert pool.state == PoolState.DELETED
    cluster_api = f"{emulator.url}/k8s/proj-a/us-east5/edge-a"
    for listed in ("apis/batch/v1/namespaces/falcon-jobs/jobs", "api/v1/namespaces/falcon-jobs/services"):
        items = httpx.get(f"{cluster_api}/{listed}").json().get("items", [])
        assert all(i["metadata"]["annotations"].get("falcon.dev/task-id") != task_id for i in items)


def test_abort_while_waiting_removes_the_task_from_its_queue(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "t-holder", "alice", "2x2", image="trainer:missing", timeout=3)
    submit(db_url, "t-waiting", "bob", "2x2")
    driver.run_until(lambda t: t["t-waiting"].reason is Reason.WAITING)
    request_abort(services, "t-waiting")
    driver.run_until_done(["t-holder", "t-waiting"])
    assert_aborted_and_clean(services, emulator, "t-waiting")
    assert ("Pending", "Waiting") in driver.history["t-waiting"]
    assert driver.history["t-waiting"][-1] == ("Aborted", "")


@pytest.mark.parametrize("emulator_config", [{**EMULATOR, "nodePoolProvisionSeconds": 3.0}])
def test_abort_while_provisioning_waits_for_the_pool_and_deletes_it(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "t-prov", "alice", "4x4")
    # Aborted once GKE accepted the create (an abort before it creates nothing: see the unit tier).
    driver.run_until(
        lambda t: (
            t["t-prov"].reason is Reason.PROVISIONING and emulator_counters(emulator)["nodePoolsCreated"] == 1
        )
    )
    request_abort(services, "t-prov")
    driver.run_until_done(["t-prov"])
    assert_aborted_and_clean(services, emulator, "t-prov")
    assert emulator_counters(emulator)["nodePoolsDeleted"] == 1


def test_abort_while_pods_are_pending_deletes_the_job_its_service_and_the_pool(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "t-disp", "alice", "2x4", image="trainer:missing")  # pulls within its grace
    driver.run_until(lambda t: t["t-disp"].k8s_job_name is not None)
    request_abort(services, "t-disp")
    driver.run_until_done(["t-disp"])
    assert_aborted_and_clean(services, emulator, "t-disp")


def test_abort_while_running_deletes_the_job_and_the_pool(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "t-run", "alice", "2x2", run_seconds=600)
    driver.run_until(lambda t: t["t-run"].status is Status.RUNNING)
    request_abort(services, "t-run")
    driver.run_until_done(["t-run"])
    assert_aborted_and_clean(services, emulator, "t-run")


class DyingFirstAttempt(InProcessLauncher):
    """The first lifecycle attempt of each task provisions its pool, then its process 'dies'."""

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services
        self.died: list[str] = []

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        if attempt == 1:
            view = load_view(self.services, task_id)
            choice = provision(self.services, view)  # write-ahead
            assert choice.plan is not None
            self.services.node_pools.create(view.cluster, choice.plan)  # the create reached GKE
            self.died.append(task_id)
            return f"dead-{task_id}"  # never alive: the dispatcher must notice and restart
        return super().start_acquire(task_id, lease_id, attempt)


def test_a_run_that_dies_mid_provisioning_is_restarted_without_a_second_pool(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    launcher = DyingFirstAttempt(services)
    dispatcher = Driver(services, launcher)
    submit(db_url, "t-crash", "alice", "2x4")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        dispatcher.tick()
        with db(services) as s:
            task = repo.get_task(s, "t-crash")
            progress = repo.get_progress(s, "t-crash")
        if task is not None and task.status is Status.SUCCEEDED:
            break
        time.sleep(0.1)
    assert launcher.died == ["t-crash"]
    assert task is not None and task.status is Status.SUCCEEDED
    assert progress is not None and progress.attempt == 2
    assert emulator_counters(emulator)["nodePoolsCreated"] == 1


def test_running_the_lifecycle_again_after_it_finished_changes_nothing(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    from flows.lifecycle import task_lifecycle

    driver = Driver(services)
    submit(db_url, "t-twice", "alice", "2x2", run_seconds=600)
    driver.run_until(lambda t: t["t-twice"].status is Status.RUNNING)
    with db(services) as s:
        before = repo.get_task(s, "t-twice")
    assert task_lifecycle(task_id="t-twice", lease_id="") == "Running"
    with db(services) as s:
        after = repo.get_task(s, "t-twice")
    assert after == before
    assert emulator_counters(emulator)["nodePoolsCreated"] == 1
    jobs = httpx.get(f"{emulator.url}/k8s/proj-a/us-east5/edge-a/apis/batch/v1/namespaces/falcon-jobs/jobs")
    assert len(jobs.json()["items"]) == 1
