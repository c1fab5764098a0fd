"""Build the Google and Kubernetes clients: Workload Identity in production, anonymous on the emulator.

Production: credentials come from a prefect-gcp ``GcpCredentials`` block when
``FALCON_GCP_CREDENTIALS_BLOCK`` names one (an empty block means Application Default Credentials),
otherwise straight from ADC. Each edge cluster's Kubernetes client is built from the GKE endpoint
and CA with a bearer token that is refreshed before every request once it nears expiry.
Emulator (``FALCON_EMULATOR_URL``): the same clients, anonymous, pointed at the emulator over HTTP.
"""

from __future__ import annotations

import base64
import tempfile
import threading
from typing import TYPE_CHECKING, Any

import google.auth
import google.auth.transport.requests
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import container_v1
from kubernetes import client as k8s

from falcon.settings import Settings

if TYPE_CHECKING:  # ~2 s of imports that `falcon tidal` (Kubernetes only) never needs
    from google.cloud import compute_v1

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def google_credentials(settings: Settings) -> Credentials:
    if settings.emulator_url:
        return AnonymousCredentials()  # type: ignore[no-untyped-call]
    if settings.gcp_credentials_block:
        from prefect_gcp import GcpCredentials

        block = GcpCredentials.load(settings.gcp_credentials_block)
        return block.get_credentials_from_service_account()  # type: ignore[no-any-return]
    credentials, _ = google.auth.default(scopes=SCOPES)
    return credentials


def _client_options(settings: Settings) -> dict[str, str]:
    return {"api_endpoint": settings.emulator_url} if settings.emulator_url else {}


def gke_client(settings: Settings, credentials: Credentials) -> container_v1.ClusterManagerClient:
    return container_v1.ClusterManagerClient(
        transport="rest", credentials=credentials, client_options=_client_options(settings)
    )


def reservations_client(settings: Settings, credentials: Credentials) -> compute_v1.ReservationsClient:
    from google.cloud import compute_v1

    return compute_v1.ReservationsClient(credentials=credentials, client_options=_client_options(settings))


def resource_policies_client(
    settings: Settings, credentials: Credentials
) -> compute_v1.ResourcePoliciesClient:
    """Compute resource policies: where the TPU7x workload policies live."""
    from google.cloud import compute_v1

    return compute_v1.ResourcePoliciesClient(
        credentials=credentials, client_options=_client_options(settings)
    )


class _TokenSource:
    """A bearer token from Google credentials, refreshed under a lock when it nears expiry."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self._lock = threading.Lock()
        self._request = google.auth.transport.requests.Request()

    def header(self) -> str:
        with self._lock:
            if not self._credentials.valid:
                self._credentials.refresh(self._request)  # type: ignore[no-untyped-call]
            return f"Bearer {self._credentials.token}"


def kubernetes_client(
    settings: Settings, credentials: Credentials, endpoint: str, ca_certificate_b64: str
) -> k8s.ApiClient:
    config = k8s.Configuration()
    config.retries = 0  # urllib3 would repeat a reset or a timeout at once; Falcon's retries own the wait
    if settings.emulator_url:
        config.host = f"http://{endpoint}"
        return k8s.ApiClient(config)
    config.host = f"https://{endpoint}"
    with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
        ca.write(base64.b64decode(ca_certificate_b64))
    config.ssl_ca_cert = ca.name
    tokens = _TokenSource(credentials)
    config.api_key = {"authorization": tokens.header()}

    def refresh(cfg: Any) -> None:  # runs before every request
        cfg.api_key["authorization"] = tokens.header()

    config.refresh_api_key_hook = refresh  # type: ignore[assignment]
    return k8s.ApiClient(config)
