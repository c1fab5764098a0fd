"""The TidalScheduler controller flow: one run follows every active cluster for ``run_seconds``.

Deployed like the dispatcher: concurrency 1 (CANCEL_NEW) so two controllers never write the same
objects, a schedule that starts the next run when this one ends, and a trigger on Crashed runs.
Nothing is lost between runs: the objects' status is the controller's only state, and a new run's
first list applies what the gap missed (the catch-up rule). SIGTERM ends the run within a second;
with ``FALCON_TIDAL_HEALTH_PORT`` set the process serves ``/livez``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from falcon.bootstrap import build_tidal_controller
from falcon.settings import get_settings
from flows.dispatcher import health_probes, sigterm_stops, until_next_scheduled


@flow(name="tidal-controller")
def tidal_controller(run_seconds: float | None = None) -> None:
    settings = get_settings()
    controller, workers = build_tidal_controller(settings, get_run_logger())
    try:
        probes = health_probes(settings, controller.liveness, settings.tidal_health_port)
        with sigterm_stops(controller.stop), probes:
            controller.run(until_next_scheduled(run_seconds or settings.tidal_run_seconds))
    finally:
        workers.close()
