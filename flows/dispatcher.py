"""The scheduled dispatcher flow: one run loops for ``run_seconds`` ticking every ``tick_seconds``.

Deployed with concurrency 1 (CANCEL_NEW) so two runs never tick at once; the next scheduled
run takes over when this one ends. Looping inside one run, rather than one run per tick,
is what keeps pickup latency under a second (a run start costs seconds).
"""

from __future__ import annotations

import time

from prefect import flow, get_run_logger

from falcon.adapters import slots
from falcon.adapters.runs import DeploymentLauncher
from falcon.bootstrap import gateways
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher
from falcon.settings import get_settings


@flow(name="dispatcher")
def dispatcher(run_seconds: float | None = None, tick_seconds: float | None = None) -> int:
    settings = get_settings()
    logger = get_run_logger()
    loop = Dispatcher(Services(settings, gateways()), slots, DeploymentLauncher())
    period = tick_seconds or settings.tick_seconds
    deadline = time.monotonic() + (run_seconds or settings.dispatcher_run_seconds)
    ticks = 0
    while (started := time.monotonic()) < deadline:
        try:
            report = loop.tick()
            if report:
                logger.info("event=tick %s", report)
        except Exception:
            logger.exception("event=tick_failed")
            time.sleep(min(5.0, period * 4))
        ticks += 1
        time.sleep(max(0.0, started + period - time.monotonic()))  # a tick starts every period
    return ticks
