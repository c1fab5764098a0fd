"""What rules of Falcon's kind could do on a replay, in the offline optimum's model (pool_optimum.py).

Falcon keeps at most one spare pool per queue, for a horizon, while nobody waits; the optimum knows
every arrival in advance and keeps exactly the pools that will be reused. Between the two lies what
a horizon rule could reach if it picked each queue's horizon knowing the whole replay: the bound
on what learning a horizon better can buy. This module computes, in the optimum's model (a task
reuses a pool idle at its arrival or waits for a creation of its own; pools of a queue have one
node count; a pool's delete counts once):

* ``horizon_plan(queue, h)``: the rule with horizon ``h``. A pool freed when another pool of the
  queue is idle already is deleted at once (one spare); else it is kept until a task takes it or
  ``h`` has passed, then deleted; the last pool freed too, as no task comes. A task takes the idle
  pool (there is at most one).
* ``most_avoided_within(queues, budget)``: the most creations any choice of one horizon per queue
  avoids while spending at most ``budget`` node-seconds, and that choice's plan. With the budget of
  every horizon at 0 (create-and-delete in the model), it says whether a rule of Falcon's kind
  could avoid the creations issue 10 asks without spending more than create-and-delete: where it
  cannot, the two goals pull against each other for any such rule, however well it learns.

Every horizon plan is a plan of the model that may also keep pools for nothing, so it never costs
less than the optimum (tests/unit/test_horizon_rule.py checks that on random queues).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from pool_optimum import Plan, Queue


@dataclass(frozen=True)
class Choice:
    """One horizon per queue, and the plan it makes."""

    horizons: tuple[float, ...]
    plan: Plan


def horizon_plan(queue: Queue, horizon: float) -> Plan:
    """The plan of the one-spare rule with ``horizon`` seconds on ``queue``."""
    busy = idle = provisioning = wait = 0.0
    creations = 0
    running: list[float] = []  # the ends of the tasks running, a heap
    spare: float | None = None  # when the idle pool, if any, was freed

    def expire(now: float) -> None:
        """Deletes the spare once its horizon has passed by ``now``."""
        nonlocal idle, spare
        if spare is not None and now - spare > horizon:
            idle, spare = idle + horizon, None

    def advance(now: float) -> None:
        """Frees the pools whose tasks end by ``now`` (at ``now`` included), in time order."""
        nonlocal spare
        while running and running[0] <= now:
            end = heapq.heappop(running)
            expire(end)
            if spare is None:
                spare = end  # else another pool is idle already: this one is deleted at once
        expire(now)

    for task in sorted(queue.tasks, key=lambda t: t.arrival):
        advance(task.arrival)
        busy += task.run
        if spare is not None:
            idle, spare = idle + task.arrival - spare, None
            heapq.heappush(running, task.arrival + task.run)
        else:
            creations += 1
            provisioning += task.create
            idle += queue.delete
            wait += task.create
            heapq.heappush(running, task.arrival + task.create + task.run)
    advance(float("inf"))
    nodes = queue.nodes
    return Plan(nodes * busy, nodes * idle, nodes * provisioning, len(queue.tasks), creations, wait)


def candidate_horizons(queue: Queue) -> list[float]:
    """0, and every gap between a task's possible end and a later arrival: a horizon's plan changes
    only where it crosses one of these, and between two it costs more the longer it is."""
    tasks = sorted(queue.tasks, key=lambda t: t.arrival)
    gaps = {0.0}
    for i, earlier in enumerate(tasks):
        for end in (earlier.arrival + earlier.run, earlier.arrival + earlier.create + earlier.run):
            gaps.update(later.arrival - end for later in tasks[i + 1 :] if later.arrival > end)
    return sorted(gaps)


def most_avoided_within(queues: Sequence[Queue], budget: float) -> Choice | None:
    """The choice of one horizon per queue that avoids the most creations within ``budget``
    node-seconds (the cheapest such), or None when no choice fits (the budget is below every
    horizon at 0). Per queue only the cheapest horizon for each number of creations matters, so
    the queues are combined by creations avoided, keeping the cheapest way to each count."""
    best: dict[int, tuple[Plan, tuple[float, ...]]] = {0: (Plan(), ())}
    for queue in queues:
        options: dict[int, tuple[Plan, float]] = {}
        for h in candidate_horizons(queue):
            plan = horizon_plan(queue, h)
            if plan.avoided not in options or plan.total < options[plan.avoided][0].total:
                options[plan.avoided] = (plan, h)
        combined: dict[int, tuple[Plan, tuple[float, ...]]] = {}
        for avoided, (plan, horizons) in best.items():
            for more, (option, h) in options.items():
                total, key = plan + option, avoided + more
                if key not in combined or total.total < combined[key][0].total:
                    combined[key] = (total, (*horizons, h))
        best = combined
    fitting = [
        (avoided, plan, horizons) for avoided, (plan, horizons) in best.items() if plan.total <= budget
    ]
    if not fitting:
        return None
    _, plan, horizons = max(fitting, key=lambda f: (f[0], -f[1].total))
    return Choice(horizons, plan)


def create_and_delete(queues: Sequence[Queue]) -> Plan:
    """Every horizon at 0: each pool deleted as its task ends, unless a task arrives that instant."""
    return sum((horizon_plan(queue, 0.0) for queue in queues), Plan())
