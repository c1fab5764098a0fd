"""Abort in every phase (design §8, the exception table's four Abort rows), each phase held on
purpose and asserted before upstream writes Aborting: waiting, provisioning (a slow create),
dispatching before the Job is submitted (GKE's Job POST failing), dispatching after (pods
Pending on an image still pulling), running; and an abort written while Falcon is down.

In every phase the task ends Aborted with aborted_at, its Job (and a multi-host task's headless
Service) is deleted and its queue slot freed; a same-topology task waiting behind it gets the
node pool (the same name, one create in GKE). Without a waiting task the pool is deleted (here
in the abort written while Falcon is down; in every phase in tests/unit/test_service_abort.py;
a pool GKE refuses to delete while creating it, in test_exception_table.py's NodePoolTimeout).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from falcon.adapters.db import repository as repo
from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.model import QueueKey, Task, slot_label
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
    request_abort,
    submit,
    task_row,
)
from tests.integration.launcher import InProcessLauncher

CLUSTER_API = "k8s/proj-a/us-east5/edge-a"
SLOW_CREATES = {**EMULATOR, "nodePoolProvisionSeconds": 2.5}


def phase_of(services: Services, task_id: str) -> tuple[Status, Reason | None, Phase | None]:
    with db(services) as s:
        task, progress = repo.get_task(s, task_id), repo.get_progress(s, task_id)
    assert task is not None
    return task.status, task.reason, progress.phase if progress else None


def falcon_objects(emulator: EmulatorServer, task_id: str) -> list[str]:
    """Names of the task's Jobs and Services still in the cluster."""
    found = []
    for listed in ("apis/batch/v1/namespaces/falcon-jobs/jobs", "api/v1/namespaces/falcon-jobs/services"):
        items = httpx.get(f"{emulator.url}/{CLUSTER_API}/{listed}").json().get("items", [])
        found += [
            i["metadata"]["name"]
            for i in items
            if i["metadata"]["annotations"].get("falcon.dev/task-id") == task_id
        ]
    return found


def annotations(item: dict[str, Any]) -> dict[str, str]:
    return dict(item["metadata"].get("annotations") or {})


