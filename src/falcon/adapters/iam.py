"""The IAM permissions Falcon's Google service account needs on each edge project, per API call.

This table is the source of truth for the least-privilege custom role
(``infra/iam/falcon-controller-role.yaml`` lists exactly their union) and for a permission check
of a project (``testIamPermissions`` with ``REQUIRED_PERMISSIONS``). ``tests/unit/test_iam_coverage.py``
reads the adapters' code and fails when they call a client method this table (or its short list
of calls left to Kubernetes RBAC) does not name, or when the role file and the table differ.

Why these names: GKE authorizes its node-pool methods with cluster permissions (there is no
``container.nodePools.*``: create and delete need ``container.clusters.update``, get and list
``container.clusters.get``), and a Kubernetes request as ``container.<resource>.<verb>`` (watch as
``list``). The TidalScheduler calls are not here: an IAM grant on custom objects or ``/scale``
would hold for every custom resource and every Deployment of every cluster in the project, so
they are granted per cluster by the RBAC installed with the CRD (``infra/tidal-scheduler``).
"""

from __future__ import annotations

from collections.abc import Mapping

# (client class, method) -> the permissions one call needs.
PERMISSIONS: Mapping[tuple[str, str], tuple[str, ...]] = {
    # GKE (gke.py). get_cluster reads the endpoint and CA only: no getCredentials.
    ("ClusterManagerClient", "get_cluster"): ("container.clusters.get",),
    ("ClusterManagerClient", "get_node_pool"): ("container.clusters.get",),
    ("ClusterManagerClient", "list_node_pools"): ("container.clusters.get",),
    ("ClusterManagerClient", "create_node_pool"): ("container.clusters.update",),
    ("ClusterManagerClient", "delete_node_pool"): ("container.clusters.update",),
    ("ClusterManagerClient", "list_operations"): ("container.operations.list",),
    # Compute (compute.py). insert returns an extended operation whose result() polls
    # regionOperations.get until the policy exists.
    ("ReservationsClient", "get"): ("compute.reservations.get",),
    ("ResourcePoliciesClient", "get"): ("compute.resourcePolicies.get",),
    ("ResourcePoliciesClient", "insert"): ("compute.resourcePolicies.create", "compute.regionOperations.get"),
    # Kubernetes on each edge cluster (k8s.py). Deleting a Job with Background propagation leaves
    # its pods to the garbage collector: no pods.delete.
    ("CoreV1Api", "create_namespace"): ("container.namespaces.create",),
    ("BatchV1Api", "create_namespaced_job"): ("container.jobs.create",),
    ("BatchV1Api", "patch_namespaced_job"): ("container.jobs.update",),  # resume: GKE maps patch to update
    ("BatchV1Api", "read_namespaced_job"): ("container.jobs.get",),
    ("BatchV1Api", "list_namespaced_job"): ("container.jobs.list",),
    ("BatchV1Api", "delete_namespaced_job"): ("container.jobs.delete",),
    ("CoreV1Api", "create_namespaced_service"): ("container.services.create",),
    ("CoreV1Api", "delete_namespaced_service"): ("container.services.delete",),
    ("CoreV1Api", "list_namespaced_service"): ("container.services.list",),
    ("CoreV1Api", "list_namespaced_event"): ("container.events.list",),
    ("CoreV1Api", "list_namespaced_pod"): ("container.pods.list",),
    # `falcon cluster check` (cluster_probe.py): what onboarding set up, read before the first task.
    # The CRD read is also `falcon tidal apply`'s (create or replace).
    ("MachineTypesClient", "get"): ("compute.machineTypes.get",),
    ("CoreV1Api", "read_namespace"): ("container.namespaces.get",),
    ("CoreV1Api", "read_namespaced_service_account"): ("container.serviceAccounts.get",),
    ("ApiextensionsV1Api", "read_custom_resource_definition"): ("container.customResourceDefinitions.get",),
}

# Calls made over plain REST (google.auth's AuthorizedSession), with no generated client to scan:
# API method id -> permissions. The probe names the method id in every such call
# (``_google_rest("storage.buckets.getIamPolicy", ...)``), which the coverage test reads.
# testIamPermissions needs no permission (Resource Manager's reference: "There are no permissions
# required for making this API call"); a bucket's policy is read with storage.buckets.getIamPolicy.
REST_PERMISSIONS: Mapping[str, tuple[str, ...]] = {
    "cloudresourcemanager.projects.testIamPermissions": (),
    "storage.buckets.getIamPolicy": ("storage.buckets.getIamPolicy",),
}

REQUIRED_PERMISSIONS: tuple[str, ...] = tuple(
    sorted({p for ps in [*PERMISSIONS.values(), *REST_PERMISSIONS.values()] for p in ps})
)


def calls_needing(permission: str) -> list[str]:
    """The calls a missing permission breaks ("Client.method"), for a check to name them."""
    calls = [f"{client}.{method}" for (client, method), ps in PERMISSIONS.items() if permission in ps]
    return sorted(calls + [method for method, ps in REST_PERMISSIONS.items() if permission in ps])
