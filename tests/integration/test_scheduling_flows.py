"""The scheduling rules (design §3-§5) observed through real flow runs against the emulator:
round robin across actors in one queue, topologies in parallel, reservation then flex-start,
delayed deletion with its grace, and repair of a leaked queue slot."""

from __future__ import annotations

import threading
from dataclasses import replace

import httpx
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import container_v1
from prefect.exceptions import ObjectNotFound

from falcon.adapters import slots
from falcon.adapters.credentials import gke_client
from falcon.adapters.db import repository as repo
from falcon.adapters.gke import cluster_path
from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.messages import Locale
from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask, pick_order, waiting_messages
from falcon.domain.status import ACQUIRING_REASONS, Reason, Status
from falcon.services.context import Services
from falcon.settings import get_settings
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, Driver, db, emulator_counters, request_abort, submit


def reservation_in_use(emulator: EmulatorServer) -> int:
    state = httpx.get(f"{emulator.url}/emulator/state").json()
    (found,) = [r for r in state["reservations"] if r["name"] == "res-a"]
    return int(found["inUseCount"])


def gke_pool(services: Services, task_id: str) -> container_v1.NodePool:
    """The task's pool as GKE (the emulator) stores it, read with the official client."""
    with db(services) as s:
        pool = repo.get_task(s, task_id).node_pool_name  # type: ignore[union-attr]
    client = gke_client(services.settings, AnonymousCredentials())  # type: ignore[no-untyped-call]
    return client.get_node_pool(name=f"{cluster_path(CLUSTER)}/nodePools/{pool}")


def test_three_actors_share_a_queue_round_robin_and_see_their_positions(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "hold", "zed", "2x2", image="trainer:missing", timeout=3)
    driver.run_until(lambda t: t["hold"].reason is Reason.DISPATCHING)
    arrivals = [
        ("a1", "alice"),
        ("a2", "alice"),
        ("a3", "alice"),
        ("b1", "bob"),
        ("b2", "bob"),
        ("c1", "carol"),
    ]
    for task_id, actor in arrivals:
        submit(db_url, task_id, actor, "2x2")
    ids = [i for i, _ in arrivals]
    driver.run_until(lambda t: all(t[i].reason is Reason.WAITING for i in ids))
    driver.observe()

    with db(services) as s:
        rows = {i: repo.get_task(s, i) for i in ids}
    waiting = [WaitingTask(i, rows[i].actor, rows[i].name, rows[i].created_at) for i in ids]  # type: ignore[union-attr]
    expected_messages = waiting_messages(waiting, "zed", Locale.EN)
    assert {i: rows[i].message for i in ids} == expected_messages  # type: ignore[union-attr]
    # Rule 3 as designed: alice and bob alternate; carol's only task came last, so it waits for
    # every earlier task of the others (the rule excludes only the actor picked last).
    assert expected_messages["c1"] == (
        "Queue position #6, 5 task(s) ahead (alice: job-a1, bob: job-b1, alice: job-a2, …+2)"
    )

    driver.run_until_done(["hold", *ids])
    with db(services) as s:
        dispatched = sorted(ids, key=lambda i: repo.get_task(s, i).dispatched_at)  # type: ignore[union-attr]
    assert dispatched == [w.task_id for w in pick_order(waiting, "zed")]
    assert dispatched == ["a1", "b1", "a2", "b2", "a3", "c1"]


