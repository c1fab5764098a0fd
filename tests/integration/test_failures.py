"""The design's exception table: each failure ends Failed with its Reason and a readable Message,
and leaves no Job and no node pool behind (nothing waits in the queue in these tests)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.domain.errors import TemporaryError
from falcon.domain.lifecycle import Phase, PoolState, Progress, TaskEnded, TaskView
from falcon.domain.model import ProvisioningMode, TaskSpec
from falcon.domain.node_pools import NodePoolPlan
from falcon.domain.status import Reason, Status
from falcon.domain.topology import resolve_shape
from falcon.services import acquisition
from falcon.services.acquisition import PoolChoice
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
    with_env,
    with_project,
)


def finished(services: Services, task_id: str) -> Progress:
    Driver(services).run_until_done([task_id])
    with db(services) as s:
        progress = repo.get_progress(s, task_id)
    assert progress is not None and progress.phase == Phase.DONE
    return progress


def task_of(services: Services, task_id: str):  # type: ignore[no-untyped-def]
    with db(services) as s:
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
    seldom_used(services)  # a queue used about once an hour: its pool goes at release
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
    seldom_used(services)  # a queue used about once an hour: its pool goes at release
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
    with db(services) as s:
        pool = repo.get_pool(s, CLUSTER.id, task.node_pool_name)
    assert pool is not None and pool.state == PoolState.DELETED  # written ahead, then closed out


def test_a_refused_job_fails_the_task_with_job_submit_failed_and_deletes_the_pool(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    seldom_used(services)  # a queue used about once an hour: its pool goes at release
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


def test_a_control_plane_upgrade_holds_the_create_off_and_the_task_runs_after_it(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GKE refuses node-pool operations while a cluster-level one runs (a control-plane upgrade in
    its maintenance window: "Cluster is running incompatible operation ..."): the task asks again
    until the upgrade is done, rather than fail NodePoolFailed."""
    services = with_env(services, monkeypatch, FALCON_GKE_BUSY_RETRY_SECONDS="0.3")
    cluster = f"{CLUSTER.project}/{CLUSTER.location}/{CLUSTER.name}"
    upgrade = httpx.post(f"{emulator.url}/emulator/clusters/{cluster}/upgrade", json={"seconds": 2.0})
    submit(db_url, "t-upgrade", "alice", "2x2")
    finished(services, "t-upgrade")
    assert task_of(services, "t-upgrade").status is Status.SUCCEEDED
    parent = f"projects/{CLUSTER.project}/locations/{CLUSTER.location}"
    operations = httpx.get(f"{emulator.url}/v1/{parent}/operations")
    by_type = {op["operationType"]: op for op in operations.json()["operations"]}
    upgraded = by_type["UPGRADE_MASTER"]
    assert upgraded["name"] == upgrade.json()["name"]
    assert by_type["CREATE_NODE_POOL"]["startTime"] >= upgraded["endTime"]  # asked again, after it
    assert emulator_counters(emulator)["nodePoolsCreated"] == 1


