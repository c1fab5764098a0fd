"""The one-machine stack: a Prefect server, the emulator, and Falcon's deployments served.

``falcon local`` runs it in the foreground; ``falcon demo`` runs it on the embedded defaults,
submits sample tasks across two clusters and waits for them to finish.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import httpx
import psutil
import yaml
from prefect import Flow
from prefect.deployments.runner import RunnerDeployment

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.session import session_scope
from falcon.domain.model import Cluster, ClusterStatus
from falcon.domain.status import TERMINAL, Status
from falcon.settings import Settings, get_settings

PROJECT_DIR = Path(__file__).resolve().parents[2]

# The emulator creates a node pool in 3 s (nodePoolProvisionSeconds): the creation time Falcon
# assumes for keep-or-delete until it has observed some, where GKE's TPU slices take minutes.
EMULATED_CREATION_SECONDS = "5"
# The demo's tasks are done within seconds of each other, its pools created side by side: the
# dispatcher's view (FALCON_VIEW_SECONDS, 10 s) is published more often so that the Artifacts
# page shows its queues while they hold tasks.
DEMO_VIEW_SECONDS = "2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    """The Prefect API to use: ``PREFECT_API_URL`` when set, else a local ``prefect server`` with
    leases on disk (so a restart does not leak queue slots), stopped with its whole process tree."""
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem",
        "PREFECT_SERVER_API_PORT": str(port),
    }
    home.mkdir(parents=True, exist_ok=True)
    with (home / "server.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}/api"
            _wait_healthy(url, proc)
            yield url
        finally:
            stop_tree(proc)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("prefect server did not become healthy")


@contextmanager
def emulator(config: Path | None, port: int, data_dir: Path) -> Iterator[str]:
    """The emulator on ``port`` in this process (0 = any free port); yields its URL."""
    from falcon_emulator.config import EmulatorConfig
    from falcon_emulator.server import EmulatorServer

    with EmulatorServer(EmulatorConfig.load(config), data_dir, port=port) as server:
        yield server.url


# Deployment name -> entrypoint of the flows that loop for a whole run (see prefect.yaml).
LONG_RUNNING = {
    "dispatcher": "flows/dispatcher.py:dispatcher",
    "tidal-controller": "flows/tidal.py:tidal_controller",
}


def serve_deployments() -> None:
    """Serve the long-running flows (the dispatcher and the tidal controller: scheduled, never two
    at once, replaced at once when they crash, as prefect.yaml deploys them), the per-task flows
    and the warm-pool flow; blocks."""
    from prefect import serve
    from prefect.flows import load_flow_from_entrypoint

    os.chdir(PROJECT_DIR)
    served_since = utc_now()
    lifecycle: Flow[..., Any] = load_flow_from_entrypoint("flows/lifecycle.py:task_lifecycle")
    release: Flow[..., Any] = load_flow_from_entrypoint("flows/lifecycle.py:task_release")
    warm: Flow[..., Any] = load_flow_from_entrypoint("flows/warming.py:warm_pools")
    long_running = []
    for name, entrypoint in LONG_RUNNING.items():
        deployed = prefect_yaml_deployment(name)
        flow: Flow[..., Any] = load_flow_from_entrypoint(entrypoint)
        long_running.append(_sync(flow.to_deployment)(name, **long_running_options(deployed)))
        threading.Thread(
            target=_start_now, args=(flow.name, name, deployed["parameters"], served_since), daemon=True
        ).start()
    serve(
        *long_running,
        _sync(lifecycle.to_deployment)("task-lifecycle"),
        _sync(release.to_deployment)("task-release"),
        _sync(warm.to_deployment)("warm-pools"),
        limit=int(os.environ.get("FALCON_RUNNER_LIMIT", "25")),
    )


def prefect_yaml_deployment(name: str) -> dict[str, Any]:
    """A deployment's entry in prefect.yaml: what `prefect deploy` rolls out."""
    config = yaml.safe_load((PROJECT_DIR / "prefect.yaml").read_text())
    return next(d for d in config["deployments"] if d["name"] == name)


