"""Tidal warm pools, the service part (issue 9 §3), on fakes with a fixed clock.

We test: at a fire the dispatcher's tick starts one warm run per queue short of its target, and no
second while it lives; the run creates pools up to the target, recorded before GKE is asked, and
they wait idle; a reservation with room for one of two gets one, flex-start the other; pools being
created count, so nothing goes past the target; a task takes a warm pool like a kept one and its
Message names the rule, after which the queue is replenished; at the next fire (target 0) the
idle pools are trimmed; the warm target and delayed deletion compose at release; a run killed
after recording (or after GKE's create) is resumed without creating anything twice, and two runs
at once create each pool once; a failed creation deletes its pool, tells its rule, and holds the
queue back; an unusable reservation is told to the rule; a cluster not active is not warmed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from tests.unit.fakes import (
    T0,
    acquiring,
    arrivals,
    cluster,
    clusters_of,
    idle_pool,
    make_services,
    one_cluster,
    running,
)

from falcon.domain.lifecycle import PoolState
from falcon.domain.model import ClusterStatus, ProvisioningMode, QueueKey
from falcon.domain.node_pools import ReservationRef
from falcon.domain.scheduling import ReservationCapacity
from falcon.domain.status import Status
from falcon.domain.warm_pools import WarmRule, warm_targets
from falcon.services import reconcile
from falcon.services.acquisition import PoolChoice, provision
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher
from falcon.services.release import release
from falcon.services.warming import create_warm_pools, plan_warm_pools, queues_to_warm

Q = QueueKey("c1", "2x2")
MORNING = WarmRule("morning", Q, "CRON_TZ=UTC 0 0 9 * * *", 2, T0)  # T0 is 2026-01-01 00:00 UTC
EVENING = WarmRule("evening", Q, "CRON_TZ=UTC 0 0 20 * * *", 0, T0)
RES = ReservationRef("proj", "res-a", shared=False)


def at(svc: Services, hours: float) -> None:
    """Move the fixed clock to ``hours`` after T0."""
    svc.clock.advance((T0 + timedelta(hours=hours) - svc.clock.now()).total_seconds())


def tide(**cluster_fields: object) -> Services:
    svc = one_cluster(**cluster_fields)
    for rule in (MORNING, EVENING):
        assert svc.store.add_warm_rule(rule)
    return svc


def warm_run(svc: Services, queue: QueueKey = Q) -> list[str]:
    """What the warm-pools flow does: plan, then create and wait."""
    names = plan_warm_pools(svc, queue)
    return create_warm_pools(svc, queue, names) if names else []


def to_warm(svc: Services) -> set[QueueKey]:
    """The queues the dispatcher's Warmer would start a run for now."""
    rules, now = svc.store.warm_rules(), svc.clock.now()
    pools = svc.store.pools_in([PoolState.CREATING, PoolState.IDLE])
    hold = timedelta(seconds=svc.settings.warm_retry_seconds)
    return queues_to_warm(clusters_of(svc), rules, warm_targets(rules, now), pools, now, hold)


def pools_of(svc: Services, *states: PoolState) -> list[str]:
    return sorted(p.name for p in svc.store.pools_in(list(states)) if p.topology == Q.topology)


@pytest.fixture
def svc() -> Services:
    return tide()


@pytest.fixture
def dispatcher(svc: Services) -> Iterator[Dispatcher]:
    d = Dispatcher(svc)
    yield d
    d.close()


# -- at the fire -----------------------------------------------------------------------------------


def test_the_tick_at_the_fire_starts_one_warm_run_for_the_short_queue() -> None:
    svc = make_services(reconcile_seconds=3600)  # the reconcile timer is not due again for an hour
    svc.store.add_cluster(cluster("c1"))
    for rule in (MORNING, EVENING):
        svc.store.add_warm_rule(rule)
    d = Dispatcher(svc)
    try:
        at(svc, 8.99)
        assert d.tick().warming == []  # before the fire: no target yet
        at(svc, 9)
        assert d.tick().warming == [Q.slot_name]  # the fire forces the round
        assert d.tick().warming == []
        assert svc.launcher.warms == [Q]
    finally:
        d.close()


def test_no_second_run_while_the_first_lives_and_a_new_one_when_it_died(
    svc: Services, dispatcher: Dispatcher
) -> None:
    at(svc, 9)
    assert dispatcher.tick().warming == [Q.slot_name]
    svc.clock.advance(5)
    assert dispatcher.tick().warming == []
    svc.launcher.alive.clear()  # the run died before recording anything
    svc.clock.advance(5)
    assert dispatcher.tick().warming == [Q.slot_name]


