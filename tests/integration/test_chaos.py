"""The chaos run at the suite's size (tests/chaos/run.py says what it does and checks).

MariaDB, because that is what production runs and where row claims must hold; its own Prefect
server, because the run restarts it.

200 tasks: about 3 minutes alone, three times that in the loaded suite, where the 300 of the
benchmark's default once ran past the timeout. The plan's budgets (arrivals 60 s + 20, drain 540,
clean 120) end well inside the timeout, so a run that does not drain fails with its report rather
than a bare timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from falcon.adapters.db.migrate import upgrade
from tests.chaos.run import ChaosPlan, run_chaos
from tests.conftest import new_mysql_database


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_chaos_run_ends_with_every_task_right_and_nothing_left(mysql_proc: object, tmp_path: Path) -> None:
    url = new_mysql_database(mysql_proc)
    upgrade(url)
    report = run_chaos(ChaosPlan(tasks=200, drain_seconds=540), url, tmp_path)
    print("\n".join(report.lines()))
    assert report.violations == {k: [] for k in report.violations}
    assert report.kills >= 5 and report.prefect_restarts == 1
    assert report.fault_share >= 0.10 and {"reset", "delay", "429", "503"} <= set(report.faults)
