"""Workload Identity wiring: each edge cluster's Kubernetes client takes the GKE endpoint and CA,
and a bearer token that is refreshed before a request once the credentials are no longer valid."""

from __future__ import annotations

import base64
from pathlib import Path

from falcon.adapters.credentials import kubernetes_client
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
