"""Liveness and readiness (design Phase 2): the decisions, and the probes' HTTP answers.

We test: live while the last tick is within the bound, not a moment later; ready only when every
check answers, each failure named in the body; the HTTP adapter answers 200 or 503 with that
body; the database check fails for a SQLite file that is gone instead of creating an empty one.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from falcon.adapters.health import database_check, serving_health
from falcon.services.health import Verdict, liveness, readiness


@pytest.mark.parametrize(
    ("last_tick", "now", "healthy"),
    [(100.0, 100.0, True), (100.0, 115.0, True), (100.0, 115.01, False), (0.0, 3600.0, False)],
)
def test_live_while_the_last_tick_is_within_the_bound(last_tick: float, now: float, healthy: bool) -> None:
    assert liveness(last_tick, now, 15.0).healthy is healthy


def test_a_wedged_loop_says_how_long_it_has_been_quiet() -> None:
    assert liveness(10.0, 40.0, 15.0) == Verdict(False, {"loop": "no tick for 30.0 s (bound 15 s)"})


def refuse(message: str) -> Callable[[], None]:
    def check() -> None:
        raise ConnectionRefusedError(message)

    return check


def test_ready_when_every_check_answers() -> None:
    assert readiness({"database": lambda: None, "prefect": lambda: None}) == Verdict(
        True, {"database": "ok", "prefect": "ok"}
    )


def test_not_ready_names_each_failed_check() -> None:
    verdict = readiness({"database": refuse("[Errno 111] Connection refused"), "prefect": lambda: None})
    assert verdict == Verdict(
        False, {"database": "ConnectionRefusedError: [Errno 111] Connection refused", "prefect": "ok"}
    )


def get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_probes_answer_200_or_503_with_what_failed() -> None:
    live = Verdict(True, {"loop": "ok"})
    wedged = Verdict(False, {"loop": "no tick for 30.0 s (bound 15 s)"})
    answers = [live, wedged]
    with serving_health(0, lambda: answers.pop(0), lambda: readiness({"database": refuse("gone")})) as port:
        assert get(port, "/livez") == (200, {"status": "ok", "checks": {"loop": "ok"}})
        assert get(port, "/livez") == (503, {"status": "failing", "checks": dict(wedged.checks)})
        assert get(port, "/readyz") == (
            503,
            {"status": "failing", "checks": {"database": "ConnectionRefusedError: gone"}},
        )
        assert get(port, "/nowhere")[0] == 404


def test_the_database_check_fails_once_the_sqlite_file_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "falcon.db"
    sqlite3.connect(path).close()
    check = database_check(f"sqlite:///{path}", timeout=1)
    check()
    path.unlink()
    with pytest.raises(Exception, match="unable to open database file"):
        check()
    assert not path.exists()  # the probe did not create an empty database in its place
