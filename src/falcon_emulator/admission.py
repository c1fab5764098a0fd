"""Pod admission, in the apiserver's order: the ServiceAccount plugin, then GKE's mutating webhooks.

Every pod goes through it, whether a client or the Job controller creates it.
"""

from __future__ import annotations

from falcon_emulator.gcsfuse import inject_sidecar
from falcon_emulator.service_accounts import missing_account
from falcon_emulator.state import ClusterState
from falcon_emulator.tpu import inject_worker_env
from falcon_emulator.util import JSON


def admit_pod(cluster: ClusterState, pod: JSON) -> None:
    """Mutate the pod as admission would, or raise the 403 KubeError that refuses it."""
    refused = missing_account(cluster, pod)
    if refused is not None:
        raise refused
    inject_worker_env(cluster, pod)
    inject_sidecar(pod)
