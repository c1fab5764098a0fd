"""The dispatcher: a tick (snapshot → intake and aborts → picks → slots → launch), a reconcile
round (follow Jobs, supervise runs, reap and warm pools) and housekeeping (sweep orphans, publish
the view).

The deployed dispatcher runs the three in loops of their own (``run_beside``), so a round that
waits on a cluster's API or on building its clients never delays a new row's pickup, and an
orphan sweep's GKE lists never delay following the Jobs; ``tick()`` runs all three on one
thread, a round and housekeeping when a round is due, which is what step-by-step tests drive. A tick
or a round that fails is logged and the next one starts again from the database and the queue
book, so the dispatcher never stops on a bad row.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from falcon.domain.dispatcher_view import DispatcherView, build_view
from falcon.domain.events import ResourceView
from falcon.domain.lifecycle import (
    LIVE_POOL_STATES,
    NodePool,
    Phase,
    PoolState,
    Progress,
    Snapshot,
    reservation_nodes,
    reservation_pool_counts,
)
from falcon.domain.messages import MessageKey
from falcon.domain.model import Cluster, QueueKey, RunningTask
from falcon.domain.node_pools import ReservationRef
from falcon.domain.scheduling import ReservationBasis, ReservationCapacity
from falcon.domain.warm_pools import next_change, warm_targets
from falcon.services import reconcile
from falcon.services.context import Services
from falcon.services.fan_out import fan_out_on
from falcon.services.health import Verdict, liveness
from falcon.services.intake import take_in
from falcon.services.observations_beside import ObservationsBeside
from falcon.services.periodic import Every
from falcon.services.pick_records import PickRecords
from falcon.services.ports import Clock
from falcon.services.queueing import MessageWrite, Pick, QueueBook, schedule, settle
from falcon.services.reaper_beside import ReaperCallsBeside
from falcon.services.registry_book import RegistryBook
from falcon.services.release import observed
from falcon.services.running_book import RunningBook
from falcon.services.warming import Warmer
from falcon.services.work_beside import WorkBeside

logger = logging.getLogger(__name__)

# A queue whose slot is held in Prefect while the database says nobody acquires must stay so for
# this long before the slot is reset: a lifecycle run releases its lease a moment after it
# records Running, and that moment must never be mistaken for a leak.
LEAK_CONFIRM_SECONDS = 5.0
FIRST_ORPHAN_SCAN_AFTER = 30.0  # seconds after the dispatcher starts
UNREACHABLE_AFTER = 3  # probes failed in a row (one per reconcile round) before a cluster is held
SLOW_TICK_SECONDS = 0.5  # a tick or round this long is logged with the time each of its phases took
FULL_RELOAD_EVERY = 10  # book checks (queue_refresh_seconds apart) between two full reloads
# A round follows its clusters, and makes their GKE calls, this many at once; as many threads
# release the tasks whose Job ended, and as many start the runs that died (WorkBeside).
ROUND_THREADS = 8
# The pools each round reads: those it reaps, warms, or sees GKE create or delete.
ROUND_POOL_STATES = (PoolState.CREATING, PoolState.IDLE, PoolState.DELETING)


@dataclass
class Laps:
    """The time each phase of one tick, round or housekeeping turn took, on the monotonic clock
    (for event=slow_tick, event=slow_reconcile and event=slow_housekeeping)."""

    clock: Clock
    thread_cpu: Callable[[], float] = time.thread_time
    began: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.began = self._mark = self.clock.monotonic()
        self._cpu_began = self.thread_cpu()

    def lap(self, phase: str) -> None:
        now = self.clock.monotonic()
        self.phases[phase], self._mark = now - self._mark, now

    @property
    def total(self) -> float:
        return self._mark - self.began

    @property
    def cpu(self) -> float:
        """This thread's CPU time since the start: the rest of ``total`` it spent waiting (on the
        database, Prefect, a core, or the interpreter lock while another thread held it)."""
        return self.thread_cpu() - self._cpu_began

    def __str__(self) -> str:
        return " ".join(f"{phase}={seconds:.3f}" for phase, seconds in self.phases.items())


@dataclass
class TickReport:
    queued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    picked: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # slots of queues whose pick the slot service delayed
    ended: list[str] = field(default_factory=list)  # running tasks whose end was handed over beside the round
    # Since the round before this one, beside the rounds (WorkBeside): tasks ended (their pool
    # kept), and tasks whose run was started again.
    released: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    warming: list[str] = field(default_factory=list)  # queues a warm run was started for

    def __bool__(self) -> bool:
        return any(getattr(self, f) for f in self.__dataclass_fields__)


class MessagesBeside:
    """Writes the waiting tasks' Messages on a thread of its own, so that a pick's rewrite of its
    queue's positions (one row per waiting task behind it: hundreds at scale, the largest write a
    tick had) is not in the tick's time: the tick hands the texts over and goes on picking.

    Writes keep their order. What is handed over while a write is under way goes in the next one,
    merged (the newest text of a task wins), so a backlog never grows past one Message per
    waiting task. Only rows still Waiting are written (``set_waiting_messages``), so a Message
    that lands after its task was picked changes nothing. A write that fails is logged and
    reported once by ``failed``: the dispatcher then reads its book again, which writes every
    Message that differs."""

    def __init__(
        self, write: MessageWrite, log: logging.Logger | logging.LoggerAdapter[logging.Logger]
    ) -> None:
        self._write, self._log = write, log
        self._pending: dict[str, str] = {}
        self._now: datetime | None = None  # the time of the newest hand-over
        self._failed = self._closing = self._writing = False
        self._changed = threading.Condition()
        context = contextvars.copy_context()  # its log lines reach the flow run of its creator
        self._thread = threading.Thread(target=context.run, args=(self._loop,), name="messages", daemon=True)
        self._thread.start()

    def __call__(self, messages: Mapping[str, str], now: datetime) -> None:
        with self._changed:
            self._pending.update(messages)
            self._now = now
            self._changed.notify_all()

    def failed(self) -> bool:
        """True once after a write failed."""
        with self._changed:
            failed, self._failed = self._failed, False
            return failed

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every Message handed over is written (or failed); False on ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._writing, timeout)

    def close(self) -> None:
        """Write what is handed over, then stop the thread."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._closing)
                if not self._pending:
                    return
                batch, now, self._pending, self._writing = self._pending, self._now, {}, True
            try:
                assert now is not None  # set with every hand-over
                self._write(batch, now)
            except Exception:
                self._log.exception("event=messages_failed count=%d", len(batch))
                with self._changed:
                    self._failed = True
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()


