"""apps/v1 Deployments and StatefulSets through the official AppsV1Api: validation, defaults, status following
spec.replicas, generation, the /scale subresource, watch, and removal with their namespace."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator

import pytest
from emu_helpers import Kube
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException


@pytest.fixture(scope="module")
def kube(kube_for: Callable[[str], Kube]) -> Kube:
    return kube_for("raw")


@pytest.fixture(scope="module")
def apps(kube: Kube) -> k8s.AppsV1Api:
    return k8s.AppsV1Api(kube.api)


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = f"a-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    kube.core.delete_namespace(name)


def template(labels: dict[str, str], restart_policy: str | None = None) -> k8s.V1PodTemplateSpec:
    containers = [k8s.V1Container(name="web", image="nginx:1.27")]
    return k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(labels=labels),
        spec=k8s.V1PodSpec(containers=containers, restart_policy=restart_policy),
    )


def deployment(name: str, replicas: int | None = 2, labels: dict[str, str] | None = None) -> k8s.V1Deployment:
    selector = k8s.V1LabelSelector(match_labels={"app": name})
    spec = k8s.V1DeploymentSpec(
        replicas=replicas, selector=selector, template=template(labels or {"app": name})
    )
    return k8s.V1Deployment(metadata=k8s.V1ObjectMeta(name=name), spec=spec)


def statefulset(name: str, replicas: int) -> k8s.V1StatefulSet:
    selector = k8s.V1LabelSelector(match_labels={"app": name})
    spec = k8s.V1StatefulSetSpec(
        replicas=replicas, selector=selector, service_name=name, template=template({"app": name})
    )
    return k8s.V1StatefulSet(metadata=k8s.V1ObjectMeta(name=name), spec=spec)


def test_deployment_defaults_status_and_scale_subresource(apps: k8s.AppsV1Api, ns: str) -> None:
    created = apps.create_namespaced_deployment(ns, deployment("web", replicas=None))
    assert created.spec.replicas == 1 and created.spec.strategy.type == "RollingUpdate"
    assert (created.metadata.generation, created.status.replicas, created.status.ready_replicas) == (1, 1, 1)
    scale = apps.read_namespaced_deployment_scale("web", ns)
    assert (scale.kind, scale.api_version, scale.spec.replicas) == ("Scale", "autoscaling/v1", 1)
    assert (scale.status.replicas, scale.status.selector) == (1, "app=web")
    scaled = apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 5}})
    assert scaled.spec.replicas == 5 and scaled.status.replicas == 5
    current = apps.read_namespaced_deployment("web", ns)
    assert (current.spec.replicas, current.status.available_replicas) == (5, 5)
    assert (current.metadata.generation, current.status.observed_generation) == (2, 2)
    to_zero = apps.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 0}})
    assert to_zero.metadata.generation == 3 and to_zero.status.replicas is None  # Go omits zero counts


def test_statefulset_scale_read_patch_and_replace(apps: k8s.AppsV1Api, ns: str) -> None:
    created = apps.create_namespaced_stateful_set(ns, statefulset("db", 3))
    assert created.spec.pod_management_policy == "OrderedReady" and created.status.current_replicas == 3
    scale = apps.read_namespaced_stateful_set_scale("db", ns)
    assert scale.spec.replicas == 3
    apps.patch_namespaced_stateful_set_scale("db", ns, {"spec": {"replicas": 1}})
    assert apps.read_namespaced_stateful_set("db", ns).status.replicas == 1
    with pytest.raises(ApiException) as stale:
        apps.replace_namespaced_stateful_set_scale("db", ns, scale)  # resourceVersion of before the patch
    assert stale.value.status == 409
    fresh = apps.read_namespaced_stateful_set_scale("db", ns)
    fresh.spec.replicas = 4
    assert apps.replace_namespaced_stateful_set_scale("db", ns, fresh).spec.replicas == 4
    with pytest.raises(ApiException) as negative:
        apps.patch_namespaced_stateful_set_scale("db", ns, {"spec": {"replicas": -1}})
    assert negative.value.status == 422
    assert "spec.replicas: Invalid value: -1" in json.loads(negative.value.body)["message"]


def test_invalid_workloads_are_refused(apps: k8s.AppsV1Api, ns: str) -> None:
    for body, words in (
        (deployment("mismatch", labels={"app": "other"}), "`selector` does not match template `labels`"),
        (deployment("negative", replicas=-2), "spec.replicas: Invalid value: -2"),
    ):
        with pytest.raises(ApiException) as refused:
            apps.create_namespaced_deployment(ns, body)
        assert refused.value.status == 422 and words in json.loads(refused.value.body)["message"]
    never = statefulset("never", 1)
    never.spec.template.spec.restart_policy = "Never"
    with pytest.raises(ApiException) as refused:
        apps.create_namespaced_stateful_set(ns, never)
    assert 'restartPolicy: Unsupported value: "Never"' in json.loads(refused.value.body)["message"]
    apps.create_namespaced_deployment(ns, deployment("fixed"))
    with pytest.raises(ApiException) as immutable:
        apps.patch_namespaced_deployment("fixed", ns, {"spec": {"selector": {"matchLabels": {"app": "x"}}}})
    assert immutable.value.status == 422


def test_watch_all_namespaces_and_namespace_deletion(kube: Kube, apps: k8s.AppsV1Api, ns: str) -> None:
    start = apps.list_deployment_for_all_namespaces().metadata.resource_version
    apps.create_namespaced_deployment(ns, deployment("watched"))
    apps.patch_namespaced_deployment_scale("watched", ns, {"spec": {"replicas": 4}})
    apps.delete_namespaced_deployment("watched", ns)
    stream = watch.Watch().stream(
        apps.list_deployment_for_all_namespaces, resource_version=start, timeout_seconds=5
    )
    ours = (e for e in stream if e["object"].metadata.namespace == ns)
    events = [(e["type"], e["object"].spec.replicas) for e in itertools.islice(ours, 3)]
    assert events == [("ADDED", 2), ("MODIFIED", 4), ("DELETED", 4)]  # DELETED is the last there can be
    apps.create_namespaced_stateful_set(ns, statefulset("db", 1))
    kube.core.delete_namespace(ns)
    assert (
        apps.list_namespaced_deployment(ns).items == [] and apps.list_namespaced_stateful_set(ns).items == []
    )
    kube.core.create_namespace(
        k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns))
    )  # for the fixture's delete
