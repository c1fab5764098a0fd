"""Liveness and readiness of the dispatcher's process (design Phase 2: 健康检查 / readiness probe).

Live: the dispatcher loop has ticked within a bound; a wedged loop (a call hanging without a
timeout, a deadlock) is what a restart cures. Ready: the database and the Prefect API answer;
an outage of either is not cured by a restart, so it only takes the process out of service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

OK = "ok"


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    checks: dict[str, str]  # check name -> "ok", or what is wrong


def liveness(last_tick: float, now: float, bound: float, loop: str = "loop") -> Verdict:
    """Live while the last tick ended (or the loop started) at most ``bound`` seconds ago."""
    quiet = now - last_tick
    if quiet <= bound:
        return Verdict(True, {loop: OK})
    return Verdict(False, {loop: f"no tick for {quiet:.1f} s (bound {bound:g} s)"})


def readiness(checks: Mapping[str, Callable[[], None]]) -> Verdict:
    """Run every check (each raises when its dependency does not answer); ready if none did."""
    results = {name: _outcome(check) for name, check in checks.items()}
    return Verdict(all(result == OK for result in results.values()), results)


def _outcome(check: Callable[[], None]) -> str:
    try:
        check()
    except Exception as exc:  # any failure of a dependency is the answer, not an error of the probe
        return f"{type(exc).__name__}: {exc}"[:300]
    return OK
