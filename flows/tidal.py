"""The TidalScheduler controller flow: one run follows every active cluster for ``run_seconds``.

Deployed like the dispatcher: concurrency 1 (CANCEL_NEW) so two controllers never write the same
objects, a schedule that starts the next run when this one ends, and a trigger on Crashed runs.
Nothing is lost between runs: the objects' status is the controller's only state, and a new run's
first list applies what the gap missed (the catch-up rule). SIGTERM ends the run within a second;
with ``FALCON_HEALTH_PORT`` set the process serves ``/livez``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from prefect import flow, get_run_logger

from falcon.adapters.health import database_check, prefect_check, serving_health
from falcon.bootstrap import build_tidal_controller
from falcon.services.health import readiness
from falcon.services.tidal import TidalController
from falcon.settings import Settings, get_settings
from flows.dispatcher import sigterm_stops


@flow(name="tidal-controller")
def tidal_controller(run_seconds: float | None = None) -> None:
    settings = get_settings()
    controller, workers = build_tidal_controller(settings, get_run_logger())
    try:
        with sigterm_stops(controller.stop), health_probes(settings, controller):
            controller.run(run_seconds or settings.tidal_run_seconds)
    finally:
        workers.close()


@contextmanager
def health_probes(settings: Settings, controller: TidalController) -> Iterator[None]:
    """``/livez`` from the loop's last pass, ``/readyz`` from the registry's database and the
    Prefect API, ``/metrics``: served for the block when ``FALCON_HEALTH_PORT`` is set."""
    if not settings.health_port:
        yield
        return
    checks = {
        "database": database_check(settings.resolved_database_url, settings.readiness_timeout_seconds),
        "prefect": prefect_check(settings.readiness_timeout_seconds),
    }
    live = partial(controller.liveness, settings.liveness_seconds)
    with serving_health(settings.health_port, live, lambda: readiness(checks)):
        yield
