"""The Job and headless Service Falcon renders for a task (design §6, §7).

We test, for every TPU shape of shared/reference/gke-compute-k8s-api.md §2: the nodeSelector
pins the pod to the task's pool, accelerator and topology; each pod requests all chips of its
node; one pod per node; Indexed completion and a ``subdomain`` only for multi-host slices. Then
the GCS FUSE annotation (on the pod template) and volume, the ServiceAccount when one is set,
the environment and the log wrapper as the container command, and the headless Service that
selects exactly the task's pods under the name the pods give as subdomain.
"""

from __future__ import annotations

from typing import Any

import pytest

from falcon.domain.job_manifest import LOG_WRAPPER, JobTarget, log_object, render_job, render_service
from falcon.domain.model import FALCON_ENV, Cluster, ClusterStatus, Resources, TaskSpec, k8s_job_name_for
from falcon.domain.topology import resolve_shape

CLUSTER = Cluster(
    id="c-a",
    name="edge-a",
    project="proj-a",
    location="us-east5",
    tpu_type="v6e",
    gcs_bucket="bucket-a",
    default_reservation=None,
    status=ClusterStatus.ACTIVE,
    namespace="falcon-jobs",
)
SPEC = TaskSpec(
    image="us-docker.pkg.dev/p/repo/trainer:1",
    command=["python", "train.py"],
    args=["--steps", "10"],
    env={"LR": "0.1"},
    topology="2x2",
)


def target(tpu_type: str, topology: str, service_account: str | None = None) -> JobTarget:
    return JobTarget(
        task_id="task-42",
        job_name=k8s_job_name_for("task-42"),
        node_pool="falcon-pool-1",
        cluster=CLUSTER,
        shape=resolve_shape(tpu_type, topology),
        service_account=service_account,
    )


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def shape(tpu_type: str, topology: str, accelerator: str, chips_per_node: int, nodes: int) -> object:
    return pytest.param(
        tpu_type, topology, accelerator, chips_per_node, nodes, id=f"{tpu_type} {topology} -> {nodes} pods"
    )


