"""Fast release (issue 10): from a Job's end to its task's terminal status, Falcon adds one Job
list (the reconcile round) and the release's own calls; nothing waits on a run's start or polls,
except for GKE deleting a pool, which is GKE's own time. A Job that ended by itself has its pool
kept (or marked and its deletion asked for) beside the round that saw the end, which never waits
for those writes (``WorkBeside``); a kept pool's task is finished there too, a deleted
pool's by a release run."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from tests.unit.fakes import arrivals, k8s_of, queued, rounds_until, running

from falcon.domain.errors import TemporaryError
from falcon.domain.events import Stage, TaskMove
from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.model import QueueKey, k8s_job_name_for, node_pool_name_for
from falcon.domain.status import Status
from falcon.services.acquisition import provision
from falcon.services.context import Services, load_view
from falcon.services.dispatching import Dispatcher, TickReport
from falcon.services.release import release

QUEUE = QueueKey("c1", "2x2")


def _one_tick(svc: Services) -> TickReport:
    """A tick, and what its round handed over beside it done."""
    dispatcher = Dispatcher(svc)
    try:
        return dispatcher.tick()
    finally:
        dispatcher.close()


def test_the_round_that_sees_a_job_end_and_keeps_its_pool_finishes_the_task(svc: Services) -> None:
    """Nothing is left to wait for once the pool is the queue's: the task is released beside the
    round (its Job deleted, its terminal status written), and no release run is started (its
    start is Prefect's time); a later round reports it released."""
    running(svc, "t1")
    dispatcher = Dispatcher(svc)
    try:
        dispatcher.tick()
        k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
        svc.clock.advance(svc.settings.reconcile_seconds)  # type: ignore[attr-defined]
        report = dispatcher.tick()
        later = rounds_until(dispatcher, lambda r: bool(r.released))
    finally:
        dispatcher.close()
    assert report.ended == later.released == ["t1"]
    assert report.started == later.started == []
    assert svc.launcher.releases == []  # type: ignore[attr-defined]
    assert svc.store.task("t1").status is Status.SUCCEEDED
    assert svc.store.task_view_rows("t1")[2].phase is Phase.DONE
    assert k8s_of(svc).jobs == {}
    assert svc.store.pool("c1", node_pool_name_for("t1", "2x2")).state is PoolState.IDLE


def test_a_task_whose_pool_is_deleted_gets_a_release_run(svc: Services) -> None:
    """Deleting a pool waits for GKE: that wait is a release run's, never the round's. The round
    after the one that saw the end (whose writes were under way beside it) starts that run."""
    arrivals(svc, QUEUE)
    running(svc, "t1")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    dispatcher = Dispatcher(svc)
    try:
        report = dispatcher.reconcile()
        later = rounds_until(dispatcher, lambda r: bool(r.started))
    finally:
        dispatcher.close()
    assert report.ended == ["t1"] and report.started == []
    assert later.started == ["t1"] and later.released == []
    assert svc.launcher.releases == [("t1", 1)]  # type: ignore[attr-defined]
    assert svc.store.task_view_rows("t1")[2].phase is Phase.RELEASING


def test_a_job_deletion_that_fails_beside_the_round_is_left_to_a_release_run(svc: Services) -> None:
    running(svc, "t1")
    queued(svc, "t2")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    k8s_of(svc).delete_failures.append(TemporaryError("delete Job: timed out"))
    dispatcher = Dispatcher(svc)
    try:
        report = dispatcher.reconcile()
        later = rounds_until(dispatcher, lambda r: bool(r.started))
    finally:
        dispatcher.close()
    assert report.ended == ["t1"] and report.started == []  # its release beside was under way
    assert later.released == [] and later.started == ["t1"]
    assert svc.launcher.releases == [("t1", 1)]  # type: ignore[attr-defined]
    assert svc.store.task_view_rows("t1")[2].phase is Phase.RELEASING
    assert release(svc, "t1").status is Status.SUCCEEDED  # the run finishes what the round could not
    assert k8s_of(svc).jobs == {}


def test_a_round_never_waits_for_the_job_deletions_of_the_tasks_whose_pool_it_kept(
    svc: Services,
) -> None:
    """Many Jobs ending together must not hold up following the others: the round hands their
    tasks over and goes on, with no release run started for them while their releases run
    (here each Job's deletion is held until the round is over). Its steps are exported apart,
    so its own time can be read without them."""
    for task_id in ("t1", "t2", "t3"):
        running(svc, task_id)
        queued(svc, task_id.replace("t", "w"))  # each ended task's pool is kept for one of these
        k8s_of(svc).job(k8s_job_name_for(task_id)).script.complete = True
    jobs, round_over = k8s_of(svc), threading.Event()
    delete_job = jobs.delete_job

    def held_delete(namespace: str, name: str) -> None:
        assert round_over.wait(5)
        delete_job(namespace, name)

    jobs.delete_job = held_delete  # type: ignore[method-assign]
    dispatcher, steps = Dispatcher(svc), []
    dispatcher.on_steps = lambda loop, seen: steps.append((loop, dict(seen)))
    try:
        report = dispatcher.reconcile()
        round_over.set()
        later = rounds_until(dispatcher, lambda r: len(r.released) == 3)
    finally:
        round_over.set()
        dispatcher.close()
    assert report.ended == ["t1", "t2", "t3"] and report.released == report.started == []
    assert later.released == ["t1", "t2", "t3"] and later.started == []
    assert all(svc.store.task(t).status is Status.SUCCEEDED for t in later.released)
    assert svc.launcher.releases == []  # type: ignore[attr-defined]
    loop, round_steps = steps[0]
    assert loop == "reconcile" and list(round_steps)[:5] == ["follow", "release", "supervise", "reap", "warm"]


def test_a_round_never_waits_for_the_writes_of_the_endings_it_saw(svc: Services) -> None:
    """Recording how a task ends and settling its pool are the round's writes no more: here the
    step that records the outcome is held (when it tells of the move) until the round is over,
    and the round still returns, reporting the ending; a later round starts no second release
    for it while that step is under way."""
    running(svc, "t1")
    queued(svc, "w1")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    events, round_over = svc.events, threading.Event()
    moved = events.moved

    def held(move: TaskMove) -> None:
        if move.target is Stage.RELEASING:
            assert round_over.wait(5)
        moved(move)

    events.moved = held  # type: ignore[method-assign]
    dispatcher = Dispatcher(svc)
    try:
        report = dispatcher.reconcile()
        assert dispatcher.reconcile().started == []
        round_over.set()
        later = rounds_until(dispatcher, lambda r: bool(r.released))
    finally:
        round_over.set()
        dispatcher.close()
    assert report.ended == ["t1"] and later.released == ["t1"]
    assert svc.store.task("t1").status is Status.SUCCEEDED
    assert svc.launcher.releases == []  # type: ignore[attr-defined]


def test_a_release_that_keeps_the_pool_never_waits(svc: Services) -> None:
    running(svc, "t1")
    queued(svc, "t2")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    _one_tick(svc)
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
    _one_tick(svc)
    # the round that saw the Job end marked the pool and asked GKE at once, before any release run
    assert svc.node_pools.count("delete") == 1  # type: ignore[attr-defined]
    waits_before = len(svc.clock.sleeps)  # type: ignore[attr-defined]
    assert release(svc, "t1").status is Status.SUCCEEDED
    polls = svc.clock.sleeps[waits_before:]  # type: ignore[attr-defined]
    assert polls == [svc.settings.poll_seconds] * 3, "after each of 3 STOPPING answers, not asking again"
    assert svc.node_pools.count("delete") == 1  # type: ignore[attr-defined]
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
    assert svc.store.task("t1").status is Status.SUCCEEDED


def test_a_job_that_ended_by_itself_has_its_pool_kept_beside_that_round_and_the_tick_nudged(
    svc: Services,
) -> None:
    """The Job's pods are done, so its nodes are free: beside the round that sees the end, the
    pool is kept for the waiting task, the task finished (its Job deleted) and the tick loop
    nudged; the waiting task then takes the pool."""
    running(svc, "t1")
    queued(svc, "t2")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    dispatcher, nudges = Dispatcher(svc), []
    dispatcher.on_pool_offered = lambda: nudges.append(1)
    try:
        report = dispatcher.reconcile()
    finally:
        dispatcher.close()  # waits for what the round handed over
    pool = svc.store.pool("c1", node_pool_name_for("t1", "2x2"))
    assert report.ended == ["t1"] and nudges == [1]
    assert (pool.state, pool.holder_task_id) == (PoolState.IDLE, None)
    assert svc.store.task("t1").status is Status.SUCCEEDED and k8s_of(svc).jobs == {}
    svc.store.start_acquiring("t2", QUEUE, "alice", "lease-2", "picked", svc.clock.now())
    assert provision(svc, load_view(svc, "t2")).name == pool.name  # the hand-over
    assert release(svc, "t1").status is Status.SUCCEEDED  # a late release run changes nothing ...
    after = svc.store.pool("c1", pool.name)
    assert (after.state, after.holder_task_id) == (PoolState.IN_USE, "t2")  # ... the pool stays t2's
    assert svc.node_pools.count("delete") == 0  # type: ignore[attr-defined]


def test_a_job_whose_pods_may_still_run_leaves_its_pool_to_the_release_run(svc: Services) -> None:
    """An abort (or a timeout) ends a task whose pods still run: the pool is settled only after
    the release run deleted the Job."""
    running(svc, "t1")
    queued(svc, "t2")
    svc.store.request_abort("t1", svc.clock.now())
    dispatcher, nudges = Dispatcher(svc), []
    dispatcher.on_pool_offered = lambda: nudges.append(1)
    try:
        report = dispatcher.reconcile()
    finally:
        dispatcher.close()
    pool = svc.store.pool("c1", node_pool_name_for("t1", "2x2"))
    assert report.ended == ["t1"] and nudges == []
    assert (pool.state, pool.holder_task_id) == (PoolState.IN_USE, "t1")
    assert release(svc, "t1").status is Status.ABORTED
    assert svc.store.pool("c1", pool.name).state is PoolState.IDLE  # kept for t2 once the Job went


def test_a_round_never_waits_for_a_tick_that_holds_the_book(svc: Services) -> None:
    """A tick that takes thousands of rows in holds the queue book for seconds; the round follows
    the Jobs meanwhile, with the waiting counts the last tick left."""
    running(svc, "t1")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    dispatcher = Dispatcher(svc)
    holding, done = threading.Event(), threading.Event()

    def long_tick() -> None:
        with dispatcher._book_lock:
            holding.set()
            done.wait(10)

    tick = threading.Thread(target=long_tick)
    tick.start()
    holding.wait(5)
    try:
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(dispatcher.reconcile).result(timeout=5).ended == ["t1"]
    finally:
        done.set()
        tick.join()
        dispatcher.close()
