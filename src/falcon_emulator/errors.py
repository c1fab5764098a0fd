"""Error bodies: the Google JSON error envelope and the Kubernetes Status object."""

from __future__ import annotations

import json

from starlette.responses import Response

from falcon_emulator.store import KubeError
from falcon_emulator.util import JSON

GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
K8S_REASON = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class GoogleError(Exception):
    """An error of a Google API, rendered as {"error": {code, message, status}} with HTTP status = code."""

    def __init__(self, code: int, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message = code, message
        self.status = status or GOOGLE_STATUS.get(code, "UNKNOWN")

    def envelope(self) -> JSON:
        return {"error": {"code": self.code, "message": self.message, "status": self.status, "details": []}}

    def response(self) -> Response:
        return json_response(self.envelope(), self.code)


def google_not_found(what: str) -> GoogleError:
    return GoogleError(404, f"Not found: {what}.")


def kube_error(code: int, message: str) -> KubeError:
    return KubeError(code, K8S_REASON.get(code, "Unknown"), message)


def kube_response(error: KubeError) -> Response:
    return json_response(error.status(), error.code)


def json_response(body: object, status: int = 200) -> Response:
    return Response(content=json.dumps(body).encode(), status_code=status, media_type="application/json")
