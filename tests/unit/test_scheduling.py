"""Named cases for every scheduling rule of design §3-§5 and §9.

We test: cluster choice (inactive skipped, tpu_type aliases, idle pool over shorter queue,
shortest queue, reservation room among equal queues, deterministic ties, nothing eligible); the
pick rule (FIFO within an actor, round robin, last actor alone still picked, ties); queue
positions and Waiting messages; every branch of the provisioning decision; keep-or-delete after a
task; idle pool expiry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from falcon.domain.messages import Locale
from falcon.domain.model import Cluster, ClusterStatus, ProvisioningMode, QueueKey
from falcon.domain.scheduling import (
    ClusterLoad,
    IdlePool,
    ProvisioningDecision,
    QueuePosition,
    ReservationBasis,
    ReservationCapacity,
    UnusableReservationError,
    WaitingTask,
    choose_cluster,
    decide_provisioning,
    eligible_clusters,
    expired_idle_pools,
    keep_pool_after_task,
    pick_next,
    pick_order,
    queue_positions,
    waiting_messages,
)
from falcon.domain.status import Reason
from falcon.domain.topology import resolve_shape

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def task(task_id: str, actor: str, minute: int, name: str | None = None) -> WaitingTask:
    return WaitingTask(task_id, actor, name or f"job-{task_id}", T0 + timedelta(minutes=minute))


def load(
    name: str,
    tpu_type: str = "v7x",
    status: ClusterStatus = ClusterStatus.ACTIVE,
    idle: Sequence[str] = (),
    queues: Mapping[str, int] | None = None,
    cluster_id: str | None = None,
    reservation: ReservationBasis | None = None,
    held: int = 0,
) -> ClusterLoad:
    cluster = Cluster(
        id=cluster_id or f"id-{name}",
        name=name,
        project="proj",
        location="us-central1",
        tpu_type=tpu_type,
        gcs_bucket="bucket",
        default_reservation=None,
        status=status,
        namespace="falcon-jobs",
    )
    return ClusterLoad(cluster, frozenset(idle), dict(queues or {}), reservation, held)


# --- Cluster choice ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tpu_type", "topology", "clusters", "expected"),
    [
        pytest.param("v7x", "2x2x2", [], None, id="no clusters at all"),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("a", status=ClusterStatus.MAINTENANCE), load("b", status=ClusterStatus.OFFLINE)],
            None,
            id="only maintenance and offline clusters: none eligible",
        ),
        pytest.param("v7x", "2x2x2", [load("a", tpu_type="v6e")], None, id="other tpu_type: none eligible"),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("a", status=ClusterStatus.MAINTENANCE, idle=["2x2x2"]), load("b", queues={"2x2x2": 9})],
            "b",
            id="inactive cluster skipped even with an idle pool",
        ),
        pytest.param("tpu7x", "2x2x2", [load("a", tpu_type="v7x")], "a", id="task alias tpu7x matches v7x"),
        pytest.param(
            "v7x", "2x2x2", [load("a", tpu_type="TPU7x ")], "a", id="cluster alias matches task type"
        ),
        pytest.param("Trillium", "4x4", [load("a", tpu_type="v6e")], "a", id="trillium alias matches v6e"),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("a", queues={"2x2x2": 0}), load("b", idle=["2x2x2"], queues={"2x2x2": 5})],
            "b",
            id="idle pool preferred over shorter queue",
        ),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("a", idle=["4x4x4"], queues={"2x2x2": 3}), load("b", queues={"2x2x2": 1})],
            "b",
            id="idle pool of another topology does not count",
        ),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("a", queues={"2x2x2": 3}), load("b", queues={"2x2x2": 1}), load("c", queues={"2x2x2": 2})],
            "b",
            id="shortest queue",
        ),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("a", queues={"2x2x2": 1, "4x4x4": 0}), load("b", queues={"4x4x4": 7})],
            "b",
            id="queue length counts only this topology, missing means empty",
        ),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("a", idle=["2x2x2"], queues={"2x2x2": 2}), load("b", idle=["2x2x2"], queues={"2x2x2": 1})],
            "b",
            id="two idle pools: shorter queue wins",
        ),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("zeta", queues={"2x2x2": 1}), load("alpha", queues={"2x2x2": 1})],
            "alpha",
            id="equal queues: name breaks the tie",
        ),
        pytest.param(
            "v7x",
            "2x2x2",
            [load("same", cluster_id="id-2"), load("same", cluster_id="id-1")],
            "id-1",
            id="equal queues and names: id breaks the tie",
        ),
    ],
)
def test_choose_cluster(
    tpu_type: str, topology: str, clusters: list[ClusterLoad], expected: str | None
) -> None:
    chosen = choose_cluster(tpu_type, resolve_shape(tpu_type, topology), clusters)
    if expected is None:
        assert chosen is None
    else:
        assert chosen is not None
        assert expected in (chosen.name, chosen.id)


def test_choose_cluster_ignores_input_order() -> None:
    clusters = [load("b", queues={"2x2x2": 1}), load("a", queues={"2x2x2": 1}), load("c")]
    shape = resolve_shape("v7x", "2x2x2")
    assert {choose_cluster("v7x", shape, order) for order in (clusters, clusters[::-1])} == {
        clusters[2].cluster
    }


V6E_MACHINE = "ct6e-standard-4t"


def basis(count: int = 8, in_use: int = 0, held_then: int = 0, **read: str) -> ReservationBasis:
    """A reservation read: ``in_use`` nodes then, ``held_then`` of them Falcon's."""
    fields = {"status": "READY", "machine_type": V6E_MACHINE} | read
    return ReservationBasis(ReservationCapacity("res", count, in_use, **fields), held_then)


