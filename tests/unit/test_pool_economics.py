"""Keep-or-delete by cost (issue 10): the horizon an idle pool is kept for, and the reaper with it.

We test, as named cases: short gaps (kept for the longest of them), long gaps (deleted at once),
bursty gaps (an hour's lulls: deleted, since releases land in the lulls; minutes' lulls: kept
across them), a steady period against two creations, a new queue (the fleet's gaps; too few of
those too: the ski-rental horizon, one creation), the fleet's gaps per queue, creation times per
mode (flex-start dearer than the reservation), the prior until enough creations were seen,
deletions priced with the creation once enough were seen, a weighted start delay (which
keeps a steady period's pools that node-time alone deletes), junk durations ignored, the floor and
one spare at release, and the baselines.
As properties: the horizon's expected cost over the observed gaps, computed here gap by gap, is
the least of any horizon (so no more than h = 0 or h = C); it is never negative and grows with
the creation cost and with the weight of a task's start delay, which prices as that much longer a
creation; an observed deletion counts as that much more creation; junk never changes
it; a new queue is kept as the fleet up to one replacement, one with gaps enough as itself; the
fleet's gaps are every queue's gaps together; the floor always keeps; the baselines do as named;
and the reaper (each pool by its own horizon and hold, composed with tidal warm targets) deletes
exactly the pools neither keeps.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from falcon.domain.model import ProvisioningMode, QueueKey
from falcon.domain.pool_economics import (
    FOREVER,
    IDLE_WITH_WAITERS_FACTOR,
    CostPolicy,
    DeleteEachPolicy,
    KeepAllPolicy,
    KeepPolicy,
    QueueObservations,
    fleet_arrival_gaps,
)
from falcon.domain.scheduling import IdlePool, expired_idle_pools, keep_pool_after_task

RES, FLEX = ProvisioningMode.RESERVATION, ProvisioningMode.FLEX_START
PRIOR = 300.0
POLICY = CostPolicy(prior_creation_seconds=PRIOR)
PROPERTY = settings(max_examples=100, deadline=None)
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def seen(
    gaps: tuple[float, ...] = (),
    res: tuple[float, ...] = (),
    flex: tuple[float, ...] = (),
    deleted: tuple[float, ...] = (),
    fleet: tuple[float, ...] = (),
) -> QueueObservations:
    return QueueObservations(gaps, {RES: res, FLEX: flex}, deleted, fleet)


def seconds(duration: timedelta) -> float:
    return duration.total_seconds()


# --- the horizon, named cases -----------------------------------------------------------------

BURSTS = (15, 40, 90, 3600, 20, 60, 30, 5400, 25, 35, 80)  # three bursts of four, 1-1.5 h apart
SHORT_LULLS = (15, 40, 90, 400, 20, 60, 30, 500, 25, 35, 80)  # the same, 7-8 min apart


@pytest.mark.parametrize(
    ("observed", "mode", "horizon"),
    [
        pytest.param(seen((30, 45, 60, 50, 40)), RES, 60, id="short gaps: kept until the longest of them"),
        pytest.param(seen((900, 1200, 3600, 1000, 2000)), RES, 0, id="gaps beyond two creations: deleted"),
        pytest.param(seen(BURSTS), RES, 0, id="bursts an hour apart: deleted (releases land in the lulls)"),
        pytest.param(seen(SHORT_LULLS), RES, 500, id="bursts minutes apart: kept across the lulls"),
        pytest.param(seen((200, 3600, 4000, 5000, 6000, 7000)), RES, 0, id="one short gap among long ones"),
        pytest.param(seen((500,) * 6), RES, 500, id="steady, within two creations: kept for the period"),
        pytest.param(seen((600,) * 6), RES, 600, id="steady, two creations: a tie, kept (starts sooner)"),
        pytest.param(seen((650,) * 6), RES, 0, id="steady, beyond two creations: deleted"),
        pytest.param(seen((30, 40)), RES, PRIOR, id="two gaps: ski rental, one creation (the prior)"),
        pytest.param(
            seen((30, 40), res=(100, 120, 140)), RES, 120, id="two gaps: ski rental, the observed median"
        ),
        pytest.param(QueueObservations(), FLEX, PRIOR, id="nothing observed: one creation (the prior)"),
        pytest.param(seen((), res=(100, 120)), RES, PRIOR, id="two creations are not enough: the prior"),
        pytest.param(seen((), res=(100, 120, 140, 160)), RES, 120, id="an even count: the lower median"),
        pytest.param(
            seen((30, 40), res=(100, 120, 140), deleted=(50, 70, 90)),
            RES,
            120 + 70,
            id="deletions observed: replacing a pool is a creation and a deletion",
        ),
        pytest.param(
            seen((30, 40), deleted=(50, 70, 90)), RES, PRIOR + 70, id="the creation's prior, deletions seen"
        ),
        pytest.param(
            seen((30, 40), res=(100, 120, 140), deleted=(50, 70)),
            RES,
            120,
            id="two deletions are not enough: a deletion is not priced",
        ),
        pytest.param(
            seen((650,) * 6, deleted=(100, 100, 100)),
            RES,
            650,
            id="steady, beyond two creations, within two replacements: kept (deleted unpriced, above)",
        ),
        pytest.param(
            seen((850,) * 6, deleted=(100, 100, 100)), RES, 0, id="steady, beyond two replacements: deleted"
        ),
        pytest.param(
            seen((30, 40), fleet=(900, 1200, 3600, 1000, 2000)),
            RES,
            0,
            id="a new queue, the fleet's gaps beyond two creations: deleted",
        ),
        pytest.param(
            seen((), fleet=(30, 45, 60, 50, 40)), RES, 60, id="a new queue, the fleet's short gaps: kept"
        ),
        pytest.param(
            seen((30, 45, 60, 50, 40), fleet=(900, 1200, 3600, 1000, 2000)),
            RES,
            60,
            id="gaps enough of its own: the fleet's do not count",
        ),
        pytest.param(
            seen((30,), fleet=(500,) * 6),
            RES,
            PRIOR,
            id="the fleet keeps longer than one creation: ski rental",
        ),
        pytest.param(seen((30,), fleet=(900, 1200)), RES, PRIOR, id="too few of the fleet's too: ski rental"),
        pytest.param(
            seen((30,), fleet=(0, 0, 0, 0, 900)),
            RES,
            PRIOR,
            id="the fleet's zero gaps are no gaps: ski rental",
        ),
    ],
)
def test_horizon(observed: QueueObservations, mode: ProvisioningMode, horizon: float) -> None:
    assert seconds(POLICY.horizon(observed, mode)) == horizon


A, B, C = QueueKey("c1", "2x2"), QueueKey("c1", "4x4"), QueueKey("c2", "2x2")


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("arrivals", "gaps"),
    [
        pytest.param(
            [(A, at(0)), (B, at(5)), (A, at(10)), (B, at(30)), (A, at(35))], (10, 25, 25), id="two queues"
        ),
        pytest.param(
            [(A, at(35)), (B, at(30)), (A, at(0)), (B, at(5)), (A, at(10))], (10, 25, 25), id="any order"
        ),
        pytest.param([(A, at(0)), (B, at(1)), (C, at(2))], (), id="one arrival per queue: no gap"),
        pytest.param(
            [(A, at(0)), (A, at(0)), (A, at(7))], (0, 7), id="a batch: a zero gap (the policy drops it)"
        ),
        pytest.param([], (), id="no arrivals"),
    ],
)
def test_fleet_gaps_are_each_queues_own_gaps(arrivals: list[tuple[QueueKey, datetime]], gaps: tuple) -> None:
    assert fleet_arrival_gaps(arrivals) == gaps


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from([A, B, C]), st.integers(0, 10**6)), max_size=40))
def test_fleet_gaps_are_the_queues_gaps_together(arrivals: list[tuple[QueueKey, int]]) -> None:
    fleet = fleet_arrival_gaps((queue, at(ms / 1000)) for queue, ms in arrivals)
    each: list[float] = []
    for queue in {q for q, _ in arrivals}:
        times = sorted(ms for q, ms in arrivals if q == queue)
        each += [(b - a) / 1000 for a, b in itertools.pairwise(times)]
    assert Counter(fleet) == Counter(each)
    assert len(fleet) == len(arrivals) - len({q for q, _ in arrivals})


FEW_GAPS_MS = st.lists(st.integers(1, 3_000_000), max_size=9)  # either side of min_gaps


@PROPERTY
@given(FEW_GAPS_MS, FEW_GAPS_MS, st.sampled_from(list(ProvisioningMode)))
def test_a_new_queue_is_kept_as_the_fleet_and_an_old_one_as_itself(
    own: list[int], fleet: list[int], mode: ProvisioningMode
) -> None:
    own_s, fleet_s = tuple(g / 1000 for g in own), tuple(g / 1000 for g in fleet)
    horizon = POLICY.horizon(seen(own_s, fleet=fleet_s), mode)
    if len(own) >= POLICY.min_gaps:
        assert horizon == POLICY.horizon(seen(own_s), mode)
    else:  # as the fleet, at most ski rental's one replacement (the horizon of no gaps at all)
        assert horizon == min(POLICY.horizon(seen(fleet_s), mode), POLICY.horizon(seen(), mode))


def test_flex_start_creations_cost_more_so_its_pools_are_kept_longer() -> None:
    observed = seen((200, 250, 300, 400, 500, 600, 5000), res=(110, 120, 130), flex=(900, 1000, 1100))
    assert seconds(POLICY.horizon(observed, RES)) == 0  # a 2-minute creation beats any wait
    assert seconds(POLICY.horizon(observed, FLEX)) == 250  # a 16-minute one is worth the short rests


def test_only_the_newest_observations_count() -> None:
    policy = CostPolicy(PRIOR, min_creations=1, max_creations=2, min_gaps=1, max_gaps=3)
    observed = seen((50, 60, 70, 5000, 6000, 7000), res=(900, 100, 200))
    # C = median of (100, 200) = 100; gaps 5000-7000 all longer: delete at once.
    assert seconds(policy.horizon(observed, RES)) == 0
    assert seconds(policy.hold_for_waiters(observed, RES)) == IDLE_WITH_WAITERS_FACTOR * 100


@pytest.mark.parametrize(
    ("weight", "horizon"),
    [
        pytest.param(0.0, 0, id="node-time alone: a 900 s period is beyond two creations, deleted"),
        pytest.param(0.4, 0, id="weight 0.4: beyond two creations of 420 s, still deleted"),
        pytest.param(0.5, 900, id="weight 0.5: two creations of 450 s, a tie, kept for the period"),
        pytest.param(1.0, 900, id="weight 1: a minute's delay worth a node-minute, kept for the period"),
    ],
)
def test_a_weighted_start_delay_keeps_pools_across_longer_gaps(weight: float, horizon: float) -> None:
    policy = CostPolicy(PRIOR, start_delay_weight=weight)
    assert seconds(policy.horizon(seen((900,) * 6), RES)) == horizon


def test_the_start_delay_weighs_the_creation_not_the_deletion() -> None:
    observed = seen((30, 40), res=(100, 120, 140), deleted=(50, 70, 90))  # ski rental: C itself
    assert seconds(CostPolicy(PRIOR, start_delay_weight=2.0).horizon(observed, RES)) == 3 * 120 + 70


def test_a_pool_the_waiters_do_not_take_is_held_for_replacements_unweighted_by_the_start_delay() -> None:
    heavy = CostPolicy(PRIOR, start_delay_weight=4.0)
    assert seconds(heavy.hold_for_waiters(seen((30, 45, 60, 50, 40)), RES)) == 10 * PRIOR
    assert seconds(heavy.hold_for_waiters(seen((900,) * 6), RES)) == 10 * 900  # kept for the period


@pytest.mark.parametrize("junk", [float("nan"), float("inf"), -float("inf"), -30.0, 0.0, 1e30])
def test_junk_durations_are_ignored(junk: float) -> None:
    clean = seen((30, 45, 60, 50, 40), res=(100, 120, 140), deleted=(60, 70, 80))
    dirty = seen(
        (junk, 30, 45, junk, 60, 50, 40, junk),
        res=(junk, 100, 120, junk, 140),
        deleted=(junk, 60, 70, junk, 80, junk),
    )
    assert POLICY.horizon(dirty, RES) == POLICY.horizon(clean, RES)
    assert POLICY.hold_for_waiters(dirty, RES) == POLICY.hold_for_waiters(clean, RES)
    assert seconds(POLICY.horizon(seen((junk,) * 10, res=(junk,) * 5), RES)) == PRIOR


@pytest.mark.parametrize(
    ("observed", "hold"),
    [
        pytest.param(seen((30, 45, 60, 50, 40)), 10 * PRIOR, id="horizon below a creation: ten creations"),
        pytest.param(seen((500,) * 6), 10 * 500, id="horizon above a creation: ten horizons"),
    ],
)
def test_a_pool_is_held_for_waiters_who_do_not_take_it_ten_times_the_longer_of_horizon_and_creation(
    observed: QueueObservations, hold: float
) -> None:
    assert seconds(POLICY.hold_for_waiters(observed, RES)) == hold


@pytest.mark.parametrize(
    "policy",
    [
        {"prior_creation_seconds": 0},
        {"prior_creation_seconds": float("nan")},
        {"prior_creation_seconds": 1e12},
        {"prior_creation_seconds": PRIOR, "min_gaps": 0},
        {"prior_creation_seconds": PRIOR, "min_creations": 5, "max_creations": 4},
        {"prior_creation_seconds": PRIOR, "start_delay_weight": -0.5},
        {"prior_creation_seconds": PRIOR, "start_delay_weight": float("nan")},
        {"prior_creation_seconds": PRIOR, "start_delay_weight": 101},
    ],
)
def test_a_policy_that_cannot_decide_is_refused(policy: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CostPolicy(**policy)


# --- keep at release --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("waiting", "idle", "horizon", "keep"),
    [
        pytest.param(0, 0, 0, False, id="nobody waits, horizon 0: delete"),
        pytest.param(1, 0, 0, True, id="one waits: the floor keeps it"),
        pytest.param(12, 0, 0, True, id="many wait: keep"),
        pytest.param(1, 1, 0, False, id="one waits, a pool idle for it already: delete"),
        pytest.param(3, 2, 0, True, id="more wait than pools idle: keep"),
        pytest.param(0, 0, 60, True, id="nobody waits, horizon 60 s: keep for it"),
        pytest.param(1, 1, 60, True, id="waiter served already, horizon 60 s: keep one spare"),
        pytest.param(0, 1, 60, False, id="a spare idle already: delete"),
        pytest.param(2, 4, 60, False, id="spares beyond the waiters already: delete"),
    ],
)
def test_keep_at_release(waiting: int, idle: int, horizon: float, keep: bool) -> None:
    assert POLICY.keep_at_release(waiting, idle, lambda: timedelta(seconds=horizon)) is keep


def test_the_baselines_do_as_named() -> None:
    delete_each: KeepPolicy = DeleteEachPolicy()
    keep_all: KeepPolicy = KeepAllPolicy()
    observed = seen((30, 45, 60, 50, 40))
    assert delete_each.horizon(observed, RES) == delete_each.hold_for_waiters(observed, RES) == timedelta(0)
    assert not delete_each.keep_at_release(5, 0, lambda: timedelta(0))
    assert keep_all.horizon(observed, FLEX) == keep_all.hold_for_waiters(observed, FLEX) == FOREVER
    assert keep_all.keep_at_release(0, 9, lambda: FOREVER)


# --- properties -------------------------------------------------------------------------------

# Gaps in whole milliseconds, as the policy counts them, so the reference costs below are exact.
GAPS_MS = st.lists(st.integers(1, 3_000_000), min_size=5, max_size=40)
CREATION_MS = st.integers(1, 2_000_000)
JUNK = st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e20])


def spell_cost(gaps_ms: list[int], h: int, creation_ms: int) -> Fraction:
    """The expected node-time of an idle spell starting at a uniform instant of the observed span
    (in gap g with chance g / total, uniform within it), integrated here gap by gap."""

    def within(g: int) -> Fraction:  # E[cost | the spell starts in g] = E[min(rest, h)] + C P(rest > h)
        if g <= h:
            return Fraction(g, 2)
        return h - Fraction(h * h, 2 * g) + creation_ms * Fraction(g - h, g)

    return sum((Fraction(g, sum(gaps_ms)) * within(g) for g in gaps_ms), Fraction(0))


def policy_for(creation_ms: int) -> CostPolicy:
    return CostPolicy(creation_ms / 1000, max_gaps=1000)


def horizon_ms(policy: KeepPolicy, gaps_ms: list[int], mode: ProvisioningMode = RES) -> int:
    return policy.horizon(seen(tuple(g / 1000 for g in gaps_ms)), mode) // timedelta(milliseconds=1)


@PROPERTY
@given(GAPS_MS, CREATION_MS, st.lists(st.integers(0, 4_000_000), max_size=10))
def test_the_horizon_costs_least_of_any_horizon_on_the_observed_gaps(
    gaps: list[int], creation: int, others: list[int]
) -> None:
    chosen = spell_cost(gaps, horizon_ms(policy_for(creation), gaps), creation)
    for other in [0, creation, *gaps, *(g - 1 for g in gaps), *others]:
        assert chosen <= spell_cost(gaps, other, creation)


@PROPERTY
@given(GAPS_MS, CREATION_MS, CREATION_MS)
def test_a_dearer_creation_never_shortens_the_horizon(gaps: list[int], c1: int, c2: int) -> None:
    low, high = sorted((c1, c2))
    assert horizon_ms(policy_for(low), gaps) <= horizon_ms(policy_for(high), gaps)
    assert horizon_ms(policy_for(low), gaps[:2]) <= horizon_ms(policy_for(high), gaps[:2])  # ski rental


@PROPERTY
@given(GAPS_MS, CREATION_MS, st.integers(0, 20), st.integers(0, 20))
def test_a_heavier_start_delay_never_shortens_the_horizon_and_prices_as_a_longer_creation(
    gaps: list[int], creation: int, w1: int, w2: int
) -> None:
    light, heavy = (
        CostPolicy(creation / 1000, max_gaps=1000, start_delay_weight=w / 4) for w in sorted((w1, w2))
    )
    assert horizon_ms(light, gaps) <= horizon_ms(heavy, gaps)
    assert horizon_ms(heavy, gaps) == horizon_ms(
        policy_for(round(creation * (1 + heavy.start_delay_weight))), gaps
    )


@PROPERTY
@given(GAPS_MS, CREATION_MS, st.lists(st.integers(1, 2_000_000), min_size=3, max_size=8))
def test_an_observed_deletion_prices_like_that_much_more_creation(
    gaps: list[int], creation: int, deletions: list[int]
) -> None:
    """The policy's C is the creation plus the deletions' (lower) median, and nothing else moves."""
    deletion = sorted(deletions)[(len(deletions) - 1) // 2]
    observed = seen(tuple(g / 1000 for g in gaps), deleted=tuple(d / 1000 for d in deletions))
    with_deletions = policy_for(creation).horizon(observed, RES) // timedelta(milliseconds=1)
    assert with_deletions == horizon_ms(policy_for(creation + deletion), gaps)
    assert with_deletions >= horizon_ms(policy_for(creation), gaps)


@PROPERTY
@given(
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), JUNK), max_size=30),
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), JUNK), max_size=10),
    st.sampled_from(list(ProvisioningMode)),
)
def test_any_observation_gives_a_horizon_neither_negative_nor_beyond_the_hold(
    gaps: list[float], creations: list[float], mode: ProvisioningMode
) -> None:
    observed = QueueObservations(tuple(gaps), {mode: tuple(creations)})
    horizon = POLICY.horizon(observed, mode)
    assert timedelta(0) <= horizon <= POLICY.hold_for_waiters(observed, mode)


@PROPERTY
@given(GAPS_MS, st.lists(st.tuples(st.integers(0, 45), JUNK), max_size=8))
def test_junk_anywhere_never_changes_the_horizon(gaps: list[int], junk: list[tuple[int, float]]) -> None:
    dirty: list[float] = [g / 1000 for g in gaps]
    for position, value in junk:
        dirty.insert(position, value)
    assert POLICY.horizon(seen(tuple(dirty)), RES) == POLICY.horizon(seen(tuple(g / 1000 for g in gaps)), RES)


@PROPERTY
@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 10**9))
def test_the_floor_always_keeps_and_the_baselines_never_or_always(
    waiting: int, idle: int, horizon: int
) -> None:
    asked: list[int] = []

    def kept_for() -> timedelta:
        asked.append(horizon)
        return timedelta(milliseconds=horizon)

    one_spare = horizon > 0 and idle == waiting
    assert POLICY.keep_at_release(waiting, idle, kept_for) is (
        keep_pool_after_task(waiting, idle) or one_spare
    )
    assert len(asked) == (idle == waiting)  # learning the horizon costs queries: only when it decides
    if waiting > idle:
        assert POLICY.keep_at_release(waiting, idle, lambda: timedelta(0))
    assert not DeleteEachPolicy().keep_at_release(waiting, idle, kept_for)
    assert KeepAllPolicy().keep_at_release(waiting, idle, kept_for)


@PROPERTY
@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 10**9))
def test_takers_beyond_one_more_than_the_idle_pools_never_change_the_answer(
    takers: int, idle: int, horizon: int
) -> None:
    """settle_pool counts the queue's waiting tasks only up to idle + 1."""
    counted = min(takers, idle + 1)
    for policy in (POLICY, DeleteEachPolicy(), KeepAllPolicy()):
        answer = policy.keep_at_release(takers, idle, lambda: timedelta(milliseconds=horizon))
        assert policy.keep_at_release(counted, idle, lambda: timedelta(milliseconds=horizon)) is answer


