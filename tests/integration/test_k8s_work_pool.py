"""The production rollout end to end: Falcon's flows as Kubernetes Jobs of a Prefect `kubernetes`
work pool, the way infra/README.md rolls it out, with the emulator's `central` cluster standing in
for the central GKE cluster (its kubelet runs each pod's command as a local process, see
falcon_emulator.processes).

As an operator would: the namespace and service account from infra/central/, the database URL in
Secret `falcon-database`, `prefect work-pool create falcon --type kubernetes --base-job-template
infra/central/k8s-work-pool-template.json` (its variables given this machine's values: the code
folder, the emulator, an image name), `prefect deploy --all` from the repository, `prefect worker
start`. An upstream row, then one dispatcher run: with FALCON_RUNS_IN=deployments the dispatcher,
the task's lifecycle and its release each run as a Job's pod, and the task reaches Succeeded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from prefect.client.orchestration import get_client

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.domain.status import Status
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, EMULATOR, ROOT, clean_env, submit
from tests.integration.test_dispatcher_process import free_port
from tests.integration.test_local_stack import serving

PREFECT = str(Path(sys.executable).with_name("prefect"))
CENTRAL = ("tpu-service", "us-central1", "central")
NAMESPACE = "falcon"
IMAGE = "us-central1-docker.pkg.dev/tpu-service/falcon/falcon:test"
WITH_CENTRAL = {
    **EMULATOR,
    "projects": {
        **EMULATOR["projects"],  # type: ignore[dict-item]
        CENTRAL[0]: {
            "clusters": {
                CENTRAL[2]: {
                    "location": CENTRAL[1],
                    "runsCommands": True,
                    "nodePools": {"default-pool": {"machineType": "e2-standard-8", "nodeCount": 2}},
                }
            }
        },
    },
}
DEPLOYMENTS = ("dispatcher", "task-lifecycle", "task-release")


def central_api(emulator: EmulatorServer) -> k8s.ApiClient:
    project, location, name = CENTRAL
    return k8s.ApiClient(k8s.Configuration(host=f"{emulator.url}/k8s/{project}/{location}/{name}"))


def onboard_central(emulator: EmulatorServer, db_url: str) -> None:
    """infra/README.md's kubectl steps: namespace, controller KSA, the database Secret."""
    core = k8s.CoreV1Api(central_api(emulator))
    core.create_namespace(yaml.safe_load((ROOT / "infra/central/namespace.yaml").read_text()))
    account = yaml.safe_load((ROOT / "infra/central/controller-serviceaccount.yaml").read_text())
    core.create_namespaced_service_account(NAMESPACE, account)
    secret = {"metadata": {"name": "falcon-database"}, "stringData": {"url": db_url}}
    core.create_namespaced_secret(NAMESPACE, secret)


def kubeconfig(emulator: EmulatorServer, path: Path) -> Path:
    project, location, name = CENTRAL
    server = f"{emulator.url}/k8s/{project}/{location}/{name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "central", "cluster": {"server": server}}],
        "users": [{"name": "worker", "user": {"token": "emulator-ignores-it"}}],
        "contexts": [{"name": "central", "context": {"cluster": "central", "user": "worker"}}],
        "current-context": "central",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def pool_template(emulator: EmulatorServer, path: Path) -> Path:
    """infra's template with this machine's defaults for its variables (as an operator sets the
    image and environment); the job configuration itself is untouched."""
    template = json.loads((ROOT / "infra/central/k8s-work-pool-template.json").read_text())
    variables = template["variables"]["properties"]
    variables["image"]["default"] = IMAGE
    variables["env"]["default"] = {
        "FALCON_CODE_DIR": str(ROOT),  # the image's /opt/falcon: here the checkout
        "FALCON_EMULATOR_URL": emulator.url,
        "FALCON_RUNS_IN": "deployments",  # lifecycle and release as Jobs of their own
        "FALCON_VIEW_SECONDS": "0",
        "PREFECT_LOGGING_EXTRA_LOGGERS": "falcon",
    }
    path.write_text(json.dumps(template))
    return path


