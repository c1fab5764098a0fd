"""Helpers for flow-level tests: the emulated fleet, row submission, and a Driver that ticks a
real Dispatcher whose lifecycle and release flows run as threads of the test."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from sqlalchemy.orm import Session

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.orm import TaskProgressRow
from falcon.adapters.db.session import session_scope
from falcon.domain.lifecycle import Phase
from falcon.domain.model import Cluster, ClusterStatus, Task
from falcon.domain.status import TERMINAL
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher
from falcon.services.ports import Launcher
from falcon.settings import get_settings
from falcon_emulator.server import EmulatorServer
from tests.integration.launcher import InProcessLauncher

ROOT = Path(__file__).resolve().parents[2]

EMULATOR = {
    "nodePoolProvisionSeconds": 0.5,
    "podStartSeconds": 0.2,
    "projects": {
        "proj-a": {
            "reservations": {"res-a": {"zone": "us-east5-b", "machineType": "ct6e-standard-4t", "count": 8}},
            "buckets": {"bucket-a": {"writers": ["serviceAccount:proj-a.svc.id.goog[falcon-jobs/default]"]}},
            "clusters": {
                "edge-a": {
                    "location": "us-east5",  # regional, as production clusters are
                    "zones": ["us-east5-a", "us-east5-b", "us-east5-c"],
                    "flexStart": {"available": True, "delaySeconds": 0.5},
                }
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
    "us-east5-b",  # the node zone: where every pool goes and the reservation is read
)


def submit(
    url: str,
    task_id: str,
    actor: str,
    topology: str,
    run_seconds: float = 0.5,
    image: str = "trainer:1",
    timeout: int = 600,
    env: dict[str, str] | None = None,
    tpu_type: str = "v6e",
) -> None:
    spec = {
        "image": image,
        "command": ["python", "train.py"],
        "topology": topology,
        "env": {"EMULATOR_RUN_SECONDS": str(run_seconds), **(env or {})},
    }
    with session_scope(url) as s:
        repo.insert_task(
            s,
            task_id=task_id,
            actor=actor,
            name=f"job-{task_id}",
            tpu_type=tpu_type,
            spec=spec,
            timeout_seconds=timeout,
            now=utc_now(),
        )


def task_row(services: Services, task_id: str) -> Task:
    with db(services) as s:
        task = repo.get_task(s, task_id)
    assert task is not None
    return task


def with_env(services: Services, monkeypatch: pytest.MonkeyPatch, **env: str) -> Services:
    """Services (and the flow runs, which read the environment) with these FALCON_* settings."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    return replace(services, settings=get_settings())


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without PREFECT_* and FALCON_*: what a new user's shell has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "FALCON_"))}
    return {**env, **extra}


def wait_http(url: str, seconds: float) -> None:
    """Until ``url`` answers 200 (a server started by the test came up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} did not come up in {seconds}s")


def db(services: Services) -> AbstractContextManager[Session]:
    """A transaction on the test's database, for reading what the steps wrote."""
    return session_scope(services.settings.resolved_database_url)


def seldom_used(services: Services, topology: str = "2x2", cluster_id: str = CLUSTER.id) -> None:
    """The queue's history as intake records it: finished tasks taken in about once an hour.
    Keep-or-delete by cost then deletes a pool nobody waits for at once, which the tests about
    what a release does with its pool (delete it, report a failed deletion) rely on."""
    now = utc_now()
    with db(services) as s:
        for n in range(6):
            s.add(
                TaskProgressRow(
                    task_id=f"past-{cluster_id}-{topology}-{n}",
                    phase=Phase.DONE.value,
                    cluster_id=cluster_id,
                    topology=topology,
                    attempt=0,
                    queued_at=now - timedelta(hours=6 - n),
                    updated_at=now,
                )
            )


class Driver:
    """Ticks a real Dispatcher whose lifecycle and release flows run as threads of the test.

    Every Driver is closed at the test's teardown (the ``services`` fixture does it): its
    launches are waited for and its flow threads joined, so no run outlives its test."""

    open_drivers: ClassVar[list[Driver]] = []

    def __init__(self, services: Services, launcher: Launcher | None = None) -> None:
        self.launcher = launcher or InProcessLauncher()
        self.services = replace(services, launcher=self.launcher)
        self.dispatcher = Dispatcher(self.services)
        self.history: dict[str, list[tuple[str, str]]] = {}
        Driver.open_drivers.append(self)

    def close(self, timeout: float = 30) -> list[str]:
        self.dispatcher.close()
        join = getattr(self.launcher, "join", None)
        return join(timeout) if join else []

    def tick(self) -> None:
        self.dispatcher.tick()

    def observe(self) -> dict[str, Task]:
        with db(self.services) as s:
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


def inject_fault(
    emulator: EmulatorServer, method: str, path_regex: str, status: int, message: str, times: int = 0
) -> None:
    """Make the emulator answer the next ``times`` matching requests with an error (0: all of them)."""
    rule = {"method": method, "pathRegex": path_regex, "status": status, "message": message, "times": times}
    httpx.post(f"{emulator.url}/emulator/faults", json={"rules": [rule]}).raise_for_status()


def with_project(name: str, project: dict[str, object]) -> dict[str, object]:
    """EMULATOR with one more project (or one project replaced)."""
    projects = dict(EMULATOR["projects"])  # type: ignore[call-overload]
    return {**EMULATOR, "projects": {**projects, name: project}}


def request_abort(services: Services, *task_ids: str) -> None:
    """What upstream does: status Aborting with aborting_at."""
    now = utc_now()
    with db(services) as s:
        for task_id in task_ids:
            assert repo.request_abort(s, task_id, now)
