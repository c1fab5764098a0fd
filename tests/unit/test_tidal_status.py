"""TidalScheduler evaluation (oFEP-0033 status, §5 conflicts, §6 validation, §7 recovery, §9 limits).

We test: a fire sets desiredReplicas, activeRule, last and next trigger exactly as the oFEP's
status section shows them; several rules at one instant: the most replicas win (ties: first in
spec order) and the conflict is recorded; catch-up applies only the most recent missed fire, and
none older than the bound; an unchanged object yields an unchanged status (no patch); invalid
objects are Ready=False with the reason and a message naming the rule and field; more than 100
rules warn; lastTransitionTime moves only when a condition flips; a spec change takes effect on
the instant already applied.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from falcon.domain.tidal import (
    READY,
    RULE_CONFLICT,
    TOO_MANY_RULES,
    Problem,
    TidalScheduler,
    TidalStatus,
    evaluate,
)

DAY = timedelta(days=1)
# 2026-03-02 is a Monday; Asia/Shanghai is UTC+8 all year.
MORNING = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)  # 08:00 in Shanghai
TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "production"}
OFEP_EXAMPLE = [
    {"name": "morning-base", "cron": "CRON_TZ=Asia/Shanghai 0 0 8 * * *", "replicas": 20},
    {"name": "afternoon-peak", "cron": "CRON_TZ=Asia/Shanghai 0 0 14-17 * * *", "replicas": 40},
    {"name": "evening-rush", "cron": "CRON_TZ=Asia/Shanghai 0 0 19-21 * * *", "replicas": 60},
]


def scheduler(
    rules: list[dict[str, Any]],
    status: dict[str, Any] | None = None,
    generation: int = 1,
    target: dict[str, Any] | None = None,
) -> TidalScheduler:
    """The object as the API server returns it."""
    return TidalScheduler.from_dict(
        {
            "apiVersion": "scheduling.tidal.io/v1alpha1",
            "kind": "TidalScheduler",
            "metadata": {"name": "tidal", "namespace": "production", "generation": generation},
            "spec": {
                "targetRef": TARGET if target is None else target,
                "triggers": {"times": {"rules": rules}},
            },
            "status": status or {},
        }
    )


def at(obj: TidalScheduler, now: datetime, exists: bool = True) -> TidalScheduler:
    """The object as it reads after the controller patched its status at ``now``."""
    result = evaluate(obj, now, exists, DAY)
    return TidalScheduler.from_dict(
        {
            "metadata": {"name": obj.name, "namespace": obj.namespace, "generation": obj.generation},
            "spec": {"targetRef": TARGET, "triggers": {"times": {"rules": _raw_rules(obj)}}},
            "status": result.status.to_dict(),
        }
    )


def _raw_rules(obj: TidalScheduler) -> list[dict[str, Any]]:
    return [{"name": r.name, "cron": r.cron, "replicas": r.replicas} for r in obj.rules]


@pytest.mark.parametrize(
    ("now", "desired", "active", "last", "next_time", "next_rule"),
    [
        (MORNING, 20, "morning-base", "2026-03-02T00:00:00Z", "2026-03-02T06:00:00Z", "afternoon-peak"),
        (
            MORNING + timedelta(hours=6, seconds=0.4),
            40,
            "afternoon-peak",
            "2026-03-02T06:00:00Z",
            "2026-03-02T07:00:00Z",
            "afternoon-peak",
        ),
        (
            MORNING + timedelta(hours=13, minutes=59),
            60,
            "evening-rush",
            "2026-03-02T13:00:00Z",
            "2026-03-03T00:00:00Z",
            "morning-base",
        ),
    ],
    ids=["08:00 morning", "14:00 afternoon", "21:59 after the last evening fire"],
)
def test_a_fire_sets_the_status_fields_of_the_ofep(
    now: datetime, desired: int, active: str, last: str, next_time: str, next_rule: str
) -> None:
    result = evaluate(scheduler(OFEP_EXAMPLE), now, True, DAY)

    status = result.status
    assert (status.desired_replicas, status.active_rule) == (desired, active)
    assert (status.last_trigger_time, status.last_triggered_rule) == (last, active)
    assert (status.next_trigger_time, status.next_trigger_rule) == (next_time, next_rule)
    assert status.observed_generation == 1
    (ready,) = status.conditions
    assert (ready.type, ready.status, ready.reason, ready.message) == (
        READY,
        "True",
        "TriggerActive",
        "Time-based trigger is active",
    )
    assert result.changed and result.applied is not None
    assert result.wake == datetime.fromisoformat(next_time)


def test_the_status_dict_is_the_ofeps_field_names_and_reads_back_the_same() -> None:
    status = evaluate(scheduler(OFEP_EXAMPLE), MORNING, True, DAY).status
    raw = status.to_dict()
    assert list(raw) == [
        "desiredReplicas",
        "activeRule",
        "lastTriggerTime",
        "lastTriggeredRule",
        "nextTriggerTime",
        "nextTriggerRule",
        "conditions",
        "observedGeneration",
    ]
    assert list(raw["conditions"][0]) == ["type", "status", "lastTransitionTime", "reason", "message"]
    assert TidalStatus.from_dict(raw) == status


def test_a_status_that_is_not_well_formed_reads_as_never_set() -> None:
    garbage = {
        "desiredReplicas": "many",
        "conditions": "none",
        "lastTriggerTime": 5,
        "observedGeneration": True,
    }
    assert TidalStatus.from_dict(garbage) == TidalStatus()
    assert TidalStatus.from_dict(["not", "a", "mapping"]) == TidalStatus()


def test_rules_firing_together_max_replicas_wins_first_in_spec_order_and_the_conflict_is_recorded() -> None:
    rules = [
        {"name": "small", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 3},
        {"name": "big", "cron": "CRON_TZ=Europe/Berlin 0 0 10 * * *", "replicas": 5},  # 09:00 UTC in March
        {"name": "also-big", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 5},
    ]
    now = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    result = evaluate(scheduler(rules), now, True, DAY)

    status = result.status
    assert (status.desired_replicas, status.active_rule) == (5, "big")
    assert status.last_triggered_rule == "small,big,also-big"
    assert status.next_trigger_rule == "small,big,also-big"  # tomorrow's conflict, visible already
    conflict = status.condition(RULE_CONFLICT)
    assert conflict is not None
    assert (conflict.status, conflict.reason) == ("True", "MaxReplicasWins")
    assert conflict.message == (
        "rules small (3), big (5), also-big (5) fired at 2026-03-02T09:00:00Z: big wins with 5 replicas "
        "(the most replicas win)"
    )
    assert result.applied is not None and result.applied.conflict


def test_a_later_fire_of_one_rule_clears_the_conflict() -> None:
    rules = [
        {"name": "a", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 3},
        {"name": "b", "cron": "CRON_TZ=UTC 0 0 9,12 * * *", "replicas": 5},
    ]
    conflicted = at(scheduler(rules), datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    assert conflicted.status.condition(RULE_CONFLICT) is not None
    quiet = evaluate(conflicted, datetime(2026, 3, 2, 10, 0, tzinfo=UTC), True, DAY).status
    assert quiet.condition(RULE_CONFLICT) is not None  # no fire between: the last trigger's record stays
    single = evaluate(conflicted, datetime(2026, 3, 2, 12, 0, tzinfo=UTC), True, DAY).status
    assert single.condition(RULE_CONFLICT) is None
    assert (single.active_rule, single.last_triggered_rule) == ("b", "b")


def test_catch_up_applies_only_the_most_recent_missed_fire() -> None:
    rules = [
        {"name": "peak", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 9},
        {"name": "calm", "cron": "CRON_TZ=UTC 0 0 10 * * *", "replicas": 2},
    ]
    down_since = {"desiredReplicas": 1, "lastTriggerTime": "2026-03-02T08:00:00Z", "lastTriggeredRule": "x"}

    result = evaluate(scheduler(rules, down_since), datetime(2026, 3, 2, 10, 30, tzinfo=UTC), True, DAY)

    status = result.status
    assert (status.desired_replicas, status.active_rule, status.last_trigger_time) == (
        2,
        "calm",
        "2026-03-02T10:00:00Z",
    )
    assert result.applied is not None and [r.name for r in result.applied.rules] == ["calm"]


def test_a_missed_fire_older_than_the_bound_is_not_applied() -> None:
    rules = [{"name": "daily", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 9}]
    before = {"desiredReplicas": 1, "lastTriggerTime": "2026-03-01T09:00:00Z", "lastTriggeredRule": "daily"}
    now = datetime(2026, 3, 2, 11, 0, tzinfo=UTC)  # today's 09:00 is 2 h old

    late = evaluate(scheduler(rules, before), now, True, timedelta(hours=1))
    in_time = evaluate(scheduler(rules, before), now, True, timedelta(hours=3))

    assert late.applied is None and late.status.desired_replicas == 1
    assert late.status.next_trigger_time == "2026-03-03T09:00:00Z"
    assert in_time.applied is not None and in_time.status.desired_replicas == 9


def test_an_unchanged_object_gives_an_unchanged_status_so_nothing_is_patched() -> None:
    obj = at(scheduler(OFEP_EXAMPLE), MORNING)
    again = evaluate(obj, MORNING + timedelta(minutes=30), True, DAY)
    assert not again.changed and again.applied is None
    assert again.status == obj.status


def test_a_spec_change_takes_effect_on_the_instant_already_applied() -> None:
    rules = [{"name": "daily", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 5}]
    applied = at(scheduler(rules), datetime(2026, 3, 2, 9, 0, tzinfo=UTC)).status.to_dict()
    later = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)

    edited = evaluate(scheduler([{**rules[0], "replicas": 8}], applied, generation=2), later, True, DAY)
    unedited = evaluate(scheduler([{**rules[0], "replicas": 8}], applied, generation=1), later, True, DAY)

    assert edited.status.desired_replicas == 8 and edited.status.observed_generation == 2
    assert unedited.applied is None and unedited.status.desired_replicas == 5


@pytest.mark.parametrize(
    ("rules", "target", "exists", "problem", "message"),
    [
        (
            [{"name": "bad-hour", "cron": "CRON_TZ=UTC 0 0 25 * * *", "replicas": 2}],
            TARGET,
            True,
            Problem.INVALID_CRON,
            "rule 'bad-hour': hour: 25 is above the maximum 23 (in 'CRON_TZ=UTC 0 0 25 * * *')",
        ),
        (
            [
                {"name": "twice", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 2},
                {"name": "other", "cron": "CRON_TZ=UTC 0 0 10 * * *", "replicas": 2},
                {"name": "twice", "cron": "CRON_TZ=UTC 0 0 11 * * *", "replicas": 3},
            ],
            TARGET,
            True,
            Problem.DUPLICATE_RULE_NAME,
            "rule name 'twice' is used by rules 1 and 3",
        ),
        (
            [{"name": "daily", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 2}],
            TARGET,
            False,
            Problem.TARGET_NOT_FOUND,
            "target Deployment production/web not found",
        ),
        (
            [{"name": "daily", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 2}],
            {**TARGET, "apiVersion": "apps/v1", "kind": "DaemonSet"},
            False,
            Problem.UNSUPPORTED_TARGET,
            "target apps/v1 DaemonSet is not supported: use apps/v1 Deployment, apps/v1 StatefulSet",
        ),
        (
            [{"name": "none", "cron": "CRON_TZ=UTC 0 0 9 * * *", "replicas": 0}],
            {**TARGET, "name": ""},
            True,
            Problem.INVALID_SPEC,
            "spec.targetRef.name is missing; "
            "spec.triggers.times.rules[0].replicas must be a positive integer (rule 'none', got 0)",
        ),
    ],
    ids=["invalid cron", "duplicate rule names", "missing target", "unsupported kind", "schema not enforced"],
)
def test_an_invalid_object_is_not_ready_says_why_and_keeps_its_last_decision(
    rules: list[dict[str, Any]], target: dict[str, Any], exists: bool, problem: Problem, message: str
) -> None:
    before = {"desiredReplicas": 4, "activeRule": "old", "lastTriggerTime": "2026-03-02T08:00:00Z"}
    now = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    result = evaluate(scheduler(rules, before, target=target), now, exists, DAY)

    assert result.problem is problem and result.applied is None and result.wake is None
    ready = result.status.condition(READY)
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == ("False", problem.value, message)
    assert (result.status.desired_replicas, result.status.active_rule) == (4, "old")


def test_more_than_a_hundred_rules_warn_but_still_work() -> None:
    rules = [
        {"name": f"r{i}", "cron": f"CRON_TZ=UTC {i % 60} 0 9 * * *", "replicas": i + 1} for i in range(101)
    ]
    status = evaluate(scheduler(rules), datetime(2026, 3, 2, 9, 0, 59, tzinfo=UTC), True, DAY).status
    warning = status.condition(TOO_MANY_RULES)
    assert warning is not None
    assert (warning.status, warning.reason) == ("True", "AboveRecommendedRuleCount")
    assert warning.message == "101 rules; oFEP-0033 recommends at most 100 per object"
    assert status.condition(READY) is not None and status.desired_replicas == 60  # r59, at second 59
    assert evaluate(scheduler(rules[:100]), MORNING, True, DAY).status.condition(TOO_MANY_RULES) is None


def test_last_transition_time_moves_only_when_the_condition_flips() -> None:
    rules = [{"name": "hourly", "cron": "CRON_TZ=UTC 0 0 * * * *", "replicas": 2}]
    t1 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    ready_since = at(scheduler(rules), t1)
    after_fire = at(ready_since, t1 + timedelta(hours=1))
    gone = at(after_fire, t1 + timedelta(hours=1, minutes=5), exists=False)
    back = at(gone, t1 + timedelta(hours=1, minutes=10))

    def since(obj: TidalScheduler) -> str:
        condition = obj.status.condition(READY)
        assert condition is not None
        return condition.last_transition_time

    assert since(ready_since) == since(after_fire) == "2026-03-02T09:00:00Z"
    assert since(gone) == "2026-03-02T10:05:00Z"
    assert since(back) == "2026-03-02T10:10:00Z"


def test_in_a_repeated_hour_the_next_trigger_is_the_earliest_instant_not_the_earliest_wall_clock() -> None:
    """New York, 2026-11-01, 01:00-01:59 happens twice. At 01:20 EDT the fixed-hour rule's 01:30 EDT
    (05:30Z) comes before the hourly rule's second 01:10, in EST (06:10Z), though 01:10 reads earlier."""
    obj = scheduler(
        [
            {"name": "hourly", "cron": "CRON_TZ=America/New_York 0 10 * * * *", "replicas": 2},
            {"name": "half-past-one", "cron": "CRON_TZ=America/New_York 0 30 1 * * *", "replicas": 3},
        ]
    )
    status = evaluate(obj, datetime(2026, 11, 1, 5, 20, tzinfo=UTC), True, DAY).status
    assert (status.next_trigger_time, status.next_trigger_rule) == ("2026-11-01T05:30:00Z", "half-past-one")
    assert (status.last_trigger_time, status.last_triggered_rule) == ("2026-11-01T05:10:00Z", "hourly")
