"""The TidalScheduler of oFEP-0033 as plain data, and its evaluation: validation, fires, status.

Level-triggered with bounded catch-up (lessons of KEDA's cron scaler and of CronJob's
``startingDeadlineSeconds``): at any instant the object's state follows from its rules and the
clock alone. The latest fire within the catch-up bound that status does not show yet is applied
once (never a replay of every missed fire); among the rules firing at that instant the largest
``replicas`` wins (oFEP §5). The object's status is the only memory, so a restarted controller
picks up exactly where the last one stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any

from falcon.domain.cron import CronError, parse_cron
from falcon.domain.errors import TemporaryError

GROUP = "scheduling.tidal.io"
VERSION = "v1alpha1"
PLURAL = "tidalschedulers"
KIND = "TidalScheduler"
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"
SCALE_ANNOTATION = f"{GROUP}/scale-target"  # "true": the controller also patches the target's /scale
RECOMMENDED_MAX_RULES = 100  # oFEP §9: more still works, but gets a warning condition
# Targets whose existence (and /scale) the controller can reach: apps/v1 kind -> resource plural.
SCALABLE_KINDS: Mapping[str, str] = {"Deployment": "deployments", "StatefulSet": "statefulsets"}

READY = "Ready"
RULE_CONFLICT = "RuleConflict"
TOO_MANY_RULES = "TooManyRules"


class Problem(StrEnum):
    """Why an object is not Ready: the reason of its Ready=False condition."""

    INVALID_SPEC = "InvalidSpec"
    DUPLICATE_RULE_NAME = "DuplicateRuleName"
    INVALID_CRON = "InvalidCron"
    UNSUPPORTED_TARGET = "UnsupportedTarget"
    TARGET_NOT_FOUND = "TargetNotFound"


# A watch event as the API sends it: ADDED, MODIFIED, DELETED or BOOKMARK, and the object.
WatchEvent = tuple[str, Mapping[str, Any]]


class ResourceVersionGone(TemporaryError):
    """A watch's resourceVersion is too old (410 Gone): list again, then watch from the list."""


def rfc3339(instant: datetime) -> str:
    """The API's timestamp form: UTC, whole seconds, ``Z``."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 timestamp from status; anything else (absent, garbage) is None."""
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Rule:
    name: str
    cron: str
    replicas: int
    description: str = ""


