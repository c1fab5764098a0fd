"""`falcon demo`, the README's first command, as a user runs it: a real `prefect server`, the
deployments served by `falcon local` (run_deployment, one process per flow run), the emulator,
and sample rows inserted into the job table that must all reach Succeeded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.integration.harness import ROOT


def test_the_demo_runs_sample_tasks_to_succeeded_through_served_deployments(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "FALCON_"))}
    env["FALCON_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "falcon.cli", "demo", "--tasks", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    final = done.stdout.split("all tasks finished")[0].strip().split("\n\n")[-1]
    assert final.count("Succeeded") == 3, final
    assert "node pools created" in done.stdout and "remaining none" in done.stdout  # all pools deleted
    logs = list((tmp_path / "home" / "demo" / "emulator" / "gcs").rglob("*.log"))
    assert len(logs) >= 3  # every task's pods wrote their log to the emulated bucket
