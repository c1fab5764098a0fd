"""The scheduled dispatcher flow: one run loops for ``run_seconds`` ticking every ``tick_seconds``.

Deployed with concurrency 1 (CANCEL_NEW) so two runs never tick at once; the next scheduled
run takes over when this one ends. Looping inside one run, rather than one run per tick,
is what keeps pickup latency under a second (a run start costs seconds).
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from falcon.bootstrap import services
from falcon.services.dispatching import Dispatcher


@flow(name="dispatcher")
def dispatcher(run_seconds: float | None = None, tick_seconds: float | None = None) -> int:
    svc = services()
    logger, clock = get_run_logger(), svc.clock
    loop = Dispatcher(svc)
    period = tick_seconds or svc.settings.tick_seconds
    deadline = clock.monotonic() + (run_seconds or svc.settings.dispatcher_run_seconds)
    ticks = 0
    try:
        while (started := clock.monotonic()) < deadline:
            try:
                report = loop.tick()
                if report:
                    logger.info("event=tick %s", report)
            except Exception:
                logger.exception("event=tick_failed")
                clock.sleep(min(5.0, period * 4))
            ticks += 1
            clock.sleep(max(0.0, started + period - clock.monotonic()))  # a tick starts every period
    finally:
        loop.close()
    return ticks