class Dispatcher:
    def __init__(
        self,
        services: Services,
        publish: Callable[[DispatcherView], None] | None = None,
        messages: MessagesBeside | None = None,
        beside: bool = False,
    ) -> None:
        """Every ``view_seconds`` (a reconcile round's last step) the dispatcher's view sets the
        state gauges and, if given, goes to ``publish``: the deployed dispatcher's table artifact.
        ``messages``: the waiting Messages are written beside the tick (else within it).
        ``beside``: the turns hand the work that needs no answer within them over to threads
        beside them and do not wait: the tick its picks' records and their runs' starts (the
        next tick collects what the records did), the round its reads of the queues' history for
        the reaper's pricing. Else they wait, as a test that looks at a turn's outcome needs."""
        self._beside = beside
        self.services = services
        self._publish = publish
        self._messages = messages
        self.book = QueueBook()
        self._book_lock = threading.RLock()  # the tick's; the round's only when a cluster's hold changes
        # The waiting tasks per queue as the last tick left them: the round reads these, never
        # waiting for a tick under way (one taking thousands of rows in holds the book for seconds).
        self._waiting_counts: dict[QueueKey, int] = {}
        self._launches = ThreadPoolExecutor(max_workers=8, thread_name_prefix="launch")
        self._launching: list[futures.Future[None]] = []  # the runs' starts a waiting tick waits for
        # The picks' records: threads of their own, so that no launch handed over delays them.
        self._claim_threads = ThreadPoolExecutor(max_workers=8, thread_name_prefix="claim")
        self._records = PickRecords(self._claim_threads, wait=not beside)
        self._round_work = ThreadPoolExecutor(max_workers=ROUND_THREADS, thread_name_prefix="round")
        self._fan_out = fan_out_on(self._round_work)
        self._releases = WorkBeside(ROUND_THREADS, "release")
        self._starts = WorkBeside(ROUND_THREADS, "run_start")
        self._reaper_calls = ReaperCallsBeside(ROUND_THREADS)
        read = partial(observed, services)
        self._observations = ObservationsBeside(read, services.clock.monotonic) if beside else None
        settings = services.settings
        self._refresh = Every(settings.queue_refresh_seconds)
        self._checks_since_reload = 0
        self._reconcile_timer = Every(settings.reconcile_seconds)
        self._view_timer = Every(settings.view_seconds)
        # cluster id -> its reservation as the view last read it: intake's §3 tie-break
        self._reservations: dict[str, ReservationBasis] = {}
        # The first scan comes a little after start: it builds every cluster's clients, and the
        # first ticks are those a restart's backlog of new rows waits on.
        period = settings.orphan_scan_seconds
        self._orphan_scan = Every(
            period, last=services.clock.monotonic() - period + min(period, FIRST_ORPHAN_SCAN_AFTER)
        )
        self._held_since: dict[QueueKey, float] = {}
        self._failed_probes: dict[str, int] = {}  # cluster id -> probes failed in a row
        self._unreachable: dict[str, str] = {}  # cluster id -> the Message its waiting tasks show
        self._warmer = Warmer(services)
        self._unlaunched: dict[str, float] = {}  # picks seen with no run recorded yet (supervise_runs)
        self._priced: reconcile.PricedSpells = {}  # the idle pools as the reaper priced them
        self._running = RunningBook()  # the running tasks as the last round read them
        self._registry = RegistryBook()  # the clusters and warm rules as the last round read them
        self._confirmed: reconcile.ConfirmedAt = {}  # when the reaper last confirmed each deletion
        self._next_fire: datetime | None = None  # the next tidal warm-pool fire: reconcile then
        self.on_pool_offered: Callable[[], None] = lambda: None  # the deployed flow nudges its tick loop
        # Each turn's steps, by loop ("tick", "reconcile", "housekeeping"): the deployed flow exports them.
        self.on_steps: Callable[[str, Mapping[str, float]], None] = lambda loop, steps: None

    def tick(self) -> TickReport:
        """Intake, aborts and picks, then a reconcile round if one is due (or a tidal fire came)."""
        laps = Laps(self.services.clock)
        report = self._picks(laps)
        fired = self._next_fire is not None and self.services.clock.now() >= self._next_fire
        if self._reconcile_timer.due(self.services.clock.monotonic(), force=fired):
            self._reconcile(report, laps)
            self._housekeep(report, laps)
        _log_if_slow("tick", laps)
        return report

    def pick_tick(self) -> TickReport:
        """Intake, aborts and picks only: the loop beside ``reconcile`` in the deployed dispatcher."""
        laps = Laps(self.services.clock)
        report = self._picks(laps)
        self._done("tick", laps)
        return report

    def reconcile(self) -> TickReport:
        """One reconcile round, now."""
        laps, report = Laps(self.services.clock), TickReport()
        self._reconcile(report, laps)
        self._done("reconcile", laps)
        return report

    def housekeep(self) -> TickReport:
        """The orphan sweeps and the view, each when its period is over: the deployed dispatcher's
        third loop, so that listing every cluster's node pools (seconds in GKE) or building the
        view never holds up following the Jobs and reaping."""
        laps, report = Laps(self.services.clock), TickReport()
        self._housekeep(report, laps)
        self._done("housekeeping", laps)
        return report

    def _pool_offered(self) -> None:
        """A pool kept beside the round: a waiting task may take it, so pick now, not at the next tick."""
        self.on_pool_offered()

    def _done(self, loop: str, laps: Laps) -> None:
        self.on_steps(loop, laps.phases)
        _log_if_slow(loop, laps)

    def _picks(self, laps: Laps) -> TickReport:
        with self._book_lock:
            try:
                report = self._take_in_and_pick(laps)
            except BaseException:
                self.book.loaded = False  # a write failed half-way: trust only the database now
                raise
            # A pick whose record is under way is still a taker for its queue's pools: the
            # database does not count it among the acquiring ones until the record commits.
            self._waiting_counts = dict(Counter(self.book.counts()) + Counter(self._records.queues()))
            return report

    def close(self) -> None:
        """Wait for launches, releases and the reaper's calls under way and the Messages handed
        over; the dispatcher is not used afterwards."""
        self._claim_threads.shutdown(wait=True)
        with self._book_lock:  # the records' moves told
            settle(self._records.done(), self.book, self.services.slots, self.services.events)
        self._launches.shutdown(wait=True)
        self._round_work.shutdown(wait=True)
        self._releases.close()
        self._starts.close()
        self._reaper_calls.close()
        if self._observations is not None:
            self._observations.close()
        if self._messages is not None:
            self._messages.close()

    def _take_in_and_pick(self, laps: Laps) -> TickReport:
        svc, settings = self.services, self.services.settings
        clock, report = svc.clock, TickReport()
        if self._messages is not None and self._messages.failed():
            self.book.loaded = False  # the Messages written are not the book's: read it again
        # Collected before the snapshot, which then sees each of these picks recorded.
        report.picked = [p.task_id for p in settle(self._records.done(), self.book, svc.slots, svc.events)]
        due = self._refresh.due(clock.monotonic(), force=not self.book.loaded)
        reload = due and (not self.book.loaded or self._checks_since_reload >= FULL_RELOAD_EVERY)
        snapshot = svc.store.snapshot(settings.intake_batch, with_book=reload, with_counts=due)
        self._check_book(snapshot)
        laps.lap("snapshot")
        now = clock.now()
        intake = take_in(svc.store, snapshot, svc.say, now, svc.events, self._reservations)
        for queue, task in intake.queued:
            self.book.add(queue, task)
        report.queued, report.failed = [t.task_id for _, t in intake.queued], intake.failed
        report.aborted = reconcile.abort_unstarted(svc, snapshot.aborting, now)
        self.book.remove(report.aborted)
        laps.lap("intake")
        result = schedule(
            svc.store,
            self.book,
            svc.slots,
            snapshot.acquiring_queues | self._records.queues(),
            svc.say,
            now,
            settings.slot_lease_seconds,
            svc.events,
            held=self._unreachable,
            write_messages=self._messages,
            records=self._records,
            on_recorded=self._launch,
        )
        report.picked += [p.task_id for p in result.picks]
        report.deferred = [queue.slot_name for queue in result.deferred]
        laps.lap("schedule")
        futures.wait(self._launching)  # none unless the tick waits for its picks
        self._launching.clear()
        report.repaired = self._repair_leaks(result.slot_held)
        laps.lap("launch")
        return report

    def _check_book(self, snapshot: Snapshot) -> None:
        """Load the book from a full read; compare it with a count, and read it all next tick
        (half a second on) when they differ."""
        if snapshot.waiting is not None:
            self.book.load(snapshot.waiting, snapshot.last_actors or {}, snapshot.waiting_counts)
            self._checks_since_reload = 0
            if self.book.unbooked:
                # progress rows waiting whose job row was deleted or edited by hand: never picked
                logger.warning("event=waiting_rows_not_pending queues=%s", _queues_text(self.book.unbooked))
        elif snapshot.waiting_counts is not None:
            self._checks_since_reload += 1
            leaving = {task.id for task, _ in snapshot.aborting}
            drift = self.book.drift(snapshot.waiting_counts, leaving, self._records.queues())
            if drift:
                moved = {q: f"{book}->{db}" for q, (book, db) in drift.items()}
                logger.warning("event=queue_book_drift queues=%s", _queues_text(moved))
                self.book.loaded = False

    def _launch(self, pick: Pick) -> None:
        """Start the pick's lifecycle run on a thread of its own (a few API round trips)."""
        svc = self.services

        def start(pick: Pick) -> None:
            run = svc.launcher.start_acquire(pick.task_id, pick.lease_id, pick.attempt)
            svc.store.set_acquire_run(pick.task_id, run, svc.clock.now())

        # A failed start leaves acquire_run_id empty; supervise_runs starts it again, as it does a
        # start handed over that has not recorded its run within LAUNCH_GRACE.
        started = self._launches.submit(contextvars.copy_context().run, _quietly, start, pick)
        if not self._beside:
            self._launching.append(started)

    def _repair_leaks(self, held: list[QueueKey]) -> list[str]:
        now = self.services.clock.monotonic()
        self._held_since = {q: self._held_since.get(q, now) for q in held}
        leaked = [q for q, since in self._held_since.items() if now - since >= LEAK_CONFIRM_SECONDS]
        for queue in leaked:
            self.services.slots.reset(queue.slot_name)
            del self._held_since[queue]
        return [q.slot_name for q in leaked]

    def _reconcile(self, report: TickReport, laps: Laps) -> None:
        svc = self.services
        waiting = self._waiting_counts
        self._registry.read(svc.store, svc.clock.monotonic())
        before = svc.clock.now()  # a task that reaches Running during the read is read next round
        asked = self._running.next_read()
        read = svc.store.round_snapshot(asked, reconcile.SUPERVISED, ROUND_POOL_STATES)
        running = self._running.update(read.running, asked, before, svc.store)
        supervised, pools = read.supervised, read.pools
        self._registry.meet(svc.store, _cluster_ids(running, supervised, pools, waiting))
        clusters, rules = self._registry.clusters, self._registry.rules
        waited_for = {queue.cluster_id for queue in waiting}
        seen = reconcile.find_endings(svc, clusters, waited_for, self._fan_out, running)
        report.ended = [ending.task.id for ending in seen.endings]
        self._running.leaving(report.ended)
        laps.lap("follow")
        done = self._releases.done()
        self._running.settled(done)
        report.released = [task_id for task_id, ended in done.items() if ended]
        self._releases.hand_over(
            {e.task.id: partial(reconcile.release_ended, svc, e, self._pool_offered) for e in seen.endings}
        )
        laps.lap("release")
        report.started = [task_id for task_id, started in self._starts.done().items() if started]
        beside = self._releases.under_way() | self._starts.under_way()
        needed = reconcile.runs_to_start(svc, self._unlaunched, beside, supervised)
        start = partial(reconcile.start_run, svc, read_before=True)
        self._starts.hand_over({p.task_id: partial(start, p) for p in needed})
        laps.lap("supervise")
        takers = Counter(waiting) + Counter(read.takers_without_pool)
        now = svc.clock.now()
        targets = warm_targets(rules, now)
        warm = {queue: target.pools for queue, target in targets.items()}
        report.reaped = reconcile.reap_idle_pools(
            svc,
            clusters,
            dict(takers),
            warm,
            pools,
            self._priced,
            self._confirmed,
            self._reaper_calls.hand_over,
            self._observations,
        )
        laps.lap("reap")
        self._next_fire = next_change(rules, now)
        report.warming = self._warmer.converge(clusters, rules, targets, pools, now)
        self._note_reachability(seen.unreachable, clusters)
        laps.lap("warm")

    def _housekeep(self, report: TickReport, laps: Laps) -> None:
        svc = self.services
        orphans_due = self._orphan_scan.due(svc.clock.monotonic())
        view_due = bool(svc.settings.view_seconds) and self._view_timer.due(svc.clock.monotonic())
        if not (orphans_due or view_due):
            return
        clusters = {c.id: c for c in svc.store.clusters()}
        if orphans_due:
            report.orphans = reconcile.delete_orphan_pools(svc, clusters)
            laps.lap("orphan_pools")
            report.orphans += reconcile.delete_orphan_jobs(svc, clusters)
            laps.lap("orphan_jobs")
            report.orphans += reconcile.delete_orphan_services(svc, clusters)
            laps.lap("orphan_services")
        if view_due:
            self._show_view(list(clusters.values()))
            laps.lap("view")

    def _show_view(self, clusters: list[Cluster]) -> None:
        """The view, to the state gauges (``events.resources_seen``) and to ``publish``; a view
        that fails is logged, never more: it is for people."""
        svc = self.services
        if not self._book_lock.acquire(blocking=False):
            return  # a tick holds the book (seconds, when it takes thousands of rows in): next period
        try:
            waiting = {q: list(tasks) for q, tasks in self.book.waiting.items()}
            last_actors = dict(self.book.last_actor)
        finally:
            self._book_lock.release()
        try:
            working = svc.store.progress_in([Phase.ACQUIRING, Phase.RUNNING])
            acquiring = {p.queue: p.task_id for p in working if p.phase is Phase.ACQUIRING and p.queue}
            running = Counter(p.queue.cluster_id for p in working if p.phase is Phase.RUNNING and p.queue)
            pools = svc.store.pools_in(LIVE_POOL_STATES)
            room = {c.id: self._room(c) for c in clusters}
            self._note_reservations(clusters, room, pools)
            warm = {
                (p.cluster_id, p.name)
                for p in pools
                if p.state is PoolState.IDLE and svc.store.warm_origin(p.cluster_id, p.name)
            }
            counts = {q: len(tasks) for q, tasks in waiting.items() if tasks}
            svc.events.resources_seen(ResourceView(clusters, counts, acquiring, running, room, pools, warm))
            if self._publish:
                self._publish(build_view(clusters, waiting, last_actors, acquiring, running, pools, room))
        except Exception:
            logger.warning("event=view_failed", exc_info=True)

    def _note_reservations(
        self, clusters: list[Cluster], room: Mapping[str, ReservationCapacity | None], pools: list[NodePool]
    ) -> None:
        """Keep each reservation read, with the nodes Falcon held on it then, for intake's cluster
        choice; a cluster whose read failed keeps its last one. One assignment: the tick reads it."""
        # Compute counts a pool's nodes in use once they exist, not while it is being created.
        counted = reservation_pool_counts(pools, [s for s in LIVE_POOL_STATES if s is not PoolState.CREATING])
        read = {
            c.id: ReservationBasis(capacity, reservation_nodes(c, counted))
            for c in clusters
            if (capacity := room[c.id]) is not None
        }
        self._reservations = {**self._reservations, **read}

    def _room(self, cluster: Cluster) -> ReservationCapacity | None:
        """The cluster's reservation as Compute reports it now; None without one or an answer."""
        if not cluster.default_reservation:
            return None
        try:
            ref = ReservationRef.parse(cluster.default_reservation, cluster.project)
            return self.services.reservations.capacity(ref, cluster.node_zone)
        except Exception as exc:  # shown as unknown: the view must not wait on Compute's trouble
            logger.info("event=view_room_unknown cluster=%s error=%r", cluster.name, exc)
            return None

    def _note_reachability(self, down: dict[str, str], clusters: dict[str, Cluster]) -> None:
        """A cluster whose Job list failed UNREACHABLE_AFTER rounds in a row is held: its tasks
        wait (a pick would only burn its retries) with a Message saying why, until a list
        answers; the other clusters go on."""
        svc = self.services
        self._failed_probes = {c: self._failed_probes.get(c, 0) + 1 for c in down}
        held = {}
        for cluster_id, error in down.items():
            if self._failed_probes[cluster_id] >= UNREACHABLE_AFTER:
                held[cluster_id] = self._unreachable.get(cluster_id) or svc.say(
                    MessageKey.CLUSTER_UNREACHABLE,
                    cluster=clusters[cluster_id].name,
                    since=f"{svc.clock.now():%Y-%m-%d %H:%M:%S} UTC",
                    detail=error[:200],
                )
        changed = set(held) ^ set(self._unreachable)
        if not changed:
            return  # the usual round: no need to wait for a tick that holds the book
        with self._book_lock:
            self.book.dirty.update(q for q in self.book.waiting if q.cluster_id in changed)
            self._unreachable = held


