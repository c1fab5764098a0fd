"""WorkBeside: each task handed over is worked on once at a time, on its threads; each piece over
is told once, with whether it did what it set out to; a piece that raised is logged and told as
not done, so that a later round sees its task again."""

from __future__ import annotations

import logging
import threading
from functools import partial

import pytest

from falcon.services.work_beside import WorkBeside


def _closed_after(beside: WorkBeside) -> dict[str, bool]:
    beside.close()
    return beside.done()


def test_a_task_handed_over_twice_while_under_way_is_released_once() -> None:
    gate, calls = threading.Event(), []

    def release(task_id: str) -> bool:
        calls.append(task_id)
        return gate.wait(5)

    beside = WorkBeside(threads=2, what="release")
    beside.hand_over({"t1": partial(release, "t1"), "t2": partial(release, "t2")})
    beside.hand_over({"t1": partial(release, "t1")})
    assert beside.under_way() == {"t1", "t2"}
    gate.set()
    assert _closed_after(beside) == {"t1": True, "t2": True} and sorted(calls) == ["t1", "t2"]
    assert beside.under_way() == frozenset() and beside.done() == {}


def test_a_release_that_failed_or_raised_is_forgotten_and_the_raise_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def release(task_id: str) -> bool:
        if task_id == "raises":
            raise RuntimeError("database gone")
        return task_id == "ends"

    beside = WorkBeside(threads=1, what="release")
    beside.hand_over({task_id: partial(release, task_id) for task_id in ("ends", "fails", "raises")})
    with caplog.at_level(logging.ERROR):
        assert _closed_after(beside) == {"ends": True, "fails": False, "raises": False}
    assert beside.under_way() == frozenset()
    assert [r.getMessage() for r in caplog.records] == ["event=release_in_round_failed task_id=raises"]
