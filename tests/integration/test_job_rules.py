"""What GKE's admission and kubelet demand of Falcon's Jobs, met or reported (issue 6).

We test, through the real dispatcher against the emulator, on SQLite and MariaDB, with tasks
that have no timeout (``timeout_seconds`` NULL): a multi-host slice runs with a headless
Service (created before its Job, named by its pods as subdomain) and reaches Succeeded, the
Service gone after release, also when the Job itself is refused. Pods that can never start end
their task Failed/JobFailed quoting Kubernetes, and free the queue slot for the next task: a
ServiceAccount that does not exist (FailedCreate on the Job), a bucket the pod may not write
(FailedMount), an image that cannot be pulled (after the configured grace) or whose name is
invalid; a task already Running whose pods cannot start is ended by the dispatcher's follow-up.
And the orphan sweep deletes a Falcon Service whose task Falcon does not know, leaving the
Service of a running task alone.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from falcon.adapters import k8s
from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.domain.job_manifest import JobTarget, render_service
from falcon.domain.lifecycle import PoolState
from falcon.domain.model import Task, k8s_job_name_for
from falcon.domain.status import TERMINAL, Reason, Status
from falcon.domain.topology import resolve_shape
from falcon.services.acquisition import dispatch, mark_running, provision, wait_pool_ready
from falcon.services.context import Services, load_view
from falcon.services.reconcile import delete_orphan_services
from falcon.settings import get_settings
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, EMULATOR, Driver, db, inject_fault, request_abort, seldom_used
from tests.integration.launcher import InProcessLauncher

# The cluster's log bucket exists, but no Kubernetes ServiceAccount may write to it.
UNWRITABLE_BUCKET = copy.deepcopy(EMULATOR)
UNWRITABLE_BUCKET["projects"]["proj-a"]["buckets"] = {"bucket-a": {"writers": []}}  # type: ignore[index]


@pytest.fixture
def emulator_config() -> dict[str, Any]:
    """The harness's fleet; a test parametrizes this name to run against a variant."""
    return EMULATOR


@pytest.fixture
def emulator(tmp_path: Path, emulator_config: dict[str, Any]) -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig.from_dict(emulator_config), tmp_path / "emu") as server:
        yield server


def submit_untimed(
    url: str, task_id: str, actor: str, topology: str, image: str = "trainer:1", run_seconds: float = 2
) -> None:
    """An upstream row with timeout_seconds NULL: nothing but Falcon's own rules may end it."""
    spec = {
        "image": image,
        "command": ["python", "train.py"],
        "topology": topology,
        "env": {"EMULATOR_RUN_SECONDS": str(run_seconds)},
    }
    with session_scope(url) as s:
        repo.insert_task(
            s,
            task_id=task_id,
            actor=actor,
            name=f"job-{task_id}",
            tpu_type="v6e",
            spec=spec,
            timeout_seconds=None,
            now=utc_now(),
        )


def with_settings(services: Services, monkeypatch: pytest.MonkeyPatch, **env: str) -> Services:
    """Services (and the flow runs, which read settings themselves) with extra FALCON_* values."""
    for name, value in env.items():
        monkeypatch.setenv(f"FALCON_{name}", value)
    get_settings.cache_clear()
    return replace(services, settings=get_settings())


def task_of(services: Services, task_id: str) -> Task:
    with db(services) as s:
        task = repo.get_task(s, task_id)
    assert task is not None
    return task


def k8s_items(emulator: EmulatorServer, plural: str) -> list[dict[str, Any]]:
    url = f"{emulator.url}/k8s/proj-a/us-east5/edge-a/api/v1/namespaces/{CLUSTER.namespace}/{plural}"
    response = httpx.get(url)
    response.raise_for_status()
    items: list[dict[str, Any]] = response.json().get("items", [])
    return items


def assert_job_failed_and_slot_freed(services: Services, first: str, after: str, *quoted: str) -> None:
    """Both tasks of one queue fail the same way, the second picked only once the first ended."""
    ended, following = task_of(services, first), task_of(services, after)
    for task in (ended, following):
        assert task.status is Status.FAILED and task.reason is Reason.JOB_FAILED, task
        assert task.message is not None and task.message.startswith("Pods cannot start: "), task.message
        assert all(text in task.message for text in quoted), task.message
    assert ended.finished_at is not None and following.dispatched_at is not None
    assert following.dispatched_at >= ended.finished_at
    with db(services) as s:
        assert all(repo.get_progress(s, t).lease_id is None for t in (first, after))  # type: ignore[union-attr]


