"""The production side of issue 11's metrics: PrometheusTaskEvents (one log line per move, the
counters and histograms), the view gauges, the API call counts of the error mapping.

We test: a move writes one key=value line and counts its transition; latencies run from the
row's insert, the run time from dispatch, the duration to the terminal status; the time in a
stage is observed only when this process saw it begin; an abort leaves an audit line; clusters
are labelled by name (with project and location when two share it); the view's gauges are set
and the series of what it no longer has are removed; each API call is counted by outcome and
each error by kind and retryability. The collectors are process-wide, so each test labels its
own cluster and reads differences.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY, CollectorRegistry, Histogram
from tests.unit.fakes import T0, cluster, idle_pool

from falcon.adapters import metrics
from falcon.adapters.audit import cluster_registered
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.store import SqlTaskStore
from falcon.adapters.errors import google_errors, kubernetes_errors
from falcon.adapters.task_events import PrometheusTaskEvents
from falcon.domain.errors import FalconError, NotFoundError, TemporaryError
from falcon.domain.events import ResourceView, Stage, TaskMove
from falcon.domain.lifecycle import Outcome, PoolState
from falcon.domain.model import Cluster, ProvisioningMode, QueueKey, queue_label
from falcon.domain.scheduling import ReservationCapacity
from falcon.domain.status import Reason, Status


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def edge(request: pytest.FixtureRequest) -> Cluster:
    """A cluster named for the test, so that its series are the test's own."""
    return cluster(f"id-{request.node.name}", name=f"edge-{request.node.name}"[:60])


@pytest.fixture
def events(edge: Cluster) -> PrometheusTaskEvents:
    return PrometheusTaskEvents(lambda: [edge])


def move(edge: Cluster, source: Stage, target: Stage, seconds: float, **fields: object) -> TaskMove:
    queue = QueueKey(edge.id, "2x4")
    return TaskMove("t1", queue, source, target, T0 + timedelta(seconds=seconds), T0, **fields)  # type: ignore[arg-type]


def test_a_move_is_one_log_line_and_one_transition(
    events: PrometheusTaskEvents, edge: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="falcon.events"):
        events.moved(move(edge, Stage.WAITING, Stage.ACQUIRING, 5))
    assert [r.getMessage() for r in caplog.records if r.name == "falcon.events"] == [
        f"event=task_moved task_id=t1 cluster={edge.name} queue={queue_label(edge, '2x4')} from=waiting"
        " to=acquiring reason=Provisioning"
    ]
    labels = {"cluster": edge.name, "topology": "2x4", "from": "waiting", "to": "acquiring"}
    assert sample("falcon_task_transitions_total", **labels) == 1


def test_latencies_run_from_the_rows_insert_to_each_milestone(
    events: PrometheusTaskEvents, edge: Cluster
) -> None:
    events.moved(move(edge, Stage.NEW, Stage.WAITING, 0.4))
    events.moved(move(edge, Stage.WAITING, Stage.ACQUIRING, 3))
    events.moved(move(edge, Stage.ACQUIRING, Stage.DISPATCHED, 200))
    events.moved(move(edge, Stage.DISPATCHED, Stage.RUNNING, 260))
    latency = {"cluster": edge.name, "topology": "2x4"}
    assert sample("falcon_task_latency_seconds_sum", **latency, milestone="waiting") == 0.4
    assert sample("falcon_task_latency_seconds_sum", **latency, milestone="dispatched") == 200
    assert sample("falcon_task_latency_seconds_sum", **latency, milestone="running") == 260
    assert sample("falcon_task_latency_seconds_count", **latency, milestone="acquiring") == 0
    # each stage the process saw begin: waiting 2.6 s, acquiring 197 s, dispatched 60 s
    assert sample("falcon_task_phase_seconds_sum", **latency, phase="waiting") == pytest.approx(2.6)
    assert sample("falcon_task_phase_seconds_sum", **latency, phase="acquiring") == 197
    assert sample("falcon_task_phase_seconds_sum", **latency, phase="dispatched") == 60


