"""The offline optimum of keep-or-delete: the fewest node-seconds any policy could spend on a replay.

The model, per queue (cluster, topology), knowing every arrival in advance:

* a task arrives at ``arrival`` and its containers run for ``run`` seconds;
* it either reuses a pool of its queue that became free at or before its arrival (it starts at its
  arrival; the pool was idle from the end of its previous task until then), or gets a new pool: the
  creation starts at its arrival, lasts ``create`` seconds (its mode's: a flex-start pool also waits
  for its scale-up) and the task starts when it ends;
* every pool is deleted once, right after its last task; the delete lasts ``delete`` seconds during
  which the nodes still count (the benchmark counts them as idle, as it does the arms' deletes).

A pool's node-seconds are nodes x (its creation + its tasks' runs + the gaps it bridged + its delete).
The optimum is the minimum of their sum over all ways of assigning tasks to pools; ties are broken
towards fewer creations, so "creations avoided" is the most any minimum-cost plan avoids.

What the model ignores, on purpose, because no keep-or-delete policy controls it:

* queue slots and GKE's limits on node-pool operations at once (a creation never waits);
* a task waiting for a busy pool to free up (a task starts at its arrival or after its own creation);
* creating pools ahead of arrivals (that is warming, not keep-or-delete);
* reservation room: each task's creation time is given (the benchmark takes the mode its pool had in
  the replay), so the optimum does not re-derive which creations the reservation could have taken;
* Falcon's own steps: a pick, a Job's submission, the release of a pool after its Job ended.

Why "bridge iff the gap is shorter than a creation" is not enough here: a reused task starts at its
arrival, a created one ``create`` later, so a reuse also frees its pool sooner, which can let the next
task reuse it too; bridging a gap longer than a creation can then be cheaper, and which task's pool
another takes over becomes a choice across the whole queue (tests/unit/test_pool_optimum.py has a
case). The optimum is therefore computed exactly, as a small integer program per queue solved by
HiGHS (a queue of tens of tasks takes milliseconds, of a hundred some seconds). Tasks sorted by
arrival, i < j:

* ``new[j]`` = 1 iff task j gets a new pool; ``next[i, j]`` = 1 iff j runs on the pool i ran on, right
  after i (only where a_i + r_i <= a_j, i.e. i's end, were it reused, is not after j's arrival);
* every task gets exactly one pool: new[j] + sum_i next[i, j] = 1; a pool goes on to at most one next
  task: sum_j next[i, j] <= 1;
* a created task ends ``create`` later, so where a_i + c_i + r_i > a_j the link needs i reused:
  next[i, j] + new[i] <= 1;
* cost (per node) = sum_j new[j] (c_j + d) + sum next[i, j] (a_j - e_i), the gap bridged, where
  e_i = a_i + r_i + c_i new[i]; the product next[i, j] new[i] is ``both[i, j]`` in [0, 1] with
  both <= next and both <= new, which the minimisation drives to the product.

Every plan of the model is a solution (chains of next[] are its pools) and every solution is a plan,
so the program's minimum is the model's. A second solve, with the cost held at that minimum, finds
the fewest creations among the plans that reach it.

A plan's *wait* is what its tasks wait for new pools, sum_j c_j new[j] (a reused task waits for
nothing in the model). ``least_wait`` is the least any plan waits, and ``optimum(queues, max_wait)``
the fewest node-seconds among the plans that wait at most ``max_wait`` all together: the trade
between the two goals of start time and node-hours, as the model sees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import highspy


@dataclass(frozen=True)
class QueuedTask:
    """One task of a queue, in seconds: when it arrives, how long it runs, how long its pool's creation
    would take in the mode it would get."""

    arrival: float
    run: float
    create: float


@dataclass(frozen=True)
class Queue:
    nodes: int  # nodes of the queue's slice: every pool of the queue has that many
    delete: float  # seconds a pool's delete lasts
    tasks: Sequence[QueuedTask]


@dataclass(frozen=True)
class Plan:
    """The optimum's node-seconds by what the nodes do, and its creations."""

    busy: float = 0.0
    idle: float = 0.0  # bridged gaps and deletes
    provisioning: float = 0.0
    tasks: int = 0
    creations: int = 0
    wait: float = 0.0  # seconds the tasks waited for their new pools, all together (not node-weighted)

    @property
    def total(self) -> float:
        return self.busy + self.idle + self.provisioning

    @property
    def avoided(self) -> int:
        """Creations avoided: tasks that ran on a pool another task had."""
        return self.tasks - self.creations

    def __add__(self, other: Plan) -> Plan:
        return Plan(
            self.busy + other.busy,
            self.idle + other.idle,
            self.provisioning + other.provisioning,
            self.tasks + other.tasks,
            self.creations + other.creations,
            self.wait + other.wait,
        )


def optimum(queues: Iterable[Queue], max_wait: float | None = None) -> Plan:
    """The minimum node-seconds over every queue (queues share no pools, so their minima add up).

    With ``max_wait``, the minimum among the plans whose tasks wait for new pools at most that many
    seconds all together: the queues then share one budget and are solved as one program."""
    if max_wait is None:
        return sum((queue_optimum(queue) for queue in queues), Plan())
    h = _highs()
    return _solve(h, [_program(h, queue) for queue in queues if queue.tasks], max_wait)


