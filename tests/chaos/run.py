"""The chaos run: many tasks over three clusters while GKE, Compute and Kubernetes calls fail at
random, the upstream aborts rows at random moments, Falcon's process is SIGKILLed (from outside
at random moments, and by itself right after an effect it had not yet recorded) and restarted,
and the Prefect server is killed and restarted. At the end it checks what must hold whatever
happened: every task terminal and right, nothing left in the fleet, no Job run twice (a create
that reached the API server late may leave a second, suspended copy of a Job, which never runs
and is swept; the report counts those), and the pick order of rule 3 in every queue.

The test (tests/integration/test_chaos.py) runs it at the suite's size; benchmarks/bench_chaos.py
runs it larger and prints the report.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.domain.model import Cluster, ClusterStatus
from falcon.domain.status import TERMINAL, Status
from falcon.local import free_port, stop_tree
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import clean_env, wait_http

ROOT = Path(__file__).resolve().parents[2]
# Shapes the reservation cluster can hold (its reservation is of ct6e-standard-4t machines, and a
# reservation of another machine type fails the task, by design); 2x4 and 4x4 are multi-node.
TOPOLOGIES = ("2x2", "2x4", "4x4")
NAMESPACE = "falcon-jobs"


@dataclass(frozen=True)
class ChaosPlan:
    tasks: int = 300
    actors: int = 5
    seed: int = 1
    arrival_seconds: float = 60.0  # rows are written over this span
    abort_share: float = 0.10
    fault_probability: float = 0.14  # over all rules: >= 10 % of the calls to GKE, Compute and Kubernetes
    outside_kills: int = 4  # SIGKILLs of Falcon's process at random moments
    crash_probability: float = 0.002  # per effect or write: Falcon's process kills itself after it
    prefect_restarts: int = 1
    drain_seconds: float = 600.0  # after the last arrival, for every row to end
    clean_seconds: float = 120.0  # after that, for the fleet to be clean (a clean run takes 0-3 s)
    run_seconds: float = 0.3  # each task's container


@dataclass
class ChaosReport:
    plan: ChaosPlan
    statuses: Counter[str] = field(default_factory=Counter)
    aborts_written: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    api_requests: int = 0  # to GKE, Compute and Kubernetes, faulted or not
    outside_kills: int = 0
    crashes: Counter[str] = field(default_factory=Counter)  # self-kills by the step they followed
    worker_starts: int = 0
    prefect_restarts: int = 0
    seconds_to_drain: float = 0.0
    seconds_to_clean: float = 0.0
    late_job_copies: list[str] = field(default_factory=list)  # created again by a late create, held
    violations: dict[str, list[str]] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)  # Falcon's log lines on the tasks that went wrong

    @property
    def fault_share(self) -> float:
        return sum(self.faults.values()) / max(1, self.api_requests)

    @property
    def kills(self) -> int:
        return self.outside_kills + sum(self.crashes.values())

    def lines(self) -> list[str]:
        return [
            f"tasks {self.plan.tasks} over 3 clusters, {self.plan.actors} actors, seed {self.plan.seed}",
            f"final statuses: {dict(self.statuses)}; aborts written {self.aborts_written}",
            f"faults injected: {sum(self.faults.values())} of {self.api_requests} API requests"
            f" ({self.fault_share:.0%}) {dict(sorted(self.faults.items()))}",
            f"SIGKILLs: {self.kills} (outside {self.outside_kills}, after a step {dict(self.crashes)});"
            f" Falcon process starts {self.worker_starts}; Prefect server restarts {self.prefect_restarts}",
            f"drained in {self.seconds_to_drain:.0f}s; fleet clean {self.seconds_to_clean:.0f}s later",
            f"Jobs created again by a late create (held suspended, swept): {self.late_job_copies}",
            "invariants: "
            + ("all hold" if not any(self.violations.values()) else json.dumps(self.violations)[:2000]),
            *(
                ["Falcon's log on the tasks that went wrong and their pools:", *self.evidence]
                if self.evidence
                else []
            ),
        ]


def fleet(plan: ChaosPlan) -> tuple[dict[str, Any], list[Cluster]]:
    """Three clusters in three projects: one with a reservation (flex-start beyond it), one
    flex-start only, one whose flex-start capacity comes late."""
    emulator: dict[str, Any] = {
        "nodePoolProvisionSeconds": 0.3,
        "podStartSeconds": 0.1,
        "defaultRunSeconds": plan.run_seconds,
        "tickSeconds": 0.05,
        "projects": {},
    }
    clusters = []
    for i, (name, location, zone, late, reservation) in enumerate(
        [
            ("edge-res", "us-east5", "us-east5-b", 0.3, "res-r"),
            ("edge-flex", "us-central1", "us-central1-b", 0.3, None),
            ("edge-late", "us-east5", "us-east5-b", 6.0, None),
        ]
    ):
        project, bucket = f"proj-{name}", f"logs-{name}"
        emulator["projects"][project] = {
            "reservations": (
                {reservation: {"zone": zone, "machineType": "ct6e-standard-4t", "count": 8}}
                if reservation
                else {}
            ),
            "buckets": {bucket: {"writers": [f"serviceAccount:{project}.svc.id.goog[{NAMESPACE}/default]"]}},
            "clusters": {name: {"location": location, "zones": [zone], "flexStart": {"delaySeconds": late}}},
        }
        clusters.append(
            Cluster(
                f"00000000-0000-0000-0000-00000000c0{i}",
                name,
                project,
                location,
                "v6e",
                bucket,
                reservation,
                ClusterStatus.ACTIVE,
                NAMESPACE,
                zone,
            )
        )
    return emulator, clusters


def fault_rules(plan: ChaosPlan) -> list[dict[str, Any]]:
    """Each kind of fault named in the issue, together about ``fault_probability`` of the calls."""
    p = plan.fault_probability
    busy = "Cluster is running incompatible operation operation-1. Please wait and try again once it is done."
    every = {"pathRegex": "^/", "times": None}
    return [
        {"pathRegex": "^/k8s/proj-edge-late/", "status": 503, "forSeconds": 20},  # a cluster away a while
        {**every, "action": "reset", "probability": p * 0.15},
        {**every, "delaySeconds": 3.0, "probability": p * 0.1},  # beyond the client's timeout
        {**every, "pathRegex": "^/v1/.*/nodePools$", "method": "POST", "status": 400, "probability": p * 0.2,
         "statusName": "FAILED_PRECONDITION", "message": busy},
        {**every, "pathRegex": "^/v1/", "status": 429, "probability": p * 0.3,
         "message": "Too many requests: rate limit exceeded, try again"},
        {**every, "pathRegex": "^/compute/", "status": 503, "probability": p * 0.5},
        {**every, "status": 503, "probability": p * 0.45},
        {**every, "status": 500, "probability": p * 0.15},
    ]  # fmt: skip


def postgres_bin() -> Path:
    """Debian keeps initdb and postgres off the PATH, under the major version's folder."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed (make system-deps installs it)")
    return found[-1].parent


