"""`falcon task why`: in words, why a task is where it is, and when it should run.

A pure function of plain facts the command reads beforehand (the row, Falcon's progress row, the
queue's waiting order, its acquiring task and that task's pool, the reservation, the queue's
acquisitions) and of ``now``: one sentence per line, each answering one question a user asks —
where am I, who is ahead, what is the queue waiting for and since when, is there reservation
room, and when will I run (``domain/eta.py``). English only: it is an operator's tool, beside
the row's Message, which stays in the configured locale and is quoted as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from falcon.domain.eta import Estimate, NoEstimate, estimate_to_running
from falcon.domain.lifecycle import Outcome, Phase, PoolState
from falcon.domain.model import ProvisioningMode, Task
from falcon.domain.scheduling import ReservationCapacity, WaitingTask
from falcon.domain.status import TERMINAL, Reason, Status

AHEAD_ACTORS = 5  # actors named in the "ahead" line before the rest are counted


@dataclass(frozen=True)
class PoolFacts:
    """A node pool as Falcon recorded it (written before GKE was asked)."""

    name: str
    mode: ProvisioningMode
    state: PoolState
    reservation: str | None
    created_at: datetime
    ready_at: datetime | None


@dataclass(frozen=True)
class Acquirer:
    """The task holding a queue's slot: from its pick until its pods run."""

    task_id: str
    actor: str
    name: str
    reason: Reason | None
    message: str | None
    acquiring_at: datetime | None  # None: picked before Falcon recorded it
    dispatched_at: datetime | None
    pool: PoolFacts | None


@dataclass(frozen=True)
class ReservationRoom:
    """The cluster's reservation: what Falcon's own pools hold on it, and Compute's count if asked."""

    name: str
    pools: int  # Falcon's live pools on it, in this cluster
    nodes: int  # their nodes
    needed: int  # nodes one pool of the task's queue takes
    capacity: ReservationCapacity | None = None  # Compute's answer, when asked
    problem: str | None = None  # why Compute gave none, when asked


@dataclass(frozen=True)
class WhyFacts:
    """Everything `why` says about one task, read in one unit of work."""

    task: Task
    phase: Phase | None  # None: intake has not taken the row in
    queue: str | None  # "cluster/topology"
    cluster: str | None  # the cluster's name
    acquiring_at: datetime | None = None
    running_at: datetime | None = None
    outcome: Outcome | None = None  # known once it releases
    order: tuple[WaitingTask, ...] = ()  # the queue's waiting tasks, in pick order
    acquirer: Acquirer | None = None  # the queue's acquiring task; the task itself when it acquires
    reservation: ReservationRoom | None = None  # None: the cluster has none (or is unknown)
    history: tuple[float, ...] = ()  # the queue's acquisitions in seconds, oldest first


def explain(facts: WhyFacts, now: datetime) -> list[str]:
    """The lines `falcon task why` prints."""
    task = facts.task
    lines = [_headline(facts)]
    if task.message:
        lines.append(f'Message: "{task.message}"')
    if task.status in TERMINAL:
        return [*lines, _ended(task, now)]
    if task.status is Status.ABORTING:
        return [*lines, _aborting(facts, now)]
    if task.status is Status.RUNNING:
        return [*lines, _running(facts, now)]
    if facts.phase is None or task.reason is None:
        return [*lines, "Not taken in yet: the dispatcher has not read this row (it polls every 0.5 s)."]
    if task.reason is Reason.WAITING:
        return [*lines, *_waiting(facts, now)]
    return [*lines, *_acquiring(facts, now)]


def _headline(facts: WhyFacts) -> str:
    task = facts.task
    where = f" in queue {facts.queue}" if facts.queue else ""
    state = f"{task.status.value}/{task.reason.value}" if task.reason else task.status.value
    return f"{task.id} ({task.actor}: {task.name}) is {state}{where}."


