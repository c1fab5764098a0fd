"""The TidalScheduler controller flow: one run follows every active cluster for ``run_seconds``.

Deployed like the dispatcher, but with concurrency 1 (CANCEL_NEW) so two controllers never write
the same objects: a run ends ``HANDOVER_SECONDS`` before its deployment's next scheduled run, which
a runner or worker submits up to 20 s early (10 s prefetch, then one 10 s poll) and CANCEL_NEW
would cancel while this run still held the slot. A trigger restarts Crashed runs.
Nothing is lost between runs: the objects' status is the controller's only state, and a new run's
first list applies what the gap missed (the catch-up rule). SIGTERM ends the run within a second;
with ``FALCON_TIDAL_HEALTH_PORT`` set the process serves ``/livez``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from falcon.bootstrap import build_tidal_controller
from falcon.settings import get_settings
from flows.dispatcher import health_probes, sigterm_stops, until_next_scheduled

HANDOVER_SECONDS = 30.0  # the next run's early submission (20 s) and this run's stop (within 1 s), with room


@flow(name="tidal-controller")
def tidal_controller(run_seconds: float | None = None) -> None:
    settings = get_settings()
    controller, workers = build_tidal_controller(settings, get_run_logger())
    try:
        probes = health_probes(settings, controller.liveness, settings.tidal_health_port)
        with sigterm_stops(controller.stop), probes:
            seconds = until_next_scheduled(run_seconds or settings.tidal_run_seconds, HANDOVER_SECONDS)
            controller.run(seconds)
    finally:
        workers.close()