SETTINGS = [f"--{k}={v}" for k, v in {"listen_addresses": "", "fsync": "off", "synchronous_commit": "off",
            "full_page_writes": "off", "max_connections": "300"}.items()]  # fmt: skip


@contextmanager
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL for the Prefect server (what Prefect runs on in production): on
    SQLite, the server answers a run this busy with 503s ("database is locked"), and its client
    sleeps them off for tens of seconds. Yields the database URL; durability is off."""
    base, bin_dir = Path(tempfile.mkdtemp(prefix="falcon-chaos-pg-")), postgres_bin()
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(base, "postgres")
    subprocess.run(
        [
            *as_postgres,
            str(bin_dir / "initdb"),
            "-D",
            str(base / "data"),
            "-U",
            "postgres",
            "--auth=trust",
        ],
        check=True,
        capture_output=True,
    )
    with (base / "postgres.log").open("ab") as log:
        proc = subprocess.Popen(
            [
                *as_postgres,
                str(bin_dir / "postgres"),
                "-D",
                str(base / "data"),
                "-k",
                str(base),
                *SETTINGS,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while not (base / ".s.PGSQL.5432").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start: {(base / 'postgres.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"postgresql+asyncpg://postgres@/postgres?host={base}"
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(base, ignore_errors=True)


class PrefectServer:
    """A `prefect server start` of our own, on a fixed port so that a restart keeps its URL, with
    leases on disk (as falcon local runs it) so that a restart leaks no queue slot."""

    def __init__(self, home: Path, database_url: str) -> None:
        self.home, self.port, self.database_url = home, free_port(), database_url
        self.url = f"http://127.0.0.1:{self.port}/api"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **clean_env(),
            "PREFECT_HOME": str(self.home),
            "PREFECT_API_DATABASE_CONNECTION_URL": self.database_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem",
        }
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / "server.log").open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--port", str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_http(f"{self.url}/health", 120)

    def kill(self) -> None:
        if self._proc is not None:
            for member in [
                *psutil.Process(self._proc.pid).children(recursive=True),
                psutil.Process(self._proc.pid),
            ]:
                member.kill()
            self._proc.wait(10)

    def stop(self) -> None:
        if self._proc is not None:
            stop_tree(self._proc, grace=5)


class FalconProcess:
    """The chaos worker (tests/chaos/worker.py): started, killed and restarted by the run."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._env, self._log = env, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        with self._log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.worker"],
                cwd=ROOT,
                env={**self._env, "CHAOS_SEED": str(int(self._env["CHAOS_SEED"]) * 1000 + self.starts)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_tree(self.proc, grace=5)


@dataclass(frozen=True)
class Row:
    task_id: str
    actor: str
    topology: str
    arrives: float
    abort_at: float | None


def rows(plan: ChaosPlan) -> list[Row]:
    rng = random.Random(plan.seed)
    made = []
    for i in range(plan.tasks):
        arrives = rng.uniform(0, plan.arrival_seconds)
        abort_at = arrives + rng.uniform(0, 20) if rng.random() < plan.abort_share else None
        actor = f"actor-{rng.randrange(plan.actors)}"
        made.append(Row(f"chaos-{i:04d}", actor, rng.choice(TOPOLOGIES), arrives, abort_at))
    return sorted(made, key=lambda r: r.arrives)


def insert(db_url: str, row: Row, plan: ChaosPlan) -> None:
    spec = {
        "image": "busybox",
        "command": ["sh", "-c", "echo chaos"],
        "env": {"EMULATOR_RUN_SECONDS": str(plan.run_seconds)},
        "topology": row.topology,
    }
    with session_scope(db_url) as s:
        repo.insert_task(
            s,
            task_id=row.task_id,
            actor=row.actor,
            name=f"chaos-{row.topology}",
            tpu_type="v6e",
            spec=spec,
            timeout_seconds=900,
            now=utc_now(),
        )


def abort(db_url: str, task_id: str) -> bool:
    with session_scope(db_url) as s:
        return repo.request_abort(s, task_id, utc_now())


def run_chaos(plan: ChaosPlan, db_url: str, workdir: Path) -> ChaosReport:
    report = ChaosReport(plan)
    emulator_config, clusters = fleet(plan)
    with postgres() as prefect_database:
        prefect = PrefectServer(workdir / "prefect", prefect_database)
        prefect.start()
        try:
            _run(plan, db_url, workdir, emulator_config, clusters, prefect, report)
        finally:
            prefect.stop()
    return report


def _run(
    plan: ChaosPlan,
    db_url: str,
    workdir: Path,
    emulator_config: dict[str, Any],
    clusters: list[Cluster],
    prefect: PrefectServer,
    report: ChaosReport,
) -> None:
    with EmulatorServer(EmulatorConfig.from_dict(emulator_config), workdir / "emulator") as emulator:
        with session_scope(db_url) as s:
            for cluster in clusters:
                repo.add_cluster(s, cluster, utc_now())
        reserved = _in_use(emulator.url)
        events = workdir / "events.jsonl"
        worker = FalconProcess(
            _worker_env(plan, db_url, emulator.url, prefect.url, events), workdir / "falcon.log"
        )
        with _faults(emulator.url, plan), _running(worker):
            _drive(plan, db_url, worker, prefect, report)
            report.seconds_to_clean = _wait_clean(emulator.url, reserved, worker, plan.clean_seconds)
        _judge(plan, db_url, emulator.url, reserved, events, report)
        report.worker_starts = worker.starts


def _worker_env(
    plan: ChaosPlan, db_url: str, emulator_url: str, prefect_url: str, events: Path
) -> dict[str, str]:
    return {
        **clean_env(),
        "PREFECT_API_URL": prefect_url,
        "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false",
        "PREFECT_LOGGING_TO_API_ENABLED": "false",  # the run's logs go to falcon.log; the server has enough
        "FALCON_DATABASE_URL": db_url,
        "FALCON_EMULATOR_URL": emulator_url,
        "FALCON_MESSAGE_LOCALE": "en",
        "FALCON_TICK_SECONDS": "0.2",
        "FALCON_RECONCILE_SECONDS": "0.5",
        "FALCON_POLL_SECONDS": "0.2",
        "FALCON_QUEUE_REFRESH_SECONDS": "5",
        "FALCON_POOL_CREATION_PRIOR_SECONDS": "3",
        "FALCON_ORPHAN_SCAN_SECONDS": "5",
        "FALCON_API_TIMEOUT_SECONDS": "2",
        "FALCON_SLOT_LEASE_SECONDS": "60",
        **{
            f"FALCON_RETRY_{kind}_{knob}": value
            for kind in ("NODE_POOL", "JOB", "RELEASE")
            for knob, value in (("TRIES", "8"), ("BASE_SECONDS", "0.2"), ("CAP_SECONDS", "2"))
        },
        "CHAOS_SEED": str(plan.seed),
        "CHAOS_CRASH_PROBABILITY": str(plan.crash_probability),
        "CHAOS_EVENTS": str(events),
    }


@contextmanager
def _faults(emulator_url: str, plan: ChaosPlan) -> Iterator[None]:
    httpx.post(
        f"{emulator_url}/emulator/faults", json={"rules": fault_rules(plan), "seed": plan.seed}, timeout=10
    ).raise_for_status()
    yield


@contextmanager
def _running(worker: FalconProcess) -> Iterator[None]:
    worker.start()
    try:
        yield
    finally:
        worker.stop()


def _drive(
    plan: ChaosPlan, db_url: str, worker: FalconProcess, prefect: PrefectServer, report: ChaosReport
) -> None:
    """Write rows and aborts on schedule, kill and restart Falcon and Prefect, until every row is
    terminal."""
    rng = random.Random(plan.seed + 1)
    pending = rows(plan)
    aborts = sorted((r.abort_at, r.task_id) for r in pending if r.abort_at is not None)
    span = plan.arrival_seconds + 20
    kills = sorted(rng.uniform(2, span) for _ in range(plan.outside_kills))
    restarts = sorted(rng.uniform(10, span) for _ in range(plan.prefect_restarts))
    started = time.monotonic()
    restarting: threading.Thread | None = None
    next_check = 0.0
    while True:
        now = time.monotonic() - started
        while pending and pending[0].arrives <= now:
            insert(db_url, pending.pop(0), plan)
        while aborts and aborts[0][0] <= now:
            report.aborts_written += abort(db_url, aborts.pop(0)[1])
        if kills and kills[0] <= now:
            kills.pop(0)
            worker.kill()
            report.outside_kills += 1
        if restarts and restarts[0] <= now and restarting is None:
            restarts.pop(0)
            restarting = threading.Thread(target=_restart_prefect, args=(prefect,), daemon=True)
            restarting.start()
            report.prefect_restarts += 1
        if restarting is not None and not restarting.is_alive():
            restarting.join()
            restarting = None
        if worker.exited():
            worker.start()
        if not pending and not aborts and now >= next_check:
            next_check = now + 1.0
            if _all_terminal(db_url):
                report.seconds_to_drain = now
                return
        if now > span + plan.drain_seconds:
            report.seconds_to_drain = now
            return
        time.sleep(0.05)


def _restart_prefect(prefect: PrefectServer) -> None:
    prefect.kill()
    time.sleep(2)
    prefect.start()


def _all_terminal(db_url: str) -> bool:
    with session_scope(db_url) as s:
        return all(t.status in TERMINAL for t in repo.list_tasks(s, 100_000))


def _get(url: str, **params: str) -> Any:
    """An observation of the test's own, through the faults it injects (they hit every caller)."""
    for _ in range(20):
        try:
            response = httpx.get(url, params=params, timeout=10)
            if response.status_code == 200:
                return response.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"GET {url} kept failing")


