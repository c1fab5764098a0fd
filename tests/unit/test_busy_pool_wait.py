"""Waiting for a busy pool (issue 10): a task about to ask GKE for a new pool waits while the
chance that a busy pool of its queue frees before the new one would be ready is at least
``busy_wait_chance`` (here 1/2; off by default).

We test, as named cases: off by default, any positive chance at 0, a chance out of range
refused, the chance read from past runs longer than a Job has run so far (hand-computed), too
few such runs (no evidence: not freeing), two busy pools together, a pool whose Job has ended
(waited for), the wait's bound of one creation, the queue's own runs before the fleet's once
there are enough, the creation of the pool's mode (the prior until observed), junk durations
ignored, and the baselines (never wait).
As properties: the chance is within [0, 1], never falls with a longer window nor with one more
busy pool, and the policy never waits once the task has waited a creation's time.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from falcon.domain.model import ProvisioningMode
from falcon.domain.pool_economics import (
    BusyPools,
    CostPolicy,
    DeleteEachPolicy,
    KeepAllPolicy,
    QueueObservations,
    chance_one_frees_within,
)

RES, FLEX = ProvisioningMode.RESERVATION, ProvisioningMode.FLEX_START
PRIOR = 300.0
POLICY = CostPolicy(prior_creation_seconds=PRIOR, busy_wait_chance=0.5)
NOTHING_SEEN = QueueObservations()
PROPERTY = settings(max_examples=100, deadline=None)
# Ten past runs of 10 to 100 minutes, in seconds.
RUNS = tuple(600.0 * k for k in range(1, 11))


def waits(busy: BusyPools, waited: float = 0.0, observed: QueueObservations = NOTHING_SEEN) -> bool:
    return POLICY.wait_for_busy_pool(observed, RES, busy, waited)


@pytest.mark.parametrize(
    ("running", "window", "chance"),
    [
        # Runs longer than 50 min: 60..100 (five); within 5 more minutes: none.
        ((3000,), 300, 0.0),
        # Longer than 55 min: 60..100; ending by 60 min: one of five.
        ((3300,), 300, 0.2),
        # Longer than 55 min, ending by 75 min: 60, 70 of five.
        ((3300,), 1200, 0.4),
        # Longer than 0: all ten; ending within 30 min: 10, 20, 30.
        ((0,), 1800, 0.3),
        # Two Jobs at 55 min: 1 - (1 - 0.2)(1 - 0.2).
        ((3300, 3300), 300, 0.36),
        # At 55 and 50 min: 1 - (1 - 0.2)(1 - 0).
        ((3300, 3000), 300, 0.2),
    ],
)
def test_the_chance_is_the_share_of_longer_past_runs_that_ended_within_the_window(
    running: tuple[int, ...], window: int, chance: float
) -> None:
    runs_ms = [round(r * 1000) for r in RUNS]
    got = chance_one_frees_within([s * 1000 for s in running], runs_ms, window * 1000, min_runs=5)
    assert got == pytest.approx(chance)


def test_two_busy_pools_together_are_likelier_to_free_than_either() -> None:
    runs_ms = [round(r * 1000) for r in RUNS]
    one = chance_one_frees_within([3_300_000], runs_ms, 1_200_000, min_runs=5)
    both = chance_one_frees_within([3_300_000, 3_300_000], runs_ms, 1_200_000, min_runs=5)
    assert (one, both) == (pytest.approx(0.4), pytest.approx(1 - 0.6 * 0.6))


def test_a_job_with_fewer_than_min_runs_longer_past_runs_is_taken_as_not_freeing() -> None:
    runs_ms = [round(r * 1000) for r in RUNS]
    # Longer than 65 min: 70..100, four runs, three of which end within 30 min more.
    assert chance_one_frees_within([3_900_000], runs_ms, 1_800_000, min_runs=5) == 0.0
    assert chance_one_frees_within([3_900_000], runs_ms, 1_800_000, min_runs=4) == pytest.approx(0.75)


def test_off_by_default_and_at_0_any_chance_above_0() -> None:
    busy = BusyPools(running_for=(3480.0,), past_runs=RUNS)  # frees within 5 min: 1 in 5
    assert not CostPolicy(PRIOR).waits_for_busy_pools
    assert not CostPolicy(PRIOR).wait_for_busy_pool(NOTHING_SEEN, RES, BusyPools(ending=1), 0.0)
    at_any = CostPolicy(PRIOR, busy_wait_chance=0.0)
    assert at_any.waits_for_busy_pools and POLICY.waits_for_busy_pools
    assert at_any.wait_for_busy_pool(NOTHING_SEEN, RES, busy, 0.0)
    assert not waits(busy)  # 1 in 5 is under 1/2
    never = BusyPools(running_for=(3000.0,), past_runs=RUNS)  # none of the longer runs ends by 55 min
    assert not at_any.wait_for_busy_pool(NOTHING_SEEN, RES, never, 0.0)


@pytest.mark.parametrize("chance", [-0.1, 1.5, float("nan")])
def test_a_chance_out_of_range_is_refused(chance: float) -> None:
    with pytest.raises(ValueError, match="busy_wait_chance"):
        CostPolicy(PRIOR, busy_wait_chance=chance)


def test_a_task_waits_for_a_pool_likely_to_free_within_a_creation() -> None:
    # A creation is the prior, 5 min; a Job that has run 58 min: of the runs longer (60..100),
    # only the 60-minute one ends within 5 min more: 1 in 5, not likely.
    assert not waits(BusyPools(running_for=(3480.0,), past_runs=RUNS))
    # The same Job at 58 min with past runs mostly just over an hour: 4 of 5 end by 63 min.
    hourly = (3540.0, 3600.0, 3660.0, 3720.0, 4000.0, 600.0)
    assert waits(BusyPools(running_for=(3480.0,), past_runs=hourly))


def test_a_pool_whose_job_has_ended_is_waited_for() -> None:
    assert waits(BusyPools(ending=1))
    assert waits(BusyPools(running_for=(10.0,), ending=1))


def test_nothing_busy_or_no_evidence_creates_at_once() -> None:
    assert not waits(BusyPools())
    assert not waits(BusyPools(running_for=(3480.0,)))  # no past run at all
    assert not waits(BusyPools(running_for=(3480.0,), past_runs=(3540.0, 3600.0)))  # two: fewer than three


def test_the_wait_lasts_one_creation_at_most() -> None:
    assert waits(BusyPools(ending=1), waited=PRIOR - 0.001)
    assert not waits(BusyPools(ending=1), waited=PRIOR)
    observed = QueueObservations(creation_seconds={RES: (100.0, 100.0, 100.0)})
    assert not waits(BusyPools(ending=1), waited=100.0, observed=observed)  # the observed creation


def test_the_queues_own_runs_go_before_the_fleets_once_there_are_enough() -> None:
    hourly = (3540.0, 3600.0, 3660.0, 3720.0, 4000.0)
    # Too few of its own (two): the fleet's, which say "likely".
    assert waits(BusyPools(running_for=(3480.0,), past_runs=RUNS[:2], fleet_runs=hourly))
    # Five of its own say "not likely": the fleet is not asked.
    assert not waits(BusyPools(running_for=(3480.0,), past_runs=RUNS[5:], fleet_runs=hourly))


def test_the_creation_is_the_pools_modes() -> None:
    # Runs of 61-64 min and one of 70: a Job at 58 min ends within 5 min on four of five, within
    # 2 min on none.
    runs = (3660.0, 3720.0, 3780.0, 3840.0, 4200.0)
    busy = BusyPools(running_for=(3480.0,), past_runs=runs)
    quick_res = QueueObservations(creation_seconds={RES: (120.0,) * 3, FLEX: (600.0,) * 3})
    assert not POLICY.wait_for_busy_pool(quick_res, RES, busy, 0.0)
    assert POLICY.wait_for_busy_pool(quick_res, FLEX, busy, 0.0)


def test_junk_durations_are_ignored() -> None:
    hourly = (3540.0, 3600.0, 3660.0, 3720.0, 4000.0)
    junk = (float("nan"), -5.0, 0.0, 1e12)
    clean = BusyPools(running_for=(3480.0,), past_runs=hourly)
    dirty = BusyPools(running_for=(3480.0, float("nan"), -1.0, 1e12), past_runs=junk + hourly)
    assert waits(clean) == waits(dirty) is True


def test_the_baselines_never_wait() -> None:
    for baseline in (DeleteEachPolicy(), KeepAllPolicy()):
        assert not baseline.wait_for_busy_pool(NOTHING_SEEN, RES, BusyPools(ending=1), 0.0)


RUN_MS = st.lists(st.integers(1, 10_000_000), max_size=30)
ELAPSED_MS = st.lists(st.integers(0, 10_000_000), max_size=4)
WINDOW_MS = st.integers(0, 5_000_000)


@PROPERTY
@given(ELAPSED_MS, RUN_MS, WINDOW_MS, WINDOW_MS, st.integers(1, 6))
def test_the_chance_is_a_probability_that_a_longer_window_never_lowers(
    running: list[int], runs: list[int], w1: int, w2: int, min_runs: int
) -> None:
    short, long = sorted((w1, w2))
    low = chance_one_frees_within(running, runs, short, min_runs)
    high = chance_one_frees_within(running, runs, long, min_runs)
    assert 0.0 <= low <= high + 1e-12 <= 1.0 + 1e-12


@PROPERTY
@given(ELAPSED_MS, st.integers(0, 10_000_000), RUN_MS, WINDOW_MS, st.integers(1, 6))
def test_one_more_busy_pool_never_lowers_the_chance(
    running: list[int], more: int, runs: list[int], window: int, min_runs: int
) -> None:
    before = chance_one_frees_within(running, runs, window, min_runs)
    assert chance_one_frees_within([*running, more], runs, window, min_runs) >= before - 1e-12


@PROPERTY
@given(
    st.lists(st.floats(0, 1e6), max_size=4),
    st.integers(0, 3),
    st.lists(st.floats(0, 1e6), max_size=20),
    st.floats(0, 1e6),
)
def test_the_policy_never_waits_once_a_creation_has_passed(
    running: list[float], ending: int, runs: list[float], beyond: float
) -> None:
    busy = BusyPools(tuple(running), ending, tuple(runs), tuple(runs))
    assert not waits(busy, waited=PRIOR + beyond)
