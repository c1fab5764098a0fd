"""Resumption after a lifecycle or release run dies (no duplicate pool, Job or deletion), and a
lifecycle run made again after it finished. Aborts in every phase are in test_abort_phases.py."""

from __future__ import annotations

import contextlib
import time

import httpx

from falcon.adapters.db import repository as repo
from falcon.domain.errors import NotFoundError
from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.status import Status
from falcon.services.acquisition import provision
from falcon.services.context import Services, load_view
from falcon.services.release import delete_job
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import (
    CLUSTER,
    Driver,
    db,
    emulator_counters,
    inject_fault,
    seldom_used,
    submit,
)
from tests.integration.launcher import InProcessLauncher


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
    assert task_lifecycle(task_id="t-twice", lease_id="") == "Superseded"
    with db(services) as s:
        after = repo.get_task(s, "t-twice")
    assert after == before
    assert emulator_counters(emulator)["nodePoolsCreated"] == 1
    jobs = httpx.get(f"{emulator.url}/k8s/proj-a/us-east5/edge-a/apis/batch/v1/namespaces/falcon-jobs/jobs")
    assert len(jobs.json()["items"]) == 1


class DyingFirstRelease(InProcessLauncher):
    """The first release run of each task deletes the Job and makes sure GKE deletes the pool
    (which the round that saw the Job end marked, and beside it asked GKE to delete, already),
    then its process 'dies'. From then on any other DELETE of a Falcon pool is answered 403, so a
    second deletion request would show in the task's Message."""

    def __init__(self, services: Services, emulator: EmulatorServer) -> None:
        super().__init__()
        self.services, self.emulator = services, emulator
        self.died: list[str] = []

    def start_release(self, task_id: str, attempt: int) -> str:
        if self.died:
            return super().start_release(task_id, attempt)
        svc = self.services
        with db(svc) as s:
            task = repo.get_task(s, task_id)
        assert task is not None and task.k8s_job_name and task.node_pool_name
        delete_job(svc, CLUSTER, task.k8s_job_name)
        pool = svc.store.pool(CLUSTER.id, task.node_pool_name)
        # Marked by the round that saw the end; a later round may have seen it gone already.
        assert pool is not None and pool.state in (PoolState.DELETING, PoolState.DELETED)
        with contextlib.suppress(NotFoundError):  # GKE may have finished before the row says so
            if svc.node_pools.get(CLUSTER, task.node_pool_name).status != "STOPPING":  # not asked yet
                svc.node_pools.delete(CLUSTER, task.node_pool_name)
        inject_fault(self.emulator, "DELETE", r"/nodePools/falcon-", 403, "a second deletion request")
        self.died.append(task_id)
        return f"dead-release-{task_id}"


def test_a_release_run_that_dies_mid_deletion_is_restarted_and_asks_gke_once(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    seldom_used(services)  # a queue used about once an hour: its pool goes at release
    launcher = DyingFirstRelease(services, emulator)
    driver = Driver(services, launcher)
    submit(db_url, "t-rel", "alice", "2x2")
    driver.run_until_done(["t-rel"])
    assert launcher.died == ["t-rel"]
    with db(services) as s:
        task, progress = repo.get_task(s, "t-rel"), repo.get_progress(s, "t-rel")
        pool = repo.get_pool(s, CLUSTER.id, task.node_pool_name or "") if task else None
    assert task is not None and (task.status, task.message) == (Status.SUCCEEDED, "")
    assert progress is not None and progress.phase is Phase.DONE
    assert progress.release_run_id == "release-t-rel-1"  # the restarted run wrote the outcome
    assert pool is not None and pool.state is PoolState.DELETED
    assert emulator_counters(emulator)["nodePoolsDeleted"] == 1
