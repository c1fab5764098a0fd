"""Properties of the §4 pick rule, exactly as the design states it.

We check: (1) FIFO within an actor along pick_order; (2) no actor gets two picks in a row while
another actor waits; (3) a waiting task is passed by a later task of another actor only right
after its own actor's pick; (4) pick_order agrees with repeated pick_next, so the positions shown
are the real pick order; (5) positions are a permutation of 1..n; (6) with random arrivals,
aborts and slots freeing, every pick still obeys (1)-(3) and no queue has two tasks acquiring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st

from falcon.domain.scheduling import WaitingTask, pick_next, pick_order, queue_positions

T0 = datetime(2026, 5, 1, tzinfo=UTC)
ACTORS = ["alice", "bob", "carol", "dave"]
QUEUES = ["q1", "q2"]

# Enough to find rotation bugs; the whole module stays within a few seconds.
PROPERTY = settings(max_examples=200, deadline=None)


def _key(task: WaitingTask) -> tuple[datetime, str]:
    return (task.submitted_at, task.task_id)


@st.composite
def waiting_lists(draw: st.DrawFn, max_size: int = 30) -> list[WaitingTask]:
    """Unique ids, few actors and coarse times so that ties and long runs are common."""
    specs = draw(st.lists(st.tuples(st.sampled_from(ACTORS), st.integers(0, 8)), max_size=max_size))
    ids = draw(st.permutations(range(len(specs))))  # ids uncorrelated with times
    tasks = [
        WaitingTask(f"t{i:03d}", actor, f"job{i}", T0 + timedelta(minutes=minute))
        for i, (actor, minute) in zip(ids, specs, strict=True)
    ]
    return draw(st.permutations(tasks))


last_actors = st.one_of(st.none(), st.sampled_from([*ACTORS, "ghost"]))


# --- The three rule properties, as checks on one pick ------------------------------------------


def check_pick(waiting: Sequence[WaitingTask], last_actor: str | None, picked: WaitingTask) -> None:
    """Assert that picking ``picked`` from ``waiting`` after ``last_actor`` obeys (1)-(3)."""
    assert picked in waiting
    same_actor = [t for t in waiting if t.actor == picked.actor]
    assert _key(picked) == min(map(_key, same_actor)), "(1) FIFO within an actor"
    if picked.actor == last_actor:
        assert all(t.actor == last_actor for t in waiting), "(2) consecutive picks while others wait"
    passed = [t for t in waiting if t.actor != picked.actor and _key(t) < _key(picked)]
    assert all(t.actor == last_actor for t in passed), "(3) passed without its actor just picked"


def check_order(waiting: Sequence[WaitingTask], last_actor: str | None, order: list[WaitingTask]) -> None:
    remaining = list(waiting)
    for picked in order:
        check_pick(remaining, last_actor, picked)
        remaining.remove(picked)
        last_actor = picked.actor
    assert not remaining


@PROPERTY
@given(waiting_lists(), last_actors)
def test_pick_order_obeys_fifo_round_robin_and_passing(
    waiting: list[WaitingTask], last_actor: str | None
) -> None:
    """(1), (2) and (3) along the whole of pick_order."""
    check_order(waiting, last_actor, pick_order(waiting, last_actor))


@PROPERTY
@given(waiting_lists(), last_actors)
def test_pick_order_is_repeated_pick_next(waiting: list[WaitingTask], last_actor: str | None) -> None:
    """(4) the heap-based order equals the design's rule applied once per free slot."""
    order = pick_order(waiting, last_actor)
    assert (order[0] if order else None) == pick_next(waiting, last_actor)
    remaining, last, replayed = list(waiting), last_actor, []
    while (picked := pick_next(remaining, last)) is not None:
        replayed.append(picked)
        remaining.remove(picked)
        last = picked.actor
    assert replayed == order


