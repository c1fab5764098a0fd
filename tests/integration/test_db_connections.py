"""The pooled MariaDB connections of falcon.adapters.db.session: a transaction costs its statements
and its COMMIT, no ping before and no ROLLBACK after; a read of one statement (``read_scope``)
costs that statement alone; a connection idle past PING_AFTER_IDLE_SECONDS is pinged, and one the
server dropped meanwhile is replaced unseen."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from falcon.adapters.db import session
from falcon.adapters.db.session import engine_for, read_engine_for, read_scope, session_scope
from tests.conftest import mysql_url, new_mysql_database


@pytest.fixture
def url(mysql_proc: object) -> Iterator[str]:
    url = new_mysql_database(mysql_proc)
    yield url
    engine_for(url).dispose()
    read_engine_for(url).dispose()


def _connection_and_rollbacks(url: str) -> tuple[int, int]:
    """The pooled connection's server id, and how many ROLLBACKs that connection has run."""
    with session_scope(url) as s:
        connection_id = s.execute(sa.text("SELECT CONNECTION_ID()")).scalar_one()
        rollbacks = s.execute(sa.text("SHOW SESSION STATUS LIKE 'Com_rollback'")).one()[1]
    return int(connection_id), int(rollbacks)


def _kill(mysql_proc: object, connection_id: int) -> None:
    """The server drops one connection, as a restart or a proxy's idle cut would."""
    admin = sa.create_engine(mysql_url(mysql_proc, "mysql"), poolclass=sa.NullPool)
    with admin.connect() as connection:
        connection.execute(sa.text(f"KILL CONNECTION {connection_id}"))


def test_a_transaction_returns_its_connection_without_a_rollback(url: str) -> None:
    first_id, first_rollbacks = _connection_and_rollbacks(url)
    for _ in range(3):
        connection_id, rollbacks = _connection_and_rollbacks(url)
        assert connection_id == first_id  # the last returned is handed out again
        assert rollbacks == first_rollbacks


def test_a_transaction_that_fails_is_rolled_back_before_its_connection_is_reused(url: str) -> None:
    with session_scope(url) as s:
        s.execute(sa.text("CREATE TABLE t (n INT PRIMARY KEY) ENGINE=InnoDB"))
    with pytest.raises(RuntimeError), session_scope(url) as s:
        s.execute(sa.text("INSERT INTO t VALUES (1)"))
        raise RuntimeError("the step failed half-way")
    with session_scope(url) as s:
        assert s.execute(sa.text("SELECT COUNT(*) FROM t")).scalar_one() == 0


def test_a_connection_idle_too_long_that_the_server_dropped_is_replaced_unseen(
    url: str, mysql_proc: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    dropped, _ = _connection_and_rollbacks(url)
    _kill(mysql_proc, dropped)
    monkeypatch.setattr(session, "PING_AFTER_IDLE_SECONDS", 0.0)  # it has been idle long enough
    replaced, _ = _connection_and_rollbacks(url)
    assert replaced != dropped


def test_a_connection_dropped_between_two_close_uses_fails_one_transaction_only(
    url: str, mysql_proc: object
) -> None:
    """The price of pinging only idle connections: the next transaction on it fails (the
    dispatcher's loop logs it and ticks again; a step retries), and the pool starts afresh."""
    dropped, _ = _connection_and_rollbacks(url)
    _kill(mysql_proc, dropped)
    with pytest.raises(OperationalError):
        _connection_and_rollbacks(url)
    replaced, _ = _connection_and_rollbacks(url)
    assert replaced != dropped


def _read_connection_counters(url: str) -> tuple[int, dict[str, int]]:
    """The pooled read connection's server id, and what that connection has run so far."""
    with read_scope(url) as s:
        connection_id = s.execute(sa.text("SELECT CONNECTION_ID()")).scalar_one()
        rows = s.execute(
            sa.text("SHOW SESSION STATUS WHERE Variable_name IN ('Com_select', 'Com_commit', 'Com_rollback')")
        ).all()
    return int(connection_id), {name: int(value) for name, value in rows}


def test_a_read_sends_its_statement_and_nothing_else(url: str) -> None:
    first_id, before = _read_connection_counters(url)
    for _ in range(3):
        with read_scope(url) as s:
            assert s.execute(sa.text("SELECT 1")).scalar_one() == 1
    connection_id, after = _read_connection_counters(url)
    assert connection_id == first_id  # the last returned is handed out again
    assert after["Com_select"] - before["Com_select"] == 3 + 1  # the three reads and CONNECTION_ID()
    assert (after["Com_commit"], after["Com_rollback"]) == (before["Com_commit"], before["Com_rollback"])


def test_a_read_sees_what_was_committed_since_the_read_before_it_on_its_connection(url: str) -> None:
    with session_scope(url) as s:
        s.execute(sa.text("CREATE TABLE t (n INT PRIMARY KEY) ENGINE=InnoDB"))
    count = sa.text("SELECT COUNT(*) FROM t")
    with read_scope(url) as s:
        assert s.execute(count).scalar_one() == 0
    with session_scope(url) as s:
        s.execute(sa.text("INSERT INTO t VALUES (1)"))
    with read_scope(url) as s:  # the same pooled connection holds no snapshot from the read before
        assert s.execute(count).scalar_one() == 1


def test_a_read_connection_idle_too_long_that_the_server_dropped_is_replaced_unseen(
    url: str, mysql_proc: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    dropped, _ = _read_connection_counters(url)
    _kill(mysql_proc, dropped)
    monkeypatch.setattr(session, "PING_AFTER_IDLE_SECONDS", 0.0)
    replaced, _ = _read_connection_counters(url)
    assert replaced != dropped
