"""`falcon cluster add --zone`: a TPU slice lives in one zone, so every cluster has a node zone."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from click.testing import Result
from typer.testing import CliRunner

from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.cli import app
from falcon.settings import get_settings

# --no-check: these are about the row; a machine with real credentials would otherwise ask Google.
BASE = ["cluster", "add", "edge-a", "--no-check", "--project", "p", "--tpu-type", "v6e", "--gcs-bucket", "b"]


@pytest.fixture
def falcon(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Result]]:
    monkeypatch.setenv("FALCON_DATABASE_URL", db_url)
    get_settings.cache_clear()
    runner = CliRunner()
    yield lambda *args: runner.invoke(app, list(args))
    get_settings.cache_clear()


def node_zone(db_url: str) -> tuple[str | None, str]:
    with session_scope(db_url) as s:
        (cluster,) = repo.list_clusters(s)
    return cluster.zone, cluster.node_zone


@pytest.mark.parametrize(
    ("args", "stored"),
    [
        pytest.param(
            ["--location", "us-east5", "--zone", "us-east5-b"], ("us-east5-b", "us-east5-b"), id="region"
        ),
        pytest.param(
            ["--location", "us-east5", "--reservation-zone", "us-east5-c"],
            ("us-east5-c", "us-east5-c"),
            id="--reservation-zone is the same option",
        ),
        pytest.param(
            ["--location", "us-east5-a"], ("us-east5-a", "us-east5-a"), id="zonal: defaults to itself"
        ),
        pytest.param(
            ["--location", "us-east5-a", "--zone", "us-east5-b"],
            ("us-east5-b", "us-east5-b"),
            id="zonal with another node location of its region",
        ),
    ],
)
def test_the_node_zone_is_stored(
    falcon: Callable[..., Result], db_url: str, args: list[str], stored: tuple[str, str]
) -> None:
    result = falcon(*BASE, *args)
    assert result.exit_code == 0, result.output
    assert node_zone(db_url) == stored
    assert f"zone={stored[0]}" in falcon("cluster", "list").output


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        pytest.param(
            ["--location", "us-east5"], "us-east5 is a region: name the node zone", id="region, no zone"
        ),
        pytest.param(
            ["--location", "us-east5", "--zone", "us-central1-a"],
            "us-central1-a is not a zone of us-east5",
            id="zone of another region",
        ),
        pytest.param(
            ["--location", "us-east5", "--zone", "us-east5"], "us-east5 is not a zone", id="region as zone"
        ),
        pytest.param(
            ["--location", "us-east5-a", "--reservation", "projects/p/res"],
            "is neither NAME nor projects/OWNER/reservations/NAME",
            id="malformed reservation",
        ),
    ],
)
def test_an_impossible_zone_or_reservation_is_a_usage_error(
    falcon: Callable[..., Result], db_url: str, args: list[str], problem: str
) -> None:
    result = falcon(*BASE, *args)
    assert result.exit_code == 2
    assert problem in " ".join(result.output.replace("│", " ").split())  # rich wraps it in a box
    with session_scope(db_url) as s:
        assert repo.list_clusters(s) == []


def test_a_shared_reservation_is_stored_as_given(falcon: Callable[..., Result], db_url: str) -> None:
    shared = "projects/owner-p/reservations/res-1"
    result = falcon(*BASE, "--location", "us-east5", "--zone", "us-east5-b", "--reservation", shared)
    assert result.exit_code == 0, result.output
    with session_scope(db_url) as s:
        (cluster,) = repo.list_clusters(s)
    assert cluster.default_reservation == shared
