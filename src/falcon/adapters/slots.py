"""Queue slots as Prefect global concurrency limits (limit 1 each), held through leases.

The dispatcher decides who goes next and takes the slot without blocking (a 423 means busy);
the lifecycle run that acquires resources renews the lease and releases it when all pods run.
A holder that dies loses the slot when its lease expires (Prefect's repossessor); the dispatcher
also repairs a limit whose count drifted from what the database says (``reset``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from uuid import UUID

import httpx
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.settings import PREFECT_API_URL

from falcon.adapters.metrics import prefect_call
from falcon.domain.errors import PermanentError

_open = threading.local()


@contextlib.contextmanager
def _client() -> Iterator[SyncPrefectClient]:
    """This thread's client of the current API, kept open between calls: a new one per call cost
    ~20 ms here (an httpx client, its SSL context, a TCP connection), and a tick makes one call per
    free queue. A client whose call failed is dropped, so a broken connection is not kept."""
    api = PREFECT_API_URL.value()
    client: SyncPrefectClient | None = getattr(_open, "client", None)
    if client is None or getattr(_open, "api", None) != api:
        client = get_client(sync_client=True)
        client.__enter__()
        _open.client, _open.api = client, api
    try:
        yield client
    except BaseException:
        _open.client = None
        client.__exit__(None, None, None)
        raise


@prefect_call
def ensure_limit(name: str) -> None:
    with _client() as client:
        try:
            found = client.read_global_concurrency_limit_by_name(name)
            if found.limit != 1 or not found.active:
                client.update_global_concurrency_limit(
                    name, GlobalConcurrencyLimitUpdate(limit=1, active=True)
                )
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):  # another dispatcher made it first
                client.upsert_global_concurrency_limit_by_name(name, limit=1)


@prefect_call
def try_acquire(name: str, lease_seconds: int) -> str | None:
    """Take the slot and return the lease id, or None when it is held."""
    with _client() as client:
        try:
            response = client.increment_concurrency_slots_with_lease(
                names=[name], slots=1, mode="concurrency", lease_duration=lease_seconds
            )
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 423:
                return None
            raise
    body = response.json()
    if not body.get("limits"):
        raise PermanentError(f"concurrency limit {name!r} does not exist")
    return str(body["lease_id"])


@prefect_call
def renew(lease_id: str, lease_seconds: int) -> bool:
    """Extend the lease; False if it already expired (the slot may be someone else's now)."""
    with _client() as client:
        try:
            client.renew_concurrency_lease(lease_id=UUID(lease_id), lease_duration=lease_seconds)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code in (404, 410):
                return False
            raise
    return True


@prefect_call
def release(lease_id: str) -> None:
    """Give the slot back; releasing an unknown or expired lease is a no-op on the server."""
    with _client() as client:
        client.release_concurrency_slots_with_lease(lease_id=UUID(lease_id))


@prefect_call
def reset(name: str) -> None:
    """Zero a limit's active count: used only when the database proves no task holds it."""
    with _client() as client:
        client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=0))


class PrefectSlots:
    """The slots port on Prefect's global concurrency limits (the functions above)."""

    def ensure_limit(self, name: str) -> None:
        ensure_limit(name)

    def try_acquire(self, name: str, lease_seconds: int) -> str | None:
        return try_acquire(name, lease_seconds)

    def renew(self, lease_id: str, lease_seconds: int) -> bool:
        return renew(lease_id, lease_seconds)

    def release(self, lease_id: str) -> None:
        release(lease_id)

    def reset(self, name: str) -> None:
        reset(name)
