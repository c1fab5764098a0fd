"""The TidalScheduler controller at scale, and the warm-pool rule's effect on Falcon's own tasks (issue 9).

Part ``controller``: one emulator process serving 4 emulated clusters, registered in a throwaway
SQLite Falcon database, each with the CRD (infra/tidal-scheduler/crd.yaml) installed through the
apiextensions API; 1,000 TidalSchedulers x 10 rules in cluster 1 and 100 x 10 in each of
clusters 2-4 (--objects scales all four). Every object fires every --period / 2 seconds through
two frequent rules (second fields ``s/P`` and ``s+P/2/P``, in two of five zones, s spread over the
period); every 10th object fires at second 0 with the others of its kind (a fleet scaling at one
instant); every 4th has a third frequent rule at the same instants in another zone with more
replicas (a conflict, max wins); the other 7-8 rules are day-scale rules (09:00 on weekdays,
@daily, @weekly, ...) that seldom fire but are computed at every evaluation as real ones are. Each
object targets one of a few Deployments of its namespace, status-only mode (no /scale patch).

The controller runs as production builds it (falcon.bootstrap.build_tidal_controller: the real
service and Kubernetes adapter, its list+watch per cluster and its worker threads) in a child
process, so that psutil measures its CPU and RSS alone; it starts after every object exists, so
its first list is the whole fleet and the first evaluation of each object is a catch-up.

Measured by this process with a kubernetes-client watch per cluster (list, then watch from the
list's resourceVersion):
* fire-to-status latency: the moment the watch delivers a status whose lastTriggerTime changed,
  minus that lastTriggerTime (the scheduled second); this includes the controller's wake-up, its
  GET of the target and status PATCH, the emulator's fan-out and the watch delivery to this
  process, all on one 2-core machine. Split into fires scheduled before every object had a status
  (start-up) and after (steady state); a fire the watch never showed is counted missed;
* start-up: controller process start -> every object has a status (the initial list, then one
  evaluation and patch per object);
* the controller's CPU seconds per wall second and peak RSS (psutil, sampled every 0.5 s; the child
  imports this module too), and the emulator's CPU for context; the controller's own histogram of
  fire lag (scheduled second -> status patched, before the watch) and its count of fires applied
  per cluster, set against the distinct fires the watch saw (equal: the watch lost nothing, so a
  missed fire is the controller's), and its warnings (``event=...``) counted.

Part ``warm``: the pool-economics machinery (benchmarks/bench_pool_economics.py: its Monitor of
node-seconds and the real Dispatcher with its flows as threads) replays a morning burst of tasks
of one topology arriving just after a warm rule's fire, per seed, in two arms: no warm rule, and a
warm rule (target --warm-pools pools at the fire, 0 at the evening fire). Reported per arm:
submit -> Running p50/p95, submit -> Job submitted (from Falcon's rows) of the tasks that ran on
a warm pool and of those that had to create their own, and the node-hours idle (all, and kept by
Falcon: warm or kept pools awaiting a task), provisioning and busy.

Run: .venv/bin/python benchmarks/bench_tidal.py [--part controller|warm|all] [--seconds 120]
     [--objects 1000,100,100,100] [--period 60] [--tasks 8 --seeds 1,2,3]
(at the defaults, on 2 busy cores: part controller about 2 1/2 minutes; part warm about 5 1/2
minutes, 40-55 s per arm and seed after the Prefect test server's start)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # flows/, tests/ and the other benchmarks
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import psutil  # noqa: E402
import yaml  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes import watch as k8s_watch  # noqa: E402
from workload import SyntheticTask  # noqa: E402

from falcon.adapters.clock import utc_now  # noqa: E402
from falcon.adapters.db import repository as repo  # noqa: E402
from falcon.adapters.db.migrate import upgrade  # noqa: E402
from falcon.adapters.db.session import session_scope  # noqa: E402
from falcon.adapters.db.store import SqlTaskStore  # noqa: E402
from falcon.bootstrap import Gateways  # noqa: E402
from falcon.domain.cron import parse_cron  # noqa: E402
from falcon.domain.model import Cluster, ClusterStatus, QueueKey, node_pool_name_for  # noqa: E402
from falcon.domain.tidal import GROUP, PLURAL, VERSION, parse_time  # noqa: E402
from falcon.domain.warm_pools import WarmRule  # noqa: E402
from falcon.local import free_port  # noqa: E402
from falcon.settings import get_settings  # noqa: E402

if TYPE_CHECKING:  # part 2 imports the pool-economics benchmark (and Prefect) only when it runs
    from bench_pool_economics import ArmResult

log = logging.getLogger("bench")

# --- the fleet ----------------------------------------------------------------------------------

CLUSTER_LOCATIONS = ("us-east5", "us-central1", "europe-west4", "asia-east1")
ZONES = ("UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin", "Asia/Kolkata")
# Day-scale rules as real objects carry them: computed at every evaluation, seldom firing.
RARE_RULES = (
    "0 0 9 * * 1-5",
    "0 30 12 * * *",
    "0 0 19-21 * * *",
    "0 0 0 1 * *",
    "@daily",
    "@weekly",
    "0 0 8 ? * MON",
    "0 15 3 * * SAT,SUN",
)
NAMESPACES = 10  # per cluster
DEPLOYMENTS = 4  # per namespace: the objects' targets
RULES_PER_OBJECT = 10
FLEET_EVERY = 10  # every 10th object fires at second 0 of the period, with the rest of its fleet
CONFLICT_EVERY = 4  # every 4th object (index % 4 == 1) has two rules firing at once
TARGET_P99 = 1.0
WATCH_SECONDS = 5  # each watch request of this process's watchers


def cluster_rows(sizes: list[int]) -> list[Cluster]:
    return [
        Cluster(
            f"tide-{n}",
            f"tide-{n}",
            "proj-tide",
            location,
            "v6e",
            "bucket-tide",
            None,
            ClusterStatus.ACTIVE,
            "falcon-jobs",
            f"{location}-b",
        )
        for n, location in enumerate(CLUSTER_LOCATIONS[: len(sizes)], 1)
    ]


def emulator_config(clusters: list[Cluster]) -> dict[str, Any]:
    return {
        "projects": {
            "proj-tide": {
                "clusters": {c.name: {"location": c.location, "zones": [c.node_zone]} for c in clusters}
            }
        }
    }


def rules_for(index: int, period: int) -> list[dict[str, Any]]:
    """Object ``index``'s 10 rules: two frequent ones half a period apart (a third at the first's
    instants for every 4th object), the rest day-scale; zones rotate so that all five are used."""
    start = 0 if index % FLEET_EVERY == 0 else (index * 7) % period
    half = (start + period // 2) % period
    zone = ZONES[index % len(ZONES)]
    other = ZONES[(index + 2) % len(ZONES)]
    rules = [
        {"name": "peak", "cron": f"CRON_TZ={zone} {start}/{period} * * * * *", "replicas": 3 + index % 5},
        {"name": "trough", "cron": f"CRON_TZ={other} {half}/{period} * * * * *", "replicas": 1 + index % 3},
    ]
    if index % CONFLICT_EVERY == 1:
        third = ZONES[(index + 4) % len(ZONES)]
        cron = f"CRON_TZ={third} {start}/{period} * * * * *"
        rules.append({"name": "surge", "cron": cron, "replicas": 8 + index % 5})
    for k in range(RULES_PER_OBJECT - len(rules)):
        rare = RARE_RULES[(index + k) % len(RARE_RULES)]
        rules.append(
            {"name": f"day-{k}", "cron": f"CRON_TZ={ZONES[k % len(ZONES)]} {rare}", "replicas": 2 + k}
        )
    return rules


def manifest(index: int, period: int) -> dict[str, Any]:
    namespace = f"tide-{index % NAMESPACES}"
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"svc-{index % DEPLOYMENTS}"}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TidalScheduler",
        "metadata": {"name": f"tide-{index:04d}", "namespace": namespace},
        "spec": {
            "targetRef": {**target, "namespace": namespace},
            "triggers": {"times": {"rules": rules_for(index, period)}},
        },
    }


def deployment(namespace: str, name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": "w:1"}]},
            },
        },
    }


def install(api: k8s.ApiClient, count: int, period: int) -> None:
    """The CRD, the namespaces and their Deployments, then ``count`` objects (8 creates at once)."""
    crd = yaml.safe_load((ROOT / "infra/tidal-scheduler/crd.yaml").read_text())
    k8s.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    core, apps, objects = k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.CustomObjectsApi(api)
    for n in range(NAMESPACES):
        namespace = f"tide-{n}"
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
        for d in range(DEPLOYMENTS):
            apps.create_namespaced_deployment(namespace, deployment(namespace, f"svc-{d}"))  # type: ignore[arg-type]

    def create(index: int) -> None:
        body = manifest(index, period)
        objects.create_namespaced_custom_object(GROUP, VERSION, body["metadata"]["namespace"], PLURAL, body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))


def expected_fires(count: int, period: int, after: datetime, until: datetime) -> dict[str, set[datetime]]:
    """Per object key, every instant in (after, until] at which at least one of its rules fires."""
    fires: dict[str, set[datetime]] = {}
    for index in range(count):
        body = manifest(index, period)
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        instants: set[datetime] = set()
        for rule in body["spec"]["triggers"]["times"]["rules"]:
            schedule = parse_cron(rule["cron"])
            at = schedule.next_after(after)
            while at <= until:
                instants.add(at.astimezone(UTC))
                at = schedule.next_after(at)
        fires[key] = instants
    return fires


# --- the child processes ------------------------------------------------------------------------


def serve_emulator(config_path: Path, data_dir: Path, port: int) -> None:
    """Child: the emulator on ``port`` until SIGTERM (uvicorn at log level warning: an access log
    line per request would cost the emulator CPU that the measurement shares)."""
    from falcon_emulator.config import EmulatorConfig
    from falcon_emulator.server import EmulatorServer

    with EmulatorServer(EmulatorConfig.from_dict(json.loads(config_path.read_text())), data_dir, port=port):
        print("READY", flush=True)
        threading.Event().wait()


def run_controller(seconds: float, clusters: list[str]) -> None:
    """Child: the controller as the flow builds it, for ``seconds``; prints its own metrics as JSON."""
    from prometheus_client import REGISTRY

    from falcon.bootstrap import build_tidal_controller

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    controller, workers = build_tidal_controller(get_settings(), logging.getLogger("tidal"))
    print(f"RUNNING {time.time()}", flush=True)
    try:
        controller.run(seconds)
    finally:
        workers.close()
    lag = {
        str(bound): REGISTRY.get_sample_value("falcon_tidal_fire_lag_seconds_bucket", {"le": str(bound)})
        for bound in (0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
    }
    count = REGISTRY.get_sample_value("falcon_tidal_fire_lag_seconds_count") or 0.0
    total = REGISTRY.get_sample_value("falcon_tidal_fire_lag_seconds_sum") or 0.0
    fires = {
        name: REGISTRY.get_sample_value("falcon_tidal_fires_total", {"cluster": name}) for name in clusters
    }
    print("METRICS " + json.dumps({"lag_le": lag, "count": count, "sum": total, "fires": fires}), flush=True)


@dataclass
class Usage:
    cpu_seconds: float = 0.0
    peak_rss: int = 0
    wall_seconds: float = 0.0


class Child:
    """A child process of this benchmark (``--child``), its stdout lines, and psutil's view of it."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self.started = time.time()
        self.usage = Usage()
        self.lines: list[str] = []
        self._ps = psutil.Process(self.proc.pid)
        self._halt = threading.Event()
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._sample, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def _sample(self) -> None:
        while not self._halt.wait(0.5):
            try:
                self.usage.peak_rss = max(self.usage.peak_rss, self._ps.memory_info().rss)
                times = self._ps.cpu_times()
                self.usage.cpu_seconds = times.user + times.system
            except psutil.Error:
                return
            self.usage.wall_seconds = time.time() - self.started

    def wait_line(self, prefix: str, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = next((line for line in self.lines if line.startswith(prefix)), None)
            if found is not None:
                return found[len(prefix) :].strip()
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"child {self.proc.args!r} gave no {prefix!r} line; see {self._log.name}")

    def stop(self, wait: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._halt.set()
        for thread in self._threads:
            thread.join(5)
        self._log.close()


# --- the watcher ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    key: str  # cluster/namespace/name
    scheduled: datetime  # lastTriggerTime
    at: float  # time.time() when the watch delivered it


@dataclass
class Observations:
    first_status: dict[str, float] = field(default_factory=dict)  # key -> first status seen
    fires: list[Seen] = field(default_factory=list)
    last: dict[str, str] = field(default_factory=dict)  # key -> lastTriggerTime last seen
    relists: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, cluster: str, obj: dict[str, Any], at: float) -> None:
        metadata = obj.get("metadata") or {}
        key = f"{cluster}/{metadata.get('namespace')}/{metadata.get('name')}"
        status = obj.get("status") or {}
        with self.lock:
            if status and key not in self.first_status:
                self.first_status[key] = at
            trigger = status.get("lastTriggerTime")
            scheduled = parse_time(trigger)
            if scheduled is not None and trigger != self.last.get(key):
                self.last[key] = str(trigger)
                self.fires.append(Seen(key, scheduled, at))


