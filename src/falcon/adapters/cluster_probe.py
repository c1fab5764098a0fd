"""Read what `falcon cluster check` judges (``domain.cluster_check``), with Falcon's own credentials.

The GKE, Compute reservation and Kubernetes clients are the dispatcher's (``bootstrap.Gateways``);
Compute's machine types get a client of their own, and the two calls with no client in the
project's dependencies go over REST with google.auth's ``AuthorizedSession``: Resource Manager's
``projects.testIamPermissions`` and Cloud Storage's ``buckets.getIamPolicy``. On the emulator every
base URL is ``FALCON_EMULATOR_URL``, as for the other clients. Every error becomes its check's
failure with the API's own message; no read stops another.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import google.auth.exceptions
import google.auth.transport.requests
import requests
from google.auth.credentials import Credentials
from kubernetes import client as k8s

from falcon.adapters.credentials import google_credentials
from falcon.adapters.errors import google_errors, kubernetes_errors
from falcon.adapters.iam import REQUIRED_PERMISSIONS, calls_needing
from falcon.domain.cluster_check import (
    CRD_NAME,
    GSA_ANNOTATION,
    Binding,
    Facts,
    Read,
    ReservationFacts,
    Setup,
    probe_machine_type,
)
from falcon.domain.errors import FalconError, NotFoundError
from falcon.domain.model import Cluster
from falcon.domain.node_pools import ReservationRef
from falcon.settings import Settings

if TYPE_CHECKING:
    from google.cloud import compute_v1

    from falcon.adapters.compute import Reservations

T = TypeVar("T")

RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com"
STORAGE = "https://storage.googleapis.com"


def machine_types_client(settings: Settings, credentials: Credentials) -> compute_v1.MachineTypesClient:
    from google.cloud import compute_v1

    options = {"api_endpoint": settings.emulator_url} if settings.emulator_url else {}
    return compute_v1.MachineTypesClient(credentials=credentials, client_options=options)


def _read(call: Callable[[], T]) -> Read[T]:
    """The call's value, or its error's text (Falcon's mapped errors carry the API's message)."""
    try:
        return Read(value=call())
    except NotFoundError as exc:
        return Read(error=str(exc), missing=True)
    except FalconError as exc:
        return Read(error=str(exc))


class RestError(FalconError):
    pass


class Clients(Protocol):
    """What the probe takes from ``bootstrap.Gateways`` (the adapters may not import the root)."""

    settings: Settings

    @property
    def reservations(self) -> Reservations: ...

    def kubernetes_api(self, cluster: Cluster) -> k8s.ApiClient: ...


class ClusterProbe:
    def __init__(self, gateways: Clients) -> None:
        self._gateways = gateways
        self._settings = gateways.settings
        self._credentials = google_credentials(self._settings)
        self._timeout = self._settings.api_timeout_seconds
        self._machine_types = machine_types_client(self._settings, self._credentials)

    def setup(self) -> Setup:
        email = getattr(self._credentials, "service_account_email", None)
        return Setup(
            required=REQUIRED_PERMISSIONS,
            job_service_account=self._settings.job_service_account or "default",
            controller=email if isinstance(email, str) and "@" in email else None,
            calls={p: calls_needing(p) for p in REQUIRED_PERMISSIONS},
        )

    def facts(self, cluster: Cluster, job_service_account: str) -> Facts:
        api: k8s.ApiClient | None = None
        try:  # GKE's get_cluster, for the endpoint and CA the Kubernetes client is built from
            api = self._gateways.kubernetes_api(cluster)
            reached: Read[str] = Read(value=str(api.configuration.host))
        except NotFoundError as exc:
            reached = Read(error=str(exc), missing=True)
        except FalconError as exc:
            reached = Read(error=str(exc))
        unreachable: Read[Any] = Read(skipped="cluster unreachable")
        namespace: Read[str] = unreachable
        account: Read[str] = unreachable
        crd: Read[str] = unreachable
        if api is not None:
            namespace = _read(lambda: self._namespace(api, cluster.namespace))
            account = (
                _read(lambda: self._account(api, cluster.namespace, job_service_account))
                if namespace.ok or not namespace.missing
                else Read(skipped=f"namespace {cluster.namespace} missing")
            )
            crd = _read(lambda: self._crd(api))
        return Facts(
            cluster=reached,
            held=_read(lambda: self._held(cluster.project)),
            machine_type=_read(lambda: self._machine_type(cluster)),
            namespace=namespace,
            service_account=account,
            bucket_policy=_read(lambda: self._bucket_policy(cluster.gcs_bucket)),
            crd=crd,
            reservation=_read(lambda: self._reservation(cluster)) if cluster.default_reservation else None,
        )

    # -- Google ----------------------------------------------------------------------------------------
    def _held(self, project: str) -> frozenset[str]:
        url = f"{self._base(RESOURCE_MANAGER)}/v1/projects/{project}:testIamPermissions"
        body = {"permissions": list(REQUIRED_PERMISSIONS)}
        answer = self._google_rest("cloudresourcemanager.projects.testIamPermissions", "POST", url, body)
        return frozenset(answer.get("permissions", []))  # proto3 JSON leaves out an empty list

    def _bucket_policy(self, bucket: str) -> tuple[Binding, ...]:
        url = f"{self._base(STORAGE)}/storage/v1/b/{bucket}/iam"
        answer = self._google_rest("storage.buckets.getIamPolicy", "GET", url)
        return tuple(
            Binding(str(b.get("role", "")), tuple(str(m) for m in b.get("members", [])))
            for b in answer.get("bindings", [])
        )

    def _machine_type(self, cluster: Cluster) -> str:
        machine, zone = probe_machine_type(cluster.tpu_type), cluster.node_zone
        with google_errors(
            f"get machine type {machine} in {cluster.project}/{zone}", "compute", "get_machine_type"
        ):
            found = self._machine_types.get(
                project=cluster.project, zone=zone, machine_type=machine, retry=None, timeout=self._timeout
            )
        return str(found.name)

    def _reservation(self, cluster: Cluster) -> ReservationFacts:
        assert cluster.default_reservation is not None
        ref = ReservationRef.parse(cluster.default_reservation, cluster.project)
        capacity = self._gateways.reservations.capacity(ref, cluster.node_zone)
        return ReservationFacts(capacity.status, capacity.machine_type, capacity.count, capacity.in_use)

    def _base(self, production: str) -> str:
        return (self._settings.emulator_url or production).rstrip("/")

    def _google_rest(self, method_id: str, verb: str, url: str, body: Any = None) -> dict[str, Any]:
        """One REST call of ``iam.REST_PERMISSIONS``'s ``method_id``; errors as Google words them."""
        session = google.auth.transport.requests.AuthorizedSession(self._credentials)  # type: ignore[no-untyped-call]
        with _rest_errors(f"{method_id} {url.split('/v1/', 1)[-1]}"):
            response = session.request(verb, url, json=body, timeout=self._timeout)  # type: ignore[no-untyped-call]
            if response.status_code >= 400:
                raise _http_error(response)
            answer = response.json()
        if not isinstance(answer, dict):
            raise RestError(f"{method_id}: not a JSON object: {str(answer)[:200]}")
        return answer

    # -- Kubernetes ------------------------------------------------------------------------------------
    def _namespace(self, api: k8s.ApiClient, name: str) -> str:
        with kubernetes_errors(f"read namespace {name}", "read_namespace"):
            found = k8s.CoreV1Api(api).read_namespace(name, _request_timeout=self._timeout)
        return name if found.metadata is None else str(found.metadata.name)

    def _account(self, api: k8s.ApiClient, namespace: str, name: str) -> str:
        what = f"read service account {namespace}/{name}"
        with kubernetes_errors(what, "read_namespaced_service_account"):
            found = k8s.CoreV1Api(api).read_namespaced_service_account(
                name, namespace, _request_timeout=self._timeout
            )
        annotations = (found.metadata.annotations if found.metadata else None) or {}
        return str(annotations.get(GSA_ANNOTATION, ""))

    def _crd(self, api: k8s.ApiClient) -> str:
        with kubernetes_errors(f"read CRD {CRD_NAME}", "read_custom_resource_definition"):
            found = k8s.ApiextensionsV1Api(api).read_custom_resource_definition(
                CRD_NAME, _request_timeout=self._timeout
            )
        return CRD_NAME if found.metadata is None else str(found.metadata.name)


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _http_error(response: Any) -> _HttpError:
    """Google's error envelope's message, else the status line."""
    try:
        message = str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = f"HTTP {response.status_code} {response.reason}"
    return _HttpError(int(response.status_code), message)


@contextmanager
def _rest_errors(what: str) -> Iterator[None]:
    try:
        yield
    except _HttpError as exc:
        error = NotFoundError if exc.status == 404 else RestError
        raise error(f"{what}: {exc}") from exc
    except (requests.RequestException, google.auth.exceptions.GoogleAuthError) as exc:
        raise RestError(f"{what}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise RestError(f"{what}: not JSON: {exc}") from exc