# --- the reaper with per-pool horizons and warm targets -------------------------------------------

QUEUES = [QueueKey("c1", "2x4"), QueueKey("c1", "4x4"), QueueKey("c2", "2x4")]
MINUTES = st.integers(0, 120)


@st.composite
def idle_pools(draw: st.DrawFn) -> list[IdlePool]:
    pools = []
    for i in range(draw(st.integers(0, 8))):
        queue = draw(st.sampled_from(QUEUES))
        keep_for = draw(st.one_of(MINUTES.map(lambda m: timedelta(minutes=m)), st.just(FOREVER)))
        hold_for = draw(st.one_of(MINUTES.map(lambda m: timedelta(minutes=m)), st.just(FOREVER)))
        idle_since = NOW - timedelta(minutes=draw(MINUTES))
        pools.append(IdlePool(queue.cluster_id, f"p{i}", queue.topology, idle_since, keep_for, hold_for))
    return pools


def own_rule_expires(pool: IdlePool, waiting: dict[QueueKey, int]) -> bool:
    queue = QueueKey(pool.cluster_id, pool.topology)
    if waiting.get(queue, 0):
        return NOW - pool.idle_since > max(pool.keep_for, pool.hold_for)
    return NOW - pool.idle_since > pool.keep_for


@PROPERTY
@given(
    idle_pools(),
    st.dictionaries(st.sampled_from(QUEUES), st.integers(0, 3)),
    st.one_of(st.none(), st.dictionaries(st.sampled_from(QUEUES), st.integers(0, 4))),
)
def test_the_reaper_deletes_what_neither_the_pools_own_horizon_nor_the_warm_target_keeps(
    pools: list[IdlePool], waiting: dict[QueueKey, int], warm: dict[QueueKey, int] | None
) -> None:
    reaped = expired_idle_pools(pools, waiting, NOW, warm)
    expired = [pool for pool in pools if own_rule_expires(pool, waiting)]
    assert [p for p in pools if p in reaped] == reaped  # a subsequence, in the order given
    assert all(p in expired for p in reaped)
    assert not any(p.keep_for == FOREVER for p in reaped)  # kept forever means forever
    idle, gone = Counter(QueueKey(p.cluster_id, p.topology) for p in pools), Counter[QueueKey]()
    for pool in reaped:
        gone[QueueKey(pool.cluster_id, pool.topology)] += 1
    for queue, count in idle.items():
        target = (warm or {}).get(queue, 0)
        might_go = sum(1 for p in expired if QueueKey(p.cluster_id, p.topology) == queue)
        assert gone[queue] == min(might_go, max(0, count - target))