@pytest.mark.parametrize(
    ("topology", "clusters", "expected"),
    [
        pytest.param(
            "4x4",
            [
                load("a", tpu_type="v6e", reservation=basis(8), held=6),
                load("b", tpu_type="v6e", reservation=basis(4)),
            ],
            "b",
            id="equal queues: the reservation with room for the slice, not the first name",
        ),
        pytest.param(
            "2x2",
            [
                load("a", tpu_type="v6e", reservation=basis(8), held=6),
                load("b", tpu_type="v6e", reservation=basis(4)),
            ],
            "a",
            id="both have room: the name decides as before",
        ),
        pytest.param(
            "4x4",
            [
                load("a", tpu_type="v6e", queues={"4x4": 0}),
                load("b", tpu_type="v6e", queues={"4x4": 1}, reservation=basis(8)),
            ],
            "a",
            id="room does not beat a shorter queue",
        ),
        pytest.param(
            "4x4",
            [
                load("a", tpu_type="v6e", idle=["4x4"], queues={"4x4": 1}),
                load("b", tpu_type="v6e", queues={"4x4": 1}, reservation=basis(8)),
            ],
            "a",
            id="room does not beat an idle pool",
        ),
        pytest.param(
            "2x4",
            [
                load("a", tpu_type="v6e", reservation=basis(8, in_use=7, held_then=4), held=4),
                load("b", tpu_type="v6e", reservation=basis(4, in_use=1, held_then=1), held=2),
            ],
            "b",
            id="others' nodes at the read count: a has 8 - 3 - 4 = 1 free, b 4 - 0 - 2 = 2",
        ),
        pytest.param(
            "2x4",
            [
                load("a", tpu_type="v6e", reservation=basis(8, in_use=8, held_then=8), held=2),
                load("b", tpu_type="v6e", reservation=basis(4), held=3),
            ],
            "a",
            id="Falcon's deletions since the read free room at once",
        ),
        pytest.param(
            "2x2",
            [
                load("a", tpu_type="v6e", reservation=basis(8, machine_type="ct5lp-hightpu-4t")),
                load("b", tpu_type="v6e", reservation=basis(4)),
            ],
            "b",
            id="a reservation of another machine type has no room for the slice",
        ),
        pytest.param(
            "2x2",
            [
                load("a", tpu_type="v6e", reservation=basis(8, machine_type="ct5lp-hightpu-4t")),
                load("b", tpu_type="v6e", reservation=basis(4), held=4),
            ],
            "b",
            id="flex-start beside a full reservation beats a reservation the slice cannot use",
        ),
        pytest.param(
            "2x2",
            [
                load("a", tpu_type="v6e", reservation=basis(8, status="CREATING")),
                load("b", tpu_type="v6e", reservation=basis(4)),
            ],
            "b",
            id="a reservation not READY has no room",
        ),
        pytest.param(
            "2x2",
            [load("a", tpu_type="v6e"), load("b", tpu_type="v6e", reservation=basis(4), held=4)],
            "a",
            id="no reservation and a full one are alike: the name decides",
        ),
    ],
)
def test_choose_cluster_among_equal_queues_prefers_reservation_room(
    topology: str, clusters: list[ClusterLoad], expected: str
) -> None:
    chosen = choose_cluster("v6e", resolve_shape("v6e", topology), clusters)
    assert chosen is not None and chosen.name == expected


