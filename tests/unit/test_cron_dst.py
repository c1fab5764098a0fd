"""DST: no fire is lost, none is doubled unless the rule asks for every real hour.

We test the skipped and the repeated hour in America/New_York (2026-03-08, 2026-11-01) and
Europe/Berlin (2026-03-29, 2026-10-25): a fire in a skipped hour happens at the jump (several
collapse into it); in a repeated hour a fixed-hour rule fires once (first occurrence) while a
wildcard or step hour fires in both; seconds-level rules across both transitions; the same for
previous_at_or_before (including from inside each occurrence); Asia/Shanghai (no DST) as a
control. Expected instants are written in UTC, from the zones' offsets: New York -05:00/-04:00 with
the jumps at 07:00Z (March) and 06:00Z (November); Berlin +01:00/+02:00 with both jumps at 01:00Z.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from falcon.domain.cron import parse_cron

NY = "CRON_TZ=America/New_York"
BERLIN = "CRON_TZ=Europe/Berlin"
SHANGHAI = "CRON_TZ=Asia/Shanghai"


def z(text: str) -> datetime:
    """A UTC instant written without its zone: '2026-03-08T07:00'."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def upcoming(expression: str, after: str, count: int) -> list[datetime]:
    """The next fires after an ISO time (with its offset), as UTC instants."""
    fires = parse_cron(expression).upcoming(datetime.fromisoformat(after), count)
    return [fire.astimezone(UTC) for fire in fires]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        pytest.param(
            f"{NY} 0 30 2 * * *",
            "2026-03-08T00:00-05:00",
            ["2026-03-08T07:00", "2026-03-09T06:30"],
            id="NY fixed 02:30 fires at the jump (03:00 EDT)",
        ),
        pytest.param(
            f"{NY} 0 15,45 2 * * *",
            "2026-03-08T00:00-05:00",
            ["2026-03-08T07:00", "2026-03-09T06:15", "2026-03-09T06:45"],
            id="NY 02:15 and 02:45 collapse into one fire at the jump",
        ),
        pytest.param(
            f"{NY} 0 0 * * * *",
            "2026-03-08T00:30-05:00",
            ["2026-03-08T06:00", "2026-03-08T07:00", "2026-03-08T08:00"],
            id="NY hourly: 02:00 and 03:00 are one instant",
        ),
        pytest.param(
            f"{NY} 0 */20 * * * *",
            "2026-03-08T01:30-05:00",
            ["2026-03-08T06:40", "2026-03-08T07:00", "2026-03-08T07:20"],
            id="NY step minutes: 02:00-03:00 collapse",
        ),
        pytest.param(
            f"{NY} * * * * * *",
            "2026-03-08T01:59:58-05:00",
            ["2026-03-08T06:59:59", "2026-03-08T07:00:00", "2026-03-08T07:00:01"],
            id="NY every second across the jump",
        ),
        pytest.param(
            f"{BERLIN} 0 30 2 * * *",
            "2026-03-29T00:00+01:00",
            ["2026-03-29T01:00", "2026-03-30T00:30"],
            id="Berlin fixed 02:30 fires at the jump (03:00 CEST)",
        ),
        pytest.param(
            f"{BERLIN} 0 0 * * * *",
            "2026-03-29T01:30+01:00",
            ["2026-03-29T01:00", "2026-03-29T02:00"],
            id="Berlin hourly: 02:00 and 03:00 are one instant",
        ),
        pytest.param(
            f"{BERLIN} 30 59 * * * *",
            "2026-03-29T01:00+01:00",
            ["2026-03-29T00:59:30", "2026-03-29T01:00", "2026-03-29T01:59:30"],
            id="Berlin seconds-level: 01:59:30 CET, then 02:59:30 at the jump",
        ),
    ],
)
def test_skipped_hour(expression: str, after: str, expected: list[str]) -> None:
    assert upcoming(expression, after, len(expected)) == [z(e) for e in expected]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        pytest.param(
            f"{NY} 0 30 1 * * *",
            "2026-11-01T00:00-04:00",
            ["2026-11-01T05:30", "2026-11-02T06:30"],
            id="NY fixed 01:30 fires once (EDT)",
        ),
        pytest.param(
            f"{NY} 0 0 1-2 * * *",
            "2026-11-01T00:00-04:00",
            ["2026-11-01T05:00", "2026-11-01T07:00", "2026-11-02T06:00"],
            id="NY range hours without a step are fixed: 01:00 once",
        ),
        pytest.param(
            f"{NY} 0 30 * * * *",
            "2026-11-01T00:00-04:00",
            ["2026-11-01T04:30", "2026-11-01T05:30", "2026-11-01T06:30", "2026-11-01T07:30"],
            id="NY wildcard hour fires in both 01:30s",
        ),
        pytest.param(
            f"{NY} 0 0 1/12 * * *",
            "2026-11-01T00:00-04:00",
            ["2026-11-01T05:00", "2026-11-01T06:00", "2026-11-01T18:00"],
            id="NY step hour fires in both 01:00s",
        ),
        pytest.param(
            f"{NY} */20 * * * * *",
            "2026-11-01T01:59:30-04:00",
            ["2026-11-01T05:59:40", "2026-11-01T06:00:00", "2026-11-01T06:00:20"],
            id="NY seconds-level wildcard runs on through the second 01:00",
        ),
        pytest.param(
            f"{NY} */20 * 1 * * *",
            "2026-11-01T01:59:30-04:00",
            ["2026-11-01T05:59:40", "2026-11-02T06:00:00"],
            id="NY seconds-level fixed hour stops after the first 01:59",
        ),
        pytest.param(
            f"{NY} 0 30 1 * * *",
            "2026-11-01T01:10-05:00",
            ["2026-11-02T06:30"],
            id="NY fixed from inside the second occurrence: tomorrow",
        ),
        pytest.param(
            f"{NY} 0 30 * * * *",
            "2026-11-01T01:10-05:00",
            ["2026-11-01T06:30", "2026-11-01T07:30"],
            id="NY wildcard from inside the second occurrence",
        ),
        pytest.param(
            f"{NY} 0 10 * * * *",
            "2026-11-01T01:30-04:00",
            ["2026-11-01T06:10", "2026-11-01T07:10"],
            id="NY wildcard from inside the first occurrence: its next fire is in the second",
        ),
        pytest.param(
            f"{BERLIN} 0 30 2 * * *",
            "2026-10-25T00:00+02:00",
            ["2026-10-25T00:30", "2026-10-26T01:30"],
            id="Berlin fixed 02:30 fires once (CEST)",
        ),
        pytest.param(
            f"{BERLIN} 0 0 */2 * * *",
            "2026-10-25T01:30+02:00",
            ["2026-10-25T00:00", "2026-10-25T01:00", "2026-10-25T03:00"],
            id="Berlin step hour fires in both 02:00s",
        ),
        pytest.param(
            f"{BERLIN} 0 0 * * * *",
            "2026-10-25T01:30+02:00",
            ["2026-10-25T00:00", "2026-10-25T01:00", "2026-10-25T02:00"],
            id="Berlin hourly fires in both 02:00s",
        ),
    ],
)
def test_repeated_hour(expression: str, after: str, expected: list[str]) -> None:
    assert upcoming(expression, after, len(expected)) == [z(e) for e in expected]


