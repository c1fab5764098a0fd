"""The registry's clusters by id, for adapters that name things after clusters (slots, metric
labels, log lines) on every call and must not read the database each time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from falcon.domain.model import Cluster


class KnownClusters:
    """Clusters read from ``clusters`` (the registry) once. A cluster's name, project and location
    never change once it is registered; an unknown id is looked for again at most every
    ``RELOOK_SECONDS`` (a cluster added since), so a stream of calls about a cluster that is gone
    is not a stream of reads."""

    RELOOK_SECONDS = 30.0

    def __init__(self, clusters: Callable[[], Iterable[Cluster]] | None = None) -> None:
        self._clusters = clusters
        self._known: dict[str, Cluster] = {}
        self._looked_at: float | None = None
        self._lock = threading.Lock()

    def get(self, cluster_id: str) -> Cluster | None:
        with self._lock:
            if cluster_id not in self._known and self._clusters is not None and self._may_look():
                self._known = {c.id: c for c in self._clusters()}
            return self._known.get(cluster_id)

    def learn(self, clusters: Iterable[Cluster]) -> None:
        """Take ``clusters`` as the registry, as a caller that has just read it knows it."""
        with self._lock:
            self._known = {c.id: c for c in clusters}

    def all(self) -> list[Cluster]:
        with self._lock:
            return list(self._known.values())

    def _may_look(self) -> bool:
        now = time.monotonic()
        if self._looked_at is not None and now - self._looked_at < self.RELOOK_SECONDS:
            return False
        self._looked_at = now
        return True
