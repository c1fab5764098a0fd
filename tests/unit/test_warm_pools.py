"""Tidal warm pools, the pure part: a queue's target at an instant, when it may change next, how
many pools to create, and which idle pools may go when the warm target composes with delayed
deletion.

The target is level-triggered: per queue the rule(s) with the latest fire at or before now give
it (the most pools wins at one instant); a rule counts only fires since it was added. We test it
with the issue's example (weekday 09:00 → 2, daily 20:00 → 0) in a zone without DST
(Asia/Shanghai) and a rule in a DST zone across the spring jump (America/New_York).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from falcon.domain.model import QueueKey
from falcon.domain.scheduling import IdlePool, expired_idle_pools
from falcon.domain.warm_pools import (
    MAX_WARM_POOLS,
    NO_TARGET,
    WarmRule,
    WarmTarget,
    check_pools,
    check_rule_name,
    creation_held,
    needs_topping_up,
    next_change,
    schedulable,
    warm_deficit,
    warm_keeps,
    warm_pool_name,
    warm_target,
    warm_targets,
)

SHANGHAI = ZoneInfo("Asia/Shanghai")
NEW_YORK = ZoneInfo("America/New_York")
Q = QueueKey("c1", "2x4")
MORNING = "CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5"
EVENING = "CRON_TZ=Asia/Shanghai 0 0 20 * * *"
ADDED = datetime(2026, 3, 1, tzinfo=UTC)  # a Sunday
KEEP_FOR = timedelta(minutes=2)


def rule(name: str, cron: str, pools: int, queue: QueueKey = Q, added: datetime = ADDED) -> WarmRule:
    return WarmRule(name, queue, cron, pools, added)


def shanghai(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, second, tzinfo=SHANGHAI)


TIDE = [rule("morning", MORNING, 2), rule("evening", EVENING, 0)]


# -- the target -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param(
            shanghai(2, 8, 59, 59), WarmTarget(0, "evening", shanghai(1, 20)), id="Mon 08:59:59 (Sun 20:00)"
        ),
        pytest.param(shanghai(2, 9), WarmTarget(2, "morning", shanghai(2, 9)), id="Mon 09:00:00 fires"),
        pytest.param(shanghai(2, 19, 59, 59), WarmTarget(2, "morning", shanghai(2, 9)), id="Mon 19:59:59"),
        pytest.param(shanghai(2, 20), WarmTarget(0, "evening", shanghai(2, 20)), id="Mon 20:00:00 fires"),
        pytest.param(
            shanghai(7, 10), WarmTarget(0, "evening", shanghai(6, 20)), id="Sat 10:00: no weekday fire"
        ),
    ],
)
def test_the_latest_fire_gives_the_target(now: datetime, expected: WarmTarget) -> None:
    assert warm_target(TIDE, now) == expected


def test_the_target_flips_at_the_zones_instant_not_utcs() -> None:
    """Asia/Shanghai is UTC+8 all year: 09:00 there is 01:00 UTC."""
    assert warm_target(TIDE, datetime(2026, 3, 2, 0, 59, 59, tzinfo=UTC)).pools == 0
    assert warm_target(TIDE, datetime(2026, 3, 2, 1, 0, 0, tzinfo=UTC)).pools == 2


def test_a_dst_zone_rule_follows_local_time_across_the_jump() -> None:
    """09:00 New York is 14:00 UTC before 8 March 2026 (EST) and 13:00 UTC after (EDT)."""
    rules = [
        rule("ny-morning", "CRON_TZ=America/New_York 0 0 9 * * *", 3),
        rule("ny-night", "CRON_TZ=America/New_York 0 0 18 * * *", 0),
    ]
    assert warm_target(rules, datetime(2026, 3, 6, 13, 30, tzinfo=UTC)).pools == 0
    assert warm_target(rules, datetime(2026, 3, 6, 14, 0, tzinfo=UTC)).pools == 3
    assert warm_target(rules, datetime(2026, 3, 9, 13, 0, tzinfo=UTC)).pools == 3
    assert warm_target(rules, datetime(2026, 3, 9, 13, 0, tzinfo=UTC)).fired_at == datetime(
        2026, 3, 9, 9, tzinfo=NEW_YORK
    )


def test_a_fire_in_the_skipped_hour_counts_from_the_first_instant_after_the_jump() -> None:
    """02:30 does not exist in New York on 8 March 2026: the rule fires at 03:00 EDT (07:00 UTC)."""
    rules = [
        rule("ny", "CRON_TZ=America/New_York 0 30 2 * * *", 1, added=datetime(2026, 3, 8, 0, tzinfo=UTC))
    ]
    assert warm_target(rules, datetime(2026, 3, 8, 6, 59, 59, tzinfo=UTC)) == NO_TARGET
    assert warm_target(rules, datetime(2026, 3, 8, 7, 0, tzinfo=UTC)).pools == 1


def test_no_fire_since_the_rule_was_added_means_no_target() -> None:
    """Added Monday 10:00: Monday's 09:00 fire came before it, so the target waits for Tuesday's."""
    added = shanghai(2, 10).astimezone(UTC)
    rules = [rule("morning", MORNING, 2, added=added)]
    assert warm_target(rules, shanghai(2, 11)) == NO_TARGET
    assert warm_target(rules, shanghai(3, 9)).pools == 2
    assert warm_target([], shanghai(3, 9)) == NO_TARGET


def test_rules_firing_at_one_instant_the_most_pools_wins_and_the_others_are_named() -> None:
    rules = [rule("a", MORNING, 1), rule("b", MORNING, 3), rule("c", MORNING, 2), rule("later", EVENING, 0)]
    assert warm_target(rules, shanghai(2, 10)) == WarmTarget(3, "b", shanghai(2, 9), ("c", "a"))


def test_targets_are_per_queue() -> None:
    other = QueueKey("c2", "2x2")
    rules = [*TIDE, rule("other", "CRON_TZ=UTC 0 0 0 * * *", 1, queue=other)]
    targets = warm_targets(rules, shanghai(2, 10))
    assert {q: t.pools for q, t in targets.items()} == {Q: 2, other: 1}


def test_next_change_is_the_earliest_next_fire_of_any_rule() -> None:
    assert next_change(TIDE, shanghai(2, 10)) == shanghai(2, 20)
    assert next_change(TIDE, shanghai(2, 20)) == shanghai(3, 9)  # strictly after
    assert next_change(TIDE, shanghai(6, 21)) == shanghai(7, 20)  # Saturday: no 09:00
    assert next_change([], shanghai(2, 10)) is None


# -- what to create, and what may go ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "idle", "creating", "deficit"),
    [(2, 0, 0, 2), (2, 1, 0, 1), (2, 1, 1, 0), (2, 0, 2, 0), (2, 3, 0, 0), (0, 0, 0, 0)],
)
def test_the_deficit_counts_idle_pools_and_warm_pools_being_created(
    target: int, idle: int, creating: int, deficit: int
) -> None:
    assert warm_deficit(target, idle, creating) == deficit


@pytest.mark.parametrize(("target", "idle", "keeps"), [(2, 1, True), (2, 2, False), (0, 0, False)])
def test_a_finished_tasks_pool_is_kept_while_the_queue_is_below_its_target(
    target: int, idle: int, keeps: bool
) -> None:
    assert warm_keeps(target, idle) is keeps


def idle(name: str, minutes_idle: float, now: datetime, queue: QueueKey = Q) -> IdlePool:
    since = now - timedelta(minutes=minutes_idle)
    return IdlePool(queue.cluster_id, name, queue.topology, since, keep_for=KEEP_FOR, hold_for=KEEP_FOR * 10)


NOW = shanghai(2, 20).astimezone(UTC)


def test_without_warm_targets_each_pools_horizon_alone_decides() -> None:
    pools = [idle("old", 60, NOW), idle("fresh", 1, NOW)]
    assert expired_idle_pools(pools, {}, NOW, {}) == [pools[0]]


def test_the_warm_target_keeps_expired_pools_up_to_its_count_the_longest_idle_going_first() -> None:
    pools = [idle("newer", 30, NOW), idle("oldest", 90, NOW), idle("middle", 60, NOW)]
    assert expired_idle_pools(pools, {}, NOW, {Q: 3}) == []
    assert expired_idle_pools(pools, {}, NOW, {Q: 2}) == [pools[1]]
    assert expired_idle_pools(pools, {}, NOW, {Q: 1}) == [pools[1], pools[2]]
    assert expired_idle_pools(pools, {}, NOW, {Q: 0}) == pools


def test_the_target_is_a_count_a_fresh_pool_kept_for_its_horizon_fills_it_too() -> None:
    """Target 1 with two idle pools: the fresh one stays (its horizon keeps it) and fills the
    target, so the old one is kept by neither and goes; with target 2 both stay."""
    pools = [idle("old", 60, NOW), idle("fresh", 1, NOW)]
    assert expired_idle_pools(pools, {}, NOW, {Q: 1}) == [pools[0]]
    assert expired_idle_pools(pools, {}, NOW, {Q: 2}) == []


def test_waiting_tasks_and_the_target_compose_per_queue() -> None:
    other = QueueKey("c1", "2x2")
    pools = [idle("q-a", 30, NOW), idle("q-b", 30, NOW), idle("o-a", 10, NOW, other)]
    # other has a waiter (kept for its hold); Q has a target of 1: one of its two goes.
    assert expired_idle_pools(pools, {other: 1}, NOW, {Q: 1}) == [pools[0]]


# -- checks and names --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Morning", "-x", "x-", "a_b", "x" * 64, ""])
def test_a_rule_name_must_be_a_label(name: str) -> None:
    with pytest.raises(ValueError, match="rule name"):
        check_rule_name(name)
    check_rule_name("weekday-morning-2x4")


@pytest.mark.parametrize("pools", [-1, MAX_WARM_POOLS + 1])
def test_pools_must_be_between_0_and_the_maximum(pools: int) -> None:
    with pytest.raises(ValueError, match="pools"):
        check_pools(pools)
    check_pools(0)
    check_pools(MAX_WARM_POOLS)


def test_a_rule_whose_cron_does_not_parse_is_skipped_not_fatal() -> None:
    broken = rule(
        "broken", "0 0 9 * * *", 5
    )  # no CRON_TZ= prefix: add refuses it, a hand-written row may not
    assert schedulable([*TIDE, broken]) == TIDE


def test_a_failed_creation_holds_the_queue_back_for_a_while() -> None:
    failed = WarmRule("morning", Q, MORNING, 2, ADDED, "stockout", NOW)
    hold = timedelta(minutes=10)
    assert creation_held([failed], NOW + hold - timedelta(seconds=1), hold)
    assert not creation_held([failed], NOW + hold, hold)
    assert not creation_held(TIDE, NOW, hold)


def test_warm_pool_names_are_gke_names_distinct_per_instant_and_index() -> None:
    names = {warm_pool_name(Q, NOW, i) for i in range(3)} | {
        warm_pool_name(Q, NOW + timedelta(microseconds=1), 0)
    }
    assert len(names) == 4
    for name in names:
        assert name.startswith("falcon-2x4-w") and len(name) <= 40


def test_in_a_repeated_hour_the_latest_fire_is_the_latest_instant() -> None:
    """New York, 2026-11-01: at 01:40 EST (06:40Z) the hourly rule's second 01:10 (06:10Z) is later
    than the fixed rule's 01:30 EDT (05:30Z), though 01:10 reads earlier on the wall clock."""
    rules = [
        rule("hourly", "CRON_TZ=America/New_York 0 10 * * * *", 1),
        rule("half-past-one", "CRON_TZ=America/New_York 0 30 1 * * *", 3),
    ]
    target = warm_target(rules, datetime(2026, 11, 1, 6, 40, tzinfo=UTC))
    assert (target.rule, target.pools, target.fired_at) == (
        "hourly",
        1,
        datetime(2026, 11, 1, 6, 10, tzinfo=UTC),
    )


# -- once per fire --------------------------------------------------------------------------------

FIRE = datetime(2026, 3, 2, 1, 0, tzinfo=UTC)  # Monday 09:00 in Shanghai


@pytest.mark.parametrize(
    ("target", "warmed_fire_at", "expected"),
    [
        pytest.param(WarmTarget(2, "morning", FIRE), None, True, id="never-topped-up"),
        pytest.param(
            WarmTarget(2, "morning", FIRE), FIRE - timedelta(days=3), True, id="topped-up-last-fire"
        ),
        pytest.param(WarmTarget(2, "morning", FIRE), FIRE, False, id="this-fire-done"),
        pytest.param(NO_TARGET, None, False, id="no-rule-fired-yet"),
        pytest.param(WarmTarget(2, "gone", FIRE), None, True, id="winner-not-among-rules"),
    ],
)
def test_a_queue_is_topped_up_once_per_fire(
    target: WarmTarget, warmed_fire_at: datetime | None, expected: bool
) -> None:
    rules = [WarmRule("morning", Q, MORNING, 2, ADDED, warmed_fire_at=warmed_fire_at)]
    assert needs_topping_up(target, rules) is expected
