"""Fast release (issue 10): from a Job's end to its task's terminal status, Falcon adds one Job
list (the reconcile round) and the release's own calls; nothing waits on a run's start or polls,
except for GKE deleting a pool, which is GKE's own time."""

from __future__ import annotations

from tests.unit.fakes import arrivals, k8s_of, queued, running

from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.model import QueueKey, k8s_job_name_for, node_pool_name_for
from falcon.domain.status import Status
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher
from falcon.services.release import release

QUEUE = QueueKey("c1", "2x2")


def test_the_round_that_sees_a_job_end_starts_its_release(svc: Services) -> None:
    running(svc, "t1")
    dispatcher = Dispatcher(svc)
    try:
        dispatcher.tick()
        assert svc.launcher.releases == []  # type: ignore[attr-defined]
        k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
        svc.clock.advance(svc.settings.reconcile_seconds)  # type: ignore[attr-defined]
        report = dispatcher.tick()
    finally:
        dispatcher.close()
    assert report.ended == ["t1"] and report.started == ["t1"]
    assert svc.launcher.releases == [("t1", 1)]  # type: ignore[attr-defined]
    assert svc.store.task_view_rows("t1")[2].phase is Phase.RELEASING


def test_a_release_that_keeps_the_pool_never_waits(svc: Services) -> None:
    running(svc, "t1")
    queued(svc, "t2")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    Dispatcher(svc).tick()
    waits_before = len(svc.clock.sleeps)  # type: ignore[attr-defined]
    assert release(svc, "t1").status is Status.SUCCEEDED
    assert len(svc.clock.sleeps) == waits_before  # type: ignore[attr-defined]
    assert svc.store.pool("c1", node_pool_name_for("t1", "2x2")).state is PoolState.IDLE


def test_a_release_that_deletes_the_pool_waits_only_for_gke(svc: Services) -> None:
    arrivals(svc, QUEUE)
    pool = node_pool_name_for("t1", "2x2")
    svc.node_pools.script(pool, polls_to_delete=3)  # type: ignore[attr-defined]
    running(svc, "t1")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    Dispatcher(svc).tick()
    waits_before = len(svc.clock.sleeps)  # type: ignore[attr-defined]
    assert release(svc, "t1").status is Status.SUCCEEDED
    polls = svc.clock.sleeps[waits_before:]  # type: ignore[attr-defined]
    assert polls == [svc.settings.poll_seconds] * 4, "after asking, and after each of 3 STOPPING answers"
    assert svc.store.pool("c1", pool).state is PoolState.DELETED


def test_the_deployed_tick_leaves_jobs_to_the_reconcile_loop_beside_it(svc: Services) -> None:
    """The deployed dispatcher's tick never waits on a cluster: following Jobs is the round's."""
    running(svc, "t1")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    dispatcher = Dispatcher(svc)
    try:
        assert dispatcher.pick_tick().ended == []
        assert svc.launcher.releases == []  # type: ignore[attr-defined]
        assert dispatcher.reconcile().ended == ["t1"]  # at once: its loop paces it, not a timer
    finally:
        dispatcher.close()
    assert svc.launcher.releases == [("t1", 1)]  # type: ignore[attr-defined]
