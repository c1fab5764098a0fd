"""The dispatcher's tick: intake → aborts → pick per queue → launch, plus periodic reconciliation.

One tick is short and never waits on GKE or Kubernetes operations; a tick that fails is logged
and the next one starts again from the database and the queue book, so the dispatcher never
stops on a bad row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from falcon.adapters.db import repository as repo
from falcon.domain.model import QueueKey
from falcon.services import reconcile
from falcon.services.context import Services
from falcon.services.intake import take_in
from falcon.services.ports import Launcher, Slots
from falcon.services.queueing import Pick, QueueBook, schedule

logger = logging.getLogger(__name__)

# A queue whose slot is held in Prefect while the database says nobody acquires must stay so for
# this long before the slot is reset: a lifecycle run releases its lease a moment after it
# records Running, and that moment must never be mistaken for a leak.
LEAK_CONFIRM_SECONDS = 5.0


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
    orphans: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(getattr(self, f) for f in self.__dataclass_fields__)


class Dispatcher:
    def __init__(self, services: Services, slots: Slots, launcher: Launcher) -> None:
        self.services = services
        self.slots = slots
        self.launcher = launcher
        self.book = QueueBook()
        self._launches = ThreadPoolExecutor(max_workers=8, thread_name_prefix="launch")
        self._last_reconcile = 0.0
        self._last_refresh = 0.0
        self._last_orphan_scan = 0.0
        self._held_since: dict[QueueKey, float] = {}

    def tick(self) -> TickReport:
        try:
            return self._tick()
        except BaseException:
            self.book.loaded = False  # the transaction rolled back: trust only the database now
            raise

    def _tick(self) -> TickReport:
        settings, now = self.services.settings, self.services.clock()
        report = TickReport()
        with self.services.db() as session:
            if (
                not self.book.loaded
                or time.monotonic() - self._last_refresh >= settings.queue_refresh_seconds
            ):
                self.book.load(session)
                self._last_refresh = time.monotonic()
            intake = take_in(session, now, settings.message_locale, settings.intake_batch)
            for queue, task in intake.queued:
                self.book.add(queue, task)
            report.queued, report.failed = [t.task_id for _, t in intake.queued], intake.failed
            report.aborted = reconcile.abort_unstarted(session, self.services, now)
            self.book.remove(report.aborted)
            result = schedule(
                session, self.book, self.slots, now, settings.message_locale, settings.slot_lease_seconds
            )
        report.picked = [p.task_id for p in result.picks]
        self._launch(result.picks)
        report.repaired = self._repair_leaks(result.slot_held)
        if time.monotonic() - self._last_reconcile >= settings.reconcile_seconds:
            self._last_reconcile = time.monotonic()
            self._reconcile(report)
        return report

    def _launch(self, picks: list[Pick]) -> None:
        """Start the lifecycle runs in parallel: each start is a few API round trips."""

        def start(pick: Pick) -> None:
            run = self.launcher.start_acquire(pick.task_id, pick.lease_id, pick.attempt)
            with self.services.db() as session:
                repo.update_progress(
                    session, pick.task_id, self.services.clock(), [repo.Phase.ACQUIRING], acquire_run_id=run
                )

        # A failed start leaves acquire_run_id empty; supervise_runs starts it again.
        list(self._launches.map(lambda p: _quietly(start, p), picks))

    def _repair_leaks(self, held: list[QueueKey]) -> list[str]:
        now = time.monotonic()
        self._held_since = {q: self._held_since.get(q, now) for q in held}
        leaked = [q for q, since in self._held_since.items() if now - since >= LEAK_CONFIRM_SECONDS]
        for queue in leaked:
            self.slots.reset(queue.slot_name)
            del self._held_since[queue]
        return [q.slot_name for q in leaked]

    def _reconcile(self, report: TickReport) -> None:
        report.ended = reconcile.follow_running(self.services)
        report.started = reconcile.supervise_runs(self.services, self.launcher, self.slots)
        report.reaped = reconcile.reap_idle_pools(self.services, self.book.counts())
        if time.monotonic() - self._last_orphan_scan >= self.services.settings.orphan_scan_seconds:
            self._last_orphan_scan = time.monotonic()
            pools = reconcile.delete_orphan_pools(self.services)
            report.orphans = pools + reconcile.delete_orphan_services(self.services)


def _quietly(step: Callable[[Pick], None], pick: Pick) -> None:
    try:
        step(pick)
    except Exception:  # one failed launch must not stop the others
        logger.exception("event=launch_failed task_id=%s", pick.task_id)
