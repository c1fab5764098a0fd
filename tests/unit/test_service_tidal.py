"""The TidalScheduler controller loop (oFEP-0033 §2, §3, §7) on in-memory clusters and a fake clock.

We test: a fire is patched into status at its scheduled second (the heap wakes the loop then, not
a poll); a spec change is evaluated at once while the controller's own status echoes cost no
call; a deleted object is forgotten with its pending wake; a restarted controller applies the
latest missed fire once; a failing cluster is retried without holding up another; scale mode
patches /scale at a fire (per object or for all) only when replicas differ, and a failed scale
leaves the fire to be retried; a missing target is looked for again; clusters leaving the registry
are dropped; the follower relists after 410 Gone; the metrics reach /metrics.
"""

from __future__ import annotations

import copy
import logging
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from tests.unit.fakes import FakeClock, cluster

from falcon.adapters.health import serving_health
from falcon.adapters.metrics import PrometheusTidalMetrics
from falcon.domain.errors import NotFoundError, TemporaryError
from falcon.domain.model import Cluster, ClusterStatus
from falcon.domain.tidal import SCALE_ANNOTATION, ResourceVersionGone, TargetRef, WatchEvent
from falcon.services.health import Verdict
from falcon.services.tidal import (
    Event,
    Listed,
    TidalConfig,
    TidalController,
    Watched,
    follow,
)

NINE = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
DAILY_NINE = "CRON_TZ=UTC 0 0 9 * * *"
LOG = logging.getLogger("test.tidal")


