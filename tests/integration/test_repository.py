"""The data layer on SQLite and on MariaDB: the job contract, compare-and-set writes, queues."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import downgrade, upgrade
from falcon.adapters.db.orm import JobRow
from falcon.adapters.db.session import engine_for, session_scope
from falcon.domain.lifecycle import NodePool, Phase, PoolState
from falcon.domain.model import Cluster, ClusterStatus, ProvisioningMode, QueueKey
from falcon.domain.status import Reason, Status

T0 = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)


def _insert(url: str, task_id: str, actor: str = "alice", at: datetime = T0) -> None:
    with session_scope(url) as s:
        repo.insert_task(
            s,
            task_id=task_id,
            actor=actor,
            name=f"n-{task_id}",
            tpu_type="v6e",
            spec={"image": "i", "command": ["c"], "topology": "2x4", "note": "a:b"},
            timeout_seconds=60,
            now=at,
        )


def test_job_row_round_trips_json_and_microseconds(db_url: str) -> None:
    _insert(db_url, "t1")
    with session_scope(db_url) as s:
        task = repo.get_task(s, "t1")
    assert task is not None
    assert task.spec["note"] == "a:b"
    assert task.created_at == T0
    assert task.status is Status.PENDING and task.reason is None


def test_new_tasks_are_pending_without_reason_oldest_first(db_url: str) -> None:
    _insert(db_url, "late", at=T0 + timedelta(seconds=5))
    _insert(db_url, "early", at=T0)
    with session_scope(db_url) as s:
        assert [t.id for t in repo.tick_reads(s, 10, with_counts=False).new] == ["early", "late"]
        assert repo.queue_task(s, "early", QueueKey("c1", "2x4"), T0)
    with session_scope(db_url) as s:
        assert [t.id for t in repo.tick_reads(s, 10, with_counts=False).new] == ["late"]


def test_compare_and_set_loses_to_an_upstream_abort(db_url: str) -> None:
    _insert(db_url, "t1")
    with session_scope(db_url) as s:
        assert repo.request_abort(s, "t1", T0)
    with session_scope(db_url) as s:
        assert not repo.mark_running(s, "t1", "running", T0)
        assert repo.get_task(s, "t1").status is Status.ABORTING  # type: ignore[union-attr]


def test_waiting_tasks_are_grouped_by_queue_and_messages_land_only_on_waiting_rows(db_url: str) -> None:
    queue = QueueKey("c1", "2x4")
    for i, actor in enumerate(["alice", "bob", "carol"]):
        _insert(db_url, f"t{i}", actor, T0 + timedelta(seconds=i))
        with session_scope(db_url) as s:
            assert repo.queue_task(s, f"t{i}", queue, T0)
    with session_scope(db_url) as s:
        repo.request_abort(s, "t2", T0)  # upstream, meanwhile
    with session_scope(db_url) as s:
        assert [(r.queue, r.task.task_id) for r in repo.waiting_rows(s)] == [(queue, "t0"), (queue, "t1")]
        assert repo.waiting_count(s, queue, 3) == 2
        repo.set_messages(s, {"t0": "m0", "t1": "m1", "t2": "not for an aborting row"}, T0)
    with session_scope(db_url) as s:
        rows = {r.task.task_id: r.message for r in repo.waiting_rows(s)}
        assert rows == {"t0": "m0", "t1": "m1"}
        assert repo.get_task(s, "t2").message == ""  # as intake left it  # type: ignore[union-attr]
        assert repo.queue_lengths(s) == {queue: 3}


@pytest.mark.parametrize("server_form", ["as detected", "UPDATE ... CASE"])
def test_messages_are_written_in_batches_larger_than_one_statement(
    db_url: str, server_form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On MariaDB 10.6+ the messages go in as one JSON_TABLE; "UPDATE ... CASE" is the form other
    servers get, forced here. Only rows still waiting are written, and any text survives."""
    if server_form != "as detected":
        # as on a server without JSON_TABLE
        monkeypatch.setitem(repo._JSON_TABLE_UPDATES, str(engine_for(db_url).url), None)
    queue = QueueKey("c1", "2x4")
    n = max(repo.MESSAGE_BATCH, repo.JSON_TABLE_BATCH) + 7
    with session_scope(db_url) as s:
        for i in range(n):
            repo.insert_task(
                s, task_id=f"b{i}", actor="a", name="n", tpu_type="v6e", spec={}, timeout_seconds=None, now=T0
            )
    with session_scope(db_url) as s:
        for i in range(n - 1):
            assert repo.queue_task(s, f"b{i}", queue, T0)
    later = T0 + timedelta(seconds=5)
    texts = {f"b{i}": f"队列位置 #{i + 1}, 'quoted' \\ \"x\"" for i in range(n)}
    with session_scope(db_url) as s:
        assert repo.set_messages(s, texts, later) == n
        assert repo.set_messages(s, {}, later) == 0
    with session_scope(db_url) as s:
        rows = {r.task.task_id: r.message for r in repo.waiting_rows(s)}
        not_waiting = repo.get_task(s, f"b{n - 1}")
        stamps = set(s.scalars(sa.select(JobRow.updated_at).where(JobRow.reason == Reason.WAITING.value)))
    assert rows == {f"b{i}": texts[f"b{i}"] for i in range(n - 1)}
    assert not_waiting is not None and not_waiting.message is None  # Pending, not taken in: untouched
    assert stamps == {later}