def long_running_options(deployed: dict[str, Any]) -> dict[str, Any]:
    """prefect.yaml's entry of a long-running flow as Flow.to_deployment's arguments."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig
    from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger

    (schedule,) = deployed["schedules"]
    return {
        "interval": timedelta(seconds=schedule["interval"]),
        "parameters": deployed["parameters"],
        "concurrency_limit": ConcurrencyLimitConfig(**deployed["concurrency_limit"]),
        "triggers": [DeploymentEventTrigger(**trigger) for trigger in deployed["triggers"]],
    }


def _sync(method: Callable[..., Any]) -> Callable[..., RunnerDeployment]:
    """Prefect's to_deployment is async-dispatched; called from sync code it returns the value."""
    return cast(Callable[..., RunnerDeployment], method)


def _start_now(flow_name: str, deployment: str, parameters: dict[str, Any], served_since: datetime) -> None:
    """Do not wait for the first scheduled tick: start a run as soon as the deployment is served,
    after crashing the runs a killed predecessor of this runner left behind."""
    from prefect.deployments import run_deployment

    for _ in range(120):
        try:
            _crash_runs_of_a_dead_runner(deployment, served_since)
            run_deployment(f"{flow_name}/{deployment}", timeout=0, as_subflow=False, parameters=parameters)
            return
        except Exception:
            time.sleep(1)


def _crash_runs_of_a_dead_runner(deployment: str, served_since: datetime) -> None:
    """Runs of a long-running deployment that entered Running or Pending before this runner started
    belong to a runner that was killed (only one serves them here). Left alone they would hold the
    deployment's concurrency slot, and every new run would be cancelled until its lease expired."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.PENDING])
                )
            ),
        )
        for run in runs:
            if run.state is not None and run.state.timestamp < served_since:
                client.set_flow_run_state(run.id, Crashed(message="its runner was killed"), force=True)


def run_local(with_emulator: bool, emulator_config: Path | None, emulator_port: int) -> int:
    """``falcon local``: the stack in the foreground until Ctrl-C or SIGTERM; 1 if it died."""
    if with_emulator:
        os.environ.setdefault("FALCON_POOL_CREATION_PRIOR_SECONDS", EMULATED_CREATION_SECONDS)
    settings = pin_settings()
    upgrade(settings.resolved_database_url)
    with stop_on_signals(), ExitStack() as stack:
        url = stack.enter_context(prefect_server(settings.home / "prefect"))
        print(f"Prefect UI: {url.removesuffix('/api')}", flush=True)
        emulator_url = settings.emulator_url
        if with_emulator:
            emulator_url = stack.enter_context(
                emulator(emulator_config, emulator_port, settings.home / "emulator")
            )
            print(f"emulator: {emulator_url}", flush=True)
        port = choose_health_port()
        runner = stack.enter_context(served_stack(settings.home, url, emulator_url))
        print(f"dispatcher metrics: http://127.0.0.1:{port}/metrics", flush=True)
        print("serving Falcon's deployments; Ctrl-C stops everything", flush=True)
        return 0 if runner.wait() == 0 else 1
    return 0  # stopped by a signal: everything above has been shut down


def choose_health_port() -> int:
    """The port of the dispatcher's probes and ``/metrics``: ``FALCON_HEALTH_PORT`` when set, else
    a free one, put in the environment the served flow runs inherit. Each dispatcher run binds it
    for its loop; between two runs (every 600 s) it is closed for a moment."""
    port = int(os.environ.get("FALCON_HEALTH_PORT") or 0) or free_port()
    os.environ["FALCON_HEALTH_PORT"] = str(port)
    return port


def pin_settings() -> Settings:
    """Make FALCON_HOME and the database URL absolute in this process's environment, so that the
    runner and its flow runs (started elsewhere, in the project folder) use the same files."""
    home = Path(os.environ.get("FALCON_HOME", ".falcon")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["FALCON_HOME"] = str(home)
    get_settings.cache_clear()
    os.environ["FALCON_DATABASE_URL"] = get_settings().resolved_database_url
    get_settings.cache_clear()
    return get_settings()


class Stopped(BaseException):
    """SIGTERM (or SIGHUP) asked this process to stop; unwinds like Ctrl-C's KeyboardInterrupt."""


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into an exception so every ``finally`` runs, and ignore further
    signals while the stack shuts down (a second Ctrl-C must not cut the cleanup short)."""

    def stop(signum: int, frame: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signal.Signals(signum).name) if signum != signal.SIGINT else KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    except (KeyboardInterrupt, Stopped):
        print("stopped", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_tree(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """Stop a process and everything it started, including children in sessions of their own
    (Prefect starts each flow run in a new session): SIGTERM, then SIGKILL after ``grace``."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(family, timeout=grace)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(alive, timeout=5)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


