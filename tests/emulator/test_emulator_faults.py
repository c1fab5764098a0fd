"""Fault injection as the official clients see it: delays past their timeout, connection resets, random
faults from a seeded RNG, each API's error shape, a cluster unreachable for a while, a pool broken after
its create was accepted, and the counters a chaos run reads.

An emulator of its own: these rules match broadly, and DELETE /emulator/faults clears them all."""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import urllib3
from emu_helpers import LOCATION, PROJECT, ZONE, admin, cluster_name, counters, tpu_pool, wait_operation
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1, container_v1
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer

CONFIG: dict[str, Any] = {
    "nodePoolProvisionSeconds": 1.0,
    "tickSeconds": 0.05,
    "projects": {
        PROJECT: {
            "reservations": {"res": {"zone": ZONE, "machineType": "ct6e-standard-4t", "count": 4}},
            "clusters": {
                "c1": {"location": LOCATION, "zones": [ZONE]},
                "c2": {"location": LOCATION, "zones": [ZONE]},
            },
        }
    },
}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig.from_dict(CONFIG), tmp_path_factory.mktemp("faults")) as server:
        yield server


@pytest.fixture(autouse=True)
def no_rules(emulator: EmulatorServer) -> Iterator[None]:
    yield
    admin(emulator.url, "/emulator/faults", "DELETE")


@pytest.fixture(scope="module")
def gke(emulator: EmulatorServer) -> container_v1.ClusterManagerClient:
    return container_v1.ClusterManagerClient(
        transport="rest", credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator.url}
    )


@pytest.fixture(scope="module")
def reservations(emulator: EmulatorServer) -> compute_v1.ReservationsClient:
    return compute_v1.ReservationsClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator.url}
    )


def batch_api(emulator: EmulatorServer, cluster: str, retries: int = 0) -> k8s.BatchV1Api:
    """``retries=0``: the client's urllib3 would otherwise retry resets and read timeouts 3 times."""
    configuration = k8s.Configuration(host=f"{emulator.url}/k8s/{PROJECT}/{LOCATION}/{cluster}")
    configuration.retries = retries
    return k8s.BatchV1Api(k8s.ApiClient(configuration))


def inject(emulator: EmulatorServer, *rules: dict[str, Any], seed: int | None = None) -> None:
    body: dict[str, Any] = {"rules": list(rules)}
    if seed is not None:
        body["seed"] = seed
    admin(emulator.url, "/emulator/faults", "POST", body)


