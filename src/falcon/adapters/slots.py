"""Queue slots as Prefect global concurrency limits (limit 1 each), held through leases.

The dispatcher decides who goes next and takes the slot without blocking (a 423 means busy);
its tick asks with ``fail_fast``: a Prefect API too busy to answer (a SQLite-backed server answers
503 under concurrent writes) is not waited out with Prefect's client back-off of 2 s, 4 s, ... but
raised as TemporaryError, and the queue is asked again at the next tick. The lifecycle run that
acquires resources renews the lease and releases it when all pods run. A holder that dies loses
the slot when its lease expires (Prefect's repossessor); the dispatcher also repairs a limit whose
count drifted from what the database says (``reset``).

The services name a slot by its queue's key (``QueueKey.slot_name``: the cluster's id and the
topology); Prefect's Concurrency page shows it by the queue's label (``slot_label``: the
cluster's name, topology, project and location), which ``SlotNames`` looks up in the registry.
A limit an earlier Falcon created under the key is renamed to the label the first time it is
needed, with its count and leases: the acquisitions under way at an upgrade keep their slot.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from uuid import UUID

import httpx
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.settings import PREFECT_API_URL

from falcon.adapters.known_clusters import KnownClusters
from falcon.adapters.metrics import prefect_call
from falcon.domain.errors import PermanentError, TemporaryError
from falcon.domain.model import Cluster, QueueKey, slot_label

_open = threading.local()


@contextlib.contextmanager
def _busy_is_temporary(fail_fast: bool) -> Iterator[None]:
    try:
        yield
    except httpx.HTTPStatusError as exc:
        code = exc.response.status_code
        if fail_fast and (code == 429 or code >= 500):
            raise TemporaryError(f"Prefect API busy: {code}") from exc
        raise
    except httpx.TransportError as exc:
        if fail_fast:
            raise TemporaryError(f"Prefect API unreachable: {exc!r}") from exc
        raise


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
def ensure_limit(name: str, fail_fast: bool = False, former: str | None = None) -> None:
    """Make sure the queue's limit exists with limit 1, active. With ``fail_fast`` the usual case,
    a sound limit, is one request; a missing or altered one is mended through the client. A
    missing limit that still goes by its ``former`` name is renamed, not created."""
    with _busy_is_temporary(fail_fast), _client() as client:
        if fail_fast and _limit_is_sound(client, name):
            return
        try:
            found = client.read_global_concurrency_limit_by_name(name)
            if found.limit != 1 or not found.active:
                client.update_global_concurrency_limit(
                    name, GlobalConcurrencyLimitUpdate(limit=1, active=True)
                )
        except ObjectNotFound:
            if former and _renamed(client, former, name):
                return
            with contextlib.suppress(ObjectAlreadyExists):  # another dispatcher made it first
                client.upsert_global_concurrency_limit_by_name(name, limit=1)


def _renamed(client: SyncPrefectClient, former: str, name: str) -> bool:
    """Rename the limit ``former`` to ``name``, keeping its active slots and leases; False if
    there is no limit ``former`` (or another dispatcher renamed it first)."""
    try:
        client.update_global_concurrency_limit(former, GlobalConcurrencyLimitUpdate(name=name))
    except ObjectNotFound:
        return False
    return True


@prefect_call
def try_acquire(
    name: str, lease_seconds: int, fail_fast: bool = False, former: str | None = None
) -> str | None:
    """Take the slot and return the lease id, or None when it is held. A limit that still goes by
    its ``former`` name is renamed first."""
    with _busy_is_temporary(fail_fast), _client() as client:
        body = _increment(client, name, lease_seconds, fail_fast)
        if body is not None and not body.get("limits") and former and _renamed(client, former, name):
            body = _increment(client, name, lease_seconds, fail_fast)
    if body is None:
        return None
    if not body.get("limits"):
        raise PermanentError(f"concurrency limit {name!r} does not exist")
    return str(body["lease_id"])


def _increment(
    client: SyncPrefectClient, name: str, lease_seconds: int, fail_fast: bool
) -> dict[str, object] | None:
    """One increment-with-lease of the limit: its answer, or None when the slot is held (423)."""
    try:
        if fail_fast:
            body = {"names": [name], "slots": 1, "mode": "concurrency", "lease_duration": lease_seconds}
            response = _post_once(client, INCREMENT_WITH_LEASE, body)
        else:
            response = client.increment_concurrency_slots_with_lease(
                names=[name], slots=1, mode="concurrency", lease_duration=lease_seconds
            )
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 423:
            return None
        raise
    answer: dict[str, object] = response.json()
    return answer


INCREMENT_WITH_LEASE = "/v2/concurrency_limits/increment-with-lease"
DECREMENT_WITH_LEASE = "/v2/concurrency_limits/decrement-with-lease"


def _limit_is_sound(client: SyncPrefectClient, name: str) -> bool:
    """The limit exists with limit 1 and is active (one GET, as read_global_concurrency_limit_by_name)."""
    response = _send_once(client, "GET", f"/v2/concurrency_limits/{name}")
    if response.status_code == 404:
        return False
    response.raise_for_status()
    found = response.json()
    return bool(found.get("limit") == 1 and found.get("active"))


def _post_once(client: SyncPrefectClient, path: str, body: dict[str, object]) -> httpx.Response:
    response = _send_once(client, "POST", path, body)
    response.raise_for_status()
    return response


def _send_once(
    client: SyncPrefectClient, method: str, path: str, body: dict[str, object] | None = None
) -> httpx.Response:
    """One request with the client's base URL, headers and connection, without its retry loop:
    Prefect's sleeps 2 s, 4 s, ... after a 429 or 503, and even after the last try when retries
    are set to none, so no setting makes it fail fast."""
    http = client._client  # PrefectHttpxSyncClient: an httpx.Client whose send() wraps the retries
    response = httpx.Client.send(http, http.build_request(method, path, json=body))
    if response.status_code == 403 and method != "GET":  # a server asking for a CSRF token
        return http.request(method, path, json=body)  # the client's path gets one
    return response


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
def release(lease_id: str, fail_fast: bool = False) -> None:
    """Give the slot back; releasing an unknown or expired lease is a no-op on the server."""
    with _busy_is_temporary(fail_fast), _client() as client:
        if fail_fast:
            _post_once(client, DECREMENT_WITH_LEASE, {"lease_id": str(UUID(lease_id))})
        else:
            client.release_concurrency_slots_with_lease(lease_id=UUID(lease_id))


@prefect_call
def reset(name: str, former: str | None = None) -> None:
    """Zero a limit's active count: used only when the database proves no task holds it."""
    with _client() as client:
        try:
            client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=0))
        except ObjectNotFound:
            if not (former and _renamed(client, former, name)):
                raise
            client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=0))


