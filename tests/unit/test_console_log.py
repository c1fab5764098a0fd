"""The dispatcher's console log is written by a thread of its own: a thread that logs never waits
for a stdout that blocks (a runner's pipe it copies late), and nothing is lost or reordered."""

from __future__ import annotations

import io
import logging
import threading
import time
from logging.handlers import QueueHandler

import pytest

from falcon.adapters.console_log import console_beside


class _StuckPipe(io.StringIO):
    """A stdout whose writes wait until ``flowing`` is set (at most 5 s, so a failure cannot hang)."""

    def __init__(self) -> None:
        super().__init__()
        self.flowing = threading.Event()

    def write(self, text: str) -> int:
        self.flowing.wait(5)
        return super().write(text)


@pytest.fixture
def logger() -> logging.Logger:
    logger = logging.getLogger("test_console_log")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    yield logger
    logger.handlers.clear()


def test_logging_returns_while_stdout_is_stuck_and_every_line_comes_out_after(logger: logging.Logger) -> None:
    pipe = _StuckPipe()
    console = logging.StreamHandler(pipe)
    logger.addHandler(console)
    with console_beside(logger):
        started = time.monotonic()
        for n in range(5):
            logger.info("line %d", n)
        assert time.monotonic() - started < 1.0, "a stuck stdout held the logging thread"
        assert pipe.getvalue() == ""
        pipe.flowing.set()
    assert pipe.getvalue().splitlines() == [f"line {n}" for n in range(5)]
    assert console in logger.handlers, "the handler is put back"
    assert not any(isinstance(h, QueueHandler) for h in logger.handlers)


def test_the_handlers_level_and_a_tracebacks_text_are_kept(logger: logging.Logger) -> None:
    pipe = io.StringIO()
    console = logging.StreamHandler(pipe)
    console.setLevel(logging.INFO)
    logger.addHandler(console)
    with console_beside(logger):
        logger.debug("not shown")
        try:
            raise ValueError("broken row")
        except ValueError:
            logger.exception("event=tick_failed")
    lines = pipe.getvalue().splitlines()
    assert lines[0] == "event=tick_failed"
    assert "ValueError: broken row" in lines and "not shown" not in pipe.getvalue()
