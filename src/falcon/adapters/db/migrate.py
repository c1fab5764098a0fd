"""Run Alembic migrations for a database URL, with the scripts shipped inside the package."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config

from falcon.adapters.db.session import engine_for

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.set_main_option(
        "file_template",
        "%%(year)d_%%(month).2d_%%(day).2d_%%(hour).2d%%(minute).2d_%%(rev)s_%%(slug)s",
    )
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    _run(command.upgrade, url, revision)


def downgrade(url: str, revision: str) -> None:
    _run(command.downgrade, url, revision)


def _run(step: Callable[[Config, str], None], url: str, revision: str) -> None:
    """Migrate over Falcon's own engine (which creates a SQLite file's folder, sets its pragmas)."""
    cfg = alembic_config(url)
    with engine_for(url).begin() as connection:
        cfg.attributes["connection"] = connection
        step(cfg, revision)
