"""Kubernetes probes for a long-running flow's process (the dispatcher, the tidal controller):
``GET /livez`` and ``GET /readyz`` over the standard library's HTTP server, on a thread of their
own so a wedged loop can still be reported as such; the readiness checks of the database and the
Prefect API; and ``GET /metrics``, prometheus_client's default registry in its text format.

Probes answer 200 when healthy, 503 otherwise; the JSON body names every check and what failed.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

import sqlalchemy as sa
from prefect.client.orchestration import get_client
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from sqlalchemy.pool import NullPool


class Answer(Protocol):
    @property
    def healthy(self) -> bool: ...
    @property
    def checks(self) -> Mapping[str, str]: ...


Probe = Callable[[], Answer]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, routes: Mapping[str, Probe]) -> None:
        super().__init__(("0.0.0.0", port), _Handler)  # the kubelet probes the pod IP
        self.routes = routes


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
            return
        probe = self.server.routes.get(path)
        if probe is None:
            self._reply(404, {"status": "unknown path", "paths": [*sorted(self.server.routes), "/metrics"]})
            return
        answer = probe()
        status = "ok" if answer.healthy else "failing"
        self._reply(200 if answer.healthy else 503, {"status": status, "checks": dict(answer.checks)})

    def _reply(self, code: int, body: dict[str, object]) -> None:
        self._send(code, "application/json", json.dumps(body).encode())

    def _send(self, code: int, content_type: str, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Silent: the kubelet probes every few seconds, and a failing answer is in its events."""


@contextmanager
def serving_health(port: int, live: Probe, ready: Probe) -> Iterator[int]:
    """Serve ``/livez``, ``/readyz`` and ``/metrics`` on ``port`` (0: any free one) for the block;
    yields the port."""
    server = _Server(port, {"/livez": live, "/readyz": ready})
    thread = threading.Thread(target=server.serve_forever, args=(0.1,), name="health", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def database_check(url: str, timeout: float) -> Callable[[], None]:
    """``SELECT 1`` on a new connection each time: a pooled one could outlive the database it
    reached (a SQLite file removed underneath it still answers through an open handle)."""
    engine = _probe_engine(url, timeout)

    def check() -> None:
        with engine.connect() as connection:
            connection.execute(sa.select(sa.literal(1)))

    return check


def _probe_engine(url: str, timeout: float) -> sa.Engine:
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        # mode=rw: a missing database file is an error, not a new empty database.
        return sa.create_engine(
            "sqlite://",
            creator=lambda: sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=timeout),
            poolclass=NullPool,
        )
    limits = {"connect_timeout": timeout, "read_timeout": timeout}
    return sa.create_engine(url, poolclass=NullPool, connect_args=limits if url.startswith("mysql") else {})


def prefect_check(timeout: float) -> Callable[[], None]:
    """The Prefect API's ``/health``, through the client the process is configured with."""

    def check() -> None:
        with get_client(sync_client=True, httpx_settings={"timeout": timeout}) as client:
            failure = client.api_healthcheck()
        if failure is not None:
            raise failure

    return check
