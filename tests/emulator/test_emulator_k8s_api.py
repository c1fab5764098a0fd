"""Kubernetes API object semantics: namespaces, services, service accounts, errors as Status, patch, logs."""

from __future__ import annotations

import json

import pytest
from emu_helpers import Kube, admin, container, job, job_finished, pods_of, wait_for
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from falcon_emulator.server import EmulatorServer


def test_namespaces_create_get_list_delete(work: Kube) -> None:
    work.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="ns-crud")))
    assert work.core.read_namespace("ns-crud").status.phase == "Active"
    assert "ns-crud" in {n.metadata.name for n in work.core.list_namespace().items}
    work.core.delete_namespace("ns-crud")
    with pytest.raises(ApiException) as error:
        work.core.read_namespace("ns-crud")
    assert error.value.status == 404


def test_errors_are_status_objects_404_409_and_422(work: Kube, namespace: str) -> None:
    with pytest.raises(ApiException) as missing:
        work.batch.read_namespaced_job("missing", namespace)
    body = json.loads(missing.value.body)
    assert (missing.value.status, body["kind"], body["reason"]) == (404, "Status", "NotFound")
    assert body["message"] == 'jobs.batch "missing" not found'
    work.batch.create_namespaced_job(namespace, job("twice"))
    with pytest.raises(ApiException) as duplicate:
        work.batch.create_namespaced_job(namespace, job("twice"))
    assert (duplicate.value.status, json.loads(duplicate.value.body)["reason"]) == (409, "AlreadyExists")
    bad = job("always")
    bad.spec.template.spec.restart_policy = "Always"
    with pytest.raises(ApiException) as invalid:
        work.batch.create_namespaced_job(namespace, bad)
    assert (invalid.value.status, json.loads(invalid.value.body)["reason"]) == (422, "Invalid")
    with pytest.raises(ApiException) as no_namespace:
        work.batch.create_namespaced_job("does-not-exist", job("x"))
    assert no_namespace.value.status == 404


def test_patch_job_merges_labels_and_keeps_spec(work: Kube, namespace: str) -> None:
    created = work.batch.create_namespaced_job(
        namespace, job("patched", [container(env={"EMULATOR_RUN_SECONDS": "30"})])
    )
    patched = work.batch.patch_namespaced_job(
        "patched", namespace, {"metadata": {"labels": {"extra": "yes"}}}
    )
    assert patched.metadata.labels == {"app": "falcon-test", "extra": "yes"}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    assert patched.spec.template.spec.containers[0].image == "busybox:1.36"
    assert (
        work.batch.list_namespaced_job(namespace, label_selector="extra=yes").items[0].metadata.name
        == "patched"
    )
    suspended = work.batch.patch_namespaced_job("patched", namespace, {"spec": {"suspend": True}})
    assert suspended.spec.suspend and suspended.metadata.name == "patched"
    assert suspended.metadata.uid == created.metadata.uid
    template_change = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "other"}]}}}}
    with pytest.raises(ApiException) as immutable:
        work.batch.patch_namespaced_job("patched", namespace, template_change)
    assert immutable.value.status == 422
    wait_for(lambda: not pods_of(work, namespace, "patched"))  # suspending deletes the active pod
    work.batch.delete_namespaced_job("patched", namespace, propagation_policy="Background")


def test_services_create_get_list_delete(work: Kube, namespace: str) -> None:
    body = k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name="coord"),
        spec=k8s.V1ServiceSpec(
            cluster_ip="None", selector={"job-name": "x"}, ports=[k8s.V1ServicePort(port=8471)]
        ),
    )
    created = work.core.create_namespaced_service(namespace, body)
    assert created.spec.cluster_ip == "None" and created.metadata.uid
    assert work.core.read_namespaced_service("coord", namespace).spec.ports[0].port == 8471
    assert [s.metadata.name for s in work.core.list_namespaced_service(namespace).items] == ["coord"]
    work.core.delete_namespaced_service("coord", namespace)
    assert work.core.list_namespaced_service(namespace).items == []


