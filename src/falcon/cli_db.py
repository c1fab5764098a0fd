"""The database unit of work of the ``falcon`` commands (tasks, clusters, warm-pool rules), and
how a command names a registered cluster."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from falcon.domain.model import Cluster


def database_url() -> str:
    from falcon.settings import get_settings

    return get_settings().resolved_database_url


@contextmanager
def database() -> Iterator[Session]:
    """One unit of work on the configured database.

    A database Falcon never migrated (a fresh SQLite file under FALCON_HOME, a new MySQL schema)
    is migrated first; one at an older revision is used as it is, with a hint on stderr: moving a
    shared database to a newer schema is `falcon db upgrade`'s job, done at rollout, not a side
    effect of `falcon task list` run with a newer falcon than the dispatcher's. Alembic is imported
    only when a migration runs."""
    from falcon.adapters.db.migrate import ensure_migrated
    from falcon.adapters.db.session import engine_for, session_scope

    url = database_url()
    try:
        if not ensure_migrated(url):
            typer.echo("falcon: the database schema is behind this falcon; run `falcon db upgrade`", err=True)
        with session_scope(url) as session:
            yield session
    finally:
        engine_for(url).dispose()  # closes the SQLite connection now: its WAL is checkpointed


def registered_cluster(clusters: Sequence[Cluster], wanted: str) -> Cluster:
    """The registered cluster of that id or name; a name two projects share must be given by id."""
    by_id = [c for c in clusters if c.id == wanted]
    matches = by_id or [c for c in clusters if c.name == wanted]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise typer.BadParameter(
            f"no registered cluster {wanted} (falcon cluster list)", param_hint="--cluster"
        )
    ids = ", ".join(f"{c.id} ({c.project}/{c.location})" for c in matches)
    raise typer.BadParameter(
        f"{len(matches)} clusters are named {wanted}; give the id: {ids}", param_hint="--cluster"
    )
