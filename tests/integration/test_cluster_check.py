"""`falcon cluster check NAME` and `falcon cluster add`'s check, as a user runs them: subprocesses
from an empty folder against the emulator, with each onboarding step's failure injected.

One emulator holds one project per case (IAM grants, reservations and buckets are per project), each
with its cluster onboarded as infra/edge/bootstrap.sh would (namespace, Job service account annotated
with its Google service account, the TidalScheduler CRD) through the official Kubernetes client, minus
the step the case leaves out. The healthy cluster passes every check (exit 0); every other case fails
exactly its check, with a fix line, and exits 1; the checks that depend on a failed one say "skip".
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.session import session_scope
from falcon.adapters.iam import REQUIRED_PERMISSIONS
from falcon.bootstrap import Gateways
from falcon.domain.model import Cluster, ClusterStatus
from falcon.settings import Settings
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import ROOT, clean_env

FALCON = str(Path(sys.executable).with_name("falcon"))
KSA = "falcon-job"
CHECKS = ["cluster", "permissions", "reservation", "tpu type", "namespace", "service account", "bucket"]
CHECKS.append("tidal crd")


@dataclass(frozen=True)
class Case:
    fails: str | None  # the one check that fails
    project: dict[str, Any] = field(default_factory=dict)  # changes to the project's emulator config
    register: dict[str, Any] = field(default_factory=dict)  # changes to the registry row
    leave_out: str | None = None  # the onboarding step not done: namespace, account or crd
    skipped: tuple[str, ...] = ()  # checks that cannot be judged once the failing one failed
    says: str = ""  # in the failing line


CASES = {
    "healthy": Case(None),
    "no-permission": Case(
        "permissions",
        project={"iamPermissions": [p for p in REQUIRED_PERMISSIONS if p != "container.jobs.create"]},
        says="missing on proj-no-permission: container.jobs.create "
        "(needed by BatchV1Api.create_namespaced_job)",
    ),
    "reservation-creating": Case(
        "reservation", project={"reservationStatus": "CREATING"}, says="is CREATING, not READY"
    ),
    "reservation-wrong-type": Case(
        "reservation",
        project={"reservationMachineType": "ct5lp-hightpu-4t"},
        says="reserves ct5lp-hightpu-4t, not a v6e machine type",
    ),
    "reservation-missing": Case(
        "reservation", register={"default_reservation": "res-gone"}, says="res-gone' was not found"
    ),
    "tpu-not-offered": Case(
        "tpu type",
        register={"zone": "us-east5-c", "default_reservation": None},
        says="v6e (ct6e-standard-4t) is not offered in us-east5-c",
    ),
    "namespace-missing": Case(
        "namespace",
        leave_out="namespace",
        skipped=("service account", "bucket"),
        says='namespaces "falcon-jobs" not found',
    ),
    "account-missing": Case(
        "service account", leave_out="account", skipped=("bucket",), says=f'serviceaccounts "{KSA}" not found'
    ),
    "bucket-unbound": Case("bucket", project={"writers": []}, says="may not write gs://logs-bucket-unbound"),
    "crd-missing": Case(
        "tidal crd",
        leave_out="crd",
        says='customresourcedefinitions.apiextensions.k8s.io "tidalschedulers.scheduling.tidal.io" not found',
    ),
    "unknown-to-gke": Case(
        "cluster",
        project={"noCluster": True},
        skipped=("namespace", "service account", "bucket", "tidal crd"),
        says="Not found: projects/proj-unknown-to-gke/locations/us-east5/clusters/unknown-to-gke",
    ),
}


def project_config(name: str, case: Case) -> dict[str, Any]:
    project = f"proj-{name}"
    knobs = case.project
    config: dict[str, Any] = {
        "reservations": {
            "res": {
                "zone": "us-east5-b",
                "machineType": knobs.get("reservationMachineType", "ct6e-standard-4t"),
                "count": 8,
                "status": knobs.get("reservationStatus", "READY"),
            }
        },
        "buckets": {
            f"logs-{name}": {
                "writers": knobs.get("writers", [f"serviceAccount:job@{project}.iam.gserviceaccount.com"])
            }
        },
        "clusters": {}
        if knobs.get("noCluster")
        else {name: {"location": "us-east5", "zones": ["us-east5-a", "us-east5-b", "us-east5-c"]}},
    }
    if "iamPermissions" in knobs:
        config["iamPermissions"] = knobs["iamPermissions"]
    return config


def registered(name: str, case: Case) -> Cluster:
    row = {"default_reservation": "res", "zone": "us-east5-b", **case.register}
    return Cluster(
        f"id-{name}",
        name,
        f"proj-{name}",
        "us-east5",
        "v6e",
        f"logs-{name}",
        row["default_reservation"],
        ClusterStatus.ACTIVE,
        "falcon-jobs",
        row["zone"],
    )


def onboard(settings: Settings, cluster: Cluster, leave_out: str | None = None) -> None:
    """What infra/edge/bootstrap.sh does on the cluster, through the official client."""
    api = Gateways(settings).kubernetes_api(cluster)
    core = k8s.CoreV1Api(api)
    if leave_out != "namespace":
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=cluster.namespace)))
    if leave_out not in ("namespace", "account"):
        gsa = {"iam.gke.io/gcp-service-account": f"job@{cluster.project}.iam.gserviceaccount.com"}
        account = k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=KSA, annotations=gsa))
        core.create_namespaced_service_account(cluster.namespace, account)
    if leave_out != "crd":
        definition = yaml.safe_load((ROOT / "infra/tidal-scheduler/crd.yaml").read_text())
        k8s.ApiextensionsV1Api(api).create_custom_resource_definition(definition)


@dataclass
class Fleet:
    folder: Path
    env: dict[str, str]
    settings: Settings


def falcon(fleet: Fleet, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [FALCON, *args],
        cwd=fleet.folder,
        env=clean_env(**fleet.env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def done(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("check")
    projects = {f"proj-{name}": project_config(name, case) for name, case in CASES.items()}
    projects["proj-added"] = project_config("added", Case(None))
    config = EmulatorConfig.from_dict({"projects": projects})
    with EmulatorServer(config, folder / "emulator") as emulator:
        home = folder / ".falcon"
        settings = Settings(home=home, emulator_url=emulator.url)
        upgrade(settings.resolved_database_url)
        with session_scope(settings.resolved_database_url) as session:
            for name, case in CASES.items():
                repo.add_cluster(session, registered(name, case), utc_now())
        for name, case in CASES.items():
            if name != "unknown-to-gke":
                onboard(settings, registered(name, case), case.leave_out)
        env = {
            "FALCON_HOME": str(home),
            "FALCON_EMULATOR_URL": emulator.url,
            "FALCON_JOB_SERVICE_ACCOUNT": KSA,
        }
        yield Fleet(folder, env, settings)


@pytest.fixture(scope="module")
def checked(fleet: Fleet) -> dict[str, tuple[int, str, str]]:
    """Every case's `falcon cluster check NAME`, run side by side, within one deadline for all: a
    dozen CLI starts at once on two cores beside the suite's other workers once took more than a
    minute before the first of them was done."""
    procs = {name: falcon(fleet, "cluster", "check", name) for name in CASES}
    deadline = time.monotonic() + 300
    return {name: done(proc, max(1.0, deadline - time.monotonic())) for name, proc in procs.items()}


def verdicts(out: str) -> dict[str, str]:
    """check -> ok / FAIL / skip, from the check's lines; every FAIL line is followed by its fix."""
    lines = out.splitlines()
    found: dict[str, str] = {}
    for i, line in enumerate(lines):
        tag, _, rest = line.partition(" ")
        if tag in ("ok", "FAIL", "skip"):
            found[rest.strip().split(":", 1)[0]] = tag
            if tag == "FAIL":
                assert lines[i + 1].startswith("     fix: "), out
    return found


