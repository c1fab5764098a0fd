"""The `falcon` command starts fast because each command imports only what it uses: loading the
CLI (what `falcon --help` does) must not pull in the settings, the database layer, Prefect or the
cloud clients, and the database commands pull in neither Prefect nor the cloud clients, nor Alembic
once the schema is there (`python -X importtime -m falcon.cli task list` shows the rest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from falcon.adapters.db.migrate import (
    SchemaState,
    alembic_config,
    downgrade,
    head_revisions,
    revision_graph,
    schema_state,
    upgrade,
)
from falcon.adapters.db.session import engine_for

HEAVY = (
    "sqlalchemy",
    "alembic",
    "pydantic_settings",
    "prefect",
    "google.cloud",
    "kubernetes",
)
NOT_FOR_THE_DATABASE_COMMANDS = (
    "alembic",
    "prefect",
    "prefect_gcp",
    "prefect_kubernetes",
    "google.cloud",
    "kubernetes",
)

# Runs one command the way the console script does and reports which of the given packages it loaded.
PROBE = """
import json, sys
from falcon.cli import app
watched = json.loads(sys.argv[1])
try:
    app(sys.argv[2:])
except SystemExit as done:
    code = done.code
else:
    code = 0
loaded = sorted({w for w in watched for m in sys.modules if m == w or m.startswith(w + ".")})
print("PROBE " + json.dumps({"code": code, "loaded": loaded}))
"""


def run_command(home: Path, *args: str) -> tuple[str, list[str]]:
    """`falcon ARGS` with FALCON_HOME=home and no other FALCON_/PREFECT_ variable: its output and
    the packages of NOT_FOR_THE_DATABASE_COMMANDS it imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FALCON_", "PREFECT_"))}
    env["FALCON_HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(NOT_FOR_THE_DATABASE_COMMANDS), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    output, _, report = done.stdout.rpartition("PROBE ")
    result = json.loads(report)
    assert result["code"] == 0, done.stdout + done.stderr
    return output, result["loaded"]


def test_loading_the_cli_imports_no_settings_database_prefect_or_cloud_client() -> None:
    probe = f"import sys, falcon.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_database_commands_migrate_a_fresh_database_then_import_no_prefect_cloud_or_alembic(
    tmp_path: Path,
) -> None:
    submit = ["task", "submit", "--actor", "a", "--name", "n", "--tpu-type", "v6e", "--topology", "2x4"]
    output, loaded = run_command(tmp_path, *submit, "--image", "i", "--id", "t-1", "--", "true")
    assert output.strip() == "t-1"
    assert loaded == ["alembic"]  # the fresh SQLite file was migrated, and only Alembic came for it
    assert schema_state(f"sqlite:///{tmp_path / 'falcon.db'}") is SchemaState.AT_HEAD

    outputs = {}
    for command in (("task", "list"), ("task", "show", "t-1"), ("cluster", "list")):
        outputs[command], loaded = run_command(tmp_path, *command)
        assert loaded == [], command
    assert outputs["task", "list"].startswith("t-1 ")
    assert json.loads(outputs["task", "show", "t-1"])["status"] == "Pending"
    assert outputs["cluster", "list"] == ""


def test_the_cheaply_read_head_is_alembics(tmp_path: Path) -> None:
    from alembic import util
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert head_revisions() == set(scripts.get_heads())
    assert revision_graph() == {
        s.revision: () if s.down_revision is None else tuple(util.to_tuple(s.down_revision))
        for s in scripts.walk_revisions()
    }

    url = f"sqlite:///{tmp_path / 'falcon.db'}"
    assert schema_state(url) is SchemaState.NEW
    upgrade(url)
    assert schema_state(url) is SchemaState.AT_HEAD
    (head,) = head_revisions()
    (previous,) = revision_graph()[head]
    downgrade(url, previous)
    assert schema_state(url) is SchemaState.BEHIND
    with engine_for(url).begin() as connection:  # as a newer Falcon would leave it
        connection.execute(sa.text("UPDATE alembic_version SET version_num = 'f1a0c0de9999'"))
    assert schema_state(url) is SchemaState.UNKNOWN
    with engine_for(url).begin() as connection:
        connection.execute(sa.text(f"UPDATE alembic_version SET version_num = '{previous}'"))
    downgrade(url, "base")
    assert schema_state(url) is SchemaState.NEW
