"""A reconcile round's independent pieces (each cluster's Jobs, each offered task's release) run
at once on the dispatcher's round threads, in the round's context, and are reported in order;
releasing in the round keeps to its time budget; orphan sweeps and the view are housekeeping's,
not the round's."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest
from flows.dispatcher import housekeeping_period
from tests.unit.fakes import (
    FakeClusterJobs,
    cluster,
    clusters_of,
    events_of,
    k8s_of,
    make_services,
    make_settings,
    queued,
    running,
)

from falcon.domain.lifecycle import Phase
from falcon.domain.model import k8s_job_name_for
from falcon.services import reconcile
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


def _meet_in(jobs: FakeClusterJobs, method: str, barrier: threading.Barrier, seen: list[str]) -> None:
    """Make the fake's ``method`` wait until every cluster's call is under way: it passes only when
    the calls run at once (a barrier that times out breaks, and the round fails)."""
    call: Callable[..., Any] = getattr(jobs, method)

    def met(*args: Any, **kwargs: Any) -> Any:
        seen.append(ROUND_CONTEXT.get())
        barrier.wait()
        return call(*args, **kwargs)

    setattr(jobs, method, met)


def _round_meeting_in(method: str, waiting: bool) -> tuple[Services, TickReport, list[str]]:
    """One round of the Dispatcher over two clusters whose Jobs ended, each cluster's ``method``
    passing only once both run at once; the context each call saw."""
    svc = _two_clusters_whose_jobs_ended(waiting)
    barrier, seen = threading.Barrier(2, timeout=5), []
    for c in clusters_of(svc).values():
        _meet_in(svc.jobs(c), method, barrier, seen)  # type: ignore[arg-type]
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


def test_the_round_releases_the_tasks_whose_pool_it_kept_at_once() -> None:
    svc, report, _ = _round_meeting_in("delete_job", waiting=True)
    assert report.offered == ["t1", "t2"]
    assert report.released == ["t1", "t2"]
    assert [svc.store.progress[t].phase for t in ("t1", "t2")] == [Phase.DONE, Phase.DONE]  # type: ignore[attr-defined]


def test_releasing_in_the_round_starts_no_task_after_its_budget_and_leaves_the_rest_releasing() -> None:
    svc = make_services()
    svc.store.add_cluster(cluster("c1"))  # type: ignore[attr-defined]
    for n in (1, 2, 3):
        running(svc, f"t{n}")
        queued(svc, f"w{n}")
        k8s_of(svc).job(k8s_job_name_for(f"t{n}")).script.complete = True
    followed = reconcile.follow_running(svc, clusters_of(svc))
    assert followed.offered == ["t1", "t2", "t3"]
    jobs, step = k8s_of(svc), reconcile.RELEASE_IN_ROUND_SECONDS * 0.6
    delete_job = jobs.delete_job

    def slow_delete(namespace: str, name: str) -> None:
        svc.clock.advance(step)  # type: ignore[attr-defined]
        delete_job(namespace, name)

    jobs.delete_job = slow_delete  # type: ignore[method-assign]
    assert reconcile.finish_offered(svc, followed.offered) == ["t1", "t2"]  # t2 started at 0.6 s
    assert svc.store.progress["t3"].phase is Phase.RELEASING  # type: ignore[attr-defined]


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