def test_a_stage_entered_before_this_process_started_is_not_timed(
    events: PrometheusTaskEvents, edge: Cluster
) -> None:
    events.moved(move(edge, Stage.RUNNING, Stage.RELEASING, 900, outcome=Outcome(Status.SUCCEEDED)))
    assert sample("falcon_task_phase_seconds_count", cluster=edge.name, topology="2x4", phase="running") == 0


def test_an_end_counts_its_outcome_run_time_and_duration(events: PrometheusTaskEvents, edge: Cluster) -> None:
    failed = Outcome(Status.FAILED, Reason.JOB_FAILED, "exit 1")
    events.moved(
        move(
            edge,
            Stage.RUNNING,
            Stage.RELEASING,
            700,
            dispatched_at=T0 + timedelta(seconds=100),
            outcome=failed,
        )
    )
    events.moved(move(edge, Stage.RELEASING, Stage.DONE, 730, outcome=failed))
    labels = {"cluster": edge.name, "topology": "2x4", "status": "Failed"}
    assert sample("falcon_task_outcomes_total", **labels, reason="JobFailed") == 1
    assert sample("falcon_task_run_seconds_sum", **labels) == 600
    assert sample("falcon_task_duration_seconds_sum", **labels) == 730


def test_an_abort_leaves_an_audit_line(
    events: PrometheusTaskEvents, edge: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="falcon"):
        events.moved(move(edge, Stage.WAITING, Stage.DONE, 9, outcome=Outcome(Status.ABORTED)))
    assert f"event=audit action=task_aborted task_id=t1 cluster={edge.name} stage=waiting" in [
        r.getMessage() for r in caplog.records if r.name == "falcon.audit"
    ]
    assert (
        sample("falcon_task_outcomes_total", cluster=edge.name, topology="2x4", status="Aborted", reason="")
        == 1
    )


