"""Keep or delete an idle node pool by what it costs (design §5, refined by issue 10).

An idle TPU pool costs node-time while it waits for its queue's next task; deleting it costs its
deletion now and a new creation when that task comes (its nodes are held while GKE brings them
up, and the task waits that long too). Within one queue every pool has the same node count, so
the count cancels and both sides are seconds: keep a pool while the expected wait for its next
user costs less than replacing it (a creation of its mode, and one deletion more).

The design's rule stays the floor: a finished task's pool is kept whenever a task of its queue
waits beyond the pools idle for it already. The cost rule adds a *horizon*: how long an idle
pool (one spare beyond the waiters) is worth keeping while nobody waits, learnt per queue from
what Falcon observed (the gaps between the queue's arrivals, or the fleet's while the queue is
too new to have its own, and how long its pools took to create, per provisioning mode, and to
delete). It replaces the fixed kept-pool grace. And when told to, a task about to create a pool
waits for a busy one of its queue likely to free first (``CostPolicy.wait_for_busy_pool``).

Everything is a pure function of plain data: every duration is passed in, nothing reads a clock.
Durations are counted in whole milliseconds inside, so that costs compare exactly and the
horizon is a monotone function of its inputs (a float sum could tie or not by rounding).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import median_low
from typing import Protocol

from falcon.domain.model import ProvisioningMode, QueueKey
from falcon.domain.scheduling import keep_pool_after_task

# The horizon of a policy that keeps every pool: an idle pool it keeps never expires.
FOREVER = timedelta.max

# An idle pool whose queue has waiters is still deleted after this many times the longer of its
# horizon and a creation: a waiter that has not taken it by then would have had its own pool
# ten times over, so something keeps it from this pool (its cluster held, say), and an idle TPU
# pool costs money for nothing.
IDLE_WITH_WAITERS_FACTOR = 10

# A task's start delay worth more than this many node-minutes a minute is a policy that keeps
# everything; KeepAllPolicy says that plainly.
MAX_START_DELAY_WEIGHT = 100.0

# No arrival gap or creation is longer: beyond a year it is a broken timestamp, not a rhythm.
LONGEST_SECONDS = 366 * 24 * 3600.0


@dataclass(frozen=True)
class QueueObservations:
    """What Falcon observed of one queue, newest last."""

    # Seconds between consecutive arrivals (the rows' created_at) of the queue's recent tasks.
    arrival_gaps: tuple[float, ...] = ()
    # The queue's recent pool creations per mode, seconds from the write-ahead record to ready.
    creation_seconds: Mapping[ProvisioningMode, tuple[float, ...]] = field(default_factory=dict)
    # The queue's recent deletions of ready pools, seconds from marked for deletion to gone: the
    # nodes count until then, the wait for GKE to begin the deletion included.
    deletion_seconds: tuple[float, ...] = ()
    # The arrival gaps of every queue (each between two arrivals of one queue), over the fleet's
    # recent arrivals: what a queue too new to have gaps of its own is taken to look like.
    fleet_gaps: tuple[float, ...] = ()


@dataclass(frozen=True)
class BusyPools:
    """A queue's pools in use, as a task about to ask GKE for a new one finds them."""

    # Seconds the Job on each pool in use has run so far (0 for one whose Job has not started).
    running_for: tuple[float, ...] = ()
    # Pools whose Job has ended and that are being settled: kept for the asking task, as it waits.
    ending: int = 0
    # Seconds the queue's recent Jobs ran (all pods Running to the terminal status), and the
    # fleet's, for a queue with too few of its own.
    past_runs: tuple[float, ...] = ()
    fleet_runs: tuple[float, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.running_for or self.ending)


