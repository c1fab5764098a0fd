"""Cron rules as the TidalScheduler writes them: robfig/cron's grammar, a required zone, no lost fires.

An expression is ``CRON_TZ=<IANA zone> `` followed by six fields (second minute hour day-of-month
month day-of-week) or a descriptor (``@yearly``/``@annually``, ``@monthly``, ``@weekly``,
``@daily``/``@midnight``, ``@hourly``, ``@every <Go duration>``). The grammar is robfig/cron v3's
(names, ranges, lists, ``a/n`` meaning ``a-max/n``, ``?`` as ``*``, day-of-week 0-6, and the
day rule: if day-of-month or day-of-week has a plain ``*``/``?`` item, a day must match both,
otherwise either; a stepped ``*/n`` restricts, as in robfig issue 70). The matching and the
calendar walk are cronsim's, fed with the value lists we parse here, so cronsim's own extensions
(``L``, ``W``, ``#``, day-of-week 7) never reach it.

Where a scaler must not lose an event we differ from robfig on purpose:

* A fire whose wall time falls in a skipped hour happens at the first instant after the jump
  (several such wall times collapse into that one instant); robfig drops it.
* In a repeated hour a rule with a fixed hour fires once, at the first occurrence; a rule whose
  hour field is a wildcard (``*``, ``?``) or has a step (``/``) fires at every real hour, both
  occurrences (Debian cron's rule). robfig fires the fixed-hour rule twice.
* ``@every d`` fires at whole multiples of ``d`` since 1970-01-01T00:00:00Z, so a restart never
  shifts it (robfig counts from when the job was added); its zone only sets how fires print.
* An expression that can never fire (30 February) is an error, not a schedule that never runs.

The calendar is walked in naive wall time (cronsim does no zone arithmetic on naive datetimes);
each wall time is then mapped to its real instant(s). Instants of first occurrences (gaps mapped to
the jump) rise with the wall time, and so do second occurrences, so each query is one or two
cronsim look-ups plus, near a transition, a short bisection for the transition instant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim

PREFIX = "CRON_TZ="
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_SECOND = timedelta(seconds=1)
FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
MONTH_NAMES = {name: i + 1 for i, name in enumerate(MONTHS)}
DAY_NAMES = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
NAMES: tuple[dict[str, int], ...] = ({}, {}, {}, {}, MONTH_NAMES, DAY_NAMES)
# Longest day-of-month each month can have (February in a leap year).
MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
DESCRIPTORS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
NUMBER = re.compile(r"\+?[0-9]+")
GO_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
GO_UNITS_NS = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "μs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
GO_MAX_NS = 2**63 - 1


class CronError(ValueError):
    """A rule that cannot be used, naming the part that is wrong so the user can fix that part."""

    def __init__(self, expression: str, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason} (in {expression!r})")
        self.expression = expression
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class _Field:
    """One parsed field: its values, and the two robfig flags the DST and day rules read."""

    values: frozenset[int]
    star: bool  # a `*` or `?` item without a step above 1: robfig's "starBit"
    wildcard_or_step: bool  # some item is `*`/`?` or has a step: the hour then fires in both folds


@dataclass(frozen=True)
class CronSchedule:
    """A parsed rule. Build it with ``parse_cron``; every query takes and returns aware datetimes.

    Fires come back in ``zone`` (``fold=1`` marks the second occurrence of a repeated hour). Order,
    compare and subtract them as instants (``astimezone(UTC)``): between two datetimes of the same
    zone Python compares and subtracts wall clocks, and it never finds a repeated-hour time equal to
    one in another zone (PEP 495).
    """

    expression: str
    zone: ZoneInfo
    _calendar: str = ""  # the six-field cronsim expression, when the rule is not `@every`
    _period: timedelta | None = None  # `@every`
    _both_folds: bool = False  # a repeated hour fires twice

    def next_after(self, instant: datetime) -> datetime:
        """The first fire strictly after ``instant``, in ``self.zone``."""
        _require_aware(instant)
        if self._period is not None:
            steps = (instant - EPOCH) // self._period + 1
            return (EPOCH + steps * self._period).astimezone(self.zone)
        return self._next_instant(instant.astimezone(UTC)).astimezone(self.zone)

    def previous_at_or_before(self, instant: datetime, horizon: timedelta) -> datetime | None:
        """The latest fire at or before ``instant`` and not before ``instant - horizon``, else None.

        This is the catch-up question after downtime: only the most recent missed fire matters.
        """
        _require_aware(instant)
        instant = instant.astimezone(UTC)  # `instant - horizon` in a zone would be wall-clock arithmetic
        if self._period is not None:
            latest: datetime | None = EPOCH + ((instant - EPOCH) // self._period) * self._period
        else:
            latest = self._previous_instant(instant)
        if latest is None or latest < instant - horizon:
            return None
        return latest.astimezone(self.zone)

    def upcoming(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` fires after ``after``, in order."""
        fires: list[datetime] = []
        for _ in range(count):
            after = self.next_after(after)
            fires.append(after)
        return fires

    def _next_instant(self, instant: datetime) -> datetime:
        """The earliest of two rising streams: first occurrences (a skipped wall time at the jump)
        after ``instant``'s wall time, and second occurrences of repeated wall times after ``instant``.
        """
        local = instant.astimezone(self.zone)
        wall = local.replace(tzinfo=None, fold=0)
        if local.fold == 1:  # inside the second occurrence of a repeated hour
            fold_start, fold_end = self._fold_bounds(wall)
            candidates = [self._first_instant(self._wall_at_or_after(fold_end))]
            repeat = self._wall_after(wall)
        else:
            candidates = [self._first_instant(self._wall_after(wall))]
            if not self._is_repeated(wall):
                return candidates[0]
            fold_start, fold_end = self._fold_bounds(wall)
            repeat = self._wall_at_or_after(fold_start)
        if self._both_folds and repeat < fold_end and self._second_instant(repeat) > instant:
            candidates.append(self._second_instant(repeat))
        return min(candidates)

    def _previous_instant(self, instant: datetime) -> datetime | None:
        """Mirror of ``_next_instant``: the later of the last first and the last second occurrence."""
        local = instant.astimezone(self.zone)
        wall = local.replace(tzinfo=None, fold=0)
        try:
            repeat = self._wall_at_or_before(wall)
            if local.fold == 1:  # every first occurrence of the repeated hour is already past
                _, fold_end = self._fold_bounds(wall)
                latest = self._first_instant(self._wall_at_or_before(fold_end - ONE_SECOND))
            else:
                latest = self._first_instant(repeat)
        except (StopIteration, OverflowError):  # nothing in cronsim's 50-year window, or before year 1
            return None
        if self._both_folds and self._is_repeated(repeat) and self._second_instant(repeat) <= instant:
            return max(latest, self._second_instant(repeat))
        return latest

    def _wall_after(self, wall: datetime) -> datetime:
        fire: datetime = next(CronSim(self._calendar, wall))
        return fire

    def _wall_at_or_after(self, wall: datetime) -> datetime:
        return self._wall_after(wall - ONE_SECOND)

    def _wall_at_or_before(self, wall: datetime) -> datetime:
        start = wall.replace(microsecond=0) + ONE_SECOND
        fire: datetime = next(CronSim(self._calendar, start, reverse=True))
        return fire

    def _offsets(self, wall: datetime) -> tuple[timedelta, timedelta]:
        """The UTC offsets of a wall time read as its first and as its second occurrence."""
        first = wall.replace(tzinfo=self.zone, fold=0).utcoffset()
        second = wall.replace(tzinfo=self.zone, fold=1).utcoffset()
        assert first is not None and second is not None  # a ZoneInfo always has an offset
        return first, second

    def _is_repeated(self, wall: datetime) -> bool:
        first, second = self._offsets(wall)
        return first > second

    def _first_instant(self, wall: datetime) -> datetime:
        """The instant a fire at this wall time happens (the jump, if the wall time was skipped)."""
        first, second = self._offsets(wall)
        if first < second:
            return self._transition(wall, first, second)
        return (wall - first).replace(tzinfo=UTC)

    def _second_instant(self, wall: datetime) -> datetime:
        _, second = self._offsets(wall)
        return (wall - second).replace(tzinfo=UTC)

    def _fold_bounds(self, wall: datetime) -> tuple[datetime, datetime]:
        """The repeated wall times around ``wall``: [start, end)."""
        before, after = self._offsets(wall)
        jump = self._transition(wall, before, after).replace(tzinfo=None)
        return jump + after, jump + before

    def _transition(self, wall: datetime, before: timedelta, after: timedelta) -> datetime:
        """The instant the offset changes from ``before`` to ``after`` near ``wall`` (bisection, 1 s)."""
        low = (wall - max(before, after)).replace(tzinfo=UTC, microsecond=0)  # still at `before`
        high = (wall - min(before, after)).replace(tzinfo=UTC, microsecond=0)  # already at `after`
        while high - low > ONE_SECOND:
            middle = low + ONE_SECOND * ((high - low) // ONE_SECOND // 2)
            if middle.astimezone(self.zone).utcoffset() == before:
                low = middle
            else:
                high = middle
        return high


@lru_cache(maxsize=8192)
def parse_cron(expression: str) -> CronSchedule:
    """Parse a TidalScheduler rule; raise CronError naming the bad field. Parsed once per
    expression (a schedule is immutable): the controller and the dispatcher read every rule at
    every evaluation."""
    zone, body = _split_zone(expression)
    if body.startswith("@"):
        return _parse_descriptor(expression, zone, body)
    texts = body.split()
    if len(texts) != len(FIELD_NAMES):
        raise CronError(
            expression,
            "expression",
            f"expected 6 fields (second minute hour day-of-month month day-of-week), found {len(texts)}",
        )
    fields = [_parse_field(expression, index, text) for index, text in enumerate(texts)]
    _require_a_day(expression, fields)
    return CronSchedule(
        expression=expression,
        zone=zone,
        _calendar=_calendar(fields),
        _both_folds=fields[2].wildcard_or_step,
    )


def _split_zone(expression: str) -> tuple[ZoneInfo, str]:
    if not expression.startswith(PREFIX):
        raise CronError(expression, "CRON_TZ", "the rule must start with CRON_TZ=<IANA zone>")
    name, _, body = expression[len(PREFIX) :].partition(" ")
    if not name:
        raise CronError(expression, "CRON_TZ", "no zone after CRON_TZ=")
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(expression, "CRON_TZ", f"unknown time zone {name!r}") from None
    body = body.strip()
    if not body:
        raise CronError(expression, "expression", "no schedule after the zone")
    return zone, body


def _parse_descriptor(expression: str, zone: ZoneInfo, body: str) -> CronSchedule:
    word, _, argument = body.partition(" ")
    if word == "@every":
        period = _go_duration(expression, argument.strip())
        return CronSchedule(expression=expression, zone=zone, _period=period)
    if body not in DESCRIPTORS:
        known = ", ".join([*DESCRIPTORS, "@every <duration>"])
        raise CronError(expression, "descriptor", f"unknown descriptor {body!r}; known: {known}")
    calendar = DESCRIPTORS[body]
    return CronSchedule(expression=expression, zone=zone, _calendar=calendar, _both_folds=body == "@hourly")


def _go_duration(expression: str, text: str) -> timedelta:
    """A Go ``time.ParseDuration`` string (1h30m, 90s, 1.5h), truncated to whole seconds as robfig does."""
    negative = text.startswith("-")
    magnitude = text[1:] if text[:1] in "+-" else text
    parts = [] if magnitude == "0" else GO_DURATION_PART.findall(magnitude)
    spelled = "".join(number + unit for number, unit in parts)
    if magnitude != "0" and (not parts or spelled != magnitude or any(n in ("", ".") for n, _ in parts)):
        raise CronError(expression, "descriptor", f"{text!r} is not a duration such as 1h30m, 90s or 1.5h")
    nanoseconds = sum(int(Fraction(number) * GO_UNITS_NS[unit]) for number, unit in parts)
    if nanoseconds > GO_MAX_NS:
        raise CronError(expression, "descriptor", f"{text!r} is longer than a Go duration can be")
    if negative or nanoseconds < 10**9:
        raise CronError(expression, "descriptor", f"@every needs at least 1s, got {text!r}")
    return timedelta(seconds=nanoseconds // 10**9)


def _parse_field(expression: str, index: int, text: str) -> _Field:
    values: set[int] = set()
    star = wildcard_or_step = False
    for item in text.split(","):
        if not item:
            raise CronError(expression, FIELD_NAMES[index], f"empty item in list {text!r}")
        item_values, item_star, item_wild = _parse_item(expression, index, item)
        values |= item_values
        star |= item_star
        wildcard_or_step |= item_wild
    return _Field(frozenset(values), star, wildcard_or_step)


def _parse_item(expression: str, index: int, item: str) -> tuple[set[int], bool, bool]:
    """One list item, ``range[/step]``, where range is ``*``, ``?``, ``a`` or ``a-b`` (robfig getRange)."""
    field = FIELD_NAMES[index]
    low, high = BOUNDS[index]
    span, slash, step_text = item.partition("/")
    if "/" in step_text:
        raise CronError(expression, field, f"too many slashes in {item!r}")
    step = _step(expression, field, item, step_text) if slash else 1
    if span in ("*", "?"):
        return set(range(low, high + 1, step)), step == 1, True
    start_text, hyphen, end_text = span.partition("-")
    if "-" in end_text:
        raise CronError(expression, field, f"too many hyphens in {item!r}")
    start = _value(expression, index, start_text)
    end = _value(expression, index, end_text) if hyphen else (high if slash else start)
    if end < start:
        raise CronError(expression, field, f"range {span!r} runs backwards ({start} is after {end})")
    return set(range(start, end + 1, step)), False, bool(slash)


def _step(expression: str, field: str, item: str, text: str) -> int:
    if not NUMBER.fullmatch(text):
        raise CronError(expression, field, f"step {text!r} in {item!r} is not a whole number")
    step = int(text)
    if step == 0:
        raise CronError(expression, field, f"step in {item!r} must be at least 1")
    return step


def _value(expression: str, index: int, text: str) -> int:
    field = FIELD_NAMES[index]
    low, high = BOUNDS[index]
    names = NAMES[index]
    if text.lower() in names:
        return names[text.lower()]
    if not NUMBER.fullmatch(text):
        kind = "a number or a name" if names else "a number"
        raise CronError(expression, field, f"{text!r} is not {kind}")
    value = int(text)
    if value < low:
        raise CronError(expression, field, f"{value} is below the minimum {low}")
    if value > high:
        raise CronError(expression, field, f"{value} is above the maximum {high}")
    return value


def _require_a_day(expression: str, fields: list[_Field]) -> None:
    """Refuse a rule that can never fire: only possible when day-of-week is `*` and the days don't exist."""
    day_of_month, month, day_of_week = fields[3], fields[4], fields[5]
    if not day_of_week.star or day_of_month.star:
        return  # either rule (day-of-week restricts alone) or every day: some day always matches
    first_day = min(day_of_month.values)
    if not any(MONTH_DAYS[m] >= first_day for m in month.values):
        raise CronError(expression, "day-of-month", f"never fires: no selected month has a day {first_day}")


def _calendar(fields: list[_Field]) -> str:
    """The cronsim expression: value runs, and ``*`` where robfig makes the day fields combine by AND.

    cronsim combines day-of-month and day-of-week by AND when either text starts with ``*`` (Debian),
    robfig when either has its star bit; writing ``*`` for exactly the starred (so complete) day
    fields and runs elsewhere makes cronsim apply robfig's rule. Runs (``0-59``) keep cronsim's own
    parse, done on every query, short.
    """
    texts = [_runs(sorted(field.values)) for field in fields]
    for index in (3, 5):
        if fields[index].star:
            texts[index] = "*"
    return " ".join(texts)


def _runs(values: list[int]) -> str:
    runs: list[list[int]] = []
    for value in values:
        if runs and runs[-1][1] == value - 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _require_aware(instant: datetime) -> None:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"cron needs an aware datetime, got naive {instant.isoformat()}")
