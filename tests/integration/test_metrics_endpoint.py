"""The dispatcher's ``/metrics`` after real runs (issue 11): real Prefect flow runs, the real
adapters against the emulator, the HTTP endpoint the dispatcher serves, on SQLite and MariaDB.

We test: a task run to Succeeded shows each move of its lifecycle once, its outcome, its
latencies from the insert, a node-pool creation and the GKE and Kubernetes calls it made; a row
intake ends and a task picked show their moves and outcome by Reason. The collectors are
process-wide, so each test reads the difference between a scrape before and one after.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from falcon.adapters.health import serving_health
from falcon.services.context import Services
from falcon.services.health import Verdict
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, Driver, submit

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
Scrape = Callable[[], Samples]


@pytest.fixture
def scrape() -> Iterator[Scrape]:
    """GET /metrics from the health server the dispatcher runs, parsed into samples."""
    healthy = Verdict(True, {})
    with serving_health(0, lambda: healthy, lambda: healthy) as port:

        def read() -> Samples:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                text = answer.read().decode()
            return {
                (s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }

        yield read


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


def moves(before: Samples, after: Samples, *path: tuple[str, str]) -> list[float]:
    on = {"cluster": CLUSTER.name, "topology": "2x4"}
    return [
        delta(before, after, "falcon_task_transitions_total", **on, **{"from": a, "to": b}) for a, b in path
    ]


def test_a_succeeded_task_shows_its_lifecycle_outcome_and_calls(
    services: Services, db_url: str, emulator: EmulatorServer, scrape: Scrape
) -> None:
    before = scrape()
    submit(db_url, "t-metrics", "alice", "2x4")
    driver = Driver(services)
    driver.run_until_done(["t-metrics"])
    driver.close()  # a move is counted after its row commits: let the release run finish first
    after = scrape()
    on = {"cluster": CLUSTER.name, "topology": "2x4"}
    assert moves(
        before,
        after,
        ("acquiring", "dispatched"),
        ("dispatched", "running"),
        ("running", "releasing"),
        ("releasing", "done"),
    ) == [1, 1, 1, 1]
    assert delta(before, after, "falcon_task_outcomes_total", **on, status="Succeeded", reason="") == 1
    for milestone in ("dispatched", "running"):
        assert delta(before, after, "falcon_task_latency_seconds_count", **on, milestone=milestone) == 1
    assert delta(before, after, "falcon_task_run_seconds_count", **on, status="Succeeded") == 1
    assert delta(before, after, "falcon_task_duration_seconds_count", **on, status="Succeeded") == 1
    created = delta(before, after, "falcon_node_pool_creations_total", **on, decision="flex_start")
    reserved = delta(before, after, "falcon_node_pool_creations_total", **on, decision="reservation")
    assert created + reserved == 1
    assert (
        delta(before, after, "falcon_api_calls_total", api="gke", call="create_node_pool", outcome="ok") == 1
    )
    assert (
        delta(before, after, "falcon_api_calls_total", api="kubernetes", call="create_job", outcome="ok") == 1
    )


def test_intake_and_picks_show_their_moves_and_outcomes_by_reason(
    services: Services, db_url: str, emulator: EmulatorServer, scrape: Scrape
) -> None:
    before = scrape()
    submit(db_url, "t-picked", "alice", "2x4")
    submit(db_url, "t-invalid", "bob", "3x3")  # no such v6e slice: InvalidSpec at intake
    Driver(services).run_until_done(["t-picked", "t-invalid"])
    after = scrape()
    assert moves(before, after, ("new", "waiting"), ("waiting", "acquiring")) == [1, 1]
    failed = {"cluster": "", "topology": "", "status": "Failed", "reason": "InvalidSpec"}
    assert delta(before, after, "falcon_task_outcomes_total", **failed) == 1
    on = {"cluster": CLUSTER.name, "topology": "2x4"}
    assert delta(before, after, "falcon_task_latency_seconds_count", **on, milestone="waiting") == 1