def slot_in_use(queue: QueueKey) -> int:
    """Leases held on the queue's slot (its Prefect global concurrency limit)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(slot_label(CLUSTER, queue.topology)).active_slots


def assert_aborted(services: Services, emulator: EmulatorServer, task_id: str) -> Task:
    task = task_row(services, task_id)
    assert (task.status, task.reason, task.message) == (Status.ABORTED, None, "Aborted by user")
    assert task.aborted_at is not None and task.finished_at is not None
    assert phase_of(services, task_id)[2] is Phase.DONE
    assert falcon_objects(emulator, task_id) == []
    return task


def assert_pool_handed_on(
    services: Services, emulator: EmulatorServer, driver: Driver, aborted: str, waiter: str, creates: int = 1
) -> None:
    """The waiter ran on the aborted task's pool; GKE saw no other create for it; the pool went
    once nobody waited any more and its horizon passed, and the slot is free."""
    driver.run_until_done([waiter])
    pool = task_row(services, aborted).node_pool_name
    taken = task_row(services, waiter)
    assert taken.status is Status.SUCCEEDED and taken.node_pool_name == pool
    assert emulator_counters(emulator)["nodePoolsCreated"] == creates

    def deleted(_: object) -> bool:
        with db(services) as s:
            record = repo.get_pool(s, CLUSTER.id, pool or "")
        return record is not None and record.state is PoolState.DELETED

    driver.run_until(deleted, seconds=15)
    queue = QueueKey(CLUSTER.id, taken.topology or "")
    driver.run_until(lambda _: slot_in_use(queue) == 0, seconds=10)


def test_abort_while_waiting_leaves_the_queue_to_the_next_task(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "t-holder", "alice", "2x2", image="trainer:missing", timeout=2)  # holds the slot 2 s
    driver.run_until(lambda _: phase_of(services, "t-holder")[2] is Phase.ACQUIRING)
    submit(db_url, "t-wait", "bob", "2x2")
    submit(db_url, "t-next", "carol", "2x2")
    driver.run_until(lambda t: t["t-wait"].reason is Reason.WAITING and t["t-next"].reason is Reason.WAITING)
    assert phase_of(services, "t-wait") == (Status.PENDING, Reason.WAITING, Phase.WAITING)
    request_abort(services, "t-wait")
    driver.run_until(lambda t: t["t-wait"].status is Status.ABORTED)
    assert_aborted(services, emulator, "t-wait")
    assert task_row(services, "t-wait").node_pool_name is None
    assert phase_of(services, "t-next")[2] is Phase.WAITING  # the holder still has the slot
    assert_pool_handed_on(services, emulator, driver, "t-holder", "t-next")
    assert task_row(services, "t-holder").reason is Reason.TIMEOUT


@pytest.mark.parametrize("emulator_config", [SLOW_CREATES])
def test_abort_while_provisioning_waits_for_the_create_and_hands_the_pool_on(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "t-prov", "alice", "2x2")
    driver.run_until(lambda t: emulator_counters(emulator)["nodePoolsCreated"] == 1)
    submit(db_url, "t-next", "bob", "2x2")
    driver.run_until(lambda t: t["t-next"].reason is Reason.WAITING)
    assert phase_of(services, "t-prov") == (Status.PENDING, Reason.PROVISIONING, Phase.ACQUIRING)
    pool = task_row(services, "t-prov").node_pool_name or ""
    assert services.node_pools.get(CLUSTER, pool).status == "PROVISIONING"
    request_abort(services, "t-prov")
    driver.run_until(lambda t: t["t-prov"].status is Status.ABORTED)
    assert_aborted(services, emulator, "t-prov")
    assert_pool_handed_on(services, emulator, driver, "t-prov", "t-next")


def test_abort_while_dispatching_before_the_job_is_submitted_hands_the_pool_on(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    inject_fault(emulator, "POST", r"/jobs$", 500, "etcdserver: request timed out")  # retried
    driver = Driver(services)
    submit(db_url, "t-disp", "alice", "2x2")
    driver.run_until(lambda t: t["t-disp"].reason is Reason.DISPATCHING)
    submit(db_url, "t-next", "bob", "2x2")
    driver.run_until(lambda t: t["t-next"].reason is Reason.WAITING)
    assert phase_of(services, "t-disp") == (Status.PENDING, Reason.DISPATCHING, Phase.ACQUIRING)
    assert task_row(services, "t-disp").k8s_job_name is None and falcon_objects(emulator, "t-disp") == []
    request_abort(services, "t-disp")
    driver.run_until(lambda t: t["t-disp"].status is Status.ABORTED)
    assert_aborted(services, emulator, "t-disp")
    assert task_row(services, "t-disp").k8s_job_name is None  # no POST got through: the retry saw the abort
    httpx.delete(f"{emulator.url}/emulator/faults").raise_for_status()
    assert_pool_handed_on(services, emulator, driver, "t-disp", "t-next")


def test_abort_while_pods_are_pending_deletes_the_job_and_service_and_hands_the_pool_on(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "t-disp", "alice", "2x4", image="trainer:missing")  # pulls within its grace
    driver.run_until(lambda t: t["t-disp"].k8s_job_name is not None)
    submit(db_url, "t-next", "bob", "2x4")
    driver.run_until(lambda t: t["t-next"].reason is Reason.WAITING)
    assert phase_of(services, "t-disp") == (Status.PENDING, Reason.DISPATCHING, Phase.ACQUIRING)
    assert len(falcon_objects(emulator, "t-disp")) == 2  # the Job and its headless Service
    request_abort(services, "t-disp")
    driver.run_until(lambda t: t["t-disp"].status is Status.ABORTED)
    assert_aborted(services, emulator, "t-disp")
    assert_pool_handed_on(services, emulator, driver, "t-disp", "t-next")


def test_abort_while_running_deletes_the_job_and_hands_the_pool_on(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """A running task holds no slot: a task waits behind it only while another one acquires,
    here one whose pods keep pulling (it makes the second create, and is aborted last)."""
    driver = Driver(services)
    submit(db_url, "t-run", "alice", "2x2", run_seconds=600)
    driver.run_until(lambda t: t["t-run"].status is Status.RUNNING)
    submit(db_url, "t-holder", "bob", "2x2", image="trainer:missing")
    driver.run_until(lambda t: t["t-holder"].k8s_job_name is not None)
    submit(db_url, "t-next", "carol", "2x2")
    driver.run_until(lambda t: t["t-next"].reason is Reason.WAITING)
    assert phase_of(services, "t-run") == (Status.RUNNING, None, Phase.RUNNING)
    request_abort(services, "t-run")
    driver.run_until(lambda t: t["t-run"].status is Status.ABORTED)
    assert_aborted(services, emulator, "t-run")
    with db(services) as s:
        kept = repo.get_pool(s, CLUSTER.id, task_row(services, "t-run").node_pool_name or "")
    assert kept is not None and kept.state is PoolState.IDLE
    request_abort(services, "t-holder")
    assert_pool_handed_on(services, emulator, driver, "t-run", "t-next", creates=2)
    assert_aborted(services, emulator, "t-holder")


class LostAcquire(InProcessLauncher):
    """Falcon goes down right after picking ``lost``: its lifecycle run never runs."""

    def __init__(self, lost: str) -> None:
        super().__init__()
        self.lost = lost

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        if task_id == self.lost:
            return f"lost-{task_id}"
        return super().start_acquire(task_id, lease_id, attempt)


def test_an_abort_written_while_falcon_is_down_is_applied_at_restart(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    before = Driver(services, LostAcquire("t-acq"))
    submit(db_url, "t-run", "alice", "2x2", run_seconds=600)
    submit(db_url, "t-acq", "bob", "2x4")
    before.run_until(
        lambda t: t["t-run"].status is Status.RUNNING and phase_of(services, "t-acq")[2] is Phase.ACQUIRING
    )
    assert not before.close()  # Falcon is down: no dispatcher, no flow run
    request_abort(services, "t-run", "t-acq")
    assert phase_of(services, "t-run") == (Status.ABORTING, None, Phase.RUNNING)
    status, _, phase = phase_of(services, "t-acq")
    assert (status, phase) == (Status.ABORTING, Phase.ACQUIRING)
    after = Driver(services)
    after.run_until_done(["t-run", "t-acq"])
    for task_id in ("t-run", "t-acq"):
        assert_aborted(services, emulator, task_id)
    after.run_until(lambda _: emulator_counters(emulator)["nodePoolsDeleted"] == 1, seconds=10)
    assert emulator_counters(emulator)["nodePoolsCreated"] == 1  # the lost run's pool never reached GKE
    for topology in ("2x2", "2x4"):  # freed when each run ends, just after its row's last write
        after.run_until(lambda _, t=topology: slot_in_use(QueueKey(CLUSTER.id, t)) == 0, seconds=10)
