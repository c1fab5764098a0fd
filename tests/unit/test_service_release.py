"""Release (design phase 6): keep-or-delete of the node pool, and the reaping of kept pools.

We test: a ready pool is kept (idle) when a task of the same queue waits and no idle pool is
there for it; deleted when nobody waits, when an idle pool already waits for the waiter, or when
it never became ready; a deletion GKE refuses is appended to the Message and left for the
janitor, refusals are retried with doubling waits, and a release restarted after GKE accepted
the deletion waits for it without asking again; the Job and a multi-host Service are deleted;
reaping deletes an idle pool past its grace, keeps one with waiters until 10x grace, and
confirms deletions GKE finished.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from tests.unit.fakes import (
    acquiring,
    arrivals,
    cluster,
    clusters_of,
    k8s_of,
    make_services,
    queued,
    running,
)

from falcon.domain.errors import BusyError, PermanentError, TemporaryError
from falcon.domain.lifecycle import NodePool, Phase, PoolState, TaskEnded, failed
from falcon.domain.messages import MessageKey
from falcon.domain.model import Cluster, ProvisioningMode, QueueKey, k8s_job_name_for, node_pool_name_for
from falcon.domain.status import Reason, Status
from falcon.services import reconcile
from falcon.services.acquisition import provision, wait_pool_ready
from falcon.services.context import Services, load_view
from falcon.services.reaper_beside import Calls, one_cluster_after_another
from falcon.services.release import record_outcome, release

POOL = node_pool_name_for("t1", "2x2")
JOB = k8s_job_name_for("t1")
QUEUE = QueueKey("c1", "2x2")


def succeed(svc: Services, task_id: str = "t1") -> None:
    """The Job completes and the dispatcher notices: phase releasing, outcome Succeeded."""
    k8s_of(svc).job(k8s_job_name_for(task_id)).script.complete = True
    assert task_id in reconcile.follow_running(svc, clusters_of(svc)).ended


def idle(name: str, since: datetime) -> NodePool:
    mode = ProvisioningMode.FLEX_START
    return NodePool("c1", name, "2x2", "ct6e-standard-4t", mode, None, PoolState.IDLE, None, since)


# -- keep or delete -------------------------------------------------------------------------------


def test_pool_is_kept_when_a_same_queue_task_waits(svc: Services) -> None:
    running(svc, "t1")
    svc.clock.advance(1)
    queued(svc, "t2")
    succeed(svc)
    assert release(svc, "t1").status is Status.SUCCEEDED
    pool = svc.store.pool("c1", POOL)
    assert (pool.state, pool.holder_task_id, pool.idle_since) == (PoolState.IDLE, None, svc.clock.now())
    assert svc.node_pools.count("delete") == 0 and ("c1", POOL) in svc.node_pools.pools
    assert k8s_of(svc).jobs == {} and k8s_of(svc).count("delete_job") == 1


def test_kept_pool_is_reused_by_the_waiting_task(svc: Services) -> None:
    running(svc, "t1")
    queued(svc, "t2")
    succeed(svc)
    release(svc, "t1")
    svc.store.start_acquiring("t2", QUEUE, "alice", "lease-x", "picked", svc.clock.now())
    assert provision(svc, load_view(svc, "t2")).name == POOL
    assert svc.store.pool("c1", POOL).holder_task_id == "t2"


def test_pool_is_deleted_when_nobody_waits(svc: Services) -> None:
    arrivals(svc, QUEUE)  # a queue used about once an hour: an idle pool is not worth keeping
    running(svc, "t1")
    succeed(svc)
    release(svc, "t1")
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc.node_pools.pools == {}
    assert svc.store.task("t1").message == ""


def test_pool_is_deleted_when_a_waiter_already_has_an_idle_pool(svc: Services) -> None:
    arrivals(svc, QUEUE)  # a queue used about once an hour: an idle pool is not worth keeping
    running(svc, "t1")
    svc.store.add_pool(idle("falcon-kept", svc.clock.now()))
    queued(svc, "t2")
    succeed(svc)
    release(svc, "t1")
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc.store.pool("c1", "falcon-kept").state is PoolState.IDLE


def test_waiter_of_another_queue_does_not_keep_the_pool(svc: Services) -> None:
    arrivals(svc, QUEUE)  # a queue used about once an hour: an idle pool is not worth keeping
    running(svc, "t1")
    queued(svc, "t2", "2x4")
    succeed(svc)
    release(svc, "t1")
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED


def test_pool_that_never_became_ready_is_deleted_even_with_waiters(svc: Services) -> None:
    svc2 = make_services(node_pool_timeout_seconds=60)
    svc2.store.add_cluster(cluster("c1"))
    view = acquiring(svc2, "t1")
    choice = provision(svc2, view)
    svc2.node_pools.script(POOL, never_ready=True)
    queued(svc2, "t2")
    with pytest.raises(TaskEnded) as ended:
        wait_pool_ready(svc2, view, choice, svc2.clock.now())
    assert record_outcome(svc2, "t1", ended.value.outcome, [Phase.ACQUIRING], released_inline=True)
    outcome = release(svc2, "t1")
    assert (outcome.status, outcome.reason) == (Status.FAILED, Reason.NODE_POOL_TIMEOUT)
    assert svc2.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc2.node_pools.pools == {}
    assert svc2.store.progress["t1"].release_run_id == "run-1"  # released inline by the acquire run


def test_deletion_error_is_appended_to_the_message(svc: Services) -> None:
    arrivals(svc, QUEUE)  # a queue used about once an hour: an idle pool is not worth keeping
    running(svc, "t1")
    succeed(svc)
    svc.node_pools.fail_delete(PermanentError("permission denied: container.nodePools.delete"))
    outcome = release(svc, "t1")
    text = "(node pool deletion failed: permission denied: container.nodePools.delete)"
    assert outcome.status is Status.SUCCEEDED and outcome.message == text
    task = svc.store.task("t1")
    assert (task.status, task.message) == (Status.SUCCEEDED, text)
    assert svc.store.pool("c1", POOL).state is PoolState.DELETING  # left for the janitor
    assert svc.store.pool_error("c1", POOL) == "permission denied: container.nodePools.delete"


def test_deletion_error_keeps_the_failure_message_in_front(svc: Services) -> None:
    arrivals(svc, QUEUE)  # a queue used about once an hour: an idle pool is not worth keeping
    running(svc, "t1", timeout_seconds=10)
    svc.clock.advance(10)
    reconcile.follow_running(svc, clusters_of(svc))
    svc.node_pools.fail_delete(PermanentError("quota"))
    outcome = release(svc, "t1")
    assert outcome.reason is Reason.TIMEOUT
    assert outcome.message == "Task timed out (10s), Job cancelled (node pool deletion failed: quota)"


def test_gke_busy_while_deleting_is_waited_out(svc: Services) -> None:
    arrivals(svc, QUEUE)  # a queue used about once an hour: an idle pool is not worth keeping
    running(svc, "t1")
    succeed(svc)
    svc.node_pools.fail_delete(TemporaryError("another operation"), times=3)
    assert release(svc, "t1").message == ""
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc.node_pools.count("delete") == 4


def test_a_deletion_gke_refuses_while_busy_is_asked_again_at_each_poll(svc: Services) -> None:
    """The cluster's one operation ends within minutes: a doubled wait would keep the pool paid
    for past it."""
    arrivals(svc, QUEUE)
    running(svc, "t1")
    succeed(svc)
    svc.node_pools.fail_delete(BusyError("cluster is running another operation"), times=4)
    assert release(svc, "t1").message == ""
    assert svc.clock.sleeps[:4] == [svc.settings.poll_seconds] * 4
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED


def test_deletion_refusals_are_retried_with_doubling_waits_up_to_a_cap(svc: Services) -> None:
    arrivals(svc, QUEUE)  # a queue used about once an hour: an idle pool is not worth keeping
    running(svc, "t1")
    succeed(svc)
    svc.node_pools.fail_delete(TemporaryError("503 backend error"), times=7)
    assert release(svc, "t1").message == ""
    assert svc.clock.sleeps[:7] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED


def test_a_release_restarted_after_gke_accepted_the_deletion_does_not_ask_again(svc: Services) -> None:
    """The first release run died after GKE accepted the delete: the next one waits for it."""
    arrivals(svc, QUEUE)  # a queue used about once an hour: an idle pool is not worth keeping
    svc.node_pools.script(POOL, polls_to_delete=2)
    view = running(svc, "t1")
    succeed(svc)  # nobody waits: the round that saw the Job end marked the pool for deletion
    assert svc.store.pool("c1", POOL).state is PoolState.DELETING
    svc.node_pools.delete(view.cluster, POOL)  # the first release run asked GKE, and died here
    outcome = release(svc, "t1")
    assert (outcome.status, outcome.message) == (Status.SUCCEEDED, "")
    assert svc.node_pools.count("delete") == 1
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc.store.task("t1").status is Status.SUCCEEDED


def test_multi_host_release_deletes_the_service(svc: Services) -> None:
    running(svc, "t1", "2x4")
    assert ("falcon-jobs", JOB) in k8s_of(svc).services
    succeed(svc)
    release(svc, "t1")
    assert k8s_of(svc).services == {} and k8s_of(svc).jobs == {}


# -- reaping kept pools ---------------------------------------------------------------------------


def test_idle_pool_past_its_grace_is_deleted(svc: Services) -> None:
    cl = svc.store.clusters()[0]
    svc.node_pools.add_existing(cl, "falcon-kept")
    svc.store.add_pool(idle("falcon-kept", svc.clock.now()))
    svc.clock.advance(120)
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), {}) == []  # grace not yet over
    svc.clock.advance(1)
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), {}) == ["falcon-kept"]
    assert svc.store.pool("c1", "falcon-kept").state is PoolState.DELETING
    assert svc.node_pools.count("delete", "falcon-kept") == 1
    reconcile.reap_idle_pools(svc, clusters_of(svc), {})  # next round: GKE no longer has it
    assert svc.store.pool("c1", "falcon-kept").state is PoolState.DELETED


def test_the_marks_go_with_the_calls_beside_the_round_and_spare_a_pool_taken_meanwhile(
    svc: Services,
) -> None:
    """The deployed round writes no mark: each is the first of its cluster's calls beside it."""
    for name in ("falcon-one", "falcon-two"):
        svc.node_pools.add_existing(svc.store.clusters()[0], name)
        svc.store.add_pool(idle(name, svc.clock.now()))
    svc.clock.advance(121)
    handed: list[Calls] = []
    reaped = reconcile.reap_idle_pools(svc, clusters_of(svc), {}, make_calls=handed.append)
    assert sorted(reaped) == ["falcon-one", "falcon-two"]
    assert {p.name for p in svc.store.pools_in([PoolState.IDLE])} == {"falcon-one", "falcon-two"}
    taken = svc.store.claim_idle_pool(QUEUE, "t9", svc.clock.now())
    assert taken is not None
    (left,) = {"falcon-one", "falcon-two"} - {taken.name}
    one_cluster_after_another(handed[0])
    assert svc.store.pool("c1", taken.name).state is PoolState.IN_USE  # taken: left alone
    assert svc.node_pools.count("delete", taken.name) == 0
    assert svc.store.pool("c1", left).state is PoolState.DELETING
    assert svc.node_pools.count("delete", left) == 1


