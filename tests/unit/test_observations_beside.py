"""The queues' observations read beside the reconcile round: asked for at one round, answered at
a later one, fresh for ``FRESH_SECONDS``, read one batch at a time."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator

import pytest
from tests.unit.fakes import FakeClock

from falcon.domain.model import QueueKey
from falcon.domain.pool_economics import QueueObservations
from falcon.services.observations_beside import FRESH_SECONDS, ObservationsBeside

A, B = QueueKey("c1", "2x2"), QueueKey("c1", "4x4")


class History:
    """A database's answers, each queue's observations naming how many reads came before; a
    read waits for ``let_go`` when ``hold`` is set, and fails when ``failing``."""

    def __init__(self) -> None:
        self.reads: list[set[QueueKey]] = []
        self.hold = False
        self.failing = False
        self.let_go = threading.Event()
        self.started = threading.Event()

    def __call__(self, queues: Collection[QueueKey]) -> dict[QueueKey, QueueObservations]:
        self.reads.append(set(queues))
        self.started.set()
        if self.hold:
            self.let_go.wait(5)
        if self.failing:
            raise ConnectionError("database gone")
        return {q: QueueObservations(arrival_gaps=(float(len(self.reads)),)) for q in queues}


@pytest.fixture
def history() -> History:
    return History()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def beside(history: History, clock: FakeClock) -> Iterator[ObservationsBeside]:
    observations = ObservationsBeside(history, clock.monotonic)
    yield observations
    history.let_go.set()
    observations.close()


def _settled(beside: ObservationsBeside) -> None:
    """Wait for the read under way: the next read's submission comes after it."""
    done = threading.Event()
    beside._thread.submit(done.set)
    assert done.wait(5)


def test_a_queue_asked_for_is_answered_at_a_later_call(beside: ObservationsBeside, history: History) -> None:
    assert beside([A]) == {}
    _settled(beside)
    assert beside([A]) == {A: QueueObservations(arrival_gaps=(1.0,))}
    assert history.reads == [{A}]


def test_observations_are_fresh_for_a_while_then_read_again(
    beside: ObservationsBeside, history: History, clock: FakeClock
) -> None:
    beside([A])
    _settled(beside)
    clock.advance(FRESH_SECONDS - 0.1)
    assert A in beside([A]) and len(history.reads) == 1
    clock.advance(0.1)
    assert beside([A]) == {}, "too old to price a pool"
    _settled(beside)
    assert beside([A]) == {A: QueueObservations(arrival_gaps=(2.0,))}


def test_one_read_at_a_time_of_the_queues_not_held(beside: ObservationsBeside, history: History) -> None:
    beside([A])
    _settled(beside)
    history.hold, history.started = True, threading.Event()  # the first read's start is over
    assert beside([A, B]) == {A: QueueObservations(arrival_gaps=(1.0,))}
    assert history.started.wait(5)
    assert beside([B]) == {}, "the read under way answers it"
    history.let_go.set()
    _settled(beside)
    assert history.reads == [{A}, {B}]
    assert B in beside([B])


def test_a_failed_read_is_logged_and_asked_again(
    beside: ObservationsBeside, history: History, caplog: pytest.LogCaptureFixture
) -> None:
    history.failing = True
    assert beside([A]) == {}
    _settled(beside)
    assert "event=observations_read_failed queues=1" in caplog.text
    history.failing = False
    assert beside([A]) == {}
    _settled(beside)
    assert A in beside([A])
    assert history.reads == [{A}, {A}]


def test_nothing_is_read_once_closed(beside: ObservationsBeside, history: History) -> None:
    beside.close()
    assert beside([A]) == {}
    assert history.reads == []
