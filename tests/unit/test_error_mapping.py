"""Retry or not: the clients' own exceptions, built as the clients build them, through the adapters'
error mappers. Google errors come from ``from_http_response`` on a requests Response carrying the
JSON error envelope (what the REST transports do); Kubernetes errors from a urllib3 response wrapped
in the client's RESTResponse; transport failures are the exceptions requests and urllib3 raise."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests
import urllib3
from google.api_core import exceptions as gexc
from google.auth import exceptions as gauth
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse

from falcon.adapters.errors import google_errors, kubernetes_errors
from falcon.domain.errors import (
    BusyError,
    ConflictError,
    FalconError,
    NotFoundError,
    PermanentError,
    TemporaryError,
)

APISERVER = urllib3.HTTPConnectionPool("127.0.0.1")  # names the host in urllib3's messages; never opened
GKE_URL = "https://container.googleapis.com/v1/projects/p/locations/l/clusters/c/nodePools"
BUSY = (
    "Operation operation-1533161820212-e0451fc6 is currently creating a node pool for cluster c. "
    "Please wait and try again once it is done."
)


def google_error(code: int, message: str, status: str, reason: str | None = None) -> gexc.GoogleAPICallError:
    error: dict[str, Any] = {"code": code, "message": message, "status": status, "details": []}
    if reason:  # Compute adds errors[].reason
        error["errors"] = [{"message": message, "domain": "global", "reason": reason}]
    response = requests.Response()
    response.status_code = code
    response._content = json.dumps({"error": error}).encode()
    response.request = requests.Request("POST", GKE_URL).prepare()
    return gexc.from_http_response(response)


def kube_error(code: int, reason: str, message: str) -> ApiException:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
    body = json.dumps(dict(status, reason=reason, code=code)).encode()
    response = urllib3.HTTPResponse(body=body, status=code, reason=reason, preload_content=False)
    wrapped = RESTResponse(response)
    wrapped.data = body
    return ApiException(http_resp=wrapped)


def reset() -> urllib3.exceptions.ProtocolError:
    return urllib3.exceptions.ProtocolError(
        "Connection aborted.", ConnectionResetError(104, "Connection reset by peer")
    )


def mapped(mapper: Callable[[str], Any], raised: BaseException) -> FalconError:
    with pytest.raises(FalconError) as caught, mapper("create node pool p"):
        raise raised
    return caught.value


GOOGLE_CASES = [
    pytest.param(
        google_error(400, BUSY, "FAILED_PRECONDITION"), BusyError, id="GKE busy: 400 FAILED_PRECONDITION"
    ),
    pytest.param(
        google_error(400, "Cluster is running incompatible operation operation-1718.", "FAILED_PRECONDITION"),
        BusyError,
        id="GKE busy with a cluster-level operation (a control-plane upgrade)",
    ),
    pytest.param(
        google_error(
            429,
            'Too many operations: cluster "c" hits the concurrent operations quota 5, please try again.',
            "RESOURCE_EXHAUSTED",
        ),
        BusyError,
        id="GKE 429 too many operations: its quota of them running side by side",
    ),
    pytest.param(
        google_error(
            429,
            "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute'",
            "RESOURCE_EXHAUSTED",
            "rateLimitExceeded",
        ),
        TemporaryError,
        id="Compute 429 per-minute rate limit",
    ),
    pytest.param(
        google_error(403, "Rate Limit Exceeded", "PERMISSION_DENIED", "rateLimitExceeded"),
        TemporaryError,
        id="Compute 403 rateLimitExceeded",
    ),
    pytest.param(google_error(500, "Internal error.", "INTERNAL"), TemporaryError, id="500"),
    pytest.param(google_error(502, "Bad Gateway", "UNAVAILABLE"), TemporaryError, id="502"),
    pytest.param(
        google_error(503, "The service is currently unavailable.", "UNAVAILABLE"), TemporaryError, id="503"
    ),
    pytest.param(google_error(504, "Deadline exceeded.", "DEADLINE_EXCEEDED"), TemporaryError, id="504"),
    pytest.param(
        google_error(400, "Node pool version 1.30 is older than the master.", "FAILED_PRECONDITION"),
        PermanentError,
        id="400 FAILED_PRECONDITION that is not busy",
    ),
    pytest.param(
        google_error(400, "Invalid value for field 'nodePool.config'.", "INVALID_ARGUMENT"),
        PermanentError,
        id="400 INVALID_ARGUMENT",
    ),
    pytest.param(
        google_error(
            429, "Quota 'TPU_V6E_PODSLICE' exceeded. Limit: 0.0 in region us-east5.", "RESOURCE_EXHAUSTED"
        ),
        PermanentError,
        id="429 exhausted resource quota",
    ),
    pytest.param(
        google_error(403, "Required 'container.clusters.update' permission.", "PERMISSION_DENIED"),
        PermanentError,
        id="403 permission",
    ),
    pytest.param(google_error(501, "Method not implemented.", "UNIMPLEMENTED"), PermanentError, id="501"),
    pytest.param(google_error(404, "Not found: nodePools/p.", "NOT_FOUND"), NotFoundError, id="404"),
    pytest.param(
        google_error(409, "Already exists: nodePools/p.", "ALREADY_EXISTS"), ConflictError, id="409"
    ),
    pytest.param(requests.ConnectionError(reset()), TemporaryError, id="connection reset"),
    pytest.param(
        requests.ConnectionError("Failed to establish a new connection"), TemporaryError, id="refused"
    ),
    pytest.param(requests.ReadTimeout("Read timed out. (read timeout=5)"), TemporaryError, id="read timeout"),
    pytest.param(requests.ConnectTimeout("Connect timed out"), TemporaryError, id="connect timeout"),
    pytest.param(requests.exceptions.ChunkedEncodingError(reset()), TemporaryError, id="answer cut short"),
    pytest.param(TimeoutError("operation did not finish"), TemporaryError, id="operation wait timed out"),
    pytest.param(
        gexc.RetryError("Deadline of 20.0s exceeded", None), TemporaryError, id="api-core retry gave up"
    ),
    pytest.param(
        gauth.TransportError("metadata server unreachable"), TemporaryError, id="token refresh: network"
    ),
    pytest.param(
        gauth.RefreshError("temporarily unavailable", retryable=True),
        TemporaryError,
        id="token refresh: retryable",
    ),
    pytest.param(
        gauth.RefreshError("invalid_grant: account disabled"), PermanentError, id="token refresh: refused"
    ),
]


@pytest.mark.parametrize(("raised", "expected"), GOOGLE_CASES)
def test_google_errors_are_classified(raised: BaseException, expected: type[FalconError]) -> None:
    assert type(mapped(google_errors, raised)) is expected


def test_gke_busy_is_told_apart_from_other_temporary_errors() -> None:
    busy = mapped(google_errors, google_error(400, BUSY, "FAILED_PRECONDITION"))
    unavailable = mapped(google_errors, google_error(503, "unavailable", "UNAVAILABLE"))
    assert isinstance(busy, BusyError) and isinstance(busy, TemporaryError)  # Prefect's retries too
    assert type(unavailable) is TemporaryError


def test_a_google_error_carries_googles_text_without_the_method_and_url() -> None:
    text = "Quota 'TPU_V6E_PODSLICE' exceeded. Limit: 0.0 in region us-east5."
    error = mapped(google_errors, google_error(429, text, "RESOURCE_EXHAUSTED"))
    assert str(error) == f"create node pool p: {text}"


KUBERNETES_CASES = [
    pytest.param(kube_error(429, "TooManyRequests", "storage is (re)initializing"), TemporaryError, id="429"),
    pytest.param(kube_error(500, "InternalError", "etcdserver: request timed out"), TemporaryError, id="500"),
    pytest.param(
        kube_error(503, "ServiceUnavailable", "the server is currently unable to handle the request"),
        TemporaryError,
        id="503",
    ),
    pytest.param(
        kube_error(504, "Timeout", "the server was unable to return a response in the time allotted"),
        TemporaryError,
        id="504",
    ),
    pytest.param(
        kube_error(403, "Forbidden", "admission webhook denied the request"), PermanentError, id="403"
    ),
    pytest.param(kube_error(422, "Invalid", 'Job.batch "j" is invalid'), PermanentError, id="422"),
    pytest.param(
        kube_error(400, "BadRequest", "the request body is not valid JSON"), PermanentError, id="400"
    ),
    pytest.param(kube_error(404, "NotFound", 'jobs.batch "j" not found'), NotFoundError, id="404"),
    pytest.param(kube_error(409, "AlreadyExists", 'jobs.batch "j" already exists'), ConflictError, id="409"),
    pytest.param(
        urllib3.exceptions.MaxRetryError(APISERVER, "/apis/batch/v1/jobs", reset()),
        TemporaryError,
        id="reset, client retries spent",
    ),
    pytest.param(reset(), TemporaryError, id="connection reset"),
    pytest.param(
        urllib3.exceptions.ReadTimeoutError(APISERVER, "/apis/batch/v1/jobs", "Read timed out."),
        TemporaryError,
        id="read timeout",
    ),
    pytest.param(ConnectionRefusedError(111, "Connection refused"), TemporaryError, id="refused"),
    pytest.param(
        gauth.TransportError("metadata server unreachable"), TemporaryError, id="token refresh: network"
    ),
    pytest.param(
        gauth.RefreshError("invalid_grant: account disabled"), PermanentError, id="token refresh: refused"
    ),
]


@pytest.mark.parametrize(("raised", "expected"), KUBERNETES_CASES)
def test_kubernetes_errors_are_classified(raised: BaseException, expected: type[FalconError]) -> None:
    assert type(mapped(kubernetes_errors, raised)) is expected


def test_a_kubernetes_error_carries_the_status_message() -> None:
    error = mapped(kubernetes_errors, kube_error(403, "Forbidden", "admission webhook denied the request"))
    assert str(error) == "create node pool p: admission webhook denied the request"