@contextmanager
def served_stack(home: Path, api_url: str, emulator_url: str | None) -> Iterator[subprocess.Popen[bytes]]:
    """Falcon's deployments served by a child process. Prefect reads its settings when imported,
    so the child gets PREFECT_API_URL in its environment from the start (and may never fall back
    to a temporary server of its own); its output goes to ``<home>/local.log``."""
    env = {
        **os.environ,
        "PREFECT_API_URL": api_url,
        "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false",
        "PREFECT_RUNNER_POLL_FREQUENCY": os.environ.get("PREFECT_RUNNER_POLL_FREQUENCY", "1"),
        "PREFECT_LOGGING_EXTRA_LOGGERS": "falcon",  # Falcon's own logs reach the run logs in the UI
    }
    if emulator_url:
        env["FALCON_EMULATOR_URL"] = emulator_url
    with (home / "local.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "falcon.cli", "serve-deployments"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches this process only; it stops the child
        )
        try:
            yield proc
        finally:
            stop_tree(proc, grace=5.0)


# The clusters of the emulator's built-in config: regional, pools placed in a zone offering v6e.
DEMO_CLUSTERS = [
    ("edge-a", "tpu-project-a", "us-east5", "res-v6e", "us-east5-b", "falcon-demo-logs-a"),
    ("edge-b", "tpu-project-b", "us-central1", None, "us-central1-b", "falcon-demo-logs-b"),
]
DEMO_TASKS = [
    ("alice", "profiling-v6e", "2x4"),
    ("bob", "benchmark-v6e", "2x4"),
    ("carol", "accuracy-v6e", "2x2"),
    ("alice", "train-v6e", "2x2"),
    ("bob", "sweep-v6e", "4x4"),
    ("carol", "eval-v6e", "2x4"),
]


def run_demo(keep_running: bool, count: int) -> int:
    """``falcon demo``: the stack on the embedded defaults, sample tasks, their outcome."""
    home = Path(os.environ.get("FALCON_HOME", ".falcon")).resolve() / "demo"
    shutil.rmtree(home, ignore_errors=True)
    os.environ["FALCON_HOME"] = str(home)
    os.environ.pop("FALCON_DATABASE_URL", None)
    os.environ.setdefault("FALCON_POOL_CREATION_PRIOR_SECONDS", EMULATED_CREATION_SECONDS)
    os.environ.setdefault("FALCON_VIEW_SECONDS", DEMO_VIEW_SECONDS)
    settings = pin_settings()
    started = time.monotonic()
    upgrade(settings.resolved_database_url)
    ok = False
    with stop_on_signals(), ExitStack() as stack:
        url = stack.enter_context(prefect_server(home / "prefect"))
        emu = stack.enter_context(emulator(None, 0, home / "emulator"))
        register_demo_clusters()
        runner = stack.enter_context(served_stack(home, url, emu))
        ids = _submit_demo_tasks(count)
        print(f"Prefect UI: {url.removesuffix('/api')}   emulator: {emu}", flush=True)
        print(f"watch progress: FALCON_HOME={home} falcon task list", flush=True)
        ok = _wait_for(ids, runner, timeout=600)
        print(f"all tasks finished in {time.monotonic() - started:.1f}s", flush=True)
        _wait_for_no_pools(emu, timeout=60)  # a spare pool is kept one creation time, then goes
        _print_node_pools(emu)
        if keep_running:
            print("stack stays up; Ctrl-C to stop", flush=True)
            runner.wait()
    return 0 if ok else 1