@given(
    count=st.integers(0, 64),
    in_use=st.integers(0, 80),
    held_then=st.integers(0, 80),
    held_now=st.integers(0, 80),
    topology=st.sampled_from(["2x2", "2x4", "4x4"]),
)
def test_reservation_fits_only_when_its_estimated_room_holds_the_slice(
    count: int, in_use: int, held_then: int, held_now: int, topology: str
) -> None:
    shape = resolve_shape("v6e", topology)
    room = count - max(0, in_use - held_then) - held_now
    assert basis(count, in_use, held_then).fits(shape, held_now) is (room >= shape.nodes)
    # more of Falcon's nodes now never makes room, fewer never takes it away
    if basis(count, in_use, held_then).fits(shape, held_now + 1):
        assert basis(count, in_use, held_then).fits(shape, held_now)


def test_eligible_clusters_keeps_active_same_type_in_input_order() -> None:
    clusters = [
        load("c", tpu_type="tpu7x"),
        load("b", tpu_type="v6e"),
        load("a", status=ClusterStatus.OFFLINE),
        load("d"),
    ]
    assert [c.cluster.name for c in eligible_clusters("V7X", clusters)] == ["c", "d"]


# --- Pick rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("waiting", "last_actor", "expected"),
    [
        pytest.param([], None, None, id="nobody waiting"),
        pytest.param([], "alice", None, id="nobody waiting, last actor set"),
        pytest.param(
            [task("t2", "alice", 2), task("t1", "alice", 1), task("t3", "alice", 3)],
            None,
            "t1",
            id="single actor: FIFO",
        ),
        pytest.param(
            [task("t1", "alice", 1), task("t2", "bob", 2)],
            "alice",
            "t2",
            id="two actors, last actor excluded",
        ),
        pytest.param(
            [task("t1", "alice", 1), task("t2", "bob", 2)], "bob", "t1", id="two actors, other was last"
        ),
        pytest.param(
            [task("t1", "alice", 1), task("t2", "bob", 2)], None, "t1", id="no last actor: earliest head"
        ),
        pytest.param(
            [task("t1", "alice", 1), task("t2", "bob", 2)],
            "carol",
            "t1",
            id="last actor no longer waiting: earliest head",
        ),
        pytest.param(
            [task("t1", "alice", 1), task("t2", "alice", 2)],
            "alice",
            "t1",
            id="last actor is the only candidate: still picked",
        ),
        pytest.param(
            [task("t1", "alice", 1), task("t2", "alice", 2), task("t3", "bob", 9), task("t4", "carol", 5)],
            "alice",
            "t4",
            id="three actors, last excluded, earliest of the rest",
        ),
        pytest.param(
            [task("t1", "alice", 1), task("t0", "alice", 3), task("t2", "bob", 2)],
            "bob",
            "t1",
            id="actor head is by time, not by id",
        ),
        pytest.param(
            [task("b", "alice", 1), task("a", "bob", 1)], None, "a", id="equal times: task_id breaks the tie"
        ),
        pytest.param(
            [task("b", "alice", 1), task("a", "alice", 1)],
            None,
            "a",
            id="equal times within an actor: task_id breaks the tie",
        ),
    ],
)
def test_pick_next(waiting: list[WaitingTask], last_actor: str | None, expected: str | None) -> None:
    picked = pick_next(waiting, last_actor)
    assert (picked.task_id if picked else None) == expected


