"""Starting the per-task flow runs and the queues' warm-pool runs, and telling whether one is alive.

Two launchers, chosen by ``FALCON_RUNS_IN``:

``ThreadLauncher`` (``dispatcher``, the default) runs the lifecycle, release and warm flows as
real Prefect flow runs (each visible in the UI with its task runs) in a bounded pool of threads
of the dispatcher's own process: no process start on the path from a Job's end to its task's
status, and one process's memory however many tasks acquire or release at once. Its run ids name
their owner, which beats in Falcon's database while its process lives: a second dispatcher (a
rollout overlap) counts another's runs alive while it beats, so it never starts a second run for
the same task, and resumes them once it is silent, however the process died.

``DeploymentLauncher`` (``deployments``) starts each run with ``run_deployment(timeout=0)`` and an
idempotency key per (task, attempt), for workers that run every flow run in a process or pod of
its own; a dispatcher that restarts mid-launch can never start a second run.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any, Protocol
from uuid import UUID

import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterExpectedStartTime,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.context import FlowRunContext, SettingsContext, SyncClientContext
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL

from falcon.adapters.clock import utc_now
from falcon.adapters.metrics import prefect_call
from falcon.domain.model import QueueKey

ACQUIRE_DEPLOYMENT = "task-lifecycle/task-lifecycle"
RELEASE_DEPLOYMENT = "task-release/task-release"
WARM_DEPLOYMENT = "warm-pools/warm-pools"
OWNER_SEPARATOR = "/"

logger = logging.getLogger(__name__)


class DeploymentLauncher:
    def __init__(self, as_subflow: bool = True) -> None:
        self._as_subflow = as_subflow

    @prefect_call
    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        run = run_deployment(
            ACQUIRE_DEPLOYMENT,
            parameters={"task_id": task_id, "lease_id": lease_id},
            timeout=0,
            idempotency_key=f"acquire-{task_id}-{attempt}",
            as_subflow=self._as_subflow,
            flow_run_name=f"acquire-{task_id}-{attempt}",
        )
        return str(run.id)  # type: ignore[union-attr]

    @prefect_call
    def start_release(self, task_id: str, attempt: int) -> str:
        run = run_deployment(
            RELEASE_DEPLOYMENT,
            parameters={"task_id": task_id},
            timeout=0,
            idempotency_key=f"release-{task_id}-{attempt}",
            as_subflow=self._as_subflow,
            flow_run_name=f"release-{task_id}-{attempt}",
        )
        return str(run.id)  # type: ignore[union-attr]

    @prefect_call
    def start_warm(self, queue: QueueKey) -> str:
        run = run_deployment(
            WARM_DEPLOYMENT,
            parameters={"cluster_id": queue.cluster_id, "topology": queue.topology},
            timeout=0,
            as_subflow=self._as_subflow,
            flow_run_name=f"warm-{queue.cluster_id}-{queue.topology}",
        )
        return str(run.id)  # type: ignore[union-attr]

    def is_alive(self, run_id: str) -> bool:
        return flow_run_alive(run_id)


@prefect_call
def flow_run_alive(flow_run_id: str) -> bool:
    """A flow run not yet in a final state; one Prefect does not know is not alive."""
    try:
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(UUID(flow_run_id))
    except ObjectNotFound:
        return False
    return run.state is None or not run.state.is_final()


@prefect_call
def next_scheduled_start(deployment_id: UUID) -> datetime | None:
    """When the deployment's next scheduled run is expected to start; None if none is scheduled."""
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                expected_start_time=FlowRunFilterExpectedStartTime(after_=utc_now()),
            ),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC,
            limit=1,
        )
    return runs[0].expected_start_time if runs else None


def tag_run(tags: Sequence[str]) -> None:
    """The current flow run gains ``tags``, so that filtering the Prefect UI by a tag finds it.
    Tags are set once the run has started (its launcher does not know the task's actor or
    cluster), and they are a view, not state: a Prefect API that fails to take them is logged and
    the run goes on.

    Its task runs are not tagged: Prefect 3 makes every tag of a task run a concurrency limit
    (``tag:<tag>``) that the task run acquires and releases, two more API calls per step, and
    a 503 on them fails the step (seen at scale: "Unable to acquire concurrency slots on
    ['tag:task:…']"). The steps are found under their flow run."""
    context = FlowRunContext.get()
    run = context.flow_run if context else None
    if run is not None and not set(tags) <= set(run.tags):
        try:
            _add_tags(run.id, sorted({*run.tags, *tags}))
        except Exception:
            logger.warning("event=run_tags_failed run=%s", run.id, exc_info=True)