def test_idle_pool_with_waiters_is_kept_until_ten_graces(svc: Services) -> None:
    svc.node_pools.add_existing(svc.store.clusters()[0], "falcon-kept")
    svc.store.add_pool(idle("falcon-kept", svc.clock.now()))
    waiting = {QUEUE: 1}
    svc.clock.advance(1200)
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), waiting) == []
    assert svc.store.pool("c1", "falcon-kept").state is PoolState.IDLE
    svc.clock.advance(1)
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), waiting) == ["falcon-kept"]


def test_waiters_of_another_queue_do_not_keep_an_idle_pool(svc: Services) -> None:
    svc.store.add_pool(idle("falcon-kept", svc.clock.now()))
    svc.clock.advance(121)
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), {QueueKey("c1", "2x4"): 3}) == ["falcon-kept"]


def test_deletion_gke_refused_is_asked_again_next_round(svc: Services) -> None:
    svc.node_pools.add_existing(svc.store.clusters()[0], "falcon-kept")
    svc.store.add_pool(idle("falcon-kept", svc.clock.now() - timedelta(seconds=500)))
    svc.node_pools.fail_delete(TemporaryError("another operation"))
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), {}) == ["falcon-kept"]
    assert ("c1", "falcon-kept") in svc.node_pools.pools
    reconcile.reap_idle_pools(svc, clusters_of(svc), {})  # still there: deleted again
    assert svc.node_pools.pools == {}
    reconcile.reap_idle_pools(svc, clusters_of(svc), {})
    assert svc.store.pool("c1", "falcon-kept").state is PoolState.DELETED


