"""The composition root: the seam for a process that embeds the flows with its own wiring, and
the level of Falcon's own logs in a process whose logging Prefect set up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.unit.fakes import make_services

from falcon.bootstrap import services, serving


def test_flows_run_on_the_served_services_for_the_block_and_the_outer_ones_after_it() -> None:
    outer, inner = make_services(), make_services()
    with serving(outer):
        with serving(inner):
            assert services() is inner
        assert services() is outer


FALCON_LOGS = """
import logging
from prefect.logging.configuration import setup_logging
setup_logging()  # as Prefect does in a served process, before it runs a flow
from falcon.bootstrap import build_services
from falcon.settings import get_settings
build_services(get_settings())
logging.getLogger("falcon.events").info("event=task_moved task_id=t1")
logging.getLogger("falcon.audit").info("event=audit action=abort task_id=t1")
"""


@pytest.mark.parametrize(
    ("level", "logged"),
    [
        pytest.param(None, True, id="by default: every event line is logged"),
        pytest.param("WARNING", False, id="FALCON_LOG_LEVEL=WARNING: INFO lines are not"),
    ],
)
def test_falcon_info_lines_reach_the_log_of_a_process_whose_logging_prefect_set_up(
    tmp_path: Path, level: str | None, logged: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FALCON_", "PREFECT_"))}
    env.update(FALCON_HOME=str(tmp_path), FALCON_EMULATOR_URL="http://127.0.0.1:9")  # no client is used
    env.update(PREFECT_HOME=str(tmp_path), PREFECT_LOGGING_EXTRA_LOGGERS="falcon")
    if level:
        env["FALCON_LOG_LEVEL"] = level
    done = subprocess.run(
        [sys.executable, "-c", FALCON_LOGS], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    for line in ("event=task_moved task_id=t1", "event=audit action=abort task_id=t1"):
        assert (line in done.stderr) is logged, done.stderr


def test_the_keep_policy_is_built_from_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from falcon.bootstrap import build_services
    from falcon.domain.pool_economics import CostPolicy
    from falcon.settings import get_settings

    monkeypatch.setenv("FALCON_HOME", str(tmp_path))
    monkeypatch.setenv("FALCON_EMULATOR_URL", "http://127.0.0.1:9")  # no credentials; nothing is called
    monkeypatch.setenv("FALCON_POOL_CREATION_PRIOR_SECONDS", "200")
    monkeypatch.setenv("FALCON_POOL_START_DELAY_WEIGHT", "2")
    monkeypatch.setenv("FALCON_POOL_BUSY_WAIT_CHANCE", "0.25")
    get_settings.cache_clear()
    try:
        built = build_services(get_settings()).keep_policy
    finally:
        get_settings.cache_clear()
    assert built == CostPolicy(200.0, start_delay_weight=2.0, busy_wait_chance=0.25)