@pytest.mark.parametrize(
    ("expression", "at", "horizon", "expected"),
    [
        pytest.param(
            f"{NY} 0 30 2 * * *",
            "2026-03-08T03:30-04:00",
            timedelta(hours=1),
            "2026-03-08T07:00",
            id="NY skipped fire at the jump",
        ),
        pytest.param(
            f"{NY} 0 30 2 * * *",
            "2026-03-08T03:00-04:00",
            timedelta(hours=1),
            "2026-03-08T07:00",
            id="NY at the jump itself",
        ),
        pytest.param(
            f"{NY} 0 30 2 * * *",
            "2026-03-08T01:59:59-05:00",
            timedelta(days=1),
            "2026-03-07T07:30",
            id="NY a second before the jump",
        ),
        pytest.param(
            f"{NY} 0 30 2 * * *",
            "2026-03-08T03:30-04:00",
            timedelta(minutes=20),
            None,
            id="NY outside the horizon",
        ),
        pytest.param(
            f"{NY} * * * * * *",
            "2026-03-08T03:00:00-04:00",
            timedelta(days=1),
            "2026-03-08T07:00:00",
            id="NY every second at the jump",
        ),
        pytest.param(
            f"{NY} * * * * * *",
            "2026-03-08T01:59:59.5-05:00",
            timedelta(days=1),
            "2026-03-08T06:59:59",
            id="NY every second before the jump",
        ),
        pytest.param(
            f"{NY} 0 30 * * * *",
            "2026-11-01T01:45-05:00",
            timedelta(days=1),
            "2026-11-01T06:30",
            id="NY wildcard, second occurrence",
        ),
        pytest.param(
            f"{NY} 0 30 * * * *",
            "2026-11-01T01:15-05:00",
            timedelta(days=1),
            "2026-11-01T05:30",
            id="NY wildcard, before the second 01:30",
        ),
        pytest.param(
            f"{NY} 0 30 * * * *",
            "2026-11-01T01:45-04:00",
            timedelta(days=1),
            "2026-11-01T05:30",
            id="NY wildcard, first occurrence",
        ),
        pytest.param(
            f"{NY} 0 30 * * * *",
            "2026-11-01T02:10-05:00",
            timedelta(days=1),
            "2026-11-01T06:30",
            id="NY wildcard, after the fold",
        ),
        pytest.param(
            f"{NY} 0 30 1 * * *",
            "2026-11-01T01:45-05:00",
            timedelta(days=1),
            "2026-11-01T05:30",
            id="NY fixed, second occurrence",
        ),
        pytest.param(
            f"{NY} 0 30 1 * * *",
            "2026-11-01T12:00-05:00",
            timedelta(days=1),
            "2026-11-01T05:30",
            id="NY fixed, after the fold",
        ),
        pytest.param(
            f"{NY} 0 30 1/24 * * *",
            "2026-11-01T12:00-05:00",
            timedelta(days=1),
            "2026-11-01T06:30",
            id="NY step, after the fold",
        ),
        pytest.param(
            f"{NY} * * * * * *",
            "2026-11-01T01:00:00.5-05:00",
            timedelta(days=1),
            "2026-11-01T06:00:00",
            id="NY every second in the second occurrence",
        ),
        pytest.param(
            f"{NY} * * 1 * * *",
            "2026-11-01T01:30-05:00",
            timedelta(days=1),
            "2026-11-01T05:59:59",
            id="NY every second of the fixed hour: the first occurrence's last",
        ),
        pytest.param(
            f"{BERLIN} 0 0 */2 * * *",
            "2026-10-25T02:30+01:00",
            timedelta(days=1),
            "2026-10-25T01:00",
            id="Berlin step, second occurrence",
        ),
        pytest.param(
            f"{BERLIN} 0 30 2 * * *",
            "2026-03-29T04:00+02:00",
            timedelta(days=1),
            "2026-03-29T01:00",
            id="Berlin skipped fire at the jump",
        ),
    ],
)
def test_previous_across_transitions(
    expression: str, at: str, horizon: timedelta, expected: str | None
) -> None:
    found = parse_cron(expression).previous_at_or_before(datetime.fromisoformat(at), horizon)
    assert (found.astimezone(UTC) if found else None) == (z(expected) if expected else None)