class Prefect:
    """`prefect` commands against one server, from an empty folder, with a clean environment."""

    def __init__(self, api_url: str, home: Path, cwd: Path) -> None:
        self.env = clean_env(PREFECT_API_URL=api_url, PREFECT_HOME=str(home))
        self.cwd = cwd

    def __call__(self, *args: str, cwd: Path | None = None, **env: str) -> str:
        done = subprocess.run(
            [PREFECT, "--no-prompt", *args],
            cwd=cwd or self.cwd,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done.stdout


@pytest.fixture
def prefect_server(tmp_path: Path) -> Iterator[str]:
    """A Prefect server of its own. Its scheduler is off: the dispatcher's 600 s interval run would
    otherwise run for 590 s beside the test's own, if it came first."""
    port = free_port()
    command = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    home = str(tmp_path / "server-home")
    env = clean_env(PREFECT_HOME=home, PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false")
    with serving(command, f"http://127.0.0.1:{port}/api/health", env, tmp_path):
        yield f"http://127.0.0.1:{port}/api"


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as a service manager stops the worker; SIGKILL if it does not exit."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def task_status(db_url: str, task_id: str) -> tuple[Status, str | None]:
    with session_scope(db_url) as s:
        task = repo.get_task(s, task_id)
    assert task is not None
    return task.status, task.message


def flow_run_jobs(emulator: EmulatorServer) -> dict[str, list[k8s.V1Job]]:
    """The central cluster's Jobs by the deployment whose flow run each executes."""
    jobs = k8s.BatchV1Api(central_api(emulator)).list_namespaced_job(NAMESPACE).items
    found: dict[str, list[k8s.V1Job]] = {}
    for job in jobs:
        found.setdefault(job.metadata.labels.get("prefect.io/deployment-name", ""), []).append(job)
    return found


def complete(job: k8s.V1Job) -> bool:
    return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])


@pytest.mark.parametrize("db_url", ["mysql"], indirect=True)
@pytest.mark.parametrize("emulator_config", [WITH_CENTRAL])
def test_flow_runs_execute_as_kubernetes_jobs_of_the_work_pool_and_a_task_succeeds(
    db_url: str, emulator: EmulatorServer, prefect_server: str, tmp_path: Path
) -> None:
    with session_scope(db_url) as s:
        repo.add_cluster(s, CLUSTER, utc_now())
    onboard_central(emulator, db_url)
    user = tmp_path / "operator"
    user.mkdir()
    prefect = Prefect(prefect_server, tmp_path / "operator-home", user)
    template = pool_template(emulator, tmp_path / "template.json")
    prefect("work-pool", "create", "falcon", "--type", "kubernetes", "--base-job-template", str(template))
    prefect("deploy", "--all", cwd=ROOT)
    worker = subprocess.Popen(
        [PREFECT, "worker", "start", "--pool", "falcon", "--type", "kubernetes", "--name", "central-worker"],
        cwd=user,
        env={
            **prefect.env,
            "KUBECONFIG": str(kubeconfig(emulator, tmp_path / "kubeconfig")),
            # The observer (kopf) watches pods cluster-wide to mark crashed runs; not emulated.
            "PREFECT_INTEGRATIONS_KUBERNETES_OBSERVER_ENABLED": "false",
            "PREFECT_WORKER_QUERY_SECONDS": "1",
        },
        stdout=(tmp_path / "worker.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        submit(db_url, "k8s-001", "alice", "2x2", run_seconds=1.0)
        prefect("deployment", "run", "dispatcher/dispatcher", "--param", "run_seconds=150")
        deadline = time.monotonic() + 240
        while (found := task_status(db_url, "k8s-001"))[0] is not Status.SUCCEEDED:
            assert found[0] is not Status.FAILED, found
            assert time.monotonic() < deadline, (
                f"{found}; worker log:\n{(tmp_path / 'worker.log').read_text()[-4000:]}"
            )
            time.sleep(1)
        jobs = until_released(emulator)
    finally:
        stop(worker)
    assert len(jobs["dispatcher"]) == 1
    assert all(complete(job) for name in ("task-lifecycle", "task-release") for job in jobs.get(name, []))
    assert_runs_completed(prefect_server)


def until_released(emulator: EmulatorServer) -> dict[str, list[k8s.V1Job]]:
    """The task's flow-run Jobs all finished: its lifecycle run's, and its release run's when it
    had one (a pool the round kept ends the task without a release run)."""
    deadline = time.monotonic() + 60
    while True:
        jobs = flow_run_jobs(emulator)
        runs = [job for name in ("task-lifecycle", "task-release") for job in jobs.get(name, [])]
        if runs and all(complete(job) for job in runs):
            return jobs
        assert time.monotonic() < deadline, {name: len(found) for name, found in jobs.items()}
        time.sleep(0.5)


def assert_runs_completed(api_url: str) -> None:
    """The task's acquire run (and release run, if any) ended Completed in Prefect (the pods
    reported them)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        states = {r.name: r.state.type.value for r in client.read_flow_runs() if r.state is not None}
    assert states.get("acquire-k8s-001") == "COMPLETED", states
    assert states.get("release-k8s-001") in ("COMPLETED", None), states  # none when the round kept the pool
