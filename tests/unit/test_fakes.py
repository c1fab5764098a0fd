"""The fakes keep the contracts of what they stand for, so the service tests can be trusted.

We test the store's compare-and-set writes, its state-machine checks, its rollback of a failed
transaction (cluster_locked included), write-ahead and pool moves guarded by state and holder;
the GKE fake's scripted life; slots of one; settings that ignore the environment.
"""

from __future__ import annotations

import pytest
from tests.unit.fakes import FakeClock, FakeNodePools, FakeSlots, MemoryTaskStore, cluster, make_services

from falcon.domain.errors import BusyError, ConflictError, NotFoundError, PermanentError
from falcon.domain.lifecycle import IllegalPhaseMoveError, NodePool, Outcome, Phase, PoolState
from falcon.domain.messages import Locale
from falcon.domain.model import ProvisioningMode, QueueKey
from falcon.domain.node_pools import NodePoolPlan
from falcon.domain.status import IllegalTransitionError, Reason, Status
from falcon.domain.topology import resolve_shape

Q = QueueKey("c1", "2x2")


def store_with(task_id: str = "t1") -> MemoryTaskStore:
    store = MemoryTaskStore(FakeClock())
    store.add_cluster(cluster("c1"))
    store.insert_task(task_id)
    return store


def test_writes_are_compare_and_set_on_status() -> None:
    store = store_with()
    now = store.clock.now()
    assert store.queue_task("t1", Q, now)
    assert store.request_abort("t1")
    assert not store.note_pending("t1", "x", now, Reason.PROVISIONING)
    assert store.start_acquiring("t1", Q, "alice", "lease", "m", now) is None
    assert store.mark_dispatched("t1", "job", "uid", "m", now) is False
    task = store.task("t1")
    assert (task.status, task.message) == (Status.ABORTING, "")


def test_illegal_writes_raise_before_touching_the_row() -> None:
    store = store_with()
    now = store.clock.now()
    with pytest.raises(IllegalTransitionError):
        store.note_pending("t1", "x", now, Reason.JOB_FAILED)
    store.queue_task("t1", Q, now)
    store.start_acquiring("t1", Q, "alice", "lease", "m", now)
    with pytest.raises(IllegalPhaseMoveError):
        store.mark_done("t1", now)  # a task mid-way cannot be done
    assert store.progress["t1"].phase is Phase.ACQUIRING


def test_finish_rolls_back_when_the_progress_row_cannot_be_done() -> None:
    store = store_with()
    now = store.clock.now()
    store.queue_task("t1", Q, now)
    store.start_acquiring("t1", Q, "alice", "lease", "m", now)
    with pytest.raises(IllegalPhaseMoveError):
        store.finish("t1", Outcome(Status.FAILED, Reason.JOB_FAILED, "x"), [Status.PENDING], now)
    assert store.task("t1").status is Status.PENDING  # one transaction: nothing written


def test_cluster_locked_is_one_transaction() -> None:
    store = store_with()
    pool = NodePool("c1", "p", "2x2", "m", ProvisioningMode.FLEX_START, None, PoolState.CREATING, "t1")
    with pytest.raises(RuntimeError), store.cluster_locked("c1") as locked:
        locked.write_ahead_pool(pool, store.clock.now())
        raise RuntimeError("crash before commit")
    assert store.pools == {}


def test_pool_moves_expect_state_and_holder() -> None:
    store = store_with()
    now = store.clock.now()
    pool = NodePool("c1", "p", "2x2", "m", ProvisioningMode.FLEX_START, None, PoolState.CREATING, "t1")
    store.write_ahead_pool(pool, now)
    store.write_ahead_pool(
        NodePool("c1", "p", "9x9", "m", ProvisioningMode.FLEX_START, None, PoolState.IN_USE, "x"), now
    )
    assert store.pool("c1", "p") == pool  # write-ahead never overwrites
    assert not store.keep_pool("c1", "p", "t1", now)  # not ready yet
    store.pool_ready("c1", "p", now)
    assert not store.keep_pool("c1", "p", "other", now)
    assert store.keep_pool("c1", "p", "t1", now)
    assert not store.start_deleting_pool("c1", "p", "t1", now)  # idle: only the reaper deletes it
    assert store.claim_idle_pool(Q, "t2", now).holder_task_id == "t2"
    assert store.claim_idle_pool(Q, "t3", now) is None


def test_gke_fake_scripted_life() -> None:
    gke, cl = FakeNodePools(), cluster("c1")
    plan = NodePoolPlan("p", resolve_shape("v6e", "2x2"), ProvisioningMode.FLEX_START, None, "us-east5-b")
    gke.script("p", polls_to_ready=1)
    gke.refuse_create(1)
    with pytest.raises(BusyError):
        gke.create(cl, plan)
    gke.create(cl, plan)
    with pytest.raises(ConflictError):
        gke.create(cl, plan)
    assert [gke.get(cl, "p").status for _ in range(2)] == ["PROVISIONING", "RUNNING"]
    gke.delete(cl, "p")
    with pytest.raises(NotFoundError):
        gke.get(cl, "p")
    with pytest.raises(NotFoundError):
        gke.delete(cl, "p")
    gke.fail_create("quota")
    with pytest.raises(PermanentError):
        gke.create(cl, plan)


def test_slots_hold_one_lease_per_name() -> None:
    slots = FakeSlots()
    with pytest.raises(PermanentError):
        slots.try_acquire("q", 60)
    slots.ensure_limit("q")
    lease = slots.try_acquire("q", 60)
    assert lease is not None and slots.try_acquire("q", 60) is None
    slots.release(lease)
    assert not slots.renew(lease, 60)
    assert slots.try_acquire("q", 60) is not None


def test_settings_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FALCON_POLL_SECONDS", "99")
    monkeypatch.setenv("FALCON_MESSAGE_LOCALE", "zh")
    settings = make_services(pool_creation_prior_seconds=5).settings
    assert (settings.poll_seconds, settings.message_locale, settings.pool_creation_prior_seconds) == (
        1.0,
        Locale.EN,
        5,
    )


def test_clock_only_moves_when_told() -> None:
    clock = FakeClock()
    start, mono = clock.now(), clock.monotonic()
    clock.sleep(2.5)
    clock.advance(1)
    assert (clock.now() - start).total_seconds() == 3.5 and clock.monotonic() - mono == 3.5
