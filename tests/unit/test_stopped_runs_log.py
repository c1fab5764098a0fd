"""A step ended by a planned stop (a dispatcher's handover, a superseded attempt) is logged at
INFO by Prefect's task-run logger; any other failure stays an ERROR with its traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from falcon.adapters.stopped_runs_log import TASK_RUN_LOGGER, PlannedStopsAtInfo, log_planned_stops_at_info
from falcon.domain.lifecycle import RunStopped


@pytest.fixture
def task_run_logger(monkeypatch: pytest.MonkeyPatch) -> Iterator[logging.Logger]:
    """Prefect's task-run logger, its own handler (to the Prefect API, which wants a flow run)
    taken off for the test: the records reach the root, where caplog reads them."""
    logger = logging.getLogger(TASK_RUN_LOGGER)
    monkeypatch.setattr(logger, "handlers", [])
    filters = list(logger.filters)
    log_planned_stops_at_info()
    log_planned_stops_at_info()  # installed once, however often asked
    yield logger
    logger.filters[:] = filters


def _failed(logger: logging.Logger, exc: Exception) -> None:
    try:
        raise exc
    except Exception:
        logger.error("Task run failed with exception: %r - Retries are exhausted", exc, exc_info=True)


def test_a_planned_stop_is_info_without_traceback_and_other_failures_stay_errors(
    task_run_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    assert sum(isinstance(f, PlannedStopsAtInfo) for f in task_run_logger.filters) == 1
    with caplog.at_level(logging.INFO, logger=TASK_RUN_LOGGER):
        _failed(task_run_logger, RunStopped("the dispatcher run these steps live in is ending"))
        task_run_logger.error("Finished in state Failed('Task run encountered an exception RunStopped: …')")
        _failed(task_run_logger, RuntimeError("GKE said no"))
    levels = [(r.levelname, r.exc_info is not None) for r in caplog.records]
    assert levels == [("INFO", False), ("INFO", False), ("ERROR", True)]