def test_two_topologies_of_one_cluster_acquire_at_the_same_time(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    submit(db_url, "small", "alice", "2x2", image="trainer:missing", timeout=4)
    submit(db_url, "large", "alice", "2x4", image="trainer:missing", timeout=4)
    driver.run_until(
        lambda t: t["small"].reason in ACQUIRING_REASONS and t["large"].reason in ACQUIRING_REASONS
    )
    with db(services) as s:
        acquiring = {p.queue for p in repo.progress_in(s, [Phase.ACQUIRING])}
    assert acquiring == {QueueKey(CLUSTER.id, "2x2"), QueueKey(CLUSTER.id, "2x4")}
    driver.run_until_done(["small", "large"])


def test_the_reservation_is_used_while_it_has_room_then_flex_start(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    driver = Driver(services)
    ids = ["r1", "r2", "r3"]
    for i in ids:  # 4x4 is a 4-node slice; the reservation holds 8 nodes
        submit(db_url, i, "alice", "4x4", run_seconds=600)
    driver.run_until(lambda t: all(t[i].status is Status.RUNNING for i in ids), seconds=120)
    assert reservation_in_use(emulator) == 8

    with db(services) as s:
        modes = {i: repo.get_pool(s, CLUSTER.id, repo.get_task(s, i).node_pool_name).mode for i in ids}  # type: ignore[union-attr,arg-type]
    assert modes == {"r1": "reservation", "r2": "reservation", "r3": "flex_start"}
    # The cluster is regional (three zones): every pool is pinned to the cluster's node zone,
    # where the reservation lives, instead of being spread over the region.
    assert {i: list(gke_pool(services, i).locations) for i in ids} == {i: ["us-east5-b"] for i in ids}
    assert list(gke_pool(services, "r1").config.reservation_affinity.values) == ["res-a"]
    assert ("Pending", "ProvisioningFallback") in driver.history["r3"]
    assert ("Pending", "ProvisioningFallback") not in driver.history["r1"]

    request_abort(services, *ids)
    driver.run_until_done(ids)
    # Deleting the pools gave the capacity back: two at release, the spare one past its horizon.
    driver.run_until(lambda _: reservation_in_use(emulator) == 0, seconds=15)


def test_a_kept_pool_nobody_takes_is_deleted_after_the_grace(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FALCON_POOL_CREATION_PRIOR_SECONDS", "1")
    get_settings.cache_clear()
    services = replace(services, settings=get_settings())
    driver = Driver(services)
    submit(db_url, "first", "alice", "2x2", run_seconds=6.0)
    driver.run_until(lambda t: t["first"].status is Status.RUNNING)
    submit(db_url, "stuck", "carol", "2x2", image="trainer:missing", timeout=12)
    driver.run_until(lambda t: t["stuck"].reason is Reason.DISPATCHING)
    submit(db_url, "gone", "bob", "2x2")
    driver.run_until(lambda t: t["gone"].reason is Reason.WAITING)
    driver.run_until(lambda t: t["first"].status is Status.SUCCEEDED)

    with db(services) as s:
        kept = repo.pools_in(s, [PoolState.IDLE])
    assert [p.name for p in kept] == [driver.observe()["first"].node_pool_name]  # kept: "gone" waits
    request_abort(services, "gone")  # the task it was kept for leaves
    driver.run_until(lambda t: t["gone"].status is Status.ABORTED)
    driver.run_until_done(["stuck"], seconds=60)
    driver.run_until(lambda _: emulator_counters(emulator)["nodePoolsDeleted"] == 2, seconds=30)
    with db(services) as s:
        assert repo.pools_in(s, [PoolState.IDLE, PoolState.IN_USE]) == []


def test_a_leaked_queue_slot_is_repaired(services: Services, db_url: str) -> None:
    name = QueueKey(CLUSTER.id, "2x2").slot_name
    slots.ensure_limit(name)
    leaked = slots.try_acquire(name, 3600)  # a holder that died without a trace in the database
    assert leaked is not None and slots.try_acquire(name, 60) is None  # the slot is taken
    submit(db_url, "after-leak", "alice", "2x2")
    Driver(services).run_until_done(["after-leak"])
    with db(services) as s:
        assert repo.get_task(s, "after-leak").status is Status.SUCCEEDED  # type: ignore[union-attr]


def test_slot_calls_keep_one_client_per_thread_and_drop_it_after_a_failure(services: Services) -> None:
    name = QueueKey(CLUSTER.id, "2x4").slot_name
    slots.ensure_limit(name)
    lease = slots.try_acquire(name, 60)
    kept = slots._open.client
    assert lease is not None and slots.renew(lease, 60) is True
    assert slots._open.client is kept  # no new client (nor connection) per call

    other: list[object] = []
    thread = threading.Thread(target=lambda: (slots.release(lease), other.append(slots._open.client)))
    thread.start()
    thread.join()
    assert other and other[0] is not kept  # each thread has its own

    with pytest.raises(ObjectNotFound):
        slots.reset("falcon:no-such-queue")
    assert slots._open.client is None  # a client whose call failed is not used again
    assert slots.try_acquire(name, 60) is not None  # the next call opens a fresh one


class NoRuns:
    """A launcher that starts nothing: the test drives the lifecycle steps itself."""

    def start_acquire(self, task_id: str, lease_id: str, attempt: int) -> str:
        return f"manual-{task_id}"

    def start_release(self, task_id: str, attempt: int) -> str:
        return f"manual-release-{task_id}"

    def is_alive(self, run_id: str) -> bool:
        return True


def test_two_queues_never_overbook_the_reservation(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """The reservation (8 nodes) has room for the 4x8 slice (8 nodes) or the 4x4 one (4), not both.
    Both queues provision before either pool has nodes, so GCE still reports the reservation
    empty: the second must count the first's pool in flight and fall back to flex-start."""
    from falcon.services.acquisition import provision
    from falcon.services.context import load_view

    submit(db_url, "big", "alice", "4x8")
    submit(db_url, "small", "bob", "4x4")
    Driver(services, NoRuns()).tick()  # takes both in and picks both (two queues)
    provision(services, load_view(services, "big"))
    provision(services, load_view(services, "small"))
    with db(services) as s:
        big, small = repo.get_task(s, "big"), repo.get_task(s, "small")
        pools = {t.id: repo.get_pool(s, CLUSTER.id, t.node_pool_name) for t in (big, small)}  # type: ignore[union-attr,arg-type]
    assert big is not None and big.reason is Reason.PROVISIONING and pools["big"].mode == "reservation"  # type: ignore[union-attr]
    assert small is not None and small.reason is Reason.PROVISIONING_FALLBACK
    assert pools["small"].mode == "flex_start"  # type: ignore[union-attr]
