"""Fault injection rules: which requests (method, path regex) get which fault, how often and for how long.

A rule answers a matching request with an HTTP error (``status``), delays it (``delaySeconds``, then
served normally or with ``status``), or drops the connection with no response (``"action": "reset"``).
``times`` bounds how many requests it hits (default 1; null: no bound, the default of a rule with
``forSeconds``), ``forSeconds`` how long it lasts, and ``probability`` which share of matching
requests it hits, drawn from an RNG the ``seed`` of a POST resets, so that the same requests in the
same order meet the same faults.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from falcon_emulator.util import JSON

RESET = "reset"


@dataclass
class FaultRule:
    method: str | None
    pattern: re.Pattern[str]
    status: int | None  # None: a delay-only rule serves the request normally afterwards
    message: str | None  # None: the API's documented text for the status, if it has one
    remaining: int | None  # None: every matching request until it expires
    status_name: str | None = None
    action: str | None = None  # RESET, or None for an HTTP answer
    delay_seconds: float = 0.0
    probability: float = 1.0
    expires_at: float | None = None  # monotonic time the rule stops matching (forSeconds)

    @property
    def kinds(self) -> list[str]:
        """What this rule injects, as counted in the emulator state ("reset", "delay", "<status>")."""
        kinds = ["delay"] if self.delay_seconds > 0 else []
        if self.action == RESET:
            return [*kinds, RESET]
        return [*kinds, str(self.status)] if self.status is not None else kinds

    def to_json(self) -> JSON:
        return {
            "method": self.method,
            "pathRegex": self.pattern.pattern,
            "status": self.status,
            "statusName": self.status_name,
            "message": self.message,
            "times": self.remaining,
            "action": self.action,
            "delaySeconds": self.delay_seconds,
            "probability": self.probability,
            "secondsLeft": None if self.expires_at is None else max(0.0, self.expires_at - time.monotonic()),
        }


def parse_rule(raw: Any) -> FaultRule:
    if not isinstance(raw, dict) or "pathRegex" not in raw:
        raise ValueError("a fault rule needs at least pathRegex")
    action = raw.get("action")
    if action not in (None, RESET):
        raise ValueError(f"unknown fault action {action!r} (known: {RESET!r})")
    delay = float(raw.get("delaySeconds") or 0.0)
    probability = float(raw.get("probability", 1.0))
    if not 0.0 <= probability <= 1.0 or delay < 0:
        raise ValueError("probability must be within 0..1 and delaySeconds not negative")
    status = raw.get("status")
    if status is None and action is None and not delay:
        status = 500  # a rule that names nothing else answers 500
    for_seconds = raw.get("forSeconds")
    times = raw.get("times", 1 if for_seconds is None else None)  # a rule for a while hits every call
    method = raw.get("method")
    return FaultRule(
        method=str(method).upper() if method else None,
        pattern=re.compile(str(raw["pathRegex"])),
        status=None if status is None else int(status),
        message=str(raw["message"]) if raw.get("message") else None,
        remaining=None if times is None or int(times) <= 0 else int(times),
        status_name=raw.get("statusName"),
        action=action,
        delay_seconds=delay,
        probability=probability,
        expires_at=None if for_seconds is None else time.monotonic() + float(for_seconds),
    )


class Faults:
    def __init__(self) -> None:
        self.rules: list[FaultRule] = []
        self.injected: Counter[str] = Counter()
        self.requests = 0  # API requests the rules were asked about: the base of the fault share
        self.random = random.Random()

    def add(self, raw_rules: list[Any], seed: int | None = None) -> None:
        rules = [parse_rule(raw) for raw in raw_rules]  # all or none
        if seed is not None:
            self.random.seed(seed)
        self.rules.extend(rules)

    def clear(self) -> None:
        self.rules.clear()

    def take(self, method: str, path: str) -> FaultRule | None:
        """The first rule that matches this request and hits it, consuming one of its ``times``."""
        self.requests += 1
        now = time.monotonic()
        self.rules = [r for r in self.rules if r.expires_at is None or now < r.expires_at]
        for rule in self.rules:
            if rule.method not in (None, method.upper()) or not rule.pattern.search(path):
                continue
            if rule.probability < 1.0 and self.random.random() >= rule.probability:
                continue
            if rule.remaining is not None:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self.rules.remove(rule)
            self.injected.update(rule.kinds)
            return rule
        return None
