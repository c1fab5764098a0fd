"""The error taxonomy every adapter maps to: retry it, or don't.

After kopf's TemporaryError/PermanentError: adapters turn client exceptions into these, and
Prefect task retries fire only on ``TemporaryError`` (see ``falcon.tasks.retry_on_temporary``).
"""

from __future__ import annotations


class FalconError(Exception):
    """Base of every error Falcon raises on purpose."""


class TemporaryError(FalconError):
    """Retrying later may succeed: 429, 5xx, FAILED_PRECONDITION while another operation runs."""


class BusyError(TemporaryError):
    """GKE refused because other operations hold the pool or the cluster (its quota of node-pool
    operations side by side, or one at a time): asked again after ``FALCON_GKE_BUSY_RETRY_SECONDS``."""


class PermanentError(FalconError):
    """Retrying will not help: bad input, missing permission, quota exhausted."""


class InvalidSpecError(PermanentError):
    """The job row itself is wrong (spec, topology, tpu_type): the task fails with InvalidSpec."""


class NotFoundError(PermanentError):
    """The object does not exist (404). Callers that delete treat it as success."""


class ConflictError(PermanentError):
    """The object already exists (409). Callers that create treat it as 'already done'."""
