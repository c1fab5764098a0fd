"""The job row's state machine: Status, Reason and the transitions Falcon may write.

The design (§9) keeps the upstream model of three fields: ``status`` says where the task is,
``reason`` says what Falcon is doing (Pending) or why it failed (Failed), ``message`` is for people.

    Pending(Waiting → Provisioning|ProvisioningFallback → Dispatching) → Running → Succeeded
       │                                                                   │
       └──────────────────────────► Failed ◄───────────────────────────────┘
    (any non-terminal) → Aborting (set by upstream) → Aborted

Falcon's internal progress (which phase an Aborting task was in, the queue slot lease, the
outcome waiting for node-pool cleanup) lives in ``falcon_task_progress``, not in the row.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PENDING = "Pending"  # accepted; Reason says which step of acquisition
    RUNNING = "Running"  # all pods Running; the queue slot is free again
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTING = "Aborting"  # set by upstream; Falcon finishes it as Aborted
    ABORTED = "Aborted"


class Reason(StrEnum):
    # Pending: what Falcon is doing
    WAITING = "Waiting"
    PROVISIONING = "Provisioning"
    PROVISIONING_FALLBACK = "ProvisioningFallback"
    DISPATCHING = "Dispatching"
    # Failed: why
    INVALID_SPEC = "InvalidSpec"
    NO_ELIGIBLE_CLUSTER = "NoEligibleCluster"
    NODE_POOL_TIMEOUT = "NodePoolTimeout"
    NODE_POOL_FAILED = "NodePoolFailed"
    JOB_SUBMIT_FAILED = "JobSubmitFailed"
    JOB_FAILED = "JobFailed"
    TIMEOUT = "Timeout"


TERMINAL: frozenset[Status] = frozenset({Status.SUCCEEDED, Status.FAILED, Status.ABORTED})
ACTIVE: frozenset[Status] = frozenset({Status.PENDING, Status.RUNNING, Status.ABORTING})

PENDING_REASONS: frozenset[Reason] = frozenset(
    {Reason.WAITING, Reason.PROVISIONING, Reason.PROVISIONING_FALLBACK, Reason.DISPATCHING}
)
ACQUIRING_REASONS: frozenset[Reason] = PENDING_REASONS - {Reason.WAITING}
FAILURE_REASONS: frozenset[Reason] = frozenset(Reason) - PENDING_REASONS

# Status changes Falcon itself may write. Aborting is written only by upstream.
ALLOWED: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.PENDING, Status.RUNNING, Status.FAILED}),
    Status.RUNNING: frozenset({Status.RUNNING, Status.SUCCEEDED, Status.FAILED}),
    Status.ABORTING: frozenset({Status.ABORTED}),
    Status.SUCCEEDED: frozenset(),
    Status.FAILED: frozenset(),
    Status.ABORTED: frozenset(),
}


class IllegalTransitionError(ValueError):
    pass


def check_transition(current: Status, new: Status, reason: Reason | None) -> None:
    """Raise unless Falcon may move a row from ``current`` to ``new`` with ``reason``.

    Reason is set only in Pending (a phase) and Failed (a cause), as the design requires.
    """
    if new not in ALLOWED[current]:
        raise IllegalTransitionError(f"{current} -> {new} is not a transition Falcon makes")
    if new is Status.PENDING and reason not in PENDING_REASONS:
        raise IllegalTransitionError(f"Pending needs a phase reason, got {reason}")
    if new is Status.FAILED and reason not in FAILURE_REASONS:
        raise IllegalTransitionError(f"Failed needs a failure reason, got {reason}")
    if new not in (Status.PENDING, Status.FAILED) and reason is not None:
        raise IllegalTransitionError(f"{new} carries no reason, got {reason}")