def test_the_run_creates_pools_up_to_the_target_and_they_wait_idle(svc: Services) -> None:
    at(svc, 9)
    ready = warm_run(svc)
    assert len(ready) == 2 and pools_of(svc, PoolState.IDLE) == sorted(ready)
    for name in ready:
        pool = svc.store.pool("c1", name)
        assert (pool.holder_task_id, pool.idle_since, pool.mode) == (
            None,
            svc.clock.now(),
            ProvisioningMode.FLEX_START,
        )
        assert svc.store.warm_origin("c1", name) == "morning"
    assert [m for m, _ in svc.store.calls if m in ("write_ahead_pool", "warm_pool_ready")] == [
        "write_ahead_pool",
        "write_ahead_pool",
        "warm_pool_ready",
        "warm_pool_ready",
    ]  # every pool recorded before GKE was asked for any
    assert svc.node_pools.count("create") == 2
    assert warm_run(svc) == [] and svc.node_pools.count("create") == 2  # at the target: nothing more


def test_reservation_room_for_one_of_two_gives_one_reservation_pool_and_one_flex_start() -> None:
    svc = tide(reservation="res-a")
    svc.reservations.set(RES, "us-east5-b", ReservationCapacity("res-a", 1, 0, "READY", "ct6e-standard-4t"))
    at(svc, 9)
    warm_run(svc)
    modes = sorted(p.mode for p in svc.store.pools_in([PoolState.IDLE]))
    assert modes == [ProvisioningMode.FLEX_START, ProvisioningMode.RESERVATION]
    assert sorted(p.initial_nodes for p in svc.node_pools.plans) == [0, 1]


def test_pools_being_created_count_so_nothing_goes_past_the_target(svc: Services) -> None:
    at(svc, 9)
    first = plan_warm_pools(svc, Q)
    assert len(first) == 2
    assert plan_warm_pools(svc, Q) == first  # a second run (or a retry) records nothing more
    assert svc.store.writes("write_ahead_pool") == 2
    assert to_warm(svc) == {Q}  # not short: its pools being created need a run to follow them
    create_warm_pools(svc, Q, first)
    assert to_warm(svc) == set()


# -- consumed, topped up at the next fire, trimmed --------------------------------------------------


def test_a_task_takes_a_warm_pool_and_its_message_names_the_rule(svc: Services) -> None:
    at(svc, 9)
    warm = sorted(warm_run(svc))
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    assert choice == PoolChoice(warm[0], None) and svc.node_pools.count("create") == 2
    assert svc.store.task("t1").message == f"Reusing warm node pool {warm[0]} (tidal rule morning)..."
    # Not replaced before the next fire: a replacement would queue ahead of the tasks that need
    # pools of their own on the cluster's one node-pool operation, and stand idle.
    assert to_warm(svc) == set()
    assert warm_run(svc) == [] and svc.node_pools.count("create") == 2
    assert len(pools_of(svc, PoolState.IDLE)) == 1


def test_the_next_fire_tops_the_queue_up_again(svc: Services) -> None:
    at(svc, 9)
    warm_run(svc)
    provision(svc, acquiring(svc, "t1"))
    at(svc, 33)  # the next morning's fire (T0 + 1 day + 9 h)
    assert to_warm(svc) == {Q}
    assert len(warm_run(svc)) == 1  # two idle again: one left from yesterday, one new
    assert len(pools_of(svc, PoolState.IDLE)) == 2


def test_the_next_fire_trims_the_idle_pools(svc: Services, dispatcher: Dispatcher) -> None:
    at(svc, 9)
    dispatcher.tick()
    warm = warm_run(svc)
    at(svc, 19.99)
    assert dispatcher.tick().reaped == []  # idle for hours, but the target keeps them
    at(svc, 20)
    assert sorted(dispatcher.tick().reaped) == sorted(warm)
    deadline = time.monotonic() + 5  # GKE is asked beside the round: later rounds confirm the deletions
    while pools_of(svc, PoolState.DELETED) != sorted(warm):
        assert time.monotonic() < deadline, "no round confirmed the deletions within 5 s"
        svc.clock.advance(svc.settings.poll_seconds)  # type: ignore[attr-defined]
        dispatcher.tick()
        time.sleep(0.01)
    assert pools_of(svc, PoolState.IDLE) == []


def test_a_pool_handed_back_after_the_fire_still_gets_its_grace(
    svc: Services, dispatcher: Dispatcher
) -> None:
    """Target 0 from 20:00, but a pool kept at 20:00 for a waiter (who then left) stays its grace."""
    at(svc, 20)
    svc.store.add_pool(idle_pool(since=svc.clock.now()))
    assert dispatcher.tick().reaped == []
    svc.clock.advance(svc.settings.pool_creation_prior_seconds + 1)  # the horizon while nothing is known
    assert dispatcher.tick().reaped == ["falcon-2x2-kept"]


# -- composing with delayed deletion at release -------------------------------------------------------


def _finish(svc: Services, task_id: str) -> None:
    task = svc.store.task(task_id)
    svc.jobs(svc.store.clusters()[0]).job(task.k8s_job_name).script.complete = True
    assert task_id in reconcile.follow_running(svc, clusters_of(svc)).ended


