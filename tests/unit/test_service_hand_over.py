"""Hand-over (issue 10): an idle pool goes to the queue's acquiring task whose own pool is not
ready yet, at once, without passing over anyone rule 3 would pick first; the task's own pool is
let go in the same write, so no pool is ever given to two tasks and no task is left without one."""

from __future__ import annotations

from tests.unit.fakes import (
    HookedClock,
    acquiring,
    cluster,
    idle_pool,
    k8s_of,
    make_services,
    queued,
)

from falcon.domain.errors import TemporaryError
from falcon.domain.lifecycle import Phase, PoolState, TaskEnded, aborted
from falcon.domain.messages import MessageKey
from falcon.domain.model import QueueKey, k8s_job_name_for, node_pool_name_for
from falcon.domain.status import Reason, Status
from falcon.services import warming
from falcon.services.acquisition import dispatch, provision, wait_pool_ready
from falcon.services.context import Services
from falcon.services.release import record_outcome, release

QUEUE = QueueKey("c1", "2x2")
OWN = node_pool_name_for("t1", "2x2")
KEPT = "falcon-2x2-kept"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"


def _services() -> tuple[Services, HookedClock]:
    clock = HookedClock()
    svc = make_services(clock)
    svc.store.add_cluster(cluster("c1"))  # type: ignore[attr-defined]
    return svc, clock


def _goes_idle_at_wait(svc: Services, clock: HookedClock, wait: int) -> None:
    clock.at, clock.hook = wait, lambda: svc.store.add_pool(idle_pool(KEPT, since=clock.now()))  # type: ignore[attr-defined]


def test_a_task_waiting_for_gkes_lock_takes_a_pool_that_goes_idle_and_closes_its_own() -> None:
    svc, clock = _services()
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.node_pools.refuse_create(50)  # type: ignore[attr-defined]  # another pool's operation holds the cluster
    _goes_idle_at_wait(svc, clock, 3)
    assert wait_pool_ready(svc, view, choice, clock.now()) == KEPT
    taken, own = svc.store.pool("c1", KEPT), svc.store.pool("c1", OWN)
    assert (taken.state, taken.holder_task_id) == (PoolState.IN_USE, "t1")
    assert own.state is PoolState.DELETED, "GKE never got it: the record is closed"
    assert ("c1", OWN) not in svc.node_pools.pools  # type: ignore[attr-defined]
    assert svc.store.held_pool("c1", "t1").name == KEPT
    row = svc.store.task("t1")
    assert (row.node_pool_name, row.reason) == (KEPT, Reason.PROVISIONING)
    assert row.message == svc.say(MessageKey.PROVISIONING_REUSE, pool=KEPT)
    assert len(clock.sleeps) == 3, "taken at the first poll after it went idle"


def test_a_pool_that_goes_idle_is_taken_at_the_next_poll_while_gkes_refusal_is_waited_out() -> None:
    svc, clock = _services()
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.node_pools.refuse_create(50)  # type: ignore[attr-defined]  # busy: asked again in 5 s
    _goes_idle_at_wait(svc, clock, 2)
    assert wait_pool_ready(svc, view, choice, clock.now()) == KEPT
    assert len(clock.sleeps) == 2, "taken at the poll after it went idle, not after GKE's 5 s"
    assert svc.node_pools.count("create") == 1  # type: ignore[attr-defined]  # not asked again before the 5 s
    assert svc.store.pool("c1", OWN).state is PoolState.DELETED


def test_a_task_whose_pool_gke_is_creating_lets_it_go_to_be_idle_for_the_queue() -> None:
    svc, clock = _services()
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.node_pools.script(OWN, polls_to_ready=30)  # type: ignore[attr-defined]
    _goes_idle_at_wait(svc, clock, 2)
    assert wait_pool_ready(svc, view, choice, clock.now()) == KEPT
    own = svc.store.pool("c1", OWN)
    assert (own.state, own.holder_task_id) == (PoolState.CREATING, None)
    # Unheld and being created, it is followed like a warm pool: a run waits for it, then it is idle.
    assert reconcile_starts_a_warm_run(svc)
    names = warming.plan_warm_pools(svc, QUEUE)
    assert names == [OWN]
    assert warming.create_warm_pools(svc, QUEUE, names) == [OWN]
    assert svc.store.pool("c1", OWN).state is PoolState.IDLE
    assert svc.node_pools.count("create", OWN) == 2  # type: ignore[attr-defined]  # the second answered 409


def reconcile_starts_a_warm_run(svc: Services) -> bool:
    from falcon.services.dispatching import Dispatcher

    return QUEUE.slot_name in Dispatcher(svc).tick().warming


def test_a_task_whose_own_pool_is_ready_keeps_it_and_leaves_the_idle_one() -> None:
    svc, clock = _services()
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.store.add_pool(idle_pool(KEPT, since=clock.now()))  # type: ignore[attr-defined]
    svc.node_pools.create(view.cluster, choice.plan)  # type: ignore[arg-type]  # GKE has it, ready
    assert wait_pool_ready(svc, view, choice, clock.now()) == OWN
    assert svc.store.pool("c1", KEPT).state is PoolState.IDLE
    assert svc.store.pool("c1", OWN).state is PoolState.IN_USE


