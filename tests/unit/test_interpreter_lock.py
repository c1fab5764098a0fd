"""The dispatcher's process hands the interpreter lock over every millisecond while it runs.

We test: the interval is the dispatcher's within, and Python's again after, an error included.
"""

from __future__ import annotations

import sys

import pytest

from falcon.adapters.interpreter_lock import DISPATCHER_SWITCH_INTERVAL, lock_handed_over_every


def test_the_interval_is_the_dispatchers_within_and_pythons_again_after() -> None:
    before = sys.getswitchinterval()
    assert before != pytest.approx(DISPATCHER_SWITCH_INTERVAL)  # Python's 5 ms, as the suite runs
    with lock_handed_over_every():
        assert sys.getswitchinterval() == pytest.approx(DISPATCHER_SWITCH_INTERVAL)
    assert sys.getswitchinterval() == before
    with pytest.raises(RuntimeError), lock_handed_over_every(0.002):
        assert sys.getswitchinterval() == pytest.approx(0.002)
        raise RuntimeError("a loop failed")
    assert sys.getswitchinterval() == before
