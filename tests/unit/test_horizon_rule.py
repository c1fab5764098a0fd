"""Rules of Falcon's kind on a replay, in the optimum's model (benchmarks/horizon_rule.py): hand-computed
queues, and properties against the optimum on random ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from horizon_rule import candidate_horizons, create_and_delete, horizon_plan, most_avoided_within
from pool_optimum import Queue, QueuedTask, queue_optimum

CREATE = 2.0  # seconds a creation takes


def queue(*tasks: tuple[float, float], delete: float = 1.0, nodes: int = 1) -> Queue:
    return Queue(nodes, delete, [QueuedTask(arrival, run, CREATE) for arrival, run in tasks])


@pytest.mark.parametrize(("horizon", "reused"), [(2.9, False), (3.0, True), (10.0, True)])
def test_a_pool_is_reused_when_the_next_arrival_is_within_its_horizon(horizon: float, reused: bool) -> None:
    plan = horizon_plan(queue((0, 3), (8, 1)), horizon)  # the first ends at 0 + 2 + 3 = 5, a gap of 3
    assert plan.avoided == (1 if reused else 0)
    kept = 3 if reused else horizon  # the gap bridged, or the horizon waited in vain
    last = horizon  # the last pool freed is kept for its horizon too: no task comes
    assert plan.idle == pytest.approx(kept + last + (2 - plan.avoided) * 1)  # and one delete per pool
    assert plan.provisioning == CREATE * (2 - plan.avoided)


def test_a_pool_freed_while_another_is_idle_is_deleted_at_once() -> None:
    # two pools free at 5 and 6; the next task comes at 9 and takes the one freed first
    plan = horizon_plan(queue((0, 3), (1, 3), (9, 1)), horizon=10.0)
    assert plan.avoided == 1
    assert plan.idle == pytest.approx((9 - 5) + 10 + 2 * 1)  # the spare's wait, the last's, two deletes


def test_horizon_zero_is_create_and_delete() -> None:
    q = queue((0, 3), (8, 1), (9, 2), delete=1.0, nodes=2)
    plan = horizon_plan(q, 0.0)
    assert (plan.creations, plan.idle, plan.provisioning) == (3, 2 * 3 * 1.0, 2 * 3 * CREATE)
    assert create_and_delete([q, q]).total == 2 * plan.total


def test_the_candidates_are_zero_and_the_gaps_from_either_possible_end() -> None:
    assert candidate_horizons(queue((0, 3), (8, 1))) == [0.0, 3.0, 5.0]  # ends at 5 (created) or 3


def test_within_create_and_deletes_budget_only_a_bridge_that_pays_for_itself_is_bought() -> None:
    cheap = queue((0, 3), (6, 1))  # a gap of 1 against a creation and a delete of 3: worth it
    dear = queue((0, 3), (20, 1))  # a gap of 15: not
    budget = create_and_delete([cheap, dear]).total
    choice = most_avoided_within([cheap, dear], budget)
    assert choice is not None
    assert choice.plan.avoided == 1 and choice.horizons == (1.0, 0.0)
    more = most_avoided_within([cheap, dear], budget + 27)  # a bridge and a last spare of 15, less 3
    assert more is not None and more.plan.avoided == 2 and more.horizons == (1.0, 15.0)


def test_nothing_fits_a_budget_below_create_and_delete() -> None:
    q = queue((0, 3), (20, 1))
    assert most_avoided_within([q], create_and_delete([q]).total - 1) is None


queued_tasks = st.lists(
    st.tuples(st.integers(0, 20).map(float), st.integers(1, 8).map(float)), min_size=1, max_size=6
)


@settings(max_examples=80, deadline=None)
@given(tasks=queued_tasks, delete=st.sampled_from([0.0, 1.0, 2.0]), horizon=st.integers(0, 12).map(float))
def test_no_horizon_spends_less_than_the_optimum_nor_avoids_creations_for_free(
    tasks: list[tuple[float, float]], delete: float, horizon: float
) -> None:
    q = queue(*tasks, delete=delete)
    plan, best = horizon_plan(q, horizon), queue_optimum(q)
    assert plan.total >= best.total - 1e-9
    assert plan.tasks == len(tasks) and plan.busy == sum(run for _, run in tasks)


@settings(max_examples=60, deadline=None)
@given(tasks=queued_tasks, delete=st.sampled_from([0.0, 1.0, 2.0]))
def test_the_best_choice_within_create_and_delete_is_the_best_over_every_candidate(
    tasks: list[tuple[float, float]], delete: float
) -> None:
    q = queue(*tasks, delete=delete)
    budget = create_and_delete([q]).total
    choice = most_avoided_within([q], budget)
    assert choice is not None  # horizon 0 always fits
    plans = [horizon_plan(q, h) for h in candidate_horizons(q)]
    assert choice.plan.avoided == max(p.avoided for p in plans if p.total <= budget + 1e-9)
    # and no horizon between the candidates does better
    between = [horizon_plan(q, h + 0.5) for h in candidate_horizons(q)]
    assert all(p.avoided <= choice.plan.avoided or p.total > budget for p in between)
