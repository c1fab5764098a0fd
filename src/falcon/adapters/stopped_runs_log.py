"""Steps ended by a planned stop, logged at INFO rather than Prefect's ERROR.

Every dispatcher run ends (the next scheduled run takes over) and stops the lifecycle runs in its
threads at their next wait (``RunStopped``); the next dispatcher resumes them from the database.
A run whose attempt a restart replaced ends likewise (``RunSuperseded``). Prefect logs every task
run that ends other than Completed at ERROR, with its traceback ("Task run failed with exception:
RunStopped(…)", "Finished in state Failed(…)"): 3-9 ERROR lines at each handover of the full-size
benchmark, among which an operator would have to find the real errors. The step's state stays
Failed in the Prefect UI; only the log line's level changes.
"""

from __future__ import annotations

import logging

PLANNED_STOPS = ("RunStopped", "RunSuperseded")
TASK_RUN_LOGGER = "prefect.task_runs"


class PlannedStopsAtInfo(logging.Filter):
    """Lowers an ERROR record about a planned stop to INFO, without its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and any(stop in record.getMessage() for stop in PLANNED_STOPS):
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            record.exc_info, record.exc_text = None, None
        return True


def log_planned_stops_at_info() -> None:
    """Install the filter on Prefect's task-run logger, once."""
    logger = logging.getLogger(TASK_RUN_LOGGER)
    if not any(isinstance(f, PlannedStopsAtInfo) for f in logger.filters):
        logger.addFilter(PlannedStopsAtInfo())
