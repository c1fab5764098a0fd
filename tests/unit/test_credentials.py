"""Workload Identity wiring: each edge cluster's Kubernetes client takes the GKE endpoint and CA,
and a bearer token that is refreshed before a request once the credentials are no longer valid."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from falcon.adapters.credentials import google_credentials, kubernetes_client, resource_policies_client
from falcon.settings import Settings


class ExpiringCredentials:
    """google-auth Credentials at the edge of the unit: every refresh issues a new token."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.refreshes = 0
        self.valid = False

    def refresh(self, _request: object) -> None:
        self.refreshes += 1
        self.token = f"tok-{self.refreshes}"
        self.valid = True


def test_production_client_uses_https_the_cluster_ca_and_refreshed_bearer_tokens(tmp_path: Path) -> None:
    creds = ExpiringCredentials()
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    api = kubernetes_client(Settings(emulator_url=None), creds, "34.1.2.3", base64.b64encode(pem).decode())
    config = api.configuration
    assert config.host == "https://34.1.2.3"
    assert Path(config.ssl_ca_cert).read_bytes() == pem
    assert config.get_api_key_with_prefix("authorization") == "Bearer tok-1"
    creds.valid = False  # within google-auth's refresh window before expiry
    assert config.get_api_key_with_prefix("authorization") == "Bearer tok-2"
    assert config.get_api_key_with_prefix("authorization") == "Bearer tok-2"  # still valid: no refresh
    assert creds.refreshes == 2


def test_emulator_client_is_plain_http_without_credentials() -> None:
    api = kubernetes_client(
        Settings(emulator_url="http://127.0.0.1:1"), ExpiringCredentials(), "127.0.0.1:1/k8s/p/l/c", ""
    )
    assert api.configuration.host == "http://127.0.0.1:1/k8s/p/l/c"
    assert not api.configuration.api_key


class _Recorder(BaseHTTPRequestHandler):
    """A stand-in Compute endpoint at the edge of the unit: records the request, returns a policy."""

    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("authorization")))
        body = json.dumps(
            {"name": "falcon-tpu7x-2x2x2", "workloadPolicy": {"type": "HIGH_THROUGHPUT"}}
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def test_resource_policies_client_reaches_the_emulator_over_http_anonymously() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        settings = Settings(emulator_url=f"http://127.0.0.1:{server.server_address[1]}")
        client = resource_policies_client(settings, google_credentials(settings))
        found = client.get(project="proj-a", region="us-east5", resource_policy="falcon-tpu7x-2x2x2")
    finally:
        server.shutdown()
        thread.join()
    assert found.workload_policy.type_ == "HIGH_THROUGHPUT"
    ((path, authorization),) = _Recorder.seen
    assert path.startswith("/compute/v1/projects/proj-a/regions/us-east5/resourcePolicies/falcon-tpu7x-2x2x2")
    assert authorization is None