def _in_use(emulator_url: str) -> dict[str, int]:
    state = _get(f"{emulator_url}/emulator/state")
    return {f"{r['project']}/{r['name']}": r["inUseCount"] for r in state["reservations"]}


def _leftovers(emulator_url: str, reserved: dict[str, int]) -> list[str]:
    """What Falcon left in the fleet: pools, Jobs, Services, reservation capacity."""
    state = _get(f"{emulator_url}/emulator/state")
    left = [f"pool {c['name']}/{p['name']}" for c in state["clusters"] for p in c["nodePools"]]
    for c in state["clusters"]:
        base = f"{emulator_url}{c['k8sPath']}"
        for kind, path in (("job", "apis/batch/v1"), ("service", "api/v1")):
            plural = f"{kind}s"
            found = _get(f"{base}/{path}/namespaces/{NAMESPACE}/{plural}", labelSelector="managed-by=falcon")
            left += [f"{kind} {c['name']}/{i['metadata']['name']}" for i in found.get("items", [])]
    in_use = _in_use(emulator_url)
    left += [
        f"reservation {r} in use {in_use[r]} (was {n})" for r, n in reserved.items() if in_use.get(r) != n
    ]
    return left


def _wait_clean(emulator_url: str, reserved: dict[str, int], worker: FalconProcess, seconds: float) -> float:
    """Until the fleet is clean; the worker still crashes itself here (e.g. between marking a pool
    deleting and deleting it), and is restarted as its supervisor would restart it."""
    started = time.monotonic()
    while time.monotonic() - started < seconds and _leftovers(emulator_url, reserved):
        if worker.exited():
            worker.start()
        time.sleep(1)
    return time.monotonic() - started


