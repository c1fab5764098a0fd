"""Tidal warm pools: cron rules saying how many idle node pools a queue keeps ready, and when.

A rule is (queue, cron expression with ``CRON_TZ=``, pools). The target is level-triggered, as
the TidalScheduler's replicas are: at any instant, among a queue's rules the one(s) whose latest
fire is the most recent give it (the most pools wins when several fire at that instant); a rule
counts only fires since it was added, so a queue none of whose rules fired yet has no warm
target (0). The clock is always an argument: the same rules and instant give the same target
after any restart.

Pools are created only at a fire: once per fire, the queue is topped up to the target
(``needs_topping_up``, remembered on the rule as ``warmed_fire_at``). A warm pool a task takes is
not replaced until the next fire: a replacement would stand idle, and on a cluster that runs one
node-pool operation at a time hold it ahead of the tasks that need pools of their own
(benchmarks/bench_tidal.py). The target still keeps pools that come back idle (a task ended) and
sets how many the reaper spares.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from falcon.domain.cron import CronError, parse_cron
from falcon.domain.model import NODE_POOL_PREFIX, QueueKey

MAX_WARM_POOLS = 64  # per rule: a typo of 200 must not order 200 TPU slices
_RULE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class WarmRule:
    """One row of ``falcon_warm_rules``: keep ``pools`` idle pools of ``queue`` from each fire on."""

    name: str
    queue: QueueKey
    cron: str
    pools: int
    created_at: datetime
    last_error: str | None = None  # the latest warm creation of this rule that failed
    failed_at: datetime | None = None
    warmed_fire_at: datetime | None = None  # the fire whose pools were recorded (cleared by a failure)


def check_rule_name(name: str) -> None:
    """ValueError unless ``name`` can name a rule (it is shown in Messages and commands)."""
    if not _RULE_NAME.match(name):
        raise ValueError(f"rule name {name!r}: lowercase letters, digits and '-', at most 63 characters")


def check_pools(pools: int) -> None:
    if not 0 <= pools <= MAX_WARM_POOLS:
        raise ValueError(f"pools: {pools} is not between 0 and {MAX_WARM_POOLS}")


def schedulable(rules: Iterable[WarmRule]) -> list[WarmRule]:
    """The rules whose cron parses. ``add`` refuses any other, but a row written by hand (or by
    another falcon) must cost only its own rule, never the dispatcher's round."""
    usable = []
    for rule in rules:
        try:
            parse_cron(rule.cron)
        except CronError:
            continue
        usable.append(rule)
    return usable


def last_fire(rule: WarmRule, now: datetime) -> datetime | None:
    """The rule's latest fire at or before ``now`` since it was added; None if it has not fired."""
    if rule.created_at > now:
        return None
    fire = parse_cron(rule.cron).previous_at_or_before(now, now - rule.created_at)
    return fire and fire.astimezone(UTC)  # instants: fires of one zone compare by wall clock (PEP 495)


@dataclass(frozen=True)
class WarmTarget:
    """How many idle pools a queue keeps ready now, and which rule says so."""

    pools: int = 0
    rule: str | None = None  # the active rule; None: no rule of the queue has fired yet
    fired_at: datetime | None = None
    tied: tuple[str, ...] = ()  # the other rules that fired at the same instant (and lost, or tied)


NO_TARGET = WarmTarget()


def warm_target(rules: Iterable[WarmRule], now: datetime) -> WarmTarget:
    """The target of one queue's rules at ``now``: the latest fire wins; at one instant, the most pools."""
    fired = [(at, rule) for rule in rules if (at := last_fire(rule, now)) is not None]
    if not fired:
        return NO_TARGET
    latest = max(at for at, _ in fired)
    firing = sorted((rule for at, rule in fired if at == latest), key=lambda r: (-r.pools, r.name))
    winner = firing[0]
    return WarmTarget(winner.pools, winner.name, latest, tuple(r.name for r in firing[1:]))


def by_queue(rules: Iterable[WarmRule]) -> dict[QueueKey, list[WarmRule]]:
    grouped: dict[QueueKey, list[WarmRule]] = {}
    for rule in rules:
        grouped.setdefault(rule.queue, []).append(rule)
    return grouped


def warm_targets(rules: Iterable[WarmRule], now: datetime) -> dict[QueueKey, WarmTarget]:
    """Every queue that has rules, with its target at ``now``."""
    return {queue: warm_target(of_queue, now) for queue, of_queue in by_queue(rules).items()}


def next_change(rules: Iterable[WarmRule], now: datetime) -> datetime | None:
    """The earliest instant after ``now`` at which a target may change: the next fire of any rule."""
    return min((parse_cron(rule.cron).next_after(now).astimezone(UTC) for rule in rules), default=None)


def needs_topping_up(target: WarmTarget, rules: Iterable[WarmRule]) -> bool:
    """Whether the queue's pools for the fire that set ``target`` are still to be recorded."""
    if target.rule is None or target.fired_at is None:
        return False
    winner = next((rule for rule in rules if rule.name == target.rule), None)
    done = winner.warmed_fire_at if winner is not None else None
    return done is None or done < target.fired_at


def warm_deficit(target: int, idle: int, creating: int) -> int:
    """Pools to create now: the target, less the queue's idle pools and its warm pools still
    being created (a task's pool being created is its own, never counted)."""
    return max(0, target - idle - creating)


def warm_keeps(target: int, idle: int) -> bool:
    """Whether a pool that would otherwise go is kept idle for the warm target of its queue."""
    return idle < target


def creation_held(rules: Iterable[WarmRule], now: datetime, hold: timedelta) -> bool:
    """A queue one of whose warm creations failed less than ``hold`` ago is not warmed: a stockout
    is not asked again every reconcile round."""
    return any(r.failed_at is not None and now - r.failed_at < hold for r in rules)


def surplus_first(
    candidates: Sequence[tuple[QueueKey, datetime]],
    idle: Mapping[QueueKey, int],
    targets: Mapping[QueueKey, int],
) -> list[int]:
    """Which of the idle pools other rules would delete may go, as indexes into ``candidates``.

    Per queue, at most ``idle - target`` of them, the longest idle first: the order the reaper
    expires pools in already, and the same order claims take them, so the pools kept are
    the ones that became ready (or were handed back) last."""
    order = sorted(range(len(candidates)), key=lambda i: candidates[i][1])
    room = {queue: max(0, count - targets.get(queue, 0)) for queue, count in idle.items()}
    chosen = []
    for i in order:
        queue = candidates[i][0]
        if room.get(queue, 0) > 0:
            room[queue] -= 1
            chosen.append(i)
    return sorted(chosen)


def warm_pool_name(queue: QueueKey, now: datetime, index: int) -> str:
    """A fresh name for the ``index``-th warm pool created at ``now`` (``falcon-2x4-w…``).

    Recorded before GKE is asked, like a task's pool, so a resumed creation finds it by its record."""
    digest = hashlib.sha256(f"{queue.cluster_id}|{queue.topology}|{now.isoformat()}|{index}".encode())
    return f"{NODE_POOL_PREFIX}{queue.topology.lower()}-w{digest.hexdigest()[:10]}"