def _cluster_ids(
    running: Iterable[RunningTask],
    supervised: Iterable[Progress],
    pools: Iterable[NodePool],
    waiting: Iterable[QueueKey],
) -> set[str]:
    """The clusters a round's reads name: those it follows, supervises, reaps or waits for."""
    queues = [t.queue for t in running] + [p.queue for p in supervised] + list(waiting)
    return {q.cluster_id for q in queues if q is not None} | {p.cluster_id for p in pools}


def _log_if_slow(what: str, laps: Laps) -> None:
    if laps.total >= SLOW_TICK_SECONDS:
        logger.warning("event=slow_%s seconds=%.3f cpu=%.3f %s", what, laps.total, laps.cpu, laps)


def _quietly(step: Callable[[Pick], None], pick: Pick) -> None:
    try:
        step(pick)
    except Exception:  # one failed launch must not stop the others
        logger.exception("event=launch_failed task_id=%s", pick.task_id)


class _StopEvent(threading.Event):
    """A stop that also ends the loop's wait for its next turn."""

    def __init__(self, wake: threading.Event) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake.set()


class DispatcherLoop:
    """Ticks every ``period`` until ``run_seconds`` have passed or ``stop`` is set.

    ``stop`` (set on SIGTERM) is honoured between ticks only: the tick under way finishes, so it
    leaves nothing half-done beyond what any crash would (a pick without its run, a run mid-step:
    supervise_runs restarts both), and the wait for the next tick is cut short. ``nudge`` cuts
    that wait short too, for one more tick at once (a nudge during a tick: right after it). Each
    tick's end is noted for liveness, failed ticks included: a failing tick is the database's
    trouble, which readiness reports; only a loop that stops ticking is wedged. ``between_ticks``
    runs after each tick, in the time up to the next: housekeeping that must not land inside one;
    ``turn`` wraps each tick, for such housekeeping to know when no loop is inside one.
    """

    def __init__(
        self,
        tick: Callable[[], TickReport],
        clock: Clock,
        period: float,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger],
        wait: Callable[[float], object] | None = None,
        name: str = "loop",
        between_ticks: Callable[[], object] = lambda: None,
        turn: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        self._tick, self._clock, self._period, self._log = tick, clock, period, log
        self.name, self._between_ticks, self._turn = name, between_ticks, turn
        self._woken = threading.Event()
        self.stop: threading.Event = _StopEvent(self._woken)
        self._wait = wait or self._woken.wait  # real time: a stop or a nudge ends the wait at once
        self.last_tick = clock.monotonic()

    def nudge(self) -> None:
        self._woken.set()

    def run(self, run_seconds: float) -> int:
        """Loop; returns the number of ticks run."""
        deadline = self._clock.monotonic() + run_seconds
        ticks = 0
        while not self.stop.is_set() and (started := self._clock.monotonic()) < deadline:
            self._woken.clear()
            with self._turn():
                self._timed_tick()
            ticks += 1
            if not self.stop.is_set():
                self._between_ticks()
                self._wait(max(0.0, started + self._period - self._clock.monotonic()))  # one per period
        return ticks

    def liveness(self, bound: float) -> Verdict:
        return liveness(self.last_tick, self._clock.monotonic(), bound, self.name)

    def _timed_tick(self) -> None:
        """One tick, its failure logged and followed by a back-off."""
        try:
            report = self._tick()
            if report:
                self._log.info("event=tick %s", report)
        except Exception:
            self._log.exception("event=tick_failed")
            self._wait(min(5.0, self._period * 4))
        self.last_tick = self._clock.monotonic()