@prefect_call
def _add_tags(flow_run_id: UUID, tags: list[str]) -> None:
    with get_client(sync_client=True) as client:
        client.update_flow_run(flow_run_id, tags=tags)


Flow = Callable[..., Any]
BUSY_RESEND_SECONDS = 0.2  # a request the Prefect API answered 503 is sent again this soon
BUSY_PATIENCE_SECONDS = 10.0  # for this long, before Prefect's client back-off takes over
BEAT_SECONDS = 2.0  # how often a ThreadLauncher says its process lives
OWNER_STALE_SECONDS = 15.0  # an owner silent this long is gone, and its runs with it
BEAT_READ_SECONDS = 1.0  # another owner's beat is read again after this long (ThreadLauncher.is_alive)
GONE = datetime(1970, 1, 1, tzinfo=UTC)  # the last beat of an owner whose runs all stopped


class RunOwners(Protocol):
    """Where run owners' heartbeats are kept (Falcon's database)."""

    def beat(self, owner: str, now: datetime) -> None: ...
    def last_beat(self, owner: str) -> datetime | None: ...


class ThreadLauncher:
    """Flow runs in ``threads`` daemon threads of this process; runs beyond that wait their turn.

    Its run ids name it, the owner; a thread beats for it in ``owners`` every BEAT_SECONDS, and a
    run of another owner is alive while that owner beat within OWNER_STALE_SECONDS. A process
    that dies however it dies (SIGKILL, OOM, a lost node: no one marks its flow run Crashed)
    stops beating, and the next dispatcher resumes its tasks from the database.

    ``stop`` ends the runs cooperatively: the steps' clock (``StoppableClock`` on ``stopping``)
    raises RunStopped at their next wait. The threads are daemons, so a run still inside one API
    call when the process exits dies as in any crash, and is resumed the same way."""

    def __init__(self, flows: tuple[Flow, Flow, Flow], threads: int, owners: RunOwners) -> None:
        self._acquire, self._release, self._warm = flows
        self._owners = owners
        self.owner = str(uuid.uuid4())
        self.stopping = threading.Event()
        self._queue: queue.SimpleQueue[tuple[str, Flow, dict[str, Any]] | None] = queue.SimpleQueue()
        self._live: set[str] = set()  # queued or running
        self._lock = threading.Lock()
        self._beats: dict[str, tuple[float, datetime | None]] = {}  # owner -> (monotonic read at, beat)
        self._prefect_settings = SettingsContext.get()  # its creator's, which a new thread lacks
        self._workers = [
            threading.Thread(target=self._work, daemon=True, name=f"flow-runs-{n}") for n in range(threads)
        ]
        for worker in self._workers:
            worker.start()
        self._owners.beat(self.owner, utc_now())  # alive before its first run is recorded
        threading.Thread(target=self._beat, daemon=True, name="flow-runs-beat").start()

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        return self._start(f"acquire-{task_id}-{attempt}", self._acquire, task_id=task_id, lease_id=lease_id)

    def start_release(self, task_id: str, attempt: int) -> str:
        return self._start(f"release-{task_id}-{attempt}", self._release, task_id=task_id)

    def start_warm(self, queue: QueueKey) -> str:
        key = f"warm-{queue.cluster_id}-{queue.topology}-{uuid.uuid4().hex[:8]}"
        return self._start(key, self._warm, cluster_id=queue.cluster_id, topology=queue.topology)

    def is_alive(self, run_id: str) -> bool:
        owner, separator, key = run_id.partition(OWNER_SEPARATOR)
        if owner == self.owner:
            with self._lock:
                return key in self._live
        if not separator:
            return flow_run_alive(run_id)  # started by a DeploymentLauncher
        beat = self._last_beat(owner)
        return beat is not None and (utc_now() - beat).total_seconds() < OWNER_STALE_SECONDS

    def _last_beat(self, owner: str) -> datetime | None:
        """Another owner's last beat, read at most once a second: after a handover every acquiring
        task's run is the old dispatcher's, and a round asked for each (a read per task: 0.24 s
        of a new dispatcher's first round at full size). A beat comes every BEAT_SECONDS, and is
        stale only after OWNER_STALE_SECONDS."""
        now = time.monotonic()
        with self._lock:
            read_at, beat = self._beats.get(owner, (-math.inf, None))
        if now - read_at >= BEAT_READ_SECONDS:
            beat = self._owners.last_beat(owner)
            with self._lock:
                self._beats[owner] = (now, beat)
        return beat

    def _beat(self) -> None:
        while not self.stopping.wait(BEAT_SECONDS):
            try:
                self._owners.beat(self.owner, utc_now())
            except Exception:  # the database away: the next beat tries again
                logger.warning("event=run_owner_beat_failed owner=%s", self.owner, exc_info=True)

    def stop(self, grace_seconds: float) -> list[str]:
        """Ask every run to stop, wait up to ``grace_seconds``; returns the runs still going."""
        self.stopping.set()
        for _ in self._workers:
            self._queue.put(None)
        deadline = time.monotonic() + grace_seconds
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            left = sorted(self._live)
        if not left:  # all stopped: the next dispatcher need not wait for this owner to go stale
            self._owners.beat(self.owner, GONE)
        return left

    def _start(self, key: str, flow: Flow, **parameters: Any) -> str:
        with self._lock:
            if key not in self._live:  # the same attempt asked twice: one run
                self._live.add(key)
                self._queue.put((key, flow, parameters))
        return f"{self.owner}{OWNER_SEPARATOR}{key}"

    def _work(self) -> None:
        with ExitStack() as held:
            if (settings := self._prefect_settings) is not None:  # e.g. a test harness's API
                held.enter_context(SettingsContext(profile=settings.profile, settings=settings.settings))
            _share_prefect_client(held)
            while (item := self._queue.get()) is not None:
                self._run(*item)

    def _run(self, key: str, flow: Flow, parameters: dict[str, Any]) -> None:
        try:
            if not self.stopping.is_set():
                flow(**parameters)
        except Exception:  # the flow run records its own failure; the dispatcher restarts it
            logger.debug("event=flow_run_failed run=%s", key, exc_info=True)
        finally:
            with self._lock:
                self._live.discard(key)


