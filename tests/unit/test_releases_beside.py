"""ReleasesBeside: each task handed over is released once, on its threads; what a release that
failed (or raised) leaves is forgotten, for the round's release run to take."""

from __future__ import annotations

import logging
import threading

import pytest

from falcon.services.releases_beside import ReleasesBeside


def _closed_after(beside: ReleasesBeside) -> list[str]:
    beside.close()
    return beside.ended()


def test_a_task_handed_over_twice_while_under_way_is_released_once() -> None:
    gate, calls = threading.Event(), []

    def release(task_id: str) -> bool:
        calls.append(task_id)
        return gate.wait(5)

    beside = ReleasesBeside(release, threads=2)
    beside.hand_over(["t1", "t2"])
    beside.hand_over(["t1"])
    assert beside.under_way() == {"t1", "t2"}
    gate.set()
    assert _closed_after(beside) == ["t1", "t2"] and sorted(calls) == ["t1", "t2"]
    assert beside.under_way() == frozenset()


def test_a_release_that_failed_or_raised_is_forgotten_and_the_raise_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def release(task_id: str) -> bool:
        if task_id == "raises":
            raise RuntimeError("database gone")
        return task_id == "ends"

    beside = ReleasesBeside(release, threads=1)
    beside.hand_over(["ends", "fails", "raises"])
    with caplog.at_level(logging.ERROR):
        assert _closed_after(beside) == ["ends"]
    assert beside.under_way() == frozenset()
    assert [r.getMessage() for r in caplog.records] == ["event=release_in_round_failed task_id=raises"]
