"""A periodic piece of the dispatcher's loops (the book's checks, the round, the view, the
orphan scans, the registry's reads), on the dispatcher's monotonic clock."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Every:
    """A periodic piece of a loop: due the first time, then once ``period`` seconds have passed."""

    period: float
    last: float | None = None

    def due(self, monotonic: float, force: bool = False) -> bool:
        """True, and the time noted, when the period is over (or ``force`` asks for it anyway)."""
        if not force and self.last is not None and monotonic - self.last < self.period:
            return False
        self.last = monotonic
        return True
