"""A reconcile round's independent pieces (each cluster's Jobs) run at once on the dispatcher's
round threads, in the round's context, and are reported in order; the offered tasks' releases
run at once beside it, in its context too; orphan sweeps and the view are housekeeping's, not the
round's."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from flows.dispatcher import housekeeping_period
from tests.unit.fakes import (
    cluster,
    clusters_of,
    events_of,
    idle_pool,
    k8s_of,
    make_services,
    make_settings,
    queued,
    running,
)

from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.model import k8s_job_name_for
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher, TickReport

ROUND_CONTEXT: contextvars.ContextVar[str] = contextvars.ContextVar("round_context", default="none")


def _two_clusters_whose_jobs_ended(waiting: bool) -> Services:
    """A running task on each of c1 and c2 whose Job completed; with ``waiting``, a task waits in
    each queue, so each ended task's pool is kept for it and the task is offered."""
    svc = make_services()
    for cluster_id in ("c1", "c2"):
        svc.store.add_cluster(cluster(cluster_id))  # type: ignore[attr-defined]
    for n, cluster_id in enumerate(("c1", "c2"), start=1):
        running(svc, f"t{n}", cluster_id=cluster_id)
        svc.jobs(clusters_of(svc)[cluster_id]).job(k8s_job_name_for(f"t{n}")).script.complete = True  # type: ignore[attr-defined]
        if waiting:
            queued(svc, f"w{n}", cluster_id=cluster_id)
    return svc


def _meet_in(fake: object, method: str, barrier: threading.Barrier, seen: list[str]) -> None:
    """Make the fake's ``method`` wait until every cluster's call is under way: it passes only when
    the calls run at once (a barrier that times out breaks, and the round fails)."""
    call: Callable[..., Any] = getattr(fake, method)

    def met(*args: Any, **kwargs: Any) -> Any:
        seen.append(ROUND_CONTEXT.get())
        barrier.wait()
        return call(*args, **kwargs)

    setattr(fake, method, met)


def _round_meeting_in(method: str, waiting: bool) -> tuple[Services, TickReport, list[str]]:
    """One round of the Dispatcher over two clusters whose Jobs ended, each cluster's ``method``
    passing only once both run at once; the context each call saw."""
    svc = _two_clusters_whose_jobs_ended(waiting)
    barrier, seen = threading.Barrier(2, timeout=5), []
    for c in clusters_of(svc).values():
        _meet_in(svc.jobs(c), method, barrier, seen)
    dispatcher, token = Dispatcher(svc), ROUND_CONTEXT.set("the round's")
    try:
        return svc, dispatcher.reconcile(), seen
    finally:
        dispatcher.close()
        ROUND_CONTEXT.reset(token)


def test_the_round_follows_its_clusters_at_once_in_its_context_and_reports_them_in_order() -> None:
    _, report, seen = _round_meeting_in("list_jobs", waiting=False)
    assert report.ended == ["t1", "t2"]
    assert seen == ["the round's", "the round's"]


def test_the_round_releases_the_tasks_whose_pool_it_kept_at_once_beside_it_in_its_context() -> None:
    svc, report, seen = _round_meeting_in("delete_job", waiting=True)
    assert report.ended == ["t1", "t2"]
    assert seen == ["the round's", "the round's"]
    assert [svc.store.progress[t].phase for t in ("t1", "t2")] == [Phase.DONE, Phase.DONE]  # type: ignore[attr-defined]


def test_the_reaper_asks_gke_about_each_cluster_at_once_in_the_rounds_context() -> None:
    """Confirming a deletion is a GKE round trip per pool (here one pool marked on each of c1 and
    c2): the reaper makes each cluster's calls at once, never one cluster waiting on another."""
    svc = make_services()
    for cluster_id in ("c1", "c2"):
        svc.store.add_cluster(cluster(cluster_id))  # type: ignore[attr-defined]
        name = f"falcon-marked-{cluster_id}"
        svc.node_pools.add_existing(clusters_of(svc)[cluster_id], name)  # type: ignore[attr-defined]
        marked = replace(idle_pool(name, cluster_id=cluster_id), state=PoolState.DELETING)
        svc.store.add_pool(marked)  # type: ignore[attr-defined]
    barrier, seen = threading.Barrier(2, timeout=5), []
    _meet_in(svc.node_pools, "get", barrier, seen)
    dispatcher, token = Dispatcher(svc), ROUND_CONTEXT.set("the round's")
    try:
        dispatcher.reconcile()
    finally:
        dispatcher.close()
        ROUND_CONTEXT.reset(token)
    assert seen == ["the round's", "the round's"]
    assert svc.node_pools.pools == {}  # type: ignore[attr-defined]  # GKE still had both: asked again


