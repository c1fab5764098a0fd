"""The job row's state machine (design §9), checked over every (from, to, reason) triple.

We test: exactly the status moves Falcon makes are allowed, Pending carries a phase reason,
Failed carries a cause, every other status carries no reason; terminal statuses go nowhere;
Aborting is never written by Falcon; the reason sets partition Reason.
"""

from __future__ import annotations

import itertools

import pytest

from falcon.domain.status import (
    ACQUIRING_REASONS,
    ACTIVE,
    FAILURE_REASONS,
    PENDING_REASONS,
    TERMINAL,
    IllegalTransitionError,
    Reason,
    Status,
    check_transition,
)

S = Status
R = Reason

# Written out from the design rather than derived from status.ALLOWED, so the test can disagree.
MOVES = {
    (S.PENDING, S.PENDING),  # Waiting -> Provisioning -> Dispatching
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.FAILED),  # any phase can fail
    (S.RUNNING, S.RUNNING),  # message updates
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.ABORTING, S.ABORTED),
}
PHASES = {R.WAITING, R.PROVISIONING, R.PROVISIONING_FALLBACK, R.DISPATCHING}
CAUSES = {
    R.INVALID_SPEC,
    R.NO_ELIGIBLE_CLUSTER,
    R.NODE_POOL_TIMEOUT,
    R.NODE_POOL_FAILED,
    R.JOB_SUBMIT_FAILED,
    R.JOB_FAILED,
    R.TIMEOUT,
}


def allowed(current: Status, new: Status, reason: Reason | None) -> bool:
    if (current, new) not in MOVES:
        return False
    if new is S.PENDING:
        return reason in PHASES
    if new is S.FAILED:
        return reason in CAUSES
    return reason is None


def triple_id(current: Status, new: Status, reason: Reason | None) -> str:
    return f"{current}->{new} [{reason or '-'}]"


TRIPLES = list(itertools.product(Status, Status, [None, *Reason]))


@pytest.mark.parametrize(
    ("current", "new", "reason"),
    [pytest.param(*t, id=triple_id(*t)) for t in TRIPLES if allowed(*t)],
)
def test_allowed_transition(current: Status, new: Status, reason: Reason | None) -> None:
    check_transition(current, new, reason)


@pytest.mark.parametrize(
    ("current", "new", "reason"),
    [pytest.param(*t, id=triple_id(*t)) for t in TRIPLES if not allowed(*t)],
)
def test_refused_transition(current: Status, new: Status, reason: Reason | None) -> None:
    with pytest.raises(IllegalTransitionError):
        check_transition(current, new, reason)


@pytest.mark.parametrize(
    ("current", "new", "reason", "message"),
    [
        pytest.param(S.SUCCEEDED, S.RUNNING, None, "Succeeded -> Running", id="terminal goes nowhere"),
        pytest.param(S.PENDING, S.ABORTING, None, "Pending -> Aborting", id="Aborting is upstream's"),
        pytest.param(S.PENDING, S.PENDING, None, "Pending needs a phase reason", id="Pending without reason"),
        pytest.param(
            S.RUNNING, S.FAILED, R.WAITING, "Failed needs a failure reason", id="Failed with a phase"
        ),
        pytest.param(
            S.RUNNING, S.SUCCEEDED, R.JOB_FAILED, "Succeeded carries no reason", id="Succeeded+reason"
        ),
    ],
)
def test_refusals_say_why(current: Status, new: Status, reason: Reason | None, message: str) -> None:
    with pytest.raises(IllegalTransitionError, match=message):
        check_transition(current, new, reason)


def test_reason_sets_partition_reason() -> None:
    assert PENDING_REASONS == PHASES
    assert FAILURE_REASONS == CAUSES
    assert set(Reason) == PENDING_REASONS | FAILURE_REASONS
    assert not PENDING_REASONS & FAILURE_REASONS
    assert PHASES - {R.WAITING} == ACQUIRING_REASONS


def test_status_sets_partition_status() -> None:
    assert {S.SUCCEEDED, S.FAILED, S.ABORTED} == TERMINAL
    assert set(Status) == TERMINAL | ACTIVE
    assert not TERMINAL & ACTIVE


def test_status_values_match_the_upstream_job_model() -> None:
    assert [s.value for s in Status] == ["Pending", "Running", "Succeeded", "Failed", "Aborting", "Aborted"]