@pytest.mark.parametrize(
    ("expression", "midnight", "next_midnight", "count"),
    [
        pytest.param(
            f"{NY} 0 0 * * * *", "2026-03-08T00:00-05:00", "2026-03-09T00:00-04:00", 23, id="NY spring: 23"
        ),
        pytest.param(
            f"{NY} 0 0 * * * *", "2026-11-01T00:00-04:00", "2026-11-02T00:00-05:00", 25, id="NY fall: 25"
        ),
        pytest.param(
            f"{NY} 0 0 2 * * *",
            "2026-03-08T00:00-05:00",
            "2026-03-09T00:00-04:00",
            1,
            id="NY spring fixed: 1",
        ),
        pytest.param(
            f"{NY} 0 0 1 * * *", "2026-11-01T00:00-04:00", "2026-11-02T00:00-05:00", 1, id="NY fall fixed: 1"
        ),
        pytest.param(
            f"{BERLIN} 0 0 * * * *",
            "2026-03-29T00:00+01:00",
            "2026-03-30T00:00+02:00",
            23,
            id="Berlin spring: 23",
        ),
        pytest.param(
            f"{BERLIN} 0 0 * * * *",
            "2026-10-25T00:00+02:00",
            "2026-10-26T00:00+01:00",
            25,
            id="Berlin fall: 25",
        ),
        pytest.param(
            f"{SHANGHAI} 0 0 * * * *",
            "2026-03-08T00:00+08:00",
            "2026-03-09T00:00+08:00",
            24,
            id="Shanghai March: 24",
        ),
        pytest.param(
            f"{SHANGHAI} 0 0 * * * *",
            "2026-11-01T00:00+08:00",
            "2026-11-02T00:00+08:00",
            24,
            id="Shanghai November: 24",
        ),
        pytest.param(
            f"{SHANGHAI} 0 30 2 * * *",
            "2026-03-08T00:00+08:00",
            "2026-03-09T00:00+08:00",
            1,
            id="Shanghai fixed: 1",
        ),
    ],
)
def test_fires_per_local_day(expression: str, midnight: str, next_midnight: str, count: int) -> None:
    start, end = datetime.fromisoformat(midnight), datetime.fromisoformat(next_midnight)
    fires = parse_cron(expression).upcoming(start - timedelta(microseconds=1), 30)
    in_day = [fire.astimezone(UTC) for fire in fires if fire < end]
    assert len(in_day) == count
    assert all(a < b for a, b in pairwise(in_day))


def test_shanghai_control_keeps_wall_times() -> None:
    """No DST: 02:30 every day, on the dates the other zones jump."""
    fires = parse_cron(f"{SHANGHAI} 0 30 2 * * *").upcoming(
        datetime.fromisoformat("2026-03-07T12:00+08:00"), 3
    )
    assert [f.isoformat() for f in fires] == [
        "2026-03-08T02:30:00+08:00",
        "2026-03-09T02:30:00+08:00",
        "2026-03-10T02:30:00+08:00",
    ]


def test_horizon_is_real_time_even_for_an_instant_given_in_the_zone() -> None:
    """One real hour back from 03:30 EDT is 01:30 EST, so the 01:45 EST fire is inside the horizon."""
    schedule = parse_cron(f"{NY} 0 45 1 * * *")
    at = datetime.fromisoformat("2026-03-08T03:30-04:00").astimezone(schedule.zone)
    found = schedule.previous_at_or_before(at, timedelta(hours=1))
    assert found is not None and found.astimezone(UTC) == z("2026-03-08T06:45")
