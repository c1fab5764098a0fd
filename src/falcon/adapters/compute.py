"""Compute Engine through google-cloud-compute: reservations and the TPU7x workload policies.

Calls pass ``retry=None``: the client's own retry of 503 runs for minutes inside one call, while
Falcon classifies the error at once and leaves retrying to Prefect (bounded, then reported)."""

from __future__ import annotations

from google.cloud import compute_v1

from falcon.adapters.errors import google_errors
from falcon.domain.errors import ConflictError, NotFoundError, PermanentError
from falcon.domain.node_pools import ReservationRef
from falcon.domain.scheduling import ReservationCapacity

HIGH_THROUGHPUT = "HIGH_THROUGHPUT"


class Reservations:
    def __init__(self, client: compute_v1.ReservationsClient, timeout: float) -> None:
        self._client = client
        self._timeout = timeout

    def capacity(self, ref: ReservationRef, zone: str) -> ReservationCapacity:
        """Read the reservation in its owner's project and the pool's zone (reservations are zonal).

        ``count`` and ``inUseCount`` count VMs (= GKE nodes), not chips."""
        what = f"get reservation {ref.affinity_value} in {ref.project}/{zone}"
        with google_errors(what, "compute", "get_reservation"):
            found = self._client.get(
                project=ref.project, zone=zone, reservation=ref.name, retry=None, timeout=self._timeout
            )
        specific = found.specific_reservation
        return ReservationCapacity(
            name=ref.affinity_value,
            count=int(specific.count),
            in_use=int(specific.in_use_count),
            status=str(found.status),
            machine_type=str(specific.instance_properties.machine_type).rsplit("/", 1)[-1],
        )


class WorkloadPolicies:
    """TPU7x multi-host pools name a regional Compute workload policy instead of ``tpuTopology``.

    Modelled on xpk's ``ensure_resource_policy_exists``: get it, create it when missing, and
    take 409 (another task created it meanwhile) as success."""

    def __init__(self, client: compute_v1.ResourcePoliciesClient, timeout: float) -> None:
        self._client = client
        self._timeout = timeout

    def ensure(self, project: str, region: str, name: str, topology: str) -> None:
        try:
            self._check(self._get(project, region, name), topology)
            return
        except NotFoundError:
            pass
        policy = compute_v1.ResourcePolicy(
            name=name,
            workload_policy=compute_v1.ResourcePolicyWorkloadPolicy(
                type_=HIGH_THROUGHPUT, accelerator_topology=topology
            ),
        )
        try:
            what = f"create workload policy {name} in {project}/{region}"
            with google_errors(what, "compute", "insert_resource_policy"):
                operation = self._client.insert(
                    project=project,
                    region=region,
                    resource_policy_resource=policy,
                    retry=None,
                    timeout=self._timeout,
                )
                operation.result(timeout=self._timeout)  # type: ignore[no-untyped-call]
        except ConflictError:
            self._check(self._get(project, region, name), topology)

    def _get(self, project: str, region: str, name: str) -> compute_v1.ResourcePolicy:
        what = f"get workload policy {name} in {project}/{region}"
        with google_errors(what, "compute", "get_resource_policy"):
            return self._client.get(
                project=project, region=region, resource_policy=name, retry=None, timeout=self._timeout
            )

    @staticmethod
    def _check(policy: compute_v1.ResourcePolicy, topology: str) -> None:
        """A same-named policy of another shape would give the pool the wrong slice: refuse it."""
        found = policy.workload_policy
        if found.type_ != HIGH_THROUGHPUT or found.accelerator_topology != topology:
            raise PermanentError(
                f"workload policy {policy.name} exists as {found.type_ or 'no workload policy'} "
                f"{found.accelerator_topology}, not {HIGH_THROUGHPUT} {topology}"
            )
