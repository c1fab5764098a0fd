"""The dispatcher's switch interval (falcon.adapters.switching): set within, Python's after."""

from __future__ import annotations

import sys

import pytest

from falcon.adapters.switching import DISPATCHER_SWITCH_SECONDS, switching_every


def test_the_interval_is_the_dispatchers_within_and_given_back_after() -> None:
    before = sys.getswitchinterval()
    with switching_every():
        assert sys.getswitchinterval() == pytest.approx(DISPATCHER_SWITCH_SECONDS)
    assert sys.getswitchinterval() == before


def test_the_interval_is_given_back_when_the_run_fails() -> None:
    before = sys.getswitchinterval()
    with pytest.raises(RuntimeError), switching_every(0.002):
        assert sys.getswitchinterval() == pytest.approx(0.002)
        raise RuntimeError("the run failed")
    assert sys.getswitchinterval() == before