class Watcher(threading.Thread):
    """This process's own list + watch of one cluster's TidalSchedulers."""

    def __init__(self, cluster: str, api: k8s.ApiClient, seen: Observations) -> None:
        super().__init__(daemon=True, name=f"watch-{cluster}")
        self.cluster, self.seen = cluster, seen
        self._objects = k8s.CustomObjectsApi(api)
        self._halt = threading.Event()
        self._watch: k8s_watch.Watch | None = None

    def run(self) -> None:
        while not self._halt.is_set():
            listed: dict[str, Any] = self._objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)  # type: ignore[assignment]
            now = time.time()
            for obj in listed["items"]:
                self.seen.note(self.cluster, obj, now)
            try:
                self._follow(listed["metadata"]["resourceVersion"])
            except Exception as error:  # 410 Gone, or a broken stream: list again, and say so
                if self._halt.is_set():
                    return
                self.seen.relists += 1
                log.warning("watch of %s: %s; listing again", self.cluster, error)

    def _follow(self, version: str) -> None:
        while not self._halt.is_set():
            self._watch = k8s_watch.Watch()  # type: ignore[no-untyped-call]
            stream = self._watch.stream(  # type: ignore[no-untyped-call]
                self._objects.list_cluster_custom_object,
                GROUP,
                VERSION,
                PLURAL,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,  # how long stop() may wait for the stream to end
                allow_watch_bookmarks=True,
            )
            for event in stream:
                obj = event["raw_object"]
                version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.seen.note(self.cluster, obj, time.time())

    def stop(self) -> None:
        self._halt.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]
        self.join(WATCH_SECONDS + 5)


