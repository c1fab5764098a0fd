"""The log wrapper as the container runs it (design §7): the pod itself writes its log to GCS.

We run the rendered container command and args under /bin/bash, with the environment
Kubernetes would give it (``$(POD_NAME)`` expanded) and the GCS FUSE mount path pointing at a
temporary folder laid out as the bucket, and a stand-in command. We test: the log appears at
``logs/<task id>/<pod name>.log`` under the bucket with both streams, the output still reaches
the container's stdout (``kubectl logs``), the command's exit code is the container's, and a
SIGTERM to the wrapper (PID 1 of the container) reaches the command, whose exit code is kept.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from falcon.domain.job_manifest import JobTarget, log_object, render_job
from falcon.domain.model import Cluster, ClusterStatus, TaskSpec
from falcon.domain.topology import resolve_shape

TASK_ID = "task-7"
POD_NAME = "falcon-task-7-0a1b2c3d-0-xk2p9"
CLUSTER = Cluster(
    id="c-a",
    name="edge-a",
    project="proj-a",
    location="us-east5-b",
    tpu_type="v6e",
    gcs_bucket="bucket-a",
    default_reservation=None,
    status=ClusterStatus.ACTIVE,
    namespace="falcon-jobs",
)


def container_process(bucket_mount: Path, command: list[str]) -> tuple[list[str], dict[str, str]]:
    """The container's argv and environment as the kubelet builds them from the rendered Job."""
    spec = TaskSpec(image="busybox", command=command, topology="2x2")
    target = JobTarget(
        TASK_ID, "falcon-task-7-0a1b2c3d", "pool", CLUSTER, resolve_shape("v6e", "2x2"), str(bucket_mount)
    )
    (container,) = render_job(spec, target)["spec"]["template"]["spec"]["containers"]
    env = {"PATH": os.environ["PATH"]}
    for var in container["env"]:
        if "valueFrom" in var:
            field = var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = {"metadata.name": POD_NAME, "metadata.namespace": "falcon-jobs"}[field]
        else:  # Kubernetes expands $(VAR) from variables defined earlier in the list
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), var["value"])
    return [*container["command"], *container["args"]], env


def test_the_log_lands_at_the_design_path_with_both_streams_and_the_exit_code_is_kept(tmp_path: Path) -> None:
    stand_in = ["bash", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"]
    argv, env = container_process(tmp_path, stand_in)

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)

    assert argv[:2] == ["/bin/bash", "-c"]
    log = (tmp_path / log_object(TASK_ID, POD_NAME)).read_text()
    assert "to-stdout" in log and "to-stderr" in log
    assert "to-stdout" in done.stdout and "to-stderr" in done.stdout  # kubectl logs still shows it
    assert done.returncode == 3


def test_a_successful_command_ends_the_container_with_zero(tmp_path: Path) -> None:
    argv, env = container_process(tmp_path, ["bash", "-c", "echo fine"])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0
    assert (tmp_path / log_object(TASK_ID, POD_NAME)).read_text() == "fine\n"


@pytest.mark.timeout(30)
def test_sigterm_to_the_wrapper_reaches_the_command_and_its_exit_code_is_kept(tmp_path: Path) -> None:
    stand_in = ["bash", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done"]
    argv, env = container_process(tmp_path, stand_in)
    log = tmp_path / log_object(TASK_ID, POD_NAME)

    wrapper = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (log.exists() and "ready" in log.read_text()):
        time.sleep(0.05)
    wrapper.send_signal(signal.SIGTERM)  # what the kubelet sends to PID 1 when the Job is deleted

    assert wrapper.wait(timeout=10) == 7
    assert log.read_text() == "ready\ngot-term\n"
