"""The system clock, the one place Falcon reads real time; everything else is handed a clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime


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