def queue_optimum(queue: Queue) -> Plan:
    if not queue.tasks:
        return Plan()
    h = _highs()
    return _solve(h, [_program(h, queue)])


def _solve(h: highspy.Highs, programs: list[_Program], max_wait: float | None = None) -> Plan:
    """The fewest node-seconds of ``programs`` together (within ``max_wait``), then the fewest
    creations at that cost."""
    if not programs:
        return Plan()
    cost, wait = highspy.highs_linear_expression(), highspy.highs_linear_expression()
    for program in programs:
        cost += program.queue.nodes * program.cost
        wait += program.wait
    if max_wait is not None:
        h.addConstr(wait <= max_wait)
    _hold_minimum(h, cost)
    _minimise(h, _total(v for program in programs for v in program.new))
    return sum((program.plan(h) for program in programs), Plan())


def least_wait(queues: Iterable[Queue]) -> float:
    """The fewest seconds any plan of the model makes its tasks wait for new pools, all together:
    each task reuses whenever a pool of its queue can be free by its arrival (keep every pool)."""
    total = 0.0
    for queue in queues:
        if queue.tasks:
            h = _highs()
            total += _minimise(h, _program(h, queue).wait)
    return total


_SLACK = 1e-9  # relative: the second solve holds the cost at the first's minimum, up to rounding

Link = tuple[int, int, highspy.highs_var]  # i, j, next[i, j]


@dataclass(frozen=True)
class _Program:
    """One queue's variables in a program: new[], next[] (``links``), its cost per node and its wait."""

    queue: Queue
    tasks: list[QueuedTask]  # by arrival
    new: list[highspy.highs_var]
    links: list[Link]
    cost: highspy.highs_linear_expression
    wait: highspy.highs_linear_expression

    def plan(self, h: highspy.Highs) -> Plan:
        """The solved plan's node-seconds, creations and wait."""
        tasks = self.tasks
        created = {j for j, v in enumerate(self.new) if round(h.val(v))}
        chosen = [(i, j) for i, j, v in self.links if round(h.val(v))]
        gaps = sum(tasks[j].arrival - _end(tasks[i], i in created) for i, j in chosen)
        n, wait = self.queue.nodes, sum(tasks[j].create for j in created)
        return Plan(
            busy=n * sum(t.run for t in tasks),
            idle=n * (gaps + self.queue.delete * len(created)),
            provisioning=n * wait,
            tasks=len(tasks),
            creations=len(created),
            wait=wait,
        )


def _highs() -> highspy.Highs:
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)  # HiGHS stops within 0.01 % by default: the optimum, not near it
    return h


def _program(h: highspy.Highs, queue: Queue) -> _Program:
    """The integer program of the module's docstring for one queue, added to ``h``."""
    tasks = sorted(queue.tasks, key=lambda t: t.arrival)
    new = [h.addBinary() for _ in tasks]
    cost, wait = highspy.highs_linear_expression(), highspy.highs_linear_expression()
    links: list[Link] = []
    into: list[list[highspy.highs_var]] = [[] for _ in tasks]
    out: list[list[highspy.highs_var]] = [[] for _ in tasks]
    for j, tj in enumerate(tasks):
        cost += (tj.create + queue.delete) * new[j]
        wait += tj.create * new[j]
        for i, ti in enumerate(tasks[:j]):
            if _end(ti, created=False) > tj.arrival:
                continue
            link = h.addBinary()
            links.append((i, j, link))
            into[j].append(link)
            out[i].append(link)
            cost += (tj.arrival - _end(ti, created=False)) * link
            if _end(ti, created=True) > tj.arrival:
                h.addConstr(link + new[i] <= 1)
            else:
                both = h.addVariable(lb=0.0, ub=1.0)
                h.addConstr(both <= link)
                h.addConstr(both <= new[i])
                cost += -ti.create * both
    for j in range(len(tasks)):
        h.addConstr(new[j] + _total(into[j]) == 1)
        if out[j]:
            h.addConstr(_total(out[j]) <= 1)
    return _Program(queue, tasks, new, links, cost, wait)


def _end(task: QueuedTask, created: bool) -> float:
    """When a task's pool is free again: a created pool starts the task a creation later."""
    return task.arrival + task.run + (task.create if created else 0.0)


def _total(variables: Iterable[highspy.highs_var]) -> highspy.highs_linear_expression:
    expression = highspy.highs_linear_expression()
    for v in variables:
        expression += v
    return expression


def _hold_minimum(h: highspy.Highs, cost: highspy.highs_linear_expression) -> None:
    """Minimise ``cost`` and keep it there, so that a second objective breaks the ties only."""
    least = _minimise(h, cost)
    h.addConstr(cost <= least + _SLACK * max(1.0, least))


def _minimise(h: highspy.Highs, objective: highspy.highs_linear_expression) -> float:
    h.minimize(objective)
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS did not find the optimum: {h.modelStatusToString(status)}")
    return _value(h, objective)


def _value(h: highspy.Highs, expression: highspy.highs_linear_expression) -> float:
    return float(h.val(expression))