def run_beside(main: DispatcherLoop, beside: Iterable[DispatcherLoop], run_seconds: float) -> int:
    """Run each loop ``beside`` in a thread of its own while ``main`` runs here; all end at the
    deadline, and those beside are stopped (their turn under way finished) as soon as ``main``
    ends, a stop included. Returns ``main``'s number of turns. Each thread runs in a copy of this
    one's context, so its logs reach the same flow run."""
    loops = list(beside)
    threads = [
        threading.Thread(
            target=contextvars.copy_context().run, args=(loop.run, run_seconds), name=loop.name, daemon=True
        )
        for loop in loops
    ]
    for thread in threads:
        thread.start()
    try:
        return main.run(run_seconds)
    finally:
        for loop in loops:
            loop.stop.set()
        for thread in threads:
            thread.join()


def all_live(loops: Iterable[DispatcherLoop], bound: float) -> Verdict:
    """Live while every loop turned within ``bound``: a wedged reconcile loop counts as much as a
    wedged tick."""
    verdicts = [loop.liveness(bound) for loop in loops]
    return Verdict(all(v.healthy for v in verdicts), {k: v for x in verdicts for k, v in x.checks.items()})


def _queues_text(values: Mapping[QueueKey, object]) -> str:
    """``cluster/topology:value`` per queue, for a log line."""
    ordered = sorted(values.items(), key=lambda item: (item[0].cluster_id, item[0].topology))
    return ",".join(f"{q.cluster_id}/{q.topology}:{value}" for q, value in ordered)