@pytest.mark.parametrize(
    ("tpu_type", "topology", "accelerator", "chips_per_node", "nodes"),
    [
        shape("v5e", "1x1", "tpu-v5-lite-podslice", 1, 1),
        shape("v5e", "2x2", "tpu-v5-lite-podslice", 4, 1),
        shape("v5e", "2x4", "tpu-v5-lite-podslice", 4, 2),
        shape("v5e", "4x4", "tpu-v5-lite-podslice", 4, 4),
        shape("v5e", "4x8", "tpu-v5-lite-podslice", 4, 8),
        shape("v5e", "8x8", "tpu-v5-lite-podslice", 4, 16),
        shape("v5e", "8x16", "tpu-v5-lite-podslice", 4, 32),
        shape("v5e", "16x16", "tpu-v5-lite-podslice", 4, 64),
        shape("v5p", "2x2x1", "tpu-v5p-slice", 4, 1),
        shape("v5p", "2x2x2", "tpu-v5p-slice", 4, 2),
        shape("v5p", "2x2x4", "tpu-v5p-slice", 4, 4),
        shape("v5p", "2x4x4", "tpu-v5p-slice", 4, 8),
        shape("v5p", "4x4x4", "tpu-v5p-slice", 4, 16),
        shape("v5p", "4x4x8", "tpu-v5p-slice", 4, 32),
        shape("v5p", "4x8x8", "tpu-v5p-slice", 4, 64),
        shape("v5p", "8x8x8", "tpu-v5p-slice", 4, 128),
        shape("v5p", "16x16x24", "tpu-v5p-slice", 4, 1536),
        shape("v6e", "1x1", "tpu-v6e-slice", 1, 1),
        shape("v6e", "2x2", "tpu-v6e-slice", 4, 1),
        shape("v6e", "2x4", "tpu-v6e-slice", 4, 2),
        shape("v6e", "4x4", "tpu-v6e-slice", 4, 4),
        shape("v6e", "4x8", "tpu-v6e-slice", 4, 8),
        shape("v6e", "8x8", "tpu-v6e-slice", 4, 16),
        shape("v6e", "8x16", "tpu-v6e-slice", 4, 32),
        shape("v6e", "16x16", "tpu-v6e-slice", 4, 64),
        shape("v7x", "2x2x1", "tpu7x", 4, 1),
        shape("v7x", "2x2x2", "tpu7x", 4, 2),
        shape("v7x", "2x2x4", "tpu7x", 4, 4),
        shape("v7x", "2x4x4", "tpu7x", 4, 8),
        shape("v7x", "4x4x4", "tpu7x", 4, 16),
        shape("v7x", "4x4x8", "tpu7x", 4, 32),
        shape("v7x", "4x8x8", "tpu7x", 4, 64),
        shape("v7x", "8x8x8", "tpu7x", 4, 128),
    ],
)
def test_every_tpu_shape_renders_one_pod_per_node_pinned_to_the_pool_with_all_its_chips(
    tpu_type: str, topology: str, accelerator: str, chips_per_node: int, nodes: int
) -> None:
    job_target = target(tpu_type, topology)
    job = render_job(SPEC, job_target)
    pod = pod_spec(job)
    (container,) = pod["containers"]

    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-nodepool": "falcon-pool-1",
        "cloud.google.com/gke-tpu-accelerator": accelerator,
        "cloud.google.com/gke-tpu-topology": topology,
    }
    assert container["resources"]["requests"]["google.com/tpu"] == str(chips_per_node)
    assert container["resources"]["limits"]["google.com/tpu"] == str(chips_per_node)
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == nodes
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    if nodes > 1:
        assert job["spec"]["completionMode"] == "Indexed"
        assert pod["subdomain"] == render_service(job_target)["metadata"]["name"]
    else:
        assert "completionMode" not in job["spec"]
        assert "subdomain" not in pod


def test_the_largest_slice_of_the_longest_task_id_still_has_valid_pod_hostnames() -> None:
    """Indexed pods are named ``<job>-<index>``: a DNS label of at most 63 characters."""
    job_name = k8s_job_name_for("x" * 64)
    nodes = resolve_shape("v7x", "16x16x36").nodes
    assert len(f"{job_name}-{nodes - 1}") <= 63