def test_a_deferred_pick_is_one_log_line_and_counted(
    events: PrometheusTaskEvents, edge: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    queue = QueueKey(edge.id, "2x4")
    with caplog.at_level(logging.INFO, logger="falcon.events"):
        events.pick_deferred(queue, "Prefect API busy: 503")
        events.pick_deferred(queue, "Prefect API busy: 503")
    assert [r.getMessage() for r in caplog.records if r.name == "falcon.events"] == 2 * [
        f"event=pick_deferred cluster={edge.name} queue={queue_label(edge, '2x4')}"
        " error='Prefect API busy: 503'"
    ]
    assert sample("falcon_picks_deferred_total", cluster=edge.name, topology="2x4") == 2


def test_intakes_failures_count_without_a_queue() -> None:
    events = PrometheusTaskEvents(list)
    before = sample(
        "falcon_task_outcomes_total", cluster="", topology="", status="Failed", reason="InvalidSpec"
    )
    ended = Outcome(Status.FAILED, Reason.INVALID_SPEC, "no command")
    events.moved(TaskMove("bad", None, Stage.NEW, Stage.DONE, T0, T0, outcome=ended))
    after = sample(
        "falcon_task_outcomes_total", cluster="", topology="", status="Failed", reason="InvalidSpec"
    )
    assert after - before == 1


def test_clusters_sharing_a_name_are_told_apart_by_project_and_location() -> None:
    one = cluster("a", name="shared")
    other = replace(cluster("b", name="shared"), project="other")
    labels = metrics.ClusterLabels(lambda: [one, other, cluster("c", name="alone")])
    assert (labels("a"), labels("b"), labels("c")) == (
        "shared@proj:us-east5-b",
        "shared@other:us-east5-b",
        "alone",
    )
    assert labels("unknown-id") == "unknown-id"


def test_pool_creations_reuses_and_orphans_are_counted(
    events: PrometheusTaskEvents, edge: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    queue = QueueKey(edge.id, "2x4")
    events.pool_created(queue, ProvisioningMode.FLEX_START, fallback=True)
    events.pool_created(queue, ProvisioningMode.RESERVATION, fallback=False)
    events.pool_reused(queue, "hand_over")
    with caplog.at_level(logging.INFO, logger="falcon"):
        events.orphans_swept(edge.id, "node_pool", ["falcon-x"])
        events.orphans_swept(edge.id, "job", [])
    on = {"cluster": edge.name, "topology": "2x4"}
    assert sample("falcon_node_pool_creations_total", **on, decision="fallback") == 1
    assert sample("falcon_node_pool_creations_total", **on, decision="reservation") == 1
    assert sample("falcon_node_pool_reuses_total", **on, how="hand_over") == 1
    assert sample("falcon_orphans_found_total", cluster=edge.name, kind="node_pool") == 1
    assert REGISTRY.get_sample_value("falcon_orphans_found_total", {"cluster": edge.name, "kind": "job"}) == 0
    audit = [r.getMessage() for r in caplog.records if r.name == "falcon.audit"]
    assert audit == [f"event=audit action=orphan_deleted cluster={edge.name} kind=node_pool name=falcon-x"]


# -- the view's gauges ---------------------------------------------------------------------------


def view(edge: Cluster, **fields: object) -> ResourceView:
    defaults: dict[str, object] = {
        "clusters": [edge],
        "waiting": {},
        "acquiring": frozenset(),
        "running_jobs": {},
        "reservations": {},
        "pools": [],
    }
    return ResourceView(**{**defaults, **fields})  # type: ignore[arg-type]


def test_the_view_sets_every_gauge(edge: Cluster) -> None:
    queue = QueueKey(edge.id, "2x4")
    kept, warm = idle_pool("falcon-kept", "2x4", edge.id), idle_pool("falcon-warm", "2x4", edge.id)
    creating = replace(kept, name="falcon-new", state=PoolState.CREATING, mode=ProvisioningMode.RESERVATION)
    metrics.record_view(
        view(
            edge,
            waiting={queue: 3},
            acquiring=frozenset({queue}),
            running_jobs={edge.id: 2},
            reservations={edge.id: ReservationCapacity("res-a", 16, 12, "READY", "ct6e-standard-4t")},
            pools=[kept, warm, creating],
            warm_pools=frozenset({(edge.id, "falcon-warm")}),
        )
    )
    on = {"cluster": edge.name, "topology": "2x4"}
    assert sample("falcon_queue_waiting_tasks", **on) == 3
    assert sample("falcon_queue_acquiring", **on) == 1
    assert sample("falcon_cluster_running_jobs", cluster=edge.name) == 2
    assert sample("falcon_reservation_free_nodes", cluster=edge.name, reservation="res-a") == 4
    shown = [("flex_start", "kept"), ("flex_start", "warm"), ("reservation", "creating")]
    pools = {state: sample("falcon_node_pools", **on, mode=mode, state=state) for mode, state in shown}
    assert pools == {"kept": 1, "warm": 1, "creating": 1}
    assert (
        REGISTRY.get_sample_value(
            "falcon_task_transitions_total", {**on, "from": "waiting", "to": "acquiring"}
        )
        == 0
    )


def test_what_the_view_no_longer_has_leaves_the_gauges(edge: Cluster) -> None:
    queue = QueueKey(edge.id, "2x4")
    metrics.record_view(view(edge, waiting={queue: 1}, pools=[idle_pool("falcon-kept", "2x4", edge.id)]))
    metrics.record_view(view(edge, acquiring=frozenset({queue})))
    on = {"cluster": edge.name, "topology": "2x4"}
    assert sample("falcon_queue_waiting_tasks", **on) == 0
    assert sample("falcon_queue_acquiring", **on) == 1
    assert (
        REGISTRY.get_sample_value("falcon_node_pools", {**on, "mode": "flex_start", "state": "kept"}) is None
    )
    metrics.record_view(view(edge))
    assert REGISTRY.get_sample_value("falcon_queue_waiting_tasks", on) is None
    assert REGISTRY.get_sample_value("falcon_cluster_running_jobs", {"cluster": edge.name}) == 0


# -- API calls -----------------------------------------------------------------------------------


def google_error(code: int, message: str, status: str) -> gexc.GoogleAPICallError:
    return gexc.from_http_status(code, message, response=None, errors=[{"status": status}])


def call_raising(context: Iterator[None] | object, raised: BaseException | None) -> FalconError | None:
    try:
        with context:  # type: ignore[attr-defined]
            if raised is not None:
                raise raised
    except FalconError as exc:
        return exc
    return None


@pytest.mark.parametrize(
    ("raised", "outcome", "kind", "retryable"),
    [
        (None, "ok", None, None),
        (gexc.NotFound("gone"), "not_found", "404", "false"),
        (
            google_error(429, "Rate limit exceeded per minute", "RESOURCE_EXHAUSTED"),
            "retryable",
            "429",
            "true",
        ),
        (google_error(429, "Quota 'TPUS' exceeded", "RESOURCE_EXHAUSTED"), "final", "429", "false"),
        (TimeoutError("read timed out"), "retryable", "timeout", "true"),
    ],
)
def test_a_google_call_is_counted_by_outcome_and_its_error_by_kind(
    request: pytest.FixtureRequest,
    raised: BaseException | None,
    outcome: str,
    kind: str | None,
    retryable: str | None,
) -> None:
    call = request.node.name[-30:]
    error = call_raising(google_errors("get node pool p", "gke", call), raised)
    assert (error is None) is (raised is None)
    assert sample("falcon_api_calls_total", api="gke", call=call, outcome=outcome) == 1
    assert sample("falcon_api_call_seconds_count", api="gke", call=call) == 1
    if kind is not None and retryable is not None:
        assert sample("falcon_api_errors_total", api="gke", call=call, kind=kind, retryable=retryable) == 1
        assert isinstance(error, TemporaryError) is (retryable == "true")


@pytest.mark.parametrize(
    ("raised", "kind", "expected"),
    [
        (ApiException(status=503, reason="Service Unavailable"), "503", TemporaryError),
        (ApiException(status=404, reason="Not Found"), "404", NotFoundError),
        (ConnectionResetError("reset"), "connection", TemporaryError),
    ],
)
def test_a_kubernetes_call_is_counted_under_its_name(
    request: pytest.FixtureRequest, raised: BaseException, kind: str, expected: type[FalconError]
) -> None:
    call = request.node.name[-30:]
    assert type(call_raising(kubernetes_errors("get Job j", call), raised)) is expected
    assert (
        sum(
            sample("falcon_api_errors_total", api="kubernetes", call=call, kind=kind, retryable=r)
            for r in ("true", "false")
        )
        == 1
    )


def test_a_call_named_by_nobody_is_not_counted() -> None:
    before = sum(s.value for m in REGISTRY.collect() if m.name == "falcon_api_calls" for s in m.samples)
    call_raising(kubernetes_errors("watch TidalSchedulers"), None)
    after = sum(s.value for m in REGISTRY.collect() if m.name == "falcon_api_calls" for s in m.samples)
    assert after == before


def test_a_cluster_registered_leaves_an_audit_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="falcon.audit"):
        cluster_registered(cluster("c9", name="edge-z", reservation="res-a"))
    assert [r.getMessage() for r in caplog.records if r.name == "falcon.audit"] == [
        "event=audit action=cluster_registered cluster_id=c9 cluster=edge-z project=proj location=us-east5-b"
        " zone=- tpu_type=v6e reservation=res-a status=active"
    ]


def test_a_rounds_steps_are_observed_by_loop_and_step() -> None:
    def count(step: str) -> float:
        labels = {"loop": "reconcile", "step": step}
        return REGISTRY.get_sample_value("falcon_dispatcher_step_seconds_count", labels) or 0.0

    before = count("follow"), count("release")
    metrics.observe_steps("reconcile", {"follow": 0.12, "release": 0.4})

    assert (count("follow"), count("release")) == (before[0] + 1, before[1] + 1)


def test_a_tick_is_split_into_prefect_calls_database_transactions_and_its_threads_cpu(
    tmp_path: Path,
) -> None:
    """A tick that waits 0.2 s in a Prefect call, reads the task store, sleeps 0.1 s and computes
    briefly: the Prefect part holds the call; Falcon's part the rest, of which the database part
    is the store's transaction (not the sleep) and the CPU part only the computing."""
    url = f"sqlite:///{tmp_path / 'falcon.db'}"
    upgrade(url)
    store = SqlTaskStore(url)
    store.clusters()  # the first query's one-off cost (imports, statement compiling) is CPU of its own
    registry = CollectorRegistry()
    histogram = Histogram("tick_split_seconds", "a test tick", ["part"], registry=registry)
    waited_in_prefect = metrics.prefect_call(lambda: time.sleep(0.2))

    def tick() -> int:
        waited_in_prefect()
        assert store.clusters() == []
        time.sleep(0.1)
        return sum(range(200_000))

    assert metrics.timed_tick(tick, histogram)() == sum(range(200_000))
    parts = {
        part: registry.get_sample_value("tick_split_seconds_sum", {"part": part}) or 0.0
        for part in ("total", "prefect", "falcon", "database", "cpu", "runqueue")
    }
    assert parts["prefect"] >= 0.2
    assert parts["falcon"] == pytest.approx(parts["total"] - parts["prefect"])
    assert 0.0 < parts["database"] <= parts["falcon"] - 0.1
    assert 0.0 < parts["cpu"] < 0.1  # the sleeps are wall time, not the thread's CPU
    assert 0.0 <= parts["runqueue"] <= parts["total"] - parts["cpu"] + 0.005  # waiting for a core is not CPU


def test_the_wait_for_a_core_is_read_from_linux_schedstat(tmp_path: Path) -> None:
    """schedstat: time on a CPU, time waiting on a run queue (both ns), timeslices run."""
    schedstat = tmp_path / "schedstat"
    schedstat.write_text("863683 250000000 12\n")
    assert metrics.runqueue_seconds(schedstat) == pytest.approx(0.25)
    schedstat.write_text("")
    assert metrics.runqueue_seconds(schedstat) == 0.0
    assert metrics.runqueue_seconds(tmp_path / "missing") == 0.0


def test_a_garbage_collection_during_a_tick_is_counted_in_its_gc_part() -> None:
    """A full collection over 50 000 cycles inside a tick: the tick's gc part holds its pause (no
    more than the tick took), and the generation-2 histogram counts it (and any the allocations set
    off on their own)."""
    registry = CollectorRegistry()
    histogram = Histogram("tick_gc_seconds", "a test tick", ["part"], registry=registry)

    def collections() -> float:
        return REGISTRY.get_sample_value("falcon_gc_pause_seconds_count", {"generation": "2"}) or 0.0

    def tick() -> None:
        cycles: list[list[object]] = [[] for _ in range(50_000)]
        for cycle in cycles:
            cycle.append(cycle)
        del cycles
        gc.collect()

    metrics.GC_PAUSES.install()
    metrics.GC_PAUSES.install()  # once, however often
    before = collections()
    try:
        metrics.timed_tick(tick, histogram)()
    finally:
        gc.callbacks.remove(metrics.GC_PAUSES)
    paused = registry.get_sample_value("tick_gc_seconds_sum", {"part": "gc"}) or 0.0
    total = registry.get_sample_value("tick_gc_seconds_sum", {"part": "total"}) or 0.0
    assert 0.0 < paused <= total
    assert collections() >= before + 1
    assert metrics.GC_PAUSES not in gc.callbacks
