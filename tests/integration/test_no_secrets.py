"""No credential or token reaches the database, a log line or what Prefect records of a run.

One task runs to Succeeded through real flow runs while Falcon's Google clients carry credentials
whose token is a unique marker (the emulator, like a stand-in for Google, accepts any bearer
token). Every log record of the ``falcon`` and ``prefect`` loggers is captured at DEBUG; then
every column of every table of Falcon's database, every captured message, and the Prefect
server's flow runs, task runs, logs and artifacts of the runs are searched for the marker.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from google.oauth2.credentials import Credentials
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterStartTime,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.logging.handlers import APILogHandler

from falcon.adapters.compute import Reservations, WorkloadPolicies
from falcon.adapters.credentials import gke_client, reservations_client, resource_policies_client
from falcon.adapters.gke import GkeNodePools
from falcon.bootstrap import serving
from falcon.domain.pool_economics import DeleteEachPolicy
from falcon.domain.status import Status
from falcon.services.context import Services
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import Driver, submit

MARKER = f"ya29.falcon-secret-{uuid.uuid4().hex}"


class MarkedCredentials(Credentials):
    """OAuth credentials holding the marker as access token; counts the requests it signs."""

    def __init__(self) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            token=MARKER, refresh_token=f"{MARKER}-refresh", client_secret=f"{MARKER}-client"
        )
        self.signed = 0

    def apply(self, headers: Mapping[str, str], token: str | None = None) -> None:
        self.signed += 1
        super().apply(headers, token)  # type: ignore[no-untyped-call]


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every record of Falcon's and Prefect's loggers, DEBUG included, whether they propagate or not."""
    loggers = [logging.getLogger(name) for name in ("falcon", "prefect")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        logger.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG)
    yield caplog
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)


def with_marked_credentials(services: Services, credentials: Credentials) -> Services:
    """The fixture's services, their Google clients built on ``credentials`` by the real factories."""
    settings, timeout = services.settings, services.settings.api_timeout_seconds
    return replace(
        services,
        node_pools=GkeNodePools(gke_client(settings, credentials), timeout),
        reservations=Reservations(reservations_client(settings, credentials), timeout),
        workload_policies=WorkloadPolicies(resource_policies_client(settings, credentials), timeout),
    )


def database_text(url: str) -> str:
    engine = sa.create_engine(url)
    try:
        metadata = sa.MetaData()
        metadata.reflect(engine)
        with engine.connect() as conn:
            rows = [row for table in metadata.sorted_tables for row in conn.execute(sa.select(table))]
    finally:
        engine.dispose()
    assert rows, "nothing read from the database"
    return "\n".join(repr(tuple(row)) for row in rows)


def prefect_text(since: datetime) -> str:
    """What the Prefect server keeps of the runs started since ``since``: runs, task runs, logs, artifacts."""
    APILogHandler().flush()
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(start_time=FlowRunFilterStartTime(after_=since))
        )
        ids = [run.id for run in runs]
        assert len(ids) >= 2, "the lifecycle and release runs are not on the server"
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id={"any_": ids}))
        log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids))
        logs = _until(
            lambda: client.read_logs(log_filter=log_filter),
            lambda found: any("event=released" in log.message for log in found),
        )
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids))
        )
    parts: list[Any] = [*runs, *tasks, *logs, *artifacts]
    return "\n".join(part.model_dump_json() for part in parts)


def _until(read: Any, done: Any, seconds: float = 15) -> Any:
    """Logs reach the server in batches: read until the last one is there."""
    deadline = time.monotonic() + seconds
    found = read()
    while not done(found) and time.monotonic() < deadline:
        time.sleep(0.2)
        found = read()
    assert done(found), "the release run's log line never reached the server"
    return found


def test_no_token_in_the_database_the_logs_or_the_prefect_runs(
    services: Services, db_url: str, emulator: EmulatorServer, captured: pytest.LogCaptureFixture
) -> None:
    since = datetime.now(UTC)
    credentials = MarkedCredentials()
    # Its pool is deleted, not kept, so that a release run (and GKE's deletion) runs too.
    marked = replace(with_marked_credentials(services, credentials), keep_policy=DeleteEachPolicy())
    submit(db_url, "t-secret", "alice", "2x2")
    driver = Driver(marked)
    with serving(marked):  # the lifecycle and release runs take these services too
        driver.run_until(lambda tasks: tasks["t-secret"].status is Status.SUCCEEDED)
        driver.close()
    assert credentials.signed > 0, "the marked credentials signed no request"

    # Each place searched holds the run's own traces (its task id), and never the token.
    stored, recorded = database_text(db_url), prefect_text(since)
    messages = [record.getMessage() for record in captured.records]
    assert "t-secret" in stored and "t-secret" in recorded
    assert any("event=released task_id=t-secret" in m for m in messages)
    assert MARKER not in stored
    assert not [m for m in messages if MARKER in m]
    assert MARKER not in recorded
