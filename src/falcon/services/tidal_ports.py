"""What the TidalScheduler controller needs from the outside world: one cluster's API, metrics.

``falcon.adapters.tidal_k8s`` implements ``TidalObjects`` on the Kubernetes client,
``falcon.adapters.metrics`` implements ``TidalMetrics`` on prometheus_client; the unit tests use
in-memory fakes of both.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from falcon.domain.tidal import TargetRef, WatchEvent


class TidalObjects(Protocol):
    """The TidalSchedulers of one cluster, in all namespaces, and the targets they name."""

    def list(self) -> tuple[list[Mapping[str, Any]], str]:
        """Every object, and the list's resourceVersion to watch from."""
        ...

    def watch(self, resource_version: str, stop: threading.Event) -> Iterator[WatchEvent]:
        """Changes after ``resource_version`` until the server ends the stream or ``stop`` is set;
        raises ``ResourceVersionGone`` when that version is too old to watch from."""
        ...

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge ``status`` into the object through its status subresource."""
        ...

    def target_exists(self, target: TargetRef) -> bool: ...

    def replicas(self, target: TargetRef) -> int:
        """The target's ``spec.replicas``, read through its /scale subresource."""
        ...

    def scale(self, target: TargetRef, replicas: int) -> None:
        """Patch the target's /scale subresource to ``replicas``."""
        ...


class TidalMetrics(Protocol):
    """What the controller counts, per cluster (exported on /metrics in production)."""

    def fired(self, cluster: str, lag_seconds: float, conflict: bool) -> None:
        """A fire reached status ``lag_seconds`` after its scheduled second."""
        ...

    def invalid(self, cluster: str, reason: str) -> None:
        """An object was newly marked not Ready for ``reason``."""
        ...

    def objects(self, cluster: str, count: int) -> None:
        """How many objects the controller follows on the cluster."""
        ...
