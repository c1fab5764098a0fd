"""Engines and sessions, built on demand (never at import time) and cached per URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path
from time import monotonic
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry


@lru_cache(maxsize=8)
def engine_for(url: str) -> sa.Engine:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30})
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return _server_engine(url)


@lru_cache(maxsize=8)
def read_engine_for(url: str) -> sa.Engine:
    """The engine of ``read_scope``: on a server, connections in autocommit that are never sent
    a COMMIT or ROLLBACK (SQLAlchemy's ``skip_autocommit_rollback``)."""
    if url.startswith("sqlite:///"):  # in process: no round trip to save
        return engine_for(url)
    return _server_engine(url, isolation_level="AUTOCOMMIT", skip_autocommit_rollback=True)


def _server_engine(url: str, **options: Any) -> sa.Engine:
    # No rollback when a connection is returned: each comes back through a Connection or Session,
    # which ends its transaction itself (a commit, or a rollback on close), so the pool's rollback
    # was one more round trip after every commit. The last returned is handed out first, so the
    # dispatcher's loops keep using connections that are never idle long enough to be pinged.
    engine = sa.create_engine(
        url, pool_recycle=1800, pool_use_lifo=True, pool_reset_on_return=None, **options
    )
    sa.event.listen(engine, "checkin", _note_return)
    sa.event.listen(engine, "checkout", partial(_ping_if_idle, engine.dialect))
    return engine


# A pooled connection idle longer than this is pinged before use: a server restarted (or a
# proxy's idle cut) since would otherwise fail the transaction it is given.
PING_AFTER_IDLE_SECONDS = 5.0


def _note_return(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
    record.info["returned_at"] = monotonic()


def _ping_if_idle(
    dialect: sa.Dialect, dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any
) -> None:
    """SQLAlchemy's ``pool_pre_ping`` for connections that sat idle only. That option pings on
    every checkout: one round trip of the ~5 a dispatcher transaction has, each a wait for the
    interpreter lock in a busy process (6 ms a round trip beside one CPU-bound thread). A restart
    of the server between two close uses of a connection fails one transaction, which the loops
    and the steps' retries take. Raising DisconnectionError makes the pool replace the connection."""
    returned_at = record.info.get("returned_at")
    if returned_at is None:  # a new connection
        return
    idle = monotonic() - returned_at
    if idle < PING_AFTER_IDLE_SECONDS:
        return
    try:
        alive = dialect.do_ping(dbapi_connection)
    except Exception as exc:  # the driver's own errors, whatever the driver
        raise sa.exc.DisconnectionError(f"a connection idle {idle:.0f} s is gone") from exc
    if not alive:
        raise sa.exc.DisconnectionError("a connection idle too long did not answer its ping")


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (CLI, UI) never block the dispatcher
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on error."""
    session = sessionmaker(engine_for(url), expire_on_commit=False)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


@contextmanager
def read_scope(url: str) -> Iterator[Session]:
    """One read of a single statement, outside a transaction: on a server, the statement is its
    only round trip. In a busy process each round trip waits for the interpreter lock at its
    answer, so a COMMIT after a read cost it a second wait (``bench_steady_reads.py
    --busy-threads 1``: the tick's read 4.4 ms in a transaction, 3.0 ms outside one). A statement
    is consistent in itself; two statements here are not consistent with each other, and nothing
    may be written here."""
    session = Session(read_engine_for(url))
    try:
        yield session
    finally:
        session.close()
