"""The launcher threads' Prefect client sends a request the API answered 503 again at Falcon's
pace (ResendWhenBusy), instead of sleeping 2 s, 4 s, ... in Prefect's client back-off."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from types import SimpleNamespace

import httpx
import pytest
import respx
from prefect.context import SyncClientContext
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_CLIENT_CSRF_SUPPORT_ENABLED,
    PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED,
    temporary_settings,
)

from falcon.adapters.runs import ResendWhenBusy, _share_prefect_client

API = "http://prefect.test/api"


def answering(*codes: int) -> tuple[httpx.MockTransport, list[bytes]]:
    """A transport answering ``codes`` in turn (the last one from then on), and the bodies it got."""
    bodies: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        return httpx.Response(codes[min(len(bodies), len(codes)) - 1])

    return httpx.MockTransport(answer), bodies


def test_a_busy_answer_is_sent_again_after_the_pause_until_it_goes_through() -> None:
    inner, bodies = answering(503, 503, 201)
    slept: list[float] = []
    transport = ResendWhenBusy(inner, pause=0.2, patience=10.0, sleep=slept.append)
    request = httpx.Request("POST", f"{API}/flow_runs/", json={"name": "acquire-t1"})
    assert transport.handle_request(request).status_code == 201
    assert slept == [0.2, 0.2]
    assert bodies == [b'{"name":"acquire-t1"}'] * 3, "the same body each time"


def test_past_its_patience_the_503_is_handed_to_prefects_client() -> None:
    inner, bodies = answering(503)
    slept: list[float] = []
    transport = ResendWhenBusy(inner, pause=1.0, patience=3.0, sleep=slept.append)
    request = httpx.Request("POST", f"{API}/flow_runs/", json={})
    assert transport.handle_request(request).status_code == 503
    assert len(bodies) == 4 and slept == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("code", [200, 404, 429, 500, 502])
def test_any_other_answer_is_returned_as_it_came(code: int) -> None:
    inner, bodies = answering(code)
    transport = ResendWhenBusy(inner, sleep=pytest.fail)
    assert transport.handle_request(httpx.Request("GET", f"{API}/flow_runs/x")).status_code == code
    assert len(bodies) == 1


def test_a_streamed_body_is_sent_once() -> None:
    inner, bodies = answering(503, 201)
    transport = ResendWhenBusy(inner, sleep=pytest.fail)
    request = httpx.Request("POST", f"{API}/logs/", content=iter([b"a", b"b"]))
    assert transport.handle_request(request).status_code == 503
    assert bodies == [b"ab"]


@pytest.fixture
def prefect_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[respx.MockRouter]:
    """A Prefect API at the HTTP edge; Prefect's own back-off fails the test if it is used."""
    monkeypatch.setattr("prefect.client.base.time", SimpleNamespace(sleep=pytest.fail))
    settings = {
        PREFECT_API_URL: API,
        PREFECT_CLIENT_CSRF_SUPPORT_ENABLED: False,
        PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED: False,
    }
    with temporary_settings(settings), respx.mock(assert_all_called=False) as router:
        yield router


def test_a_launcher_threads_client_waits_out_a_busy_api_without_prefects_back_off(
    prefect_api: respx.MockRouter,
) -> None:
    route = prefect_api.post(f"{API}/flow_runs/filter").mock(
        side_effect=[httpx.Response(503), httpx.Response(200, json=[])]
    )
    found: list[object] = []

    def launcher_thread() -> None:  # as ThreadLauncher._work begins
        with ExitStack() as held:
            _share_prefect_client(held)
            context = SyncClientContext.get()
            assert context is not None, "the thread's client is entered"
            found.append(context.client.read_flow_runs())

    settings = contextvars.copy_context()  # Prefect's settings, which a new thread does not inherit
    thread = threading.Thread(target=settings.run, args=(launcher_thread,))
    thread.start()
    thread.join(30)
    assert found == [[]] and route.call_count == 2
