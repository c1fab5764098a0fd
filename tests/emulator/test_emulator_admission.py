"""What GKE's admission and kubelet judge in a pod: TPU worker environment and slice rendezvous,
ServiceAccounts, GCS FUSE sidecar and bucket access. Driven through the official kubernetes client against an
emulator of this module's own, whose project grants one namespace's accounts write access to one bucket."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from emu_helpers import (
    LOCATION,
    PROJECT,
    ZONE,
    Kube,
    condition_types,
    container,
    create_pool,
    events_for,
    job,
    job_finished,
    pods_of,
    tpu_pool,
    wait_for,
)
from google.auth.credentials import AnonymousCredentials
from google.cloud import container_v1
from kubernetes import client as k8s

from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer

CLUSTER = "admission"
BUCKET = "logs-bucket"
WRITER_NS = "writers"  # its "default" and "runner" accounts may write to BUCKET
V6E_2X4 = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "2x4",
}
GCSFUSE = "gcsfuse.csi.storage.gke.io"
CONFIG = {
    "nodePoolProvisionSeconds": 0.3,
    "podStartSeconds": 0.1,
    "defaultRunSeconds": 0.3,
    "imagePullBackoffSeconds": 0.2,
    "tickSeconds": 0.05,
    "projects": {
        PROJECT: {
            "buckets": {
                BUCKET: {
                    "writers": [
                        f"serviceAccount:{PROJECT}.svc.id.goog[{WRITER_NS}/default]",
                        f"serviceAccount:{PROJECT}.svc.id.goog[{WRITER_NS}/runner]",
                    ]
                }
            },
            "clusters": {
                CLUSTER: {
                    "location": LOCATION,
                    "zones": [ZONE],
                    "serviceAccounts": [f"{WRITER_NS}/runner", "default/robot"],
                }
            },
        }
    },
}


@pytest.fixture(scope="module")
def emulator_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("admission-data")


@pytest.fixture(scope="module")
def kube(emulator_dir: Path) -> Iterator[Kube]:
    """A 2-host v6e 2x4 slice, one single-host v6e node and one CPU node."""
    with EmulatorServer(EmulatorConfig.from_dict(CONFIG), emulator_dir) as server:
        gke = container_v1.ClusterManagerClient(
            transport="rest",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": server.url},
        )
        create_pool(gke, CLUSTER, tpu_pool("v6e-2x4", nodes=2, topology="2x4"))
        create_pool(gke, CLUSTER, tpu_pool("v6e-1t", machine_type="ct6e-standard-1t", nodes=1))
        create_pool(gke, CLUSTER, tpu_pool("cpu", machine_type="e2-standard-4", nodes=1))
        path = f"/k8s/{PROJECT}/{LOCATION}/{CLUSTER}"
        api = k8s.ApiClient(k8s.Configuration(host=server.url + path))
        yield Kube(api, k8s.CoreV1Api(api), k8s.BatchV1Api(api), path)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"a-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    kube.core.delete_namespace(name)


def slice_job(name: str, subdomain: str | None) -> k8s.V1Job:
    """An Indexed Job with one pod per host of the 2x4 slice."""
    spec = job(
        name,
        [container(tpus=4, env={"EMULATOR_RUN_SECONDS": "0.2"})],
        node_selector=V6E_2X4,
        tpu=True,
        completion_mode="Indexed",
        completions=2,
        parallelism=2,
        backoff_limit=0,
    )
    spec.spec.template.spec.subdomain = subdomain
    return spec


def headless_service(name: str, job_name: str) -> k8s.V1Service:
    return k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1ServiceSpec(cluster_ip="None", selector={"batch.kubernetes.io/job-name": job_name}),
    )


def env_of(pod: k8s.V1Pod) -> dict[str, str | None]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def running_pods(kube: Kube, namespace: str, name: str, count: int) -> list[k8s.V1Pod]:
    def running() -> list[k8s.V1Pod] | None:
        pods = [p for p in pods_of(kube, namespace, name) if p.status.phase == "Running"]
        return pods if len(pods) == count else None

    return wait_for(running)


def assert_hangs(kube: Kube, namespace: str, name: str) -> list[k8s.V1Pod]:
    """Both workers run, none is Ready, and the Job stays active well past the 0.2 s run time."""
    running_pods(kube, namespace, name, 2)
    wait_for(
        lambda: kube.core.read_namespaced_pod_log(pods_of(kube, namespace, name)[0].metadata.name, namespace)
    )
    with pytest.raises(AssertionError):
        wait_for(lambda: job_finished(kube, namespace, name), timeout=1.5)
    pods = pods_of(kube, namespace, name)
    assert all(p.status.phase == "Running" for p in pods)
    assert all(not p.status.container_statuses[0].ready for p in pods)
    ready = {c.type: (c.status, c.reason) for c in pods[0].status.conditions}
    assert ready["Ready"] == ("False", "ContainersNotReady")
    current = kube.batch.read_namespaced_job(name, namespace).status
    assert current.active == 2 and current.ready == 0
    return pods


def test_multi_host_job_without_its_headless_service_hangs_until_the_service_exists(
    kube: Kube, namespace: str
) -> None:
    kube.batch.create_namespaced_job(namespace, slice_job("nosvc", subdomain="workers"))
    pods = assert_hangs(kube, namespace, "nosvc")
    env = env_of(pods[0])
    assert (
        env["TPU_WORKER_HOSTNAMES"] == "nosvc-0.workers,nosvc-1.workers"
    )  # injected: the webhook saw subdomain
    log = kube.core.read_namespaced_pod_log(pods[0].metadata.name, namespace)
    assert "TPU runtime waiting: cannot resolve worker nosvc-" in log

    kube.core.create_namespaced_service(namespace, headless_service("workers", "nosvc"))
    finished = wait_for(lambda: job_finished(kube, namespace, "nosvc"))
    assert "Complete" in condition_types(finished) and finished.status.succeeded == 2


def test_multi_host_job_without_subdomain_gets_no_worker_env_and_never_becomes_ready(
    kube: Kube, namespace: str
) -> None:
    kube.core.create_namespaced_service(namespace, headless_service("workers", "nosub"))
    kube.batch.create_namespaced_job(namespace, slice_job("nosub", subdomain=None))
    pods = assert_hangs(kube, namespace, "nosub")
    assert not {"TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"} & set(env_of(pods[0]))
    log = kube.core.read_namespaced_pod_log(pods[0].metadata.name, namespace)
    assert "TPU_WORKER_HOSTNAMES is not set; the slice has 2 hosts" in log
    kube.batch.delete_namespaced_job("nosub", namespace, propagation_policy="Background")
    wait_for(lambda: not pods_of(kube, namespace, "nosub"))


def test_single_host_tpu_job_completes_without_service_or_worker_env(kube: Kube, namespace: str) -> None:
    spec = job(
        "single",
        [container(tpus=1, env={"EMULATOR_RUN_SECONDS": "0.2"})],
        node_selector={"cloud.google.com/gke-nodepool": "v6e-1t"},
        tpu=True,
    )
    kube.batch.create_namespaced_job(namespace, spec)
    finished = wait_for(lambda: job_finished(kube, namespace, "single"))
    assert "Complete" in condition_types(finished)
    assert "TPU_WORKER_ID" not in env_of(pods_of(kube, namespace, "single")[0])


def test_every_namespace_gets_default_and_its_configured_service_accounts(kube: Kube) -> None:
    kube.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=WRITER_NS)))
    names = {a.metadata.name for a in kube.core.list_namespaced_service_account(WRITER_NS).items}
    assert names == {"default", "runner"}
    names = {a.metadata.name for a in kube.core.list_namespaced_service_account("default").items}
    assert names == {"default", "robot"}


def test_job_with_a_missing_service_account_records_failed_create_until_the_account_exists(
    kube: Kube, namespace: str
) -> None:
    spec = job("needs-sa", [container(env={"EMULATOR_RUN_SECONDS": "0.2"})])
    spec.spec.template.spec.service_account_name = "trainer"
    kube.batch.create_namespaced_job(namespace, spec)
    failed = wait_for(
        lambda: [e for e in events_for(kube, namespace, "needs-sa") if e.reason == "FailedCreate"]
    )
    assert failed[0].type == "Warning" and failed[0].involved_object.kind == "Job"
    assert failed[0].message == (
        f'Error creating: pods "needs-sa-" is forbidden: error looking up service account '
        f'{namespace}/trainer: serviceaccount "trainer" not found'
    )
    wait_for(lambda: [e for e in events_for(kube, namespace, "needs-sa") if (e.count or 0) >= 2])
    assert pods_of(kube, namespace, "needs-sa") == []

    account = k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="trainer"))
    kube.core.create_namespaced_service_account(namespace, account)
    finished = wait_for(lambda: job_finished(kube, namespace, "needs-sa"))
    assert "Complete" in condition_types(finished)


def logs_job(name: str, annotated: bool, bucket: str = BUCKET) -> k8s.V1Job:
    """A CPU Job that writes its log under a gcsfuse CSI mount, as Falcon's pods do."""
    main = container(
        env={"FALCON_LOG_FILE": "/gcs/logs/run.log", "EMULATOR_STDOUT": "step 1 loss 0.5"},
        volume_mounts=[k8s.V1VolumeMount(name="gcs-logs", mount_path="/gcs")],
    )
    volume = k8s.V1Volume(
        name="gcs-logs", csi=k8s.V1CSIVolumeSource(driver=GCSFUSE, volume_attributes={"bucketName": bucket})
    )
    spec = job(name, [main], volumes=[volume], backoff_limit=0)
    if annotated:
        spec.spec.template.metadata = k8s.V1ObjectMeta(annotations={"gke-gcsfuse/volumes": "true"})
    return spec