def test_a_finished_tasks_pool_is_kept_for_the_warm_target_though_nobody_waits(svc: Services) -> None:
    at(svc, 9)
    running(svc, "t1")
    _finish(svc, "t1")
    assert release(svc, "t1").status is Status.SUCCEEDED
    assert svc.store.pool("c1", svc.store.task("t1").node_pool_name).state is PoolState.IDLE


def test_a_finished_tasks_pool_goes_when_the_queue_already_has_its_target(svc: Services) -> None:
    arrivals(svc, Q)  # a queue used about once an hour: an idle pool is not worth keeping
    at(svc, 9)
    running(svc, "t1")
    warm_run(svc)  # two idle warm pools: the target is met
    _finish(svc, "t1")
    release(svc, "t1")
    assert svc.store.pool("c1", svc.store.task("t1").node_pool_name).state is PoolState.DELETED


def test_outside_the_warm_window_a_finished_tasks_pool_goes_as_before(svc: Services) -> None:
    arrivals(svc, Q)  # a queue used about once an hour: an idle pool is not worth keeping
    at(svc, 21)
    running(svc, "t1")
    _finish(svc, "t1")
    release(svc, "t1")
    assert svc.store.pool("c1", svc.store.task("t1").node_pool_name).state is PoolState.DELETED


# -- crashes, retries, failures ----------------------------------------------------------------------


def test_a_run_killed_after_recording_is_resumed_by_the_next_without_duplicates(
    svc: Services, dispatcher: Dispatcher
) -> None:
    at(svc, 9)
    dispatcher.tick()
    names = plan_warm_pools(svc, Q)  # the run records both pools, then dies
    svc.node_pools.add_existing(svc.store.clusters()[0], names[0])  # it had asked GKE for the first one
    svc.launcher.alive.clear()
    svc.clock.advance(5)
    assert dispatcher.tick().warming == [Q.slot_name]  # target met by pools being created: resumed anyway
    assert sorted(warm_run(svc)) == sorted(names)
    assert svc.store.writes("write_ahead_pool") == 2
    assert svc.node_pools.count("create", names[0]) == 1 and svc.node_pools.count("create", names[1]) == 1
    assert len(svc.node_pools.pools) == 2


def test_two_runs_at_once_create_each_pool_once(svc: Services) -> None:
    at(svc, 9)
    first, second = plan_warm_pools(svc, Q), plan_warm_pools(svc, Q)
    assert first == second
    assert sorted(create_warm_pools(svc, Q, first)) == sorted(first)
    assert create_warm_pools(svc, Q, second) == []  # idle already: nothing to create or wait for
    assert svc.node_pools.count("create") == 2 and len(svc.node_pools.pools) == 2


def test_a_failed_creation_deletes_the_pool_tells_the_rule_and_holds_the_queue(
    svc: Services, dispatcher: Dispatcher
) -> None:
    at(svc, 9)
    names = plan_warm_pools(svc, Q)
    svc.node_pools.script(names[0], error="stockout", operation_error="ZONE_RESOURCE_POOL_EXHAUSTED")
    assert create_warm_pools(svc, Q, names) == [names[1]]
    failed = svc.store.pool("c1", names[0])
    assert failed.state is PoolState.DELETING and svc.node_pools.count("delete", names[0]) == 1
    rule = next(r for r in svc.store.warm_rules() if r.name == "morning")
    assert rule.failed_at == svc.clock.now()
    assert "stockout" in (rule.last_error or "") and "ZONE_RESOURCE_POOL_EXHAUSTED" in (rule.last_error or "")
    svc.launcher.alive.clear()
    assert dispatcher.tick().warming == []  # one short, but held back after the failure
    assert svc.store.pool("c1", names[0]).state is PoolState.DELETED  # the reaper confirmed it
    svc.clock.advance(svc.settings.warm_retry_seconds)
    assert dispatcher.tick().warming == [Q.slot_name]


def test_a_pool_never_ready_fails_at_the_node_pool_deadline(svc: Services) -> None:
    at(svc, 9)
    names = plan_warm_pools(svc, Q)
    for name in names:
        svc.node_pools.script(name, never_ready=True)
    assert create_warm_pools(svc, Q, names) == []
    assert pools_of(svc, PoolState.DELETING) == sorted(names)
    assert "not ready within" in (svc.store.warm_rules()[1].last_error or "")


def test_an_unusable_reservation_is_told_to_the_rule_and_nothing_is_recorded() -> None:
    svc = tide(reservation="res-a")
    svc.reservations.set(RES, "us-east5-b", ReservationCapacity("res-a", 4, 0, "READY", "ct5p-hightpu-4t"))
    at(svc, 9)
    assert plan_warm_pools(svc, Q) == []
    assert "ct5p-hightpu-4t" in (svc.store.warm_rules()[1].last_error or "")
    assert svc.store.writes("write_ahead_pool") == 0


def test_a_cluster_not_active_is_not_warmed() -> None:
    svc = tide(status=ClusterStatus.MAINTENANCE)
    at(svc, 9)
    assert plan_warm_pools(svc, Q) == []
    assert to_warm(svc) == set()
