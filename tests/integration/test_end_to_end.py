"""The happy path end to end: real Prefect flow runs, the real adapters over HTTP against the
emulator, on SQLite and on MariaDB.

Row inserted → Pending/Waiting → Pending/Provisioning → Pending/Dispatching → Running →
Succeeded, with the node pool created (``falcon-`` prefix) and deleted; pools pinned to the
cluster's node zone, shared reservations consumed, TPU7x slices placed by a workload policy.
Lifecycle and release flows run in threads of the test (``InProcessLauncher``) instead of a
deployment runner.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import container_v1

from falcon.adapters.clock import utc_now
from falcon.adapters.credentials import gke_client, resource_policies_client
from falcon.adapters.db import repository as repo
from falcon.adapters.db.orm import NodePoolRow
from falcon.adapters.db.session import session_scope
from falcon.adapters.gke import cluster_path
from falcon.domain.lifecycle import PoolState
from falcon.domain.model import Cluster, ClusterStatus
from falcon.domain.status import Reason, Status
from falcon.services.context import Services
from falcon.settings import Settings
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import (
    CLUSTER,
    Driver,
    db,
    emulator_counters,
    request_abort,
    run_until_done,
    submit,
    with_project,
)


def pool_state(services: Services, name: str) -> PoolState | None:
    with db(services) as s:
        pool = repo.get_pool(s, CLUSTER.id, name)
    return pool.state if pool else None


PHASES = [
    ("Pending", "Waiting"),
    ("Pending", "Provisioning"),
    ("Pending", "Dispatching"),
    ("Running", ""),
    ("Succeeded", ""),
]


def test_a_task_goes_from_pending_to_succeeded_through_every_phase(
    services: Services, db_url: str, emulator: EmulatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="falcon.events")
    submit(db_url, "t-happy", "alice", "2x4")
    driver = Driver(services)
    history = driver.run_until_done(["t-happy"])["t-happy"]

    # Each move is reported once by the step that wrote it (Status/Reason in the row): all of them,
    # in order. The row read between ticks sees them in that order too, but may miss a short one
    # (Dispatching lasts a pod start, Waiting none when the tick picks the task it took in).
    moves = [r.getMessage() for r in caplog.records if "event=task_moved task_id=t-happy " in r.getMessage()]
    assert [m.rsplit("reason=", 1)[1] for m in moves] == [
        "Waiting",
        "Provisioning",
        "Dispatching",
        "-",
        "Succeeded",
        "Succeeded",
    ]
    assert history == [phase for phase in PHASES if phase in history]
    assert history[-1] == ("Succeeded", "")
    with db(services) as s:
        task = repo.get_task(s, "t-happy")
        assert task is not None
        assert (
            task.dispatched_at is not None
            and task.node_pool_name
            and task.node_pool_name.startswith("falcon-")
        )
        pool = repo.get_pool(s, CLUSTER.id, task.node_pool_name)
    # Nothing is known of the queue yet: its pool is kept one creation long (the prior, 1 s), then
    # goes. It went idle when the Job's end was seen, so on a slow machine it may be gone already.
    assert pool is not None and pool.idle_since is not None
    driver.run_until(lambda _: pool_state(services, pool.name) is PoolState.DELETED, 15)
    with db(services) as s:
        deleted = s.get(NodePoolRow, (CLUSTER.id, pool.name))
    assert deleted is not None and deleted.updated_at - pool.idle_since >= timedelta(seconds=1)


def test_a_kept_pool_is_reused_by_the_next_task_of_the_same_queue(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """t-stuck holds the queue slot (its image never pulls) while t-first finishes, so t-next
    is still waiting then: t-first's pool is kept and handed to t-next with no second create.
    t-first runs long enough (8 s) for t-next to be waiting before it ends even on a loaded
    machine; t-stuck times out 12 s after its dispatch, usually after t-first has ended."""
    driver = Driver(services)
    submit(db_url, "t-first", "alice", "2x2", run_seconds=8.0)
    driver.run_until(lambda t: t["t-first"].status is Status.RUNNING)
    submit(db_url, "t-stuck", "carol", "2x2", image="trainer:missing", timeout=12)
    driver.run_until(lambda t: t["t-stuck"].reason is Reason.DISPATCHING)
    submit(db_url, "t-next", "bob", "2x2")
    driver.run_until(lambda t: t["t-next"].reason is Reason.WAITING)
    assert driver.history["t-first"][-1] == ("Running", ""), "precondition: t-first still runs"
    driver.run_until_done(["t-first", "t-stuck", "t-next"])

    with db(services) as s:
        first, stuck, nxt = (repo.get_task(s, i) for i in ("t-first", "t-stuck", "t-next"))
    assert first is not None and stuck is not None and nxt is not None
    assert first.status is Status.SUCCEEDED and nxt.status is Status.SUCCEEDED
    assert stuck.status is Status.FAILED and stuck.reason is Reason.TIMEOUT
    assert ("Pending", "Waiting") in driver.history["t-next"]
    # Handed over, not created again: t-first's pool, or t-stuck's when a loaded machine stretched
    # t-first's run past t-stuck's timeout (both are kept while t-next waits).
    assert nxt.node_pool_name in {first.node_pool_name, stuck.node_pool_name}
    assert emulator_counters(emulator)["nodePoolsCreated"] == 2  # t-first's and t-stuck's


def test_a_bad_row_fails_alone_and_the_others_still_run(services: Services, db_url: str) -> None:
    with session_scope(db_url) as s:
        repo.insert_task(
            s,
            task_id="t-bad",
            actor="eve",
            name="bad",
            tpu_type="v6e",
            spec={"image": "x", "command": ["y"], "topology": "3x3"},
            timeout_seconds=60,
            now=utc_now(),
        )
        repo.insert_task(
            s,
            task_id="t-nocluster",
            actor="eve",
            name="v5p",
            tpu_type="v5p",
            spec={"image": "x", "command": ["y"], "topology": "2x2x1"},
            timeout_seconds=60,
            now=utc_now(),
        )
    submit(db_url, "t-good", "alice", "2x2")
    run_until_done(services, ["t-bad", "t-nocluster", "t-good"])
    with db(services) as s:
        bad, none, good = (repo.get_task(s, i) for i in ("t-bad", "t-nocluster", "t-good"))
    assert bad is not None and bad.status is Status.FAILED and bad.reason is Reason.INVALID_SPEC
    assert "3x3" in (bad.message or "")
    assert none is not None and none.status is Status.FAILED and none.reason is Reason.NO_ELIGIBLE_CLUSTER
    assert good is not None and good.status is Status.SUCCEEDED


def test_settings_default_to_the_embedded_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FALCON_DATABASE_URL", raising=False)
    assert Settings().resolved_database_url.startswith("sqlite:///")


# --- Where pools go and what they consume ---------------------------------------------------------

OWNER_PROJECT = {
    "reservations": {
        "res-shared": {
            "zone": "us-east5-b",
            "machineType": "ct6e-standard-4t",
            "count": 8,
            "shareWith": ["proj-a"],
        }
    }
}
SHARED = "projects/proj-owner/reservations/res-shared"


def gke_pool(services: Services, cluster: Cluster, task_id: str) -> container_v1.NodePool:
    """The task's pool as GKE (the emulator) holds it, read with the official client."""
    with db(services) as s:
        pool = repo.get_task(s, task_id).node_pool_name  # type: ignore[union-attr]
    client = gke_client(services.settings, AnonymousCredentials())  # type: ignore[no-untyped-call]
    return client.get_node_pool(name=f"{cluster_path(cluster)}/nodePools/{pool}")