def _judge(
    plan: ChaosPlan,
    db_url: str,
    emulator_url: str,
    reserved: dict[str, int],
    events: Path,
    report: ChaosReport,
) -> None:
    with session_scope(db_url) as s:
        tasks = {t.id: t for t in repo.list_tasks(s, 100_000)}
    aborted_rows = {r.task_id for r in rows(plan) if r.abort_at is not None}
    report.statuses = Counter(t.status.value for t in tasks.values())
    state = _get(f"{emulator_url}/emulator/state")
    report.faults, report.api_requests = dict(state["faultsInjected"]), state["apiRequests"]
    logged = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    report.crashes = Counter(e["after"] for e in logged if e["event"] == "crash")
    v = report.violations
    v["not terminal"] = [i for i, t in tasks.items() if t.status not in TERMINAL]
    v["missing rows"] = sorted({r.task_id for r in rows(plan)} - set(tasks))
    v["not succeeded though nothing aborted it"] = [
        f"{i} {t.status.value}/{t.reason.value if t.reason else ''}: {t.message}"
        for i, t in tasks.items()
        if i not in aborted_rows and t.status is not Status.SUCCEEDED
    ]
    v["aborted rows that neither finished first nor ended Aborted"] = [
        f"{i} {t.status.value}/{t.reason.value if t.reason else ''}: {t.message}"
        for i, t in tasks.items()
        if i in aborted_rows and t.status not in (Status.ABORTED, Status.SUCCEEDED)
    ]
    v["Aborted without aborted_at"] = [
        i for i, t in tasks.items() if t.status is Status.ABORTED and not t.aborted_at
    ]
    v["left in the fleet"] = _leftovers(emulator_url, reserved)
    report.late_job_copies = [
        f"{c['name']}: {n}" for c in state["clusters"] for n in c["counters"]["jobsCreatedMoreThanOnce"]
    ]
    v["Jobs run more than once"] = [
        f"{c['name']}: {n}" for c in state["clusters"] for n in c["counters"]["jobsRunMoreThanOnce"]
    ]
    v["picks out of rule-3 order"] = pick_order_violations(
        [e for e in logged if e["event"] == "pick"], {i: t.created_at.timestamp() for i, t in tasks.items()}
    )
    wrong = [
        line.split()[0]
        for key in ("not succeeded though nothing aborted it", "not terminal")
        for line in v[key]
    ]
    report.evidence = evidence(events.with_name("falcon.log"), wrong)


