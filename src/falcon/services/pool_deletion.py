"""Asking GKE to delete a marked pool, and taking a marked pool back before GKE begins deleting it.

GKE runs one node-pool operation per cluster at a time, so a pool marked for deletion may wait
minutes for its turn, paid for all along. A task of its queue that needs a pool meanwhile takes
it back (it goes idle, and the task takes it as any idle pool) rather than wait for that deletion
and then for a creation of its own: the same nodes, a creation and a deletion fewer.

The two must never cross: a pool handed on while GKE deletes it would fail its new task. So both
act under the cluster's lock (``TaskStore.cluster_locked``): GKE is asked to delete a pool only
while its record still says marked, and a pool is taken back only while GKE reports it ready
(a deletion GKE accepted shows at once as STOPPING). Whichever comes second sees what the first
did.
"""

from __future__ import annotations

import logging

from falcon.domain.errors import FalconError
from falcon.domain.lifecycle import PoolState
from falcon.domain.model import Cluster
from falcon.services.context import Services

logger = logging.getLogger(__name__)


def ask_delete(services: Services, cluster: Cluster, name: str) -> bool:
    """Ask GKE to delete the marked pool; False, and nothing asked, when it is marked no longer
    (taken back, or gone). GKE's errors are the caller's."""
    with services.store.cluster_locked(cluster.id) as store:
        record = store.pool(cluster.id, name)
        if record is None or record.state is not PoolState.DELETING:
            return False
        services.node_pools.delete(cluster, name)
        return True


def take_back(services: Services, cluster: Cluster, marked: list[str]) -> bool:
    """Make one of the ``marked`` pools (of one queue) that GKE is not deleting idle again,
    for the caller (the queue's acquiring task, the only one that may take a pool now) to take;
    True when one was. A pool GKE does not answer for this time is left marked."""
    for name in marked:
        with services.store.cluster_locked(cluster.id) as store:
            record = store.pool(cluster.id, name)
            if record is None or record.state is not PoolState.DELETING:
                continue
            try:
                ready = services.node_pools.get(cluster, name).ready
            except FalconError:
                continue
            if ready and store.unmark_pool(cluster.id, name, services.clock.now()):
                logger.info("event=pool_taken_back cluster=%s pool=%s", cluster.name, name)
                return True
    return False