def test_an_untracked_falcon_pool_is_deleted_and_tracked_ones_are_left_alone(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    from falcon.services.reconcile import delete_orphan_pools

    submit(db_url, "t-live", "alice", "2x2", run_seconds=600)
    driver = Driver(services)
    driver.run_until(lambda t: t["t-live"].status is Status.RUNNING)
    orphan = NodePoolPlan(
        "falcon-2x2-orphan00",
        resolve_shape("v6e", "2x2"),
        ProvisioningMode.FLEX_START,
        None,
        CLUSTER.node_zone,
    )
    gke = services.node_pools
    driver.run_until(lambda _: _created(gke, orphan), seconds=30)

    # GKE refuses a delete while the create still runs, and while the delete runs; the periodic
    # scan asks again, and the one delete GKE took is the one sweep that reports the pool.
    swept: list[str] = []

    def gone(_: object) -> bool:
        swept.extend(delete_orphan_pools(services, {CLUSTER.id: CLUSTER}))
        return "falcon-2x2-orphan00" not in gke.list_names(CLUSTER)

    driver.run_until(gone, seconds=30)
    assert swept == ["falcon-2x2-orphan00"]
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
    with db(services) as s:
        assert repo.get_pool(s, CLUSTER.id, refused.node_pool_name).state == PoolState.DELETED  # type: ignore[union-attr]


# --- Reservation and GKE refusals: final errors end NodePoolFailed with Google's own text -------------

RESERVATION_ZONE_PATH = r"/compute/v1/projects/proj-a/zones/us-east5-b/reservations/res-a$"


def with_reservation(**changes: object) -> dict[str, object]:
    """EMULATOR whose proj-a reservation res-a has other settings (status, machine type)."""
    project = dict(EMULATOR["projects"]["proj-a"])  # type: ignore[index]
    reservation = {**project["reservations"]["res-a"], **changes}
    return with_project("proj-a", {**project, "reservations": {"res-a": reservation}})


@pytest.mark.parametrize(
    ("status", "text"),
    [
        pytest.param(
            403,
            "Required 'compute.reservations.get' permission for "
            "'projects/proj-a/zones/us-east5-b/reservations/res-a'",
            id="permission denied",
        ),
        pytest.param(
            404, "The resource 'projects/proj-a/zones/us-east5-b/reservations/res-a' was not found", id="gone"
        ),
    ],
)
def test_an_unreadable_reservation_fails_the_task_instead_of_a_silent_flex_start(
    services: Services, db_url: str, emulator: EmulatorServer, status: int, text: str
) -> None:
    inject_fault(emulator, "GET", RESERVATION_ZONE_PATH, status, text)
    submit(db_url, "t-res", "alice", "2x2")
    finished(services, "t-res")
    task = task_of(services, "t-res")
    assert (task.status, task.reason) == (Status.FAILED, Reason.NODE_POOL_FAILED)
    assert task.message == f"Node pool creation failed: get reservation res-a in proj-a/us-east5-b: {text}"
    assert emulator_counters(emulator)["nodePoolsCreated"] == 0  # no flex-start pool behind the user's back


@pytest.mark.parametrize(
    ("emulator_config", "problem"),
    [
        pytest.param(with_reservation(status="CREATING"), "status is CREATING, not READY", id="not READY"),
        pytest.param(
            with_reservation(machineType="ct5lp-hightpu-4t"),
            "it reserves ct5lp-hightpu-4t, the slice needs ct6e-standard-4t",
            id="another machine type",
        ),
    ],
)
def test_an_unusable_reservation_fails_the_task_naming_the_problem(
    services: Services, db_url: str, emulator: EmulatorServer, problem: str
) -> None:
    submit(db_url, "t-res", "alice", "2x2")
    finished(services, "t-res")
    task = task_of(services, "t-res")
    assert (task.status, task.reason) == (Status.FAILED, Reason.NODE_POOL_FAILED)
    assert task.message == f"Node pool creation failed: reservation res-a: {problem}"
    assert emulator_counters(emulator)["nodePoolsCreated"] == 0


def test_a_reservation_read_that_fails_for_a_moment_is_retried(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """The path production takes: the provision task raises TemporaryError, Prefect's retry
    condition accepts it, and the task's second run provisions the pool on the reservation."""
    task_id = f"t-res-{uuid.uuid4().hex[:8]}"  # its flow run's name is unique in the Prefect server
    inject_fault(
        emulator, "GET", RESERVATION_ZONE_PATH, 503, "The service is currently unavailable.", times=1
    )
    submit(db_url, task_id, "alice", "2x2")
    history = Driver(services).run_until_done([task_id])
    task = task_of(services, task_id)
    assert task.status is Status.SUCCEEDED
    assert ("Pending", "ProvisioningFallback") not in history[task_id]
    with db(services) as s:
        assert repo.get_pool(s, CLUSTER.id, task.node_pool_name).mode == "reservation"  # type: ignore[union-attr]
    assert provision_run_counts(f"acquire-{task_id}") == [2]


@pytest.mark.parametrize(
    ("status", "text"),
    [
        pytest.param(
            429, "Quota 'TPUS_PER_PROJECT' exceeded. Limit: 0.0 in region us-east5.", id="quota (429)"
        ),
        pytest.param(
            403,
            'Insufficient regional quota to satisfy request: resource "TPUS": '
            "request requires '8.0' and is short '8.0'.",
            id="quota (403)",
        ),
        pytest.param(
            403,
            "Required 'container.nodePools.create' permission for 'projects/proj-a'",
            id="permission denied",
        ),
        pytest.param(400, "Invalid value for field 'nodePool.config.machineType'.", id="invalid argument"),
    ],
)
def test_final_gke_refusals_fail_the_task_at_once_with_gkes_text(
    services: Services, db_url: str, emulator: EmulatorServer, status: int, text: str
) -> None:
    """Not retried until NodePoolTimeout (30 min by default): the task ends within the test's 90 s."""
    inject_fault(emulator, "POST", r"/nodePools$", status, text)
    submit(db_url, "t-refused", "alice", "2x2")
    finished(services, "t-refused")
    task = task_of(services, "t-refused")
    assert (task.status, task.reason) == (Status.FAILED, Reason.NODE_POOL_FAILED)
    assert task.message == f"Node pool creation failed: create node pool {task.node_pool_name}: {text}"


SLOW_CREATES = {**EMULATOR, "nodePoolProvisionSeconds": 3.0}
# Another team's 8-node pool on the same reservation: it takes all the room when its create ends.
OUTSIDER = NodePoolPlan(
    "other-team-pool", resolve_shape("v6e", "4x8"), ProvisioningMode.RESERVATION, "res-a", CLUSTER.node_zone
)


@pytest.mark.parametrize("emulator_config", [SLOW_CREATES])
def test_a_stockout_in_the_create_operation_fails_the_task_with_the_operation_error(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """Another user's pool takes the whole reservation while Falcon's create waits behind it:
    Falcon read free room, GKE's create operation then ends DONE with GCE_STOCKOUT."""
    services.node_pools.create(CLUSTER, OUTSIDER)  # 8 nodes, counted when its operation ends
    submit(db_url, "t-short", "alice", "4x4")
    finished(services, "t-short")
    task = task_of(services, "t-short")
    assert (task.status, task.reason) == (Status.FAILED, Reason.NODE_POOL_FAILED)
    assert task.message.startswith(
        f"Node pool creation failed: node pool {task.node_pool_name} is ERROR: GCE_STOCKOUT: "
        "reservation projects/proj-a/reservations/res-a does not have enough capacity for node pool "
        f"{task.node_pool_name}: 4 nodes needed, 0 available"
    )


def provision_run_counts(flow_run_name: str) -> list[int]:
    """How many times Prefect ran the provision task in the named lifecycle run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterName,
        TaskRunFilter,
        TaskRunFilterName,
    )

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[flow_run_name])),
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_="provision-node-pool")),
        )
    return [run.run_count for run in runs]


def test_a_reservation_read_still_failing_on_the_last_retry_ends_the_task_not_the_run(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """Prefect retries the provision step on TemporaryError; its last attempt reports instead of
    crashing the run (the dispatcher would restart a crashed run forever)."""
    inject_fault(emulator, "GET", RESERVATION_ZONE_PATH, 503, "The service is currently unavailable.")
    submit(db_url, "t-res", "alice", "2x2")
    task = task_of(services, "t-res")
    view = TaskView(task, TaskSpec.parse(task.spec), resolve_shape("v6e", "2x2"), CLUSTER)
    with pytest.raises(TemporaryError):
        acquisition.provision(services, view)
    with pytest.raises(TaskEnded) as ended:
        acquisition.provision(services, view, final_attempt=True)
    assert ended.value.outcome.reason is Reason.NODE_POOL_FAILED
    assert ended.value.outcome.message == (
        "Node pool creation failed: get reservation res-a in proj-a/us-east5-b: "
        "The service is currently unavailable."
    )
    assert emulator_counters(emulator)["nodePoolsCreated"] == 0


def test_a_resumed_run_finding_its_pool_in_error_reports_gkes_reason(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """A run that resumes after the create call has no operation name: it finds the pool in ERROR
    and still reports GKE's reason (pool status and the failed create operation's error)."""
    gke = services.node_pools
    gke.create(CLUSTER, OUTSIDER)  # takes the reservation when it ends; GKE runs ours after it
    submit(db_url, "t-x", "alice", "4x4")
    task = task_of(services, "t-x")
    view = TaskView(task, TaskSpec.parse(task.spec), resolve_shape("v6e", "4x4"), CLUSTER)
    plan = NodePoolPlan(
        "falcon-resumed", view.shape, ProvisioningMode.RESERVATION, "res-a", CLUSTER.node_zone
    )
    Driver(services).run_until(lambda _: _created(gke, plan), seconds=30)
    with pytest.raises(TaskEnded) as ended:
        acquisition.wait_pool_ready(services, view, PoolChoice("falcon-resumed", None), utc_now())
    assert ended.value.outcome.reason is Reason.NODE_POOL_FAILED
    assert ended.value.outcome.message.startswith(
        "Node pool creation failed: node pool falcon-resumed is ERROR: GCE_STOCKOUT: reservation "
        "projects/proj-a/reservations/res-a does not have enough capacity for node pool falcon-resumed"
    )
