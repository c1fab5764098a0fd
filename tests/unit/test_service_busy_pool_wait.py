"""Waiting for a busy pool, through the services (issue 10): with ``FALCON_POOL_BUSY_WAIT_CHANCE``
set (here 1/2), a task about to ask GKE for its own pool waits while a busy pool of its queue is
likely to free first, takes that pool by hand-over
when its Job ends, and never asks GKE for its own; it asks once the busy Job has run longer than
the past runs say, or once it has waited a creation's time. Past runs are read from tasks that
ran to the end (here the fleet's: another queue's). Unset, the task asks at once."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.unit.fakes import HookedClock, acquiring, cluster, clusters_of, k8s_of, make_services, running

from falcon.domain.lifecycle import Phase, PoolState, succeeded
from falcon.domain.model import k8s_job_name_for, node_pool_name_for
from falcon.domain.pool_economics import CostPolicy
from falcon.services import reconcile
from falcon.services.acquisition import provision, wait_pool_ready
from falcon.services.context import Services
from falcon.services.release import record_outcome, release

OWN = node_pool_name_for("t1", "2x2")
BUSY = node_pool_name_for("b", "2x2")
PAST_RUN = 130.0  # seconds each past Job ran; a creation is the prior, 120 s


def _services(chance: float | None = 0.5) -> tuple[Services, HookedClock]:
    clock = HookedClock()
    svc = make_services(clock)
    policy = CostPolicy(svc.settings.pool_creation_prior_seconds, busy_wait_chance=chance)
    svc = replace(svc, keep_policy=policy)
    svc.store.add_cluster(cluster("c1"))  # type: ignore[attr-defined]
    return svc, clock


def job_ends(svc: Services, task_id: str) -> None:
    """The Job completes and the reconcile round sees it (the pool is settled there and then)."""
    k8s_of(svc).job(k8s_job_name_for(task_id)).script.complete = True
    assert task_id in reconcile.follow_running(svc, clusters_of(svc)).ended


def past_runs(svc: Services, count: int = 5) -> None:
    """Tasks of another queue that ran PAST_RUN seconds each, to the end: the fleet's runs."""
    for i in range(count):
        running(svc, f"h{i}", "2x4")
        svc.clock.advance(PAST_RUN)
        job_ends(svc, f"h{i}")
        release(svc, f"h{i}")


def busy_for(svc: Services, seconds: float) -> None:
    """The queue's one pool busy with task ``b``'s Job, which has run ``seconds``."""
    running(svc, "b")
    svc.clock.advance(seconds)


def first_create_after(svc: Services, clock: HookedClock) -> float:
    """Runs the task's wait for its pool; the seconds it waited before asking GKE for its own."""
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    started, asked = clock.now(), []
    create = svc.node_pools.create

    def recording(cluster, plan):  # type: ignore[no-untyped-def]
        asked.append((clock.now() - started).total_seconds())
        return create(cluster, plan)

    svc.node_pools.create = recording  # type: ignore[method-assign]
    assert wait_pool_ready(svc, view, choice, started) == OWN
    assert len(asked) == 1
    return asked[0]


def test_a_task_waits_for_a_busy_pool_likely_to_free_first_and_takes_it_without_a_creation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc, clock = _services()
    past_runs(svc)
    busy_for(svc, 100.0)  # every past run ended within 30 s more: well within a creation
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    clock.at, clock.hook = 20, lambda: job_ends(svc, "b")
    caplog.set_level("INFO", logger="falcon")
    assert wait_pool_ready(svc, view, choice, clock.now()) == BUSY
    assert svc.node_pools.count("create", OWN) == 0  # type: ignore[attr-defined]
    assert svc.store.pool("c1", OWN).state is PoolState.DELETED, "never asked for: the record is closed"
    taken = svc.store.pool("c1", BUSY)
    assert (taken.state, taken.holder_task_id) == (PoolState.IN_USE, "t1")
    assert len(clock.sleeps) == 20, "taken at the poll after the Job ended"
    logged = [r.getMessage() for r in caplog.records if "create_waits_for_busy_pool" in r.getMessage()]
    assert logged == ["event=create_waits_for_busy_pool task_id=t1 running=1 ending=0"]


def test_a_busy_pool_is_waited_for_only_until_its_job_has_run_longer_than_the_past_runs() -> None:
    svc, clock = _services()
    past_runs(svc)
    busy_for(svc, 100.0)  # never ends here
    assert first_create_after(svc, clock) == PAST_RUN - 100.0
    assert svc.store.pool("c1", BUSY).holder_task_id == "b"


def test_a_job_already_longer_than_the_past_runs_is_not_waited_for() -> None:
    svc, clock = _services()
    past_runs(svc)
    busy_for(svc, PAST_RUN)
    assert first_create_after(svc, clock) == 0.0


def test_without_past_runs_the_task_asks_at_once() -> None:
    svc, clock = _services()
    past_runs(svc, count=2)  # fewer than the three the policy reads a chance from
    busy_for(svc, 100.0)
    assert first_create_after(svc, clock) == 0.0


def test_a_pool_whose_job_ended_is_waited_for_one_creation_at_most() -> None:
    svc, clock = _services()
    busy_for(svc, 10.0)
    # Its outcome is recorded, its pool not settled yet (a release that does not come).
    assert record_outcome(svc, "b", succeeded(svc.say), [Phase.RUNNING])
    assert first_create_after(svc, clock) == svc.settings.pool_creation_prior_seconds


def test_unset_the_task_asks_at_once() -> None:
    svc, clock = _services(chance=None)
    past_runs(svc)
    busy_for(svc, 100.0)
    assert first_create_after(svc, clock) == 0.0