def test_no_hand_over_while_gke_cannot_say_whether_it_has_the_tasks_pool() -> None:
    svc, clock = _services()
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.store.add_pool(idle_pool(KEPT, since=clock.now()))  # type: ignore[attr-defined]
    real_get = svc.node_pools.get
    answers = iter([TemporaryError("503")])

    def flaky_get(c, name):  # type: ignore[no-untyped-def]
        error = next(answers, None)
        if error is not None:
            raise error
        return real_get(c, name)

    svc.node_pools.get = flaky_get  # type: ignore[method-assign]
    svc.node_pools.refuse_create(5)  # type: ignore[attr-defined]
    assert wait_pool_ready(svc, view, choice, clock.now()) == KEPT
    assert len(clock.sleeps) == 1, "the round GKE did not answer, the task waited instead"


def test_an_idle_pool_is_never_given_to_two_tasks() -> None:
    svc, clock = _services()
    provision(svc, acquiring(svc, "t1"))
    provision(svc, acquiring(svc, "t2"))  # as if two acquired at once: each holds its own pool
    svc.store.add_pool(idle_pool(KEPT, since=clock.now()))  # type: ignore[attr-defined]
    first = svc.store.hand_over(QUEUE, "t1", OWN, False, clock.now())
    second = svc.store.hand_over(QUEUE, "t2", node_pool_name_for("t2", "2x2"), False, clock.now())
    assert first is not None and first.name == KEPT and second is None
    assert svc.store.pool("c1", node_pool_name_for("t2", "2x2")).holder_task_id == "t2", "t2 keeps its own"
    assert [p.name for p in svc.store.pools_in([PoolState.IN_USE])] == [KEPT]


def test_a_hand_over_needs_a_pool_of_the_same_queue() -> None:
    svc, clock = _services()
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.store.add_pool(idle_pool("falcon-2x4-kept", topology="2x4", since=clock.now()))  # type: ignore[attr-defined]
    assert wait_pool_ready(svc, view, choice, clock.now()) == OWN


def test_the_waiting_task_behind_the_acquiring_one_gets_the_pool_only_at_its_pick() -> None:
    """Rule 3: the queue's slot holder is the task picked first; the one waiting behind it does
    not get the idle pool ahead of it (it is not acquiring), and takes it at its own pick."""
    svc, clock = _services()
    view = acquiring(svc, "t1")
    queued(svc, "t2")
    choice = provision(svc, view)
    svc.node_pools.refuse_create(50)  # type: ignore[attr-defined]
    _goes_idle_at_wait(svc, clock, 1)
    assert wait_pool_ready(svc, view, choice, clock.now()) == KEPT
    assert svc.store.held_pool("c1", "t2") is None
    assert svc.store.progress_in([Phase.WAITING])[0].task_id == "t2"


def test_release_frees_the_handed_over_pool_even_if_the_row_still_names_the_old_one() -> None:
    """A crash between the hand-over's write and the row's: the pool the task holds is released."""
    svc, clock = _services()
    view = acquiring(svc, "t1")
    provision(svc, view)
    svc.store.add_pool(idle_pool(KEPT, since=clock.now()))  # type: ignore[attr-defined]
    assert svc.store.hand_over(QUEUE, "t1", OWN, False, clock.now()) is not None
    assert svc.store.task("t1").node_pool_name == OWN
    queued(svc, "t2")  # someone waits: the pool is kept for them
    outcome = aborted(svc.say)
    svc.store.request_abort("t1")  # type: ignore[attr-defined]
    assert record_outcome(svc, "t1", outcome, [Phase.ACQUIRING])
    assert release(svc, "t1").status is Status.ABORTED
    assert svc.store.pool("c1", KEPT).state is PoolState.IDLE
    assert svc.store.pools_in([PoolState.IN_USE, PoolState.CREATING]) == []


def test_an_abort_after_the_hand_over_releases_the_taken_pool() -> None:
    svc, clock = _services()
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.node_pools.refuse_create(50)  # type: ignore[attr-defined]
    _goes_idle_at_wait(svc, clock, 1)
    pool = wait_pool_ready(svc, view, choice, clock.now())
    k8s_of(svc).script(k8s_job_name_for("t1"), never_running=True)
    dispatch(svc, view, pool)
    selector = k8s_of(svc).job(k8s_job_name_for("t1")).manifest["spec"]["template"]["spec"]["nodeSelector"]
    assert selector[NODE_POOL_LABEL] == KEPT
    svc.store.request_abort("t1")  # type: ignore[attr-defined]
    try:
        svc.ensure_active("t1")
    except TaskEnded as ended:
        record_outcome(svc, "t1", ended.outcome, [Phase.ACQUIRING])
    clock.advance(1)
    release(svc, "t1")
    assert svc.store.task("t1").status is Status.ABORTED
    assert svc.store.pool("c1", KEPT).state is PoolState.IDLE, "kept: nothing is known of the queue yet"
    assert svc.store.held_pool("c1", "t1") is None
