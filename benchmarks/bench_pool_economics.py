"""Node-pool economics of keep-or-delete against two baselines and the offline optimum, over several
workload shapes and seeds.

Three arms replay the same seeded synthetic workload (benchmarks/workload.py: --shapes bursty,
trickle, daily; --seeds), each through the real Dispatcher with its lifecycle and release flows run
by Falcon's ThreadLauncher in threads of this process (as `falcon local` runs them), against a
fresh emulator and a fresh SQLite file, under one Prefect server (--prefect-db):

* falcon      - Falcon as configured: its CostPolicy keeps an idle pool while the expected wait for
                the queue's next task costs less than replacing it (src/falcon/domain/pool_economics.py).
* delete-each - create-and-delete per task: DeleteEachPolicy.
* keep-all    - keep every pool forever: KeepAllPolicy.

One more arm runs only when named (--arms every-spare), to show what start time more spares buy:

* every-spare - Falcon's CostPolicy, except that a release keeps every pool it frees for the
                queue's horizon, not only one spare beyond the waiters (EverySparePolicy).

The baselines inject their policy through Falcon's own seam: the arm's Services are
``dataclasses.replace(services, keep_policy=...)`` and every flow of the arm runs on them
(``falcon.bootstrap.serving``); no Falcon module is monkeypatched. Nothing else differs.

Beside them, the offline optimum (benchmarks/pool_optimum.py): with the arrivals, run times and
cluster choices of the falcon arm's replay (of the first arm run, without it) and each task's
creation time for the mode its pool had there, the fewest node-hours any keep-or-delete policy
could spend, and the creations it avoids. Beside the keep-all arm, ``opt@start``: the fewest the
optimum's model allows a plan that keeps the start goal (``optimum_rows`` says how), so the report
can say whether the two goals can be met together on a seed at all. And ``horizon@c&d``
(benchmarks/horizon_rule.py): in the same model, the most creations a rule of Falcon's kind (one
spare per queue, kept for a horizon) avoids with each queue's horizon picked knowing the whole
replay, within the node-hours the model's create-and-delete spends: whether the creations goal and
the baseline goal can both be met by such a rule, however well it learns.

Measured, per arm:
* node pools created: the emulator's counters (``GET /emulator/state``), split by mode from the DB;
* node-seconds by what the node was doing, integrated from our own poll (every --sample seconds)
  of ``/emulator/state`` and of each cluster's pod list: *provisioning* (the pool's create operation
  runs, or a flex-start scale-up is pending: the slice's nodes are counted), *busy* (a pod bound to
  the node is Pending/Running), *idle* (the node exists with no live task pod, including while its
  pool is being deleted). The emulator keeps only the start time of create/delete operations, not
  when a pool became RUNNING, when a flex scale-up landed or when a pool disappeared, nor which pod
  runs where over time, hence the poll. Emulated node-seconds x compression / 3600 = node-hours;
  Idle is further split by Falcon's own pool state (read from its DB at each sample): kept (idle,
  awaiting a task), held with no pod yet, task ended but Job not yet deleted, marked deleting but
  GKE not yet deleting (per-cluster operation lock), being deleted;
* submit -> Running: row ``created_at`` to the first poll (every 0.1 s) that sees status Running;
  of it, the wait to be picked (to the progress row's ``acquiring_at``: the queue's slot, one
  acquiring task per queue) and the rest (the acquisition: a pool taken or created, the Job, its pods).

GKE runs different node pools' operations side by side, up to a quota of --gke-operations per
cluster (5 by default; the emulator's nodePoolOperationsPerCluster, and Falcon is told so by
FALCON_GKE_OPERATIONS_PER_CLUSTER); --gke-operations 1 replays the stricter rule of one operation
per cluster at a time, under which Falcon lets a cluster's marked deletions go before a creation.

Time is compressed (one emulated second stands for --compression real seconds); GKE's times are
compressed with it, Falcon's own step times (a tick, a flow run's steps, a release) are not, so every
second Falcon spends is inflated by the factor in the real-terms figures. The report therefore gives
the idle node-time spent in Falcon's own steps in wall seconds too.

Per shape, the report gives each seed's table, then the mean and range over the seeds and the
issue's goal checks (PASS/MISS, with the numbers); --json writes all of it for the README's tables.

Run: .venv/bin/python benchmarks/bench_pool_economics.py --shapes bursty,trickle,daily --seeds 1,2,3
(about 30 minutes on an idle 2-core machine; develop with e.g. --tasks 12 --seeds 1 --shapes trickle)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # flows/ and workload.py
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import httpx  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from economics_goals import goals  # noqa: E402
from gke_operations import OperationWaits, Recorded, operation_waits  # noqa: E402
from horizon_rule import create_and_delete, most_avoided_within  # noqa: E402
from pool_optimum import Plan, Queue, QueuedTask, least_wait, optimum  # noqa: E402
from sqlalchemy.exc import SQLAlchemyError  # noqa: E402
from workload import SHAPES, TPU_TYPE, SyntheticTask, WorkloadParams, gap_variation, generate, summary  # noqa: E402

from falcon.adapters.clock import StoppableClock, utc_now  # noqa: E402
from falcon.adapters.db import repository as repo  # noqa: E402
from falcon.adapters.db.migrate import upgrade  # noqa: E402
from falcon.adapters.db.orm import NodePoolRow, TaskProgressRow  # noqa: E402
from falcon.adapters.db.session import session_scope  # noqa: E402
from falcon.adapters.runs import ThreadLauncher  # noqa: E402
from falcon.bootstrap import build_services, serving  # noqa: E402
from falcon.domain.lifecycle import PoolState  # noqa: E402
from falcon.domain.model import Cluster, ClusterStatus, ProvisioningMode, node_pool_name_for  # noqa: E402
from falcon.domain.pool_economics import (  # noqa: E402
    BusyPools,
    DeleteEachPolicy,
    KeepAllPolicy,
    KeepPolicy,
    QueueObservations,
)
from falcon.domain.status import TERMINAL, Status  # noqa: E402
from falcon.services.context import Services  # noqa: E402
from falcon.services.dispatching import Dispatcher  # noqa: E402
from falcon.settings import get_settings  # noqa: E402
from falcon_emulator.config import EmulatorConfig  # noqa: E402
from falcon_emulator.server import EmulatorServer  # noqa: E402

log = logging.getLogger("bench")

# --- time compression -------------------------------------------------------------------------

PROVISION_SECONDS = 2.0  # emulated create (and delete) of a node pool; real TPU pools take ~5 min
DEFAULT_COMPRESSION = 150.0  # one emulated second stands for this many real seconds (2 s -> 5 min)
POD_START_SECONDS = 0.3
FLEX_DELAY_SECONDS = 2.0
FALCON_POLL_SECONDS = 0.2  # production 2 s; cannot shrink by the full factor without burning CPU
FALCON_RECONCILE_SECONDS = 0.3  # production 1 s
# production 5 s, 1.7 % of a 5-minute operation. As short as the poll allows (an acquiring task asks
# again at its next poll): at 0.5 s a refused create waited up to 75 s in real terms for a lock that
# had freed, a quarter of an operation, and the arms with more GKE operations paid it more often.
FALCON_GKE_BUSY_RETRY_SECONDS = FALCON_POLL_SECONDS
REAL_CREATION_PRIOR = 300.0  # Falcon's assumed creation until it observed some (production default)

RESERVATIONS = {"a": 8, "b": 4}  # nodes of ct6e-standard-4t reserved per cluster's project
RESERVATION, FLEX_START = ProvisioningMode.RESERVATION, ProvisioningMode.FLEX_START
# Emulated seconds a creation holds the slice's nodes, per mode, as the poll counts provisioning:
# the create operation, and for flex-start the scale-up that follows.
CREATION_SECONDS = {RESERVATION: PROVISION_SECONDS, FLEX_START: PROVISION_SECONDS + FLEX_DELAY_SECONDS}


def emulator_config(gke_operations: int = 5) -> dict[str, object]:
    """The two clusters; ``gke_operations``: node-pool operations GKE runs at once on each."""

    def project(key: str, location: str) -> dict[str, object]:
        zone = f"{location}-b"
        return {
            "reservations": {
                f"res-{key}": {"zone": zone, "machineType": "ct6e-standard-4t", "count": RESERVATIONS[key]}
            },
            # The pods' KSA may write the log bucket (GCS FUSE), as on a set-up cluster.
            "buckets": {
                f"bucket-{key}": {"writers": [f"serviceAccount:proj-{key}.svc.id.goog[falcon-jobs/default]"]}
            },
            "clusters": {
                f"edge-{key}": {
                    "location": location,
                    "zones": [zone],
                    "flexStart": {"available": True, "delaySeconds": FLEX_DELAY_SECONDS},
                }
            },
        }

    return {
        "nodePoolProvisionSeconds": PROVISION_SECONDS,
        "nodePoolDeleteSeconds": PROVISION_SECONDS,
        "podStartSeconds": POD_START_SECONDS,
        "nodePoolOperationsPerCluster": gke_operations,
        "projects": {"proj-a": project("a", "us-east5"), "proj-b": project("b", "us-central1")},
    }


def clusters(arm: str) -> list[Cluster]:
    """Cluster rows with ids unique per arm: queue slots (Prefect limits) are named after them."""
    return [
        Cluster(
            f"{arm}-{key}",
            f"edge-{key}",
            f"proj-{key}",
            location,
            TPU_TYPE,
            f"bucket-{key}",
            f"res-{key}",
            ClusterStatus.ACTIVE,
            "falcon-jobs",
            f"{location}-b",
        )
        for key, location in (("a", "us-east5"), ("b", "us-central1"))
    ]


# --- arms -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    name: str
    label: str
    # Services.keep_policy for the arm, from Falcon's own (CostPolicy, built from the settings
    # below); None = Falcon's own.
    keep_policy: Callable[[KeepPolicy], KeepPolicy] | None
    creation_prior_seconds: float  # FALCON_POOL_CREATION_PRIOR_SECONDS, compressed like GKE's times
    keeps_idle_pools: bool  # an idle pool at the end is expected (and not waited for)
    start_delay_weight: float = 0.0  # FALCON_POOL_START_DELAY_WEIGHT (CostPolicy's; the baselines ignore it)
    busy_wait_chance: float | None = None  # FALCON_POOL_BUSY_WAIT_CHANCE (CostPolicy's; None: unset)


ARM_NAMES = ("falcon", "delete-each", "keep-all")  # run by default; every-spare when named


@dataclass(frozen=True)
class EverySparePolicy:
    """Analysis arm: Falcon's policy, except that every pool a release frees is kept for the
    queue's horizon, where CostPolicy keeps one spare beyond the waiters. The horizon prices the
    wait for the queue's next arrival, so a second spare is kept as if it were the first: this
    arm measures what start time more spares buy, it is not a cost rule."""

    falcon: KeepPolicy

    @property
    def takes_back(self) -> bool:
        return self.falcon.takes_back

    def horizon(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        return self.falcon.horizon(observed, mode)

    def hold_for_waiters(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        return self.falcon.hold_for_waiters(observed, mode)

    def keep_at_release(self, waiting: int, idle: int, horizon: Callable[[], timedelta]) -> bool:
        return self.falcon.keep_at_release(waiting, idle, horizon) or horizon() > timedelta(0)

    @property
    def waits_for_busy_pools(self) -> bool:
        return self.falcon.waits_for_busy_pools

    def wait_for_busy_pool(
        self, observed: QueueObservations, mode: ProvisioningMode, busy: BusyPools, waited: float
    ) -> bool:
        return self.falcon.wait_for_busy_pool(observed, mode, busy, waited)


def arms(
    compression: float, start_delay_weight: float = 0.0, busy_wait_chance: float | None = None
) -> list[Arm]:
    prior = REAL_CREATION_PRIOR / compression
    weighted = (
        f", a minute of start delay worth {start_delay_weight:g} node-minutes per node"
        if start_delay_weight
        else ""
    )
    if busy_wait_chance is not None:
        weighted += f", waiting for a busy pool at a chance of {busy_wait_chance:g}"
    falcon = (
        "Falcon (CostPolicy: keep while the expected wait costs less than a creation and a deletion)"
        + weighted
    )
    spares = "Falcon keeping every freed pool for the horizon (EverySparePolicy)" + weighted
    return [
        Arm("falcon", falcon, None, prior, False, start_delay_weight, busy_wait_chance),
        Arm("every-spare", spares, EverySparePolicy, prior, False, start_delay_weight, busy_wait_chance),
        Arm(
            "delete-each",
            "baseline 1: create+delete per task (DeleteEachPolicy)",
            lambda _falcon: DeleteEachPolicy(),
            prior,
            False,
        ),
        Arm(
            "keep-all",
            "baseline 2: keep every pool forever (KeepAllPolicy)",
            lambda _falcon: KeepAllPolicy(),
            prior,
            True,
        ),
    ]


class ErrorLog(logging.Handler):
    """Collects Prefect's ERROR records (failed task and flow runs) instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.kinds: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "is not being released" in text:
            kind = "release run found the task already released (FalconError: not being released)"
        elif "GCE_STOCKOUT" in text:
            kind = "NodePoolFailed: GCE_STOCKOUT on the reservation"
        else:
            kind = text.splitlines()[0][:150]
        self.kinds[f"{record.name}: {kind}"] += 1

    def take(self) -> Counter[str]:
        kinds, self.kinds = self.kinds, Counter()
        return kinds


