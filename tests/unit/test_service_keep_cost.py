"""Keep-or-delete by cost at release and in the reaper, from what Falcon observed of the queue
(issue 10): arrival gaps recorded at intake, creation times recorded when pools become ready."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from datetime import timedelta
from functools import partial

from tests.unit.fakes import MemoryTaskStore, arrivals, clusters_of, k8s_of, queued, rounds_until, running

from falcon.domain.lifecycle import NodePool, PoolState
from falcon.domain.model import ProvisioningMode, QueueKey, k8s_job_name_for, node_pool_name_for
from falcon.domain.pool_economics import DeleteEachPolicy, QueueObservations
from falcon.services import reconcile
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher
from falcon.services.release import keep_horizon, observed, release

QUEUE = QueueKey("c1", "2x2")
POOL = node_pool_name_for("t1", "2x2")


def _finish(svc: Services) -> None:
    running(svc, "t1")
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t1"]
    release(svc, "t1")


def _reaped_after(svc: Services, seconds: float) -> list[str]:
    svc.clock.advance(seconds)  # type: ignore[attr-defined]
    return reconcile.reap_idle_pools(svc, clusters_of(svc), {})


def _created(svc: Services, name: str, seconds: float) -> None:
    """A past pool of the queue that took ``seconds`` from its record to ready."""
    mode = ProvisioningMode.FLEX_START
    pool = NodePool("c1", name, "2x2", "ct6e-standard-4t", mode, None, PoolState.CREATING, "old")
    start = svc.clock.now() - timedelta(hours=1)
    svc.store.write_ahead_pool(pool, start)
    svc.store.pool_ready("c1", name, start + timedelta(seconds=seconds))
    svc.store.pool_deleted("c1", name, start + timedelta(seconds=seconds + 60))


def test_with_nothing_observed_an_unwanted_pool_is_kept_for_one_creation_then_deleted(svc: Services) -> None:
    _finish(svc)
    assert svc.store.pool("c1", POOL).state is PoolState.IDLE
    prior = svc.settings.pool_creation_prior_seconds
    assert _reaped_after(svc, prior - 1) == []
    assert _reaped_after(svc, 2) == [POOL]


def test_a_queue_used_every_half_minute_keeps_its_idle_pool_about_that_long(svc: Services) -> None:
    arrivals(svc, QUEUE, (30.0,) * 10)
    _finish(svc)
    assert keep_horizon(svc, QUEUE, ProvisioningMode.RESERVATION) == timedelta(seconds=30)
    assert _reaped_after(svc, 29) == []
    assert _reaped_after(svc, 2) == [POOL]


def test_a_queue_used_once_an_hour_deletes_an_unwanted_pool_at_once(svc: Services) -> None:
    arrivals(svc, QUEUE)
    _finish(svc)
    assert svc.store.pool("c1", POOL).state is PoolState.DELETED
    assert svc.node_pools.pools == {}  # type: ignore[attr-defined]


def test_the_reaper_keeps_each_queues_pool_by_that_queues_rhythm_read_for_all_at_once(svc: Services) -> None:
    other = QueueKey("c1", "2x4")
    arrivals(svc, QUEUE, (30.0,) * 10)
    arrivals(svc, other, (60.0,) * 10)
    for task_id, topology in (("t1", "2x2"), ("t2", "2x4")):
        running(svc, task_id, topology)
        k8s_of(svc).job(k8s_job_name_for(task_id)).script.complete = True
    assert sorted(reconcile.follow_running(svc, clusters_of(svc)).ended) == ["t1", "t2"]
    release(svc, "t1")
    release(svc, "t2")
    store = svc.store
    assert isinstance(store, MemoryTaskStore)
    store.calls.clear()
    assert _reaped_after(svc, 31) == [POOL]
    assert [c for c in store.calls if c[0] == "queue_observations"] == [
        ("queue_observations", frozenset({QUEUE, other}))
    ], "one read for every queue with an idle pool"
    assert _reaped_after(svc, 30) == [node_pool_name_for("t2", "2x4")]


def _observations_read(svc: Services) -> int:
    store = svc.store
    assert isinstance(store, MemoryTaskStore)
    return sum(1 for call in store.calls if call[0] == "queue_observations")


def test_the_reaper_prices_an_idle_pool_once_per_idle_spell_and_forgets_ended_spells(svc: Services) -> None:
    arrivals(svc, QUEUE, (30.0,) * 10)
    _finish(svc)
    priced: reconcile.PricedSpells = {}
    before = _observations_read(svc)
    for _ in range(3):
        svc.clock.advance(10)  # type: ignore[attr-defined]
        assert reconcile.reap_idle_pools(svc, clusters_of(svc), {}, priced=priced) == []
    assert _observations_read(svc) == before + 1, "priced at the first round of its spell only"
    assert [name for _, name, _ in priced] == [POOL]
    svc.clock.advance(1)  # type: ignore[attr-defined]
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), {}, priced=priced) == [POOL], "31 s idle"
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), {}, priced=priced) == []
    assert priced == {}, "a spell that ended is forgotten"


def test_a_pool_idle_again_is_priced_again_by_what_its_queue_did_since(svc: Services) -> None:
    arrivals(svc, QUEUE, (30.0,) * 10)
    _finish(svc)
    priced: reconcile.PricedSpells = {}
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), {}, priced=priced) == []
    svc.clock.advance(5)  # type: ignore[attr-defined]
    store = svc.store
    assert isinstance(store, MemoryTaskStore)
    taken = store.claim_idle_pool(QUEUE, "t2", svc.clock.now())
    assert taken is not None and taken.name == POOL
    arrivals(svc, QUEUE, (120.0,) * 10)  # the queue slowed down while the pool was in use
    assert store.keep_pool("c1", POOL, "t2", svc.clock.now())
    before = _observations_read(svc)
    svc.clock.advance(31)  # type: ignore[attr-defined]
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), {}, priced=priced) == []
    assert _observations_read(svc) == before + 1
    assert [spell.keep_for for spell in priced.values()] == [timedelta(seconds=120)]


def test_observed_creation_times_replace_the_prior(svc: Services) -> None:
    for n, seconds in enumerate([8.0, 10.0, 40.0]):
        _created(svc, f"falcon-2x2-old{n}", seconds)
    assert keep_horizon(svc, QUEUE, ProvisioningMode.FLEX_START) == timedelta(seconds=10)  # the median
    assert keep_horizon(svc, QUEUE, ProvisioningMode.RESERVATION) == timedelta(
        seconds=svc.settings.pool_creation_prior_seconds
    ), "no reservation pool observed yet"


def test_a_pool_kept_for_waiters_who_do_not_take_it_goes_after_its_hold(svc: Services) -> None:
    arrivals(svc, QUEUE, (30.0,) * 10)
    _finish(svc)
    waiting = {QUEUE: 1}
    hold = 10 * svc.settings.pool_creation_prior_seconds  # ten times the longer of horizon and creation
    svc.clock.advance(hold - 1)  # type: ignore[attr-defined]
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), waiting) == []
    svc.clock.advance(2)  # type: ignore[attr-defined]
    assert reconcile.reap_idle_pools(svc, clusters_of(svc), waiting) == [POOL]


def test_a_pool_a_waiting_task_takes_is_kept_without_reading_the_queues_history(svc: Services) -> None:
    """Every task's end settles its pool; with tasks waiting, the floor decides alone, and the
    queue's arrivals and creations (the horizon's queries) are not read at all."""
    queued(svc, "t2")
    _finish(svc)
    assert svc.store.pool("c1", POOL).state is PoolState.IDLE
    assert not [call for call in svc.store.calls if call[0] == "queue_observations"]  # type: ignore[attr-defined]


def test_a_pool_nobody_waits_for_is_kept_only_after_reading_the_queues_history(svc: Services) -> None:
    arrivals(svc, QUEUE, (30.0,) * 10)
    _finish(svc)
    assert svc.store.pool("c1", POOL).state is PoolState.IDLE
    assert ("queue_observations", frozenset({QUEUE})) in svc.store.calls  # type: ignore[attr-defined]


def test_a_pool_its_takers_are_about_to_take_is_kept_unpriced_for_two_polls(svc: Services) -> None:
    """With takers, the price only bounds how long they may leave the pool idle; the acquiring
    task takes it at its next poll (or the next pick), so the reaper reads the queue's history
    only for a pool still idle after two polls, and keeps it meanwhile, whatever the policy."""
    _finish(svc)
    assert svc.store.pool("c1", POOL).state is PoolState.IDLE
    reaper = replace(svc, keep_policy=DeleteEachPolicy())  # no hold for waiters: reaped once priced
    waiting, priced = {QUEUE: 1}, reconcile.PricedSpells()
    before, poll = _observations_read(svc), svc.settings.poll_seconds
    svc.clock.advance(1.9 * poll)  # type: ignore[attr-defined]
    assert reconcile.reap_idle_pools(reaper, clusters_of(svc), waiting, priced=priced) == []
    assert _observations_read(svc) == before and priced == {}
    svc.clock.advance(0.1 * poll)  # type: ignore[attr-defined]
    assert reconcile.reap_idle_pools(reaper, clusters_of(svc), waiting, priced=priced) == [POOL]
    assert _observations_read(svc) == before + 1


def test_a_pool_whose_queue_has_no_observations_yet_is_kept_and_priced_once_they_come(svc: Services) -> None:
    """The deployed dispatcher reads the queues' history beside its round: a round whose
    ``observe`` has no answer for the pool's queue yet keeps the pool unpriced, whatever its idle
    time, and a later round prices it from the answer."""
    _finish(svc)
    reaper = replace(svc, keep_policy=DeleteEachPolicy())  # reaped as soon as priced
    answers: dict[QueueKey, QueueObservations] = {}
    asked: list[set[QueueKey]] = []

    def observe(queues: Collection[QueueKey]) -> dict[QueueKey, QueueObservations]:
        asked.append(set(queues))
        return {q: answers[q] for q in queues if q in answers}

    priced = reconcile.PricedSpells()
    svc.clock.advance(3600)  # type: ignore[attr-defined]
    reap = partial(reconcile.reap_idle_pools, reaper, clusters_of(svc), {}, priced=priced, observe=observe)
    assert reap() == [] and priced == {}
    assert svc.store.pool("c1", POOL).state is PoolState.IDLE
    answers.update(observed(svc, [QUEUE]))
    assert reap() == [POOL]
    assert asked == [{QUEUE}, {QUEUE}]


def test_the_deployed_round_prices_an_idle_pool_once_its_queues_history_is_read_beside(svc: Services) -> None:
    _finish(svc)
    svc.clock.advance(3600)  # type: ignore[attr-defined]
    reaper = replace(svc, keep_policy=DeleteEachPolicy())  # reaped as soon as priced
    dispatcher = Dispatcher(reaper, beside=True)
    try:
        assert dispatcher.reconcile().reaped == [], "kept while its queue's history is read"
        assert rounds_until(dispatcher, lambda report: report.reaped == [POOL])
    finally:
        dispatcher.close()