@pytest.mark.parametrize(
    ("waiting", "last_actor", "expected"),
    [
        pytest.param([], None, [], id="empty"),
        pytest.param(
            [task("t3", "alice", 3), task("t1", "alice", 1), task("t2", "alice", 2)],
            "alice",
            ["t1", "t2", "t3"],
            id="single actor: FIFO even when last",
        ),
        pytest.param(
            [task("a1", "alice", 1), task("a2", "alice", 2), task("a3", "alice", 3), task("b1", "bob", 10)],
            None,
            ["a1", "b1", "a2", "a3"],
            id="round robin then the remaining actor alone",
        ),
        pytest.param(
            [task("a1", "alice", 1), task("a2", "alice", 2), task("b1", "bob", 3), task("b2", "bob", 4)],
            "alice",
            ["b1", "a1", "b2", "a2"],
            id="round robin starting away from last actor",
        ),
        pytest.param(
            [
                task("a1", "alice", 1),
                task("a2", "alice", 2),
                task("b1", "bob", 3),
                task("c1", "carol", 4),
                task("c2", "carol", 5),
            ],
            None,
            ["a1", "b1", "a2", "c1", "c2"],
            id="three actors: earliest non-last head each time",
        ),
    ],
)
def test_pick_order(waiting: list[WaitingTask], last_actor: str | None, expected: list[str]) -> None:
    assert [t.task_id for t in pick_order(waiting, last_actor)] == expected


# --- Positions and Waiting messages -------------------------------------------------------------

DESIGN_EXAMPLE = [
    task("t1", "user-a", 1, "profiling-v7x"),
    task("t2", "user-b", 2, "benchmark-v7x"),
    task("t3", "user-c", 3, "accuracy-v7x"),
]


@pytest.mark.parametrize(
    ("waiting", "task_id", "expected"),
    [
        pytest.param(DESIGN_EXAMPLE, "t1", (1, 0, ()), id="first in line: nobody ahead"),
        pytest.param(DESIGN_EXAMPLE, "t3", (3, 2, ("t1", "t2")), id="design example: #3 with 2 ahead"),
        pytest.param(
            [task(f"t{i}", f"u{i}", i) for i in range(1, 7)],
            "t6",
            (6, 5, ("t1", "t2", "t3")),
            id="preview truncated to three",
        ),
        pytest.param(
            [task(f"t{i}", f"u{i}", i) for i in range(1, 7)],
            "t4",
            (4, 3, ("t1", "t2", "t3")),
            id="exactly three ahead",
        ),
    ],
)
def test_queue_positions(
    waiting: list[WaitingTask], task_id: str, expected: tuple[int, int, tuple[str, ...]]
) -> None:
    pos = queue_positions(waiting, None)[task_id]
    assert (pos.position, pos.ahead_count, tuple(t.task_id for t in pos.ahead_preview)) == expected


def test_queue_positions_follow_round_robin_not_submission() -> None:
    waiting = [task("a1", "alice", 1), task("a2", "alice", 2), task("b1", "bob", 3)]
    positions = queue_positions(waiting, "alice")
    assert positions["b1"] == QueuePosition(1, 0, ())
    assert positions["a2"] == QueuePosition(3, 2, (waiting[2], waiting[0]))


def test_queue_positions_share_previews() -> None:
    positions = queue_positions([task(f"t{i}", f"u{i % 7}", i) for i in range(50)], None)
    previews = {id(p.ahead_preview) for p in positions.values()}
    assert len(previews) <= 4


