"""Fault injection: answer the next N requests matching (method, path regex) with an error."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from falcon_emulator.util import JSON


@dataclass
class FaultRule:
    method: str | None
    pattern: re.Pattern[str]
    status: int
    message: str
    remaining: int | None  # None: every matching request, forever
    status_name: str | None = None

    def to_json(self) -> JSON:
        return {
            "method": self.method,
            "pathRegex": self.pattern.pattern,
            "status": self.status,
            "message": self.message,
            "times": self.remaining,
        }


def parse_rule(raw: Any) -> FaultRule:
    if not isinstance(raw, dict) or "pathRegex" not in raw:
        raise ValueError("a fault rule needs at least pathRegex")
    times = raw.get("times", 1)
    method = raw.get("method")
    return FaultRule(
        method=str(method).upper() if method else None,
        pattern=re.compile(str(raw["pathRegex"])),
        status=int(raw.get("status", 500)),
        message=str(raw.get("message") or "injected fault"),
        remaining=None if times is None or int(times) <= 0 else int(times),
        status_name=raw.get("statusName"),
    )


class Faults:
    def __init__(self) -> None:
        self.rules: list[FaultRule] = []

    def add(self, raw_rules: list[Any]) -> None:
        self.rules.extend(parse_rule(raw) for raw in raw_rules)

    def clear(self) -> None:
        self.rules.clear()

    def take(self, method: str, path: str) -> FaultRule | None:
        """The first rule matching this request, consuming one of its `times`."""
        for rule in self.rules:
            if rule.method not in (None, method.upper()) or not rule.pattern.search(path):
                continue
            if rule.remaining is not None:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self.rules.remove(rule)
            return rule
        return None
