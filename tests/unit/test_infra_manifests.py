"""The central and edge cluster files under infra/ (issue 11): what they are checked against.

Kubernetes objects are validated against the API schemas the way test_tidal_manifests does
(kubernetes-validate, strict). The work-pool template is put through prefect-kubernetes' own
job configuration, as a worker would for a flow run, and the Job it gives is validated too. The
Prefect server settings are loaded by Prefect's own settings model. Names that must agree across
files (namespaces, service accounts, the work pool) are compared with the code's defaults, and no
file in infra/ may hold a database URL or a credential in a URL.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prefect.client.schemas.objects import FlowRun
from prefect.settings import Settings
from prefect.utilities.templating import apply_values
from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration
from tests.unit.test_tidal_manifests import KUBERNETES_VERSIONS

from falcon.adapters.db.orm import ClusterRow

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
CENTRAL, EDGE = INFRA / "central", INFRA / "edge"
TEMPLATE = CENTRAL / "k8s-work-pool-template.json"
WORKER_VALUES = CENTRAL / "prefect-worker-values.yaml"
SERVER_ENV = CENTRAL / "prefect-server.env"
BOOTSTRAP = EDGE / "bootstrap.sh"
WORK_POOL = "falcon"

Json = dict[str, Any]


def kubernetes_objects() -> list[tuple[str, Json]]:
    """Every Kubernetes object in infra/central and infra/edge (Helm values are not objects)."""
    found = []
    for path in sorted([*CENTRAL.glob("*.yaml"), *EDGE.glob("*.yaml")]):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and {"apiVersion", "kind"} <= set(document):
                found.append((str(path.relative_to(INFRA)), document))
    return found


def by_kind(kind: str, namespace: str | None = None) -> list[Json]:
    return [
        obj
        for _, obj in kubernetes_objects()
        if obj["kind"] == kind and (namespace is None or obj["metadata"].get("namespace") == namespace)
    ]


def test_the_objects_are_the_ones_we_ship() -> None:
    assert sorted((name, obj["kind"]) for name, obj in kubernetes_objects()) == [
        ("central/controller-serviceaccount.yaml", "ServiceAccount"),
        ("central/namespace.yaml", "Namespace"),
        ("edge/job-serviceaccount.yaml", "ServiceAccount"),
        ("edge/namespace.yaml", "Namespace"),
    ]


@pytest.mark.parametrize("kubernetes", KUBERNETES_VERSIONS)
def test_every_object_is_valid_for_the_kubernetes_api(kubernetes: str) -> None:
    for _, obj in kubernetes_objects():
        kubernetes_validate.validate(obj, kubernetes, strict=True)


def _gsa(service_account: Json) -> str:
    return str(service_account["metadata"]["annotations"]["iam.gke.io/gcp-service-account"])


def test_the_edge_namespace_is_falcons_default_and_holds_the_job_account() -> None:
    default = ClusterRow.__table__.c.namespace.default.arg  # a registered cluster's namespace
    assert {n["metadata"]["name"] for n in by_kind("Namespace")} == {default, "falcon"}
    (job_account,) = by_kind("ServiceAccount", default)
    assert job_account["metadata"]["name"] == "falcon-job"
    assert re.fullmatch(r"[a-z][a-z0-9-]+@[A-Z_]+\.iam\.gserviceaccount\.com", _gsa(job_account))


def test_the_controller_account_acts_as_cluster_controller() -> None:
    (controller,) = by_kind("ServiceAccount", "falcon")
    assert controller["metadata"]["name"] == "falcon-controller"
    assert _gsa(controller).startswith("cluster-controller@")


# -- the Kubernetes work pool's base job template -----------------------------------------------------------
def template() -> Json:
    loaded: Json = json.loads(TEMPLATE.read_text())
    return loaded


def flow_run_job(values: Json | None = None) -> tuple[KubernetesWorkerJobConfiguration, Json]:
    """The Job a Kubernetes worker would create for a flow run: the template's variables'
    defaults (plus ``values``) applied as Prefect applies them, checked by prefect-kubernetes."""
    base = template()
    defaults = {k: v["default"] for k, v in base["variables"]["properties"].items() if "default" in v}
    configuration = KubernetesWorkerJobConfiguration(
        **apply_values(base["job_configuration"], {**defaults, **(values or {})})
    )
    configuration.prepare_for_flow_run(FlowRun(flow_id=uuid.uuid4(), name="quiet-falcon"))
    return configuration, configuration.job_manifest


def test_every_placeholder_is_a_variable_of_the_template() -> None:
    placeholders = set(re.findall(r"\{\{\s*([\w.]+)\s*\}\}", json.dumps(template()["job_configuration"])))
    assert placeholders and placeholders <= set(template()["variables"]["properties"])


def test_flow_runs_run_in_namespace_falcon_as_falcon_controller() -> None:
    configuration, job = flow_run_job()
    assert configuration.namespace == job["metadata"]["namespace"] == "falcon"
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "falcon-controller"
    # not overridable per deployment: the Workload Identity binding names exactly this account
    assert {"namespace", "service_account_name"}.isdisjoint(template()["variables"]["properties"])


def test_the_database_url_comes_from_a_secret() -> None:
    _, job = flow_run_job({"env": {"EXTRA": "1"}})
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["FALCON_DATABASE_URL"] == {
        "name": "FALCON_DATABASE_URL",
        "valueFrom": {"secretKeyRef": {"name": "falcon-database", "key": "url"}},
    }
    assert env["EXTRA"]["value"] == "1"  # a deployment's env still reaches the pod
    assert "PREFECT__FLOW_RUN_ID" in env  # and so does Prefect's own
    assert env["FALCON_CODE_DIR"]["value"]  # prefect.yaml's pull step changes into it


@pytest.mark.parametrize("kubernetes", KUBERNETES_VERSIONS)
def test_the_flow_run_job_is_valid_for_the_kubernetes_api(kubernetes: str) -> None:
    _, job = flow_run_job()
    job = json.loads(json.dumps(job))
    pod = job["spec"]["template"]["spec"]
    # prefect-kubernetes insists on these two Job fields in the pod spec (its own default puts them
    # there); the API server drops them. Everything else must be a valid Job.
    assert (pod.pop("completions"), pod.pop("parallelism")) == (1, 1)
    kubernetes_validate.validate(job, kubernetes, strict=True)


# -- the worker, the pool, the server ----------------------------------------------------------------------
def worker_values() -> Json:
    loaded: Json = yaml.safe_load(WORKER_VALUES.read_text())
    return loaded


def test_the_worker_polls_the_kubernetes_pool_with_no_google_identity() -> None:
    values = worker_values()
    worker = values["worker"]
    assert worker["config"]["type"] == "kubernetes" and worker["config"]["workPool"] == WORK_POOL
    assert values["serviceAccount"]["name"] != "falcon-controller"
    api = worker["selfHostedServerApiConfig"]
    assert worker["apiConfig"] == "selfHostedServer" and "@" not in api["apiUrl"]
    assert api["basicAuth"] == {"enabled": True, "existingSecret": "prefect-basic-auth"}


def test_the_pool_is_the_one_the_readme_creates() -> None:
    assert f"prefect work-pool create {WORK_POOL} --type kubernetes" in (INFRA / "README.md").read_text()


def server_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    lines = [line for line in SERVER_ENV.read_text().splitlines() if line and not line.startswith("#")]
    for line in lines:
        name, _, value = line.partition("=")
        monkeypatch.setenv(name, value)
    return Settings()


def test_the_server_settings_are_prefects(monkeypatch: pytest.MonkeyPatch) -> None:
    server = server_settings(monkeypatch).server
    assert server.concurrency.lease_storage == "prefect.server.concurrency.lease_storage.filesystem"
    assert "flow_runs" in server.services.db_vacuum.enabled_vacuum_types
    assert server.services.db_vacuum.retention_period.days == 30
    # every line sets a setting Prefect knows (a misspelt name would be silently ignored)
    names = {
        line.partition("=")[0] for line in SERVER_ENV.read_text().splitlines() if re.match(r"[A-Z]", line)
    }
    assert names <= set(Settings().to_environment_variables()), names
    # the two credentials are never in the file
    assert not {"PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_API_AUTH_STRING"} & names


def test_no_database_url_or_credential_in_a_url_anywhere_in_infra() -> None:
    credential_in_url = re.compile(r"[a-z][a-z0-9+.-]*://[^\s/:@'\"]+:[^\s/@'\"]+@")
    for path in sorted(p for p in INFRA.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        assert "mysql+pymysql://" not in text, path
        assert not credential_in_url.search(text), f"{path}: {credential_in_url.search(text)}"


# -- the edge bootstrap script -----------------------------------------------------------------------------
def test_bootstrap_applies_files_that_exist() -> None:
    script = BOOTSTRAP.read_text()
    assert script.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in script
    paths = set(re.findall(r"infra/[\w./-]+\.(?:yaml|json)", script))
    assert {"infra/edge/namespace.yaml", "infra/edge/job-serviceaccount.yaml"} <= paths
    assert "infra/iam/falcon-controller-role.yaml" in paths
    assert all((ROOT / p).is_file() for p in paths), [p for p in paths if not (ROOT / p).is_file()]
    subprocess.run(["bash", "-n", str(BOOTSTRAP)], check=True)


def test_bootstrap_is_shellcheck_clean() -> None:
    result = subprocess.run(["shellcheck", str(BOOTSTRAP)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