def test_queue_positions_reject_duplicate_ids() -> None:
    with pytest.raises(ValueError, match="distinct task_ids"):
        queue_positions([task("t1", "alice", 1), task("t1", "bob", 2)], None)


@pytest.mark.parametrize(
    ("locale", "task_id", "expected"),
    [
        pytest.param(
            Locale.ZH,
            "t3",
            "队列位置 #3，前面有 2 个任务 (user-a: profiling-v7x, user-b: benchmark-v7x)",
            id="design example, zh",
        ),
        pytest.param(
            Locale.EN,
            "t3",
            "Queue position #3, 2 task(s) ahead (user-a: profiling-v7x, user-b: benchmark-v7x)",
            id="design example, en",
        ),
        pytest.param(Locale.ZH, "t1", "队列位置 #1，等待当前任务获取资源", id="first in line, zh"),
    ],
)
def test_waiting_messages(locale: Locale, task_id: str, expected: str) -> None:
    assert waiting_messages(DESIGN_EXAMPLE, None, locale)[task_id] == expected


def test_waiting_message_summarises_beyond_preview() -> None:
    waiting = [task(f"t{i}", f"u{i}", i, f"n{i}") for i in range(1, 7)]
    assert (
        waiting_messages(waiting, None)["t6"] == "队列位置 #6，前面有 5 个任务 (u1: n1, u2: n2, u3: n3, …+2)"
    )


# --- Provisioning decision ----------------------------------------------------------------------

MACHINE = "ct6e-standard-4t"


def reservation(
    count: int, in_use: int, status: str = "READY", machine: str = MACHINE
) -> ReservationCapacity:
    return ReservationCapacity("ghostfish", count, in_use, status, machine)


RES = ProvisioningMode.RESERVATION
FLEX = ProvisioningMode.FLEX_START


@pytest.mark.parametrize(
    ("nodes", "capacity", "expected"),
    [
        pytest.param(
            2,
            reservation(4, 2),
            ProvisioningDecision(RES, Reason.PROVISIONING, "ghostfish"),
            id="reservation with exactly enough room",
        ),
        pytest.param(
            2,
            reservation(16, 0),
            ProvisioningDecision(RES, Reason.PROVISIONING, "ghostfish"),
            id="reservation with plenty of room",
        ),
        pytest.param(
            2,
            reservation(4, 3),
            ProvisioningDecision(FLEX, Reason.PROVISIONING_FALLBACK, None),
            id="reservation one node short: fallback to flex-start",
        ),
        pytest.param(
            1,
            reservation(4, 6),
            ProvisioningDecision(FLEX, Reason.PROVISIONING_FALLBACK, None),
            id="reservation over-used: fallback to flex-start",
        ),
        pytest.param(
            1,
            None,
            ProvisioningDecision(FLEX, Reason.PROVISIONING, None),
            id="no reservation: plain flex-start",
        ),
    ],
)
def test_decide_provisioning(
    nodes: int, capacity: ReservationCapacity | None, expected: ProvisioningDecision
) -> None:
    assert decide_provisioning(nodes, MACHINE, capacity) == expected


@pytest.mark.parametrize(
    ("capacity", "problem"),
    [
        pytest.param(
            reservation(16, 0, status="CREATING"),
            "reservation ghostfish: status is CREATING, not READY",
            id="not READY yet",
        ),
        pytest.param(
            reservation(16, 0, status="INVALID"),
            "reservation ghostfish: status is INVALID, not READY",
            id="INVALID",
        ),
        pytest.param(
            reservation(16, 0, machine="ct5lp-hightpu-4t"),
            "reservation ghostfish: it reserves ct5lp-hightpu-4t, the slice needs ct6e-standard-4t",
            id="another machine type",
        ),
        pytest.param(
            reservation(0, 0, machine="ct6e-standard-8t"),
            "reservation ghostfish: it reserves ct6e-standard-8t, the slice needs ct6e-standard-4t",
            id="wrong machine type is reported even when the reservation is also full",
        ),
    ],
)
def test_an_unusable_reservation_is_an_error_not_a_fallback(
    capacity: ReservationCapacity, problem: str
) -> None:
    with pytest.raises(UnusableReservationError) as raised:
        decide_provisioning(2, MACHINE, capacity)
    assert str(raised.value) == problem


