"""Run Alembic migrations for a database URL, with the scripts shipped inside the package.

Alembic is imported only when a migration runs: ``schema_state`` answers the everyday question
("is this database migrated?") with one query and a read of the revision ids in the version files.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from falcon.adapters.db.session import engine_for

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"  # Alembic's default, which env.py keeps

_REVISION_LINE = re.compile(
    r"""^(revision|down_revision)\s*(?::[^=]*)?=\s*(None|'[^']*'|"[^"]*"|\([^)]*\)|\[[^\]]*\])""",
    re.MULTILINE,
)


class SchemaState(StrEnum):
    NEW = "new"  # never migrated: no version table, or one without rows (downgraded to base)
    AT_HEAD = "at_head"
    BEHIND = "behind"  # at an older revision of these scripts
    UNKNOWN = "unknown"  # at a revision these scripts do not know (a newer Falcon migrated it)


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.set_main_option(
        "file_template",
        "%%(year)d_%%(month).2d_%%(day).2d_%%(hour).2d%%(minute).2d_%%(rev)s_%%(slug)s",
    )
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    _run(command.upgrade, url, revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    _run(command.downgrade, url, revision)


def _run(step: Callable[[Config, str], None], url: str, revision: str) -> None:
    """Migrate over Falcon's own engine (which creates a SQLite file's folder, sets its pragmas)."""
    cfg = alembic_config(url)
    with engine_for(url).begin() as connection:
        cfg.attributes["connection"] = connection
        step(cfg, revision)


def schema_state(url: str) -> SchemaState:
    """Where the database stands against the shipped scripts, without importing Alembic."""
    with engine_for(url).connect() as connection:
        if not sa.inspect(connection).has_table(VERSION_TABLE):
            return SchemaState.NEW
        current = set(connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars())
    if not current:
        return SchemaState.NEW
    if not current <= revision_graph().keys():
        return SchemaState.UNKNOWN
    return SchemaState.AT_HEAD if current == head_revisions() else SchemaState.BEHIND


def ensure_migrated(url: str) -> bool:
    """Migrate a database Falcon never migrated (a fresh SQLite file, a new schema); False when it
    is at an older revision, which is left as it is: moving a shared database to a newer schema
    is `falcon db upgrade`'s job at rollout, not a side effect of a command run by a newer falcon."""
    state = schema_state(url)
    if state is SchemaState.NEW:
        upgrade(url)
    return state is not SchemaState.BEHIND


@lru_cache(maxsize=1)
def revision_graph() -> dict[str, tuple[str, ...]]:
    """Each shipped revision id and the ids it revises, read from the scripts' ``revision`` and
    ``down_revision`` assignments, without importing them as Alembic does."""
    graph: dict[str, tuple[str, ...]] = {}
    for script in sorted((MIGRATIONS / "versions").glob("*.py")):
        text = script.read_text(encoding="utf-8")
        values = {m[1]: m[2] for m in _REVISION_LINE.finditer(text)}
        if "revision" not in values:
            continue
        down = ast.literal_eval(values.get("down_revision", "None"))
        graph[ast.literal_eval(values["revision"])] = (
            () if down is None else (down,) if isinstance(down, str) else tuple(down)
        )
    return graph


def head_revisions() -> frozenset[str]:
    """The revisions no other revision revises (one, unless two branches await a merge)."""
    graph = revision_graph()
    revised = {parent for parents in graph.values() for parent in parents}
    return frozenset(graph.keys() - revised)
