"""The `falcon` command starts fast because each command imports only what it uses: loading the
CLI (what `falcon --help` does) must not pull in the database layer, Prefect or the cloud clients
(together ~3 s of imports; `python -X importtime -c 'import falcon.cli'` shows the rest)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "sqlalchemy",
    "alembic",
    "prefect",
    "google.cloud.container_v1",
    "google.cloud.compute_v1",
    "kubernetes",
)


def test_loading_the_cli_imports_no_database_prefect_or_cloud_client() -> None:
    probe = f"import sys, falcon.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
