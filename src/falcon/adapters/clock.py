"""The system clock, the one place Falcon reads real time; everything else is handed a clock."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)