# --- part 1 ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lag:
    cluster: str
    fleet: bool  # scheduled at second 0 of a half period, with every 10th object of its cluster
    seconds: float


@dataclass
class ControllerResult:
    sizes: list[int]
    seconds: float
    period: int
    setup_seconds: float = 0.0
    import_seconds: float = 0.0  # controller process start -> its loop starts
    ready_seconds: float = float("nan")  # controller process start -> every object has a status
    with_status: int = 0
    startup: list[Lag] = field(default_factory=list)
    steady: list[Lag] = field(default_factory=list)
    steady_expected: int = 0
    steady_missed: list[tuple[str, datetime]] = field(default_factory=list)
    controller: Usage = field(default_factory=Usage)
    emulator: Usage = field(default_factory=Usage)
    metrics: dict[str, Any] = field(default_factory=dict)
    relists: int = 0
    distinct: dict[str, int] = field(default_factory=dict)  # cluster -> distinct (object, fire) seen
    warnings: dict[str, tuple[int, str]] = field(default_factory=dict)  # controller log: event -> (n, first)


@contextmanager
def emulator_process(work: Path, clusters: list[Cluster]) -> Iterator[tuple[str, Child]]:
    config = work / "emulator.json"
    config.write_text(json.dumps(emulator_config(clusters)))
    port = free_port()
    args = [
        "--child",
        "emulator",
        "--config",
        str(config),
        "--data-dir",
        str(work / "emu"),
        "--port",
        str(port),
    ]
    child = Child(args, dict(os.environ), work / "emulator.log")
    try:
        child.wait_line("READY", 60)
        yield f"http://127.0.0.1:{port}", child
    finally:
        child.stop()