def _ended(task: Task, now: datetime) -> str:
    when = f" at {_clock(task.finished_at, now)}" if task.finished_at else ""
    why = f" ({task.reason.value})" if task.reason else ""
    return f"{task.status.value}{why}{when}: it is finished; nothing is waited for."


def _aborting(facts: WhyFacts, now: datetime) -> str:
    since = f" since {_clock(facts.task.aborting_at, now)}" if facts.task.aborting_at else ""
    was = f" (it was {facts.phase.value})" if facts.phase else ""
    return f"Abort requested{since}{was}: Falcon deletes its Job and node pool, then writes Aborted."


def _running(facts: WhyFacts, now: datetime) -> str:
    if facts.phase is Phase.RELEASING and facts.outcome:
        return (
            f"Its Job ended ({facts.outcome.status.value}); Falcon is deleting the Job and keeping or "
            "deleting its node pool, then writes the outcome."
        )
    since = facts.running_at or facts.task.dispatched_at
    if since is None:
        return "Running."
    took = ""
    if facts.running_at and facts.acquiring_at:
        took = f"; it took {_duration((facts.running_at - facts.acquiring_at).total_seconds())} from its pick"
    return f"Running since {_clock(since, now)} ({_duration((now - since).total_seconds())}){took}."


def _waiting(facts: WhyFacts, now: datetime) -> list[str]:
    ids = [t.task_id for t in facts.order]
    if facts.task.id not in ids:
        return ["Not in its queue's waiting order any more: it is being picked right now."]
    position = ids.index(facts.task.id) + 1
    lines = [_position(facts, position), _queue_slot(facts.acquirer, position, now)]
    if facts.reservation is not None or facts.cluster:
        lines.append(_reservation(facts))
    elapsed = _elapsed(facts.acquirer.acquiring_at, now) if facts.acquirer else None
    return [*lines, _eta(estimate_to_running(facts.history, position, elapsed), now)]


def _position(facts: WhyFacts, position: int) -> str:
    counts = ahead_actors(facts.order, facts.task.id)
    if not counts:
        return f"Waiting: 1st in queue {facts.queue}; nobody is ahead."
    named = [f"{actor} ({n})" for actor, n in list(counts.items())[:AHEAD_ACTORS]]
    if len(counts) > AHEAD_ACTORS:
        named.append(
            f"{len(counts) - AHEAD_ACTORS} more actor(s) ({sum(list(counts.values())[AHEAD_ACTORS:])})"
        )
    return f"Waiting: {_ordinal(position)} in queue {facts.queue}; ahead: {', '.join(named)}."


def _queue_slot(acquirer: Acquirer | None, position: int, now: datetime) -> str:
    if acquirer is None:
        if position == 1:
            return "Nobody holds the queue's slot: the dispatcher picks this task at its next tick."
        return "Nobody holds the queue's slot: the dispatcher picks the first task at its next tick."
    return f"The queue's acquiring task {acquirer.task_id} ({acquirer.actor}) {_waits_for(acquirer, now)}."


def _acquiring(facts: WhyFacts, now: datetime) -> list[str]:
    own = facts.acquirer
    if own is None or own.task_id != facts.task.id:
        own = Acquirer(
            facts.task.id,
            facts.task.actor,
            facts.task.name,
            facts.task.reason,
            facts.task.message,
            facts.acquiring_at,
            facts.task.dispatched_at,
            None,
        )
    lines = [f"Acquiring (holds the slot of queue {facts.queue}): it {_waits_for(own, now)}."]
    if facts.reservation is not None or facts.cluster:
        lines.append(_reservation(facts))
    return [*lines, _eta(estimate_to_running(facts.history, 0, _elapsed(own.acquiring_at, now)), now)]


