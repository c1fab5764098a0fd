"""``infra/``'s Grafana dashboard and Prometheus alert rules are built on Falcon's own metrics.

We test: every PromQL expression of the dashboard (panels and template variables) and of the
rules names only metrics Falcon registers (``_total``, ``_bucket``, ``_sum``, ``_count`` as
prometheus_client exposes them) and matches only labels those metrics have; the design's four
alerts are there; the rules file is valid Prometheus rule YAML (the schema checked here, and
``promtool check rules``: Debian's ``prometheus`` package, which ``make system-deps`` installs);
the dashboard uses the Prometheus datasource variable throughout.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from falcon.adapters import metrics

INFRA = Path(__file__).resolve().parents[2] / "infra"
DASHBOARD = INFRA / "grafana" / "falcon-dashboard.json"
RULES = INFRA / "prometheus" / "falcon-alerts.yaml"

_SUFFIXES: dict[type[MetricWrapperBase], tuple[str, ...]] = {
    Counter: ("_total",),
    Gauge: ("",),
    Histogram: ("_bucket", "_sum", "_count"),
}


def falcon_metrics() -> dict[str, set[str]]:
    """Every series name Falcon's collectors expose, with the label names a query may match."""
    exposed: dict[str, set[str]] = {}
    for collector in vars(metrics).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        name, labels = collector._name, set(collector._labelnames)
        for suffix in _SUFFIXES[type(collector)]:
            exposed[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return exposed


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_OFFSET = re.compile(r"\boffset\s+-?\w+")
_KEYWORDS = {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left", "group_right"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    aggregations, keywords, label names or durations."""
    text = _OFFSET.sub(" ", _GROUPING.sub(" ", _RANGES.sub(" ", _STRINGS.sub('""', expr))))
    text = re.sub(r"\{[^}]*\}", " ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        following = text[match.end() :].lstrip()
        word = match.group()
        if (
            following.startswith("(")
            or word.lower() in _KEYWORDS
            or text[match.start() - 1 : match.start()] == "$"
        ):
            continue
        names.add(word)
    return names


def label_matchers(expr: str) -> Iterator[tuple[str, set[str]]]:
    """(metric, label names matched) of each selector with braces."""
    for metric, body in _SELECTOR.findall(_STRINGS.sub('""', expr).replace('""', '"x"')):
        yield metric, set(_MATCHER.findall(body))


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in _panels(board["panels"]) for t in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["definition"])
            assert found, f"variable {variable['name']}: {variable['definition']}"
            queries.append(found.group(1))
    return queries


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


ALL_QUERIES = [*dashboard_queries(), *(rule["expr"] for rule in rules())]


def test_the_parser_finds_metric_names_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, cluster) (rate(a_bucket{x="y", z=~"$c"}[$__rate_interval])))'
        " / on (cluster) group_left b_total > 0 unless c offset 5m"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}
    assert list(label_matchers(expr)) == [("a_bucket", {"x", "z"})]


@pytest.mark.parametrize("expr", ALL_QUERIES)
def test_every_query_names_only_falcons_metrics_and_their_labels(expr: str) -> None:
    exposed = falcon_metrics()
    names = metric_names(expr)
    assert names, f"no metric in {expr!r}"
    assert names <= set(exposed), f"not Falcon's: {names - set(exposed)}"
    for metric, matched in label_matchers(expr):
        assert matched <= exposed[metric], f"{metric} has no label {matched - exposed[metric]}"


def test_the_dashboard_shows_every_metric_of_the_issue() -> None:
    shown = set().union(*(metric_names(e) for e in dashboard_queries()))
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in shown}
    assert {
        "falcon_task_latency_seconds",
        "falcon_task_phase_seconds",
        "falcon_task_run_seconds",
        "falcon_task_outcomes",
        "falcon_queue_waiting_tasks",
        "falcon_queue_acquiring",
        "falcon_cluster_running_jobs",
        "falcon_reservation_free_nodes",
        "falcon_node_pools",
        "falcon_node_pool_reuses",
        "falcon_api_calls",
        "falcon_api_errors",
    } <= families


def test_every_panel_reads_the_prometheus_datasource_variable() -> None:
    board = json.loads(DASHBOARD.read_text())
    [variable] = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus"
    for panel in _panels(board["panels"]):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


def test_the_designs_alerts_are_defined() -> None:
    assert {rule["alert"] for rule in rules()} == {
        "FalconTaskFailureRateHigh",
        "FalconQueueStuck",
        "FalconReservationExhausted",
        "FalconOrphanNodePool",
    }


def test_the_rules_follow_prometheus_rule_schema() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "limit", "rules"} and group["name"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert rule["labels"]["severity"] in {"warning", "critical"}
            assert {"summary", "description"} <= set(rule["annotations"])
            assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s"))


def test_promtool_accepts_the_rules() -> None:
    checked = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
