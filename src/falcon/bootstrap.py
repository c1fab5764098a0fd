"""The composition root: settings in, services wired to the real adapters out. Built lazily,
once per process (and again when the settings change).

Prefect tasks receive ids and plain data, not clients (clients are unhashable and break task
caching); they look the services up here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING

from kubernetes import client as k8s

from falcon.adapters.clock import SystemClock
from falcon.adapters.credentials import (
    gke_client,
    google_credentials,
    kubernetes_client,
    reservations_client,
    resource_policies_client,
)
from falcon.adapters.db.store import SqlTaskStore
from falcon.adapters.gke import GkeNodePools
from falcon.adapters.k8s import KubernetesJobs
from falcon.adapters.metrics import PrometheusTidalMetrics
from falcon.adapters.stopped_runs_log import log_planned_stops_at_info
from falcon.adapters.task_events import PrometheusTaskEvents
from falcon.adapters.tidal_k8s import TidalKubernetes
from falcon.domain.model import Cluster
from falcon.domain.pool_economics import CostPolicy
from falcon.services.context import Services
from falcon.services.ports import Launcher
from falcon.services.tidal import ClusterWorkers, Log, TidalConfig, TidalController
from falcon.settings import Settings, get_settings

if TYPE_CHECKING:
    from falcon.adapters.compute import Reservations, WorkloadPolicies


class Gateways:
    """The cloud clients, built on first use: GKE, Compute, and one Kubernetes API per cluster."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._kubernetes: dict[str, k8s.ApiClient] = {}
        self._jobs: dict[str, KubernetesJobs] = {}
        self._tidal: dict[str, TidalKubernetes] = {}
        self._lock = threading.RLock()  # kubernetes_api is taken under it, and alone

    @cached_property
    def _credentials(self):  # type: ignore[no-untyped-def]
        return google_credentials(self.settings)

    @cached_property
    def node_pools(self) -> GkeNodePools:
        return GkeNodePools(gke_client(self.settings, self._credentials), self.settings.api_timeout_seconds)

    @cached_property
    def reservations(self) -> Reservations:
        from falcon.adapters.compute import Reservations  # the Compute client: seconds to import

        client = reservations_client(self.settings, self._credentials)
        return Reservations(client, self.settings.api_timeout_seconds)

    @cached_property
    def workload_policies(self) -> WorkloadPolicies:
        from falcon.adapters.compute import WorkloadPolicies

        client = resource_policies_client(self.settings, self._credentials)
        return WorkloadPolicies(client, self.settings.api_timeout_seconds)

    def jobs(self, cluster: Cluster) -> KubernetesJobs:
        """Falcon's Jobs, pods and Services on one edge cluster."""
        with self._lock:
            if cluster.id not in self._jobs:
                api = self.kubernetes_api(cluster)
                settings = self.settings
                self._jobs[cluster.id] = KubernetesJobs(
                    api, settings.api_timeout_seconds, settings.job_watch_seconds
                )
            return self._jobs[cluster.id]

    def tidal(self, cluster: Cluster) -> TidalKubernetes:
        """The TidalSchedulers of one edge cluster and the workloads they scale."""
        with self._lock:
            if cluster.id not in self._tidal:
                api = self.kubernetes_api(cluster)
                timeouts = self.settings.api_timeout_seconds, self.settings.tidal_watch_seconds
                self._tidal[cluster.id] = TidalKubernetes(api, *timeouts)
            return self._tidal[cluster.id]

    def kubernetes_api(self, cluster: Cluster) -> k8s.ApiClient:
        """The Kubernetes API of one edge cluster, located through GKE on first use."""
        with self._lock:
            if cluster.id not in self._kubernetes:
                endpoint = self.node_pools.endpoint(cluster)
                self._kubernetes[cluster.id] = kubernetes_client(
                    self.settings, self._credentials, endpoint.endpoint, endpoint.ca_certificate_b64
                )
            return self._kubernetes[cluster.id]


def log_falcon_at(settings: Settings) -> None:
    """Set the level of Falcon's loggers. Prefect's logging config gives the ``falcon`` logger
    its run-log handler (PREFECT_LOGGING_EXTRA_LOGGERS) but no level, so it would inherit the
    root's WARNING and drop every ``event=…`` line Falcon logs at INFO. Steps ended by a planned
    stop (a dispatcher's handover) are logged at INFO, not as errors."""
    logging.getLogger("falcon").setLevel(settings.log_level.value)
    log_planned_stops_at_info()


def build_services(settings: Settings, launcher: Launcher | None = None) -> Services:
    # Prefect is imported here, not above: `falcon tidal` reaches the clusters through Gateways
    # and has no use for it (importing Prefect is seconds of a command's start).
    from falcon.adapters.runs import DeploymentLauncher
    from falcon.adapters.slots import PrefectSlots, SlotNames

    log_falcon_at(settings)
    gateways = Gateways(settings)
    store = SqlTaskStore(settings.resolved_database_url)
    return Services(
        settings=settings,
        store=store,
        node_pools=gateways.node_pools,
        reservations=gateways.reservations,
        workload_policies=gateways.workload_policies,
        jobs=gateways.jobs,
        slots=PrefectSlots(SlotNames(store.clusters)),
        launcher=launcher or DeploymentLauncher(),
        clock=SystemClock(),
        keep_policy=CostPolicy(
            settings.pool_creation_prior_seconds,
            start_delay_weight=settings.pool_start_delay_weight,
            busy_wait_chance=settings.pool_busy_wait_chance,
        ),
        events=PrometheusTaskEvents(store.clusters),
    )


def build_tidal_controller(settings: Settings, log: Log) -> tuple[TidalController, ClusterWorkers]:
    """The TidalScheduler controller over the registry's clusters; the caller closes the workers
    once the controller's run is over."""
    log_falcon_at(settings)
    gateways = Gateways(settings)
    store = SqlTaskStore(settings.resolved_database_url)
    workers = ClusterWorkers(settings.tidal_workers_per_cluster)
    controller = TidalController(
        store.clusters,
        gateways.tidal,
        SystemClock(),
        TidalConfig.of(settings),
        PrometheusTidalMetrics(),
        log,
        workers.submit,
    )
    return controller, workers


_services: Services | None = None
_served: Services | None = None
_services_lock = threading.Lock()


def services() -> Services:
    """The process's services: those given to ``serving``, else built for the current settings."""
    global _services
    with _services_lock:
        if _served is not None:
            return _served
        if _services is None or _services.settings is not get_settings():
            _services = build_services(get_settings())
        return _services


@contextmanager
def serving(given: Services) -> Iterator[Services]:
    """Run this process's flows on ``given`` services for the block: a process that embeds the
    flows with its own wiring (the economics benchmark's baseline keep policies, for one)."""
    global _served
    with _services_lock:
        previous, _served = _served, given
    try:
        yield given
    finally:
        with _services_lock:
            _served = previous