def test_the_dispatchers_reaper_confirms_each_deletion_once_per_poll(svc: Services) -> None:
    """A pool waiting for the cluster's one GKE operation is looked at and asked for again once per
    ``poll_seconds``, not at every round; one no longer deleting is forgotten."""
    svc = replace(svc, settings=svc.settings.model_copy(update={"poll_seconds": 2.0}))
    svc.node_pools.add_existing(svc.store.clusters()[0], "falcon-kept")
    svc.store.add_pool(idle("falcon-kept", svc.clock.now() - timedelta(seconds=500)))
    svc.node_pools.fail_delete(BusyError("another operation"), times=50)
    confirmed: reconcile.ConfirmedAt = {}

    def asked_in_rounds(rounds: int) -> int:
        before = svc.node_pools.count("delete", "falcon-kept")
        for _ in range(rounds):
            reconcile.reap_idle_pools(svc, clusters_of(svc), {}, confirmed=confirmed)
            svc.clock.advance(1.0)  # a round a second
        return svc.node_pools.count("delete", "falcon-kept") - before

    assert asked_in_rounds(1) == 1  # marked and asked
    assert asked_in_rounds(6) == 3, "every other round"
    assert set(confirmed) == {("c1", "falcon-kept")}
    svc.node_pools.delete_failures.clear()
    asked_in_rounds(4)
    assert svc.store.pool("c1", "falcon-kept").state is PoolState.DELETED
    assert confirmed == {}