class KeepPolicy(Protocol):
    """What decides how long idle pools are kept: Falcon's CostPolicy, or a benchmark's baseline."""

    @property
    def takes_back(self) -> bool:
        """May a task take back a pool of its queue marked for deletion, GKE not deleting it yet?"""
        ...

    def horizon(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        """How long an idle pool of this queue and mode is worth keeping while nobody waits for it."""
        ...

    def hold_for_waiters(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        """How long an idle pool is kept while tasks of its queue wait but none takes it."""
        ...

    def keep_at_release(self, waiting: int, idle: int, horizon: Callable[[], timedelta]) -> bool:
        """Keep a just-finished task's pool? waiting = tasks waiting in its queue, idle = pools idle
        for it already; ``horizon`` is asked for only when the answer depends on it (learning it
        reads the queue's recent history, at every task's end). Any waiting beyond idle + 1 gives
        the answer idle + 1 gives (the caller counts no further)."""
        ...

    @property
    def waits_for_busy_pools(self) -> bool:
        """May a task wait for a busy pool of its queue rather than ask GKE for its own? (When not,
        nobody reads the busy pools.)"""
        ...

    def wait_for_busy_pool(
        self, observed: QueueObservations, mode: ProvisioningMode, busy: BusyPools, waited: float
    ) -> bool:
        """Should a task about to ask GKE for a new pool of this mode wait for one of its queue's
        ``busy`` pools instead, having waited ``waited`` seconds so far?"""
        ...


@dataclass(frozen=True)
class CostPolicy:
    """Falcon's rule: keep an idle pool for the horizon ``h`` that minimises the node-time it is
    expected to cost until its queue's next task, learnt from the gaps between the queue's arrivals.

    A pool goes idle with nobody waiting when a task ends, an instant taken as unrelated to the
    arrivals, and waits for the rest of the gap it fell in. Such an instant falls in a gap with a
    chance in proportion to the gap's length, at a uniform point of it (the inspection paradox: the
    releases of a bursty queue land in its lulls, seldom in its bursts, whose tasks wait for each
    other and are the floor's anyway). Taking the gaps themselves for the waits, as if releases
    came right after arrivals, would keep every pool of a bursty queue for its burst spacing, in
    vain. Over a gap ``g`` the spell costs, times ``g``: ``g²/2`` when ``h >= g`` (it waited,
    then was reused), else ``g·h - h²/2 + C·(g - h)`` (it waited at most ``h``; when the rest was
    longer it was deleted and the next task paid a creation ``C``). Summed over the gaps, the
    cost is continuous and concave between them, so its minimum over every ``h >= 0`` is at 0 or
    at a gap: checking those is exact, not a search. ``C`` multiplies a term that falls as ``h``
    grows, so a dearer creation never shortens the horizon. Ties go to the longer horizon: for the
    same node-time, a reused pool starts the next task a creation sooner. At a steady period ``g``
    this keeps pools iff ``g <= 2C``, since the rest of a gap is ``g/2`` on average.

    A zero gap (a batch arriving together) is left out: no release lands in it, and it would only
    count toward ``min_gaps``.

    A queue with fewer than ``min_gaps`` gaps of its own is kept for ``C`` at most, the ski-rental
    rule: whatever the next gap, an idle spell then costs at most twice what the best choice in
    hindsight would have. Less when the fleet says so: it is taken to be like the other queues,
    its horizon learnt from the gaps of every queue (``fleet_gaps``, once there are
    ``min_gaps``) and cut at ``C``, so that a fleet of busy queues never keeps a new, seldom
    used queue's spare longer than ski rental would.

    ``C`` is what replacing the pool costs beyond keeping it: a creation of its mode plus a
    deletion. A pool deleted now and its successor created later are two deletions where a pool
    kept and reused is one, and a deleting pool's nodes count until GKE is done with it (after
    GKE's wait to begin the deletion). Each part is the median of the newest ``max_creations``
    observed (creations of the mode) once ``min_creations`` were; until then a creation is
    ``prior_creation_seconds`` (the design reckons 5-10 minutes for a TPU slice) and a deletion
    is not priced.

    ``start_delay_weight`` prices what the node-time count leaves out: the next task waits for a
    new pool's creation too. At weight ``w`` a minute of a task's start delay is worth ``w``
    node-minutes per node of its pool, so a creation costs ``(1 + w)`` times its duration and
    ``C`` grows with it: pools are kept longer, tasks start sooner, for more node-time. At 0 (the
    default) only node-time counts, as issue 10's node-hour goals do.
    """

    prior_creation_seconds: float  # a creation's cost until enough creations of the mode were observed
    min_creations: int = 3
    max_creations: int = 16  # the newest ones: GKE's pace changes with the hour and the zone
    min_gaps: int = 5
    max_gaps: int = 64  # the newest ones: a queue's rhythm changes through the day
    takes_back: bool = True
    start_delay_weight: float = 0.0  # node-minutes a minute of start delay is worth, per node
    # Wait for a busy pool while the chance that one frees before a new pool would be ready is at
    # least this (any chance above 0 at 0); None: never (the default).
    busy_wait_chance: float | None = None
    min_runs: int = 3  # past Jobs longer than a busy pool's that say when it frees
    max_runs: int = 64

    def __post_init__(self) -> None:
        if not 0 < self.prior_creation_seconds <= LONGEST_SECONDS:
            raise ValueError(
                f"prior_creation_seconds: {self.prior_creation_seconds} is not within (0, a year]"
            )
        if not (1 <= self.min_creations <= self.max_creations and 1 <= self.min_gaps <= self.max_gaps):
            raise ValueError("need 1 <= min_creations <= max_creations and 1 <= min_gaps <= max_gaps")
        if not 1 <= self.min_runs <= self.max_runs:
            raise ValueError("need 1 <= min_runs <= max_runs")
        if self.busy_wait_chance is not None and not 0 <= self.busy_wait_chance <= 1:
            raise ValueError(f"busy_wait_chance: {self.busy_wait_chance} is not within [0, 1]")
        if not 0 <= self.start_delay_weight <= MAX_START_DELAY_WEIGHT:
            raise ValueError(
                f"start_delay_weight: {self.start_delay_weight} is not within [0, {MAX_START_DELAY_WEIGHT}]"
            )

    def horizon(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        replacement = self._replacement_ms(observed, mode)
        own = _milliseconds(observed.arrival_gaps)[-self.max_gaps :]
        if len(own) >= self.min_gaps:
            return _duration(_cheapest_horizon(own, replacement))
        fleet = _milliseconds(observed.fleet_gaps)[-self.max_gaps :]
        if len(fleet) >= self.min_gaps:
            return _duration(min(_cheapest_horizon(fleet, replacement), replacement))
        return _duration(replacement)

    def hold_for_waiters(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        """The bound counts a replacement's own duration, not the start delay's weight: it is about
        how long a waiter would have taken to get a pool of its own."""
        replacement = sum(self._creation_and_deletion_ms(observed, mode))
        longer = max(replacement, _milliseconds_of(self.horizon(observed, mode)))
        return _duration(IDLE_WITH_WAITERS_FACTOR * longer)

    def keep_at_release(self, waiting: int, idle: int, horizon: Callable[[], timedelta]) -> bool:
        """The floor, or one spare pool beyond the waiters for the horizon. A second spare would
        wait for the arrival after next, which the horizon does not price: where many tasks of a
        queue run at once, their releases pile up spares that cost more than the creations they
        save."""
        return keep_pool_after_task(waiting, idle) or (idle == waiting and horizon() > timedelta(0))

    @property
    def waits_for_busy_pools(self) -> bool:
        return self.busy_wait_chance is not None

    def wait_for_busy_pool(
        self, observed: QueueObservations, mode: ProvisioningMode, busy: BusyPools, waited: float
    ) -> bool:
        """Wait while the chance that a busy pool of the queue frees before a new one would be
        ready (a creation of the mode, as observed; the prior until then) is ``busy_wait_chance``
        at least, and above 0.

        Waiting costs no node-time, as the task holds no nodes yet, and a pool that frees in time
        is taken by hand-over: a creation and a deletion saved, and the task starts when it would
        have anyway, since without the wait it would have taken that pool by hand-over too, its
        own created for nothing (GKE cancels no pool's creation). When no pool frees in time, the
        task starts later, by the wait: so the wait lasts one creation at most. Node-hours and
        creations against start time: off by default. A pool whose Job has ended frees now (it is
        kept for the waiting task). When a busy pool's Job ends is read from how long the queue's
        newest ``max_runs`` Jobs ran (the fleet's while the queue has fewer than ``min_runs`` of
        its own): of those that ran longer than it has so far, the share that ended within a
        creation more. A Job with fewer than ``min_runs`` past runs longer than it is taken as
        one that does not end soon."""
        if self.busy_wait_chance is None:
            return False
        creation, _ = self._creation_and_deletion_ms(observed, mode)
        if waited * 1000 >= creation:
            return False
        if busy.ending:
            return True
        own = _milliseconds(busy.past_runs)[-self.max_runs :]
        runs = own if len(own) >= self.min_runs else _milliseconds(busy.fleet_runs)[-self.max_runs :]
        running = [round(s * 1000) for s in busy.running_for if 0 <= s <= LONGEST_SECONDS]
        chance = chance_one_frees_within(running, runs, creation, self.min_runs)
        return chance > 0 and chance >= self.busy_wait_chance

    def _replacement_ms(self, observed: QueueObservations, mode: ProvisioningMode) -> int:
        """``C``: a creation of the mode, weighted by the start delay it causes, plus a deletion."""
        creation, deletion = self._creation_and_deletion_ms(observed, mode)
        return round(creation * (1 + self.start_delay_weight)) + deletion

    def _creation_and_deletion_ms(
        self, observed: QueueObservations, mode: ProvisioningMode
    ) -> tuple[int, int]:
        """A creation of the mode and a deletion, each the median of the newest observed."""
        created = _milliseconds(observed.creation_seconds.get(mode, ()))[-self.max_creations :]
        deleted = _milliseconds(observed.deletion_seconds)[-self.max_creations :]
        prior = max(1, round(self.prior_creation_seconds * 1000))
        creation = median_low(created) if len(created) >= self.min_creations else prior
        deletion = median_low(deleted) if len(deleted) >= self.min_creations else 0
        return creation, deletion


@dataclass(frozen=True)
class DeleteEachPolicy:
    """Baseline: create and delete a pool per task; no pool is ever kept, not even for a waiter,
    nor taken back while its deletion waits for GKE."""

    takes_back: bool = False

    def horizon(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        return timedelta(0)

    def hold_for_waiters(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        return timedelta(0)

    def keep_at_release(self, waiting: int, idle: int, horizon: Callable[[], timedelta]) -> bool:
        return False

    @property
    def waits_for_busy_pools(self) -> bool:
        return False

    def wait_for_busy_pool(
        self, observed: QueueObservations, mode: ProvisioningMode, busy: BusyPools, waited: float
    ) -> bool:
        return False


@dataclass(frozen=True)
class KeepAllPolicy:
    """Baseline: keep every pool, forever (FOREVER: an idle pool it kept never expires)."""

    takes_back: bool = True  # it marks only broken pools, which are never taken back

    def horizon(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        return FOREVER

    def hold_for_waiters(self, observed: QueueObservations, mode: ProvisioningMode) -> timedelta:
        return FOREVER

    def keep_at_release(self, waiting: int, idle: int, horizon: Callable[[], timedelta]) -> bool:
        return True

    @property
    def waits_for_busy_pools(self) -> bool:
        return False  # a baseline of keeping, not of waiting: it creates as it always did

    def wait_for_busy_pool(
        self, observed: QueueObservations, mode: ProvisioningMode, busy: BusyPools, waited: float
    ) -> bool:
        return False


def fleet_arrival_gaps(arrivals: Iterable[tuple[QueueKey, datetime]]) -> tuple[float, ...]:
    """The seconds between consecutive arrivals of each queue, ordered by the later arrival; the
    arrivals are a span of time (every arrival of every queue within it), in any order."""
    last: dict[QueueKey, datetime] = {}
    gaps = []
    for queue, at in sorted(arrivals, key=lambda arrival: arrival[1]):
        if queue in last:
            gaps.append((at - last[queue]).total_seconds())
        last[queue] = at
    return tuple(gaps)


def chance_one_frees_within(
    running_ms: Iterable[int], runs_ms: Sequence[int], window_ms: int, min_runs: int
) -> float:
    """The chance that at least one of the Jobs that have run ``running_ms`` so far ends within
    ``window_ms`` more, each read from the past runs ``runs_ms`` longer than it (taken as
    independent): the share of those that ended within the window. A Job with fewer than
    ``min_runs`` such runs counts as one that does not end soon."""
    stays = 1.0
    for elapsed in running_ms:
        longer = [run for run in runs_ms if run > elapsed]
        if len(longer) >= min_runs:
            ends = sum(1 for run in longer if run <= elapsed + window_ms)
            stays *= 1 - ends / len(longer)
    return 1 - stays


def _cheapest_horizon(gaps_ms: Iterable[int], creation_ms: int) -> int:
    """The horizon (ms) of least expected idle-spell cost over ``gaps_ms`` (all positive), the
    longest of equals; 0 when there are no gaps. See CostPolicy for the cost; it is summed here
    times two, in whole milliseconds, so that every comparison is exact."""
    gaps = sorted(gaps_ms)
    rest = sum(gaps)  # of the gaps longer than the horizon
    best, best_cost, bridged = 0, 2 * creation_ms * rest, 0  # h = 0: every spell pays a creation
    for count, gap in enumerate(gaps, start=1):
        bridged, rest, longer = bridged + gap * gap, rest - gap, len(gaps) - count
        cost = bridged + 2 * gap * rest - longer * gap * gap + 2 * creation_ms * (rest - longer * gap)
        if cost <= best_cost:
            best, best_cost = gap, cost
    return best


def _milliseconds(seconds: Iterable[float]) -> list[int]:
    """Whole milliseconds of the durations that can be one: NaN, negative, zero and absurdly long
    values (a clock step, a row written twice, a unit mix-up) are dropped, not allowed to steer
    the policy."""
    kept = (round(s * 1000) for s in seconds if 0 < s <= LONGEST_SECONDS)
    return [ms for ms in kept if ms > 0]


def _milliseconds_of(duration: timedelta) -> int:
    return duration // timedelta(milliseconds=1)


def _duration(milliseconds: int) -> timedelta:
    return timedelta(milliseconds=milliseconds)
