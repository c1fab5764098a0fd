"""Map Google and Kubernetes client exceptions onto Falcon's retry-or-not taxonomy, and count
each call named by its ``api`` and ``call`` (``falcon_api_calls_total``, its errors by kind, its
time)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests
import urllib3
from google.api_core import exceptions as gexc
from google.auth import exceptions as gauth
from kubernetes.client.exceptions import ApiException

from falcon.adapters.metrics import API_CALLS, API_ERRORS, API_SECONDS
from falcon.domain.errors import (
    BusyError,
    ConflictError,
    FalconError,
    NotFoundError,
    PermanentError,
    TemporaryError,
)

_RETRYABLE_HTTP = {408, 429, 500, 502, 503, 504}
# What the REST transports raise when the connection is reset, or the answer is cut short or too late.
_BROKEN_CONNECTION = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)
# Phrases of a 429 that is a rate limit (retry) rather than an exhausted resource quota (final).
_RATE_LIMIT = ("per minute", "per second", "per 100 seconds", "rate limit", "too many", "try again")
# GKE's 400 FAILED_PRECONDITION while another operation holds the pool or the cluster ("... is
# currently creating a node pool ... Please wait and try again once it is done."), and while a
# cluster-level operation such as a control-plane upgrade runs ("Cluster is running incompatible
# operation operation-...", rancher/gke-operator#509).
_BUSY = ("try again", "in progress", "is currently", "incompatible operation")
# GKE's 429 when a cluster that runs node-pool operations side by side has its quota of them
# running ('cluster "X" hits the concurrent operations quota 5'): busy too, not rate-limited.
_BUSY_QUOTA = "concurrent operations quota"


def _error_body(exc: gexc.GoogleAPICallError) -> dict[str, Any]:
    """The Google JSON error envelope's ``error`` object, when the exception came over REST."""
    try:
        body = exc.response.json() if exc.response is not None else {}
    except (ValueError, AttributeError):
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _google_detail(exc: gexc.GoogleAPICallError) -> str:
    """Google's own error text, without the method and URL api-core puts in front of it."""
    return str(_error_body(exc).get("message") or exc.message or exc)


def _is_temporary(exc: gexc.GoogleAPICallError, detail: str) -> bool:
    """Retry only what time can fix: 429 rate limits, 5xx, GKE busy with another operation.

    Final: 400 INVALID_ARGUMENT (and every other 400), 403 permission or quota, 429 that names an
    exhausted resource quota, and stockouts (which GKE reports as the create operation's error)."""
    text = detail.lower()
    if exc.code == 400:
        status = str(_error_body(exc).get("status", ""))
        return status == "FAILED_PRECONDITION" and any(p in text for p in _BUSY)
    if exc.code == 429:
        return "quota" not in text or any(p in text for p in _RATE_LIMIT)
    if exc.code == 403:  # Compute answers some rate limits with 403 rateLimitExceeded
        return "rate limit" in text
    return exc.code in _RETRYABLE_HTTP


@contextmanager
def google_errors(what: str, api: str | None = None, call: str = "") -> Iterator[None]:
    """Translate google-api-core errors raised inside the block; ``what`` names the call for
    people, ``api`` and ``call`` (``gke``, ``get_node_pool``) for the metrics (none: not counted)."""
    began = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        mapped = _google_error(what, exc)
        if mapped is None:
            raise
        error, kind = mapped
        _count(api, call, began, error, kind)
        raise error from exc
    _count(api, call, began)


def _google_error(what: str, exc: BaseException) -> tuple[FalconError, str] | None:
    """Falcon's error for a Google client's, and its kind (the HTTP status, else timeout,
    connection or auth); None for an exception that is not the client's."""
    if isinstance(exc, gexc.GoogleAPICallError):
        code, detail = str(exc.code), _google_detail(exc)
        if isinstance(exc, gexc.NotFound):
            return NotFoundError(f"{what}: {detail}"), code
        if isinstance(exc, gexc.Conflict):
            return ConflictError(f"{what}: {detail}"), code
        if _is_temporary(exc, detail):
            # GKE busy: its 400 (the only temporary 400), or its 429 for the quota of operations
            busy = exc.code == 400 or _BUSY_QUOTA in detail.lower()
            return (BusyError if busy else TemporaryError)(f"{what}: {detail}"), code
        return PermanentError(f"{what}: {detail}"), code
    if isinstance(exc, (gexc.RetryError, TimeoutError, requests.Timeout)):
        return TemporaryError(f"{what}: {exc}"), "timeout"
    if isinstance(exc, _BROKEN_CONNECTION):
        return TemporaryError(f"{what}: {exc}"), "connection"
    if isinstance(exc, gauth.GoogleAuthError):
        return _auth_error(what, exc), "auth"
    return None


def _auth_error(what: str, exc: gauth.GoogleAuthError) -> FalconError:
    """A token refresh that could not reach Google (or that Google calls retryable) is temporary;
    refused credentials are final."""
    if isinstance(exc, gauth.TransportError) or exc.retryable:
        return TemporaryError(f"{what}: {exc}")
    return PermanentError(f"{what}: {exc}")


def _k8s_detail(exc: ApiException) -> str:
    import json

    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason)
    except ValueError:
        return str(exc.reason or exc.body)


@contextmanager
def kubernetes_errors(what: str, call: str = "") -> Iterator[None]:
    """Translate kubernetes-client errors raised inside the block; a ``call`` named is counted
    under api ``kubernetes``."""
    began = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        mapped = _kubernetes_error(what, exc)
        if mapped is None:
            raise
        error, kind = mapped
        _count("kubernetes" if call else None, call, began, error, kind)
        raise error from exc
    _count("kubernetes" if call else None, call, began)


def _kubernetes_error(what: str, exc: BaseException) -> tuple[FalconError, str] | None:
    if isinstance(exc, ApiException):
        detail = f"{what}: {_k8s_detail(exc)}"
        if exc.status == 404:
            return NotFoundError(detail), "404"
        if exc.status == 409:
            return ConflictError(detail), "409"
        if exc.status == 0:  # no answer at all
            return TemporaryError(detail), "connection"
        if exc.status in _RETRYABLE_HTTP:
            return TemporaryError(detail), str(exc.status)
        return PermanentError(detail), str(exc.status)
    if isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)):
        return TemporaryError(f"{what}: {exc}"), "timeout"
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):  # resets, refused connections
        return TemporaryError(f"{what}: {exc}"), "connection"
    if isinstance(exc, gauth.GoogleAuthError):  # the bearer token is refreshed inside the call
        return _auth_error(what, exc), "auth"
    return None


_OUTCOMES: dict[type[FalconError], str] = {
    NotFoundError: "not_found",
    ConflictError: "conflict",
    TemporaryError: "retryable",
}


def _count(
    api: str | None, call: str, began: float, error: FalconError | None = None, kind: str = ""
) -> None:
    if api is None:
        return
    API_SECONDS.labels(api, call).observe(time.perf_counter() - began)
    if error is None:
        API_CALLS.labels(api, call, "ok").inc()
        return
    outcome = _OUTCOMES.get(type(error), "retryable" if isinstance(error, TemporaryError) else "final")
    API_CALLS.labels(api, call, outcome).inc()
    retryable = "true" if isinstance(error, TemporaryError) else "false"
    API_ERRORS.labels(api, call, kind, retryable).inc()
