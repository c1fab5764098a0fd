"""The phase table and the rules beside it (falcon.domain.lifecycle).

We test: every (from, to) phase pair against PHASE_MOVES, as a named table and as a property;
the Outcome builders; the edges of the timeout rule (from dispatched_at, exactly at the deadline);
the nodes Falcon's pools hold on a reservation.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from falcon.domain.lifecycle import (
    LIVE_POOL_STATES,
    PHASE_MOVES,
    IllegalPhaseMoveError,
    NodePool,
    Outcome,
    Phase,
    PoolState,
    TaskEnded,
    aborted,
    check_phase_move,
    failed,
    reservation_nodes,
    reservation_pool_counts,
    succeeded,
    timed_out,
)
from falcon.domain.messages import Locale, MessageKey, Messages
from falcon.domain.model import Cluster, ClusterStatus, ProvisioningMode, QueueKey
from falcon.domain.status import Reason, Status

W, A, R, L, D = Phase.WAITING, Phase.ACQUIRING, Phase.RUNNING, Phase.RELEASING, Phase.DONE

# The moves Falcon makes, spelled out once more by hand: the table in the code must equal this.
LEGAL = {
    (None, W),  # intake queues a task
    (None, D),  # intake ends it at once (invalid, no cluster), or an abort of a row never taken in
    (W, A),  # picked
    (W, D),  # aborted while waiting
    (A, A),  # run id, lease, attempt recorded
    (A, R),  # all pods run
    (A, L),  # failed, timed out or aborted while acquiring
    (R, L),  # Job ended, vanished, timed out, aborted
    (L, L),  # release run recorded
    (L, D),  # terminal status written
    (D, D),  # a terminal row written again (idempotent release)
}
ALL_PAIRS = [(a, b) for a in [None, *Phase] for b in Phase]


def test_the_hand_written_table_is_the_code_table() -> None:
    assert {(a, b) for a, targets in PHASE_MOVES.items() for b in targets} == LEGAL
    assert set(PHASE_MOVES) == {None, *Phase}


@pytest.mark.parametrize(("current", "new"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_every_phase_pair(current: Phase | None, new: Phase) -> None:
    if (current, new) in LEGAL:
        check_phase_move(current, new)
    else:
        with pytest.raises(IllegalPhaseMoveError):
            check_phase_move(current, new)


@given(st.sampled_from([None, *Phase]), st.sampled_from(list(Phase)))
def test_check_phase_move_accepts_exactly_the_table(current: Phase | None, new: Phase) -> None:
    try:
        check_phase_move(current, new)
        accepted = True
    except IllegalPhaseMoveError:
        accepted = False
    assert accepted == (new in PHASE_MOVES[current])


def test_nothing_leaves_done_and_nothing_goes_back_to_waiting() -> None:
    assert PHASE_MOVES[D] == {D}
    assert all(W not in targets for current, targets in PHASE_MOVES.items() if current is not None)


SAY = Messages(Locale.EN)


def test_aborted_outcome() -> None:
    assert aborted(SAY) == Outcome(Status.ABORTED, None, "Aborted by user")


def test_succeeded_outcome_has_no_reason_and_an_empty_message() -> None:
    assert succeeded(SAY) == Outcome(Status.SUCCEEDED, None, "")


def test_failed_outcome_carries_reason_and_rendered_message() -> None:
    outcome = failed(SAY, Reason.NODE_POOL_FAILED, MessageKey.NODE_POOL_FAILED, detail="stockout")
    assert outcome == Outcome(Status.FAILED, Reason.NODE_POOL_FAILED, "Node pool creation failed: stockout")


def test_with_message_keeps_status_and_reason() -> None:
    outcome = failed(SAY, Reason.TIMEOUT, MessageKey.TIMEOUT, seconds=5).with_message("other")
    assert outcome == Outcome(Status.FAILED, Reason.TIMEOUT, "other")


def test_outcome_builders_follow_the_locale() -> None:
    assert aborted(Messages(Locale.ZH)).message == "用户中止"


def test_task_ended_carries_its_outcome() -> None:
    outcome = failed(SAY, Reason.JOB_FAILED, MessageKey.JOB_FAILED, detail="exit 1")
    ended = TaskEnded(outcome)
    assert ended.outcome is outcome
    assert str(ended) == "Failed JobFailed exit 1"


T = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("dispatched_at", "timeout", "now", "expected"),
    [
        pytest.param(None, 60, T + timedelta(days=1), False, id="never-dispatched-never-times-out"),
        pytest.param(T, None, T + timedelta(days=1), False, id="no-timeout"),
        pytest.param(T, 0, T + timedelta(days=1), False, id="zero-means-no-timeout"),
        pytest.param(T, 60, T + timedelta(seconds=59, microseconds=999999), False, id="just-before"),
        pytest.param(T, 60, T + timedelta(seconds=60), True, id="exactly-at-deadline"),
        pytest.param(T, 60, T + timedelta(seconds=61), True, id="after"),
        pytest.param(T, 60, T - timedelta(seconds=1), False, id="clock-before-dispatch"),
    ],
)
def test_timed_out_edges(
    dispatched_at: datetime | None, timeout: int | None, now: datetime, expected: bool
) -> None:
    assert timed_out(dispatched_at, timeout, now) is expected


def pool_on(cluster_id: str, topology: str, mode: ProvisioningMode, state: PoolState, name: str) -> NodePool:
    return NodePool(cluster_id, name, topology, "ct6e-standard-4t", mode, None, state, None)


def test_the_nodes_on_a_reservation_count_its_clusters_live_reservation_pools_by_slice() -> None:
    res, flex = ProvisioningMode.RESERVATION, ProvisioningMode.FLEX_START
    pools = [
        pool_on("c1", "4x4", res, PoolState.IN_USE, "a"),  # 4 nodes
        pool_on("c1", "2x4", res, PoolState.CREATING, "b"),  # 2
        pool_on("c1", "2x2", res, PoolState.DELETING, "c"),  # 1
        pool_on("c1", "2x2", res, PoolState.DELETED, "d"),  # gone
        pool_on("c1", "4x4", flex, PoolState.IDLE, "e"),  # not on the reservation
        pool_on("c2", "4x4", res, PoolState.IDLE, "f"),  # another cluster's
    ]
    edge = Cluster(
        "c1", "edge", "proj", "us-east5", "v6e", "logs", "res", ClusterStatus.ACTIVE, "falcon-jobs"
    )
    assert reservation_nodes(edge, reservation_pool_counts(pools, LIVE_POOL_STATES)) == 7
    up = [s for s in LIVE_POOL_STATES if s is not PoolState.CREATING]
    assert reservation_nodes(edge, reservation_pool_counts(pools, up)) == 5
    # a topology the cluster's TPU type does not have counts a node, and does not raise
    assert reservation_nodes(edge, {QueueKey("c1", "9x9x9"): 2}) == 2
