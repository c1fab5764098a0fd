"""The ASGI middleware that applies fault rules (faults.py) to the GKE, Compute and Kubernetes routes.

Errors take each API's own wire shape: GKE's Google JSON error envelope, Compute's envelope with
``errors[].reason``, the apiserver's Status object. A reset aborts the TCP connection with RST and
sends no HTTP response at all, which ASGI cannot express: it reaches the transport through uvicorn's
request cycle, whose bound ``receive`` the middleware gets.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import time

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from falcon_emulator.compute_api import compute_error_response
from falcon_emulator.errors import GoogleError, kube_error, kube_response
from falcon_emulator.faults import RESET, FaultRule
from falcon_emulator.state import EmulatorState
from falcon_emulator.util import random_hex

_API_PREFIXES = ("/v1/", "/compute/", "/k8s/")


class FaultInjection:
    def __init__(self, app: ASGIApp, state: EmulatorState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.startswith(_API_PREFIXES):
            await self.app(scope, receive, send)
            return
        with self.state.lock:
            rule = self.state.faults.take(str(scope["method"]), path)
        if rule is None:
            await self.app(scope, receive, send)
            return
        request = receive
        if rule.delay_seconds:
            request = await _read_request(receive)
            await asyncio.sleep(rule.delay_seconds)
        if rule.action == RESET:
            await _reset(receive)
        elif rule.status is None:
            await self.app(scope, request, send)
        else:
            await _error_response(path, rule)(scope, receive, send)


async def _read_request(receive: Receive) -> Receive:
    """Read the body now and replay it: a request the client gave up on during the delay is still
    carried out, as on a real server whose answer comes too late (its response is dropped)."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = bool(message.get("more_body"))
    pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


async def _reset(receive: Receive) -> None:
    """Close the connection with a TCP RST (SO_LINGER 0), so the client reads ECONNRESET."""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    if not isinstance(transport, asyncio.Transport):
        raise RuntimeError("a reset fault needs uvicorn's request cycle to reach the connection")
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
    await asyncio.sleep(0)  # let the server see the connection lost before the app returns


def _error_response(path: str, rule: FaultRule) -> Response:
    status = rule.status or 500
    if path.startswith("/k8s/"):
        return kube_response(kube_error(status, rule.message or "injected fault"))
    if path.startswith("/compute/"):
        return compute_error_response(GoogleError(status, rule.message or "injected fault", rule.status_name))
    message = rule.message or _gke_text(path, status, rule.status_name)
    return GoogleError(status, message, rule.status_name).response()


def _gke_text(path: str, status: int, status_name: str | None) -> str:
    """GKE's texts for its two refusals that say "try again" (busy, too many operations)."""
    cluster = match.group(1) if (match := re.search(r"/clusters/([^/]+)", path)) else "-"
    if status == 400 and status_name == "FAILED_PRECONDITION":
        operation = f"operation-{int(time.time() * 1000)}-{random_hex(8)}"
        return (
            f"Operation {operation} is currently creating a node pool for cluster {cluster}. "
            "Please wait and try again once it is done."
        )
    if status == 429:
        return (
            f'Too many operations: cluster "{cluster}" hits the concurrent operations quota 5, '
            "please try again later."
        )
    return "injected fault"
