"""The rule engine's own contract: errors name the field, never-firing rules are refused, the
descriptors, ``?``, names, how the day fields combine, ``@every`` anchored at the epoch, and
hypothesis properties of next_after / previous_at_or_before / upcoming over zones with DST
(including Lord Howe's 30-minute shift and Samoa's skipped day) checked against an independent
matcher of the wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from falcon.domain.cron import CronError, CronSchedule, parse_cron

START = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday


def instants(fires: list[datetime]) -> list[datetime]:
    return [fire.astimezone(UTC) for fire in fires]


def test_error_message_names_field_reason_and_expression() -> None:
    with pytest.raises(CronError) as raised:
        parse_cron("CRON_TZ=UTC 0 0 25 * * *")
    assert str(raised.value) == "hour: 25 is above the maximum 23 (in 'CRON_TZ=UTC 0 0 25 * * *')"
    assert (raised.value.field, raised.value.reason) == ("hour", "25 is above the maximum 23")
    assert raised.value.expression == "CRON_TZ=UTC 0 0 25 * * *"
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("expression", "field", "reason"),
    [
        ("0 0 9 * * *", "CRON_TZ", "must start with CRON_TZ="),
        (" CRON_TZ=UTC 0 0 9 * * *", "CRON_TZ", "must start with CRON_TZ="),
        ("TZ=UTC 0 0 9 * * *", "CRON_TZ", "must start with CRON_TZ="),
        ("CRON_TZ= 0 0 9 * * *", "CRON_TZ", "no zone"),
        ("CRON_TZ=Mars/Olympus 0 0 9 * * *", "CRON_TZ", "unknown time zone 'Mars/Olympus'"),
        ("CRON_TZ=../../etc/passwd 0 0 9 * * *", "CRON_TZ", "unknown time zone"),
        ("CRON_TZ=America 0 0 9 * * *", "CRON_TZ", "unknown time zone"),
        ("CRON_TZ=UTC", "expression", "no schedule"),
        ("CRON_TZ=UTC 0 9 * * *", "expression", "expected 6 fields"),
        ("CRON_TZ=UTC 0 0 9 * * * 2026", "expression", "found 7"),
        ("CRON_TZ=UTC @every", "descriptor", "not a duration"),
        ("CRON_TZ=UTC @every 1h 30m", "descriptor", "not a duration"),
        ("CRON_TZ=UTC @every 1d", "descriptor", "not a duration"),
        ("CRON_TZ=UTC @every .h", "descriptor", "not a duration"),
        ("CRON_TZ=UTC @every 500ms", "descriptor", "at least 1s"),
        ("CRON_TZ=UTC @every 0", "descriptor", "at least 1s"),
        ("CRON_TZ=UTC @every -5m", "descriptor", "at least 1s"),
        ("CRON_TZ=UTC @every 3000000h", "descriptor", "longer than a Go duration"),
        ("CRON_TZ=UTC @Daily", "descriptor", "unknown descriptor '@Daily'"),
        ("CRON_TZ=UTC @reboot", "descriptor", "unknown descriptor"),
        ("CRON_TZ=UTC 60 * * * * *", "second", "60 is above the maximum 59"),
        ("CRON_TZ=UTC 1,,2 * * * * *", "second", "empty item"),
        ("CRON_TZ=UTC 0 */0 * * * *", "minute", "at least 1"),
        ("CRON_TZ=UTC 0 5- * * * *", "minute", "'' is not a number"),
        ("CRON_TZ=UTC 0 0 *-5 * * *", "hour", "'*' is not a number"),
        ("CRON_TZ=UTC 0 0 9 0 * *", "day-of-month", "0 is below the minimum 1"),
        ("CRON_TZ=UTC 0 0 9 L * *", "day-of-month", "'L' is not a number"),
        ("CRON_TZ=UTC 0 0 9 15W * *", "day-of-month", "'15W' is not a number"),
        ("CRON_TZ=UTC 0 0 9 LW * *", "day-of-month", "not a number"),
        ("CRON_TZ=UTC 0 0 9 * 13 *", "month", "13 is above the maximum 12"),
        ("CRON_TZ=UTC 0 0 9 * JANUARY *", "month", "not a number or a name"),
        ("CRON_TZ=UTC 0 0 9 * * 7", "day-of-week", "7 is above the maximum 6"),
        ("CRON_TZ=UTC 0 0 9 * * MON#2", "day-of-week", "not a number or a name"),
        ("CRON_TZ=UTC 0 0 9 * * 5L", "day-of-week", "not a number or a name"),
        ("CRON_TZ=UTC 0 0 9 * * FRI-MON", "day-of-week", "runs backwards (5 is after 1)"),
        ("CRON_TZ=UTC 0 0 9 * * MON/x", "day-of-week", "step 'x'"),
    ],
)
def test_errors_name_the_field(expression: str, field: str, reason: str) -> None:
    with pytest.raises(CronError) as raised:
        parse_cron(expression)
    assert raised.value.field == field
    assert reason in raised.value.reason


@pytest.mark.parametrize(
    "expression",
    [
        "CRON_TZ=UTC 0 0 0 30 2 *",
        "CRON_TZ=UTC 0 0 0 31 4 ?",
        "CRON_TZ=UTC 0 0 0 31 2,4,6,9,11 *",
        "CRON_TZ=UTC 0 0 0 30-31 FEB *",
    ],
)
def test_rules_that_never_fire_are_refused(expression: str) -> None:
    with pytest.raises(CronError) as raised:
        parse_cron(expression)
    assert raised.value.field == "day-of-month"
    assert "never fires" in raised.value.reason


@pytest.mark.parametrize(
    "expression",
    [
        "CRON_TZ=UTC 0 0 0 29 2 *",  # leap years only
        "CRON_TZ=UTC 0 0 0 31 2,3 *",
        "CRON_TZ=UTC 0 0 0 30 2 MON",  # day-of-week restricts too: either matches
    ],
)
def test_rare_rules_are_accepted_and_fire(expression: str) -> None:
    assert parse_cron(expression).next_after(START) > START


@pytest.mark.parametrize(
    ("descriptor", "plain"),
    [
        ("@yearly", "0 0 0 1 1 *"),
        ("@annually", "0 0 0 1 1 *"),
        ("@monthly", "0 0 0 1 * *"),
        ("@weekly", "0 0 0 * * SUN"),
        ("@daily", "0 0 0 * * *"),
        ("@midnight", "0 0 0 * * *"),
        ("@hourly", "0 0 * * * *"),
    ],
)
def test_descriptors_fire_like_their_fields(descriptor: str, plain: str) -> None:
    after = datetime(2026, 10, 31, tzinfo=UTC)  # across New York's repeated hour too
    got = parse_cron(f"CRON_TZ=America/New_York {descriptor}").upcoming(after, 30)
    assert instants(got) == instants(parse_cron(f"CRON_TZ=America/New_York {plain}").upcoming(after, 30))


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [
        ("90s", 90),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("1h1ms", 3600),
        ("1.9s", 1),
        ("2m0.5s", 120),
        ("+45s", 45),
    ],
)
def test_every_fires_at_multiples_of_its_period_since_the_epoch(duration: str, seconds: int) -> None:
    after = datetime(2026, 3, 8, 1, 59, 58, 123456, tzinfo=ZoneInfo("America/New_York"))
    fires = parse_cron(f"CRON_TZ=America/New_York @every {duration}").upcoming(after, 3)
    epoch_seconds = [fire.timestamp() for fire in fires]
    assert all(value % seconds == 0 for value in epoch_seconds)
    assert epoch_seconds[0] - seconds < after.timestamp() < epoch_seconds[0]
    assert [b - a for a, b in pairwise(epoch_seconds)] == [seconds, seconds]


def test_every_ignores_the_zone_but_answers_in_it() -> None:
    shanghai = parse_cron("CRON_TZ=Asia/Shanghai @every 7m").next_after(START)
    utc = parse_cron("CRON_TZ=UTC @every 7m").next_after(START)
    assert shanghai.astimezone(UTC) == utc
    assert shanghai.utcoffset() == timedelta(hours=8)


def test_every_previous_is_the_last_multiple_within_the_horizon() -> None:
    schedule = parse_cron("CRON_TZ=UTC @every 1h")
    on_the_hour = datetime(2026, 5, 1, 10, tzinfo=UTC)
    assert schedule.previous_at_or_before(on_the_hour, timedelta(0)) == on_the_hour
    later = on_the_hour + timedelta(minutes=30)
    assert schedule.previous_at_or_before(later, timedelta(minutes=30)) == on_the_hour
    assert schedule.previous_at_or_before(later, timedelta(minutes=29)) is None


@pytest.mark.parametrize(
    ("written", "plain"),
    [
        ("0 0 9 ? * MON", "0 0 9 * * MON"),
        ("0 0 9 1,15 * ?", "0 0 9 1,15 * *"),
        ("? ? ? ? ? ?", "* * * * * *"),
        ("0 0 9 * JAN-MAR MON-FRI", "0 0 9 * 1-3 1-5"),
        ("0 0 9 * jan,Jun,DEC sun,Wed", "0 0 9 * 1,6,12 0,3"),
        ("0 0 9 * * MON/2", "0 0 9 * * 1,3,5"),
        ("0 0 9 * * SUN-SAT", "0 0 9 * * 0-6"),
        ("0 0 9 * FEB/3 *", "0 0 9 * 2,5,8,11 *"),
        ("0 0 9 * * */1", "0 0 9 * * *"),
        ("+5 +05 09 * * *", "5 5 9 * * *"),
    ],
)
def test_question_mark_and_names_read_as_robfig_does(written: str, plain: str) -> None:
    got = parse_cron(f"CRON_TZ=UTC {written}").upcoming(START, 20)
    assert instants(got) == instants(parse_cron(f"CRON_TZ=UTC {plain}").upcoming(START, 20))


@pytest.mark.parametrize(
    ("fields", "days"),
    [
        ("0 0 0 1,15 * MON", [1, 5, 12, 15, 19]),  # both restricted: either matches
        ("0 0 0 ? * MON", [5, 12, 19, 26]),  # `?` is `*`: both must match, so Mondays
        ("0 0 0 1,15 * ?", [1, 15]),
        ("0 0 0 1,15 * *,MON", [1, 15]),  # a `*` item anywhere in the list: both must match
        ("0 0 0 */7 * FRI", [1, 2, 8, 9, 15]),  # a stepped `*` restricts (robfig issue 70)
        ("0 0 0 1-31 * MON", [1, 2, 3, 4, 5]),  # a full range without `*` restricts: every day
    ],
)
def test_day_fields_combine_as_robfig(fields: str, days: list[int]) -> None:
    fires = parse_cron(f"CRON_TZ=UTC {fields}").upcoming(START - timedelta(seconds=1), len(days))
    assert [fire.day for fire in fires] == days


def test_queries_refuse_naive_datetimes() -> None:
    schedule = parse_cron("CRON_TZ=UTC 0 0 9 * * *")
    with pytest.raises(ValueError, match="aware"):
        schedule.next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        schedule.previous_at_or_before(datetime(2026, 1, 1), timedelta(days=1))


def test_upcoming_counts_and_expression_is_kept() -> None:
    schedule = parse_cron("CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5")
    assert schedule.expression == "CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5"
    assert schedule.zone == ZoneInfo("Asia/Shanghai")
    assert schedule.upcoming(START, 0) == []
    fires = schedule.upcoming(START, 3)
    assert [f.isoformat() for f in fires] == [
        "2026-01-01T09:00:00+08:00",
        "2026-01-02T09:00:00+08:00",
        "2026-01-05T09:00:00+08:00",
    ]


# Properties: rules built from value sets we know, so an independent matcher can check each fire.
BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
# Each zone with instants where its clock jumps: the properties are drawn near them half the time.
ZONES = {
    "UTC": [],
    "Asia/Shanghai": [],
    "America/New_York": ["2026-03-08T07:00", "2026-11-01T06:00"],
    "Europe/Berlin": ["2026-03-29T01:00", "2026-10-25T01:00"],
    "Australia/Lord_Howe": ["2026-04-04T15:00", "2026-10-03T15:30"],  # 30-minute shifts
    "Pacific/Apia": ["2011-12-30T10:00"],  # 30 December 2011 never happened there
}


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]
    star: bool


@st.composite
def fields(draw: st.DrawFn, index: int) -> Field:
    low, high = BOUNDS[index]
    kind = draw(st.sampled_from(["star", "question", "step", "list", "range"]))
    if kind in ("star", "question"):
        return Field("*" if kind == "star" else "?", frozenset(range(low, high + 1)), True)
    if kind == "step":
        start, step = draw(st.integers(low, high)), draw(st.integers(2, 30))
        return Field(f"{start}/{step}", frozenset(range(start, high + 1, step)), False)
    if kind == "range":
        start = draw(st.integers(low, high))
        end = draw(st.integers(start, min(high, start + 5)))
        return Field(f"{start}-{end}", frozenset(range(start, end + 1)), False)
    values = draw(st.sets(st.integers(low, high), min_size=1, max_size=4))
    return Field(",".join(map(str, sorted(values))), frozenset(values), False)


@dataclass(frozen=True)
class Rule:
    schedule: CronSchedule
    fields: tuple[Field, ...]

    def matches_wall(self, moment: datetime) -> bool:
        """Independent of the engine: does this wall time satisfy the fields (robfig's day rule)?"""
        sec, minute, hour, dom, month, dow = self.fields
        weekday = (moment.weekday() + 1) % 7
        day_ok = (moment.day in dom.values, weekday in dow.values)
        days = all(day_ok) if dom.star or dow.star else any(day_ok)
        clock = moment.second in sec.values and moment.minute in minute.values and moment.hour in hour.values
        return clock and moment.month in month.values and days


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    drawn = tuple(draw(fields(index)) for index in range(6))
    zone = draw(st.sampled_from(sorted(ZONES)))
    expression = f"CRON_TZ={zone} " + " ".join(field.text for field in drawn)
    try:
        schedule = parse_cron(expression)
    except CronError as error:
        assert error.field == "day-of-month" and "never fires" in error.reason
        reject()
    return Rule(schedule, drawn)


@st.composite
def rules_and_instants(draw: st.DrawFn) -> tuple[Rule, datetime]:
    """A rule, and an instant anywhere in 2010-2030 or within three hours of one of its zone's jumps."""
    rule = draw(rules())
    jumps = [datetime.fromisoformat(jump).replace(tzinfo=UTC) for jump in ZONES[rule.schedule.zone.key]]
    anywhere = st.datetimes(
        min_value=datetime(2010, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
    )
    if jumps and draw(st.booleans()):
        shift = draw(st.timedeltas(min_value=timedelta(hours=-3), max_value=timedelta(hours=3)))
        return rule, draw(st.sampled_from(jumps)) + shift
    return rule, draw(anywhere)


def is_jump(moment: datetime, zone: ZoneInfo) -> bool:
    """A fire moved by DST lands on the instant a clock jumps forward."""
    before = (moment - timedelta(seconds=1)).astimezone(zone).utcoffset()
    after = moment.astimezone(zone).utcoffset()
    return before is not None and after is not None and after > before


@settings(max_examples=150, deadline=None)
@given(rules_and_instants())
def test_every_fire_is_after_and_matches_its_wall_time(drawn: tuple[Rule, datetime]) -> None:
    rule, after = drawn
    fires = instants(rule.schedule.upcoming(after, 5))
    assert fires[0] > after
    assert all(a < b for a, b in pairwise(fires))
    for fire in fires:
        local = fire.astimezone(rule.schedule.zone)
        assert rule.matches_wall(local) or is_jump(fire, rule.schedule.zone)


@settings(max_examples=150, deadline=None)
@given(rules_and_instants(), st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=3)))
def test_next_and_previous_agree(drawn: tuple[Rule, datetime], gap: timedelta) -> None:
    rule, after = drawn
    schedule = rule.schedule
    fire = schedule.next_after(after).astimezone(UTC)  # arithmetic in a zone is wall-clock arithmetic
    again = schedule.previous_at_or_before(fire, timedelta(0))
    assert again is not None and again.astimezone(UTC) == fire
    # No fire between `after` and the next one: the previous fire just before it is at or before `after`.
    earlier = schedule.previous_at_or_before(fire - timedelta(microseconds=1), fire - after)
    assert earlier is None or earlier <= after
    # Monotone: a later start never gives an earlier next fire.
    assert schedule.next_after(after + gap) >= fire


@settings(max_examples=100, deadline=None)
@given(rules_and_instants())
def test_previous_then_next_steps_through_the_same_fires(drawn: tuple[Rule, datetime]) -> None:
    rule, at = drawn
    schedule = rule.schedule
    latest = schedule.previous_at_or_before(at, timedelta(days=4000))
    assert latest is not None and latest <= at
    assert schedule.previous_at_or_before(at, at - latest) == latest
    assert schedule.next_after(latest) > at
