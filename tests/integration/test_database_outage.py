"""The database unavailable for a while (MariaDB stopped, then started again): each tick fails
cleanly while it is away, nothing is half-written, and the next tick after it is back goes on.
MariaDB only: stopping the server is the point (SQLite has none)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest
from sqlalchemy.exc import DBAPIError

from falcon.adapters.db import repository as repo
from falcon.domain.lifecycle import Phase
from falcon.domain.status import Status
from falcon.services.context import Services
from tests.integration.harness import Driver, db, submit


def ticks_until(driver: Driver, done: Callable[[], bool], seconds: float = 90) -> None:
    """Tick until ``done()``, as the dispatcher flow does: a tick that fails on the database (a
    pooled connection the restart broke) is logged there and the loop goes on."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(DBAPIError):
            driver.tick()
            if done():
                return
        time.sleep(0.1)
    raise AssertionError(f"not done in {seconds}s: {driver.observe()}")


@pytest.mark.parametrize("db_url", ["mysql"], indirect=True)
def test_ticks_fail_cleanly_while_the_database_is_away_and_the_next_one_goes_on(
    services: Services, db_url: str, mysql_proc: object
) -> None:
    driver = Driver(services)
    submit(db_url, "t-running", "alice", "2x2", run_seconds=4)
    driver.run_until(lambda t: t["t-running"].status is Status.RUNNING)
    mysql_proc.stop()  # type: ignore[attr-defined]
    try:
        for _ in range(3):
            with pytest.raises(DBAPIError):
                driver.tick()
    finally:
        mysql_proc.start()  # type: ignore[attr-defined]
    submit(db_url, "t-after", "bob", "2x2")
    ticks_until(driver, lambda: all(t.status is Status.SUCCEEDED for t in driver.observe().values()))
    with db(services) as s:
        for task_id in ("t-running", "t-after"):
            progress = repo.get_progress(s, task_id)
            assert progress is not None and progress.phase is Phase.DONE