def register_demo_clusters() -> None:
    """The two clusters of the emulator's built-in config."""
    with session_scope(get_settings().resolved_database_url) as session:
        for i, (name, project, location, reservation, zone, bucket) in enumerate(DEMO_CLUSTERS):
            if repo.find_cluster(session, name, project, location) is None:
                cluster = Cluster(
                    id=f"00000000-0000-0000-0000-00000000000{i + 1}",
                    name=name,
                    project=project,
                    location=location,
                    tpu_type="v6e",
                    gcs_bucket=bucket,
                    default_reservation=reservation,
                    status=ClusterStatus.ACTIVE,
                    namespace="falcon-jobs",
                    zone=zone,
                )
                repo.add_cluster(session, cluster, utc_now())


def _submit_demo_tasks(count: int) -> list[str]:
    ids = []
    with session_scope(get_settings().resolved_database_url) as session:
        for i in range(count):
            actor, name, topology = DEMO_TASKS[i % len(DEMO_TASKS)]
            task_id = f"demo-{i + 1:03d}"
            spec = {
                "image": "us-docker.pkg.dev/demo/trainer:latest",
                "command": ["python", "-u", "run.py"],
                "args": ["--steps", "10"],
                "env": {"EMULATOR_RUN_SECONDS": "3"},
                "topology": topology,
            }
            repo.insert_task(
                session,
                task_id=task_id,
                actor=actor,
                name=name,
                tpu_type="v6e",
                spec=spec,
                timeout_seconds=900,
                now=utc_now(),
            )
            ids.append(task_id)
    return ids


def _wait_for(ids: list[str], runner: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline, shown = time.monotonic() + timeout, ""
    while time.monotonic() < deadline and runner.poll() is None:
        with session_scope(get_settings().resolved_database_url) as session:
            tasks = [t for t in (repo.get_task(session, i) for i in ids) if t]
        table = "\n".join(
            f"  {t.id}  {t.actor:<6} {t.status.value:<9} {t.reason or '':<21} {t.message or ''}"
            for t in tasks
        )
        if table != shown:
            print(table + "\n", flush=True)
            shown = table
        if all(t.status in TERMINAL for t in tasks):
            return all(t.status is Status.SUCCEEDED for t in tasks)
        time.sleep(1)
    return False


def _wait_for_no_pools(emulator_url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(c["nodePools"] for c in _emulated_clusters(emulator_url)):
        time.sleep(0.5)


def _emulated_clusters(emulator_url: str) -> list[dict[str, Any]]:
    clusters: list[dict[str, Any]] = httpx.get(f"{emulator_url}/emulator/state", timeout=10).json()[
        "clusters"
    ]
    return clusters


def _print_node_pools(emulator_url: str) -> None:
    """What the demo did to the (emulated) fleet: pools created, deleted, and still there."""
    for cluster in _emulated_clusters(emulator_url):
        counters, left = cluster["counters"], [p["name"] for p in cluster["nodePools"]]
        print(
            f"  {cluster['name']}: node pools created {counters['nodePoolsCreated']}, "
            f"deleted {counters['nodePoolsDeleted']}, remaining {left or 'none'}"
        )