class SlotNames:
    """A slot's Prefect name from its key (``QueueKey.slot_name``), its cluster looked up in the
    registry; a key that names no queue, or a cluster the registry does not know (yet), keeps
    the key as its name."""

    def __init__(self, clusters: Callable[[], Iterable[Cluster]]) -> None:
        self._known = KnownClusters(clusters)

    def __call__(self, key: str) -> str:
        queue = QueueKey.from_slot_name(key)
        cluster = self._known.get(queue.cluster_id) if queue else None
        return slot_label(cluster, queue.topology) if cluster and queue else key


class PrefectSlots:
    """The slots port on Prefect's global concurrency limits (the functions above), each slot
    named for people by ``names``; without it, a slot's name is its key."""

    def __init__(self, names: Callable[[str], str] | None = None) -> None:
        self._names = names or str

    def _name(self, key: str) -> tuple[str, str | None]:
        """The slot's Prefect name, and the key as its former name when they differ."""
        name = self._names(key)
        return name, (key if name != key else None)

    def ensure_limit(self, name: str, fail_fast: bool = False) -> None:
        label, former = self._name(name)
        ensure_limit(label, fail_fast, former)

    def try_acquire(self, name: str, lease_seconds: int, fail_fast: bool = False) -> str | None:
        label, former = self._name(name)
        return try_acquire(label, lease_seconds, fail_fast, former)

    def renew(self, lease_id: str, lease_seconds: int) -> bool:
        return renew(lease_id, lease_seconds)

    def release(self, lease_id: str, fail_fast: bool = False) -> None:
        release(lease_id, fail_fast)

    def reset(self, name: str) -> None:
        label, former = self._name(name)
        reset(label, former)