def run_controller_part(sizes: list[int], seconds: float, period: int, work: Path) -> ControllerResult:
    result = ControllerResult(sizes, seconds, period)
    clusters = cluster_rows(sizes)
    db_url = f"sqlite:///{work / 'falcon.db'}"
    upgrade(db_url)
    with session_scope(db_url) as session:
        for cluster in clusters:
            repo.add_cluster(session, cluster, utc_now())
    with emulator_process(work, clusters) as (url, emulator), ExitStack() as stack:
        falcon_env = {"FALCON_DATABASE_URL": db_url, "FALCON_EMULATOR_URL": url, "FALCON_HOME": str(work)}
        os.environ.update(falcon_env)
        get_settings.cache_clear()
        gateways = Gateways(get_settings())
        apis = {c.name: gateways.kubernetes_api(c) for c in clusters}
        began = time.monotonic()
        for cluster, count in zip(clusters, sizes, strict=True):
            install(apis[cluster.name], count, period)
        result.setup_seconds = time.monotonic() - began
        print(f"  {sum(sizes)} objects created in {result.setup_seconds:.0f} s", flush=True)

        seen = Observations()
        watchers = [Watcher(name, api, seen) for name, api in apis.items()]
        for watcher in watchers:
            watcher.start()
            stack.callback(watcher.stop)
        time.sleep(1.0)  # the watchers have listed: every object without status yet
        emulator_cpu = emulator.usage.cpu_seconds
        controller = Child(
            ["--child", "controller", "--seconds", str(seconds), "--clusters", ",".join(apis)],
            {**os.environ, **falcon_env},
            work / "controller.log",
        )
        running = float(controller.wait_line("RUNNING", 120))
        result.import_seconds = running - controller.started
        total = sum(sizes)
        deadline = controller.started + seconds
        while time.time() < deadline and controller.proc.poll() is None:
            with seen.lock:
                done = len(seen.first_status)
            if done == total and result.ready_seconds != result.ready_seconds:  # still NaN
                result.ready_seconds = max(seen.first_status.values()) - controller.started
            time.sleep(0.2)
        metrics = controller.wait_line("METRICS", 60)
        controller.stop()
        result.controller = controller.usage
        result.emulator = Usage(emulator.usage.cpu_seconds - emulator_cpu, emulator.usage.peak_rss, seconds)
        result.metrics = json.loads(metrics)
        result.warnings = logged_events((work / "controller.log").read_text(errors="replace").splitlines())
    stopped = running + seconds  # the controller's loop ends then
    result.relists = seen.relists
    result.distinct = dict(
        Counter(key.split("/")[0] for key, _ in {(f.key, f.scheduled) for f in seen.fires})
    )
    result.with_status = len(seen.first_status)
    judge(result, seen, (controller.started, running, stopped), period)
    return result


