"""`falcon task why` in words (issue 11): one line per question, for every state a task can be in.

We test, as named cases: a waiting task's position and who is ahead (per actor, in pick order), what
the queue's acquiring task waits for and since when (its flex-start or reservation pool, its pods,
its first step), a free slot, the reservation's room (as Compute answered, Compute unreachable, not
asked, no reservation), the ETA and its honest absence; an acquiring task's own wait and the rest
of its acquisition; Running, releasing, terminal, Aborting and not-yet-taken-in tasks; ordinals.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from falcon.domain.explain import Acquirer, PoolFacts, ReservationRoom, WhyFacts, _ordinal, explain
from falcon.domain.lifecycle import Outcome, Phase, PoolState
from falcon.domain.model import ProvisioningMode, Task
from falcon.domain.scheduling import ReservationCapacity, WaitingTask
from falcon.domain.status import Reason, Status

NOW = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def task(task_id: str, actor: str, status: Status = Status.PENDING, reason: Reason | None = Reason.WAITING,
         message: str | None = None, **times: datetime) -> Task:  # fmt: skip
    return Task(task_id, actor, f"{actor}-job", "v6e", {}, None, status, reason, message, "c1", None, None,
                ago(30), **times)  # fmt: skip


def waiting(task_id: str, actor: str, minutes_ago: float) -> WaitingTask:
    return WaitingTask(task_id, actor, f"{actor}-job", ago(minutes_ago))


ORDER = (
    waiting("a1", "alice", 20),
    waiting("b1", "bob", 19),
    waiting("a2", "alice", 18),
    waiting("demo-007", "carol", 17),
    waiting("b2", "bob", 16),
)
FLEX_POOL = PoolFacts(
    "falcon-c1-2x4-demo-004", ProvisioningMode.FLEX_START, PoolState.CREATING, None, ago(6), None
)
ACQUIRER = Acquirer("demo-004", "dave", "dave-job", Reason.PROVISIONING, "Creating node pool (flex-start)...",
                    ago(6.5), None, FLEX_POOL)  # fmt: skip
ROOM = ReservationRoom("r1", pools=3, nodes=6, needed=2)
HISTORY = (  # twelve observed; the ETA resamples the last ten
    300.0,
    360.0,
    420.0,
    480.0,
    540.0,
    600.0,
    660.0,
    720.0,
    780.0,
    840.0,
    900.0,
    960.0,
)


def facts(subject: Task, **given: object) -> WhyFacts:
    base = WhyFacts(subject, Phase.WAITING, "edge-a/2x4", "edge-a", order=ORDER, acquirer=ACQUIRER,
                    reservation=ROOM, history=HISTORY)  # fmt: skip
    return replace(base, **given)  # type: ignore[arg-type]


def lines(subject: Task, **given: object) -> list[str]:
    return explain(facts(subject, **given), NOW)


def test_a_waiting_task_hears_its_place_who_is_ahead_what_the_queue_waits_for_and_when_it_runs() -> None:
    said = lines(task("demo-007", "carol", message="Queue position #4, 3 task(s) ahead (...)"))
    assert said[:4] == [
        "demo-007 (carol: carol-job) is Pending/Waiting in queue edge-a/2x4.",
        'Message: "Queue position #4, 3 task(s) ahead (...)"',
        "Waiting: 4th in queue edge-a/2x4; ahead: alice (2), bob (1).",
        "The queue's acquiring task demo-004 (dave) has waited 6 min for its flex-start node pool "
        "falcon-c1-2x4-demo-004, holding the slot since 13:53 UTC.",
    ]
    assert said[4] == (
        "Reservation r1: Falcon's pools hold 6 node(s) on it (3 pool(s)); its free room is Compute's "
        "(add --compute to ask)."
    )
    assert said[5].startswith("ETA to Running: ")
    assert said[5].endswith(" min, 80 %) from 10 acquisitions observed in this queue.")
    assert len(said) == 6


def test_the_first_in_line_has_nobody_ahead() -> None:
    said = lines(task("a1", "alice"))
    assert "Waiting: 1st in queue edge-a/2x4; nobody is ahead." in said


def test_a_free_slot_means_the_next_tick_picks() -> None:
    said = lines(task("a1", "alice"), acquirer=None)
    assert "Nobody holds the queue's slot: the dispatcher picks this task at its next tick." in said
    later = lines(task("b2", "bob"), acquirer=None)
    assert "Nobody holds the queue's slot: the dispatcher picks the first task at its next tick." in later


def test_what_the_acquiring_task_waits_for_follows_its_progress() -> None:
    on_reservation = replace(
        FLEX_POOL, mode=ProvisioningMode.RESERVATION, reservation="r1", created_at=ago(3)
    )
    ready = replace(FLEX_POOL, state=PoolState.IN_USE, ready_at=ago(1))
    cases = {
        replace(ACQUIRER, pool=on_reservation): "has waited 3 min for its node pool on reservation r1 "
        "falcon-c1-2x4-demo-004, holding the slot since 13:53 UTC",
        replace(ACQUIRER, pool=ready): "has its node pool falcon-c1-2x4-demo-004 ready since 13:59 UTC and "
        "is submitting its Job, holding the slot since 13:53 UTC",
        replace(ACQUIRER, pool=ready, dispatched_at=ago(0.75)): "has waited 45 s for its pods to start "
        "(Job submitted at 13:59 UTC), holding the slot since 13:53 UTC",
        replace(ACQUIRER, pool=None, acquiring_at=ago(0.2)): "has held the slot 12 s, preparing a node pool",
    }
    for acquirer, expected in cases.items():
        said = lines(task("demo-007", "carol"), acquirer=acquirer)
        assert f"The queue's acquiring task demo-004 (dave) {expected}." in said


def test_the_reservation_line_says_what_is_known() -> None:
    subject = task("demo-007", "carol")
    roomy = replace(ROOM, capacity=ReservationCapacity("r1", 8, 6, "READY", "ct6e-standard-4t"))
    full = replace(ROOM, capacity=ReservationCapacity("r1", 8, 7, "READY", "ct6e-standard-4t"))
    down = replace(ROOM, problem="TemporaryError: connection refused")
    assert (
        "Reservation r1: 2 of 8 nodes free (room for a 2-node pool of this queue); "
        "Falcon's pools hold 6 node(s) on it (3 pool(s))."
    ) in lines(subject, reservation=roomy)
    assert any(
        "1 of 8 nodes free (too little for a 2-node pool" in line for line in lines(subject, reservation=full)
    )
    assert (
        "Reservation r1: Compute did not answer (TemporaryError: connection refused); "
        "Falcon's pools hold 6 node(s) on it (3 pool(s))."
    ) in lines(subject, reservation=down)
    assert "Cluster edge-a has no reservation: every new pool of this queue is flex-start." in lines(
        subject, reservation=None
    )


def test_thin_history_is_said_rather_than_guessed() -> None:
    said = lines(task("demo-007", "carol"), history=(300.0, 400.0))
    assert said[-1] == "ETA to Running: no estimate (2 acquisition(s) observed in this queue; 3 needed)."


def test_the_eta_line_reads_as_the_estimate_says() -> None:
    steady = (600.0,) * 12  # 10 min each; the acquirer has run 6.5 min, three acquisitions to come after it
    said = lines(task("a2", "alice"), history=steady)
    assert said[-1] == "ETA to Running: 34 min (34–34 min, 80 %) from 10 acquisitions observed in this queue."
    long_ago = replace(ACQUIRER, acquiring_at=ago(15))
    late = lines(task("a1", "alice"), history=steady, acquirer=long_ago)[-1]
    assert late == (
        "ETA to Running: 10 min (10–10 min, 80 %) from 10 acquisitions observed in this queue; the current "
        "acquisition has taken longer than any of them, so none of its rest is counted."
    )


def test_an_acquiring_task_hears_its_own_wait_and_the_rest_of_its_acquisition() -> None:
    subject = task(
        "demo-004", "dave", reason=Reason.PROVISIONING, message="Creating node pool (flex-start)..."
    )
    said = lines(subject, phase=Phase.ACQUIRING, acquiring_at=ago(6.5), order=(), history=(600.0,) * 5)
    assert said[2] == (
        "Acquiring (holds the slot of queue edge-a/2x4): it has waited 6 min for its flex-start node pool "
        "falcon-c1-2x4-demo-004, holding the slot since 13:53 UTC."
    )
    assert said[-1] == "ETA to Running: 4 min (4–4 min, 80 %) from 5 acquisitions observed in this queue."


def test_running_releasing_ended_aborting_and_new_tasks_say_where_they_are() -> None:
    running = task("r", "erin", Status.RUNNING, None, dispatched_at=ago(40))
    said = lines(running, phase=Phase.RUNNING, acquiring_at=ago(47), running_at=ago(38))
    assert said[-1] == "Running since 13:22 UTC (38 min); it took 9 min from its pick."

    released = lines(running, phase=Phase.RELEASING, outcome=Outcome(Status.SUCCEEDED))
    assert released[-1].startswith("Its Job ended (Succeeded); Falcon is deleting the Job")

    failed = task("f", "erin", Status.FAILED, Reason.NODE_POOL_FAILED, "Node pool creation failed: quota",
                  finished_at=ago(2))  # fmt: skip
    assert lines(failed, phase=Phase.DONE)[1:] == [
        'Message: "Node pool creation failed: quota"',
        "Failed (NodePoolFailed) at 13:58 UTC: it is finished; nothing is waited for.",
    ]

    aborting = task("x", "erin", Status.ABORTING, Reason.WAITING, aborting_at=ago(1))
    assert lines(aborting)[-1] == (
        "Abort requested since 13:59 UTC (it was waiting): Falcon deletes its Job and node pool, then "
        "writes Aborted."
    )

    new = task("n", "erin", reason=None)
    assert lines(new, phase=None, queue=None)[-1].startswith("Not taken in yet")
    assert lines(new, phase=None, queue=None)[0] == "n (erin: erin-job) is Pending."


def test_ordinals() -> None:
    assert [_ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th",
    ]  # fmt: skip