def _waits_for(acquirer: Acquirer, now: datetime) -> str:
    """What an acquiring task waits for, and since when: its pool, its Job's pods, or the pick's
    first step."""
    held = ""
    if acquirer.acquiring_at is not None:
        held = f", holding the slot since {_clock(acquirer.acquiring_at, now)}"
    pool = acquirer.pool
    if acquirer.dispatched_at is not None:
        waited = _duration((now - acquirer.dispatched_at).total_seconds())
        submitted = _clock(acquirer.dispatched_at, now)
        return f"has waited {waited} for its pods to start (Job submitted at {submitted}){held}"
    if pool is None:
        since = (
            _duration((now - acquirer.acquiring_at).total_seconds()) if acquirer.acquiring_at else "a while"
        )
        return f"has held the slot {since}, preparing a node pool"
    if pool.state is PoolState.CREATING:
        waited = _duration((now - pool.created_at).total_seconds())
        return f"has waited {waited} for its {_kind(pool)} {pool.name}{held}"
    ready = f" since {_clock(pool.ready_at, now)}" if pool.ready_at else ""
    return f"has its node pool {pool.name} ready{ready} and is submitting its Job{held}"


def _kind(pool: PoolFacts) -> str:
    if pool.mode is ProvisioningMode.FLEX_START:
        return "flex-start node pool"
    return f"node pool on reservation {pool.reservation}" if pool.reservation else "node pool"


def _reservation(facts: WhyFacts) -> str:
    room = facts.reservation
    if room is None:
        return f"Cluster {facts.cluster} has no reservation: every new pool of this queue is flex-start."
    held = f"Falcon's pools hold {room.nodes} node(s) on it ({room.pools} pool(s))"
    if room.capacity is not None:
        free = room.capacity.free
        enough = "room for" if free >= room.needed else "too little for"
        return (
            f"Reservation {room.name}: {free} of {room.capacity.count} nodes free ({enough} a "
            f"{room.needed}-node pool of this queue); {held}."
        )
    if room.problem is not None:
        return f"Reservation {room.name}: Compute did not answer ({room.problem}); {held}."
    return f"Reservation {room.name}: {held}; its free room is Compute's (add --compute to ask)."


def _eta(estimate: Estimate | NoEstimate, now: datetime) -> str:
    if isinstance(estimate, NoEstimate):
        return (
            f"ETA to Running: no estimate ({estimate.observations} acquisition(s) observed in this "
            f"queue; {estimate.needed} needed)."
        )
    span = _span(estimate.low, estimate.high)
    seen = f"from {estimate.observations} acquisitions observed in this queue"
    late = ""
    if estimate.beyond_history:
        late = "; the current acquisition has taken longer than any of them, so none of its rest is counted"
    point = _duration(estimate.seconds)
    return f"ETA to Running: {point} ({span}, {estimate.level * 100:.0f} %) {seen}{late}."


def _elapsed(since: datetime | None, now: datetime) -> float:
    """Seconds since ``since``; an acquisition whose pick time was never recorded counts as just begun."""
    return max(0.0, (now - since).total_seconds()) if since else 0.0


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(0, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min" if minutes % 60 else f"{minutes // 60} h"


def _span(low: float, high: float) -> str:
    """``11–27 min`` when both ends are whole minutes under an hour, else each end in full."""
    if low >= 60 and high < 3600 and round(high / 60) < 60:
        return f"{round(low / 60)}–{round(high / 60)} min"
    return f"{_duration(low)}–{_duration(high)}"


def _clock(when: datetime, now: datetime) -> str:
    return when.strftime("%H:%M UTC" if when.date() == now.date() else "%Y-%m-%d %H:%M UTC")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def ahead_actors(order: Sequence[WaitingTask], task_id: str) -> dict[str, int]:
    """Tasks ahead of ``task_id`` in pick order, counted per actor (first-come actors first)."""
    counts: dict[str, int] = {}
    for task in order:
        if task.task_id == task_id:
            break
        counts[task.actor] = counts.get(task.actor, 0) + 1
    return counts