def test_the_round_leaves_the_reapers_gke_calls_beside_it_and_a_clusters_next_wait_for_those_under_way() -> (
    None
):
    """A GKE answer can take a second: the round goes on without it, and a later round's calls
    for the same cluster start once the ones under way are done, never beside them."""
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))  # type: ignore[attr-defined]
    svc.node_pools.add_existing(clusters_of(svc)["c1"], "falcon-marked")  # type: ignore[attr-defined]
    svc.store.add_pool(replace(idle_pool("falcon-marked"), state=PoolState.DELETING))  # type: ignore[attr-defined]
    asked, answer, answered_before = threading.Event(), threading.Event(), []
    get = svc.node_pools.get

    def slow_get(*args: Any) -> Any:
        answered_before.append(answer.is_set())
        asked.set()
        assert answer.wait(timeout=2)
        return get(*args)

    svc.node_pools.get = slow_get  # type: ignore[method-assign]
    dispatcher = Dispatcher(svc)
    try:
        dispatcher.reconcile()  # returns with GKE's answer still to come (waiting, it would fail)
        assert asked.wait(timeout=5)
        svc.clock.advance(10 * svc.settings.poll_seconds)  # type: ignore[attr-defined]  # confirming due again
        dispatcher.reconcile()
        assert answered_before == [False]  # the second round's call waits for the first
        answer.set()
        deadline = time.monotonic() + 5
        while len(answered_before) < 2:
            assert time.monotonic() < deadline, "the waiting calls never ran"
            time.sleep(0.01)
    finally:
        answer.set()
        dispatcher.close()
    assert answered_before == [False, True]
    assert svc.node_pools.pools == {}  # type: ignore[attr-defined]  # GKE still had it: asked again, deleted


def test_orphan_sweeps_and_the_view_are_housekeepings_each_when_due_never_the_rounds() -> None:
    svc = make_services(view_seconds=10.0, orphan_scan_seconds=60.0)
    svc.store.add_cluster(cluster("c1"))  # type: ignore[attr-defined]
    running(svc, "t-gone")
    svc.store.rows.pop("t-gone")  # type: ignore[attr-defined]  # the database lost the row: its Job is an orphan
    views: list[object] = []
    dispatcher = Dispatcher(svc, publish=views.append)
    try:
        svc.clock.advance(60)  # type: ignore[attr-defined]  # past the first scan's delay
        assert dispatcher.reconcile().orphans == [] and views == []
        assert k8s_of(svc).jobs, "the round left the orphan"
        assert dispatcher.housekeep().orphans == [k8s_job_name_for("t-gone")]
        assert len(views) == 1 and len(events_of(svc).views) == 1
        running(svc, "t-lost")
        svc.store.rows.pop("t-lost")  # type: ignore[attr-defined]
        svc.clock.advance(10)  # type: ignore[attr-defined]
        assert dispatcher.housekeep().orphans == [], "the next scan is not due yet"
        assert len(views) == 2
        svc.clock.advance(50)  # type: ignore[attr-defined]
        assert dispatcher.housekeep().orphans == [k8s_job_name_for("t-lost")]
    finally:
        dispatcher.close()


@pytest.mark.parametrize(
    ("settings", "period"),
    [
        ({"view_seconds": 10.0, "orphan_scan_seconds": 300.0, "liveness_seconds": 120.0}, 10.0),
        ({"view_seconds": 0.0, "orphan_scan_seconds": 300.0, "liveness_seconds": 120.0}, 60.0),
        ({"view_seconds": 10.0, "orphan_scan_seconds": 5.0, "liveness_seconds": 120.0}, 5.0),
        ({"view_seconds": 10.0, "orphan_scan_seconds": 300.0, "liveness_seconds": 8.0}, 4.0),
    ],
    ids=["the view period", "view off: twice per liveness bound", "a faster scan", "a tight liveness"],
)
def test_housekeeping_turns_as_often_as_its_work_and_twice_per_liveness_bound(
    settings: dict[str, float], period: float
) -> None:
    assert housekeeping_period(make_settings(**settings)) == period