def _share_prefect_client(held: ExitStack) -> None:
    """Enter a Prefect client for the calling thread's whole life, which its flow runs (and their
    task runs) take up in place of one each: a client costs a TLS context (certificates loaded
    even for an http:// API; with it, 23 ms more CPU a run in bench_run_overhead.py) and a new
    connection to the Prefect server, per run, where a keep-alive connection serves them all.
    Without an API URL (Prefect's ephemeral mode, in tests) or when the client cannot be entered
    (the API away at the thread's start), each run opens its own, as Prefect does by default."""
    if not PREFECT_API_URL.value():
        return
    try:
        http = held.enter_context(SyncClientContext()).client._client
        http._transport = ResendWhenBusy(http._transport)
    except Exception:
        logger.warning("event=shared_prefect_client_failed", exc_info=True)


class ResendWhenBusy(httpx.BaseTransport):
    """Sends a request again every ``pause`` seconds while the Prefect API answers 503, for up to
    ``patience`` seconds; only then does Prefect's client see the 503.

    A SQLite-backed Prefect server answers 503 under concurrent writes, and Prefect's client then
    sleeps 2 s, 4 s, ... before it asks again. A lifecycle run's flow-run creation waited so
    for up to 14 s (seen in bench_pool_economics.py, where 150x time compression made it 35
    minutes of a task's start), on a server free again a moment later. A body that cannot be
    sent twice (a stream) is sent once."""

    def __init__(
        self,
        inner: httpx.BaseTransport,
        pause: float = BUSY_RESEND_SECONDS,
        patience: float = BUSY_PATIENCE_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._inner, self._pause, self._patience, self._sleep = inner, pause, patience, sleep

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        tries = 1 + int(self._patience / self._pause) if isinstance(request.stream, httpx.ByteStream) else 1
        for _ in range(tries - 1):
            response = self._inner.handle_request(request)
            if response.status_code != httpx.codes.SERVICE_UNAVAILABLE:
                return response
            response.close()
            self._sleep(self._pause)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()
