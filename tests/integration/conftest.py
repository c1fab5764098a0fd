"""Flow-level fixtures: an emulator per test, and Services wired to it, the test database and Prefect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.bootstrap import build_services
from falcon.domain.model import Cluster
from falcon.services.context import Services
from falcon.settings import get_settings
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, EMULATOR, Driver
from tests.integration.launcher import InProcessLauncher


@pytest.fixture
def emulator_config() -> dict[str, Any]:
    """The emulated fleet; a test needing another one parametrizes this fixture by name."""
    return EMULATOR


@pytest.fixture
def cluster() -> Cluster:
    """The one registered cluster; a test needing another one parametrizes this fixture by name."""
    return CLUSTER


@pytest.fixture
def emulator(tmp_path: Path, emulator_config: dict[str, Any]) -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig.from_dict(emulator_config), tmp_path / "emu") as server:
        yield server


@pytest.fixture
def services(
    db_url: str,
    emulator: EmulatorServer,
    monkeypatch: pytest.MonkeyPatch,
    prefect_api: None,
    cluster: Cluster,
) -> Iterator[Services]:
    monkeypatch.setenv("FALCON_DATABASE_URL", db_url)
    monkeypatch.setenv("FALCON_EMULATOR_URL", emulator.url)
    monkeypatch.setenv("FALCON_POLL_SECONDS", "0.2")
    monkeypatch.setenv("FALCON_RECONCILE_SECONDS", "0.3")
    monkeypatch.setenv("FALCON_MESSAGE_LOCALE", "en")
    monkeypatch.setenv("FALCON_POOL_CREATION_PRIOR_SECONDS", "1")  # emulated pools take about that
    # The view reads each reservation every round it is due: it would take the one-off Compute
    # faults tests inject for a task's reads. test_prefect_ui turns it on where it is the subject.
    monkeypatch.setenv("FALCON_VIEW_SECONDS", "0")
    get_settings.cache_clear()
    settings = get_settings()
    with session_scope(db_url) as s:
        repo.add_cluster(s, cluster, utc_now())
    launcher = InProcessLauncher()
    yield build_services(settings, launcher)
    still_running = launcher.join(30) + [run for d in Driver.open_drivers for run in d.close()]
    Driver.open_drivers.clear()
    drop_queue_slots()
    get_settings.cache_clear()  # the next test must not see this test's environment
    assert not still_running, f"flow runs outlived their test: {still_running}"


def drop_queue_slots() -> None:
    """Delete the queue slots (Prefect concurrency limits) this test created: the next test's
    queues start free even though tests share cluster ids."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        for limit in client.read_global_concurrency_limits(limit=200, offset=0):
            if limit.name.startswith("falcon:"):
                client.delete_global_concurrency_limit_by_name(limit.name)
