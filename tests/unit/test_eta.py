"""The ETA to Running (issue 11): a queue's observed acquisitions resampled.

We test, as named cases: too little history is no estimate (junk does not count), a steady queue
gives position times one acquisition with no spread, the current acquisition's elapsed time is
taken off its remaining time, one that outlasted every observation counts as done and says so,
only the newest HISTORY acquisitions count, a two-mode queue (reused pools and flex-start waits)
spans both modes, and the durations read from (pick, Running) pairs drop what cannot be one.
As properties: the estimate and both bounds never fall as the position grows; the interval holds
the point and never goes below zero; the point lies between k of the shortest and the longest
remaining plus k of the longest; the same observations seen twice keep the point and narrow or
keep the interval; and the answer depends on the inputs alone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from falcon.domain.eta import (
    HISTORY,
    MIN_OBSERVATIONS,
    Estimate,
    NoEstimate,
    acquisition_seconds,
    estimate_to_running,
)

PROPERTY = settings(max_examples=150, deadline=None)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def estimate(history: list[float], acquisitions: int, elapsed: float | None = None) -> Estimate:
    found = estimate_to_running(history, acquisitions, elapsed)
    assert isinstance(found, Estimate), found
    return found


# --- named cases --------------------------------------------------------------------------------


def test_fewer_than_three_usable_acquisitions_is_no_estimate() -> None:
    assert MIN_OBSERVATIONS == 3
    assert estimate_to_running([300.0, 420.0], 2, None) == NoEstimate(2)
    assert estimate_to_running([300.0, 420.0, -5.0, float("nan"), 4e8], 2, 60.0) == NoEstimate(2)
    assert isinstance(estimate_to_running([300.0, 420.0, 360.0], 2, None), Estimate)


def test_a_steady_queue_gives_position_times_one_acquisition_with_no_spread() -> None:
    steady = [300.0] * 8
    assert estimate(steady, 3) == Estimate(900.0, 900.0, 900.0, 8)
    assert estimate(steady, 1) == Estimate(300.0, 300.0, 300.0, 8)


def test_the_current_acquisitions_elapsed_time_is_taken_off_its_remaining_time() -> None:
    steady = [300.0] * 8
    assert estimate(steady, 2, elapsed=100.0) == Estimate(800.0, 800.0, 800.0, 8)
    assert estimate(steady, 0, elapsed=100.0).seconds == 200.0  # the acquiring task itself


def test_a_current_acquisition_past_every_observation_counts_as_done_and_says_so() -> None:
    found = estimate([300.0] * 8, 2, elapsed=900.0)
    assert found == Estimate(600.0, 600.0, 600.0, 8, beyond_history=True)
    assert not estimate([300.0] * 8, 2, elapsed=200.0).beyond_history


def test_only_the_newest_history_acquisitions_count() -> None:
    assert HISTORY == 10
    old_fast, recent_slow = [60.0] * 50, [600.0] * HISTORY
    assert estimate(old_fast + recent_slow, 2).seconds == 1200.0
    assert estimate(recent_slow + old_fast, 2).seconds == 120.0


def test_a_queue_of_reused_pools_and_flex_start_waits_spans_both_modes() -> None:
    mixed = [60.0, 1200.0, 70.0, 1500.0, 65.0, 1100.0, 75.0, 1300.0]
    found = estimate(mixed, 1)
    assert found.low <= 75.0 and found.high >= 1200.0
    two = estimate(mixed, 2)
    assert two.low <= 2 * 75.0 + 1 and two.high >= 2400.0


def test_wider_history_gives_a_wider_interval() -> None:
    narrow = estimate([290.0, 300.0, 310.0, 295.0, 305.0], 3)
    wide = estimate([100.0, 300.0, 500.0, 200.0, 400.0], 3)
    assert wide.high - wide.low > 3 * (narrow.high - narrow.low)


def test_durations_come_from_pick_and_running_pairs_dropping_what_cannot_be_one() -> None:
    def at(minutes: float) -> datetime:
        return T0 + timedelta(minutes=minutes)

    spans = [
        (at(0), at(5)),
        (at(10), None),  # still acquiring
        (None, at(20)),  # picked before Falcon kept the pick time
        (at(30), at(29)),  # a clock step
        (at(0), at(0) + timedelta(days=400)),  # a broken timestamp
        (at(40), at(47.5)),
    ]
    assert acquisition_seconds(spans) == (300.0, 450.0)


def test_a_negative_position_is_a_bug() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        estimate_to_running([300.0] * 3, -1, None)


# --- properties ---------------------------------------------------------------------------------

durations = st.floats(min_value=0.0, max_value=7200.0, allow_nan=False)
histories = st.lists(durations, min_size=MIN_OBSERVATIONS, max_size=HISTORY)
elapsed_times = st.none() | st.floats(min_value=0.0, max_value=9000.0, allow_nan=False)


@PROPERTY
@given(histories, elapsed_times, st.integers(min_value=0, max_value=12))
def test_the_estimate_and_its_bounds_never_fall_as_the_position_grows(
    history: list[float], elapsed: float | None, k: int
) -> None:
    here, behind = estimate(history, k, elapsed), estimate(history, k + 1, elapsed)
    assert behind.seconds >= here.seconds
    assert behind.low >= here.low
    assert behind.high >= here.high


@PROPERTY
@given(histories, elapsed_times, st.integers(min_value=0, max_value=12))
def test_the_interval_holds_the_point_within_what_the_history_allows(
    history: list[float], elapsed: float | None, k: int
) -> None:
    found = estimate(history, k, elapsed)
    assert 0.0 <= found.low <= found.seconds <= found.high
    longest_rest = max((d - elapsed for d in history if elapsed is not None and d > elapsed), default=0.0)
    slack = 1e-9 * (1 + found.seconds)  # float sums of k draws against k times one
    assert k * min(history) - slack <= found.seconds <= longest_rest + k * max(history) + slack


@PROPERTY
@given(
    st.lists(durations, min_size=MIN_OBSERVATIONS, max_size=HISTORY // 2),
    elapsed_times,
    st.integers(min_value=0, max_value=12),
)
def test_the_same_observations_seen_twice_keep_the_point_and_narrow_or_keep_the_interval(
    history: list[float], elapsed: float | None, k: int
) -> None:
    once, twice = estimate(history, k, elapsed), estimate(history * 2, k, elapsed)
    assert twice.seconds == once.seconds
    assert twice.high - twice.low <= once.high - once.low
    assert twice.observations == 2 * once.observations


@PROPERTY
@given(histories, elapsed_times, st.integers(min_value=0, max_value=12))
def test_the_answer_depends_on_the_inputs_alone(history: list[float], elapsed: float | None, k: int) -> None:
    first = estimate(history, k, elapsed)
    estimate(list(reversed(history)), k + 3, None)  # another call in between changes nothing
    assert estimate(history, k, elapsed) == first