def logged_events(lines: list[str]) -> dict[str, tuple[int, str]]:
    """The controller's warnings by ``event=`` name: how many, and the first line of each."""
    found: dict[str, tuple[int, str]] = {}
    for line in lines:
        if "event=" in line:
            event = line.split("event=", 1)[1].split()[0]
            count, first = found.get(event, (0, line))
            found[event] = (count + 1, first)
    return found


def judge(
    result: ControllerResult, seen: Observations, times: tuple[float, float, float], period: int
) -> None:
    """Latencies of the fires scheduled after the controller's loop started, split at the moment
    every object had a status; and the steady-state fires the watch never showed. ``times``: the
    controller's process start, its loop's start and its loop's end."""
    process_started, loop_started, stopped = times
    ready = result.ready_seconds
    ready_at = process_started + ready if ready == ready else stopped  # NaN: never all
    for fire in seen.fires:
        scheduled = fire.scheduled.timestamp()
        if scheduled <= loop_started:
            continue  # a catch-up of a fire from before the loop ran: not a fire-to-status lag
        lag = Lag(fire.key.split("/")[0], fire.scheduled.second % (period // 2) == 0, fire.at - scheduled)
        (result.steady if scheduled > ready_at else result.startup).append(lag)
    window_end = stopped - 3.0  # a fire in the last seconds may still be on its way when we stop
    if ready_at >= window_end:
        return
    after = datetime.fromtimestamp(ready_at, UTC)
    until = datetime.fromtimestamp(window_end, UTC)
    shown = {(fire.key, fire.scheduled) for fire in seen.fires}
    for cluster_no, count in enumerate(result.sizes, 1):
        wanted = expected_fires(count, period, after, until)
        for key, instants in wanted.items():
            result.steady_expected += len(instants)
            keyed = f"tide-{cluster_no}/{key}"
            result.steady_missed += [(keyed, at) for at in sorted(instants) if (keyed, at) not in shown]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def latency_row(name: str, values: list[float], verdict: bool) -> str:
    if not values:
        return f"{name:<34}{0:>7}"
    p50, p95, p99 = (percentile(values, q) for q in (50, 95, 99))
    within = sum(1 for v in values if v <= TARGET_P99) / len(values)
    judged = ("OK" if p99 <= TARGET_P99 else "MISS") if verdict else ""
    spread = f"{p50:>8.3f}{p95:>8.3f}{p99:>8.3f}{max(values):>8.3f}"
    return f"{name:<34}{len(values):>7}{spread}{within:>8.1%}   {judged}"


def controller_report(r: ControllerResult) -> str:
    lines = [
        f"objects per cluster {','.join(map(str, r.sizes))} (x{RULES_PER_OBJECT} rules), each firing every "
        f"{r.period // 2} s, controller run {r.seconds:.0f} s; fires per second (steady): "
        f"{sum(r.sizes) / (r.period / 2):.0f}",
        "",
        f"{'fire -> status seen by a watch':<34}{'fires':>7}{'p50 s':>8}{'p95 s':>8}{'p99 s':>8}{'max s':>8}"
        f"{'<=1 s':>8}   goal p99 <= {TARGET_P99:.0f} s",
    ]
    groups: list[tuple[str, list[Lag]]] = [
        ("start-up (before all had status)", r.startup),
        ("steady state", r.steady),
        *(
            (f"  {name} ({size} objects)", [lag for lag in r.steady if lag.cluster == name])
            for name, size in zip((c.name for c in cluster_rows(r.sizes)), r.sizes, strict=True)
        ),
        (f"  fleet instants (:00 every {r.period // 2} s)", [lag for lag in r.steady if lag.fleet]),
        ("  other instants", [lag for lag in r.steady if not lag.fleet]),
    ]
    for name, lags in groups:
        lines.append(latency_row(name, [lag.seconds for lag in lags], verdict=name == "steady state"))
    lines += [
        "",
        f"steady-state fires expected {r.steady_expected}, never seen by the watch {len(r.steady_missed)}"
        + "".join(f"; {key} at {at:%H:%M:%S}" for key, at in r.steady_missed[:5]),
        f"objects with a status {r.with_status} / {sum(r.sizes)}; controller start -> all have status "
        f"{r.ready_seconds:.1f} s (of which process start + imports {r.import_seconds:.1f} s)",
        f"controller: CPU {r.controller.cpu_seconds:.1f} s over {r.controller.wall_seconds:.0f} s wall = "
        f"{r.controller.cpu_seconds / max(r.controller.wall_seconds, 1e-9):.2f} CPU s per wall s, "
        f"peak RSS {r.controller.peak_rss / 2**20:.0f} MiB",
        f"emulator (4 clusters, one process): CPU {r.emulator.cpu_seconds:.1f} s over the run = "
        f"{r.emulator.cpu_seconds / max(r.emulator.wall_seconds, 1e-9):.2f} CPU s per wall s, "
        f"peak RSS {r.emulator.peak_rss / 2**20:.0f} MiB",
    ]
    count = r.metrics.get("count") or 0.0
    if count:
        shares = ", ".join(
            f"<={bound} s {float(n or 0) / count:.1%}" for bound, n in r.metrics["lag_le"].items()
        )
        lines.append(
            f"controller's own fire-lag histogram (scheduled -> patched, catch-ups included): "
            f"{count:.0f} fires, mean {r.metrics['sum'] / count:.3f} s; {shares}"
        )
    applied = r.metrics.get("fires") or {}
    lines.append(
        "fires applied by the controller (its counter) / distinct fires seen by the watch, per cluster: "
        + ", ".join(f"{name} {applied[name] or 0:.0f}/{r.distinct.get(name, 0)}" for name in applied)
    )
    lines.append(
        f"objects created in {r.setup_seconds:.0f} s; the bench's watches listed again {r.relists} times"
    )
    lines += [
        f"controller logged {n}x {event}, the first: {first}" for event, (n, first) in r.warnings.items()
    ]
    return "\n".join(lines)


# --- part 2 -----------------------------------------------------------------------------------------

WARM_TOPOLOGY = "2x4"  # 2 nodes of ct6e-standard-4t
WARM_ZONE = ZoneInfo("Asia/Shanghai")


@dataclass(frozen=True)
class WarmPlan:
    tasks: int
    seeds: list[int]
    pools: int  # the warm rule's target per queue, at the morning fire
    arrive_after: float  # real minutes after the fire: the first task may come then
    arrive_over: float  # real minutes: arrivals are uniform over this window
    run_minutes: tuple[float, float]  # real minutes a task's containers run, uniform
    evening_hours: float  # real hours from the morning fire to the evening fire (target 0)
    compression: float
    sample: float


def describe(plan: WarmPlan) -> str:
    return (
        f"part 2: {plan.tasks} tasks of v6e {WARM_TOPOLOGY} arriving {plan.arrive_after:g}-"
        f"{plan.arrive_after + plan.arrive_over:g} min after the morning fire, each running "
        f"{plan.run_minutes[0]:g}-{plan.run_minutes[1]:g} min, seeds {plan.seeds}; warm rule: "
        f"{plan.pools} pools per queue (both clusters) at the fire, 0 at the evening fire "
        f"{plan.evening_hours:g} h later; 1 emulated s = {plan.compression:g} real s (pool creation 5 min)"
    )


def warm_tasks(plan: WarmPlan, seed: int) -> list[SyntheticTask]:
    """The morning burst: ``plan.tasks`` tasks of one topology, arriving (emulated seconds after
    the replay starts, i.e. after the fire) over the window, from three actors."""
    rng = random.Random(seed)
    per_minute = 60 / plan.compression
    start, end = plan.arrive_after * per_minute, (plan.arrive_after + plan.arrive_over) * per_minute
    arrivals = sorted(rng.uniform(start, end) for _ in range(plan.tasks))
    lo, hi = (m * per_minute for m in plan.run_minutes)
    return [
        SyntheticTask(
            f"m{seed}-{i:02d}", f"actor-{i % 3}", WARM_TOPOLOGY, round(at, 3), round(rng.uniform(lo, hi), 2)
        )
        for i, at in enumerate(arrivals)
    ]


def daily_at(instant: datetime) -> str:
    """A daily rule firing at ``instant``'s second, written in the zone users write it in."""
    local = instant.astimezone(WARM_ZONE)
    return f"CRON_TZ={WARM_ZONE.key} {local.second} {local.minute} {local.hour} * * *"


def add_warm_rules(db_url: str, arm: str, plan: WarmPlan) -> None:
    """Before the arm's replay: the morning rule (``plan.pools`` per queue of both clusters) firing
    a second from now, so that its target stands when the dispatcher starts, and the evening rule
    (0 pools) ``plan.evening_hours`` of compressed time later."""
    from bench_pool_economics import clusters

    upgrade(db_url)
    store = SqlTaskStore(db_url)
    now = utc_now()
    morning = now.replace(microsecond=0) + timedelta(seconds=2)
    evening = morning + timedelta(seconds=plan.evening_hours * 3600 / plan.compression)
    for cluster in clusters(arm):
        queue = QueueKey(cluster.id, WARM_TOPOLOGY)
        key = cluster.id.rsplit("-", 1)[-1]
        store.add_warm_rule(WarmRule(f"morning-{key}", queue, daily_at(morning), plan.pools, now))
        store.add_warm_rule(WarmRule(f"evening-{key}", queue, daily_at(evening), 0, now))
    time.sleep(max(0.0, (morning - utc_now()).total_seconds() + 0.1))


def waits_by_pool(db_url: str) -> dict[str, list[float]]:
    """Submit -> Job submitted (emulated seconds) of each task, by the pool it ran on: a warm pool,
    one another task created (kept for it), or its own. The replay times Running per task but
    not which pool it had; the Job is submitted once the pool is ready, pods start 0.3 s later."""
    waits: dict[str, list[float]] = {"warm": [], "kept": [], "own": []}
    with session_scope(db_url) as session:
        for task in repo.list_tasks(session, 10_000):
            if task.dispatched_at is None or task.cluster_id is None or task.node_pool_name is None:
                continue
            if repo.warm_origin(session, task.cluster_id, task.node_pool_name) is not None:
                kind = "warm"
            elif task.node_pool_name != node_pool_name_for(task.id, WARM_TOPOLOGY):
                kind = "kept"
            else:
                kind = "own"
            waits[kind].append((task.dispatched_at - task.created_at).total_seconds())
    return waits


@dataclass(frozen=True)
class WarmRun:
    arm: str  # no-rule / warm-rule
    seed: int
    result: ArmResult
    waits: dict[str, list[float]]  # waits_by_pool


ARMS = ("no-rule", "warm-rule")


def run_warm_part(plan: WarmPlan) -> list[WarmRun]:
    """Each seed's burst replayed twice, without and with the warm rules, under one Prefect API."""
    from bench_pool_economics import ErrorLog, arms, replay
    from prefect.testing.utilities import prefect_test_harness

    falcon_arm = next(a for a in arms(plan.compression) if a.name == "falcon")
    runs: list[WarmRun] = []
    errors = ErrorLog()
    prefect_logger = logging.getLogger("prefect")
    with prefect_test_harness(server_startup_timeout=120), tempfile.TemporaryDirectory() as tmp:
        prefect_logger.addHandler(errors)
        prefect_logger.propagate = False  # failed runs are summarised in the report, not dumped
        for seed in plan.seeds:
            tasks = warm_tasks(plan, seed)
            for label in ARMS:
                arm = dataclasses.replace(falcon_arm, name=f"{label}-s{seed}", label=label)
                work = Path(tmp) / arm.name
                work.mkdir()
                db_url = f"sqlite:///{work / 'falcon.db'}"
                if label == "warm-rule":
                    add_warm_rules(db_url, arm.name, plan)
                print(f"  seed {seed}, {label} ...", flush=True)
                result = replay(arm, tasks, plan.sample, work)
                result.errors = errors.take()
                print(f"    done in {result.wall_seconds:.0f} s: {dict(result.statuses)}", flush=True)
                runs.append(WarmRun(label, seed, result, waits_by_pool(db_url)))
    return runs


def rule_effect(plan: WarmPlan, runs: list[WarmRun]) -> str:
    """The rule's gain and cost over all seeds: submit -> Running, and the extra idle node-hours."""
    waits = {arm: [w for run in runs if run.arm == arm for w in run.result.to_running] for arm in ARMS}
    idle = {arm: sum(run.result.node_seconds.idle for run in runs if run.arm == arm) for arm in ARMS}
    if not all(waits.values()):
        return "the warm rule: no task reached Running in one of the arms"
    p50, p95 = ([percentile(waits[arm], q) * plan.compression / 60 for arm in ARMS] for q in (50, 95))
    extra = (idle["warm-rule"] - idle["no-rule"]) * plan.compression / 3600 / len(plan.seeds)
    return (
        f"the warm rule: submit -> Running p50 {p50[0]:.1f} -> {p50[1]:.1f} min, p95 {p95[0]:.1f} -> "
        f"{p95[1]:.1f} min; it costs {extra:+.1f} idle node-hours per morning (mean of "
        f"{len(plan.seeds)} seeds, fire to evening {plan.evening_hours:g} h)"
    )


def warm_report(plan: WarmPlan, runs: list[WarmRun]) -> str:
    def minutes(seconds: float) -> float:
        return seconds * plan.compression / 60

    def hours(seconds: float) -> float:
        return seconds * plan.compression / 3600

    def at(values: list[float], q: float) -> str:
        return f"{minutes(percentile(values, q)):>8.1f}" if values else f"{'-':>8}"

    lines = [
        f"{'arm':<10}{'seed':>5}{'tasks':>6}{'p50':>8}{'p95':>8}   {'on warm':>7}{'p50':>8}   {'own':>4}"
        f"{'p50':>8}{'pools':>7}{'idle nh':>9}{'kept nh':>9}{'prov nh':>9}{'busy nh':>9}",
        f"{'':<21}{'submit -> Running':>16}   {'submit -> Job submitted, by pool':<33}",
    ]
    for label in ARMS:
        mine = [run for run in runs if run.arm == label]
        for seed_text, group in [*((str(run.seed), [run]) for run in mine), ("all", mine)]:
            waits = [w for run in group for w in run.result.to_running]
            on_warm = [w for run in group for w in run.waits["warm"]]
            own = [w for run in group for w in run.waits["own"]]
            ns = [run.result.node_seconds for run in group]
            succeeded = sum(run.result.statuses["Succeeded"] for run in group)
            lines.append(
                f"{label:<10}{seed_text:>5}{succeeded:>6}{at(waits, 50)}{at(waits, 95)}"
                f"   {len(on_warm):>7}{at(on_warm, 50)}   {len(own):>4}{at(own, 50)}"
                f"{sum(r.result.pools_created for r in group):>7}"
                f"{hours(sum(n.idle for n in ns)):>9.1f}{hours(sum(n.kept for n in ns)):>9.1f}"
                f"{hours(sum(n.provisioning for n in ns)):>9.1f}{hours(sum(n.busy for n in ns)):>9.1f}"
            )
    lines += ["", rule_effect(plan, runs)]
    lines += [
        "",
        "tasks: Succeeded; times in real minutes (p50/p95); on warm / own: tasks that ran on a warm pool /",
        "on a pool created for them (the rest ran on a pool kept from another task); pools: node pools",
        "created; nh: real node-hours idle (all), kept idle by Falcon (warm or kept pools awaiting a",
        "task), provisioning, busy. Falcon's own steps (tick, flow start, pod start) take about a wall",
        f"second, i.e. ~{plan.compression / 60:.1f} min in these compressed terms.",
    ]
    for run in runs:
        notes = [
            *run.result.failures,
            *(f"logged {n}x {kind}" for kind, n in sorted(run.result.errors.items())),
        ]
        lines += [f"{run.arm} seed {run.seed}: {note}" for note in notes]
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--part", choices=["controller", "warm", "all"], default="all")
    parser.add_argument("--seconds", type=float, default=120.0, help="controller run (default %(default)s)")
    parser.add_argument(
        "--objects", default="1000,100,100,100", help="TidalSchedulers per cluster (4 at most)"
    )
    parser.add_argument(
        "--period",
        type=int,
        choices=[10, 12, 20, 30, 60],
        default=60,
        help="each object fires every period/2 s",
    )
    parser.add_argument("--tasks", type=int, default=8, help="part warm: tasks in the morning burst")
    parser.add_argument("--seeds", default="1,2,3", help="part warm: one replay per seed and arm")
    parser.add_argument("--warm-pools", type=int, default=2, help="part warm: the rule's pools per queue")
    parser.add_argument("--arrive-after", type=float, default=6.0, help="real minutes after the fire")
    parser.add_argument("--arrive-over", type=float, default=30.0, help="real minutes of arrivals")
    parser.add_argument("--evening-hours", type=float, default=2.0, help="real hours to the 0-pool fire")
    parser.add_argument("--compression", type=float, default=150.0, help="part warm: real s per emulated s")
    parser.add_argument("--child", choices=["emulator", "controller"], help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--clusters", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "emulator":
        serve_emulator(args.config, args.data_dir, args.port)
        return 0
    if args.child == "controller":
        run_controller(args.seconds, args.clusters.split(","))
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sizes = [int(n) for n in args.objects.split(",")][: len(CLUSTER_LOCATIONS)]
    if args.part in ("controller", "all"):
        print(f"part 1: the controller over {len(sizes)} clusters", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-tidal-") as tmp:
            result = run_controller_part(sizes, args.seconds, args.period, Path(tmp))
        print()
        print(controller_report(result), flush=True)
    if args.part in ("warm", "all"):
        plan = WarmPlan(
            args.tasks,
            [int(seed) for seed in args.seeds.split(",")],
            args.warm_pools,
            args.arrive_after,
            args.arrive_over,
            (20.0, 60.0),
            args.evening_hours,
            args.compression,
            0.2,
        )
        print(describe(plan), flush=True)
        runs = run_warm_part(plan)
        print()
        print(warm_report(plan, runs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
