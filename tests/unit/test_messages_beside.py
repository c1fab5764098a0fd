"""The waiting Messages written beside the tick (MessagesBeside): in order, a backlog merged into
one write with the newest text of each task, a failed write reported once and repaired by the
dispatcher reading its book again, nothing handed over lost at close."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime

import pytest
from tests.unit.fakes import T0, spec_for

from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher, MessagesBeside

log = logging.getLogger(__name__)


class Writes:
    """A write that records its batches; it can be held (until ``go``) or fail (while ``failing``)."""

    def __init__(self) -> None:
        self.batches: list[dict[str, str]] = []
        self.hold, self.go = threading.Event(), threading.Event()
        self.failing = False

    def __call__(self, messages: Mapping[str, str], now: datetime) -> int:
        if self.hold.is_set():
            self.go.wait(5)
        if self.failing:
            raise ConnectionError("server has gone away")
        self.batches.append(dict(messages))
        return len(messages)


@pytest.fixture
def writes() -> Writes:
    return Writes()


@pytest.fixture
def beside(writes: Writes) -> Iterator[MessagesBeside]:
    messages = MessagesBeside(writes, log)
    yield messages
    messages.close()


def test_messages_handed_over_during_a_write_go_in_the_next_one_the_newest_text_winning(
    writes: Writes, beside: MessagesBeside
) -> None:
    writes.hold.set()
    beside({"a": "#1"}, T0)
    beside({"b": "#2", "a": "#2"}, T0)
    beside({"a": "#3"}, T0)
    writes.hold.clear()
    writes.go.set()
    assert beside.flush(5)
    # The first write took what was there when it began; everything after it, merged, is one more.
    assert 1 <= len(writes.batches) <= 2
    applied: dict[str, str] = {}
    for batch in writes.batches:
        applied.update(batch)
    assert applied == {"a": "#3", "b": "#2"}


def test_a_failed_write_is_reported_once_and_the_writes_go_on(
    writes: Writes, beside: MessagesBeside, caplog: pytest.LogCaptureFixture
) -> None:
    writes.failing = True
    with caplog.at_level(logging.ERROR):
        beside({"a": "#1"}, T0)
        assert beside.flush(5)
    writes.failing = False
    assert "event=messages_failed count=1" in caplog.text
    assert beside.failed()
    assert not beside.failed()
    beside({"b": "#1"}, T0)
    assert beside.flush(5)
    assert writes.batches == [{"b": "#1"}]


def test_close_writes_what_was_handed_over(writes: Writes) -> None:
    messages = MessagesBeside(writes, log)
    writes.hold.set()
    messages({"a": "#1"}, T0)
    messages({"b": "#1"}, T0)
    writes.go.set()
    messages.close()
    assert {k: v for batch in writes.batches for k, v in batch.items()} == {"a": "#1", "b": "#1"}


def submit(svc: Services, task_id: str, actor: str) -> None:
    svc.clock.advance(1)
    svc.store.insert_task(task_id, actor=actor, spec=spec_for("2x2"))  # type: ignore[attr-defined]


def test_a_dispatcher_writing_beside_its_tick_shows_the_positions_and_repairs_a_failed_write(
    svc: Services,
) -> None:
    store_write = svc.store.set_waiting_messages
    writes = Writes()
    messages = MessagesBeside(lambda m, now: (writes(m, now), store_write(m, now)), log)
    dispatcher = Dispatcher(svc, messages=messages)
    try:
        for task_id, actor in [("a1", "alice"), ("a2", "alice"), ("b1", "bob")]:
            submit(svc, task_id, actor)
        writes.failing = True  # the first tick's writes (the new rows' positions) are lost
        assert dispatcher.tick().picked == ["a1"]
        assert messages.flush(5)
        writes.failing = False
        assert svc.store.task("a2").message != "Queue position #2, 1 task(s) ahead (bob: job-b1)"
        dispatcher.tick()  # the failure is seen: the book is read again and every Message written
        assert messages.flush(5)
        assert svc.store.task("a2").message == "Queue position #2, 1 task(s) ahead (bob: job-b1)"
        assert (
            svc.store.task("b1").message
            == "Queue position #1, waiting for the current task to acquire its resources"
        )
    finally:
        dispatcher.close()
