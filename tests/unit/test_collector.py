"""Full collections between ticks (falcon.adapters.collector): when they run, and what the
process's collector looks like inside and after."""

from __future__ import annotations

import gc

from tests.unit.fakes import FakeClock

from falcon.adapters.collector import OVERDUE_PERIODS, FullCollections, full_collections_between_ticks


def test_a_full_collection_runs_between_ticks_once_its_period_has_passed() -> None:
    clock, collected = FakeClock(), []
    collections = FullCollections(10.0, clock.monotonic, lambda: collected.append(clock.monotonic()))
    for _ in range(25):  # 25 ticks 1 s apart
        collections.between_ticks()
        clock.advance(1.0)
    assert collected == [10.0, 20.0]


def test_a_full_collection_waits_for_every_turn_under_way_to_end() -> None:
    """Two loops: the one that asks after its turn while the other is inside one gets no
    collection; the other, asking after its own turn, does."""
    clock, collected = FakeClock(), []
    collections = FullCollections(10.0, clock.monotonic, lambda: collected.append(clock.monotonic()))
    clock.advance(10.0)
    with collections.turn():  # the round, turning
        with collections.turn():  # the tick, beside it
            pass
        collections.between_ticks()  # after the tick: the round is still inside its turn
        assert collected == []
        clock.advance(0.3)
    collections.between_ticks()  # after the round
    assert collected == [10.3]


def test_loops_that_always_overlap_get_their_collection_once_it_is_overdue() -> None:
    clock, collected = FakeClock(), []
    collections = FullCollections(10.0, clock.monotonic, lambda: collected.append(clock.monotonic()))
    with collections.turn():  # a turn that never ends, as if the loops never left a gap
        for _ in range(10 * OVERDUE_PERIODS + 1):
            collections.between_ticks()
            clock.advance(1.0)
    assert collected == [10.0 * OVERDUE_PERIODS]


def test_inside_python_runs_no_full_collection_of_its_own_and_the_imports_are_frozen() -> None:
    full: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    before = gc.get_threshold()
    gc.callbacks.append(note)
    try:
        with full_collections_between_ticks(every=0.0) as collections:
            assert gc.get_freeze_count() > 0
            full.clear()  # the one that set it up
            for _ in range(200):  # ~2 million objects that survive the young collections for a while
                kept = [[] for _ in range(10_000)]
                del kept
            assert full == []  # Python's own rule ran 21 on this loop
            collections.between_ticks()
            assert full == [1]
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() == 0
    finally:
        gc.callbacks.remove(note)
