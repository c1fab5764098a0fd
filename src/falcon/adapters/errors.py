"""Map Google and Kubernetes client exceptions onto Falcon's retry-or-not taxonomy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests
import urllib3
from google.api_core import exceptions as gexc
from google.auth import exceptions as gauth
from kubernetes.client.exceptions import ApiException

from falcon.domain.errors import (
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
# GKE's 400 FAILED_PRECONDITION while another operation runs on the cluster ("... is currently
# creating a node pool ... Please wait and try again once it is done.").
_BUSY = ("try again", "in progress", "is currently")


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
def google_errors(what: str) -> Iterator[None]:
    """Translate google-api-core errors raised inside the block; ``what`` names the call."""
    try:
        yield
    except gexc.NotFound as exc:
        raise NotFoundError(f"{what}: {_google_detail(exc)}") from exc
    except gexc.Conflict as exc:
        raise ConflictError(f"{what}: {_google_detail(exc)}") from exc
    except gexc.GoogleAPICallError as exc:
        detail = _google_detail(exc)
        if _is_temporary(exc, detail):
            raise TemporaryError(f"{what}: {detail}", delay=5 if exc.code == 400 else None) from exc
        raise PermanentError(f"{what}: {detail}") from exc
    except (gexc.RetryError, TimeoutError, *_BROKEN_CONNECTION) as exc:
        raise TemporaryError(f"{what}: {exc}") from exc
    except gauth.GoogleAuthError as exc:
        raise _auth_error(what, exc) from exc


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
def kubernetes_errors(what: str) -> Iterator[None]:
    """Translate kubernetes-client errors raised inside the block."""
    try:
        yield
    except ApiException as exc:
        detail = f"{what}: {_k8s_detail(exc)}"
        if exc.status == 404:
            raise NotFoundError(detail) from exc
        if exc.status == 409:
            raise ConflictError(detail) from exc
        if exc.status in _RETRYABLE_HTTP or exc.status == 0:
            raise TemporaryError(detail) from exc
        raise PermanentError(detail) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:  # resets, timeouts, refused connections
        raise TemporaryError(f"{what}: {exc}") from exc
    except gauth.GoogleAuthError as exc:  # the bearer token is refreshed inside the call
        raise _auth_error(what, exc) from exc