@PROPERTY
@given(waiting_lists(), last_actors)
def test_positions_are_a_permutation_matching_pick_order(
    waiting: list[WaitingTask], last_actor: str | None
) -> None:
    """(5) positions 1..n, each task's position is its index in pick_order, previews are its prefix."""
    positions = queue_positions(waiting, last_actor)
    order = pick_order(waiting, last_actor)
    assert sorted(p.position for p in positions.values()) == list(range(1, len(waiting) + 1))
    for i, t in enumerate(order):
        pos = positions[t.task_id]
        assert (pos.position, pos.ahead_count) == (i + 1, i)
        assert pos.ahead_preview == tuple(order[: min(i, 3)])


@PROPERTY
@given(waiting_lists(), last_actors)
def test_pick_order_is_independent_of_input_order(waiting: list[WaitingTask], last_actor: str | None) -> None:
    assert pick_order(waiting, last_actor) == pick_order(waiting[::-1], last_actor)


# --- (6) Interleaved simulation -----------------------------------------------------------------


@dataclass
class Queue:
    """One (cluster, topology) queue as the flows keep it: waiting tasks, a slot, the last actor."""

    waiting: list[WaitingTask] = field(default_factory=list)
    acquiring: list[WaitingTask] = field(default_factory=list)
    last_actor: str | None = None


@dataclass
class Simulation:
    queues: dict[str, Queue] = field(default_factory=lambda: {q: Queue() for q in QUEUES})
    clock: int = 0
    next_id: int = 0
    picks: int = 0

    def arrive(self, queue: str, actor: str, advance: int) -> None:
        self.clock += advance  # created_at never goes back; advance 0 gives ties
        self.next_id += 1
        when = T0 + timedelta(seconds=self.clock)
        self.queues[queue].waiting.append(WaitingTask(f"t{self.next_id:04d}", actor, "job", when))

    def abort(self, queue: str, index: int) -> None:
        """Abort a waiting or an acquiring task; aborting the acquiring one frees the slot."""
        q = self.queues[queue]
        pool = q.waiting + q.acquiring
        if pool:
            victim = pool[index % len(pool)]
            (q.waiting if victim in q.waiting else q.acquiring).remove(victim)

    def release(self, queue: str) -> None:
        """The acquiring task's pods are Running (or it failed): its slot frees."""
        self.queues[queue].acquiring.clear()

    def dispatch(self) -> None:
        """The scheduler loop: every queue with a free slot picks once."""
        for q in self.queues.values():
            if q.acquiring:
                continue
            expected_first = pick_order(q.waiting, q.last_actor)[:1]
            picked = pick_next(q.waiting, q.last_actor)
            if picked is None:
                continue
            assert [picked] == expected_first, "position #1 shown is the task actually picked"
            check_pick(q.waiting, q.last_actor, picked)
            q.waiting.remove(picked)
            q.acquiring.append(picked)
            q.last_actor = picked.actor
            self.picks += 1
        assert all(len(q.acquiring) <= 1 for q in self.queues.values()), "two tasks acquiring in a queue"


queue_names = st.sampled_from(QUEUES)
arrive = st.tuples(st.just("arrive"), queue_names, st.sampled_from(ACTORS), st.integers(0, 3))
abort = st.tuples(st.just("abort"), queue_names, st.integers(0, 50))
release = st.tuples(st.just("release"), queue_names)
dispatch = st.tuples(st.just("dispatch"))
# one_of picks a branch uniformly, so repeating a branch weights it: mostly arrivals and releases.
events = st.one_of(arrive, arrive, arrive, release, release, abort, dispatch)


@PROPERTY
@given(st.lists(events, min_size=20, max_size=120))
def test_interleaved_arrivals_aborts_and_releases(script: list[tuple[object, ...]]) -> None:
    """(6) the rule holds at every pick of a live queue, and each queue has one slot."""
    sim = Simulation()
    for name, *args in script:
        getattr(sim, str(name))(*args)
        if name == "release":
            sim.dispatch()
    sim.dispatch()
    event(f"picks: {min(sim.picks, 10)}{'+' if sim.picks >= 10 else ''}")
