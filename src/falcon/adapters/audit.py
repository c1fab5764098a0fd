"""The audit trail: one ``event=audit action=…`` line per decision an operator may have to
account for later (a task aborted, an orphan deleted, the cluster registry changed), on the
``falcon.audit`` logger. Imports only the standard library: the CLI writes it too.

A process that set up no logging (the ``falcon`` CLI) would drop INFO lines; there the trail
goes to stderr.
"""

from __future__ import annotations

import logging
import sys

from falcon.domain.model import Cluster

logger = logging.getLogger("falcon.audit")


def audit(action: str, **fields: object) -> None:
    if not logger.hasHandlers():
        logger.addHandler(logging.StreamHandler(sys.stderr))
        logger.setLevel(logging.INFO)
    details = " ".join(f"{key}={_value(value)}" for key, value in fields.items())
    logger.info("event=audit action=%s %s", action, details)


def cluster_registered(cluster: Cluster) -> None:
    """``falcon cluster add`` wrote a new cluster into the registry."""
    audit(
        "cluster_registered",
        cluster_id=cluster.id,
        cluster=cluster.name,
        project=cluster.project,
        location=cluster.location,
        zone=cluster.zone or "-",
        tpu_type=cluster.tpu_type,
        reservation=cluster.default_reservation or "-",
        status=cluster.status.value,
    )


def _value(value: object) -> str:
    """A value on one line, quoted when it has spaces, so the line stays key=value parseable."""
    text = str(value).replace("\n", " ")
    return f'"{text}"' if " " in text or not text else text
