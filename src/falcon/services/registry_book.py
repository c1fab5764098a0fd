"""The clusters and the tidal warm rules as the reconcile round last read them.

Both are configuration, changed by an operator's command and seldom. The round read both every
second: two of its statements, when under load each statement's round trip, waiting for a core
at either end, was most of the round's read (a full-size run's slowest rounds spent 5-15 ms on
each). So the round reads them every ``REGISTRY_SECONDS``, and the clusters at once whenever it
meets a cluster it does not know: a cluster registered since has its tasks followed and its pools
reaped from the first round that sees them. A change to a known cluster (its endpoint, say), and
a warm rule added or removed, are seen within ``REGISTRY_SECONDS``.
"""

from __future__ import annotations

from collections.abc import Iterable

from falcon.domain.model import Cluster
from falcon.domain.warm_pools import WarmRule, schedulable
from falcon.services.periodic import Every
from falcon.services.ports import TaskStore

# The round reads the registry and the warm rules at least this often (dispatcher clock seconds).
REGISTRY_SECONDS = 10.0


class RegistryBook:
    """``clusters`` by id and the schedulable warm ``rules``, brought up to date by ``read``."""

    def __init__(self, period: float = REGISTRY_SECONDS) -> None:
        self.clusters: dict[str, Cluster] = {}
        self.rules: list[WarmRule] = []
        self._due = Every(period)

    def read(self, store: TaskStore, monotonic: float) -> None:
        """Both, when the period since the last read is over."""
        if self._due.due(monotonic):
            self._read_clusters(store)
            self.rules = schedulable(store.warm_rules())

    def meet(self, store: TaskStore, cluster_ids: Iterable[str]) -> None:
        """The clusters again, now, if one of ``cluster_ids`` (the round's tasks' and pools') is
        not known. One the registry no longer has is read again each round, as it was before."""
        if not self.clusters.keys() >= set(cluster_ids):
            self._read_clusters(store)

    def _read_clusters(self, store: TaskStore) -> None:
        self.clusters = {c.id: c for c in store.clusters()}
