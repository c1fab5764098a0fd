"""A task survives the faults GKE, Compute and Kubernetes throw at it: about 30 % of all their calls
failing (GKE 503, Compute 429, apiserver 500), connection resets, and a node-pool create and a Job
create answered only after the client gave up (the server still carried them out). It still reaches
Succeeded, with one node pool created and one Job created. A Job create that reaches the API
server only after the task's Job ran, ended and was deleted makes a copy that never runs, and the
orphan sweep deletes it. A fault that outlasts the configured tries ends the task instead of the run.

SQLite only: the database plays no part in classifying and retrying API errors."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from falcon.bootstrap import build_services
from falcon.domain.errors import TemporaryError
from falcon.domain.lifecycle import PoolState
from falcon.domain.model import ProvisioningMode, k8s_job_name_for
from falcon.domain.node_pools import NodePoolPlan
from falcon.domain.status import Reason, Status
from falcon.domain.topology import resolve_shape
from falcon.services.acquisition import creating_pool
from falcon.services.context import Services
from falcon.services.pool_deletion import ask_delete, take_back
from falcon.services.reconcile import delete_orphan_jobs
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, Driver, emulator_counters, submit, task_row, with_env
from tests.integration.test_failures import provision_run_counts

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

TIMEOUT = 0.5  # FALCON_API_TIMEOUT_SECONDS; a slow answer below comes after 1 s
FAULTS: list[dict[str, Any]] = [
    {"method": "POST", "pathRegex": "/nodePools$", "delaySeconds": 1.0, "times": 1},
    {"method": "POST", "pathRegex": "/jobs$", "delaySeconds": 1.0, "times": 1},
    {"pathRegex": "^/k8s/", "action": "reset", "times": 2},
    {"pathRegex": "^/compute/", "action": "reset", "times": 1},
    {"pathRegex": "^/v1/", "status": 503, "probability": 0.3},
    {"pathRegex": "^/compute/", "status": 429, "message": "Rate Limit Exceeded", "probability": 0.3},
    {"pathRegex": "^/k8s/", "status": 500, "message": "etcdserver: request timed out", "probability": 0.3},
]


def under_faults(services: Services, monkeypatch: pytest.MonkeyPatch, tries: int = 12) -> Services:
    """Services (and the flow runs, which read the environment) with a short client timeout and
    quick retries: 12 tries leave a 30 % fault rate no real chance to exhaust them."""
    env = {"FALCON_API_TIMEOUT_SECONDS": str(TIMEOUT)}
    for kind in ("NODE_POOL", "JOB", "RELEASE"):
        env |= {f"FALCON_RETRY_{kind}_TRIES": str(tries), f"FALCON_RETRY_{kind}_BASE_SECONDS": "0.05"}
        env[f"FALCON_RETRY_{kind}_CAP_SECONDS"] = "0.2"
    return with_env(services, monkeypatch, **env)


def test_a_task_succeeds_through_api_faults_without_duplicates(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = Driver(under_faults(services, monkeypatch))
    rules = [{"times": None, **rule} for rule in FAULTS]  # the probable ones hit any number of calls
    httpx.post(f"{emulator.url}/emulator/faults", json={"rules": rules, "seed": 8}).raise_for_status()
    submit(db_url, "t-faults", "alice", "2x2", run_seconds=0.5)

    driver.run_until_done(["t-faults"], seconds=60)

    assert task_row(services, "t-faults").status is Status.SUCCEEDED, driver.history
    counters = emulator_counters(emulator)
    assert (counters["nodePoolsCreated"], counters["jobsCreated"]) == (1, 1)
    # The retry of the create answered too late meets 409, as does every retry of the dispatch step
    # after a failed resume (the step creates, then finds the Job by name).
    assert counters["jobCreatesRefused"] >= 1 and counters["jobsRunMoreThanOnce"] == []
    injected = httpx.get(f"{emulator.url}/emulator/state").json()["faultsInjected"]
    assert {"delay", "reset", "503", "429", "500"} <= injected.keys(), injected


def test_a_job_create_landing_after_the_task_ended_makes_a_copy_that_never_runs_and_is_swept(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos run's duplicate: the first create is answered after the client gave up, and the
    API server carries it out only after the retried create's Job ran, ended and was deleted."""
    late_by = 6.0  # the create is carried out this long after it was sent; the task takes ~2 s
    driver = Driver(under_faults(services, monkeypatch))
    late = {"method": "POST", "pathRegex": "/jobs$", "delaySeconds": late_by, "times": 1}
    httpx.post(f"{emulator.url}/emulator/faults", json={"rules": [late]}).raise_for_status()
    submit(db_url, "t-late", "alice", "2x2", run_seconds=0.1)

    driver.run_until_done(["t-late"], seconds=60)
    assert task_row(services, "t-late").status is Status.SUCCEEDED, driver.history
    assert emulator_counters(emulator)["jobsCreated"] == 1  # the late create has not landed yet

    deadline = time.monotonic() + late_by + 5
    while emulator_counters(emulator)["jobsCreated"] < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    key = f"{CLUSTER.namespace}/{k8s_job_name_for('t-late')}"
    counters = emulator_counters(emulator)
    assert (counters["jobsCreatedMoreThanOnce"], counters["jobsRunMoreThanOnce"]) == ([key], [])
    assert delete_orphan_jobs(services, {CLUSTER.id: CLUSTER}) == [k8s_job_name_for("t-late")]
    assert delete_orphan_jobs(services, {CLUSTER.id: CLUSTER}) == []