@pytest.mark.parametrize(
    ("emulator_config", "cluster"),
    [(with_project("proj-owner", OWNER_PROJECT), replace(CLUSTER, default_reservation=SHARED))],
)
def test_a_shared_reservation_is_read_in_its_owners_project_and_consumed(
    services: Services, db_url: str, emulator: EmulatorServer, cluster: Cluster
) -> None:
    driver = Driver(services)
    submit(db_url, "t-shared", "alice", "4x4", run_seconds=600)
    driver.run_until(lambda t: t["t-shared"].status is Status.RUNNING)
    assert ("Pending", "ProvisioningFallback") not in driver.history["t-shared"]
    pool = gke_pool(services, cluster, "t-shared")
    assert list(pool.config.reservation_affinity.values) == [SHARED]
    assert not pool.config.flex_start
    request_abort(services, "t-shared")
    driver.run_until_done(["t-shared"])


V7X_PROJECT = {
    "reservations": {"res-v7": {"zone": "us-central1-c", "machineType": "tpu7x-standard-4t", "count": 4}},
    "buckets": {"bucket-v7": {"writers": ["serviceAccount:proj-v7.svc.id.goog[falcon-jobs/default]"]}},
    "clusters": {"edge-v7": {"location": "us-central1", "zones": ["us-central1-b", "us-central1-c"]}},
}
V7X_CLUSTER = Cluster(
    "c-v7",
    "edge-v7",
    "proj-v7",
    "us-central1",
    "v7x",
    "bucket-v7",
    "res-v7",
    ClusterStatus.ACTIVE,
    "falcon-jobs",
    "us-central1-c",
)


@pytest.mark.parametrize(
    ("emulator_config", "cluster"), [(with_project("proj-v7", V7X_PROJECT), V7X_CLUSTER)]
)
def test_a_tpu7x_multi_host_slice_gets_its_workload_policy_first(
    services: Services, db_url: str, emulator: EmulatorServer, cluster: Cluster
) -> None:
    driver = Driver(services)
    submit(db_url, "t-v7", "alice", "2x2x2", run_seconds=600, tpu_type="v7x")
    driver.run_until(lambda t: t["t-v7"].status is Status.RUNNING)
    pool = gke_pool(services, cluster, "t-v7")
    assert pool.placement_policy.policy_name == "falcon-tpu7x-2x2x2"
    assert not pool.placement_policy.tpu_topology
    policies = resource_policies_client(services.settings, AnonymousCredentials())  # type: ignore[no-untyped-call]
    policy = policies.get(project="proj-v7", region="us-central1", resource_policy="falcon-tpu7x-2x2x2")
    assert (policy.workload_policy.type_, policy.workload_policy.accelerator_topology) == (
        "HIGH_THROUGHPUT",
        "2x2x2",
    )
    request_abort(services, "t-v7")
    driver.run_until_done(["t-v7"])
