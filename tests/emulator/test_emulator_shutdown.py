"""The emulator stopping as kube-apiserver does: once its shutdown has begun, a new Kubernetes
request gets 429 with ``Retry-After: 5`` and ``Connection: close`` (the apiserver's WithRetryAfter
filter), and an informer-like client whose watch ended does not hold the server open by watching
again: the server stops without cancelling requests at its graceful-shutdown timeout."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from emu_helpers import LOCATION, PROJECT, TEST_CONFIG, wait_for
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from falcon_emulator.app import begin_shutdown
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer

CLUSTER_PATH = f"/k8s/{PROJECT}/{LOCATION}/work"


def _begin_shutdown(server: EmulatorServer) -> None:
    """As ``EmulatorServer.stop`` begins it, on the server's loop, without stopping it yet."""
    server.app.state.loop.call_soon_threadsafe(begin_shutdown, server.state)
    wait_for(lambda: server.state.shutting_down)


def test_after_shutdown_begins_kubernetes_requests_get_429_retry_after_and_health_still_answers(
    tmp_path: Path,
) -> None:
    with EmulatorServer(EmulatorConfig.from_dict(TEST_CONFIG), tmp_path) as server:
        namespaces = f"{server.url}{CLUSTER_PATH}/api/v1/namespaces"
        assert httpx.get(namespaces).status_code == 200
        _begin_shutdown(server)
        refused = httpx.get(namespaces)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "5"
        assert refused.headers["connection"] == "close"
        assert refused.text.strip() == "The apiserver is shutting down, please try again later."
        assert httpx.get(f"{server.url}/healthz").status_code == 200


class _Cancellations(logging.Handler):
    """uvicorn's own log: it does not propagate to the root logger that caplog listens on."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def uvicorn_errors() -> Iterator[list[str]]:
    handler = _Cancellations()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def test_a_client_that_watches_again_at_once_is_refused_and_the_server_stops_without_cancelling(
    tmp_path: Path, uvicorn_errors: list[str]
) -> None:
    """The shutdown begins (watches ended) before the server stops listening: a client that
    watches again in between is refused, where it would hold the server open until uvicorn
    cancels its request at the graceful-shutdown timeout."""
    refusals: list[ApiException] = []
    with EmulatorServer(EmulatorConfig.from_dict(TEST_CONFIG), tmp_path) as server:
        configuration = k8s.Configuration(host=server.url + CLUSTER_PATH)
        configuration.retries = False  # urllib3 would sleep out the Retry-After and ask again
        core = k8s.CoreV1Api(k8s.ApiClient(configuration))
        watching = threading.Event()

        def informer() -> None:
            """Watch, and watch again as soon as a watch ends, until refused."""
            while True:
                try:
                    watching.set()
                    for _ in watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=60):
                        pass
                except ApiException as exc:
                    refusals.append(exc)
                    return

        thread = threading.Thread(target=informer, daemon=True)
        thread.start()
        assert watching.wait(5)
        _begin_shutdown(server)
        thread.join(5)
        assert [r.status for r in refusals] == [429]
        assert refusals[0].headers["Retry-After"] == "5"
    assert not [m for m in uvicorn_errors if "graceful shutdown" in m], uvicorn_errors
