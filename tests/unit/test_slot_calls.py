"""The tick's slot calls against a Prefect API that answers as a busy one does (respx at the HTTP
edge): with ``fail_fast`` a 503 is one request and a TemporaryError, never Prefect's client
back-off; a held slot (423) is None; without ``fail_fast`` the client's own retries go on."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import respx
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_CLIENT_CSRF_SUPPORT_ENABLED,
    PREFECT_CLIENT_MAX_RETRIES,
    temporary_settings,
)

from falcon.adapters import slots
from falcon.domain.errors import TemporaryError

API = "http://prefect.test/api"
INCREMENT = f"{API}/v2/concurrency_limits/increment-with-lease"


@pytest.fixture
def prefect_api() -> Iterator[respx.MockRouter]:
    settings = {
        PREFECT_API_URL: API,
        PREFECT_CLIENT_MAX_RETRIES: 1,
        PREFECT_CLIENT_CSRF_SUPPORT_ENABLED: False,
    }
    with temporary_settings(settings), respx.mock(assert_all_called=False) as router:
        yield router


def test_a_busy_api_fails_fast_with_one_request(prefect_api: respx.MockRouter) -> None:
    route = prefect_api.post(INCREMENT).mock(return_value=httpx.Response(503))
    began = time.monotonic()
    with pytest.raises(TemporaryError, match="503"):
        slots.try_acquire("falcon:c1:2x2", 60, fail_fast=True)
    assert route.call_count == 1 and time.monotonic() - began < 1.0


def test_a_held_slot_is_none_and_a_granted_one_its_lease(prefect_api: respx.MockRouter) -> None:
    prefect_api.post(INCREMENT).mock(
        side_effect=[
            httpx.Response(423),
            httpx.Response(200, json={"lease_id": "9b3c", "limits": [{"name": "falcon:c1:2x2"}]}),
        ]
    )
    assert slots.try_acquire("falcon:c1:2x2", 60, fail_fast=True) is None
    assert slots.try_acquire("falcon:c1:2x2", 60, fail_fast=True) == "9b3c"


def test_without_fail_fast_prefect_retries_as_configured(prefect_api: respx.MockRouter) -> None:
    route = prefect_api.post(INCREMENT).mock(
        side_effect=[
            httpx.Response(503),
            httpx.Response(200, json={"lease_id": "9b3c", "limits": [{"name": "falcon:c1:2x2"}]}),
        ]
    )
    assert slots.try_acquire("falcon:c1:2x2", 60) == "9b3c"  # after Prefect's ~2 s back-off
    assert route.call_count == 2


def test_a_release_fails_fast_too(prefect_api: respx.MockRouter) -> None:
    route = prefect_api.post(f"{API}/v2/concurrency_limits/decrement-with-lease").mock(
        side_effect=[httpx.Response(503), httpx.Response(204)]
    )
    lease = "2f1c5a56-3d4e-4d8e-9a35-0d6b1f0f3c11"
    with pytest.raises(TemporaryError, match="503"):
        slots.release(lease, fail_fast=True)
    slots.release(lease, fail_fast=True)
    assert route.call_count == 2 and route.calls[-1].request.content == f'{{"lease_id":"{lease}"}}'.encode()


def test_a_sound_limit_is_made_sure_of_with_one_request(prefect_api: respx.MockRouter) -> None:
    read = prefect_api.get(f"{API}/v2/concurrency_limits/falcon:c1:2x2").mock(
        side_effect=[httpx.Response(200, json={"limit": 1, "active": True}), httpx.Response(503)]
    )
    slots.ensure_limit("falcon:c1:2x2", fail_fast=True)
    assert read.call_count == 1 and len(prefect_api.calls) == 1
    with pytest.raises(TemporaryError, match="503"):
        slots.ensure_limit("falcon:c1:2x2", fail_fast=True)
    assert read.call_count == 2


def test_an_altered_limit_is_mended_through_the_client(prefect_api: respx.MockRouter) -> None:
    prefect_api.get(f"{API}/v2/concurrency_limits/falcon:c1:2x2").mock(
        return_value=httpx.Response(
            200,
            json={
                "id": "6a1f3c7e-2b4d-4e8f-9a0b-1c2d3e4f5a6b",
                "name": "falcon:c1:2x2",
                "limit": 2,
                "active": True,
                "active_slots": 0,
                "slot_decay_per_second": 0.0,
                "created": "2026-12-01T00:00:00Z",
                "updated": "2026-12-01T00:00:00Z",
            },
        )
    )
    update = prefect_api.patch(f"{API}/v2/concurrency_limits/falcon:c1:2x2").mock(
        return_value=httpx.Response(204)
    )
    slots.ensure_limit("falcon:c1:2x2", fail_fast=True)
    assert update.call_count == 1 and b'"limit":1' in update.calls[0].request.content
