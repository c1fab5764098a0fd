"""`falcon cluster check`'s verdicts (domain.cluster_check): each check's ok and failure wording and
its fix, from facts as the probe reads them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from falcon.domain.cluster_check import (
    Binding,
    Check,
    CheckResult,
    Facts,
    Read,
    ReservationFacts,
    Setup,
    evaluate,
    failed,
    probe_machine_type,
)
from falcon.domain.model import Cluster, ClusterStatus

CLUSTER = Cluster(
    "c1",
    "edge-a",
    "proj",
    "us-east5",
    "v6e",
    "logs",
    "res",
    ClusterStatus.ACTIVE,
    "falcon-jobs",
    "us-east5-b",
)
SETUP = Setup(
    required=("container.clusters.get", "container.jobs.create"),
    job_service_account="falcon-job",
    controller="cc@central.iam.gserviceaccount.com",
    calls={"container.jobs.create": ["BatchV1Api.create_namespaced_job"]},
)
GSA = "job@proj.iam.gserviceaccount.com"
HEALTHY = Facts(
    cluster=Read(value="https://10.0.0.1"),
    held=Read(value=frozenset(SETUP.required)),
    machine_type=Read(value="ct6e-standard-4t"),
    namespace=Read(value="falcon-jobs"),
    service_account=Read(value=GSA),
    bucket_policy=Read(value=(Binding("roles/storage.objectUser", (f"serviceAccount:{GSA}",)),)),
    crd=Read(value="tidalschedulers.scheduling.tidal.io"),
    reservation=Read(value=ReservationFacts("READY", "ct6e-standard-4t", 8, 2)),
)
CREDS = "gcloud container clusters get-credentials edge-a --project=proj --location=us-east5 && "


def result(check: Check, facts: Facts = HEALTHY, cluster: Cluster = CLUSTER) -> CheckResult:
    (found,) = [r for r in evaluate(cluster, facts, SETUP) if r.name is check]
    return found


def test_a_healthy_cluster_passes_every_check_in_order() -> None:
    results = evaluate(CLUSTER, HEALTHY, SETUP)
    assert [r.name for r in results] == list(Check)
    assert not failed(results)
    assert [r.line for r in results] == [
        "ok   cluster: GKE cluster edge-a answers at https://10.0.0.1",
        "ok   permissions: all 2 permissions held on proj",
        "ok   reservation: res in us-east5-b: READY, ct6e-standard-4t, 6 of 8 free",
        "ok   tpu type: v6e (ct6e-standard-4t) is offered in us-east5-b",
        "ok   namespace: falcon-jobs exists",
        f"ok   service account: falcon-jobs/falcon-job exists (Google service account {GSA})",
        f"ok   bucket: serviceAccount:{GSA} holds roles/storage.objectUser on gs://logs",
        "ok   tidal crd: tidalschedulers.scheduling.tidal.io is installed",
    ]


@pytest.mark.parametrize(
    ("check", "facts", "cluster", "line"),
    [
        pytest.param(
            Check.CLUSTER,
            replace(HEALTHY, cluster=Read(error="get cluster edge-a: Not found: projects/…", missing=True)),
            CLUSTER,
            "FAIL cluster: get cluster edge-a: Not found: projects/…\n"
            "     fix: gcloud container clusters list --project=proj  # then register the right name",
            id="cluster unknown to GKE",
        ),
        pytest.param(
            Check.CLUSTER,
            replace(HEALTHY, cluster=Read(error="get cluster edge-a: 403 denied")),
            CLUSTER,
            "FAIL cluster: get cluster edge-a: 403 denied\n"
            "     fix: gcloud container clusters describe edge-a --project=proj --location=us-east5",
            id="cluster refused",
        ),
        pytest.param(
            Check.PERMISSIONS,
            replace(HEALTHY, held=Read(value=frozenset({"container.clusters.get"}))),
            CLUSTER,
            "FAIL permissions: missing on proj: container.jobs.create "
            "(needed by BatchV1Api.create_namespaced_job)\n"
            "     fix: gcloud iam roles update falcon_controller --project=proj "
            "--file=infra/iam/falcon-controller-role.yaml && gcloud projects add-iam-policy-binding proj "
            "--condition=None --member=serviceAccount:cc@central.iam.gserviceaccount.com "
            "--role=projects/proj/roles/falcon_controller",
            id="permission missing",
        ),
        pytest.param(
            Check.RESERVATION,
            replace(HEALTHY, reservation=Read(value=ReservationFacts("CREATING", "ct6e-standard-4t", 8, 0))),
            CLUSTER,
            "FAIL reservation: res in us-east5-b is CREATING, not READY\n"
            "     fix: gcloud compute reservations describe res --project=proj --zone=us-east5-b  "
            "# wait until READY",
            id="reservation not ready",
        ),
        pytest.param(
            Check.RESERVATION,
            replace(HEALTHY, reservation=Read(value=ReservationFacts("READY", "ct5lp-hightpu-4t", 8, 0))),
            CLUSTER,
            "FAIL reservation: res in us-east5-b reserves ct5lp-hightpu-4t, not a v6e machine type "
            "(ct6e-standard-*)\n"
            "     fix: gcloud compute reservations list --project=proj --filter=zone:us-east5-b  "
            "# then register a ct6e-standard-* reservation",
            id="reservation of another machine type",
        ),
        pytest.param(
            Check.RESERVATION,
            replace(
                HEALTHY, reservation=Read(error="get reservation: 403 Required permission", missing=False)
            ),
            replace(CLUSTER, default_reservation="projects/owner/reservations/shared"),
            "FAIL reservation: get reservation: 403 Required permission\n"
            "     fix: gcloud projects add-iam-policy-binding owner --condition=None "
            "--member=serviceAccount:cc@central.iam.gserviceaccount.com --role=roles/compute.viewer",
            id="shared reservation unreadable",
        ),
        pytest.param(
            Check.TPU_TYPE,
            replace(HEALTHY, machine_type=Read(error="The resource '…' was not found", missing=True)),
            CLUSTER,
            "FAIL tpu type: v6e (ct6e-standard-4t) is not offered in us-east5-b: "
            "The resource '…' was not found\n"
            '     fix: gcloud compute machine-types list --project=proj --filter="name=ct6e-standard-4t"  '
            "# then register the cluster with --zone=<a zone listed>",
            id="tpu type not offered",
        ),
        pytest.param(
            Check.NAMESPACE,
            replace(HEALTHY, namespace=Read(error='namespaces "falcon-jobs" not found', missing=True)),
            CLUSTER,
            'FAIL namespace: namespaces "falcon-jobs" not found\n'
            f"     fix: {CREDS}kubectl create namespace falcon-jobs",
            id="namespace missing",
        ),
        pytest.param(
            Check.SERVICE_ACCOUNT,
            replace(
                HEALTHY, service_account=Read(error='serviceaccounts "falcon-job" not found', missing=True)
            ),
            CLUSTER,
            'FAIL service account: serviceaccounts "falcon-job" not found\n'
            "     fix: PROJECT_ID=proj LOCATION=us-east5 CLUSTER=edge-a BUCKET=logs "
            "CONTROLLER_GSA=cc@central.iam.gserviceaccount.com NAMESPACE=falcon-jobs JOB_KSA=falcon-job "
            "infra/edge/bootstrap.sh",
            id="service account missing",
        ),
        pytest.param(
            Check.BUCKET,
            replace(
                HEALTHY,
                bucket_policy=Read(
                    value=(Binding("roles/storage.objectViewer", (f"serviceAccount:{GSA}",)),)
                ),
            ),
            CLUSTER,
            f"FAIL bucket: falcon-jobs/falcon-job ({GSA}) may not write gs://logs: no "
            "roles/storage.objectUser / roles/storage.objectAdmin / roles/storage.admin binding\n"
            "     fix: gcloud storage buckets add-iam-policy-binding gs://logs "
            f"--role=roles/storage.objectUser --member=serviceAccount:{GSA}",
            id="bucket: a reader only",
        ),
        pytest.param(
            Check.CRD,
            replace(HEALTHY, crd=Read(error="… not found", missing=True)),
            CLUSTER,
            f"FAIL tidal crd: … not found\n     fix: {CREDS}kubectl apply -f infra/tidal-scheduler/crd.yaml",
            id="crd missing",
        ),
    ],
)
def test_each_failure_says_what_and_how_to_fix_it(
    check: Check, facts: Facts, cluster: Cluster, line: str
) -> None:
    results = evaluate(cluster, facts, SETUP)
    (found,) = [r for r in results if r.name is check]
    assert found.line == line
    # one failing read fails its check only (a check that needs its answer is skipped)
    assert [r.name for r in results if not r.ok and not r.skipped] == [check]
    assert failed(results)


@pytest.mark.parametrize(
    "member",
    [
        "principal://iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/"
        "proj.svc.id.goog/subject/ns/falcon-jobs/sa/falcon-job",
        "serviceAccount:proj.svc.id.goog[falcon-jobs/falcon-job]",
    ],
    ids=["workload identity federation principal", "pool service account form"],
)
def test_the_bucket_may_bind_the_ksa_itself(member: str) -> None:
    facts = replace(
        HEALTHY,
        service_account=Read(value=""),  # no Google service account annotation
        bucket_policy=Read(value=(Binding("roles/storage.objectAdmin", (member,)),)),
    )
    assert result(Check.BUCKET, facts).ok


def test_another_ksa_or_project_is_not_the_jobs() -> None:
    other = "principal://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/other.svc.id.goog/subject/ns/falcon-jobs/sa/falcon-job"
    facts = replace(
        HEALTHY,
        service_account=Read(value=""),
        bucket_policy=Read(
            value=(
                Binding("roles/storage.objectUser", (other, "serviceAccount:proj.svc.id.goog[x/falcon-job]")),
            )
        ),
    )
    assert not result(Check.BUCKET, facts).ok


def test_an_unreachable_cluster_skips_the_kubernetes_checks() -> None:
    skipped: Read[str] = Read(skipped="cluster unreachable")
    facts = replace(
        HEALTHY,
        cluster=Read(error="get cluster: 503"),
        namespace=skipped,
        service_account=skipped,
        crd=skipped,
    )
    lines = {r.name: r.line for r in evaluate(CLUSTER, facts, SETUP)}
    assert lines[Check.NAMESPACE] == "skip namespace: cluster unreachable"
    assert lines[Check.CRD] == "skip tidal crd: cluster unreachable"
    # the bucket binds the KSA's Google service account, which could not be read
    assert lines[Check.BUCKET] == "skip bucket: no binding for the KSA itself, and cluster unreachable"
    assert lines[Check.PERMISSIONS].startswith("ok ")


def test_no_reservation_is_flex_start_only() -> None:
    cluster = replace(CLUSTER, default_reservation=None)
    assert result(Check.RESERVATION, replace(HEALTHY, reservation=None), cluster).line == (
        "ok   reservation: none registered (flex-start only)"
    )


def test_the_fix_names_a_placeholder_when_the_controller_is_unknown() -> None:
    facts = replace(HEALTHY, held=Read(value=frozenset()))
    (found,) = [
        r for r in evaluate(CLUSTER, facts, replace(SETUP, controller=None)) if r.name is Check.PERMISSIONS
    ]
    assert "--member=serviceAccount:CONTROLLER_GSA" in str(found.fix)


@pytest.mark.parametrize(
    ("tpu", "machine"),
    [("v6e", "ct6e-standard-4t"), ("tpu7x", "tpu7x-standard-4t"), ("v5p", "ct5p-hightpu-4t")],
)
def test_the_tpu_type_is_probed_by_its_four_chip_machine(tpu: str, machine: str) -> None:
    assert probe_machine_type(tpu) == machine
