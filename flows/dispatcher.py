"""The scheduled dispatcher flow: one run loops for ``run_seconds`` ticking every ``tick_seconds``,
with its reconcile rounds every ``reconcile_seconds`` in a thread beside the ticks, and its
housekeeping (orphan sweeps, the view) every ``view_seconds`` in another.

Deployed with concurrency 2 (CANCEL_NEW): the next scheduled run starts while this one stops
(a runner or worker submits it up to 20 s early, and this run's stop takes seconds), and a third
is cancelled. Two dispatchers at once are safe (README, "Two dispatchers at once are safe"); a
gap is not, since with limit 1 the early successor would be cancelled and nothing would dispatch
until the interval after. Looping inside one run, rather than one run per tick, is what keeps
pickup latency under a second (a run start costs seconds).

SIGTERM (Prefect cancelling the run, a worker or Kubernetes shutting down) stops the loop at the
next tick boundary; the process serves Kubernetes probes on ``FALCON_HEALTH_PORT`` if set.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from functools import partial
from types import FrameType

from prefect import flow, get_run_logger
from prefect.context import FlowRunContext

from falcon.adapters.artifacts import ViewArtifact
from falcon.adapters.clock import StoppableClock, utc_now
from falcon.adapters.collector import full_collections_between_ticks
from falcon.adapters.console_log import console_beside
from falcon.adapters.health import database_check, prefect_check, serving_health
from falcon.adapters.interpreter_lock import lock_handed_over_every
from falcon.adapters.metrics import (
    GC_PAUSES,
    HOUSEKEEPING_SECONDS,
    MESSAGES_SECONDS,
    RECONCILE_SECONDS,
    observe_steps,
    timed_tick,
)
from falcon.adapters.runs import ThreadLauncher, next_scheduled_start
from falcon.bootstrap import services, serving
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher, DispatcherLoop, MessagesBeside, all_live, run_beside
from falcon.services.health import Verdict, readiness
from falcon.settings import RunsIn, Settings
from flows.lifecycle import task_lifecycle, task_release
from flows.warming import warm_pools

_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


@flow(name="dispatcher")
def dispatcher(run_seconds: float | None = None, tick_seconds: float | None = None) -> int:
    GC_PAUSES.install()
    with (
        console_beside(),
        runs_in_process(services()) as svc,
        full_collections_between_ticks() as collections,
        lock_handed_over_every(),
    ):
        settings = svc.settings
        log = get_run_logger()
        messages = MessagesBeside(partial(timed_write, svc.store.set_waiting_messages), log)
        work = Dispatcher(svc, publish=ViewArtifact(), messages=messages, beside=True)
        # Every loop: the same clock and log, and full collections only when none is in a turn.
        loop = partial(
            DispatcherLoop,
            clock=svc.clock,
            log=log,
            between_ticks=collections.between_ticks,
            turn=collections.turn,
        )
        ticking = loop(timed_tick(work.pick_tick), period=tick_seconds or settings.tick_seconds, name="tick")
        reconciling = loop(
            timed_tick(work.reconcile, RECONCILE_SECONDS), period=settings.reconcile_seconds, name="reconcile"
        )
        housekeeping = loop(
            timed_tick(work.housekeep, HOUSEKEEPING_SECONDS),
            period=housekeeping_period(settings),
            name="housekeeping",
        )
        work.on_pool_offered = ticking.nudge
        work.on_steps = observe_steps
        seconds = until_next_scheduled(run_seconds or settings.dispatcher_run_seconds)
        try:
            with (
                sigterm_stops(ticking.stop),
                health_probes(settings, partial(all_live, (ticking, reconciling, housekeeping))),
            ):
                ticks = run_beside(ticking, (reconciling, housekeeping), seconds)
        finally:
            work.close()  # launches under way finish before the run ends
    return ticks


def housekeeping_period(settings: Settings) -> float:
    """How often housekeeping turns: as often as its most frequent work (the view, else the
    orphan scan) is due, so that a turn mostly has work, and at least twice within the liveness
    bound, so that a loop that turns seldom is never taken for a wedged one."""
    periods = [settings.orphan_scan_seconds, settings.liveness_seconds / 2]
    return min([*periods, settings.view_seconds] if settings.view_seconds else periods)


def timed_write(
    write: Callable[[Mapping[str, str], datetime], int], messages: Mapping[str, str], now: datetime
) -> int:
    """One write of the waiting Messages, observed in falcon_dispatcher_messages_seconds."""
    return timed_tick(partial(write, messages, now), MESSAGES_SECONDS)()


def until_next_scheduled(run_seconds: float, margin: float = 10.0) -> float:
    """How long this run may loop: ``run_seconds``, cut short so that it ends ``margin`` seconds
    before its deployment's next scheduled run starts. A run started off the schedule (the first
    run ``falcon local`` starts, a restart by the Crashed trigger) would otherwise go on beside the
    next run for most of an interval (the dispatcher), or hold the deployment's one slot then so
    that CANCEL_NEW cancelled the next run (the tidal controller: none until the interval after)."""
    context = FlowRunContext.get()
    deployment = context.flow_run.deployment_id if context and context.flow_run else None
    if deployment is None:
        return run_seconds
    return cut_short(run_seconds, next_scheduled_start(deployment), utc_now(), margin)


def cut_short(run_seconds: float, next_start: datetime | None, now: datetime, margin: float) -> float:
    """``run_seconds``, or less: until ``margin`` seconds before ``next_start`` (never below 0)."""
    if next_start is None:
        return run_seconds
    return max(0.0, min(run_seconds, (next_start - now).total_seconds() - margin))


@contextmanager
def runs_in_process(svc: Services) -> Iterator[Services]:
    """With ``FALCON_RUNS_IN=dispatcher``, the block's services start the lifecycle, release and
    warm flows as flow runs in this process's threads, and every flow of the process uses them.
    At the end the runs are stopped at their next wait; those still inside an API call after
    ``FALCON_RUN_STOP_SECONDS`` die with the process, and either kind is resumed by the next
    dispatcher run from the database."""
    settings = svc.settings
    if settings.runs_in is RunsIn.DEPLOYMENTS:
        yield svc
        return
    launcher = ThreadLauncher((task_lifecycle, task_release, warm_pools), settings.run_threads, svc.store)
    try:
        with serving(replace(svc, launcher=launcher, clock=StoppableClock(launcher.stopping))) as served:
            yield served
    finally:
        left = launcher.stop(settings.run_stop_seconds)
        if left:
            get_run_logger().warning("event=runs_left_running runs=%s", ",".join(left))


@contextmanager
def health_probes(
    settings: Settings, liveness: Callable[[float], Verdict], port: int | None = None
) -> Iterator[None]:
    """``/livez`` from the loop's last turn (``liveness`` given the allowed age), ``/readyz`` from
    the database and the Prefect API, ``/metrics``: served for the block on ``port`` (default
    ``FALCON_HEALTH_PORT``) when set. The dispatcher's and the tidal controller's processes alike,
    each on its own port: under ``falcon local`` they share one environment."""
    port = settings.health_port if port is None else port
    if not port:
        yield
        return
    checks = {
        "database": database_check(settings.resolved_database_url, settings.readiness_timeout_seconds),
        "prefect": prefect_check(settings.readiness_timeout_seconds),
    }
    live = partial(liveness, settings.liveness_seconds)
    with serving_health(port, live, lambda: readiness(checks)):
        yield


@contextmanager
def sigterm_stops(stop: threading.Event) -> Iterator[None]:
    """Within the block SIGTERM only sets ``stop``, so the loop finishes its tick instead of being
    interrupted mid-write. Once the block is over, a SIGTERM received goes on to the handler it
    displaced: Prefect's ends the run Cancelled or Crashed as it decides; the default ends the
    process. Signals reach only the main thread; elsewhere (a flow run in a thread) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[FrameType | None] = []

    def note(_signum: int, frame: FrameType | None) -> None:
        received.append(frame)
        stop.set()

    displaced = signal.signal(signal.SIGTERM, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, displaced)
    if received:
        _pass_on(displaced, received[0])


def _pass_on(handler: _Handler, frame: FrameType | None) -> None:
    if callable(handler):
        handler(signal.SIGTERM, frame)
    elif handler in (signal.SIG_DFL, None):
        os.kill(os.getpid(), signal.SIGTERM)
