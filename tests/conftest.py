"""Shared fixtures: a database URL for SQLite and for a throwaway MariaDB, and the Prefect harness.

MariaDB is started once per session by pytest-mysql (see shared/reference/mysql-in-tests.md for
its quirks: root authenticates over the unix socket only). Each test gets a fresh schema.
"""

from __future__ import annotations

import random
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from pytest_mysql import factories

from falcon.adapters.db.migrate import upgrade

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # makes the top-level flows/ package importable in tests

mysql_proc = factories.mysql_proc(
    mysqld_exec=Path("/usr/sbin/mariadbd"), install_db="mariadb-install-db", admin_executable="mariadb-admin"
)


def mysql_url(proc: object, database: str) -> str:
    return f"mysql+pymysql://root@localhost/{database}?unix_socket={proc.unixsocket}"  # type: ignore[attr-defined]


@pytest.fixture(params=["sqlite", "mysql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty Falcon database: SQLite file, then a fresh MariaDB schema."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'falcon.db'}"
    else:
        url = new_mysql_database(request.getfixturevalue("mysql_proc"))
    upgrade(url)
    yield url


def new_mysql_database(proc: object) -> str:
    """A new, empty database (utf8mb4, as production) on the session's MariaDB; its URL."""
    name = f"falcon_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(mysql_url(proc, "mysql"))
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
    admin.dispose()
    return mysql_url(proc, name)


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[None]:
    """One ephemeral Prefect server for the whole session (starting one costs ~10 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


# Libraries whose background threads draw from the global `random`: a websocket's keepalive ping
# payload (Prefect's events client keeps its websocket open, pinging, for the rest of a worker's
# session once a test ran a flow) and Prefect's retry jitter. Hypothesis checks that the global
# generator does not move while it draws an example, and warns (HypothesisDeprecationWarning)
# when such a ping lands in a draw of a later test in the same worker.
_DRAW_IN_THE_BACKGROUND = (
    "websockets.asyncio.connection",
    "websockets.client",
    "websockets.legacy.client",
    "websockets.legacy.protocol",
    "websockets.sync.connection",
    "prefect.utilities.math",
    "prefect._internal._observation_delivery",
)


@pytest.fixture(autouse=True)
def _background_threads_draw_their_own_random() -> None:
    """Gives each of those modules, once a test imported it, a generator of its own."""
    for name in _DRAW_IN_THE_BACKGROUND:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "random", None) is random:
            module.random = random.Random()  # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `slow` tests (the chaos run: minutes of one worker) first, so that they start at once
    instead of wherever collection order puts them; work stealing (`--dist worksteal`) spreads the
    rest of that worker's share over the others meanwhile."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