def job(name: str) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "command": ["true"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


def get_reservation(reservations: compute_v1.ReservationsClient) -> compute_v1.Reservation:
    return reservations.get(project=PROJECT, zone=ZONE, reservation="res", retry=None, timeout=2)


def reset_by_peer(error: object) -> bool:
    """Walk the clients' wrappers (requests, urllib3 MaxRetryError and ProtocolError) to the socket error."""
    while isinstance(error, BaseException):
        if isinstance(error, ConnectionResetError):
            return True
        causes = [getattr(error, "reason", None), *error.args]
        error = next((c for c in causes if isinstance(c, BaseException)), None)
    return False


def test_a_delay_past_the_client_timeout_times_out_then_the_next_call_is_served(
    emulator: EmulatorServer, gke: container_v1.ClusterManagerClient
) -> None:
    inject(emulator, {"pathRegex": "/clusters/c1$", "delaySeconds": 1.0})
    started = time.monotonic()
    with pytest.raises(requests.Timeout):
        gke.get_cluster(name=cluster_name("c1"), retry=None, timeout=0.3)
    assert time.monotonic() - started < 0.9
    assert gke.get_cluster(name=cluster_name("c1"), retry=None, timeout=2).name == "c1"


def test_a_delayed_error_arrives_after_the_delay_with_its_status(
    emulator: EmulatorServer, reservations: compute_v1.ReservationsClient
) -> None:
    inject(emulator, {"pathRegex": "/reservations/res$", "delaySeconds": 0.4, "status": 503})
    started = time.monotonic()
    with pytest.raises(exceptions.ServiceUnavailable):
        get_reservation(reservations)
    assert time.monotonic() - started >= 0.4


def test_a_job_post_answered_too_late_is_still_created_so_the_retry_meets_409(
    emulator: EmulatorServer,
) -> None:
    """The duplicate a chaos run must count: the client gave up, the apiserver did not."""
    batch = batch_api(emulator, "c1")
    inject(emulator, {"method": "POST", "pathRegex": "/jobs$", "delaySeconds": 0.6})
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        batch.create_namespaced_job("default", job("late"), _request_timeout=0.2)
    time.sleep(0.6)
    with pytest.raises(ApiException) as refused:
        batch.create_namespaced_job("default", job("late"), _request_timeout=2)
    assert refused.value.status == 409
    seen = counters(emulator.url, "c1")
    assert (seen["jobsCreated"], seen["jobCreatesRefused"], seen["jobsCreatedMoreThanOnce"]) == (1, 1, [])

    batch.delete_namespaced_job("late", "default", propagation_policy="Background")
    batch.create_namespaced_job("default", job("late"), _request_timeout=2)
    assert counters(emulator.url, "c1")["jobsCreatedMoreThanOnce"] == ["default/late"]


def test_a_reset_drops_the_connection_without_a_response_on_every_api(
    emulator: EmulatorServer,
    gke: container_v1.ClusterManagerClient,
    reservations: compute_v1.ReservationsClient,
) -> None:
    inject(emulator, {"pathRegex": "/(clusters/c1|reservations/res|jobs)$", "action": "reset", "times": 3})
    with pytest.raises(requests.ConnectionError) as gke_error:
        gke.get_cluster(name=cluster_name("c1"), retry=None, timeout=2)
    with pytest.raises(requests.ConnectionError) as compute_error:
        get_reservation(reservations)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as kube_error:
        batch_api(emulator, "c1").list_namespaced_job("default", _request_timeout=2)
    for error in (gke_error.value, compute_error.value, kube_error.value):
        assert reset_by_peer(error), error
    assert get_reservation(reservations).name == "res"


def test_gke_busy_and_rate_limit_refusals_carry_gkes_status_and_text(
    emulator: EmulatorServer, gke: container_v1.ClusterManagerClient
) -> None:
    busy = {"method": "POST", "pathRegex": "/nodePools$", "status": 400, "statusName": "FAILED_PRECONDITION"}
    inject(emulator, busy, {"method": "POST", "pathRegex": "/nodePools$", "status": 429})
    for expected, status, text in (
        (exceptions.BadRequest, "FAILED_PRECONDITION", "Please wait and try again once it is done."),
        (exceptions.TooManyRequests, "RESOURCE_EXHAUSTED", "concurrent operations quota 5, please try again"),
    ):
        with pytest.raises(expected) as error:
            gke.create_node_pool(parent=cluster_name("c2"), node_pool=tpu_pool("busy"), retry=None, timeout=2)
        assert error.value.response is not None
        body = error.value.response.json()["error"]
        assert (body["code"], body["status"]) == (error.value.code, status)
        assert text in body["message"]
    assert 'cluster "c2"' in body["message"]


def test_compute_and_kubernetes_errors_have_their_apis_shapes(
    emulator: EmulatorServer, reservations: compute_v1.ReservationsClient
) -> None:
    inject(
        emulator,
        {"pathRegex": "/reservations/res$", "status": 429, "message": "Rate Limit Exceeded"},
        {"pathRegex": "/k8s/.*/jobs$", "status": 429, "message": "storage is (re)initializing"},
    )
    with pytest.raises(exceptions.TooManyRequests) as compute_error:
        get_reservation(reservations)
    assert compute_error.value.response is not None
    envelope = compute_error.value.response.json()["error"]
    assert (envelope["code"], envelope["status"], envelope["errors"][0]["reason"]) == (
        429,
        "RESOURCE_EXHAUSTED",
        "rateLimitExceeded",
    )
    with pytest.raises(ApiException) as kube_error:
        batch_api(emulator, "c1").list_namespaced_job("default")
    status = json.loads(kube_error.value.body)
    assert (kube_error.value.status, status["kind"], status["reason"], status["code"]) == (
        429,
        "Status",
        "TooManyRequests",
        429,
    )


def test_a_probability_fails_that_share_of_calls_reproducibly_from_its_seed(
    emulator: EmulatorServer, reservations: compute_v1.ReservationsClient
) -> None:
    def pattern(seed: int) -> list[bool]:
        admin(emulator.url, "/emulator/faults", "DELETE")
        rule = {"pathRegex": "/reservations/res$", "status": 503, "probability": 0.3, "times": None}
        inject(emulator, rule, seed=seed)
        failed = []
        for _ in range(100):
            try:
                get_reservation(reservations)
                failed.append(False)
            except exceptions.ServiceUnavailable:
                failed.append(True)
        return failed

    before = admin(emulator.url, "/emulator/state")["faultsInjected"].get("503", 0)
    first = pattern(seed=11)
    assert 15 <= sum(first) <= 45
    assert pattern(seed=11) == first
    assert pattern(seed=12) != first
    injected = admin(emulator.url, "/emulator/state")["faultsInjected"]["503"] - before
    assert injected == 2 * sum(first) + sum(pattern(seed=12))


def test_a_cluster_made_unreachable_for_a_while_recovers_and_others_stay_reachable(
    emulator: EmulatorServer,
) -> None:
    inject(emulator, {"pathRegex": f"^/k8s/{PROJECT}/{LOCATION}/c2/", "action": "reset", "forSeconds": 0.8})
    until = time.monotonic() + 0.8
    c1, c2 = batch_api(emulator, "c1"), batch_api(emulator, "c2")
    for _ in range(3):  # every call while it lasts
        with pytest.raises(urllib3.exceptions.MaxRetryError):
            c2.list_namespaced_job("default", _request_timeout=2)
        c1.list_namespaced_job("default", _request_timeout=2)
    time.sleep(max(0.0, until - time.monotonic()) + 0.1)
    assert c2.list_namespaced_job("default", _request_timeout=2).items == []
    assert admin(emulator.url, "/emulator/faults")["rules"] == []


def test_breaking_a_pool_whose_create_runs_ends_the_create_with_its_message(
    emulator: EmulatorServer, gke: container_v1.ClusterManagerClient
) -> None:
    op = gke.create_node_pool(parent=cluster_name("c1"), node_pool=tpu_pool("broken"), timeout=2)
    message = "Instance 'gke-c1-broken-0' creation failed: ZONE_RESOURCE_POOL_EXHAUSTED"
    path = f"/emulator/clusters/{PROJECT}/{LOCATION}/c1/nodePools/broken/break"
    assert admin(emulator.url, path, "POST", {"message": message})["status"] == "ERROR"

    done = wait_operation(gke, op)
    assert (done.error.message, done.status_message) == (message, message)
    time.sleep(1.0)  # past nodePoolProvisionSeconds: the pool must not turn RUNNING
    pool = gke.get_node_pool(name=f"{cluster_name('c1')}/nodePools/broken", timeout=2)
    assert (pool.status, pool.status_message) == (container_v1.NodePool.Status.ERROR, message)
    assert [c.message for c in pool.conditions] == [message]


def test_breaking_a_running_pool_turns_it_error_and_an_unknown_pool_is_404(
    emulator: EmulatorServer, gke: container_v1.ClusterManagerClient
) -> None:
    wait_operation(gke, gke.create_node_pool(parent=cluster_name("c2"), node_pool=tpu_pool("up"), timeout=2))
    base = f"/emulator/clusters/{PROJECT}/{LOCATION}/c2/nodePools"
    admin(emulator.url, f"{base}/up/break", "POST", {"message": "repair failed"})
    pool = gke.get_node_pool(name=f"{cluster_name('c2')}/nodePools/up", timeout=2)
    assert (pool.status, pool.status_message) == (container_v1.NodePool.Status.ERROR, "repair failed")
    with pytest.raises(urllib.error.HTTPError) as missing:
        admin(emulator.url, f"{base}/nope/break", "POST", {"message": "x"})
    assert (missing.value.code, json.loads(missing.value.read())["error"]["status"]) == (404, "NOT_FOUND")


def test_the_state_counts_faults_injected_by_kind(emulator: EmulatorServer) -> None:
    before = admin(emulator.url, "/emulator/state")["faultsInjected"]
    inject(
        emulator,
        {"pathRegex": "/k8s/.*/jobs$", "action": "reset", "times": 1},
        {"pathRegex": "/k8s/.*/jobs$", "delaySeconds": 0.05, "status": 504, "times": 1},
    )
    batch = batch_api(emulator, "c1")
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        batch.list_namespaced_job("default")
    with pytest.raises(ApiException):
        batch.list_namespaced_job("default")
    after = admin(emulator.url, "/emulator/state")["faultsInjected"]
    assert {k: after[k] - before.get(k, 0) for k in ("reset", "delay", "504")} == {
        "reset": 1,
        "delay": 1,
        "504": 1,
    }