@dataclass(frozen=True)
class TargetRef:
    api_version: str
    kind: str
    name: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def scalable(self) -> bool:
        """A kind whose existence and /scale the controller can reach."""
        return self.api_version == "apps/v1" and self.kind in SCALABLE_KINDS


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" / "False", as Kubernetes writes them
    last_transition_time: str
    reason: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {
            "type": self.type,
            "status": self.status,
            "lastTransitionTime": self.last_transition_time,
            "reason": self.reason,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Condition:
        text = {
            k: str(raw.get(k) or "") for k in ("type", "status", "lastTransitionTime", "reason", "message")
        }
        return cls(text["type"], text["status"], text["lastTransitionTime"], text["reason"], text["message"])


@dataclass(frozen=True)
class TidalStatus:
    """The oFEP's status section, plus ``observedGeneration``."""

    desired_replicas: int | None = None
    active_rule: str | None = None
    last_trigger_time: str | None = None
    last_triggered_rule: str | None = None
    next_trigger_time: str | None = None
    next_trigger_rule: str | None = None
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The status as the API holds it (fields never set are left out)."""
        fields = {
            "desiredReplicas": self.desired_replicas,
            "activeRule": self.active_rule,
            "lastTriggerTime": self.last_trigger_time,
            "lastTriggeredRule": self.last_triggered_rule,
            "nextTriggerTime": self.next_trigger_time,
            "nextTriggerRule": self.next_trigger_rule,
            "conditions": [c.to_dict() for c in self.conditions],
            "observedGeneration": self.observed_generation,
        }
        return {k: v for k, v in fields.items() if v is not None}

    @classmethod
    def from_dict(cls, raw: object) -> TidalStatus:
        """Lenient: whatever is there and well-formed; the rest reads as never set."""
        if not isinstance(raw, Mapping):
            return cls()
        conditions = raw.get("conditions")
        return cls(
            desired_replicas=_int_or_none(raw.get("desiredReplicas")),
            active_rule=_str_or_none(raw.get("activeRule")),
            last_trigger_time=_str_or_none(raw.get("lastTriggerTime")),
            last_triggered_rule=_str_or_none(raw.get("lastTriggeredRule")),
            next_trigger_time=_str_or_none(raw.get("nextTriggerTime")),
            next_trigger_rule=_str_or_none(raw.get("nextTriggerRule")),
            conditions=tuple(Condition.from_dict(c) for c in conditions if isinstance(c, Mapping))
            if isinstance(conditions, list)
            else (),
            observed_generation=_int_or_none(raw.get("observedGeneration")),
        )

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


@dataclass(frozen=True)
class TidalScheduler:
    """One object as the controller sees it. ``spec_problems`` lists what the schema should have
    refused but did not (an API server without the CRD's validations): each names its field."""

    namespace: str
    name: str
    generation: int
    resource_version: str
    annotations: Mapping[str, str]
    target: TargetRef | None
    rules: tuple[Rule, ...]
    status: TidalStatus
    spec_problems: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def scale_requested(self) -> bool:
        return self.annotations.get(SCALE_ANNOTATION, "").lower() == "true"

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TidalScheduler:
        metadata = _mapping(raw.get("metadata"))
        spec = _mapping(raw.get("spec"))
        problems: list[str] = []
        target = _target(_mapping(spec.get("targetRef")), problems)
        rules = _rules(_mapping(_mapping(spec.get("triggers")).get("times")).get("rules"), problems)
        annotations = _mapping(metadata.get("annotations"))
        return cls(
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or ""),
            generation=_int_or_none(metadata.get("generation")) or 0,
            resource_version=str(metadata.get("resourceVersion") or ""),
            annotations={str(k): str(v) for k, v in annotations.items()},
            target=target,
            rules=rules,
            status=TidalStatus.from_dict(raw.get("status")),
            spec_problems=tuple(problems),
        )


def _target(raw: Mapping[str, Any], problems: list[str]) -> TargetRef | None:
    values = {k: raw.get(k) for k in ("apiVersion", "kind", "name", "namespace")}
    missing = [k for k, v in values.items() if not isinstance(v, str) or not v]
    if missing:
        problems.extend(f"spec.targetRef.{k} is missing" for k in missing)
        return None
    return TargetRef(*(str(v) for v in values.values()))


def _rules(raw: object, problems: list[str]) -> tuple[Rule, ...]:
    if not isinstance(raw, list) or not raw:
        problems.append("spec.triggers.times.rules must list at least one rule")
        return ()
    rules: list[Rule] = []
    for position, item in enumerate(raw, 1):
        entry = _mapping(item)
        name, cron, replicas = entry.get("name"), entry.get("cron"), entry.get("replicas")
        where = f"spec.triggers.times.rules[{position - 1}]"
        if not isinstance(name, str) or not name:
            problems.append(f"{where}.name is missing")
        elif not isinstance(cron, str) or not cron:
            problems.append(f"{where}.cron is missing (rule {name!r})")
        elif isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            problems.append(f"{where}.replicas must be a positive integer (rule {name!r}, got {replicas!r})")
        else:
            rules.append(Rule(name, cron, replicas, str(entry.get("description") or "")))
    return tuple(rules)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


# -- evaluation ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fire:
    """An instant some rules fire at, with those rules in spec order."""

    at: datetime
    rules: tuple[Rule, ...]

    @property
    def winner(self) -> Rule:
        """The most replicas; among equals the first in spec order (``max`` keeps the first)."""
        return max(self.rules, key=lambda rule: rule.replicas)

    @property
    def names(self) -> str:
        return ",".join(rule.name for rule in self.rules)

    @property
    def conflict(self) -> bool:
        return len(self.rules) > 1


@dataclass(frozen=True)
class Evaluation:
    """What the controller writes and when it looks again.

    ``changed``: status differs from the object's (no patch otherwise). ``applied``: the fire this
    evaluation applied, if any. ``problem``: why the object is not Ready. ``wake``: the next fire,
    None when there is none to wait for (invalid rules: only a spec change can help)."""

    status: TidalStatus
    changed: bool
    applied: Fire | None = None
    problem: Problem | None = None
    wake: datetime | None = None


@lru_cache(maxsize=65536)
def _fires_around(expression: str, second: datetime, catch_up: timedelta) -> tuple[datetime | None, datetime]:
    """A rule's latest fire at or before ``second`` (no older than ``catch_up``) and its next one
    after it. Fires fall on whole seconds, so every evaluation within one second gets the same
    answer: objects that share rules (a fleet of them at 09:00) compute it once. Both come back in
    UTC: fires of one zone compare by wall clock in Python, wrong inside a repeated hour (PEP 495)."""
    schedule = parse_cron(expression)
    latest = schedule.previous_at_or_before(second, catch_up)
    return (latest and latest.astimezone(UTC)), schedule.next_after(second).astimezone(UTC)


def validate(obj: TidalScheduler, target_exists: bool) -> tuple[Problem | None, str]:
    """oFEP §6, the checks the CRD's CEL cannot make: rule names unique, every cron parses, the
    target exists (the caller looked). Returns the first problem's reason and every problem's text."""
    found: list[tuple[Problem, str]] = [(Problem.INVALID_SPEC, text) for text in obj.spec_problems]
    seen: dict[str, int] = {}
    for position, rule in enumerate(obj.rules, 1):
        if rule.name in seen:
            found.append(
                (
                    Problem.DUPLICATE_RULE_NAME,
                    f"rule name {rule.name!r} is used by rules {seen[rule.name]} and {position}",
                )
            )
        seen.setdefault(rule.name, position)
    for rule in obj.rules:
        try:
            parse_cron(rule.cron)
        except CronError as error:
            found.append((Problem.INVALID_CRON, f"rule {rule.name!r}: {error}"))
    if obj.target is not None:
        if not obj.target.scalable:
            kinds = ", ".join(f"apps/v1 {k}" for k in SCALABLE_KINDS)
            target = f"{obj.target.api_version} {obj.target.kind}"
            found.append((Problem.UNSUPPORTED_TARGET, f"target {target} is not supported: use {kinds}"))
        elif not target_exists:
            found.append((Problem.TARGET_NOT_FOUND, f"target {obj.target} not found"))
    return (found[0][0] if found else None), "; ".join(text for _, text in found)


def fires(rules: Sequence[Rule], now: datetime, catch_up: timedelta) -> tuple[Fire | None, Fire | None]:
    """The latest instant at or before ``now``, no older than ``catch_up``, that any rule fires at;
    and the earliest instant after ``now`` that any rule fires at (rules must parse)."""
    second = now.replace(microsecond=0)
    around = [(rule, *_fires_around(rule.cron, second, catch_up)) for rule in rules]
    latest = _gather([(at, rule) for rule, at, _ in around if at is not None], max)
    upcoming = _gather([(at, rule) for rule, _, at in around], min)
    return latest, upcoming


def _gather(
    candidates: list[tuple[datetime, Rule]], pick: Callable[[Iterable[datetime]], datetime]
) -> Fire | None:
    """The picked instant and every rule firing at it, in spec order."""
    if not candidates:
        return None
    at = pick(instant for instant, _ in candidates)
    return Fire(at, tuple(rule for instant, rule in candidates if instant == at))


def evaluate(obj: TidalScheduler, now: datetime, target_exists: bool, catch_up: timedelta) -> Evaluation:
    """The object's status at ``now``; see the module docstring for the rules.

    A fire is applied when it is newer than ``lastTriggerTime``, or, right after a spec change
    (``observedGeneration`` behind), when it is that same instant: an edited rule takes effect at
    once. An invalid object keeps its last decision and only reports why it is not Ready."""
    old = obj.status
    problem, message = validate(obj, target_exists)
    if problem is not None:
        conditions = _conditions(old, now, obj, ready=(False, problem.value, message), conflict=None)
        new = replace(old, conditions=conditions, observed_generation=obj.generation)
        return Evaluation(new, new != old, problem=problem)
    latest, upcoming = fires(obj.rules, now, catch_up)
    applied = latest if latest is not None and _is_new(latest.at, old, obj.generation) else None
    new = replace(
        old,
        next_trigger_time=rfc3339(upcoming.at) if upcoming else None,
        next_trigger_rule=upcoming.names if upcoming else None,
        observed_generation=obj.generation,
    )
    if applied is not None:
        new = replace(
            new,
            desired_replicas=applied.winner.replicas,
            active_rule=applied.winner.name,
            last_trigger_time=rfc3339(applied.at),
            last_triggered_rule=applied.names,
        )
    ready = (True, "TriggerActive", "Time-based trigger is active")
    new = replace(new, conditions=_conditions(old, now, obj, ready=ready, conflict=applied))
    return Evaluation(new, new != old, applied=applied, wake=upcoming.at if upcoming else None)


def _is_new(at: datetime, status: TidalStatus, generation: int) -> bool:
    last = parse_time(status.last_trigger_time)
    if last is None or at > last:
        return True
    return at == last and status.observed_generation != generation


def _conditions(
    old: TidalStatus,
    now: datetime,
    obj: TidalScheduler,
    ready: tuple[bool, str, str],
    conflict: Fire | None,
) -> tuple[Condition, ...]:
    """Ready always; RuleConflict after an applied fire of several rules, kept until a fire of one
    rule replaces it; TooManyRules while there are more than the oFEP recommends."""
    wanted: list[tuple[str, bool, str, str]] = [(READY, *ready)]
    if conflict is not None and conflict.conflict:
        wanted.append((RULE_CONFLICT, True, "MaxReplicasWins", _conflict_message(conflict)))
    elif conflict is None and (kept := old.condition(RULE_CONFLICT)) is not None:
        wanted.append((RULE_CONFLICT, kept.status == "True", kept.reason, kept.message))
    if len(obj.rules) > RECOMMENDED_MAX_RULES:
        text = f"{len(obj.rules)} rules; oFEP-0033 recommends at most {RECOMMENDED_MAX_RULES} per object"
        wanted.append((TOO_MANY_RULES, True, "AboveRecommendedRuleCount", text))
    return tuple(_condition(old, now, *item) for item in wanted)


def _condition(
    old: TidalStatus, now: datetime, kind: str, true: bool, reason: str, message: str
) -> Condition:
    """``lastTransitionTime`` moves only when the condition's status flips (or it is new)."""
    status = "True" if true else "False"
    before = old.condition(kind)
    since = before.last_transition_time if before is not None and before.status == status else rfc3339(now)
    return Condition(kind, status, since, reason, message)


def _conflict_message(fire: Fire) -> str:
    rules = ", ".join(f"{rule.name} ({rule.replicas})" for rule in fire.rules)
    winner = fire.winner
    return (
        f"rules {rules} fired at {rfc3339(fire.at)}: {winner.name} wins with {winner.replicas} replicas "
        "(the most replicas win)"
    )