@pytest.mark.parametrize("nodes", [pytest.param(0, id="zero nodes"), pytest.param(-1, id="negative")])
def test_decide_provisioning_rejects_impossible_node_counts(nodes: int) -> None:
    with pytest.raises(ValueError, match="nodes_needed"):
        decide_provisioning(nodes, MACHINE, None)


@pytest.mark.parametrize(
    ("count", "in_use", "free"),
    [
        pytest.param(8, 3, 5, id="some free"),
        pytest.param(8, 8, 0, id="full"),
        pytest.param(8, 9, 0, id="over-reported use is never negative"),
    ],
)
def test_reservation_free(count: int, in_use: int, free: int) -> None:
    assert reservation(count, in_use).free == free


# --- Keep or delete, idle expiry ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("waiting", "kept", "keep"),
    [
        pytest.param(0, 0, False, id="nobody waiting: delete"),
        pytest.param(1, 0, True, id="one waiting: keep"),
        pytest.param(12, 0, True, id="many waiting: keep"),
        pytest.param(1, 1, False, id="one waiting, a pool already kept for it: delete"),
        pytest.param(3, 2, True, id="more waiting than pools kept: keep"),
    ],
)
def test_keep_pool_after_task(waiting: int, kept: int, keep: bool) -> None:
    assert keep_pool_after_task(waiting, kept) is keep


KEEP_FOR = timedelta(minutes=5)
QUEUE = QueueKey("c1", "2x2x2")


HOLD = KEEP_FOR * 10


def idle_pool(idle_for: timedelta, cluster_id: str = "c1", topology: str = "2x2x2") -> IdlePool:
    return IdlePool(cluster_id, "falcon-pool", topology, T0 - idle_for, keep_for=KEEP_FOR, hold_for=HOLD)


@pytest.mark.parametrize(
    ("pool", "waiting", "expired"),
    [
        pytest.param(idle_pool(timedelta(minutes=1)), {}, False, id="no waiters, within its horizon: kept"),
        pytest.param(idle_pool(KEEP_FOR), {}, False, id="no waiters, exactly its horizon: kept"),
        pytest.param(
            idle_pool(KEEP_FOR + timedelta(seconds=1)), {}, True, id="no waiters, past its horizon: deleted"
        ),
        pytest.param(
            idle_pool(KEEP_FOR * 2), {QUEUE: 0}, True, id="queue present with zero waiters: deleted"
        ),
        pytest.param(
            idle_pool(KEEP_FOR * 2), {QUEUE: 1}, False, id="waiters, past its horizon: kept for them"
        ),
        pytest.param(idle_pool(HOLD), {QUEUE: 3}, False, id="waiters, exactly its hold: kept"),
        pytest.param(
            idle_pool(HOLD + timedelta(seconds=1)),
            {QUEUE: 3},
            True,
            id="waiters, past its hold: deleted anyway",
        ),
        pytest.param(
            idle_pool(KEEP_FOR * 2, topology="4x4x4"),
            {QUEUE: 3},
            True,
            id="waiters of another topology do not keep it",
        ),
        pytest.param(
            idle_pool(KEEP_FOR * 2, cluster_id="c2"),
            {QUEUE: 3},
            True,
            id="waiters in another cluster do not keep it",
        ),
    ],
)
def test_expired_idle_pools(pool: IdlePool, waiting: dict[QueueKey, int], expired: bool) -> None:
    assert expired_idle_pools([pool], waiting, T0) == ([pool] if expired else [])


def test_expired_idle_pools_keeps_input_order() -> None:
    pools = [idle_pool(KEEP_FOR * 3), idle_pool(KEEP_FOR), idle_pool(KEEP_FOR * 2)]
    assert expired_idle_pools(pools, {}, T0) == [pools[0], pools[2]]
