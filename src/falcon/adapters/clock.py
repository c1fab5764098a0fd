"""The system clock, the one place Falcon reads real time; everything else is handed a clock."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from falcon.domain.lifecycle import RunStopped


def utc_now() -> datetime:
    return datetime.now(UTC)


class SystemClock:
    """The clock port on real time."""

    def now(self) -> datetime:
        return utc_now()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class StoppableClock(SystemClock):
    """Real time whose waits end in RunStopped once ``stopping`` is set: the clock of the flow runs
    a ThreadLauncher runs, so they stop at their next wait when the dispatcher's run ends."""

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping

    def sleep(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise RunStopped("the dispatcher run these steps live in is ending")