def failed_mount(kube: Kube, namespace: str, name: str) -> tuple[k8s.V1Pod, k8s.CoreV1Event]:
    pod = wait_for(lambda: pods_of(kube, namespace, name))[0]
    events = wait_for(
        lambda: [e for e in events_for(kube, namespace, pod.metadata.name) if e.reason == "FailedMount"]
    )
    wait_for(lambda: [e for e in events_for(kube, namespace, pod.metadata.name) if (e.count or 0) >= 2])
    current = kube.core.read_namespaced_pod(pod.metadata.name, namespace)
    assert current.status.phase == "Pending"
    assert current.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert events[0].type == "Warning"
    return current, events[0]


def test_gcsfuse_volume_without_the_annotation_gets_no_sidecar_and_fails_to_mount(
    kube: Kube, namespace: str
) -> None:
    kube.batch.create_namespaced_job(namespace, logs_job("plain", annotated=False))
    pod, event = failed_mount(kube, namespace, "plain")
    assert not pod.spec.init_containers
    assert event.message == (
        'MountVolume.SetUp failed for volume "gcs-logs" : rpc error: code = FailedPrecondition '
        "desc = failed to find the sidecar container in Pod spec"
    )


def test_gcsfuse_mount_of_a_bucket_the_account_may_not_write_fails_with_403(
    kube: Kube, namespace: str
) -> None:
    kube.batch.create_namespaced_job(namespace, logs_job("denied", annotated=True))
    pod, event = failed_mount(kube, namespace, "denied")
    assert [c.name for c in pod.spec.init_containers] == ["gke-gcsfuse-sidecar"]
    assert event.message.startswith(
        'MountVolume.SetUp failed for volume "gcs-logs" : rpc error: code = PermissionDenied desc = '
        f'failed to get GCS bucket "{BUCKET}": googleapi: Error 403: '
    )
    assert "storage.objects.list" in event.message
    kube.batch.create_namespaced_job(namespace, logs_job("nobucket", annotated=True, bucket="unknown-bucket"))
    _, event = failed_mount(kube, namespace, "nobucket")
    assert 'failed to get GCS bucket "unknown-bucket": googleapi: Error 403' in event.message