POOL_NAME = re.compile(r"\bfalcon-[0-9a-z]+x[0-9a-z]+-w?[0-9a-f]{10}\b")


def evidence(log: Path, task_ids: list[str], limit: int = 200) -> list[str]:
    """Falcon's log lines that name one of ``task_ids``, or a node pool named on such a line: what
    a failed chaos run leaves to read when its folder is gone (a CI machine's)."""
    if not task_ids or not log.exists():
        return []
    lines = log.read_text(errors="replace").splitlines()
    named = {line for line in lines if any(task_id in line for task_id in task_ids)}
    pools = {pool for line in named for pool in POOL_NAME.findall(line)}
    found = [line[:400] for line in lines if line in named or any(pool in line for pool in pools)]
    return found[:limit] + ([f"... {len(found) - limit} more lines"] if len(found) > limit else [])


def pick_order_violations(picks: list[dict[str, Any]], created: dict[str, float]) -> list[str]:
    """Rule 3 within each queue: an actor's tasks are picked in the order they were written (FIFO
    within a user). A task picked twice (its pick was lost to a kill before it was recorded and
    made again) counts once, at its first pick."""
    seen: set[str] = set()
    by_actor: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pick in sorted(picks, key=lambda p: p["t"]):
        if pick["task"] not in seen:
            seen.add(pick["task"])
            by_actor[(pick["queue"], pick["actor"])].append(pick["task"])
    wrong = []
    for (queue, actor), picked in by_actor.items():
        order = sorted(picked, key=lambda i: (created[i], i))
        if picked != order:
            wrong.append(f"{queue} {actor}: picked {picked}, written {order}")
    return wrong
