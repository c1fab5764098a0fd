"""The composition root: settings in, adapters out. Built lazily, once per process.

Prefect tasks receive ids, not clients (clients are unhashable and break task caching), and
look the adapters up here.
"""

from __future__ import annotations

import threading
from functools import cached_property

from falcon.adapters.compute import Reservations, WorkloadPolicies
from falcon.adapters.credentials import (
    gke_client,
    google_credentials,
    kubernetes_client,
    reservations_client,
    resource_policies_client,
)
from falcon.adapters.gke import GkeNodePools
from falcon.adapters.k8s import KubernetesJobs
from falcon.domain.model import Cluster
from falcon.settings import Settings, get_settings


class Gateways:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._jobs: dict[str, KubernetesJobs] = {}
        self._lock = threading.Lock()

    @cached_property
    def _credentials(self):  # type: ignore[no-untyped-def]
        return google_credentials(self.settings)

    @cached_property
    def node_pools(self) -> GkeNodePools:
        return GkeNodePools(gke_client(self.settings, self._credentials), self.settings.api_timeout_seconds)

    @cached_property
    def reservations(self) -> Reservations:
        client = reservations_client(self.settings, self._credentials)
        return Reservations(client, self.settings.api_timeout_seconds)

    @cached_property
    def workload_policies(self) -> WorkloadPolicies:
        client = resource_policies_client(self.settings, self._credentials)
        return WorkloadPolicies(client, self.settings.api_timeout_seconds)

    def jobs(self, cluster: Cluster) -> KubernetesJobs:
        """The Kubernetes API of one edge cluster, located through GKE on first use."""
        with self._lock:
            if cluster.id not in self._jobs:
                endpoint = self.node_pools.endpoint(cluster)
                api = kubernetes_client(
                    self.settings, self._credentials, endpoint.endpoint, endpoint.ca_certificate_b64
                )
                self._jobs[cluster.id] = KubernetesJobs(api, self.settings.api_timeout_seconds)
            return self._jobs[cluster.id]


_gateways: Gateways | None = None
_gateways_lock = threading.Lock()


def gateways() -> Gateways:
    global _gateways
    with _gateways_lock:
        if _gateways is None or _gateways.settings is not get_settings():
            _gateways = Gateways(get_settings())
        return _gateways