# --- the poll of the emulator -----------------------------------------------------------------

LIVE_POD_PHASES = {"Pending", "Running"}
ALL_POOL_STATES = (
    PoolState.CREATING,
    PoolState.IN_USE,
    PoolState.IDLE,
    PoolState.DELETING,
    PoolState.DELETED,
)


@dataclass
class NodeSeconds:
    provisioning: float = 0.0
    busy: float = 0.0
    idle: float = 0.0  # all of the three below
    kept: float = 0.0  # Falcon's pool state is idle: kept for (or waiting to be claimed by) a task
    ended: float = 0.0  # the task's pod has ended; release has not yet deleted the Job / the pool
    to_delete: float = 0.0  # Falcon marked the pool deleting; GKE has not started the delete yet
    deleting: float = 0.0  # the pool's delete operation runs
    no_pod_yet: float = 0.0  # held by a task whose pod is not on the node yet

    def add(self, other: NodeSeconds, dt: float) -> None:
        self.provisioning += other.provisioning * dt
        self.busy += other.busy * dt
        self.idle += other.idle * dt
        self.kept += other.kept * dt
        self.ended += other.ended * dt
        self.to_delete += other.to_delete * dt
        self.deleting += other.deleting * dt
        self.no_pod_yet += other.no_pod_yet * dt

    @property
    def total(self) -> float:
        return self.provisioning + self.busy + self.idle


