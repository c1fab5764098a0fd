"""The offline optimum of keep-or-delete (benchmarks/pool_optimum.py), on hand-computed queues and
against an exhaustive search on tiny ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from pool_optimum import Plan, Queue, QueuedTask, least_wait, optimum, queue_optimum

RESERVATION, FLEX = 2.0, 4.0  # seconds a creation takes in each mode


def one_queue(*tasks: tuple[float, float, float], delete: float = 0.0, nodes: int = 1) -> Plan:
    return queue_optimum(Queue(nodes, delete, [QueuedTask(*t) for t in tasks]))


def test_no_gap_the_next_task_takes_the_pool_as_its_task_ends() -> None:
    plan = one_queue((0, 3, RESERVATION), (5, 1, RESERVATION))  # first ends at 0 + 2 + 3 = 5
    assert (plan.busy, plan.idle, plan.provisioning) == (4, 0, 2)
    assert (plan.creations, plan.avoided) == (1, 1)


def test_a_gap_shorter_than_a_creation_is_bridged() -> None:
    plan = one_queue((0, 3, RESERVATION), (6, 1, RESERVATION))
    assert (plan.idle, plan.provisioning, plan.creations) == (1, 2, 1)


def test_a_gap_longer_than_a_creation_is_not_bridged() -> None:
    plan = one_queue((0, 3, RESERVATION), (10, 1, RESERVATION))
    assert (plan.idle, plan.provisioning, plan.creations) == (0, 4, 2)
    assert plan.total == 4 + 4


def test_overlapping_tasks_need_two_pools_and_the_last_freed_is_reused() -> None:
    # Pools free at 7 and 8; the third task arriving at 8 takes the one freed at 8 (no idle time).
    plan = one_queue((0, 5, RESERVATION), (1, 5, RESERVATION), (8, 1, RESERVATION))
    assert (plan.creations, plan.avoided) == (2, 1)
    assert (plan.idle, plan.provisioning) == (0, 4)


@pytest.mark.parametrize(("create", "bridged"), [(RESERVATION, False), (FLEX, True)])
def test_the_same_gap_is_bridged_for_a_flex_start_creation_only(create: float, bridged: bool) -> None:
    # The first pool is free at 0 + create + 1; the next task comes 3 s later.
    plan = one_queue((0, 1, create), (create + 1 + 3, 1, create))
    assert plan.creations == (1 if bridged else 2)
    assert plan.idle == (3 if bridged else 0)


def test_a_pools_delete_counts_once_and_makes_a_longer_gap_worth_bridging() -> None:
    plan = one_queue((0, 3, RESERVATION), (8, 1, RESERVATION), delete=2)  # gap 3 < 2 + 2
    assert (plan.creations, plan.idle, plan.provisioning) == (1, 3 + 2, 2)


def test_a_gap_longer_than_a_creation_is_bridged_when_the_reuse_lets_the_next_task_reuse_too() -> None:
    # Bridging 6 s (creation 4 s) lets the second task end at 14, so the third reuses at 15: 4 + 6 + 1.
    # Creating for the second ends it at 18, after the third arrives: 4 + 4 + 4 without any bridge.
    plan = one_queue((0, 2, FLEX), (12, 2, FLEX), (15, 2, FLEX))
    assert (plan.creations, plan.idle, plan.provisioning) == (1, 7, 4)


def test_node_seconds_scale_with_the_slice_and_queues_add_up() -> None:
    a = Queue(4, 0.0, [QueuedTask(0, 3, RESERVATION), QueuedTask(6, 1, RESERVATION)])
    b = Queue(1, 0.0, [QueuedTask(0, 1, FLEX)])
    both = optimum([a, b])
    assert (both.busy, both.idle, both.provisioning) == (4 * 4 + 1, 4 * 1, 4 * 2 + 4)
    assert (both.tasks, both.creations) == (3, 2)


def test_an_empty_queue_costs_nothing() -> None:
    assert optimum([Queue(2, 1.0, [])]) == Plan()


def every_plan(tasks: list[QueuedTask], delete: float) -> list[tuple[float, int, float]]:
    """(pool-seconds wasted, creations, wait) of every assignment of tasks to pools."""
    ordered = sorted(tasks, key=lambda t: t.arrival)

    def search(i: int, free: tuple[float, ...]) -> list[tuple[float, int, float]]:
        if i == len(ordered):
            return [(0.0, 0, 0.0)]
        t = ordered[i]
        plans = [
            (waste + t.create + delete, creations + 1, wait + t.create)
            for waste, creations, wait in search(i + 1, (*free, t.arrival + t.create + t.run))
        ]
        for k, f in enumerate(free):
            if f <= t.arrival:
                rest = free[:k] + free[k + 1 :] + (t.arrival + t.run,)
                plans += [
                    (waste + t.arrival - f, creations, wait) for waste, creations, wait in search(i + 1, rest)
                ]
        return plans

    return search(0, ())


def exhaustive(tasks: list[QueuedTask], delete: float) -> tuple[float, int]:
    """(least pool-seconds wasted, fewest creations at that cost) over every assignment of tasks to pools."""
    waste, creations, _ = min(every_plan(tasks, delete))
    return waste, creations


queued_tasks = st.lists(
    st.builds(
        QueuedTask,
        arrival=st.integers(0, 20).map(float),
        run=st.integers(1, 8).map(float),
        create=st.sampled_from([RESERVATION, FLEX]),
    ),
    max_size=6,
)


@settings(max_examples=100, deadline=None)
@given(tasks=queued_tasks, delete=st.sampled_from([0.0, 1.0, 2.0]))
def test_the_optimum_matches_an_exhaustive_search(tasks: list[QueuedTask], delete: float) -> None:
    plan = one_queue(*((t.arrival, t.run, t.create) for t in tasks), delete=delete)
    waste, creations = exhaustive(tasks, delete)
    assert plan.idle + plan.provisioning == pytest.approx(waste)
    assert plan.creations == creations
    assert plan.busy == sum(t.run for t in tasks)


# -- the trade with the wait for new pools ---------------------------------------------------------


def test_a_wait_budget_bridges_a_gap_the_optimum_would_not() -> None:
    queue = Queue(2, 0.0, [QueuedTask(0, 3, RESERVATION), QueuedTask(10, 1, RESERVATION)])
    assert least_wait([queue]) == RESERVATION  # the second task could reuse: the first is done at 5
    free = optimum([queue])
    assert (free.creations, free.wait) == (2, 2 * RESERVATION)
    held = optimum([queue], max_wait=RESERVATION)
    assert (held.creations, held.wait) == (1, RESERVATION)
    assert (held.idle, held.provisioning) == (2 * 5, 2 * RESERVATION)  # the 5 s gap bridged
    assert held.total > free.total


def test_queues_share_one_wait_budget_and_the_cheaper_bridge_is_bought() -> None:
    # Either queue can bridge a gap to save its second creation's wait: 1 node x 5 s, or 4 x 3 s.
    one = Queue(1, 0.0, [QueuedTask(0, 3, RESERVATION), QueuedTask(10, 1, RESERVATION)])
    four = Queue(4, 0.0, [QueuedTask(0, 3, RESERVATION), QueuedTask(8, 1, RESERVATION)])
    held = optimum([one, four], max_wait=3 * RESERVATION)
    assert (held.creations, held.wait) == (3, 3 * RESERVATION)
    assert held.idle == 1 * 5  # the small queue's gap: 5 node-s, not 12
    assert optimum([one, four], max_wait=1e9) == optimum([one, four])


@settings(max_examples=60, deadline=None)
@given(tasks=queued_tasks, delete=st.sampled_from([0.0, 1.0]), slack=st.sampled_from([0.0, 2.0, 4.0]))
def test_the_optimum_within_a_wait_budget_matches_an_exhaustive_search(
    tasks: list[QueuedTask], delete: float, slack: float
) -> None:
    queue = Queue(1, delete, tasks)
    plans = every_plan(tasks, delete)
    assert least_wait([queue]) == pytest.approx(min(wait for _, _, wait in plans))
    budget = least_wait([queue]) + slack
    held = optimum([queue], max_wait=budget)
    waste, creations = min((w, c) for w, c, wait in plans if wait <= budget + 1e-9)
    assert held.idle + held.provisioning == pytest.approx(waste)
    assert held.creations == creations and held.wait <= budget + 1e-9
