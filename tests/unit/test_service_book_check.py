"""The dispatcher's queue book against the database: a cheap count every ``queue_refresh_seconds``,
a full read when the counts differ and every ``FULL_RELOAD_EVERY`` checks regardless.

We test: a waiting row ended behind the dispatcher's back is noticed at the next check and the
book read again, so the positions close up; counts that agree read nothing more (a Message
overwritten by hand stays until the periodic full read puts the position back); an abort the
tick is about to handle is no drift; a waiting row whose job row is gone, which the count sees and
the book cannot hold, is reported at each full read and is no drift.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from tests.unit.fakes import one_cluster, spec_for

from falcon.domain.lifecycle import WaitingRow, failed
from falcon.domain.messages import MessageKey
from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask
from falcon.domain.status import Reason, Status
from falcon.services.context import Services
from falcon.services.dispatching import FULL_RELOAD_EVERY, Dispatcher
from falcon.services.queueing import QueueBook

REFRESH = 30.0  # the fakes' queue_refresh_seconds
QUEUE = QueueKey("c1", "2x2")
T0 = datetime(2026, 12, 6, tzinfo=UTC)


def waiting_behind(count: int) -> tuple[Services, Dispatcher]:
    """``count`` tasks of one actor waiting (t1, t2, ...) while t0 acquires the queue's slot."""
    svc = one_cluster()
    dispatcher = Dispatcher(svc)
    for n in range(count + 1):
        svc.clock.advance(1)
        svc.store.insert_task(f"t{n}", spec=spec_for("2x2"))
    assert dispatcher.tick().picked == ["t0"]
    return svc, dispatcher


def message(svc: Services, task_id: str) -> str:
    task = svc.store.task(task_id)
    assert task is not None and task.message is not None
    return task.message


def at(position: int) -> str:
    """The start of a waiting task's Message at ``position`` in its queue."""
    return f"Queue position #{position},"


def test_a_row_ended_behind_the_dispatchers_back_is_noticed_and_the_book_read_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc, dispatcher = waiting_behind(3)
    assert message(svc, "t3").startswith(at(3))
    outcome = failed(svc.say, Reason.INVALID_SPEC, MessageKey.INVALID_SPEC, detail="by hand")
    assert svc.store.finish("t1", outcome, [Status.PENDING], svc.clock.now())  # an operator's SQL

    svc.clock.advance(REFRESH)
    with caplog.at_level(logging.WARNING):
        dispatcher.tick()  # the check
    assert "event=queue_book_drift queues=c1/2x2:3->2" in caplog.text
    assert message(svc, "t3").startswith(at(3))  # read again at the next tick
    dispatcher.tick()
    assert dispatcher.book.counts() == {QUEUE: 2}
    assert message(svc, "t3").startswith(at(2))


def test_counts_that_agree_read_nothing_more_until_the_periodic_full_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc, dispatcher = waiting_behind(2)
    row = svc.store.rows["t2"]
    svc.store.rows["t2"] = replace(row, message="edited by hand")  # counts unchanged

    with caplog.at_level(logging.WARNING):
        for _ in range(FULL_RELOAD_EVERY):
            svc.clock.advance(REFRESH)
            dispatcher.tick()
            assert message(svc, "t2") == "edited by hand"  # the book is trusted: not read again
    assert "queue_book_drift" not in caplog.text
    svc.clock.advance(REFRESH)
    dispatcher.tick()  # the full read: the Message on the row is not the position, so it is written
    assert message(svc, "t2").startswith(at(2))


def test_an_abort_the_tick_handles_is_no_drift(caplog: pytest.LogCaptureFixture) -> None:
    svc, dispatcher = waiting_behind(2)
    assert svc.store.request_abort("t1", svc.clock.now())
    svc.clock.advance(REFRESH)
    with caplog.at_level(logging.WARNING):
        assert dispatcher.tick().aborted == ["t1"]
    assert "queue_book_drift" not in caplog.text
    assert dispatcher.book.counts() == {QUEUE: 1}
    assert message(svc, "t2").startswith(at(1))


def test_a_waiting_row_whose_job_row_is_gone_is_reported_at_the_full_read_and_is_no_drift(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The count reads Falcon's progress rows alone (the join with the job rows was most of a
    check's cost), so it sees a waiting row whose job row was deleted by hand; the book, read
    through the join, does not hold it. Were that a drift, the book would be read every check."""
    svc, dispatcher = waiting_behind(2)
    del svc.store.rows["t2"]  # an operator's DELETE; Falcon's progress row stays
    with caplog.at_level(logging.WARNING):
        for _ in range(FULL_RELOAD_EVERY + 3):
            svc.clock.advance(REFRESH)
            dispatcher.tick()
    assert "queue_book_drift" not in caplog.text
    assert caplog.text.count("event=waiting_rows_not_pending queues=c1/2x2:1") == 1  # one full read
    assert dispatcher.book.counts() == {QUEUE: 1} and dispatcher.book.unbooked == {QUEUE: 1}


def test_the_count_less_the_rows_unbooked_at_load_is_what_the_book_is_checked_against() -> None:
    other = QueueKey("c1", "2x4")
    book = QueueBook()
    book.load([WaitingRow(QUEUE, WaitingTask("a", "u1", "a", T0), None)], {}, {QUEUE: 3, other: 1})
    assert book.unbooked == {QUEUE: 2, other: 1}
    assert book.drift({QUEUE: 3, other: 1}, set()) == {}
    assert book.drift({QUEUE: 2, other: 1}, set()) == {QUEUE: (1, 0)}  # an unbooked row ended
    assert book.drift({QUEUE: 3}, {"a"}) == {QUEUE: (0, 1), other: (0, -1)}
    book.load([], {}, {})
    assert book.unbooked == {}


def test_the_book_takes_a_pick_out_of_its_queue_alone_and_an_empty_removal_changes_nothing() -> None:
    """A tick removes its picks (their queues known) and its aborts (looked for everywhere) at
    every turn: at 10 000 waiting tasks a look through all of them was 4 ms of each tick."""
    other = QueueKey("c1", "2x4")
    book = QueueBook()
    book.load(
        [
            WaitingRow(QUEUE, WaitingTask("a", "u1", "a", T0), None),
            WaitingRow(other, WaitingTask("b", "u1", "b", T0), None),
        ],
        {},
    )
    book.dirty.clear()
    book.remove([])
    assert book.dirty == set()
    book.remove(["b"], [QUEUE])  # not in the queue named: nothing else is looked at
    assert book.counts() == {QUEUE: 1, other: 1} and book.dirty == set()
    book.remove(["a"], [QUEUE])
    assert book.counts() == {other: 1} and book.dirty == {QUEUE}
    book.remove(["b"])
    assert book.counts() == {} and book.dirty == {QUEUE, other}