class FakeTidalCluster:
    """One cluster's TidalSchedulers and Deployments; records every status patch (with the clock's
    time) and /scale patch; ``failing`` makes every call raise it."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.objects: dict[str, dict[str, Any]] = {}
        self.deployments: dict[tuple[str, str], int] = {}
        self.patches: list[tuple[str, datetime, dict[str, Any]]] = []
        self.scales: list[tuple[str, int]] = []
        self.calls = 0
        self.failing: Exception | None = None
        self.failing_scale: Exception | None = None
        self.watches: list[list[WatchEvent | Exception]] = []
        self.watched_from: list[str] = []

    def add(
        self, name: str, rules: list[dict[str, Any]], generation: int = 1, **metadata: Any
    ) -> dict[str, Any]:
        self.deployments.setdefault(("production", "web"), 1)
        obj = {
            "apiVersion": "scheduling.tidal.io/v1alpha1",
            "kind": "TidalScheduler",
            "metadata": {"name": name, "namespace": "production", "generation": generation, **metadata},
            "spec": {
                "targetRef": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "namespace": "production",
                },
                "triggers": {"times": {"rules": rules}},
            },
        }
        self.objects[f"production/{name}"] = obj
        return copy.deepcopy(obj)

    def _call(self) -> None:
        self.calls += 1
        if self.failing is not None:
            raise self.failing

    def list(self) -> tuple[list[Mapping[str, Any]], str]:
        self._call()
        return [copy.deepcopy(o) for o in self.objects.values()], "7"

    def watch(self, resource_version: str, stop: threading.Event) -> Iterator[WatchEvent]:
        self._call()
        self.watched_from.append(resource_version)
        if not self.watches:
            stop.set()
            return
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self._call()
        self.objects[f"{namespace}/{name}"]["status"] = copy.deepcopy(dict(status))
        self.patches.append((f"{namespace}/{name}", self.clock.now(), copy.deepcopy(dict(status))))

    def target_exists(self, target: TargetRef) -> bool:
        self._call()
        return (target.namespace, target.name) in self.deployments

    def replicas(self, target: TargetRef) -> int:
        self._call()
        return self.deployments[target.namespace, target.name]

    def scale(self, target: TargetRef, replicas: int) -> None:
        self._call()
        if self.failing_scale is not None:
            raise self.failing_scale
        self.deployments[target.namespace, target.name] = replicas
        self.scales.append((f"{target.namespace}/{target.name}", replicas))


class RecordingMetrics:
    def __init__(self) -> None:
        self.fires: list[tuple[str, float, bool]] = []
        self.invalid_objects: list[tuple[str, str]] = []
        self.counts: dict[str, int] = {}

    def fired(self, cluster: str, lag_seconds: float, conflict: bool) -> None:
        self.fires.append((cluster, lag_seconds, conflict))

    def invalid(self, cluster: str, reason: str) -> None:
        self.invalid_objects.append((cluster, reason))

    def objects(self, cluster: str, count: int) -> None:
        self.counts[cluster] = count


class Harness:
    """A controller whose evaluations run inline (their results still come back through its queue)
    and whose followers are not started: the test feeds the watch events itself."""

    def __init__(self, clusters: list[Cluster], now: datetime = NINE, **config: Any) -> None:
        self.clock = FakeClock(now)
        self.registry = clusters
        self.apis = {c.id: FakeTidalCluster(self.clock) for c in clusters}
        self.metrics = RecordingMetrics()
        self.followers: list[str] = []
        # An hour of catch-up: yesterday's fires stay out of the tests that are not about catch-up.
        settings = {"catch_up": timedelta(hours=1), "scale_all": False, "retry_seconds": 30.0}
        self.controller = TidalController(
            lambda: self.registry,
            lambda c: self.apis[c.id],
            self.clock,
            TidalConfig(**{**settings, "cluster_refresh_seconds": 60.0, **config}),
            self.metrics,
            LOG,
            submit=lambda _cluster, work: work(),
            spawn=lambda _work, name: self.followers.append(name),
        )
        self.controller.sync_clusters()

    def api(self, cluster_id: str = "c1") -> FakeTidalCluster:
        return self.apis[cluster_id]

    def feed(self, event: Event) -> None:
        self.controller.handle(event)
        self.controller.drain(0)

    def list_all(self) -> None:
        for cluster_id, api in self.apis.items():
            self.feed(Listed(cluster_id, api.list()[0]))

    def advance_to(self, instant: datetime) -> datetime | None:
        """Move the clock to ``instant`` and let the loop do what is due; the next wake."""
        self.clock.advance((instant - self.clock.now()).total_seconds())
        wake = self.controller.run_due()
        self.controller.drain(0)
        return self.controller.run_due() if wake is None else wake


def fires(api: FakeTidalCluster) -> list[tuple[str, datetime, str | None]]:
    """(object, patch time, lastTriggerTime) of each status patch that applied a fire."""
    seen: dict[str, str | None] = {}
    applied = []
    for key, when, status in api.patches:
        if status.get("lastTriggerTime") != seen.get(key):
            applied.append((key, when, status.get("lastTriggerTime")))
        seen[key] = status.get("lastTriggerTime")
    return applied


def test_a_fire_is_patched_at_its_scheduled_second_and_the_loop_then_sleeps_until_the_next() -> None:
    h = Harness([cluster("c1")], now=NINE - timedelta(seconds=1))
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])

    h.list_all()
    assert h.api().patches[0][2]["nextTriggerTime"] == "2026-03-02T09:00:00Z"
    assert h.controller.run_due() == NINE  # the heap holds the fire: the loop sleeps until then
    next_wake = h.advance_to(NINE)

    assert fires(h.api()) == [("production/web-tide", NINE, "2026-03-02T09:00:00Z")]
    assert h.api().objects["production/web-tide"]["status"]["desiredReplicas"] == 4
    assert next_wake == NINE + timedelta(days=1)
    assert h.metrics.fires == [("edge-c1", 0.0, False)]


def test_a_spec_change_is_evaluated_at_once_and_the_controllers_own_status_echo_costs_nothing() -> None:
    h = Harness([cluster("c1")], now=NINE + timedelta(minutes=5))
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.list_all()
    echo = h.api().objects["production/web-tide"]
    calls = h.api().calls

    h.feed(Watched("c1", "MODIFIED", copy.deepcopy(echo)))
    assert h.api().calls == calls

    edited = h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 9}], generation=2)
    h.feed(Watched("c1", "MODIFIED", edited))
    status = h.api().objects["production/web-tide"]["status"]
    assert (status["desiredReplicas"], status["observedGeneration"]) == (9, 2)


def test_a_change_arriving_while_an_evaluation_is_out_is_evaluated_when_it_is_back() -> None:
    h = Harness([cluster("c1")], now=NINE + timedelta(minutes=5))
    first = h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.controller.handle(Listed("c1", [first]))  # evaluated; its result waits in the queue
    edited = h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 6}], generation=2)
    h.controller.handle(Watched("c1", "MODIFIED", edited))
    assert [s["desiredReplicas"] for _, _, s in h.api().patches] == [4]

    h.controller.drain(0)
    assert [s["desiredReplicas"] for _, _, s in h.api().patches] == [4, 6]


def test_a_deleted_object_is_forgotten_with_its_pending_wake() -> None:
    h = Harness([cluster("c1")], now=NINE - timedelta(minutes=1))
    obj = h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.list_all()
    patched = len(h.api().patches)

    h.feed(Watched("c1", "DELETED", obj))
    h.advance_to(NINE)

    assert len(h.api().patches) == patched
    assert h.metrics.counts == {"edge-c1": 0}


def test_a_restarted_controller_applies_the_latest_missed_fire_once() -> None:
    rules = [
        {"name": "peak", "cron": DAILY_NINE, "replicas": 9},
        {"name": "calm", "cron": "CRON_TZ=UTC 0 0 10 * * *", "replicas": 2},
    ]
    h = Harness([cluster("c1")], now=NINE + timedelta(hours=3), catch_up=timedelta(days=1))
    h.api().add("web-tide", rules)
    h.api().objects["production/web-tide"]["status"] = {
        "desiredReplicas": 9,
        "activeRule": "peak",
        "lastTriggerTime": "2026-03-01T09:00:00Z",
        "lastTriggeredRule": "peak",
    }

    h.list_all()
    h.list_all()  # a relist (after a 410) finds nothing new to do

    assert fires(h.api()) == [("production/web-tide", NINE + timedelta(hours=3), "2026-03-02T10:00:00Z")]
    assert h.api().objects["production/web-tide"]["status"]["desiredReplicas"] == 2
    assert h.metrics.fires == [("edge-c1", 7200.0, False)]


def test_a_failing_cluster_is_retried_later_and_does_not_hold_up_another() -> None:
    h = Harness([cluster("c1"), cluster("c2")], now=NINE - timedelta(seconds=1))
    for api in h.apis.values():
        api.add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.list_all()
    h.api("c1").failing = TemporaryError("503 from c1's API server")

    h.advance_to(NINE)
    assert fires(h.api("c2")) == [("production/web-tide", NINE, "2026-03-02T09:00:00Z")]
    assert fires(h.api("c1")) == []

    h.api("c1").failing = None
    h.advance_to(NINE + timedelta(seconds=30))
    assert fires(h.api("c1")) == [
        ("production/web-tide", NINE + timedelta(seconds=30), "2026-03-02T09:00:00Z")
    ]


def test_a_failed_evaluation_is_tried_again_within_a_second_then_less_and_less_often() -> None:
    """A connection the API server closed under a reused socket costs the fire half a second, not
    the 30 s of FALCON_TIDAL_RETRY_SECONDS; a cluster that keeps failing is asked less often."""
    h = Harness([cluster("c1")], now=NINE - timedelta(seconds=1))
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.list_all()
    h.api().failing = TemporaryError("connection reset by peer")
    wakes = [h.advance_to(NINE)]
    for _ in range(8):
        wakes.append(h.advance_to(wakes[-1]))  # type: ignore[arg-type]
    gaps = [(b - a).total_seconds() for a, b in pairwise([NINE, *wakes])]  # type: ignore[list-item]
    assert gaps == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]

    h = Harness([cluster("c1")], now=NINE - timedelta(seconds=1))
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.list_all()
    h.api().failing = TemporaryError("connection reset by peer")
    retry = h.advance_to(NINE)
    h.api().failing = None
    h.advance_to(retry)  # type: ignore[arg-type]
    assert fires(h.api()) == [("production/web-tide", NINE + timedelta(seconds=0.5), "2026-03-02T09:00:00Z")]


@pytest.mark.parametrize(
    ("annotations", "scale_all", "scaled"),
    [({SCALE_ANNOTATION: "true"}, False, True), ({}, True, True), ({}, False, False)],
    ids=["annotated object", "controller setting", "status only"],
)
def test_scale_mode_patches_the_targets_scale_at_a_fire(
    annotations: dict[str, str], scale_all: bool, scaled: bool
) -> None:
    h = Harness([cluster("c1")], now=NINE - timedelta(seconds=1), scale_all=scale_all)
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}], annotations=annotations)
    h.list_all()
    assert h.api().scales == []  # no fire yet, nothing to scale to

    h.advance_to(NINE)

    assert h.api().scales == ([("production/web", 4)] if scaled else [])
    assert h.api().deployments["production", "web"] == (4 if scaled else 1)


def test_scale_mode_leaves_a_target_already_at_the_replicas_alone() -> None:
    h = Harness([cluster("c1")], now=NINE - timedelta(seconds=1), scale_all=True)
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.api().deployments["production", "web"] = 4
    h.list_all()
    h.advance_to(NINE)
    assert h.api().scales == [] and len(fires(h.api())) == 1


def test_a_failed_scale_leaves_the_fire_to_be_retried() -> None:
    h = Harness([cluster("c1")], now=NINE - timedelta(seconds=1), scale_all=True)
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.list_all()
    h.api().failing_scale = TemporaryError("409 on /scale")

    h.advance_to(NINE)
    assert fires(h.api()) == []

    h.api().failing_scale = None
    h.advance_to(NINE + timedelta(seconds=30))
    assert h.api().scales == [("production/web", 4)]
    assert fires(h.api()) == [("production/web-tide", NINE + timedelta(seconds=30), "2026-03-02T09:00:00Z")]


def test_a_missing_target_is_looked_for_again_and_counted_once() -> None:
    h = Harness([cluster("c1")], now=NINE + timedelta(minutes=1))
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    del h.api().deployments["production", "web"]
    h.list_all()
    ready = h.api().objects["production/web-tide"]["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "TargetNotFound")

    h.advance_to(NINE + timedelta(minutes=1, seconds=30))  # still missing
    h.api().deployments["production", "web"] = 1
    h.advance_to(NINE + timedelta(minutes=2))

    ready = h.api().objects["production/web-tide"]["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("True", "TriggerActive")
    assert h.metrics.invalid_objects == [("edge-c1", "TargetNotFound")]


def test_clusters_leaving_the_registry_are_dropped_and_new_ones_followed() -> None:
    h = Harness([cluster("c1")])
    h.api().add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    h.list_all()
    assert h.followers == ["tidal-watch-edge-c1"]

    h.registry = [cluster("c1", status=ClusterStatus.MAINTENANCE), cluster("c2")]
    h.apis["c2"] = FakeTidalCluster(h.clock)
    h.controller.sync_clusters()
    calls = h.api("c1").calls
    h.feed(Listed("c1", h.api("c1").list()[0]))  # a straggler from the dropped follower

    assert h.followers == ["tidal-watch-edge-c1", "tidal-watch-edge-c2"]
    assert h.metrics.counts["edge-c1"] == 0
    assert h.api("c1").calls == calls + 1  # only the list above: nothing evaluated


def test_the_follower_lists_watches_and_lists_again_after_410_gone() -> None:
    clock = FakeClock(NINE)
    api = FakeTidalCluster(clock)
    obj = api.add("web-tide", [{"name": "nine", "cron": DAILY_NINE, "replicas": 4}])
    changed = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "9"}}
    api.watches = [
        [("MODIFIED", changed), ("BOOKMARK", {"metadata": {"resourceVersion": "12"}})],
        [ResourceVersionGone("resourceVersion 12 is too old")],
    ]
    events: list[Event] = []

    follow(cluster("c1"), lambda _c: api, events.append, threading.Event(), 0.0, LOG)

    assert [type(e).__name__ for e in events] == ["Listed", "Watched", "Listed"]
    assert api.watched_from == ["7", "12", "7"]  # resumed from the bookmark; after the 410, from the list


def test_a_cluster_without_the_crd_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(NINE)
    api = FakeTidalCluster(clock)
    api.failing = NotFoundError("the server could not find the requested resource")
    stop = threading.Event()
    tries = iter(range(3))

    def objects_of(_cluster: Cluster) -> FakeTidalCluster:
        if next(tries, None) is None:
            stop.set()
        return api

    with caplog.at_level(logging.DEBUG, logger=LOG.name):
        follow(cluster("c1"), objects_of, lambda _event: None, stop, 0.0, LOG)

    told = [(r.levelno, r.getMessage().split()[0]) for r in caplog.records]
    assert (
        told
        == [(logging.WARNING, "event=tidal_crd_missing")] + [(logging.DEBUG, "event=tidal_crd_missing")] * 3
    )


def test_the_loop_reports_live_only_while_it_turns() -> None:
    h = Harness([cluster("c1")])
    h.controller.last_beat = h.clock.monotonic()
    assert h.controller.liveness(120.0) == Verdict(True, {"loop": "ok"})
    h.clock.advance(121)
    assert not h.controller.liveness(120.0).healthy


def test_the_metrics_are_served_on_the_health_servers_metrics_route() -> None:
    metrics = PrometheusTidalMetrics()
    metrics.fired("metrics-probe", 0.2, conflict=True)
    metrics.invalid("metrics-probe", "InvalidCron")
    metrics.objects("metrics-probe", 3)
    ok = Verdict(True, {})
    with (
        serving_health(0, lambda: ok, lambda: ok) as port,
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response,
    ):
        text = response.read().decode()
    assert 'falcon_tidal_fires_total{cluster="metrics-probe"} 1.0' in text
    assert 'falcon_tidal_conflicts_total{cluster="metrics-probe"} 1.0' in text
    assert 'falcon_tidal_validation_failures_total{cluster="metrics-probe",reason="InvalidCron"} 1.0' in text
    assert 'falcon_tidal_objects{cluster="metrics-probe"} 3.0' in text
    assert "falcon_tidal_fire_lag_seconds_bucket" in text