def test_a_reset_outlasting_the_configured_tries_ends_the_task_node_pool_failed(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FALCON_RETRY_NODE_POOL_TRIES reaches the provision task's Prefect retries: it runs 3 times,
    and its last run ends the task with the error's text instead of crashing the flow run."""
    task_id = f"t-reset-{uuid.uuid4().hex[:8]}"  # its flow run's name is unique in the Prefect server
    driver = Driver(under_faults(services, monkeypatch, tries=3))
    reset = {"pathRegex": "^/compute/", "action": "reset", "times": None}
    httpx.post(f"{emulator.url}/emulator/faults", json={"rules": [reset]}).raise_for_status()
    submit(db_url, task_id, "alice", "2x2")

    driver.run_until_done([task_id], seconds=60)

    task = task_row(services, task_id)
    assert (task.status, task.reason) == (Status.FAILED, Reason.NODE_POOL_FAILED)
    assert task.message.startswith("Node pool creation failed: get reservation res-a in proj-a/us-east5-b: ")
    assert "Connection aborted." in task.message
    deadline = time.monotonic() + 10  # Prefect records a task run's last state from its events
    while provision_run_counts(f"acquire-{task_id}") != [3] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert provision_run_counts(f"acquire-{task_id}") == [3]
    assert emulator_counters(emulator)["nodePoolsCreated"] == 0


def test_a_marked_pool_whose_deletion_reaches_gke_late_is_not_taken_back_meanwhile(
    services: Services, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos run's lost task: GKE carried out a delete the client had given up on, after the
    queue's next task took the pool back while GKE still said RUNNING, and the pool went under it."""
    services = build_services(under_faults(services, monkeypatch).settings)  # clients with the short timeout
    late_by = 6.0  # the delete is carried out this long after it was sent; the client waits 0.5 s
    plan = NodePoolPlan("falcon-2x2-late", resolve_shape("v6e", "2x2"), ProvisioningMode.RESERVATION, "res-a",
                        CLUSTER.node_zone)  # fmt: skip
    store, gke, now = services.store, services.node_pools, services.clock.now
    store.write_ahead_pool(creating_pool(CLUSTER.id, plan, "t-done"), now())
    gke.create(CLUSTER, plan)
    deadline = time.monotonic() + 20
    while not gke.get(CLUSTER, plan.name).ready:
        assert time.monotonic() < deadline, "the pool never became ready"
        time.sleep(0.1)
    store.pool_ready(CLUSTER.id, plan.name, now())
    assert store.start_deleting_pool(CLUSTER.id, plan.name, "t-done", now())
    late = {"method": "DELETE", "pathRegex": "/nodePools/", "delaySeconds": late_by, "times": 1}
    httpx.post(f"{emulator.url}/emulator/faults", json={"rules": [late]}).raise_for_status()

    with pytest.raises(TemporaryError):
        ask_delete(services, CLUSTER, plan.name)
    assert gke.get(CLUSTER, plan.name).ready, "GKE has not carried the delete out yet"
    assert not take_back(services, CLUSTER, [plan.name])

    deadline = time.monotonic() + late_by + 10
    while gke.get(CLUSTER, plan.name).status != "STOPPING":
        assert time.monotonic() < deadline, "the late delete never arrived"
        time.sleep(0.1)
    assert store.pool(CLUSTER.id, plan.name).state is PoolState.DELETING
