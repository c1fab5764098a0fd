"""ServiceAccounts: the ServiceAccount controller and the ServiceAccount admission plugin's lookup.

On a real cluster the ServiceAccount controller (kube-controller-manager) keeps a ``default`` account in
every namespace, and the ServiceAccount admission plugin refuses a pod whose ``serviceAccountName`` does
not exist (kubernetes.io "Service Accounts" / "Configure Service Accounts for Pods";
plugin/pkg/admission/serviceaccount). Accounts listed in the cluster config (``serviceAccounts``,
``namespace/name``) stand for those an administrator created: they appear with their namespace.
"""

from __future__ import annotations

from falcon_emulator.state import ClusterState
from falcon_emulator.store import KubeError
from falcon_emulator.util import JSON

DEFAULT = "default"


def provision_namespace(cluster: ClusterState, namespace: str) -> None:
    """Create the namespace's ``default`` account and the configured ones that do not exist yet."""
    names = [DEFAULT]
    for entry in cluster.config.service_accounts:
        owner, _, name = entry.partition("/")
        if owner == namespace and name:
            names.append(name)
    for name in names:
        if cluster.store.get("serviceaccounts", namespace, name) is None:
            cluster.store.add("serviceaccounts", {"metadata": {"name": name, "namespace": namespace}})


def sync_service_accounts(cluster: ClusterState) -> None:
    """The controller's loop: a namespace without its ``default`` account gets it (again)."""
    for namespace in list(cluster.store.iter("namespaces")):
        name = namespace["metadata"]["name"]
        if cluster.store.get("serviceaccounts", name, DEFAULT) is None:
            provision_namespace(cluster, name)


def missing_account(cluster: ClusterState, pod: JSON) -> KubeError | None:
    """The admission plugin's 403 for a pod whose ServiceAccount does not exist (None: it exists).

    The pod is named as at admission time: its generateName when it has one (the name is generated
    later), as ``admission.NewForbidden`` does."""
    meta = pod["metadata"]
    namespace = meta["namespace"]
    account = pod["spec"].get("serviceAccountName") or DEFAULT
    if cluster.store.get("serviceaccounts", namespace, account) is not None:
        return None
    name = meta.get("generateName") or meta["name"]
    message = (
        f'pods "{name}" is forbidden: error looking up service account {namespace}/{account}: '
        f'serviceaccount "{account}" not found'
    )
    return KubeError(403, "Forbidden", message, {"name": name, "kind": "pods"})