@pytest.mark.parametrize("name", list(CASES))
def test_each_injected_failure_fails_exactly_its_check(
    checked: dict[str, tuple[int, str, str]], name: str
) -> None:
    case = CASES[name]
    code, out, err = checked[name]
    expected = {c: "ok" for c in CHECKS}
    expected.update({c: "skip" for c in case.skipped})
    if case.fails:
        expected[case.fails] = "FAIL"
    assert verdicts(out) == expected, out + err
    assert (
        out.splitlines()[0] == f"checking {name} (proj-{name}/us-east5, zone {registered(name, case).zone})"
    )
    assert code == (1 if case.fails else 0), out + err
    if case.fails:
        (line,) = [x for x in out.splitlines() if x.startswith(f"FAIL {case.fails}:")]
        assert case.says in line, out


def test_the_fixes_name_the_commands_to_run(checked: dict[str, tuple[int, str, str]]) -> None:
    def fix(name: str) -> str:
        lines = checked[name][1].splitlines()
        return next(lines[i + 1] for i, x in enumerate(lines) if x.startswith("FAIL"))

    assert fix("no-permission").endswith(
        "gcloud projects add-iam-policy-binding proj-no-permission --condition=None "
        "--member=serviceAccount:CONTROLLER_GSA --role=projects/proj-no-permission/roles/falcon_controller"
    )
    assert fix("namespace-missing").endswith("kubectl create namespace falcon-jobs")
    assert "infra/edge/bootstrap.sh" in fix("account-missing") and f"JOB_KSA={KSA}" in fix("account-missing")
    assert fix("bucket-unbound").endswith(
        "gcloud storage buckets add-iam-policy-binding gs://logs-bucket-unbound "
        "--role=roles/storage.objectUser "
        "--member=serviceAccount:job@proj-bucket-unbound.iam.gserviceaccount.com"
    )
    assert fix("crd-missing").endswith("kubectl apply -f infra/tidal-scheduler/crd.yaml")


def test_add_registers_then_checks_unless_told_not_to(fleet: Fleet) -> None:
    cluster = registered("added", Case(None))
    onboard(fleet.settings, cluster, leave_out="crd")
    where = ["--project", cluster.project, "--location", "us-east5", "--zone", "us-east5-b"]
    add = ["cluster", "add", "added", *where, "--tpu-type", "v6e", "--gcs-bucket", "logs-added"]

    code, out, err = done(falcon(fleet, *add, "--reservation", "res"))
    # registered whatever the check says; the check's failure is said, `cluster check` is the gate
    assert code == 0, out + err
    assert out.startswith("registered ") and "FAIL tidal crd:" in out and "ok   reservation:" in out
    assert "added is registered but failed its check" in err
    with session_scope(fleet.settings.resolved_database_url) as session:
        assert repo.find_cluster(session, "added", cluster.project, "us-east5") is not None

    again = done(falcon(fleet, *add, "--no-check"))
    assert again[0] == 0 and again[1].strip() == "cluster proj-added/us-east5/added is already registered"
    check = done(
        falcon(fleet, "cluster", "check", "added", "--project", "proj-added", "--location", "us-east5")
    )
    assert check[0] == 1 and "FAIL tidal crd:" in check[1]
    unknown = done(falcon(fleet, "cluster", "check", "added", "--project", "elsewhere"))
    assert unknown[0] == 2 and "no registered cluster added" in unknown[2]
