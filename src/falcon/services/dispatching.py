"""The dispatcher's tick: intake → aborts → pick per queue → launch, plus periodic reconciliation.

One tick is short and never waits on GKE or Kubernetes operations; a tick that fails is logged
and the next one starts from the database again, so the dispatcher never stops on a bad row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from falcon.adapters.db import repository as repo
from falcon.services import reconcile
from falcon.services.context import Services
from falcon.services.intake import take_in
from falcon.services.ports import Launcher, Slots
from falcon.services.queueing import schedule


@dataclass
class TickReport:
    queued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    picked: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(getattr(self, f) for f in self.__dataclass_fields__)


class Dispatcher:
    def __init__(self, services: Services, slots: Slots, launcher: Launcher) -> None:
        self.services = services
        self.slots = slots
        self.launcher = launcher
        self._last_reconcile = 0.0

    def tick(self) -> TickReport:
        settings, now = self.services.settings, self.services.clock()
        report = TickReport()
        with self.services.db() as session:
            intake = take_in(session, now, settings.message_locale, settings.intake_batch)
            report.queued, report.failed = intake.queued, intake.failed
            report.aborted = reconcile.abort_unstarted(session, self.services, now)
            picks = schedule(session, self.slots, now, settings.message_locale, settings.slot_lease_seconds)
        report.picked = [p.task_id for p in picks]
        for pick in picks:
            run = self.launcher.start_acquire(pick.task_id, pick.lease_id, pick.attempt)
            with self.services.db() as session:
                repo.update_progress(
                    session, pick.task_id, self.services.clock(), [repo.Phase.ACQUIRING], acquire_run_id=run
                )
        if time.monotonic() - self._last_reconcile >= settings.reconcile_seconds:
            self._last_reconcile = time.monotonic()
            self._reconcile(report)
        return report

    def _reconcile(self, report: TickReport) -> None:
        report.ended = reconcile.follow_running(self.services)
        report.started = reconcile.supervise_runs(self.services, self.launcher, self.slots)
        report.reaped = reconcile.reap_idle_pools(self.services)
        with self.services.db() as session:  # every queue that was ever picked or has waiters
            queues = set(repo.last_actors(session)) | set(repo.waiting_by_queue(session))
        report.repaired = reconcile.repair_slots(self.services, self.slots, queues)