def test_gcsfuse_with_annotation_and_a_writer_account_runs_and_the_emulator_writes_no_file(
    kube: Kube, emulator_dir: Path
) -> None:
    if kube.core.list_namespace(field_selector=f"metadata.name={WRITER_NS}").items == []:
        kube.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=WRITER_NS)))
    spec = logs_job("written", annotated=True)
    spec.spec.template.spec.service_account_name = "runner"
    kube.batch.create_namespaced_job(WRITER_NS, spec)
    finished = wait_for(lambda: job_finished(kube, WRITER_NS, "written"))
    assert "Complete" in condition_types(finished)
    pod = pods_of(kube, WRITER_NS, "written")[0]
    sidecar = pod.spec.init_containers[0]
    assert (sidecar.name, sidecar.restart_policy) == ("gke-gcsfuse-sidecar", "Always")
    assert pod.status.init_container_statuses[0].state.terminated.reason == "Completed"
    reasons = {e.reason for e in events_for(kube, WRITER_NS, pod.metadata.name)}
    assert "FailedMount" not in reasons and "Started" in reasons
    log = kube.core.read_namespaced_pod_log(pod.metadata.name, WRITER_NS)
    assert "step 1 loss 0.5" in log and "exited with code 0" in log
    assert [p for p in emulator_dir.rglob("*") if p.is_file()] == []
