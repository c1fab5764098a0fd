"""The round's clusters and warm rules: read once per period, the clusters at once for one unknown."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.fakes import T0, MemoryTaskStore, cluster, idle_pool, one_cluster

from falcon.domain.model import Cluster, QueueKey
from falcon.domain.warm_pools import WarmRule
from falcon.services.dispatching import Dispatcher
from falcon.services.registry_book import REGISTRY_SECONDS, RegistryBook

RULE = WarmRule("morning", QueueKey("c1", "2x2"), "CRON_TZ=UTC 0 0 9 * * *", 2, T0)


class CountingStore(MemoryTaskStore):
    """Counts the registry's reads."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster_reads = self.rule_reads = 0

    def clusters(self) -> list[Cluster]:
        self.cluster_reads += 1
        return super().clusters()

    def warm_rules(self) -> list[WarmRule]:
        self.rule_reads += 1
        return super().warm_rules()


def test_both_are_read_at_the_first_round_then_once_per_period() -> None:
    store, book = CountingStore(), RegistryBook()
    store.add_cluster(cluster("c1"))
    book.read(store, 0.0)
    assert (set(book.clusters), book.rules) == ({"c1"}, [])
    store.add_cluster(cluster("c2"))
    assert store.add_warm_rule(RULE)
    book.read(store, REGISTRY_SECONDS - 0.1)
    assert (set(book.clusters), book.rules, store.cluster_reads) == ({"c1"}, [], 1)
    book.read(store, REGISTRY_SECONDS)
    assert (set(book.clusters), book.rules) == ({"c1", "c2"}, [RULE])
    assert (store.cluster_reads, store.rule_reads) == (2, 2)


def test_a_cluster_met_and_not_known_is_read_at_once() -> None:
    store, book = CountingStore(), RegistryBook()
    store.add_cluster(cluster("c1"))
    book.read(store, 0.0)
    book.meet(store, {"c1"})
    assert store.cluster_reads == 1, "every cluster met is known: nothing read"
    store.add_cluster(cluster("c2"))
    book.meet(store, {"c1", "c2"})
    assert (set(book.clusters), store.cluster_reads, store.rule_reads) == ({"c1", "c2"}, 2, 1)
    book.meet(store, {"gone"})  # one the registry no longer has: read each time, as every round did
    book.meet(store, {"gone"})
    assert store.cluster_reads == 4


def test_the_round_reaps_a_pool_of_a_cluster_registered_since_its_last_read_within_the_period() -> None:
    svc = one_cluster()
    dispatcher = Dispatcher(svc)
    try:
        assert dispatcher.reconcile().reaped == []
        svc.store.add_cluster(cluster("c2"))
        horizon = timedelta(seconds=svc.settings.pool_creation_prior_seconds + 1)  # nothing known
        svc.store.add_pool(idle_pool(cluster_id="c2", since=svc.clock.now() - horizon))
        assert dispatcher.reconcile().reaped == ["falcon-2x2-kept"]
    finally:
        dispatcher.close()
