"""What people see of Falcon in the Prefect UI: the queue labels on slots and run tags, and the
dispatcher's view (its table artifact).

We test: a queue's label names the cluster, topology, project and location, and a slot's key
maps to its label once the registry knows the cluster (and to itself otherwise, looked up again
only after a while); run tags carry what is known of the task; the view lists waiting tasks in
pick order beside the acquiring one, node pools by state and the reservation room; the
dispatcher publishes it at its first round and then every ``view_seconds``, and neither a
Compute failure nor a failing publisher stops a round; the reservations it read steer intake's
choice among equal queues.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.fakes import FakeReservations, cluster, events_of, idle_pool, make_services, queued, spec_for

from falcon.adapters.known_clusters import KnownClusters
from falcon.adapters.slots import SlotNames
from falcon.domain.dispatcher_view import DispatcherView, build_view
from falcon.domain.errors import TemporaryError
from falcon.domain.lifecycle import PoolState
from falcon.domain.model import QueueKey, queue_label, run_tags, slot_label
from falcon.domain.node_pools import ReservationRef
from falcon.domain.scheduling import ReservationCapacity, WaitingTask
from falcon.services.dispatching import Dispatcher

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
EDGE = cluster("c1", name="prod-a", reservation="res-a")
Q = QueueKey("c1", "2x4")


# -- labels and tags -----------------------------------------------------------------------------


def test_a_queue_label_names_cluster_topology_project_and_location() -> None:
    assert queue_label(EDGE, "2x4") == "prod-a:2x4@proj:us-east5-b"
    assert slot_label(EDGE, "2x4") == "falcon:prod-a:2x4@proj:us-east5-b"


def test_clusters_of_one_name_in_two_projects_get_two_labels() -> None:
    other = replace(EDGE, id="c2", project="other-proj")
    assert slot_label(EDGE, "2x4") != slot_label(other, "2x4")


@given(st.uuids().map(str), st.sampled_from(["2x2", "2x4", "4x4", "2x2x1", "4x4x4"]))
def test_a_slot_key_gives_back_its_queue(cluster_id: str, topology: str) -> None:
    queue = QueueKey(cluster_id, topology)
    assert QueueKey.from_slot_name(queue.slot_name) == queue


@pytest.mark.parametrize("name", ["other:c1:2x2", "falcon:", "falcon:c1", "falcon::2x2", "falcon:c1:"])
def test_a_name_that_is_no_slot_key_has_no_queue(name: str) -> None:
    assert QueueKey.from_slot_name(name) is None


def test_run_tags_carry_what_is_known_of_the_task() -> None:
    assert run_tags("t1", "alice", EDGE, "2x4") == [
        "falcon",
        "task:t1",
        "actor:alice",
        "cluster:prod-a",
        "queue:prod-a:2x4@proj:us-east5-b",
    ]
    assert run_tags("t1", None, None, None) == ["falcon", "task:t1"]  # a row never queued
    assert run_tags("t1", "a" * 500, EDGE, None)[2] == "actor:" + "a" * 100  # an upstream value, cut


class Registry:
    def __init__(self, *clusters: object) -> None:
        self.clusters = list(clusters)
        self.reads = 0

    def __call__(self) -> list[object]:
        self.reads += 1
        return self.clusters


def test_a_slot_key_is_named_by_the_registry_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Registry(EDGE)
    names = SlotNames(registry)  # type: ignore[arg-type]
    assert names(Q.slot_name) == "falcon:prod-a:2x4@proj:us-east5-b"
    assert names(QueueKey("c1", "2x2").slot_name) == "falcon:prod-a:2x2@proj:us-east5-b"
    assert registry.reads == 1
    assert names("falcon-something-else") == "falcon-something-else"  # no queue's: unchanged


def test_an_unknown_cluster_keeps_its_key_and_is_looked_for_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("falcon.adapters.known_clusters.time.monotonic", lambda: now[0])
    registry = Registry()
    names = SlotNames(registry)  # type: ignore[arg-type]
    assert names(Q.slot_name) == Q.slot_name
    assert names(Q.slot_name) == Q.slot_name
    assert registry.reads == 1  # not a registry read per slot call
    registry.clusters.append(EDGE)  # `falcon cluster add`
    now[0] += KnownClusters.RELOOK_SECONDS
    assert names(Q.slot_name) == slot_label(EDGE, "2x4")
    assert registry.reads == 2


# -- the view --------------------------------------------------------------------------------------


def waiting(task_id: str, actor: str, minutes: int) -> WaitingTask:
    return WaitingTask(task_id, actor, f"job-{task_id}", T0 + timedelta(minutes=minutes))


ROOM = ReservationCapacity("res-a", count=8, in_use=6, status="READY", machine_type="ct6e-standard-4t")


def test_the_view_shows_waiting_tasks_in_pick_order_beside_the_acquiring_one() -> None:
    tasks = [waiting("a2", "alice", 1), waiting("a3", "alice", 2), waiting("b1", "bob", 3)]
    pools = [
        replace(idle_pool("falcon-kept", "2x4"), state=PoolState.IN_USE),
        idle_pool("falcon-spare", "2x4"),
        idle_pool("falcon-small", "2x2"),
    ]
    view = build_view([EDGE], {Q: tasks}, {Q: "alice"}, {Q: "a1"}, {"c1": 3}, pools, {"c1": ROOM})
    (queue,) = [q for q in view.queues if q.queue == Q]
    assert [t.task_id for t in queue.waiting] == ["b1", "a2", "a3"]  # bob's turn after alice's pick
    assert view.table()[1] == {
        "queue": "prod-a:2x4@proj:us-east5-b",
        "acquiring": "a1",
        "waiting": "3",
        "next": "1. b1 (bob), 2. a2 (alice), 3. a3 (alice)",
        "node pools": "1 idle, 1 in_use",
        "running on cluster": "3",
        "reservation room": "res-a: 2 of 8 nodes free",
    }
    assert view.table()[0]["queue"] == "prod-a:2x2@proj:us-east5-b"  # it has a pool: shown


def test_a_long_queue_names_its_first_five_and_counts_the_rest() -> None:
    tasks = [waiting(f"t{n}", "alice", n) for n in range(8)]
    view = build_view([EDGE], {Q: tasks}, {}, {}, {}, [], {"c1": None})
    (row,) = view.table()
    assert row["next"].endswith("5. t4 (alice), +3 more")
    assert row["reservation room"] == "res-a: unknown"


def test_a_queue_with_nothing_in_it_is_left_out_and_a_flex_cluster_says_so() -> None:
    flex = replace(EDGE, default_reservation=None)
    view = build_view([flex], {Q: []}, {}, {QueueKey("c1", "4x4"): "x1"}, {}, [], {})
    assert [row["queue"] for row in view.table()] == ["prod-a:4x4@proj:us-east5-b"]
    assert view.table()[0]["reservation room"] == "no reservation (flex-start)"


def test_a_queue_of_a_cluster_no_longer_registered_is_left_out() -> None:
    view = build_view([EDGE], {QueueKey("gone", "2x2"): [waiting("t", "a", 0)]}, {}, {}, {}, [], {})
    assert view.table() == []


# -- the dispatcher publishes it -------------------------------------------------------------------


def edge_with_room(**settings: object) -> tuple[Dispatcher, list[DispatcherView]]:
    svc = make_services(**settings)
    svc.store.add_cluster(EDGE)  # type: ignore[attr-defined]
    reservations = svc.reservations
    assert isinstance(reservations, FakeReservations)
    reservations.set(ReservationRef.parse("res-a", "proj"), "us-east5-b", ROOM)
    views: list[DispatcherView] = []
    return Dispatcher(svc, publish=views.append), views


def test_the_first_round_publishes_the_view_and_the_next_after_view_seconds() -> None:
    dispatcher, views = edge_with_room(view_seconds=10.0)
    svc = dispatcher.services
    queued(svc, "t1", "2x4", actor="alice")
    queued(svc, "t2", "2x4", actor="bob")
    dispatcher.tick()
    assert len(views) == 1
    (row,) = views[0].table()
    assert (row["acquiring"], row["next"], row["reservation room"]) == (
        "t1",
        "1. t2 (bob)",
        "res-a: 2 of 8 nodes free",
    )
    svc.clock.advance(5)  # type: ignore[attr-defined]
    dispatcher.housekeep()
    assert len(views) == 1
    svc.clock.advance(5)  # type: ignore[attr-defined]
    dispatcher.housekeep()
    assert len(views) == 2


def test_no_view_is_built_when_view_seconds_is_zero() -> None:
    dispatcher, views = edge_with_room(view_seconds=0.0)
    dispatcher.tick()
    assert views == [] and events_of(dispatcher.services).views == []


def test_the_same_round_hands_the_state_gauges_their_view() -> None:
    dispatcher, _ = edge_with_room()
    svc = dispatcher.services
    svc.store.write_ahead_pool(idle_pool("falcon-warm", "2x2"), svc.clock.now(), warm_rule="mornings")
    svc.store.pool_ready("c1", "falcon-warm", svc.clock.now())
    queued(svc, "t1", "2x4", actor="alice")
    queued(svc, "t2", "2x4", actor="bob")
    dispatcher.tick()
    (seen,) = events_of(svc).views
    assert (dict(seen.waiting), set(seen.acquiring)) == ({Q: 1}, {Q})
    assert seen.reservations == {"c1": ROOM}
    assert set(seen.warm_pools) == {("c1", "falcon-warm")}


def test_a_reservation_compute_cannot_read_shows_as_unknown() -> None:
    dispatcher, views = edge_with_room()
    reservations = dispatcher.services.reservations
    assert isinstance(reservations, FakeReservations)
    reservations.set(ReservationRef.parse("res-a", "proj"), "us-east5-b", TemporaryError("503"))
    queued(dispatcher.services, "t1", "2x4")
    dispatcher.tick()
    assert views[0].table()[0]["reservation room"] == "res-a: unknown"


def test_a_publisher_that_fails_is_logged_and_the_round_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    svc = make_services()
    svc.store.add_cluster(EDGE)  # type: ignore[attr-defined]

    def broken(_view: DispatcherView) -> None:
        raise RuntimeError("Prefect API away")

    dispatcher = Dispatcher(svc, publish=broken)
    queued(svc, "t1", "2x4")
    with caplog.at_level(logging.WARNING):
        report = dispatcher.tick()
    assert report.picked == ["t1"]
    assert "event=view_failed" in caplog.text


def two_edges(res_a: ReservationCapacity | Exception, b_in_use: int = 0) -> Dispatcher:
    svc = make_services()
    svc.store.add_cluster(EDGE)  # type: ignore[attr-defined]
    svc.store.add_cluster(cluster("c2", name="prod-b", reservation="res-b"))  # type: ignore[attr-defined]
    reservations = svc.reservations
    assert isinstance(reservations, FakeReservations)
    reservations.set(ReservationRef.parse("res-a", "proj"), "us-east5-b", res_a)
    res_b = replace(ROOM, name="res-b", in_use=b_in_use)
    reservations.set(ReservationRef.parse("res-b", "proj"), "us-east5-b", res_b)
    return Dispatcher(svc)


def test_a_new_row_goes_where_the_reservation_read_by_the_view_has_room() -> None:
    dispatcher = two_edges(replace(ROOM, in_use=8))  # prod-a's reservation is full
    dispatcher.tick()  # the first round reads the reservations
    dispatcher.services.store.insert_task("t1", spec=spec_for("4x4"))  # type: ignore[attr-defined]
    dispatcher.tick()
    assert dispatcher.services.store.task("t1").cluster_id == "c2"


def test_a_reservation_compute_cannot_read_counts_as_no_room_not_as_unusable() -> None:
    dispatcher = two_edges(TemporaryError("503"), b_in_use=8)  # prod-b's is full
    dispatcher.tick()
    dispatcher.services.store.insert_task("t1", spec=spec_for("4x4"))  # type: ignore[attr-defined]
    dispatcher.tick()
    assert dispatcher.services.store.task("t1").cluster_id == "c1"  # alike: the name decides
