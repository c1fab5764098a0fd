"""The TidalScheduler controller against the emulator over HTTP, wired as production wires it.

The CRD is installed through the apiextensions API as kubectl would; the controller follows the
registered cluster by list and watch in a thread of the test. We test: a fire reaches status within
a second of its scheduled second; a spec change takes effect without a restart; an invalid rule
makes the object Ready=False; a deleted object is forgotten; scale mode patches the Deployment's
/scale; a restarted controller catches up on the fire it missed.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from prometheus_client import REGISTRY

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.session import session_scope
from falcon.adapters.tidal_k8s import TidalKubernetes
from falcon.bootstrap import Gateways, build_tidal_controller
from falcon.domain.tidal import SCALE_ANNOTATION, TargetRef, rfc3339
from falcon.local import free_port
from falcon.settings import Settings, get_settings
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, ROOT

LOG = logging.getLogger("test.tidal")
EVERY_2_SECONDS = "CRON_TZ=UTC */2 * * * * *"
WEB = TargetRef("apps/v1", "Deployment", "web", "production")


@pytest.fixture
def settings(emulator: EmulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Settings for a registry (SQLite) holding the emulated cluster edge-a, short watches and retries."""
    url = f"sqlite:///{tmp_path / 'falcon.db'}"
    upgrade(url)
    with session_scope(url) as session:
        repo.add_cluster(session, CLUSTER, utc_now())
    for name, value in {
        "FALCON_DATABASE_URL": url,
        "FALCON_EMULATOR_URL": emulator.url,
        "FALCON_TIDAL_WATCH_SECONDS": "2",
        "FALCON_TIDAL_RETRY_SECONDS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def install_tidal(settings: Settings, crd: bool = True) -> k8s.ApiClient:
    """The CRD from infra/ (unless ``crd`` is False), the namespace ``production`` and its
    Deployment ``web`` at 1 replica."""
    api = Gateways(settings).kubernetes_api(CLUSTER)
    if crd:
        definition = yaml.safe_load((ROOT / "infra/tidal-scheduler/crd.yaml").read_text())
        k8s.ApiextensionsV1Api(api).create_custom_resource_definition(definition)
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="production")))
    labels = {"app": "web"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "production"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            },
        },
    }
    k8s.AppsV1Api(api).create_namespaced_deployment("production", deployment)  # type: ignore[arg-type]
    return api


