"""Rows upstream got wrong, written with plain SQL into an upstream-owned ``job`` table whose
columns are laxer than Falcon's own migration would make them (NULLs allowed, spec as text).

Each bad row ends Failed/InvalidSpec with a Message naming what is wrong, in the same intake
pass that queues the good rows around it: one bad row never fails a batch or a tick.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.adapters.db.store import SqlTaskStore
from falcon.adapters.task_events import PrometheusTaskEvents
from falcon.domain.messages import Locale, Messages
from falcon.domain.status import Reason, Status
from falcon.services.intake import take_in
from tests.integration.harness import CLUSTER

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GOOD = '{"image": "trainer:1", "command": ["python", "run.py"], "topology": "2x4"}'

# The upstream's own table, as it might have declared it: nothing NOT NULL but the key, spec and
# timeout as plain text. Falcon's migration leaves an existing job table alone.
UPSTREAM_TABLE = """CREATE TABLE job (
  id VARCHAR(64) PRIMARY KEY, actor VARCHAR(128) NULL, name VARCHAR(255) NULL,
  tpu_type VARCHAR(32) NULL, spec TEXT NULL, timeout_seconds VARCHAR(16) NULL,
  status VARCHAR(16) NOT NULL, reason VARCHAR(64) NULL, message TEXT NULL,
  cluster_id VARCHAR(36) NULL, node_pool_name VARCHAR(64) NULL, k8s_job_name VARCHAR(128) NULL,
  job_uid VARCHAR(64) NULL, created_at {dt} NULL, updated_at {dt} NULL, dispatched_at {dt} NULL,
  finished_at {dt} NULL, aborting_at {dt} NULL, aborted_at {dt} NULL)"""

# id -> (column overrides, words the Message must contain)
BAD_ROWS: dict[str, tuple[dict[str, str | None], list[str]]] = {
    "bad-json": ({"spec": '{"image": "trainer:1", "command": ['}, ["spec", "JSON"]),
    "spec-null": ({"spec": None}, ["spec"]),
    "spec-a-string": ({"spec": '"python run.py"'}, ["spec"]),
    "command-not-a-list": (
        {"spec": '{"image": "i", "command": "python run.py", "topology": "2x4"}'},
        ["command"],
    ),
    "unknown-field-type": (
        {"spec": '{"image": "i", "command": ["x"], "topology": "2x4", "env": {"A": 1}}'},
        ["env"],
    ),
    "actor-null": ({"actor": None}, ["actor", "NULL"]),
    "name-empty": ({"name": ""}, ["name", "empty"]),
    "tpu-type-null": ({"tpu_type": None}, ["tpu_type"]),
    "timeout-text": ({"timeout_seconds": "soon"}, ["timeout_seconds", "soon"]),
    "timeout-negative": ({"timeout_seconds": "-5"}, ["timeout_seconds"]),
    "timeout-superscript": ({"timeout_seconds": "²"}, ["timeout_seconds"]),  # isdigit(), yet not int()
    "timeout-huge": ({"timeout_seconds": "9" * 16}, ["timeout_seconds"]),  # beyond 30 days
    "unknown-topology": ({"spec": '{"image": "i", "command": ["x"], "topology": "3x3"}'}, ["3x3"]),
    "unknown-tpu-type": ({"tpu_type": "v9z"}, ["v9z"]),
}


def _recreate_upstream_table(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE job"))
        dt = "DATETIME(6)" if engine.dialect.name in ("mysql", "mariadb") else "DATETIME"
        conn.execute(sa.text(UPSTREAM_TABLE.format(dt=dt)))
    engine.dispose()


def _insert(url: str, rows: dict[str, dict[str, str | None]], sql_mode: str | None = None) -> None:
    """The upstream's INSERTs: plain SQL from its own connection, status Pending, reason NULL."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        if sql_mode is not None:
            conn.execute(sa.text(f"SET SESSION sql_mode = '{sql_mode}'"))
        for i, (task_id, overrides) in enumerate(rows.items()):
            values: dict[str, str | None] = {
                "id": task_id,
                "actor": "alice",
                "name": f"name-{task_id}",
                "tpu_type": "v6e",
                "spec": GOOD,
                "timeout_seconds": "600",
                "created_at": f"2026-11-30 11:00:{i:02d}.000000",
                **overrides,
            }
            columns = ", ".join(values)
            params = ", ".join(f":{k}" for k in values)
            conn.execute(
                sa.text(
                    f"INSERT INTO job ({columns}, status, updated_at) "
                    f"VALUES ({params}, 'Pending', '2026-11-30 11:00:00')"
                ),
                values,
            )
    engine.dispose()


@pytest.fixture
def upstream_db(db_url: str) -> str:
    _recreate_upstream_table(db_url)
    with session_scope(db_url) as s:
        repo.add_cluster(s, CLUSTER, NOW)
    return db_url


def _take_in(url: str) -> None:
    """One intake pass as the dispatcher makes it: a snapshot, then each row's decision written."""
    store = SqlTaskStore(url)
    take_in(
        store,
        store.snapshot(intake_batch=500, with_book=False),
        Messages(Locale.EN),
        NOW,
        PrometheusTaskEvents(store.clusters),
    )


def _tasks(url: str) -> dict[str, repo.Task]:
    with session_scope(url) as s:
        return {t.id: t for t in repo.list_tasks(s, limit=100)}


def test_each_bad_row_fails_alone_in_the_pass_that_queues_the_good_ones(upstream_db: str) -> None:
    rows: dict[str, dict[str, str | None]] = {"good-1": {}}
    rows.update({task_id: overrides for task_id, (overrides, _) in BAD_ROWS.items()})
    rows["good-2"] = {}
    _insert(upstream_db, rows)

    _take_in(upstream_db)

    tasks = _tasks(upstream_db)
    for good in ("good-1", "good-2"):
        assert (tasks[good].status, tasks[good].reason) == (Status.PENDING, Reason.WAITING)
    for task_id, (_, words) in BAD_ROWS.items():
        task = tasks[task_id]
        assert (task.status, task.reason) == (Status.FAILED, Reason.INVALID_SPEC), task_id
        assert task.finished_at == NOW
        for word in words:
            assert word in (task.message or ""), (task_id, task.message)


def test_an_unreadable_timestamp_fails_its_row(upstream_db: str) -> None:
    """SQLite keeps any text in a DATETIME column; MySQL hands back a zero date as a string."""
    mysql = upstream_db.startswith("mysql")
    bad = "0000-00-00 00:00:00" if mysql else "yesterday"
    _insert(upstream_db, {"good": {}, "bad-time": {"created_at": bad}}, sql_mode="" if mysql else None)

    _take_in(upstream_db)

    tasks = _tasks(upstream_db)
    assert tasks["good"].reason is Reason.WAITING
    assert (tasks["bad-time"].status, tasks["bad-time"].reason) == (Status.FAILED, Reason.INVALID_SPEC)
    assert "created_at" in (tasks["bad-time"].message or "")
