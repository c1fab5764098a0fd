"""ThreadLauncher with real Prefect flow runs against a Prefect server: the runs one thread executes
share one Prefect client (one TLS context, one keep-alive connection) instead of opening one each,
and each is still a flow run of its own in Prefect."""

from __future__ import annotations

import threading
import time

from prefect import flow
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.context import FlowRunContext, SyncClientContext

from falcon.adapters.runs import ThreadLauncher
from tests.unit.fakes import MemoryTaskStore

seen: list[tuple[SyncPrefectClient, str, str]] = []  # (the run's client, its flow run id, its thread)
together = threading.Barrier(1)  # the first runs wait here until as many run at once


@flow(name="falcon-test-client-of-run")
def client_of_run(task_id: str, lease_id: str) -> None:
    context, run = SyncClientContext.get(), FlowRunContext.get()
    assert context is not None and run is not None and run.flow_run is not None
    seen.append((context.client, str(run.flow_run.id), threading.current_thread().name))
    if len(seen) <= together.parties:
        together.wait(30)


def _run_all(threads: int, runs: int) -> None:
    global together
    seen.clear()
    together = threading.Barrier(threads)
    launcher = ThreadLauncher((client_of_run,) * 3, threads, MemoryTaskStore())
    ids = [launcher.start_acquire(f"t{n}", "", 1) for n in range(runs)]
    deadline = time.monotonic() + 60
    while any(launcher.is_alive(run) for run in ids):
        assert time.monotonic() < deadline, "the runs did not finish"
        time.sleep(0.05)
    assert launcher.stop(5) == []


def test_the_runs_of_one_thread_share_its_client_and_stay_runs_of_their_own(prefect_api: None) -> None:
    _run_all(threads=1, runs=3)
    clients = {id(client) for client, _, _ in seen}
    run_ids = [run_id for _, run_id, _ in seen]
    assert len(seen) == 3 and len(clients) == 1, "one client for every run of the thread"
    assert len(set(run_ids)) == 3
    with get_client(sync_client=True) as client:
        found = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=run_ids)))
    assert sorted(str(r.id) for r in found) == sorted(run_ids)
    assert all(r.state is not None and r.state.is_completed() for r in found)


def test_each_thread_has_a_client_of_its_own(prefect_api: None) -> None:
    _run_all(threads=2, runs=6)
    clients_of = {thread: {id(c) for c, _, t in seen if t == thread} for _, _, thread in seen}
    assert len(seen) == 6 and len(clients_of) == 2, "both threads ran (the first two runs met)"
    assert all(len(clients) == 1 for clients in clients_of.values())
    first, second = clients_of.values()
    assert first != second, "threads never share a client (httpx clients are not thread-safe)"
