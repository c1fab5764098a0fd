"""Full collections between ticks (falcon.adapters.collector): when they run, and what the
process's collector looks like inside and after."""

from __future__ import annotations

import gc

from tests.unit.fakes import FakeClock

from falcon.adapters.collector import FullCollections, full_collections_between_ticks


def test_a_full_collection_runs_between_ticks_once_its_period_has_passed() -> None:
    clock, collected = FakeClock(), []
    collections = FullCollections(10.0, clock.monotonic, lambda: collected.append(clock.monotonic()))
    for _ in range(25):  # 25 ticks 1 s apart
        collections.between_ticks()
        clock.advance(1.0)
    assert collected == [10.0, 20.0]


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
