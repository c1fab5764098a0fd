"""The dispatcher's process: SIGTERM stops it at a tick boundary within seconds, leaving what it
started resumable (design Phase 2: 优雅关闭); it serves liveness and readiness probes that turn
red when the loop wedges or the database goes (Phase 2: 健康检查 / readiness probe).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import pytest
import sqlalchemy as sa
from flows.dispatcher import health_probes

from falcon.adapters.clock import SystemClock
from falcon.adapters.db import repository as repo
from falcon.domain.lifecycle import Phase
from falcon.domain.status import Reason, Status
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher, DispatcherLoop, TickReport
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import EMULATOR, ROOT, Driver, db, submit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        json.loads(error.read())  # a failing probe still answers with its JSON body
        return int(error.code)
    except OSError:
        return 0  # not listening (yet)


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.05)


def row_reason(services: Services, task_id: str) -> Reason | None:
    with db(services) as s:
        task = repo.get_task(s, task_id)
    assert task is not None
    return task.reason


# SQLite only: what SIGTERM does is the process's, the same on either database, and a child
# process costs seconds of Python and Prefect start-up
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("emulator_config", [{**EMULATOR, "nodePoolProvisionSeconds": 6.0}])
def test_sigterm_stops_the_dispatcher_process_within_seconds_and_its_pick_resumes(
    services: Services, db_url: str, emulator: EmulatorServer, tmp_path: Path
) -> None:
    from prefect.settings import PREFECT_API_URL

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "FALCON_"))}
    env.update(
        PREFECT_API_URL=str(PREFECT_API_URL.value()),
        FALCON_DATABASE_URL=db_url,
        FALCON_EMULATOR_URL=emulator.url,
        FALCON_HEALTH_PORT=str(port),
        FALCON_HOME=str(tmp_path),
    )
    code = "from flows.dispatcher import dispatcher; dispatcher(run_seconds=120, tick_seconds=0.2)"
    child = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: probe(port, "/livez") == 200, 60, "the dispatcher process serving /livez")
        assert probe(port, "/readyz") == 200
        submit(db_url, "t1", "alice", "2x2", run_seconds=0.2)
        # picked, and its lifecycle run (a thread of this process) waits for GKE's 6 s create
        wait_for(lambda: row_reason(services, "t1") is Reason.PROVISIONING, 30, "t1 picked")

        signalled = time.monotonic()
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=15)
        exited = time.monotonic() - signalled
    finally:
        child.kill()
        _, stderr = child.communicate()
    assert exited < 10, stderr[-3000:]  # the tick under way, then the run stops at its next wait

    with db(services) as s:
        task, progress = repo.get_task(s, "t1"), repo.get_progress(s, "t1")
    assert task is not None and (task.status, task.reason) == (Status.PENDING, Reason.PROVISIONING)
    assert progress is not None and (progress.phase, progress.attempt) == (Phase.ACQUIRING, 1)
    assert progress.lease_id  # the pick and its slot were written together
    # the next dispatcher restarts the run that stopped, and it ends as if nothing happened
    assert Driver(services).run_until_done(["t1"], 60)["t1"][-1] == ("Succeeded", "")


def test_liveness_fails_while_the_loop_is_wedged_and_readiness_while_the_database_is_gone(
    services: Services, db_url: str
) -> None:
    gate = threading.Event()
    gate.set()
    work = Dispatcher(services)

    def tick() -> TickReport:
        gate.wait()  # the test closes it to wedge the loop inside a tick
        return work.tick()

    loop = DispatcherLoop(tick, SystemClock(), 0.1, logging.getLogger(__name__))
    settings = services.settings.model_copy(update={"health_port": free_port(), "liveness_seconds": 1.0})
    runner = threading.Thread(target=loop.run, args=(60,))
    with health_probes(settings, loop.liveness):
        runner.start()
        try:
            port = settings.health_port
            assert (probe(port, "/livez"), probe(port, "/readyz")) == (200, 200)
            gate.clear()
            wedged = time.monotonic()
            wait_for(lambda: probe(port, "/livez") == 503, 3, "/livez failing")
            assert time.monotonic() - wedged < 1.0 + 0.5  # the bound, and the tick under way
            gate.set()
            wait_for(lambda: probe(port, "/livez") == 200, 3, "/livez passing again")

            _remove_database(db_url)
            assert probe(port, "/readyz") == 503
        finally:
            loop.stop.set()
            gate.set()
            runner.join()
            work.close()


def _remove_database(url: str) -> None:
    """Make the database unreachable for real: the SQLite file deleted, the MariaDB schema dropped."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).unlink()
        return
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text(f"DROP DATABASE {engine.url.database}"))
    engine.dispose()


def test_a_run_started_off_schedule_ends_before_the_next_scheduled_run_of_its_deployment(
    prefect_api: None,
) -> None:
    """Else CANCEL_NEW cancels that run, and nothing dispatches until the interval after it."""
    from flows.dispatcher import cut_short
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    from falcon.adapters.clock import utc_now
    from falcon.adapters.runs import next_scheduled_start

    @flow(name="schedule-probe")
    def probe_flow() -> None:
        return None

    now = utc_now()
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow(probe_flow)
        deployment = client.create_deployment(flow_id=flow_id, name="schedule-probe")
        assert next_scheduled_start(deployment) is None
        for minutes in (9, 4):
            client.create_flow_run_from_deployment(
                deployment, state=Scheduled(scheduled_time=now + timedelta(minutes=minutes))
            )
    starts = next_scheduled_start(deployment)
    assert starts is not None and abs((starts - now).total_seconds() - 240) < 1
    assert cut_short(590, starts, now, 10) == pytest.approx(230, abs=1)
    assert cut_short(60, starts, now, 10) == 60
    assert cut_short(590, now + timedelta(seconds=5), now, 10) == 0
    assert cut_short(590, None, now, 10) == 590


@pytest.mark.parametrize(("name", "successor_runs"), [("dispatcher", True), ("tidal-controller", False)])
def test_a_successor_submitted_while_its_predecessor_stops_runs_only_where_two_may_overlap(
    prefect_api: None, name: str, successor_runs: bool
) -> None:
    """A runner or worker submits the next scheduled run up to 20 s early. With prefect.yaml's
    limits a dispatcher's successor starts while its predecessor is still running (limit 2; a
    third is cancelled), while a controller's is cancelled (limit 1), which is why a controller
    run ends ``HANDOVER_SECONDS`` before its successor is due."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import ConcurrencyOptions, StateType
    from prefect.states import Pending, Running

    from falcon.local import long_running_options, prefect_yaml_deployment

    @flow(name=f"handover-{name}")
    def probe_flow() -> None:
        return None

    limit = long_running_options(prefect_yaml_deployment(name))["concurrency_limit"]
    with get_client(sync_client=True) as client:
        deployment = client.create_deployment(
            flow_id=client.create_flow(probe_flow),
            name=name,
            concurrency_limit=limit.limit,
            concurrency_options=ConcurrencyOptions(collision_strategy=limit.collision_strategy),
        )
        runs = [client.create_flow_run_from_deployment(deployment) for _ in range(3)]

        def submit(run_id: UUID) -> StateType:
            state = client.set_flow_run_state(run_id, Pending()).state
            assert state is not None
            return state.type

        assert submit(runs[0].id) is StateType.PENDING
        client.set_flow_run_state(runs[0].id, Running())  # the predecessor, still stopping
        successor = submit(runs[1].id)
        assert (successor is StateType.PENDING) is successor_runs, successor
        if successor_runs:
            assert submit(runs[2].id) is StateType.CANCELLED  # never three dispatchers
