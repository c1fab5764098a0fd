"""Engines and sessions, built on demand (never at import time) and cached per URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker


@lru_cache(maxsize=8)
def engine_for(url: str) -> sa.Engine:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30})
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(url, pool_pre_ping=True, pool_recycle=1800)


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