def test_an_idle_pool_is_claimed_by_exactly_one_task(db_url: str) -> None:
    queue = QueueKey("c1", "2x4")
    pool = NodePool(
        "c1",
        "falcon-2x4-abc",
        "2x4",
        "ct6e-standard-4t",
        ProvisioningMode.RESERVATION,
        "r",
        PoolState.IDLE,
        None,
        T0,
    )
    with session_scope(db_url) as s:
        repo.write_ahead_pool(s, pool, T0)
    with session_scope(db_url) as s:
        first = repo.claim_idle_pool(s, queue, "t1", T0)
        second = repo.claim_idle_pool(s, queue, "t2", T0)
    assert first is not None and first.holder_task_id == "t1" and first.state == PoolState.IN_USE
    assert second is None


def test_rotation_state_survives_sessions(db_url: str) -> None:
    queue = QueueKey("c1", "2x4")
    with session_scope(db_url) as s:
        repo.record_pick(s, queue, "alice", T0)
    with session_scope(db_url) as s:
        repo.record_pick(s, queue, "bob", T0)
    with session_scope(db_url) as s:
        assert repo.last_actors(s) == {queue: "bob"}


@pytest.mark.parametrize("db_url", ["mysql"], indirect=True)
def test_the_first_picks_of_two_queues_recorded_at_once_do_not_deadlock(db_url: str) -> None:
    """A tick records its queues' picks at once. Writing a queue's rotation as an UPDATE, then an
    INSERT when it found no row, took a gap lock on MariaDB; two first picks, each inserting into
    the gap the other held, deadlocked at a full-size benchmark's first tick (here, with the
    first commit held back, the second insert waits on the first's gap lock)."""
    both_wrote = threading.Barrier(2, timeout=10)
    failures: list[BaseException] = []

    def first_pick(queue: QueueKey) -> None:
        try:
            with session_scope(db_url) as s:
                repo.record_pick(s, queue, "alice", T0)
                s.flush()
                both_wrote.wait()  # both transactions open, each row written
        except BaseException as exc:
            failures.append(exc)
            both_wrote.abort()

    threads = [threading.Thread(target=first_pick, args=(QueueKey("c1", t),)) for t in ("2x2", "2x4")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
    with session_scope(db_url) as s:
        assert repo.last_actors(s) == {QueueKey("c1", "2x2"): "alice", QueueKey("c1", "2x4"): "alice"}


def test_naive_datetimes_are_refused(db_url: str) -> None:
    with pytest.raises(Exception, match="naive"), session_scope(db_url) as s:
        repo.insert_task(
            s,
            task_id="x",
            actor="a",
            name="n",
            tpu_type="v6e",
            spec={},
            timeout_seconds=None,
            now=datetime(2026, 1, 1),
        )


def test_migrations_go_down_to_base_and_up_again(db_url: str) -> None:
    _insert(db_url, "kept")
    downgrade(db_url, "base")
    upgrade(db_url)
    with session_scope(db_url) as s:
        assert repo.get_task(s, "kept") is None  # base dropped everything; head recreated it empty
        assert repo.list_clusters(s) == []


def test_falcon_cannot_write_a_transition_the_state_machine_forbids(db_url: str) -> None:
    from falcon.domain.lifecycle import IllegalPhaseMoveError, Outcome
    from falcon.domain.status import IllegalTransitionError

    _insert(db_url, "t1")
    with pytest.raises(IllegalTransitionError), session_scope(db_url) as s:
        repo.finish(s, "t1", Outcome(Status.SUCCEEDED), [Status.PENDING], T0)  # Pending never succeeds
    with pytest.raises(IllegalTransitionError), session_scope(db_url) as s:
        repo.finish(s, "t1", Outcome(Status.FAILED, Reason.WAITING), [Status.PENDING], T0)  # not a cause
    with session_scope(db_url) as s:
        assert repo.queue_task(s, "t1", QueueKey("c1", "2x4"), T0)
    with pytest.raises(IllegalPhaseMoveError), session_scope(db_url) as s:  # it holds nothing to release
        repo.start_releasing(s, "t1", Outcome(Status.FAILED, Reason.TIMEOUT), [Phase.WAITING], "", T0)
    with session_scope(db_url) as s:
        assert repo.get_task(s, "t1").reason is Reason.WAITING  # type: ignore[union-attr]


def test_the_zone_migration_keeps_each_clusters_reservation_zone_as_its_node_zone(db_url: str) -> None:
    downgrade(db_url, "f1a0c0de0002")
    with engine_for(db_url).begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO clusters (id, name, project, location, tpu_type, gcs_bucket,"
                " default_reservation, reservation_zone, namespace, status, created_at)"
                " VALUES ('c1', 'edge-a', 'p', 'us-east5', 'v6e', 'b',"
                " 'res-a', 'us-east5-b', 'ns', 'active', :t)"
            ),
            {"t": T0.replace(tzinfo=None)},
        )
    upgrade(db_url)
    with session_scope(db_url) as s:
        (cluster,) = repo.list_clusters(s)
    assert (cluster.zone, cluster.node_zone, cluster.region) == ("us-east5-b", "us-east5-b", "us-east5")
    downgrade(db_url, "f1a0c0de0002")
    with engine_for(db_url).begin() as conn:
        assert conn.execute(sa.text("SELECT reservation_zone FROM clusters")).scalar_one() == "us-east5-b"


