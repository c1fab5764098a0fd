"""Take-back (issue 10): a pool marked for deletion waits for the cluster's one GKE operation,
paid for meanwhile; a task of its queue that needs a pool takes it back instead of waiting for
that deletion and a creation of its own. Never a pool GKE is deleting already (the task would
fail on it), never another queue's, and once taken back it is never asked to be deleted."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
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

from falcon.domain.errors import BusyError, FalconError, PermanentError, TemporaryError
from falcon.domain.lifecycle import DeleteAsk, NodePool, Outcome, Phase, PoolState
from falcon.domain.messages import MessageKey
from falcon.domain.model import ProvisioningMode, QueueKey, node_pool_name_for
from falcon.domain.pool_economics import DeleteEachPolicy
from falcon.domain.status import Status
from falcon.services import reconcile
from falcon.services.acquisition import provision, wait_pool_ready
from falcon.services.context import Services
from falcon.services.pool_deletion import LATE_REQUEST_SECONDS, ask_delete, take_back
from falcon.services.release import record_outcome, release

QUEUE = QueueKey("c1", "2x2")
MARKED = "falcon-2x2-marked"
OWN = node_pool_name_for("t1", "2x2")
GKE_BUSY = BusyError("cluster is running another operation")
TIMED_OUT = TemporaryError("delete node pool: read timed out")


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


def _ask_unanswered(svc: Services) -> None:
    """Ask GKE to delete the marked pool and get no answer: the request may still reach GKE."""
    svc.node_pools.fail_delete(TIMED_OUT)  # type: ignore[attr-defined]
    with pytest.raises(TemporaryError):
        ask_delete(svc, svc.store.clusters()[0], MARKED)


def test_a_deletion_gke_did_not_answer_keeps_the_pool_from_being_taken_back() -> None:
    """The chaos run: the client gave up on the delete, the task took the pool back, and GKE then
    carried the delete out under the task. GKE still says RUNNING, and yet the task creates its own."""
    svc, _ = _services()
    _marked(svc)
    _ask_unanswered(svc)
    choice = provision(svc, acquiring(svc, "t1"))
    assert choice.plan is not None and choice.name == OWN
    assert svc.store.pool("c1", MARKED).state is PoolState.DELETING


def test_a_pool_whose_unanswered_deletion_never_arrived_is_taken_back_once_it_no_longer_can() -> None:
    svc, clock = _services()
    _marked(svc)
    _ask_unanswered(svc)
    window = svc.settings.api_timeout_seconds + LATE_REQUEST_SECONDS
    clock.advance(window - 1)
    assert not take_back(svc, svc.store.clusters()[0], [MARKED])
    clock.advance(1)
    assert take_back(svc, svc.store.clusters()[0], [MARKED])
    assert svc.store.pool("c1", MARKED).state is PoolState.IDLE


def test_an_ask_cut_off_by_a_kill_before_its_answer_keeps_the_pool_too() -> None:
    """Recorded in its own commit before GKE is asked: a process killed during the call leaves it."""
    svc, _ = _services()
    _marked(svc)
    now = svc.clock.now()
    assert svc.store.delete_asked("c1", MARKED, now) == DeleteAsk(now, None)
    assert not take_back(svc, svc.store.clusters()[0], [MARKED])


def test_gke_refusing_a_second_ask_leaves_the_first_unanswered_one_keeping_the_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first ask timed out on its way and GKE carries it out later; a second ask, made before
    it arrives, is refused (GKE busy with another operation). Were the pool taken back after that
    refusal, it would go with its new task's pods when the first ask arrived."""
    svc, clock = _services()
    _marked(svc)
    caplog.set_level(logging.INFO, logger="falcon.services.pool_deletion")
    _ask_unanswered(svc)
    clock.advance(1)
    svc.node_pools.fail_delete(GKE_BUSY)  # type: ignore[attr-defined]
    with pytest.raises(BusyError):
        ask_delete(svc, svc.store.clusters()[0], MARKED)
    assert not take_back(svc, svc.store.clusters()[0], [MARKED])
    assert [r.getMessage().split()[0] for r in caplog.records] == [
        "event=pool_delete_unanswered",
        "event=pool_delete_refused",
    ], "the run's log shows why the pool is not taken back"
    assert "earlier_unanswered=True" in caplog.records[1].getMessage()
    clock.advance(svc.settings.api_timeout_seconds + LATE_REQUEST_SECONDS)
    assert take_back(svc, svc.store.clusters()[0], [MARKED]), "neither ask can arrive any more"


def test_the_first_unanswered_ask_alone_keeps_the_pool_while_gke_refuses_the_asks_after_it() -> None:
    """A release asking at each poll while GKE is busy refuses keeps no pool from its queue longer
    than the first ask, unanswered, could still arrive."""
    svc, clock = _services()
    _marked(svc)
    _ask_unanswered(svc)
    window = svc.settings.api_timeout_seconds + LATE_REQUEST_SECONDS
    svc.node_pools.fail_delete(GKE_BUSY, times=100)  # type: ignore[attr-defined]
    for _ in range(int(window)):
        clock.advance(1)
        with pytest.raises(BusyError):
            ask_delete(svc, svc.store.clusters()[0], MARKED)
    assert take_back(svc, svc.store.clusters()[0], [MARKED])


@pytest.mark.parametrize(
    "answer", [GKE_BUSY, PermanentError("403 permission denied")], ids=["busy", "refused"]
)
def test_a_deletion_gke_refused_leaves_the_pool_to_take_back_at_once(answer: FalconError) -> None:
    svc, _ = _services()
    _marked(svc)
    svc.node_pools.fail_delete(answer)  # type: ignore[attr-defined]
    with pytest.raises(type(answer)):
        ask_delete(svc, svc.store.clusters()[0], MARKED)
    assert take_back(svc, svc.store.clusters()[0], [MARKED])


def test_a_pool_taken_back_forgets_its_asks_when_marked_again() -> None:
    svc, clock = _services()
    _marked(svc)
    _ask_unanswered(svc)
    clock.advance(svc.settings.api_timeout_seconds + LATE_REQUEST_SECONDS)
    assert take_back(svc, svc.store.clusters()[0], [MARKED])
    assert svc.store.start_deleting_pool("c1", MARKED, None, clock.now())
    assert take_back(svc, svc.store.clusters()[0], [MARKED]), "the old ask went with the take-back"
