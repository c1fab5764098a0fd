"""Asking GKE to delete a marked pool, and taking a marked pool back before GKE begins deleting it.

GKE runs a cluster's node-pool operations up to a quota at once (one at a time on some
clusters), so a pool marked for deletion may wait minutes for its turn, paid for all along. A
task of its queue that needs a pool meanwhile takes it back (it goes idle, and the task takes it
as any idle pool) rather than wait for that deletion and then for a creation of its own: the
same nodes, a creation and a deletion fewer.

The two must never cross: a pool handed on while GKE deletes it would fail its new task. So both
act under the cluster's lock (``TaskStore.cluster_locked``): GKE is asked to delete a pool only
while its record still says marked, and a pool is taken back only while GKE reports it ready
(a deletion GKE accepted shows at once as STOPPING). Whichever comes second sees what the first
did.

A deletion GKE did not answer (the client's timeout, a reset connection, a 5xx) may still be
carried out later: the request can reach GKE after the client gave up on it, and the pool would
then go under the task that took it back (the chaos run saw this). So each ask is recorded in its
own commit before it is made, which a killed process leaves behind too. GKE's refusal of an ask
puts back the ask it replaced: a second ask refused (GKE busy with another operation) says
nothing of a first still on its way, which would delete the pool, with its new task's pods,
after a take-back that followed the refusal. A pool with an ask not answered is not taken back
for ``LATE_REQUEST_SECONDS`` past the client's timeout; after that, a deletion GKE carried out
shows as STOPPING or gone.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from falcon.domain.errors import BusyError, FalconError, PermanentError, TemporaryError
from falcon.domain.lifecycle import DeleteAsk, PoolState
from falcon.domain.model import Cluster
from falcon.services.context import Services

logger = logging.getLogger(__name__)

LATE_REQUEST_SECONDS = 60.0
"""How long past the client's timeout a request it gave up on may still be carried out by GKE."""


def ask_delete(services: Services, cluster: Cluster, name: str) -> bool:
    """Ask GKE to delete the marked pool; False, and nothing asked, when it is marked no longer
    (taken back, or gone). GKE's errors are the caller's."""
    ask = services.store.delete_asked(cluster.id, name, services.clock.now())
    if ask is None:
        return False
    refused: FalconError | None = None
    with services.store.cluster_locked(cluster.id) as store:
        record = store.pool(cluster.id, name)
        if record is None or record.state is not PoolState.DELETING:
            return False
        try:
            services.node_pools.delete(cluster, name)
        except (BusyError, PermanentError) as exc:  # GKE's own answer: this ask is not on its way
            store.delete_refused(cluster.id, name, ask, services.clock.now())
            refused = exc
        except TemporaryError as exc:  # no answer: the ask may still reach GKE
            logger.info("event=pool_delete_unanswered cluster=%s pool=%s error=%s", cluster.name, name, exc)
            raise
    if refused is not None:
        _log_refusal(services, cluster, name, ask, refused)
        raise refused  # only now: raised inside the block, it would undo delete_refused's write
    logger.info("event=pool_delete_asked cluster=%s pool=%s", cluster.name, name)
    return True


def _log_refusal(
    services: Services, cluster: Cluster, name: str, ask: DeleteAsk, refused: FalconError
) -> None:
    """A busy cluster refuses at every poll of a deletion: those are logged only at DEBUG, unless
    an earlier ask may still be on its way (it keeps the pool out of reach of take-backs)."""
    unanswered = ask.replaced is not None and ask.replaced > ask.at - _late_request_window(services)
    logger.log(
        logging.INFO if unanswered else logging.DEBUG,
        "event=pool_delete_refused cluster=%s pool=%s earlier_unanswered=%s error=%s",
        cluster.name,
        name,
        unanswered,
        refused,
    )


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
            now = services.clock.now()
            if ready and store.unmark_pool(cluster.id, name, now, now - _late_request_window(services)):
                logger.info("event=pool_taken_back cluster=%s pool=%s", cluster.name, name)
                return True
    return False


def _late_request_window(services: Services) -> timedelta:
    return timedelta(seconds=services.settings.api_timeout_seconds + LATE_REQUEST_SECONDS)
