"""Map Google and Kubernetes client exceptions onto Falcon's retry-or-not taxonomy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import requests
import urllib3
from google.api_core import exceptions as gexc
from kubernetes.client.exceptions import ApiException

from falcon.domain.errors import ConflictError, NotFoundError, PermanentError, TemporaryError

T = TypeVar("T")

_RETRYABLE_HTTP = {408, 429, 500, 502, 503, 504}


def _google_detail(exc: gexc.GoogleAPICallError) -> str:
    return exc.message or str(exc)


@contextmanager
def google_errors(what: str) -> Iterator[None]:
    """Translate google-api-core errors raised inside the block; ``what`` names the call."""
    try:
        yield
    except gexc.NotFound as exc:
        raise NotFoundError(f"{what}: {_google_detail(exc)}") from exc
    except gexc.Conflict as exc:
        raise ConflictError(f"{what}: {_google_detail(exc)}") from exc
    except gexc.BadRequest as exc:
        # GKE answers 400 FAILED_PRECONDITION while another operation runs on the cluster.
        detail = _google_detail(exc)
        if "FAILED_PRECONDITION" in str(exc.response.text if exc.response is not None else "") or (
            "try again" in detail.lower()
        ):
            raise TemporaryError(f"{what}: {detail}", delay=5) from exc
        raise PermanentError(f"{what}: {detail}") from exc
    except gexc.GoogleAPICallError as exc:
        if exc.code in _RETRYABLE_HTTP:
            raise TemporaryError(f"{what}: {_google_detail(exc)}") from exc
        raise PermanentError(f"{what}: {_google_detail(exc)}") from exc
    except (gexc.RetryError, requests.ConnectionError, requests.Timeout) as exc:
        raise TemporaryError(f"{what}: {exc}") from exc


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
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TemporaryError(f"{what}: {exc}") from exc


def ignoring_not_found(call: Callable[[], T]) -> T | None:
    try:
        return call()
    except NotFoundError:
        return None
