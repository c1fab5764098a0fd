"""A cluster configured ``runsCommands: true`` (the stand-in for Falcon's central cluster): its
kubelet runs each container's command as a local process, with the pod's env (Secrets included),
its output as the log and its exit status as the container's; a deleted pod's process is stopped.
Driven through the official Kubernetes client, as the Prefect worker drives it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer

PROJECT, LOCATION, NS = "central", "us-central1", "falcon"
CONFIG = {
    "podStartSeconds": 0.1,
    "projects": {
        PROJECT: {
            "clusters": {
                "central": {
                    "location": LOCATION,
                    "runsCommands": True,
                    "nodePools": {"default-pool": {"machineType": "e2-standard-8", "nodeCount": 1}},
                },
                "plain": {"location": LOCATION, "nodePools": {"default-pool": {}}},
            }
        }
    },
}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig.from_dict(CONFIG), tmp_path_factory.mktemp("central")) as server:
        yield server


def clients(emulator: EmulatorServer, cluster: str) -> tuple[k8s.CoreV1Api, k8s.BatchV1Api]:
    api = k8s.ApiClient(k8s.Configuration(host=f"{emulator.url}/k8s/{PROJECT}/{LOCATION}/{cluster}"))
    return k8s.CoreV1Api(api), k8s.BatchV1Api(api)


@pytest.fixture(scope="module")
def core(emulator: EmulatorServer) -> k8s.CoreV1Api:
    core, _ = clients(emulator, "central")
    core.create_namespace({"metadata": {"name": NS}})
    secret = {"metadata": {"name": "falcon-database"}, "stringData": {"url": "sqlite:///x.db"}}
    core.create_namespaced_secret(NS, secret)
    return core


@pytest.fixture(scope="module")
def batch(emulator: EmulatorServer, core: k8s.CoreV1Api) -> k8s.BatchV1Api:
    return clients(emulator, "central")[1]


def job(name: str, script: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "python:3.11",
        "args": [sys.executable, "-c", script],
        "env": env or [],
    }
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def the_pod(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod:
    (pod,) = core.list_namespaced_pod(NS, label_selector=f"job-name={name}").items
    return pod


def until(check: Callable[[], Any], seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return found


def finished(batch: k8s.BatchV1Api, name: str) -> str | None:
    status = batch.read_namespaced_job_status(name, NS).status
    for condition in status.conditions or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return str(condition.type)
    return None


def test_a_command_runs_with_its_env_and_secret_and_its_output_is_the_log(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    script = "import os; print('url', os.environ['DB'], 'pod', os.environ['POD'], 'cwd', os.getcwd())"
    env = [
        {"name": "DB", "valueFrom": {"secretKeyRef": {"name": "falcon-database", "key": "url"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    batch.create_namespaced_job(NS, job("hello", script, env))
    assert until(lambda: finished(batch, "hello")) == "Complete"
    pod = the_pod(core, "hello")
    log = core.read_namespaced_pod_log(pod.metadata.name, NS)
    assert f"url sqlite:///x.db pod {pod.metadata.name} cwd " in log
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0


def test_the_exit_status_is_the_containers(core: k8s.CoreV1Api, batch: k8s.BatchV1Api) -> None:
    batch.create_namespaced_job(NS, job("fails", "import sys; print('bye'); sys.exit(3)"))
    assert until(lambda: finished(batch, "fails")) == "Failed"
    terminated = the_pod(core, "fails").status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")


def test_a_missing_secret_holds_the_container_in_create_container_config_error(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    env = [{"name": "DB", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "url"}}}]
    batch.create_namespaced_job(NS, job("no-secret", "print('never')", env))

    def waiting() -> Any:
        pods = core.list_namespaced_pod(NS, label_selector="job-name=no-secret").items
        statuses = (pods and pods[0].status.container_statuses) or []
        waiting = statuses and statuses[0].state.waiting
        return waiting if waiting and waiting.reason != "ContainerCreating" else None

    state = until(waiting)
    assert (state.reason, state.message) == ("CreateContainerConfigError", 'secret "nope" not found')
    core.create_namespaced_secret(NS, {"metadata": {"name": "nope"}, "stringData": {"url": "late"}})
    assert until(lambda: finished(batch, "no-secret"), seconds=30) == "Complete"


def test_deleting_the_job_stops_its_process(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api, tmp_path: Path
) -> None:
    marker = tmp_path / "still-running"
    script = f"import pathlib, time\nwhile True:\n    pathlib.Path({str(marker)!r}).touch(); time.sleep(0.1)"
    batch.create_namespaced_job(NS, job("forever", script))
    until(marker.exists)
    batch.delete_namespaced_job("forever", NS, propagation_policy="Foreground", grace_period_seconds=1)
    until(lambda: not core.list_namespaced_pod(NS, label_selector="job-name=forever").items)
    marker.unlink()
    time.sleep(1)
    assert not marker.exists()


def test_secrets_are_stored_as_the_api_server_stores_them(core: k8s.CoreV1Api) -> None:
    body = {"metadata": {"name": "mixed"}, "data": {"a": "eA=="}, "stringData": {"b": "y"}}
    stored = core.create_namespaced_secret(NS, body)
    assert (stored.data, stored.type, stored.string_data) == ({"a": "eA==", "b": "eQ=="}, "Opaque", None)
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_secret(NS, {"metadata": {"name": "bad"}, "data": {"a": "not base64!"}})
    assert refused.value.status == 422


def test_a_cluster_without_runs_commands_does_not_run_them(emulator: EmulatorServer, tmp_path: Path) -> None:
    core, batch = clients(emulator, "plain")
    marker = tmp_path / "ran"
    body = job("quiet", f"import pathlib; pathlib.Path({str(marker)!r}).touch()")
    core.create_namespace({"metadata": {"name": NS}})
    body["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "EMULATOR_RUN_SECONDS", "value": "0"}
    ]
    batch.create_namespaced_job(NS, body)
    assert until(lambda: finished(batch, "quiet")) == "Complete"  # simulated, not run
    assert not marker.exists()