def test_a_multi_host_slice_runs_with_a_headless_service_that_release_deletes(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    submit_untimed(db_url, "t-multi", "alice", "2x4")
    driver = Driver(services)
    driver.run_until(lambda t: t["t-multi"].status is Status.RUNNING)
    job_name = task_of(services, "t-multi").k8s_job_name

    (service,) = k8s_items(emulator, "services")
    assert service["metadata"]["name"] == job_name
    assert service["spec"]["clusterIP"] == "None"
    pods = [
        p for p in k8s_items(emulator, "pods") if p["metadata"]["labels"].get("falcon.dev/task") == job_name
    ]
    assert len(pods) == 2
    for pod in pods:
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
        assert {"TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"} <= env  # GKE's TPU webhook took the slice

    driver.run_until_done(["t-multi"])
    assert task_of(services, "t-multi").status is Status.SUCCEEDED
    assert k8s_items(emulator, "services") == []


def test_a_refused_multi_host_job_leaves_no_service_behind(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    inject_fault(emulator, "POST", r"/jobs$", 403, "admission webhook denied the request")
    submit_untimed(db_url, "t-refused", "alice", "2x4")
    Driver(services).run_until_done(["t-refused"])
    assert task_of(services, "t-refused").reason is Reason.JOB_SUBMIT_FAILED
    assert k8s_items(emulator, "services") == []


def test_a_missing_service_account_fails_the_task_within_seconds_and_frees_its_slot(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = with_settings(services, monkeypatch, JOB_SERVICE_ACCOUNT="no-such-ksa")
    submit_untimed(db_url, "t-nosa", "alice", "2x2")
    submit_untimed(db_url, "t-next", "bob", "2x2")
    Driver(services).run_until_done(["t-nosa", "t-next"], seconds=60)

    assert_job_failed_and_slot_freed(services, "t-nosa", "t-next", "FailedCreate", "no-such-ksa")
    task = task_of(services, "t-nosa")
    assert task.finished_at - task.dispatched_at < timedelta(seconds=15)  # type: ignore[operator]


@pytest.mark.parametrize("emulator_config", [UNWRITABLE_BUCKET], ids=["bucket without writers"])
def test_a_bucket_the_pod_may_not_write_fails_the_task_with_the_failed_mount(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    submit_untimed(db_url, "t-nomount", "alice", "2x2")
    submit_untimed(db_url, "t-next", "bob", "2x2")
    Driver(services).run_until_done(["t-nomount", "t-next"], seconds=60)

    assert_job_failed_and_slot_freed(services, "t-nomount", "t-next", "FailedMount", "PermissionDenied")


@pytest.mark.parametrize(
    ("image", "quoted"),
    [
        pytest.param("trainer:missing", ["trainer:missing"], id="image not in the registry"),
        pytest.param("Trainer:1", ["InvalidImageName", "Trainer:1"], id="invalid image name"),
    ],
)
def test_an_image_that_cannot_be_pulled_fails_the_task_after_the_grace(
    services: Services,
    db_url: str,
    emulator: EmulatorServer,
    monkeypatch: pytest.MonkeyPatch,
    image: str,
    quoted: list[str],
) -> None:
    services = with_settings(services, monkeypatch, IMAGE_PULL_GRACE_SECONDS="2")
    submit_untimed(db_url, "t-image", "alice", "2x2", image=image)
    submit_untimed(db_url, "t-next", "bob", "2x2", image=image)
    Driver(services).run_until_done(["t-image", "t-next"], seconds=60)

    assert_job_failed_and_slot_freed(services, "t-image", "t-next", *quoted)


def test_a_pull_failure_is_given_its_grace_before_the_task_ends(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = with_settings(services, monkeypatch, IMAGE_PULL_GRACE_SECONDS="4")
    submit_untimed(db_url, "t-image", "alice", "2x2", image="trainer:missing")
    driver = Driver(services)
    driver.run_until(lambda t: "ImagePullBackOff" in (t["t-image"].message or ""), seconds=30)
    assert task_of(services, "t-image").status is Status.PENDING  # retried by the kubelet meanwhile

    driver.run_until_done(["t-image"], seconds=30)
    task = task_of(services, "t-image")
    assert task.reason is Reason.JOB_FAILED
    assert task.finished_at - task.dispatched_at >= timedelta(seconds=4)  # type: ignore[operator]


def test_the_orphan_sweep_deletes_services_of_unknown_tasks_only(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    submit_untimed(db_url, "t-live", "alice", "2x4", run_seconds=600)
    driver = Driver(services)
    driver.run_until(lambda t: t["t-live"].status is Status.RUNNING)
    ghost = JobTarget("ghost", k8s_job_name_for("ghost"), "pool", CLUSTER, resolve_shape("v6e", "2x4"))
    services.jobs(CLUSTER).ensure_service(CLUSTER.namespace, render_service(ghost))

    assert delete_orphan_services(services, {CLUSTER.id: CLUSTER}) == [ghost.service_name]
    remaining = [s["metadata"]["name"] for s in k8s_items(emulator, "services")]
    assert remaining == [task_of(services, "t-live").k8s_job_name]

    request_abort(services, "t-live")
    driver.run_until_done(["t-live"])
    assert k8s_items(emulator, "services") == []  # an aborted task's release deletes it too


class RunningOnceSubmitted(InProcessLauncher):
    """Acquires inline and marks the task Running as soon as its Job is submitted, as if its pods
    had started: the dispatcher's follow_running is then the one to notice they never will."""

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        view = load_view(self.services, task_id)
        pool = provision(self.services, view)
        wait_pool_ready(self.services, view, pool, utc_now())
        dispatch(self.services, view, pool.name)
        mark_running(self.services, view, 0)
        return f"inline-{task_id}"


def test_a_running_task_whose_pods_cannot_start_is_ended_by_the_dispatcher(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    seldom_used(services)  # a queue used about once an hour: its pool goes at release
    services = with_settings(services, monkeypatch, JOB_SERVICE_ACCOUNT="no-such-ksa")
    dispatcher = Driver(services, RunningOnceSubmitted(services))
    submit_untimed(db_url, "t-late", "alice", "2x2")
    deadline = time.monotonic() + 60
    while task_of(services, "t-late").status not in TERMINAL and time.monotonic() < deadline:
        dispatcher.tick()
        time.sleep(0.1)

    task = task_of(services, "t-late")
    assert task.status is Status.FAILED and task.reason is Reason.JOB_FAILED
    assert task.message is not None and "FailedCreate" in task.message and "no-such-ksa" in task.message
    with db(services) as s:
        pool = repo.get_pool(s, CLUSTER.id, task.node_pool_name or "")
    assert pool is not None and pool.state == PoolState.DELETED  # released as usual


@pytest.mark.parametrize(
    "named_up_to", [k8s.PODS_BY_NAME, 0], ids=["pods read by Job name", "every pod listed"]
)
def test_the_round_ends_the_task_whose_pods_cannot_start_and_leaves_its_neighbour_running(
    services: Services,
    db_url: str,
    emulator: EmulatorServer,
    monkeypatch: pytest.MonkeyPatch,
    named_up_to: int,
) -> None:
    """The round reads the pods of its Jobs not all ready, naming them in a set-based selector the
    API server parses (or, past PODS_BY_NAME Jobs, every Falcon pod, kept to those Jobs)."""
    monkeypatch.setattr(k8s, "PODS_BY_NAME", named_up_to)
    dispatcher = Driver(services, RunningOnceSubmitted(services))
    submit_untimed(db_url, "t-good", "alice", "2x4", run_seconds=120)
    submit_untimed(db_url, "t-bad", "bob", "2x2", image="Trainer:1")
    deadline = time.monotonic() + 60
    while task_of(services, "t-bad").status not in TERMINAL and time.monotonic() < deadline:
        dispatcher.tick()
        time.sleep(0.1)

    bad, good = task_of(services, "t-bad"), task_of(services, "t-good")
    assert bad.status is Status.FAILED and bad.reason is Reason.JOB_FAILED
    assert bad.message is not None and "InvalidImageName" in bad.message and "Trainer:1" in bad.message
    assert good.status is Status.RUNNING