def tidal_object(
    name: str, rules: list[dict[str, Any]], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.tidal.io/v1alpha1",
        "kind": "TidalScheduler",
        "metadata": {"name": name, "namespace": "production", "annotations": annotations or {}},
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


@contextmanager
def controller_running(settings: Settings) -> Iterator[None]:
    """The controller as the flow builds it, looping in a thread until the block ends."""
    controller, workers = build_tidal_controller(settings, LOG)
    thread = threading.Thread(target=controller.run, args=(60.0,), name="tidal-controller", daemon=True)
    thread.start()
    try:
        yield
    finally:
        controller.stop.set()
        thread.join(5)
        workers.close()
        assert not thread.is_alive()


def wait_for(what: Callable[[], Any], seconds: float = 5.0) -> Any:
    """``what()`` once it is truthy, polled every 20 ms."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := what():
            return found
        time.sleep(0.02)
    raise AssertionError(f"not reached in {seconds} s")


def status_of(api: TidalKubernetes, name: str) -> dict[str, Any]:
    return dict(api.get("production", name).get("status") or {})


def ready_reason(api: TidalKubernetes, name: str) -> str | None:
    conditions = status_of(api, name).get("conditions") or [{}]
    return str(conditions[0].get("reason"))


def test_fires_reach_status_within_a_second_and_spec_changes_scale_mode_and_deletion_follow(
    settings: Settings,
) -> None:
    cluster_api = install_tidal(settings)
    api = Gateways(settings).tidal(CLUSTER)
    rules = [{"name": "tick", "cron": EVERY_2_SECONDS, "replicas": 3}]
    api.apply(tidal_object("ticker", rules, {SCALE_ANNOTATION: "true"}))

    with controller_running(settings):
        first = wait_for(lambda: status_of(api, "ticker").get("lastTriggerTime"))
        later = wait_for(lambda: (t := status_of(api, "ticker").get("lastTriggerTime")) != first and t, 3.0)
        lag = (utc_now() - datetime.fromisoformat(later)).total_seconds()
        assert lag < 1.0, f"the fire of {later} reached status {lag:.2f} s late"
        assert api.replicas(WEB) == 3

        edited = tidal_object("ticker", [{**rules[0], "replicas": 5}], {SCALE_ANNOTATION: "true"})
        api.apply(edited)
        status = wait_for(lambda: (s := status_of(api, "ticker")).get("observedGeneration") == 2 and s, 1.5)
        assert status["desiredReplicas"] == 5
        assert wait_for(lambda: api.replicas(WEB) == 5, 2.5)

        broken = copy.deepcopy(edited)
        bad_rule = {"name": "bad", "cron": "CRON_TZ=UTC 0 0 25 * * *", "replicas": 1}
        broken["spec"]["triggers"]["times"]["rules"].append(bad_rule)
        api.apply(broken)
        assert wait_for(lambda: ready_reason(api, "ticker") == "InvalidCron", 1.5)
        message = status_of(api, "ticker")["conditions"][0]["message"]
        assert message == "rule 'bad': hour: 25 is above the maximum 23 (in 'CRON_TZ=UTC 0 0 25 * * *')"

        k8s.CustomObjectsApi(cluster_api).delete_namespaced_custom_object(
            "scheduling.tidal.io", "v1alpha1", "production", "tidalschedulers", "ticker"
        )
        assert wait_for(
            lambda: REGISTRY.get_sample_value("falcon_tidal_objects", {"cluster": "edge-a"}) == 0, 2.0
        )


def test_a_restarted_controller_applies_the_fire_it_missed_at_once(settings: Settings) -> None:
    install_tidal(settings)
    api = Gateways(settings).tidal(CLUSTER)
    missed = (utc_now() + timedelta(seconds=3)).replace(microsecond=0)  # fires once a minute, then
    rule = {"name": "minutely", "cron": f"CRON_TZ=UTC {missed.second} * * * * *", "replicas": 3}
    api.apply(tidal_object("minutely", [rule]))
    with controller_running(settings):
        wait_for(lambda: status_of(api, "minutely").get("nextTriggerTime") == rfc3339(missed))
    assert utc_now() < missed, "the first controller ran past the fire it was to miss"
    time.sleep((missed - utc_now()).total_seconds() + 0.3)

    with controller_running(settings):
        started = utc_now()
        wait_for(lambda: status_of(api, "minutely").get("lastTriggerTime") == rfc3339(missed), 1.0)
        assert (utc_now() - started).total_seconds() < 1.0
        assert status_of(api, "minutely")["desiredReplicas"] == 3


def test_the_flow_runs_the_controller_and_serves_its_probes_and_metrics(
    settings: Settings, prefect_api: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.tidal import tidal_controller

    install_tidal(settings)
    Gateways(settings).tidal(CLUSTER).apply(
        tidal_object("ticker", [{"name": "tick", "cron": EVERY_2_SECONDS, "replicas": 3}])
    )
    port = free_port()
    monkeypatch.setenv("FALCON_TIDAL_HEALTH_PORT", str(port))
    get_settings.cache_clear()
    states: list[Any] = []
    runner = threading.Thread(
        target=lambda: states.append(tidal_controller(run_seconds=2.0, return_state=True))
    )
    runner.start()

    wait_for(lambda: 'falcon_tidal_objects{cluster="edge-a"} 1.0' in http_get(port, "/metrics")[1], 10.0)
    assert http_get(port, "/livez")[0] == 200
    runner.join(20)
    assert [state.is_completed() for state in states] == [True]


def http_get(port: int, path: str) -> tuple[int, str]:
    """Status and body of a GET to the health server; (0, "") while it is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""