def test_logs_go_through_a_gcs_fuse_volume_announced_on_the_pod_template() -> None:
    job = render_job(SPEC, target("v6e", "2x2"))
    pod = pod_spec(job)
    (container,) = pod["containers"]
    assert job["spec"]["template"]["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    assert "gke-gcsfuse/volumes" not in job["metadata"]["annotations"]  # the webhook reads the pod's
    (volume,) = pod["volumes"]
    assert volume["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
    assert volume["csi"]["readOnly"] is False
    assert volume["csi"]["volumeAttributes"]["bucketName"] == "bucket-a"
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": "/gcs"}]


def test_the_service_account_is_named_only_when_one_is_set() -> None:
    assert "serviceAccountName" not in pod_spec(render_job(SPEC, target("v6e", "2x2")))
    with_account = pod_spec(render_job(SPEC, target("v6e", "2x2", service_account="falcon-runner")))
    assert with_account["serviceAccountName"] == "falcon-runner"


def test_the_container_runs_the_command_under_the_log_wrapper_with_its_args_and_env() -> None:
    (container,) = pod_spec(render_job(SPEC, target("v6e", "2x2")))["containers"]
    assert container["image"] == SPEC.image
    assert container["command"] == ["/bin/bash", "-c", LOG_WRAPPER, "falcon-run", "python", "train.py"]
    assert container["args"] == ["--steps", "10"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["FALCON_TASK_ID"]["value"] == "task-42"
    assert env["LR"]["value"] == "0.1"
    assert env["PYTHONUNBUFFERED"]["value"] == "1"
    # $(POD_NAME) expands only when POD_NAME is defined earlier in the list.
    assert env["FALCON_LOG_FILE"]["value"] == "/gcs/" + log_object("task-42", "$(POD_NAME)")
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_NAME") < names.index("FALCON_LOG_FILE")


def test_extra_resources_of_the_spec_join_the_tpu_request() -> None:
    spec = TaskSpec.model_validate(
        {
            **SPEC.model_dump(),
            "resources": {"requests": {"memory": "64Gi", "cpu": 8}, "limits": {"memory": "128Gi"}},
        }
    )
    (container,) = pod_spec(render_job(spec, target("v6e", "2x4")))["containers"]
    assert container["resources"]["requests"] == {"google.com/tpu": "4", "memory": "64Gi", "cpu": "8"}
    assert container["resources"]["limits"] == {"google.com/tpu": "4", "memory": "128Gi"}


def test_the_tpu_request_is_the_shapes_even_for_a_spec_built_without_validation() -> None:
    """Intake refuses google.com/tpu in a spec; the renderer does not rely on it."""
    own = Resources.model_construct(requests={"google.com/tpu": "8"}, limits={"google.com/tpu": "8"})
    spec = SPEC.model_copy(update={"resources": own, "env": {"POD_NAME": "mine"}})
    (container,) = pod_spec(render_job(spec, target("v6e", "2x4")))["containers"]
    assert container["resources"] == {"requests": {"google.com/tpu": "4"}, "limits": {"google.com/tpu": "4"}}
    pod_name = [e for e in container["env"] if e["name"] == "POD_NAME"]
    assert pod_name == [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]


def test_the_variables_falcon_sets_are_the_ones_a_spec_may_not_set() -> None:
    spec = SPEC.model_copy(update={"env": {}})
    (container,) = pod_spec(render_job(spec, target("v6e", "2x2")))["containers"]
    assert [e["name"] for e in container["env"]] == list(FALCON_ENV)


def test_a_dollar_in_the_task_id_reaches_the_pod_unexpanded() -> None:
    """Kubernetes expands $(VAR) in env values; $$ is its escape for a literal '$'."""
    job_target = JobTarget(**{**vars(target("v6e", "2x2")), "task_id": "t$(POD_NAMESPACE)"})
    (container,) = pod_spec(render_job(SPEC, job_target))["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FALCON_TASK_ID"] == "t$$(POD_NAMESPACE)"
    assert env["FALCON_LOG_FILE"] == "/gcs/logs/t$$(POD_NAMESPACE)/$(POD_NAME).log"


def test_the_headless_service_selects_exactly_the_pods_of_its_task() -> None:
    job_target = target("v6e", "4x4")
    service = render_service(job_target)
    pod_labels = render_job(SPEC, job_target)["spec"]["template"]["metadata"]["labels"]
    other_labels = render_job(SPEC, JobTarget(**{**vars(job_target), "job_name": "falcon-other-1234abcd"}))[
        "spec"
    ]["template"]["metadata"]["labels"]

    assert service["apiVersion"] == "v1" and service["kind"] == "Service"
    assert service["spec"]["clusterIP"] == "None"
    selector = service["spec"]["selector"].items()
    assert selector <= pod_labels.items()
    assert not selector <= other_labels.items()
    assert service["metadata"]["labels"] == {"managed-by": "falcon", "falcon.dev/task": job_target.job_name}
    assert service["metadata"]["annotations"] == {"falcon.dev/task-id": "task-42"}


def test_the_service_name_is_derived_from_the_job_name_alone() -> None:
    first, again = target("v6e", "4x4"), target("v5p", "2x2x2")
    assert render_service(first)["metadata"]["name"] == render_service(again)["metadata"]["name"]
    assert render_service(first)["metadata"]["name"] == first.job_name
