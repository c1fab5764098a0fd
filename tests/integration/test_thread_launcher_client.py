"""Flow runs in the dispatcher's threads (ThreadLauncher) share one Prefect client per thread:
a client per run cost an SSL context each (the CA bundle read and parsed) and a version check.
Real Prefect flow runs against the suite's Prefect server; the heartbeats go to the unit tests'
in-memory store, the edge of this unit."""

from __future__ import annotations

import time

from prefect import flow
from prefect.client.orchestration import get_client

from falcon.adapters.runs import ThreadLauncher
from tests.unit.fakes import MemoryTaskStore

CLIENTS: list[int] = []


@flow(name="client-probe", persist_result=False)
def client_probe(task_id: str, lease_id: str) -> None:
    CLIENTS.append(id(get_client(sync_client=True)))


def test_the_flow_runs_of_one_thread_share_its_prefect_client(prefect_api: None) -> None:
    CLIENTS.clear()
    launcher = ThreadLauncher((client_probe, client_probe, client_probe), 1, MemoryTaskStore())
    runs = [launcher.start_acquire(f"t{n}", "", 1) for n in range(3)]
    deadline = time.monotonic() + 60
    while any(launcher.is_alive(run) for run in runs):
        assert time.monotonic() < deadline, "the runs did not end"
        time.sleep(0.05)
    assert launcher.stop(5) == []
    assert len(CLIENTS) == 3 and len(set(CLIENTS)) == 1