class Monitor(threading.Thread):
    """Polls the emulator and integrates node-seconds by state (left Riemann sum over the samples)."""

    def __init__(self, url: str, db_url: str, slice_nodes: dict[str, int], interval: float) -> None:
        super().__init__(daemon=True, name="bench-monitor")
        self.url, self.db_url, self.slice_nodes, self.interval = url, db_url, slice_nodes, interval
        self.totals = NodeSeconds()
        self.samples = 0
        self.errors = 0
        self.unknown_pools: set[str] = set()
        self.peak_nodes = 0
        self.last_state: dict[str, object] = {}
        self.kept_since: dict[str, float] = {}  # pool -> when first seen in Falcon's idle state
        self.kept_spells: list[tuple[float, PoolState]] = []  # (seconds idle, what followed: in_use/deleting)
        self._halt = threading.Event()
        self._recording = threading.Event()
        self._client = httpx.Client(base_url=url, timeout=5.0)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)
        self._client.close()

    def run(self) -> None:
        previous: tuple[float, NodeSeconds] | None = None
        while not self._halt.is_set():
            try:
                counts = self.sample()
            except (httpx.HTTPError, ValueError, KeyError, SQLAlchemyError):
                self.errors += 1
                time.sleep(self.interval)
                continue
            now = time.monotonic()
            if previous is not None:
                self.totals.add(previous[1], now - previous[0])
            previous = (now, counts)
            self.samples += 1
            time.sleep(self.interval)

    def sample(self) -> NodeSeconds:
        state = self._client.get("/emulator/state").json()
        with session_scope(self.db_url) as s:
            db_state = {p.name: p.state for p in repo.pools_in(s, list(ALL_POOL_STATES))}
        self._track_kept(db_state)
        counts = NodeSeconds()
        nodes_now = 0
        for cluster in state["clusters"]:
            pods = self._client.get(f"{cluster['k8sPath']}/api/v1/pods").json().get("items", [])
            busy_nodes = {
                p["spec"].get("nodeName")
                for p in pods
                if p.get("status", {}).get("phase") in LIVE_POD_PHASES and p["spec"].get("nodeName")
            }
            ended_nodes = {p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")} - busy_nodes
            for pool in cluster["nodePools"]:
                if pool["status"] == "PROVISIONING" or pool["scaleUpPending"]:
                    counts.provisioning += self._slice(pool)
                elif pool["status"] == "STOPPING":
                    counts.idle += pool["nodeCount"]
                    counts.deleting += pool["nodeCount"]
                else:
                    for node in pool["nodes"]:
                        if node in busy_nodes:
                            counts.busy += 1
                        else:
                            counts.idle += 1
                            falcon_state = db_state.get(str(pool["name"]))
                            if falcon_state == PoolState.IDLE:
                                counts.kept += 1
                            elif falcon_state in (PoolState.DELETING, PoolState.DELETED):
                                counts.to_delete += 1
                            elif node in ended_nodes:
                                counts.ended += 1
                            else:
                                counts.no_pod_yet += 1
                nodes_now += pool["nodeCount"]
        self.peak_nodes = max(self.peak_nodes, nodes_now)
        self.last_state = state
        return counts

    def _track_kept(self, db_state: dict[str, PoolState]) -> None:
        now = time.monotonic()
        for name, st in db_state.items():
            if st == PoolState.IDLE:
                self.kept_since.setdefault(name, now)
            elif name in self.kept_since:
                self.kept_spells.append((now - self.kept_since.pop(name), st))

    def _slice(self, pool: dict[str, object]) -> int:
        name = str(pool["name"])
        if name not in self.slice_nodes:
            self.unknown_pools.add(name)
            count = pool["nodeCount"]
            return max(1, count if isinstance(count, int) else 1)
        return self.slice_nodes[name]


# --- one arm ----------------------------------------------------------------------------------


@dataclass
class ArmResult:
    arm: Arm
    statuses: Counter[str] = field(default_factory=Counter)
    pools_created: int = 0
    pools_deleted: int = 0
    pools_by_mode: Counter[str] = field(default_factory=Counter)
    reused: int = 0  # tasks that ran on a pool another task created
    pools_left: int = 0
    nodes_left: int = 0
    node_seconds: NodeSeconds = field(default_factory=NodeSeconds)
    to_running: list[float] = field(default_factory=list)  # emulated seconds, per task that ran
    to_pick: list[float] = field(default_factory=list)  # of it, the wait to be picked, per task that ran
    # Pick -> Running, emulated seconds, by how the task got its pool (ACQUIRED_BY): where starts go.
    acquiring: dict[str, list[float]] = field(default_factory=dict)
    never_running: int = 0
    failed_on_inherited_pool: int = 0  # did not succeed, on a pool another task had created
    errors: Counter[str] = field(default_factory=Counter)  # Prefect ERROR logs, by kind
    failures: list[str] = field(default_factory=list)  # "task: Reason: message" of tasks that did not succeed
    wall_seconds: float = 0.0
    tick_errors: int = 0
    monitor_samples: int = 0
    monitor_errors: int = 0
    peak_nodes: int = 0
    unknown_pools: int = 0
    kept_spells: list[tuple[float, PoolState]] = field(default_factory=list)
    placements: dict[str, tuple[str, ProvisioningMode]] = field(default_factory=dict)  # task -> cluster, mode
    operation_waits: OperationWaits = field(default_factory=OperationWaits)  # each for its cluster


def replay(
    arm: Arm, tasks: list[SyntheticTask], sample_seconds: float, work: Path, gke_operations: int = 5
) -> ArmResult:
    from flows.lifecycle import task_lifecycle, task_release
    from flows.warming import warm_pools

    db_url = f"sqlite:///{work / 'falcon.db'}"
    upgrade(db_url)
    result = ArmResult(arm)
    config = EmulatorConfig.from_dict(emulator_config(gke_operations))
    slice_nodes = {node_pool_name_for(t.task_id, t.topology): t.nodes for t in tasks}
    with EmulatorServer(config, work / "emu") as emulator, contextlib.ExitStack() as arm_wiring:
        os.environ.update(
            FALCON_HOME=str(work),
            FALCON_DATABASE_URL=db_url,
            FALCON_EMULATOR_URL=emulator.url,
            FALCON_POLL_SECONDS=str(FALCON_POLL_SECONDS),
            FALCON_RECONCILE_SECONDS=str(FALCON_RECONCILE_SECONDS),
            FALCON_GKE_BUSY_RETRY_SECONDS=str(FALCON_GKE_BUSY_RETRY_SECONDS),
            FALCON_GKE_OPERATIONS_PER_CLUSTER=str(gke_operations),
            FALCON_POOL_CREATION_PRIOR_SECONDS=str(arm.creation_prior_seconds),
            FALCON_POOL_START_DELAY_WEIGHT=str(arm.start_delay_weight),
            FALCON_MESSAGE_LOCALE="en",
            FALCON_LOG_LEVEL="WARNING",  # the report, not a line per task move
        )
        if arm.busy_wait_chance is None:
            os.environ.pop("FALCON_POOL_BUSY_WAIT_CHANCE", None)
        else:
            os.environ["FALCON_POOL_BUSY_WAIT_CHANCE"] = str(arm.busy_wait_chance)
        get_settings.cache_clear()
        settings = get_settings()
        services = build_services(settings)
        # The flow runs in threads of this process, as `falcon local` runs them (flows/dispatcher.py
        # runs_in_process): Falcon's ThreadLauncher, its bounded threads and their shared client.
        launcher = ThreadLauncher(
            (task_lifecycle, task_release, warm_pools), settings.run_threads, services.store
        )
        arm_wiring.callback(launcher.stop, 5.0)  # at the arm's end, its runs all ended by then
        services = dataclasses.replace(services, launcher=launcher, clock=StoppableClock(launcher.stopping))
        if arm.keep_policy is not None:
            services = dataclasses.replace(services, keep_policy=arm.keep_policy(services.keep_policy))
        arm_wiring.enter_context(serving(services))  # the arm's flows run on these services too
        with session_scope(db_url) as s:
            for cluster in clusters(arm.name):
                repo.add_cluster(s, cluster, utc_now())
        dispatcher = Dispatcher(services)
        monitor = Monitor(emulator.url, db_url, slice_nodes, sample_seconds)
        monitor.start()

        running_at: dict[str, datetime] = {}
        created_at: dict[str, datetime] = {}
        pending = list(tasks)
        started = time.monotonic()
        settled_since: float | None = None
        deadline = started + 600
        while time.monotonic() < deadline:
            elapsed = time.monotonic() - started
            while pending and pending[0].arrival <= elapsed:
                submit(services, pending.pop(0), created_at)
            try:
                dispatcher.tick()
            except Exception:
                result.tick_errors += 1
                log.exception("dispatcher tick failed")
            rows = observe(services, running_at)
            if not pending and all(rows.get(t.task_id) in TERMINAL for t in tasks):
                if settled(services, monitor, arm):
                    settled_since = settled_since or time.monotonic()
                    if time.monotonic() - settled_since >= 2 * sample_seconds:
                        break
                else:
                    settled_since = None
            time.sleep(0.1)
        else:
            log.error("arm %s did not finish within 600 s", arm.name)
        result.wall_seconds = time.monotonic() - started
        monitor.stop()
        dispatcher.close()

        state = httpx.get(f"{emulator.url}/emulator/state").json()
        operations = [
            o
            for project in {c.project for c in clusters(arm.name)}
            for o in httpx.get(f"{emulator.url}/v1/projects/{project}/locations/-/operations")
            .json()
            .get("operations", [])
        ]
        for cluster in state["clusters"]:
            result.pools_created += cluster["counters"]["nodePoolsCreated"]
            result.pools_deleted += cluster["counters"]["nodePoolsDeleted"]
            result.pools_left += len(cluster["nodePools"])
            result.nodes_left += sum(p["nodeCount"] for p in cluster["nodePools"])
        with session_scope(services.settings.resolved_database_url) as s:
            rows_by_id = {t.id: t for t in repo.list_tasks(s, 10_000)}
            picks = sa.select(TaskProgressRow.task_id, TaskProgressRow.acquiring_at)
            picked_at = {task_id: at for task_id, at in s.execute(picks)}
            all_pools = repo.pools_in(s, list(ALL_POOL_STATES))
            records = sa.select(NodePoolRow.name, NodePoolRow.created_at, NodePoolRow.deleting_at)
            recorded = {name: Recorded(created, marked) for name, created, marked in s.execute(records)}
        result.operation_waits = operation_waits(operations, recorded)
        result.pools_by_mode = Counter(p.mode for p in all_pools)
        mode_of = {(p.cluster_id, p.name): p.mode for p in all_pools}
        result.placements = {
            t.id: (t.cluster_id, mode_of[(t.cluster_id, t.node_pool_name)])
            for t in rows_by_id.values()
            if t.id in running_at
            and t.cluster_id
            and t.node_pool_name
            and (t.cluster_id, t.node_pool_name) in mode_of
        }
        topology = {t.task_id: t.topology for t in tasks}
        for task_id, row in rows_by_id.items():
            result.statuses[row.status.value] += 1
            own = node_pool_name_for(task_id, topology[task_id])
            if row.status is not Status.SUCCEEDED:
                reason = row.reason.value if row.reason else "-"
                result.failures.append(
                    f"{task_id} {row.status.value}/{reason} on {row.node_pool_name}: {row.message}"
                )
                if row.node_pool_name and row.node_pool_name != own:
                    result.failed_on_inherited_pool += 1
            if task_id in running_at and row.node_pool_name and row.node_pool_name != own:
                result.reused += 1
            if task_id in running_at:
                result.to_running.append((running_at[task_id] - created_at[task_id]).total_seconds())
                if picked_at.get(task_id):
                    result.to_pick.append((picked_at[task_id] - created_at[task_id]).total_seconds())
                    how = acquired_by(row.node_pool_name == own, mode_of.get((row.cluster_id or "", own)))
                    acquiring = (running_at[task_id] - picked_at[task_id]).total_seconds()
                    result.acquiring.setdefault(how, []).append(acquiring)
            else:
                result.never_running += 1
        result.node_seconds = monitor.totals
        result.monitor_samples, result.monitor_errors = monitor.samples, monitor.errors
        result.peak_nodes, result.unknown_pools = monitor.peak_nodes, len(monitor.unknown_pools)
        result.kept_spells = monitor.kept_spells
    return result


# How a task that ran got its pool: a pool created for it, per mode, or one another task left.
ACQUIRED_BY = {"new_reservation": "new res. pool", "new_flex": "new flex pool", "reused": "reused pool"}


def acquired_by(own_pool: bool, mode: ProvisioningMode | None) -> str:
    if not own_pool:
        return "reused"
    return "new_flex" if mode is FLEX_START else "new_reservation"


def submit(services: Services, task: SyntheticTask, created_at: dict[str, datetime]) -> None:
    """What upstream does: insert a Pending row (created_at = now)."""
    spec = {
        "image": "trainer:1",
        "command": ["python", "train.py"],
        "topology": task.topology,
        "env": {"EMULATOR_RUN_SECONDS": str(task.run_seconds)},
    }
    now = utc_now()
    with session_scope(services.settings.resolved_database_url) as s:
        repo.insert_task(
            s,
            task_id=task.task_id,
            actor=task.actor,
            name=f"job-{task.task_id}",
            tpu_type=TPU_TYPE,
            spec=spec,
            timeout_seconds=3600,
            now=now,
        )
    created_at[task.task_id] = now


def observe(services: Services, running_at: dict[str, datetime]) -> dict[str, Status]:
    now = utc_now()
    with session_scope(services.settings.resolved_database_url) as s:
        rows = repo.list_tasks(s, 10_000)
    for row in rows:
        if row.status is Status.RUNNING and row.id not in running_at:
            running_at[row.id] = now
    return {row.id: row.status for row in rows}


def settled(services: Services, monitor: Monitor, arm: Arm) -> bool:
    """Every task is terminal; wait until no pool is being created or deleted and, unless the arm
    keeps pools forever, every pool is gone."""
    with session_scope(services.settings.resolved_database_url) as s:
        busy = repo.pools_in(s, [PoolState.CREATING, PoolState.IN_USE, PoolState.DELETING])
        idle = repo.pools_in(s, [PoolState.IDLE])
    if busy or (idle and not arm.keeps_idle_pools):
        return False
    state = monitor.last_state
    if not state or state.get("operations"):
        return False
    return all(
        p["status"] not in ("PROVISIONING", "STOPPING")
        for c in state["clusters"]  # type: ignore[attr-defined]
        for p in c["nodePools"]
    )


# --- report -----------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def acquiring_of(r: ArmResult, how: str, scale: Callable[[float], float]) -> str:
    times = r.acquiring.get(how, [])
    return f"{len(times)}, {scale(statistics.fmean(times)):.1f}" if times else "0, -"


def report(results: list[ArmResult], tasks: list[SyntheticTask], compression: float) -> str:
    def hours(seconds: float) -> float:
        return seconds * compression / 3600

    def minutes(seconds: float) -> float:
        return seconds * compression / 60

    work = sum(t.run_seconds * t.nodes for t in tasks)
    rows: list[tuple[str, Callable[[ArmResult], str]]] = [
        (
            "tasks Succeeded / other",
            lambda r: f"{r.statuses['Succeeded']} / {sum(r.statuses.values()) - r.statuses['Succeeded']}",
        ),
        ("node pools created", lambda r: str(r.pools_created)),
        (
            "  on reservation / flex-start",
            lambda r: f"{r.pools_by_mode[RESERVATION]} / {r.pools_by_mode[FLEX_START]}",
        ),
        ("tasks run on a reused pool", lambda r: str(r.reused)),
        ("node pools deleted / left at end", lambda r: f"{r.pools_deleted} / {r.pools_left}"),
        ("node-hours provisioning", lambda r: f"{hours(r.node_seconds.provisioning):.1f}"),
        ("node-hours busy (task pod on node)", lambda r: f"{hours(r.node_seconds.busy):.1f}"),
        ("node-hours idle (no task pod)", lambda r: f"{hours(r.node_seconds.idle):.1f}"),
        ("  kept by Falcon (pool state idle)", lambda r: f"{hours(r.node_seconds.kept):.1f}"),
        ("  held, task's pod not on it yet", lambda r: f"{hours(r.node_seconds.no_pod_yet):.1f}"),
        ("  task ended, Job not yet deleted", lambda r: f"{hours(r.node_seconds.ended):.1f}"),
        ("  marked deleting, GKE not yet", lambda r: f"{hours(r.node_seconds.to_delete):.1f}"),
        ("  pool being deleted", lambda r: f"{hours(r.node_seconds.deleting):.1f}"),
        (
            "node-hours idle + provisioning",
            lambda r: f"{hours(r.node_seconds.idle + r.node_seconds.provisioning):.1f}",
        ),
        ("node-hours total", lambda r: f"{hours(r.node_seconds.total):.1f}"),
        (
            "  waste share (idle+prov)/total",
            lambda r: (
                f"{(r.node_seconds.idle + r.node_seconds.provisioning) / max(r.node_seconds.total, 1e-9):.0%}"
            ),
        ),
        (
            "submit -> Running, mean (min)",
            lambda r: f"{minutes(statistics.fmean(r.to_running)) if r.to_running else float('nan'):.1f}",
        ),
        (
            "  of it waiting to be picked, mean (min)",
            lambda r: f"{minutes(statistics.fmean(r.to_pick)) if r.to_pick else float('nan'):.1f}",
        ),
        *(
            (f"  on a {label}: tasks, pick -> Running (min)", partial(acquiring_of, how=how, scale=minutes))
            for how, label in ACQUIRED_BY.items()
        ),
        ("submit -> Running, p50 (min)", lambda r: f"{minutes(percentile(r.to_running, 0.5)):.1f}"),
        ("submit -> Running, p90 (min)", lambda r: f"{minutes(percentile(r.to_running, 0.9)):.1f}"),
        ("tasks never seen Running", lambda r: str(r.never_running)),
        ("peak nodes up at once", lambda r: str(r.peak_nodes)),
        ("makespan, real hours (wall s)", lambda r: f"{hours(r.wall_seconds):.1f} ({r.wall_seconds:.0f} s)"),
    ]
    width = max(len(name) for name, _ in rows) + 2
    col = max(14, *(len(r.arm.name) + 2 for r in results))
    lines = ["".ljust(width) + "".join(r.arm.name.rjust(col) for r in results)]
    lines += [name.ljust(width) + "".join(fmt(r).rjust(col) for r in results) for name, fmt in rows]
    lines.append("")
    lines.append(f"busy node-hours expected from the workload (run time x slice nodes): {hours(work):.1f}")
    for r in results:
        notes = [f"{r.monitor_samples} samples"]
        if r.monitor_errors:
            notes.append(f"{r.monitor_errors} failed polls")
        if r.tick_errors:
            notes.append(f"{r.tick_errors} failed dispatcher ticks")
        if r.unknown_pools:
            notes.append(f"{r.unknown_pools} pools of unknown size")
        if r.pools_left:
            notes.append(
                f"{r.pools_left} pools / {r.nodes_left} nodes still up at the end (idle from then on)"
            )
        lines.append(f"{r.arm.name}: {r.arm.label}; " + ", ".join(notes))
        claimed, reaped = kept_spells(r)
        if claimed or reaped:
            lines.append(
                f"    kept pools: {len(claimed)} claimed by the next task after a mean "
                f"{minutes(statistics.fmean(claimed)) if claimed else 0:.1f} min idle (max "
                f"{minutes(max(claimed, default=0)):.1f}), {len(reaped)} deleted unclaimed"
            )
        if r.failed_on_inherited_pool:
            lines.append(
                f"    {r.failed_on_inherited_pool} task(s) failed on a pool another task had created"
            )
        lines += [f"    not succeeded: {line}" for line in sorted(r.failures)]
        lines += [f"    logged {n}x {kind}" for kind, n in sorted(r.errors.items())]
    return "\n".join(lines)


# --- the optimum, the tables and the goals ------------------------------------------------------


def optimum_queues(
    tasks: list[SyntheticTask], placements: dict[str, tuple[str, ProvisioningMode]]
) -> list[Queue]:
    """The optimum's queues (emulated seconds): the tasks that ran, on the clusters and in the modes
    of the replay; a task runs its containers' time plus its pod's start, as the poll counts busy."""
    queues: dict[tuple[str, str], list[QueuedTask]] = {}
    nodes: dict[tuple[str, str], int] = {}
    for t in tasks:
        if t.task_id not in placements:
            continue
        cluster_id, mode = placements[t.task_id]
        key = (cluster_id, t.topology)
        run = t.run_seconds + POD_START_SECONDS
        queues.setdefault(key, []).append(QueuedTask(t.arrival, run, CREATION_SECONDS[mode]))
        nodes[key] = t.nodes
    return [Queue(nodes[key], PROVISION_SECONDS, queued) for key, queued in queues.items()]


def optimum_rows(
    queues: list[Queue], keep_all: ArmResult | None, compression: float
) -> dict[str, dict[str, float]]:
    """The optimum, and beside the keep-all arm the optimum within the start goal (``opt@start``):
    the fewest node-hours of a plan whose tasks wait for new pools no longer, all together, than
    the least any plan waits plus 10 % of keep-all's measured submit -> Running summed over its
    tasks. If keep-all waits for pools only the least any plan does (it reuses whenever it can), and
    Falcon's time outside that wait (the pick, its steps, waits for GKE's operations) is no
    shorter than keep-all's, a policy meeting the start goal spends at least that many node-hours."""
    rows = {"optimum": optimum_metrics(optimum(queues), compression)}
    within = most_avoided_within(queues, create_and_delete(queues).total)
    if within is not None:
        rows["horizon@c&d"] = optimum_metrics(within.plan, compression)
    if keep_all is not None and keep_all.to_running:
        budget = least_wait(queues) + 0.1 * sum(keep_all.to_running)
        rows["opt@start"] = optimum_metrics(optimum(queues, max_wait=budget), compression)
    return rows


def kept_spells(r: ArmResult) -> tuple[list[float], list[float]]:
    """The seconds each kept pool was idle: of those a later task took, and of those deleted unclaimed."""
    claimed = [d for d, then in r.kept_spells if then == PoolState.IN_USE]
    return claimed, [d for d, then in r.kept_spells if then != PoolState.IN_USE]


def arm_metrics(r: ArmResult, compression: float) -> dict[str, float]:
    """The figures of one arm's run, node-hours and minutes in real terms."""
    ns, waits = r.node_seconds, r.operation_waits
    claimed, reaped = kept_spells(r)
    return {
        "tasks": sum(r.statuses.values()),
        "succeeded": r.statuses["Succeeded"],
        "created": r.pools_created,
        "created_reservation": r.pools_by_mode[RESERVATION],
        "created_flex": r.pools_by_mode[FLEX_START],
        "reused": r.reused,
        "busy_h": ns.busy * compression / 3600,
        "idle_h": ns.idle * compression / 3600,
        "provisioning_h": ns.provisioning * compression / 3600,
        "total_h": ns.total * compression / 3600,
        # Of the idle: pools kept for a task, and pools being deleted (GKE's delete running).
        "kept_h": ns.kept * compression / 3600,
        "deleting_h": ns.deleting * compression / 3600,
        "kept_claimed": len(claimed),
        "kept_unclaimed": len(reaped),
        "to_running_mean_min": (statistics.fmean(r.to_running) if r.to_running else math.nan)
        * compression
        / 60,
        "to_running_p90_min": percentile(r.to_running, 0.9) * compression / 60,
        "to_pick_mean_min": (statistics.fmean(r.to_pick) if r.to_pick else math.nan) * compression / 60,
        **{f"tasks_{how}": len(r.acquiring.get(how, ())) for how in ACQUIRED_BY},
        **{
            f"pick_to_running_{how}_min": statistics.fmean(r.acquiring[how]) * compression / 60
            for how in ACQUIRED_BY
            if r.acquiring.get(how)
        },
        "pools_left": r.pools_left,
        # Each GKE operation's wait for its cluster (--gke-operations): creations from their record,
        # deletions from their mark (gke_operations).
        "gke_operations": len(waits.creations) + len(waits.deletions),
        **{
            f"{kind}_wait_min": statistics.fmean(values) * compression / 60
            for kind, values in (("create", waits.creations), ("delete", waits.deletions))
            if values
        },
        # Node-time idle in Falcon's own steps (pool held before its pod is on it, Job ended before
        # the release deleted it), in wall (= emulated) seconds: these steps are not compressed.
        "falcon_steps_idle_node_s": ns.no_pod_yet + ns.ended,
        "falcon_steps_idle_h": (ns.no_pod_yet + ns.ended) * compression / 3600,
        "wall_s": r.wall_seconds,
    }


def optimum_metrics(plan: Plan, compression: float) -> dict[str, float]:
    return {
        "tasks": plan.tasks,
        "succeeded": plan.tasks,
        "created": plan.creations,
        "reused": plan.avoided,
        "busy_h": plan.busy * compression / 3600,
        "idle_h": plan.idle * compression / 3600,
        "provisioning_h": plan.provisioning * compression / 3600,
        "total_h": plan.total * compression / 3600,
        "pool_wait_mean_min": plan.wait / plan.tasks * compression / 60 if plan.tasks else math.nan,
    }


def table(rows: dict[str, dict[str, float]]) -> str:
    """One row per arm and the optimum."""
    head = (
        f"{'':12}{'Succeeded':>10}{'created (res/flex)':>20}{'reused':>8}"
        f"{'node-h busy':>12}{'idle':>7}{'prov':>7}{'total':>8}{'->Running mean':>16}{'p90':>7}"
    )
    lines = [head]
    for name, m in rows.items():
        split = f" ({m['created_reservation']:.0f}/{m['created_flex']:.0f})" if "created_flex" in m else ""
        running = (
            f"{m['to_running_mean_min']:>12.1f} min{m['to_running_p90_min']:>7.1f}"
            if "to_running_mean_min" in m
            else f"{'-':>16}{'-':>7}"
        )
        lines.append(
            f"{name:12}{m['succeeded']:>4.0f} / {m['tasks']:<3.0f}"
            f"{m['created']:>12.0f}{split:<8}{m['reused']:>8.0f}"
            f"{m['busy_h']:>12.1f}{m['idle_h']:>7.1f}{m['provisioning_h']:>7.1f}{m['total_h']:>8.1f}{running}"
        )
    return "\n".join(lines)


def falcon_steps(rows: dict[str, dict[str, float]]) -> str:
    """Falcon's own step times are not compressed: their idle node-time, in wall and in real terms."""
    parts = [
        f"{name} {m['falcon_steps_idle_node_s']:.1f} node-s wall = {m['falcon_steps_idle_h']:.1f} node-h real"
        for name, m in rows.items()
        if "falcon_steps_idle_node_s" in m
    ]
    return "  idle in Falcon's own steps (held before the pod, Job ended before release): " + "; ".join(parts)


def spread(runs: list[dict[str, dict[str, float]]], row: str, key: str) -> str:
    values = [run[row][key] for run in runs if row in run and key in run[row]]
    if not values:
        return "-"
    return f"{statistics.fmean(values):.1f} ({min(values):.1f}-{max(values):.1f})"


SUMMARY_KEYS = (
    ("total_h", "node-h total"),
    ("idle_h", "node-h idle"),
    ("kept_h", "  kept"),
    ("deleting_h", "  being deleted"),
    ("provisioning_h", "node-h prov"),
    ("created", "pools created"),
    ("reused", "tasks reused"),
    ("kept_claimed", "kept, then claimed"),
    ("kept_unclaimed", "kept, then deleted"),
    ("to_running_mean_min", "->Running mean min"),
    ("to_running_p90_min", "->Running p90 min"),
    ("to_pick_mean_min", "of it to the pick"),
    *(
        key_label
        for how, label in ACQUIRED_BY.items()
        for key_label in (
            (f"tasks_{how}", f"{label}: tasks"),
            (f"pick_to_running_{how}_min", "  pick->Running min"),
        )
    ),
    ("gke_operations", "GKE operations"),
    ("create_wait_min", "  creation's wait min"),
    ("delete_wait_min", "  deletion's wait min"),
    ("falcon_steps_idle_h", "node-h Falcon steps"),
    ("pool_wait_mean_min", "model's pool wait min"),
)


def shape_summary(runs: list[dict[str, dict[str, float]]]) -> str:
    """Mean (min-max) over the seeds, per arm and the optimum."""
    names = list(runs[0])
    lines = [f"{'':20}" + "".join(f"{n:>24}" for n in names)]
    for key, label in SUMMARY_KEYS:
        lines.append(f"{label:20}" + "".join(f"{spread(runs, n, key):>24}" for n in names))
    return "\n".join(lines)


def workload_facts(params: WorkloadParams, tasks: list[SyntheticTask]) -> dict[str, object]:
    runs = [t.run_seconds for t in tasks]
    return {
        "params": params.describe(),
        "arrival_process": params.arrival_process(),
        "gap_cv": gap_variation(tasks),
        "topologies": dict(Counter(t.topology for t in tasks)),
        "run_seconds_median": statistics.median(runs) if runs else math.nan,
        "run_seconds_p90": percentile(runs, 0.9),
        "work": summary(tasks),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--span", type=float, default=32.0, help="emulated seconds of arrivals")
    parser.add_argument("--run-max", type=float, default=20.0, help="longest run, emulated seconds")
    parser.add_argument("--compression", type=float, default=DEFAULT_COMPRESSION)
    parser.add_argument("--sample", type=float, default=0.2, help="emulator poll interval, seconds")
    parser.add_argument(
        "--arms",
        default=",".join(ARM_NAMES),
        help="comma-separated, of: " + ", ".join(a.name for a in arms(DEFAULT_COMPRESSION)),
    )
    parser.add_argument(
        "--start-delay-weight",
        type=float,
        default=0.0,
        help="the Falcon arms' FALCON_POOL_START_DELAY_WEIGHT (node-minutes a minute of delay is worth)",
    )
    parser.add_argument(
        "--busy-wait-chance",
        type=float,
        help="the Falcon arms' FALCON_POOL_BUSY_WAIT_CHANCE (unset by default: never wait for a busy pool)",
    )
    parser.add_argument(
        "--prefect-db",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="the Prefect server's database (default %(default)s, as `falcon local` runs it)",
    )
    parser.add_argument(
        "--gke-operations",
        type=int,
        default=5,
        help="node-pool operations GKE runs at once per cluster, in the emulator and Falcon's"
        " FALCON_GKE_OPERATIONS_PER_CLUSTER (default %(default)s: GKE's quota; 1: one at a time)",
    )
    parser.add_argument("--json", type=Path, help="write every table, summary and goal here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    seeds = [int(s) for s in args.seeds.split(",")]
    shapes = args.shapes.split(",")
    every = arms(args.compression, args.start_delay_weight, args.busy_wait_chance)
    chosen = [a for a in every if a.name in args.arms.split(",")]
    c = args.compression
    print_setup(c, args.sample, args.gke_operations)

    out: dict[str, object] = {
        "setup": setup(
            c,
            args.sample,
            args.start_delay_weight,
            args.prefect_db,
            args.gke_operations,
            args.busy_wait_chance,
        ),
        "shapes": {},
    }
    errors = ErrorLog()
    prefect_logger = logging.getLogger("prefect")
    with tempfile.TemporaryDirectory() as tmp, prefect_api(args.prefect_db, Path(tmp) / "prefect"):
        prefect_logger.addHandler(errors)
        prefect_logger.propagate = False  # failed runs are summarised in the report, not dumped
        for shape in shapes:
            runs: list[dict[str, dict[str, float]]] = []
            shape_out: dict[str, object] = {"seeds": {}}
            for seed in seeds:
                params = WorkloadParams(
                    shape=shape,
                    tasks=args.tasks,
                    seed=seed,
                    span_seconds=args.span,
                    run_clip_seconds=(WorkloadParams.run_clip_seconds[0], args.run_max),
                )
                tasks = generate(params)
                facts = workload_facts(params, tasks)
                print(f"\n=== {params.describe()}", flush=True)
                print(f"  burstiness (CV of inter-arrival gaps) {facts['gap_cv']:.2f}; {facts['work']}")
                results = []
                for arm in chosen:
                    work = Path(tmp) / f"{shape}-{seed}-{arm.name}"
                    work.mkdir()
                    result = replay(arm, tasks, args.sample, work, args.gke_operations)
                    result.errors = errors.take()
                    print(
                        f"  {arm.name} done in {result.wall_seconds:.0f} s: {dict(result.statuses)}",
                        flush=True,
                    )
                    results.append(result)
                rows = {r.arm.name: arm_metrics(r, c) for r in results}
                if results:
                    basis = next((r for r in results if r.arm.name == "falcon"), results[0])
                    keep_all = next((r for r in results if r.arm.name == "keep-all"), None)
                    rows |= optimum_rows(optimum_queues(tasks, basis.placements), keep_all, c)
                    print(
                        f"  (the optimum takes the clusters and modes of the {basis.arm.name} arm's replay)"
                    )
                print(table(rows))
                print(falcon_steps(rows))
                print(report(results, tasks, c))
                runs.append(rows)
                shape_out["seeds"][str(seed)] = {"workload": facts, "rows": rows}  # type: ignore[index]
            if not runs:
                continue
            checks = goals(runs)
            print(f"\n=== {shape}: mean (min-max) over seeds {args.seeds}")
            print(shape_summary(runs))
            for g in checks:
                print(f"  {'PASS' if g.met else 'MISS'}  {g.name}: {g.detail}")
            shape_out["summary"] = {
                row: {
                    key: [run[row][key] for run in runs if row in run and key in run[row]]
                    for key, _ in SUMMARY_KEYS
                }
                for row in runs[0]
            }
            shape_out["goals"] = [dataclasses.asdict(g) for g in checks]
            out["shapes"][shape] = shape_out  # type: ignore[index]
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0


@contextlib.contextmanager
def prefect_api(db: str, home: Path) -> Iterator[None]:
    """The Prefect server every arm's flow runs report to: the test harness's, on SQLite as
    `falcon local` keeps it, or (``postgres``) a `prefect server` of our own on a throwaway
    PostgreSQL, as production runs it. A SQLite server answers 503 under concurrent writes; the
    launcher's threads send such a request again within 0.2 s (ResendWhenBusy in
    falcon.adapters.runs), where Prefect's client would sleep 2 s, 4 s, ... uncompressed."""
    if db == "sqlite":
        from prefect.testing.utilities import prefect_test_harness

        with prefect_test_harness(server_startup_timeout=120):
            yield
        return
    from local_stack import prefect_api as throwaway_prefect_api
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with throwaway_prefect_api(home, db) as url, temporary_settings({PREFECT_API_URL: url}):
        yield


def setup(
    compression: float,
    sample: float,
    start_delay_weight: float = 0.0,
    prefect_db: str = "sqlite",
    gke_operations: int = 5,
    busy_wait_chance: float | None = None,
) -> dict[str, object]:
    return {
        "prefect_db": prefect_db,
        "compression": compression,
        "node_pool_create_s": PROVISION_SECONDS,
        "node_pool_delete_s": PROVISION_SECONDS,
        "flex_scale_up_s": FLEX_DELAY_SECONDS,
        "gke_operations_per_cluster": gke_operations,
        "pod_start_s": POD_START_SECONDS,
        "falcon_poll_s": FALCON_POLL_SECONDS,
        "falcon_reconcile_s": FALCON_RECONCILE_SECONDS,
        "falcon_gke_busy_retry_s": FALCON_GKE_BUSY_RETRY_SECONDS,
        "falcon_creation_prior_s": REAL_CREATION_PRIOR / compression,
        "falcon_start_delay_weight": start_delay_weight,
        "falcon_busy_wait_chance": busy_wait_chance,
        "reservation_nodes": RESERVATIONS,
        "sample_s": sample,
    }


def print_setup(c: float, sample: float, gke_operations: int = 5) -> None:
    at_once = "one node-pool operation" if gke_operations == 1 else f"{gke_operations} node-pool operations"
    print(
        f"time compression: 1 emulated s = {c:g} real s. Emulator: node-pool create {PROVISION_SECONDS} s "
        f"(= {PROVISION_SECONDS * c / 60:.0f} min), delete {PROVISION_SECONDS} s, flex-start scale-up "
        f"{FLEX_DELAY_SECONDS} s (= {FLEX_DELAY_SECONDS * c / 60:.0f} min), pod start {POD_START_SECONDS} s, "
        f"{at_once} per cluster at a time."
    )
    print(
        f"  Falcon (not compressed): poll {FALCON_POLL_SECONDS} s, reconcile {FALCON_RECONCILE_SECONDS} s, "
        f"create again after GKE said busy {FALCON_GKE_BUSY_RETRY_SECONDS} s (production 2 s, 1 s and 5 s, "
        f"i.e. these are {FALCON_POLL_SECONDS * c:.0f} s / {FALCON_RECONCILE_SECONDS * c:.0f} s / "
        f"{FALCON_GKE_BUSY_RETRY_SECONDS * c:.0f} s in real terms); its creation prior "
        f"{REAL_CREATION_PRIOR / c:g} s (production {REAL_CREATION_PRIOR:g} s)."
    )
    print(
        f"  clusters: edge-a (reservation {RESERVATIONS['a']} nodes), edge-b (reservation "
        f"{RESERVATIONS['b']} nodes), both v6e with flex-start; node-seconds polled every {sample} s."
    )
    print(
        "  baselines are Falcon with Services.keep_policy replaced (DeleteEachPolicy, KeepAllPolicy); "
        "the optimum is benchmarks/pool_optimum.py on the falcon arm's clusters and modes."
    )
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