def test_a_pool_that_failed_its_task_is_deleted_though_a_task_waits_for_the_queue(svc: Services) -> None:
    """A pool that went from GKE (or broke) under a task would fail every next task of the queue
    that took it (the chaos run saw four in a row fail on one pool the orphan sweep had deleted)."""
    running(svc, "t1")
    queued(svc, "t2")
    outcome = failed(svc.say, Reason.NODE_POOL_FAILED, MessageKey.NODE_POOL_FAILED, detail="it went")
    assert record_outcome(svc, "t1", outcome, [Phase.RUNNING])
    assert release(svc, "t1").reason is Reason.NODE_POOL_FAILED
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc.store.idle_count(QUEUE) == 0


def test_a_pool_created_while_gke_lists_the_pools_is_not_an_orphan(svc: Services) -> None:
    listed = svc.node_pools.list_names

    def list_while_a_create_lands(cluster: Cluster) -> list[str]:
        running(svc, "t1")  # its pool is recorded, then created in GKE, while the sweep lists
        return listed(cluster)

    svc.node_pools.list_names = list_while_a_create_lands  # type: ignore[method-assign]
    assert reconcile.delete_orphan_pools(svc, clusters_of(svc)) == []
    assert svc.node_pools.count("delete") == 0  # type: ignore[attr-defined]


def test_orphan_falcon_pools_are_deleted_tracked_ones_are_not(svc: Services) -> None:
    cl = svc.store.clusters()[0]
    running(svc, "t1")
    svc.node_pools.add_existing(cl, "falcon-orphan")
    svc.node_pools.add_existing(cl, "default-pool")
    assert reconcile.delete_orphan_pools(svc, clusters_of(svc)) == ["falcon-orphan"]
    assert set(svc.node_pools.pools) == {("c1", POOL), ("c1", "default-pool")}


def test_an_orphan_pool_gke_would_not_delete_yet_is_reported_by_the_sweep_that_deletes_it(
    svc: Services,
) -> None:
    svc.node_pools.add_existing(svc.store.clusters()[0], "falcon-orphan")
    svc.node_pools.fail_delete(BusyError("cluster is running another operation"))
    assert reconcile.delete_orphan_pools(svc, clusters_of(svc)) == []
    assert reconcile.delete_orphan_pools(svc, clusters_of(svc)) == ["falcon-orphan"]
    assert svc.node_pools.pools == {}
