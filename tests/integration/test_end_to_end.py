"""The happy path end to end: real Prefect flow runs, the real adapters over HTTP against the
emulator, on SQLite and on MariaDB.

Row inserted → Pending/Waiting → Pending/Provisioning → Pending/Dispatching → Running →
Succeeded, with the node pool created (``falcon-`` prefix) and deleted, the Job labelled
``managed-by=falcon`` and the pod log at the design's GCS path. Lifecycle and release flows run
in threads of the test (``InProcessLauncher``) instead of a deployment runner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.adapters.runs import InProcessLauncher
from falcon.bootstrap import Gateways
from falcon.domain.model import Cluster, ClusterStatus, Task
from falcon.domain.status import TERMINAL, Reason, Status
from falcon.services.context import Services, utc_now
from falcon.services.dispatching import Dispatcher
from falcon.settings import Settings, get_settings
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer

EMULATOR = {
    "nodePoolProvisionSeconds": 0.5,
    "podStartSeconds": 0.2,
    "projects": {
        "proj-a": {
            "reservations": {"res-a": {"zone": "us-east5-b", "machineType": "ct6e-standard-4t", "count": 8}},
            "clusters": {
                "edge-a": {"location": "us-east5", "flexStart": {"available": True, "delaySeconds": 0.5}}
            },
        }
    },
}
CLUSTER = Cluster(
    "c-a",
    "edge-a",
    "proj-a",
    "us-east5",
    "v6e",
    "bucket-a",
    "res-a",
    ClusterStatus.ACTIVE,
    "falcon-jobs",
    "us-east5-b",
)


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig.from_dict(EMULATOR), tmp_path / "emu") as server:
        yield server


@pytest.fixture
def services(
    db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch, prefect_api: None
) -> Services:
    monkeypatch.setenv("FALCON_DATABASE_URL", db_url)
    monkeypatch.setenv("FALCON_EMULATOR_URL", emulator.url)
    monkeypatch.setenv("FALCON_POLL_SECONDS", "0.2")
    monkeypatch.setenv("FALCON_RECONCILE_SECONDS", "0.3")
    monkeypatch.setenv("FALCON_MESSAGE_LOCALE", "en")
    get_settings.cache_clear()
    settings = get_settings()
    with session_scope(db_url) as s:
        repo.add_cluster(s, CLUSTER, utc_now())
    return Services(settings, Gateways(settings))


def submit(
    url: str,
    task_id: str,
    actor: str,
    topology: str,
    run_seconds: float = 0.5,
    image: str = "trainer:1",
    timeout: int = 600,
) -> None:
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
            timeout_seconds=timeout,
            now=utc_now(),
        )


class Driver:
    """Ticks a real Dispatcher whose lifecycle and release flows run as threads of the test."""

    def __init__(self, services: Services) -> None:
        from flows.lifecycle import task_lifecycle, task_release

        from falcon.adapters import slots

        self.services = services
        self.dispatcher = Dispatcher(services, slots, InProcessLauncher(task_lifecycle, task_release))
        self.history: dict[str, list[tuple[str, str]]] = {}

    def observe(self) -> dict[str, Task]:
        with self.services.db() as s:
            tasks = {t.id: t for t in repo.list_tasks(s, 1000)}
        for task_id, t in tasks.items():
            steps = self.history.setdefault(task_id, [])
            step = (t.status.value, t.reason.value if t.reason else "")
            if not steps or steps[-1] != step:
                steps.append(step)
        return tasks

    def run_until(self, done: Callable[[dict[str, Task]], bool], seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.dispatcher.tick()
            if done(self.observe()):
                return
            time.sleep(0.1)
        raise AssertionError(f"condition not reached: {self.history}")

    def run_until_done(self, ids: list[str], seconds: float = 90) -> dict[str, list[tuple[str, str]]]:
        self.run_until(lambda tasks: all(tasks[i].status in TERMINAL for i in ids), seconds)
        return self.history


def run_until_done(
    services: Services, ids: list[str], seconds: float = 90
) -> dict[str, list[tuple[str, str]]]:
    return Driver(services).run_until_done(ids, seconds)


def emulator_counters(emulator: EmulatorServer, cluster: str = "edge-a") -> dict[str, object]:
    """Node-pool create/delete counters of one emulated cluster, from its admin endpoint."""
    state = httpx.get(f"{emulator.url}/emulator/state").json()
    (found,) = [c for c in state["clusters"] if c["name"] == cluster]
    return dict(found["counters"])


def test_a_task_goes_from_pending_to_succeeded_through_every_phase(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    submit(db_url, "t-happy", "alice", "2x4")
    history = run_until_done(services, ["t-happy"])["t-happy"]

    # With its queue's slot free, a task is taken in (Waiting) and picked in the same tick.
    assert history == [
        ("Pending", "Provisioning"),
        ("Pending", "Dispatching"),
        ("Running", ""),
        ("Succeeded", ""),
    ]
    with services.db() as s:
        task = repo.get_task(s, "t-happy")
        assert task is not None
        assert (
            task.dispatched_at is not None
            and task.node_pool_name
            and task.node_pool_name.startswith("falcon-")
        )
        pool = repo.get_pool(s, CLUSTER.id, task.node_pool_name)
    assert pool is not None and pool.state == repo.PoolState.DELETED
    logs = list((emulator.data_dir / "gcs" / "bucket-a" / "logs" / "t-happy").glob("*.log"))
    assert len(logs) == 2  # 2x4 on ct6e-standard-4t is a 2-node slice: one pod, one log per node


def test_a_kept_pool_is_reused_by_the_next_task_of_the_same_queue(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """t-stuck holds the queue slot (its image never pulls) while t-first finishes, so t-next
    is still waiting then: t-first's pool is kept and handed to t-next with no second create."""
    driver = Driver(services)
    submit(db_url, "t-first", "alice", "2x2", run_seconds=2.0)
    driver.run_until(lambda t: t["t-first"].status is Status.RUNNING)
    submit(db_url, "t-stuck", "carol", "2x2", image="trainer:missing", timeout=4)
    driver.run_until(lambda t: t["t-stuck"].reason is Reason.DISPATCHING)
    submit(db_url, "t-next", "bob", "2x2")
    driver.run_until_done(["t-first", "t-stuck", "t-next"])

    with services.db() as s:
        first, stuck, nxt = (repo.get_task(s, i) for i in ("t-first", "t-stuck", "t-next"))
    assert first is not None and stuck is not None and nxt is not None
    assert first.status is Status.SUCCEEDED and nxt.status is Status.SUCCEEDED
    assert stuck.status is Status.FAILED and stuck.reason is Reason.TIMEOUT
    assert ("Pending", "Waiting") in driver.history["t-next"]
    assert nxt.node_pool_name == first.node_pool_name  # handed over, not created again
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
    with services.db() as s:
        bad, none, good = (repo.get_task(s, i) for i in ("t-bad", "t-nocluster", "t-good"))
    assert bad is not None and bad.status is Status.FAILED and bad.reason is Reason.INVALID_SPEC
    assert "3x3" in (bad.message or "")
    assert none is not None and none.status is Status.FAILED and none.reason is Reason.NO_ELIGIBLE_CLUSTER
    assert good is not None and good.status is Status.SUCCEEDED


def test_settings_default_to_the_embedded_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FALCON_DATABASE_URL", raising=False)
    assert Settings().resolved_database_url.startswith("sqlite:///")