def test_a_zonal_cluster_without_a_zone_puts_its_pools_in_its_own_zone(db_url: str) -> None:
    with session_scope(db_url) as s:
        repo.add_cluster(
            s, Cluster("c1", "e", "p", "us-east5-a", "v6e", "b", None, ClusterStatus.ACTIVE, "ns"), T0
        )
    with session_scope(db_url) as s:
        (cluster,) = repo.list_clusters(s)
    assert (cluster.zone, cluster.node_zone) == (None, "us-east5-a")


def _job_indexes(url: str) -> set[str]:
    return {index["name"] or "" for index in sa.inspect(engine_for(url)).get_indexes("job")}


def test_intake_finds_new_rows_through_an_index_where_falcon_made_the_job_table(db_url: str) -> None:
    assert "ix_job__status__reason__created_at" in _job_indexes(db_url)
    downgrade(db_url, "f1a0c0de0007")
    assert "ix_job__status__reason__created_at" not in _job_indexes(db_url)
    upgrade(db_url)
    assert "ix_job__status__reason__created_at" in _job_indexes(db_url)


def test_an_upstream_owned_job_table_keeps_its_own_indexes(db_url: str) -> None:
    downgrade(db_url, "base")
    with engine_for(db_url).begin() as conn:  # upstream's table, with the contract's columns only
        conn.execute(
            sa.text(
                "CREATE TABLE job (id VARCHAR(64) PRIMARY KEY, actor VARCHAR(128) NOT NULL,"
                " name VARCHAR(255) NOT NULL, tpu_type VARCHAR(32) NOT NULL, spec JSON NOT NULL,"
                " timeout_seconds INT NULL, status VARCHAR(16) NOT NULL, reason VARCHAR(64) NULL,"
                " message TEXT NULL, cluster_id VARCHAR(36) NULL, node_pool_name VARCHAR(64) NULL,"
                " k8s_job_name VARCHAR(128) NULL, job_uid VARCHAR(64) NULL, created_at DATETIME(6) NOT NULL,"
                " updated_at DATETIME(6) NOT NULL, dispatched_at DATETIME(6) NULL,"
                " finished_at DATETIME(6) NULL, aborting_at DATETIME(6) NULL, aborted_at DATETIME(6) NULL)"
            )
        )
    upgrade(db_url)
    assert _job_indexes(db_url) == set()
    _insert(db_url, "t1")
    with session_scope(db_url) as s:
        assert [t.id for t in repo.tick_reads(s, 10, with_counts=False).new] == ["t1"]


def test_the_migrated_schema_is_the_models(db_url: str) -> None:
    """Every table, column and index the ORM declares is what the migrations built, so that an
    index the queries count on (the progress rows by phase and queue, intake's) is not only in
    the models; alembic's own comparison, types and server defaults left out."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from falcon.adapters.db.orm import Base

    with engine_for(db_url).connect() as conn:
        options = {"compare_type": False, "compare_server_default": False}
        context = MigrationContext.configure(conn, opts=options)
        diff = compare_metadata(context, Base.metadata)
    assert [d for d in diff if d[0] != "remove_table" or d[1].name != "alembic_version"] == []
