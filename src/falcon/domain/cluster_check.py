"""`falcon cluster check`: what a registered cluster needs before its first task, as facts in,
one verdict per check out, each failure with the command that fixes it.

Pure: the adapter (``falcon.adapters.cluster_probe``) reads the facts; nothing here does I/O.
A fact is a ``Read``: the value the API answered, or its error text (``missing`` when it answered
404), or why it was not asked (``skipped``, e.g. the cluster did not answer).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

from falcon.domain.model import Cluster
from falcon.domain.topology import GENERATIONS, canonical_tpu_type

T = TypeVar("T")

CRD_NAME = "tidalschedulers.scheduling.tidal.io"
GSA_ANNOTATION = "iam.gke.io/gcp-service-account"
ROLE_NAME = "falcon_controller"
# Roles that let the Job's account write objects (GCS FUSE creates, overwrites and deletes them).
WRITER_ROLES = ("roles/storage.objectUser", "roles/storage.objectAdmin", "roles/storage.admin")
CONTROLLER_PLACEHOLDER = "CONTROLLER_GSA"


class Check(StrEnum):
    CLUSTER = "cluster"
    PERMISSIONS = "permissions"
    RESERVATION = "reservation"
    TPU_TYPE = "tpu type"
    NAMESPACE = "namespace"
    SERVICE_ACCOUNT = "service account"
    BUCKET = "bucket"
    CRD = "tidal crd"


@dataclass(frozen=True)
class Read(Generic[T]):
    """One API read: its value, or the API's error (``missing``: it answered 404), or why it was
    not asked (``skipped``)."""

    value: T | None = None
    error: str | None = None
    missing: bool = False
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None


@dataclass(frozen=True)
class ReservationFacts:
    status: str
    machine_type: str
    count: int
    in_use: int


@dataclass(frozen=True)
class Binding:
    role: str
    members: tuple[str, ...]


@dataclass(frozen=True)
class Facts:
    """What the probe read. ``reservation`` is None when the cluster names none."""

    cluster: Read[str]  # the Kubernetes endpoint GKE gave
    held: Read[frozenset[str]]  # testIamPermissions' answer
    machine_type: Read[str]  # the machine type Compute offers in the node zone
    namespace: Read[str]
    service_account: Read[str]  # value: the KSA's Google service account annotation, "" if none
    bucket_policy: Read[tuple[Binding, ...]]
    crd: Read[str]
    reservation: Read[ReservationFacts] | None = None


@dataclass(frozen=True)
class Setup:
    """What the checks compare the facts with."""

    required: tuple[str, ...]  # falcon.adapters.iam.REQUIRED_PERMISSIONS
    job_service_account: str  # the Jobs' KSA ("default" when Falcon names none)
    controller: str | None = None  # Falcon's Google service account email, when the credentials say
    calls: dict[str, list[str]] = field(default_factory=dict)  # permission -> calls it allows


@dataclass(frozen=True)
class CheckResult:
    name: Check
    ok: bool
    detail: str
    fix: str | None = None
    skipped: bool = False

    @property
    def line(self) -> str:
        """``ok   name: detail``, ``FAIL name: detail`` (then its fix line), ``skip name: why``."""
        tag = "ok  " if self.ok else "skip" if self.skipped else "FAIL"
        text = f"{tag} {self.name}: {self.detail}"
        return f"{text}\n     fix: {self.fix}" if self.fix else text


def probe_machine_type(tpu_type: str) -> str:
    """The machine type whose offer in a zone says the TPU type is there: its 4-chip VM, the one
    every generation has and every multi-host slice uses."""
    return f"{GENERATIONS[canonical_tpu_type(tpu_type)].machine_prefix}-4t"


def evaluate(cluster: Cluster, facts: Facts, setup: Setup) -> list[CheckResult]:
    """One result per check, in a fixed order; a failed read fails its check only."""
    return [
        _cluster(cluster, facts.cluster),
        _permissions(cluster, facts.held, setup),
        _reservation(cluster, facts.reservation, setup),
        _tpu_type(cluster, facts.machine_type),
        _namespace(cluster, facts.namespace),
        _service_account(cluster, facts.service_account, setup),
        _bucket(cluster, facts.bucket_policy, facts.service_account, setup),
        _crd(cluster, facts.crd),
    ]


def failed(results: Sequence[CheckResult]) -> bool:
    return any(not r.ok for r in results)


def _skip(name: Check, read: Read[T]) -> CheckResult | None:
    return CheckResult(name, False, read.skipped, skipped=True) if read.skipped else None


def _where(cluster: Cluster) -> str:
    return f"--project={cluster.project} --location={cluster.location}"


def _credentials(cluster: Cluster) -> str:
    return f"gcloud container clusters get-credentials {cluster.name} {_where(cluster)} && "


def _bootstrap(cluster: Cluster, setup: Setup) -> str:
    return (
        f"PROJECT_ID={cluster.project} LOCATION={cluster.location} CLUSTER={cluster.name} "
        f"BUCKET={cluster.gcs_bucket} CONTROLLER_GSA={setup.controller or CONTROLLER_PLACEHOLDER} "
        f"NAMESPACE={cluster.namespace} JOB_KSA={setup.job_service_account} infra/edge/bootstrap.sh"
    )


def _cluster(cluster: Cluster, read: Read[str]) -> CheckResult:
    if read.ok:
        return CheckResult(Check.CLUSTER, True, f"GKE cluster {cluster.name} answers at {read.value}")
    if read.missing:
        fix = f"gcloud container clusters list --project={cluster.project}  # then register the right name"
    else:
        fix = f"gcloud container clusters describe {cluster.name} {_where(cluster)}"
    return CheckResult(Check.CLUSTER, False, str(read.error), fix)


def _permissions(cluster: Cluster, read: Read[frozenset[str]], setup: Setup) -> CheckResult:
    member = setup.controller or CONTROLLER_PLACEHOLDER
    grant = (
        f"gcloud iam roles update {ROLE_NAME} --project={cluster.project} "
        f"--file=infra/iam/falcon-controller-role.yaml && "
        f"gcloud projects add-iam-policy-binding {cluster.project} --condition=None "
        f"--member=serviceAccount:{member} --role=projects/{cluster.project}/roles/{ROLE_NAME}"
    )
    if not read.ok:
        return CheckResult(Check.PERMISSIONS, False, str(read.error or read.skipped), grant)
    held = read.value or frozenset()
    missing = [p for p in setup.required if p not in held]
    if not missing:
        return CheckResult(
            Check.PERMISSIONS, True, f"all {len(setup.required)} permissions held on {cluster.project}"
        )
    broken = sorted({c for p in missing for c in setup.calls.get(p, [])})
    detail = f"missing on {cluster.project}: {', '.join(missing)}"
    if broken:
        detail += f" (needed by {', '.join(broken)})"
    return CheckResult(Check.PERMISSIONS, False, detail, grant)


def _reservation(cluster: Cluster, read: Read[ReservationFacts] | None, setup: Setup) -> CheckResult:
    name = cluster.default_reservation
    if read is None or name is None:
        return CheckResult(Check.RESERVATION, True, "none registered (flex-start only)")
    owner, short = _reservation_owner(name, cluster.project)
    zone = cluster.node_zone
    describe = f"gcloud compute reservations describe {short} --project={owner} --zone={zone}"
    if not read.ok:
        if read.missing:
            fix = (
                f"gcloud compute reservations list --project={owner} --filter=zone:{zone}  "
                f"# then register the cluster with a reservation of {zone}"
            )
            return CheckResult(Check.RESERVATION, False, str(read.error), fix)
        member = setup.controller or CONTROLLER_PLACEHOLDER
        fix = (
            f"gcloud projects add-iam-policy-binding {owner} --condition=None "
            f"--member=serviceAccount:{member} --role=roles/compute.viewer"
            if owner != cluster.project
            else describe
        )
        return CheckResult(Check.RESERVATION, False, str(read.error), fix)
    found = read.value
    assert found is not None
    prefix = GENERATIONS[canonical_tpu_type(cluster.tpu_type)].machine_prefix
    if found.status != "READY":
        return CheckResult(
            Check.RESERVATION,
            False,
            f"{name} in {zone} is {found.status}, not READY",
            f"{describe}  # wait until READY",
        )
    if not found.machine_type.startswith(f"{prefix}-"):
        return CheckResult(
            Check.RESERVATION,
            False,
            f"{name} in {zone} reserves {found.machine_type}, not a {cluster.tpu_type} machine type "
            f"({prefix}-*)",
            f"gcloud compute reservations list --project={owner} --filter=zone:{zone}  "
            f"# then register a {prefix}-* reservation",
        )
    return CheckResult(
        Check.RESERVATION,
        True,
        f"{name} in {zone}: READY, {found.machine_type}, {found.count - found.in_use} of {found.count} free",
    )


def _reservation_owner(name: str, project: str) -> tuple[str, str]:
    shared = re.fullmatch(r"projects/([^/]+)/reservations/([^/]+)", name)
    return (shared.group(1), shared.group(2)) if shared else (project, name)


def _tpu_type(cluster: Cluster, read: Read[str]) -> CheckResult:
    machine = probe_machine_type(cluster.tpu_type)
    zone = cluster.node_zone
    if read.ok:
        return CheckResult(Check.TPU_TYPE, True, f"{cluster.tpu_type} ({machine}) is offered in {zone}")
    fix = (
        f'gcloud compute machine-types list --project={cluster.project} --filter="name={machine}"  '
        f"# then register the cluster with --zone=<a zone listed>"
    )
    if read.missing:
        detail = f"{cluster.tpu_type} ({machine}) is not offered in {zone}: {read.error}"
        return CheckResult(Check.TPU_TYPE, False, detail, fix)
    return CheckResult(Check.TPU_TYPE, False, str(read.error), fix)


def _namespace(cluster: Cluster, read: Read[str]) -> CheckResult:
    if (skipped := _skip(Check.NAMESPACE, read)) is not None:
        return skipped
    if read.ok:
        return CheckResult(Check.NAMESPACE, True, f"{cluster.namespace} exists")
    fix = f"{_credentials(cluster)}kubectl create namespace {cluster.namespace}"
    return CheckResult(Check.NAMESPACE, False, str(read.error), fix)


def _service_account(cluster: Cluster, read: Read[str], setup: Setup) -> CheckResult:
    if (skipped := _skip(Check.SERVICE_ACCOUNT, read)) is not None:
        return skipped
    ksa = f"{cluster.namespace}/{setup.job_service_account}"
    if read.ok:
        gsa = f" (Google service account {read.value})" if read.value else ""
        return CheckResult(Check.SERVICE_ACCOUNT, True, f"{ksa} exists{gsa}")
    return CheckResult(Check.SERVICE_ACCOUNT, False, str(read.error), _bootstrap(cluster, setup))


def _principals(cluster: Cluster, setup: Setup, gsa: str | None) -> list[re.Pattern[str]]:
    """The IAM members that are the Jobs' identity: the KSA's Google service account, or the KSA
    itself (GKE Workload Identity Federation's principal, or the older pool service account form)."""
    pool = re.escape(f"{cluster.project}.svc.id.goog")
    ns, ksa = re.escape(cluster.namespace), re.escape(setup.job_service_account)
    forms = [
        rf"principal://iam\.googleapis\.com/projects/\d+/locations/global/workloadIdentityPools/{pool}/subject/ns/{ns}/sa/{ksa}",
        rf"serviceAccount:{pool}\[{ns}/{ksa}\]",
    ]
    if gsa:
        forms.append(rf"serviceAccount:{re.escape(gsa)}")
    return [re.compile(f) for f in forms]


def _bucket(
    cluster: Cluster, read: Read[tuple[Binding, ...]], account: Read[str], setup: Setup
) -> CheckResult:
    bucket = f"gs://{cluster.gcs_bucket}"
    gsa = account.value if account.ok else None
    member = (
        f"serviceAccount:{gsa}"
        if gsa
        else f"principal://iam.googleapis.com/projects/PROJECT_NUMBER/locations/global/workloadIdentityPools/"
        f"{cluster.project}.svc.id.goog/subject/ns/{cluster.namespace}/sa/{setup.job_service_account}"
    )
    fix = (
        f"gcloud storage buckets add-iam-policy-binding {bucket} "
        f"--role=roles/storage.objectUser --member={member}"
    )
    if not read.ok:
        return CheckResult(Check.BUCKET, False, str(read.error or read.skipped), fix)
    patterns = _principals(cluster, setup, gsa)
    for binding in read.value or ():
        if binding.role not in WRITER_ROLES:
            continue
        for m in binding.members:
            if any(p.fullmatch(m) for p in patterns):
                return CheckResult(Check.BUCKET, True, f"{m} holds {binding.role} on {bucket}")
    if not account.ok:  # the KSA's Google service account is unknown: it may be the bound one
        why = account.skipped or f"service account {setup.job_service_account} unreadable"
        return CheckResult(Check.BUCKET, False, f"no binding for the KSA itself, and {why}", skipped=True)
    who = f"{cluster.namespace}/{setup.job_service_account}" + (f" ({gsa})" if gsa else "")
    detail = f"{who} may not write {bucket}: no {' / '.join(WRITER_ROLES)} binding"
    return CheckResult(Check.BUCKET, False, detail, fix)


def _crd(cluster: Cluster, read: Read[str]) -> CheckResult:
    if (skipped := _skip(Check.CRD, read)) is not None:
        return skipped
    if read.ok:
        return CheckResult(Check.CRD, True, f"{CRD_NAME} is installed")
    fix = f"{_credentials(cluster)}kubectl apply -f infra/tidal-scheduler/crd.yaml"
    return CheckResult(Check.CRD, False, str(read.error), fix)
