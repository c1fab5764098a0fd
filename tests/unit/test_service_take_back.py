"""Take-back (issue 10): a pool marked for deletion waits for the cluster's one GKE operation,
paid for meanwhile; a task of its queue that needs a pool takes it back instead of waiting for
that deletion and a creation of its own. Never a pool GKE is deleting already (the task would
fail on it), never another queue's, and once taken back it is never asked to be deleted."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.fakes import (
    SELDOM,
    HookedClock,
    acquiring,
    arrivals,
    cluster,
    clusters_of,
    events_of,
    make_services,
    running,
)

from falcon.domain.errors import BusyError, TemporaryError
from falcon.domain.lifecycle import NodePool, Outcome, Phase, PoolState
from falcon.domain.messages import MessageKey
from falcon.domain.model import ProvisioningMode, QueueKey, node_pool_name_for
from falcon.domain.pool_economics import DeleteEachPolicy
from falcon.domain.status import Status
from falcon.services import reconcile
from falcon.services.acquisition import provision, wait_pool_ready
from falcon.services.context import Services
from falcon.services.release import record_outcome, release

QUEUE = QueueKey("c1", "2x2")
MARKED = "falcon-2x2-marked"
OWN = node_pool_name_for("t1", "2x2")
GKE_BUSY = BusyError("cluster is running another operation")


def _services() -> tuple[Services, HookedClock]:
    clock = HookedClock()
    svc = make_services(clock)
    svc.store.add_cluster(cluster("c1"))  # type: ignore[attr-defined]
    return svc, clock


def _marked(svc: Services, name: str = MARKED, topology: str = "2x2", gke_status: str = "RUNNING") -> None:
    """A ready pool of the queue marked for deletion, whose deletion GKE has not begun
    (``gke_status`` STOPPING: it has)."""
    record = NodePool(
        "c1", name, topology, "ct6e-standard-4t", ProvisioningMode.FLEX_START, None, PoolState.DELETING, None
    )
    svc.store.add_pool(record)  # type: ignore[attr-defined]
    gke = svc.node_pools
    gke.add_existing(svc.store.clusters()[0], name, polls_to_delete=5)  # type: ignore[attr-defined]
    if gke_status == "STOPPING":
        gke.delete(svc.store.clusters()[0], name)


def test_an_acquiring_task_takes_back_its_queues_marked_pool_instead_of_creating_one() -> None:
    svc, _ = _services()
    _marked(svc)
    choice = provision(svc, acquiring(svc, "t1"))
    assert (choice.name, choice.plan) == (MARKED, None)
    taken = svc.store.pool("c1", MARKED)
    assert (taken.state, taken.holder_task_id) == (PoolState.IN_USE, "t1")
    assert svc.node_pools.count("create") == 0  # type: ignore[attr-defined]
    assert events_of(svc).reused == [(QUEUE, "taken_back")]
    assert svc.store.task("t1").message == svc.say(MessageKey.PROVISIONING_REUSE, pool=MARKED)


def test_a_pool_gke_is_deleting_already_is_not_taken_back() -> None:
    svc, _ = _services()
    _marked(svc, gke_status="STOPPING")
    choice = provision(svc, acquiring(svc, "t1"))
    assert choice.plan is not None and choice.name == OWN
    assert svc.store.pool("c1", MARKED).state is PoolState.DELETING
    assert events_of(svc).reused == []


def test_another_queues_marked_pool_is_not_taken_back() -> None:
    svc, _ = _services()
    _marked(svc, topology="2x4")
    choice = provision(svc, acquiring(svc, "t1"))
    assert choice.plan is not None
    assert svc.store.pool("c1", MARKED).state is PoolState.DELETING


def test_a_marked_pool_gke_does_not_answer_for_is_left_marked() -> None:
    svc, _ = _services()
    _marked(svc)
    gke = svc.node_pools
    answer = gke.get

    def unavailable(c: object, name: str) -> object:
        if name == MARKED:
            raise TemporaryError("GKE: 503")
        return answer(c, name)  # type: ignore[arg-type]

    gke.get = unavailable  # type: ignore[method-assign,assignment]
    assert provision(svc, acquiring(svc, "t1")).plan is not None
    assert svc.store.pool("c1", MARKED).state is PoolState.DELETING


def test_a_task_waiting_to_create_takes_back_a_pool_marked_meanwhile_and_closes_its_own() -> None:
    svc, clock = _services()
    view = acquiring(svc, "t1")
    choice = provision(svc, view)
    svc.node_pools.refuse_create(50)  # type: ignore[attr-defined]  # the cluster's one operation is busy
    clock.at, clock.hook = 2, lambda: _marked(svc)
    assert wait_pool_ready(svc, view, choice, clock.now()) == MARKED
    assert svc.store.pool("c1", OWN).state is PoolState.DELETED, "GKE never got it: the record is closed"
    assert svc.store.held_pool("c1", "t1").name == MARKED
    assert events_of(svc).reused == [(QUEUE, "taken_back")]
    assert len(clock.sleeps) == 2, "taken at the first poll after it was marked"


def test_a_release_whose_pool_is_taken_back_while_gke_is_busy_stops_asking_and_ends_the_task() -> None:
    """The release run asks GKE again at each poll while the cluster is busy; the queue's next
    task takes the pool back in between: the run asks no more and writes the terminal status."""
    svc, clock = _services()
    arrivals(svc, QUEUE, SELDOM)  # a seldom used queue: nobody waits, the pool is deleted
    running(svc, "t0")
    pool = svc.store.held_pool("c1", "t0").name
    assert record_outcome(svc, "t0", Outcome(Status.SUCCEEDED), [Phase.RUNNING])
    svc.node_pools.fail_delete(GKE_BUSY, times=50)  # type: ignore[attr-defined]
    taker: list[str] = []
    clock.at, clock.hook = 3, lambda: taker.append(provision(svc, acquiring(svc, "t1")).name)
    asked_before = svc.node_pools.count("delete", pool)  # type: ignore[attr-defined]
    assert release(svc, "t0").status is Status.SUCCEEDED
    assert taker == [pool]
    assert svc.node_pools.count("delete", pool) - asked_before == 3, "asked at each poll until taken back"  # type: ignore[attr-defined]
    assert svc.store.task("t0").message == svc.say(MessageKey.SUCCEEDED), "no deletion error"
    held = svc.store.pool("c1", pool)
    assert (held.state, held.holder_task_id) == (PoolState.IN_USE, "t1")
    assert ("c1", pool) in svc.node_pools.pools  # type: ignore[attr-defined]


def test_a_round_that_read_the_pool_marked_does_not_delete_it_once_taken_back() -> None:
    svc, _ = _services()
    _marked(svc)
    stale = svc.store.pools_in([PoolState.DELETING])
    provision(svc, acquiring(svc, "t1"))
    reconcile.reap_idle_pools(svc, clusters_of(svc), {}, pools=stale)
    assert svc.node_pools.count("delete", MARKED) == 0  # type: ignore[attr-defined]
    assert svc.store.pool("c1", MARKED).state is PoolState.IN_USE


def test_a_pool_whose_deletion_gke_accepted_first_cannot_be_taken_back() -> None:
    """The other order: the round asks GKE to delete, then the task looks: GKE says STOPPING."""
    svc, _ = _services()
    _marked(svc)
    reconcile.reap_idle_pools(svc, clusters_of(svc), {})
    assert svc.node_pools.count("delete", MARKED) == 1  # type: ignore[attr-defined]
    choice = provision(svc, acquiring(svc, "t1"))
    assert choice.plan is not None
    assert svc.store.pool("c1", MARKED).state is PoolState.DELETING


def test_the_create_and_delete_baseline_takes_nothing_back() -> None:
    """Benchmarks compare with plain create-and-delete: a pool per task, marked ones left to go."""
    svc, _ = _services()
    svc = replace(svc, keep_policy=DeleteEachPolicy())
    _marked(svc)
    assert provision(svc, acquiring(svc, "t1")).plan is not None
    assert svc.store.pool("c1", MARKED).state is PoolState.DELETING