def test_pod_log_returns_the_synthetic_stdout_with_expanded_command(work: Kube, namespace: str) -> None:
    env = [
        k8s.V1EnvVar(
            name="POD_NAME",
            value_from=k8s.V1EnvVarSource(field_ref=k8s.V1ObjectFieldSelector(field_path="metadata.name")),
        ),
        k8s.V1EnvVar(name="EMULATOR_STDOUT", value="step 1 loss 0.5"),
    ]
    main = container(extra_env=env, command=["python"], args=["train.py", "--name=$(POD_NAME)"])
    work.batch.create_namespaced_job(namespace, job("logged", [main]))
    wait_for(lambda: job_finished(work, namespace, "logged"))
    pod = pods_of(work, namespace, "logged")[0].metadata.name
    lines = work.core.read_namespaced_pod_log(pod, namespace).splitlines()
    assert "image=busybox:1.36" in lines[0] and "['python']" in lines[0]
    assert f"['train.py', '--name={pod}']" in lines[0]
    assert lines[1] == "step 1 loss 0.5"
    assert "exited with code 0" in lines[-1]
    assert work.core.read_namespaced_pod_log(pod, namespace, tail_lines=1) == lines[-1] + "\n"


def test_service_accounts_create_get_list_delete_and_default_comes_with_the_namespace(
    work: Kube, namespace: str
) -> None:
    assert [a.metadata.name for a in work.core.list_namespaced_service_account(namespace).items] == [
        "default"
    ]
    body = k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="runner", labels={"team": "ml"}))
    created = work.core.create_namespaced_service_account(namespace, body)
    assert created.metadata.uid and created.metadata.namespace == namespace
    assert work.core.read_namespaced_service_account("runner", namespace).metadata.labels == {"team": "ml"}
    with pytest.raises(ApiException) as duplicate:
        work.core.create_namespaced_service_account(namespace, body)
    assert duplicate.value.status == 409
    deleted = work.core.delete_namespaced_service_account("runner", namespace)
    assert deleted.metadata.name == "runner"  # the apiserver answers with the deleted object
    work.core.delete_namespaced_service_account("default", namespace)
    names = wait_for(lambda: work.core.list_namespaced_service_account(namespace).items)
    assert [a.metadata.name for a in names] == ["default"]  # the ServiceAccount controller recreates it


def test_pod_naming_a_missing_service_account_is_refused_with_403(work: Kube, namespace: str) -> None:
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="lonely"),
        spec=k8s.V1PodSpec(containers=[container()], service_account_name="ghost"),
    )
    with pytest.raises(ApiException) as error:
        work.core.create_namespaced_pod(namespace, pod)
    body = json.loads(error.value.body)
    assert (error.value.status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        f'pods "lonely" is forbidden: error looking up service account {namespace}/ghost: '
        'serviceaccount "ghost" not found'
    )
    assert work.core.list_namespaced_pod(namespace).items == []


def test_pod_log_of_a_pod_not_started_yet_is_400(work: Kube, namespace: str) -> None:
    work.batch.create_namespaced_job(namespace, job("waiting", [container(image="x:missing")]))
    pod = wait_for(lambda: pods_of(work, namespace, "waiting"))[0]
    with pytest.raises(ApiException) as error:
        work.core.read_namespaced_pod_log(pod.metadata.name, namespace)
    assert error.value.status == 400


def test_injected_fault_on_a_kubernetes_path_is_a_status_error(
    work: Kube, namespace: str, emulator: EmulatorServer
) -> None:
    rule = {
        "method": "GET",
        "pathRegex": f"/namespaces/{namespace}/jobs$",
        "status": 500,
        "message": "etcd timeout",
    }
    admin(emulator.url, "/emulator/faults", "POST", [rule])
    with pytest.raises(ApiException) as error:
        work.batch.list_namespaced_job(namespace)
    body = json.loads(error.value.body)
    assert (error.value.status, body["kind"], body["reason"], body["message"]) == (
        500,
        "Status",
        "InternalError",
        "etcd timeout",
    )
    assert work.batch.list_namespaced_job(namespace).items == []
