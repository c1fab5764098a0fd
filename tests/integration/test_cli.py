"""The `falcon` command against a real database: registry, submission as upstream does it, abort."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from falcon.cli import app
from falcon.settings import get_settings


@pytest.fixture
def falcon(db_url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FALCON_DATABASE_URL", db_url)
    get_settings.cache_clear()
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    yield run
    get_settings.cache_clear()


def test_clusters_are_registered_once_and_listed(falcon) -> None:  # type: ignore[no-untyped-def]
    args = [
        "cluster",
        "add",
        "edge-a",
        "--no-check",  # about the row; real credentials would otherwise ask Google
        "--project",
        "p",
        "--location",
        "us-east5",
        "--tpu-type",
        "v6e",
        "--gcs-bucket",
        "b",
        "--reservation",
        "res-1",
        "--reservation-zone",
        "us-east5-b",
    ]
    assert "registered" in falcon(*args)
    assert "already registered" in falcon(*args)
    listing = falcon("cluster", "list")
    assert "p/us-east5/edge-a" in listing and "reservation=res-1" in listing


def test_a_submitted_task_is_a_pending_row_with_its_spec_and_can_be_aborted(falcon) -> None:  # type: ignore[no-untyped-def]
    task_id = falcon(
        "task",
        "submit",
        "--actor",
        "alice",
        "--name",
        "probe",
        "--tpu-type",
        "v6e",
        "--topology",
        "2x4",
        "--image",
        "img:1",
        "--timeout",
        "60",
        "--env",
        "A=1",
        "--id",
        "t-cli",
        "--",
        "python",
        "-c",
        "print(1)",
    ).strip()
    assert task_id == "t-cli"
    shown = json.loads(falcon("task", "show", "t-cli"))
    assert shown["status"] == "Pending" and shown["reason"] is None
    assert shown["spec"] == {
        "image": "img:1",
        "command": ["python", "-c", "print(1)"],
        "args": [],
        "env": {"A": "1"},
        "topology": "2x4",
    }
    assert "t-cli" in falcon("task", "list")
    assert "abort requested" in falcon("task", "abort", "t-cli")
    assert json.loads(falcon("task", "show", "t-cli"))["status"] == "Aborting"
    assert "is not active" in falcon("task", "abort", "t-cli")
