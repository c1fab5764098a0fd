"""List/watch semantics: NDJSON events, resume, 410 Expired, selectors, via kubernetes.watch.Watch."""

from __future__ import annotations

import threading
import time

import pytest
from emu_helpers import Kube, admin, container, job, job_finished, wait_for
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from falcon_emulator.server import EmulatorServer


def service(name: str, labels: dict[str, str]) -> k8s.V1Service:
    return k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name=name, labels=labels),
        spec=k8s.V1ServiceSpec(selector={"app": name}, ports=[k8s.V1ServicePort(port=80)]),
    )


def test_watch_replays_added_modified_deleted_for_a_jobs_pod_from_a_resource_version(
    work: Kube, namespace: str
) -> None:
    start = work.core.list_namespaced_pod(namespace).metadata.resource_version
    work.batch.create_namespaced_job(namespace, job("watched"))
    wait_for(lambda: job_finished(work, namespace, "watched"))
    work.batch.delete_namespaced_job("watched", namespace, propagation_policy="Background")
    wait_for(lambda: not work.core.list_namespaced_pod(namespace).items)
    stream = watch.Watch().stream(
        work.core.list_namespaced_pod, namespace, resource_version=start, timeout_seconds=1
    )
    events = [(e["type"], e["object"]) for e in stream]
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED" and "MODIFIED" in kinds
    assert isinstance(events[0][1], k8s.V1Pod)
    phases = [obj.status.phase for _, obj in events]
    assert "Running" in phases and "Succeeded" in phases
    versions = [int(obj.metadata.resource_version) for _, obj in events]
    assert versions == sorted(versions) and versions[0] > int(start)


def test_live_watch_streams_changes_as_they_happen_and_honours_timeout(work: Kube, namespace: str) -> None:
    seen: list[tuple[str, str]] = []

    def consume() -> None:
        for event in watch.Watch().stream(work.core.list_namespaced_service, namespace, timeout_seconds=2):
            seen.append((event["type"], event["object"].metadata.name))

    thread = threading.Thread(target=consume)
    began = time.monotonic()
    thread.start()
    time.sleep(0.3)
    work.core.create_namespaced_service(namespace, service("live", {"tier": "a"}))
    work.core.patch_namespaced_service("live", namespace, {"metadata": {"labels": {"tier": "b"}}})
    work.core.delete_namespaced_service("live", namespace)
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - began < 4
    assert seen == [("ADDED", "live"), ("MODIFIED", "live"), ("DELETED", "live")]


def test_watch_from_a_compacted_resource_version_raises_410_expired(
    work: Kube, namespace: str, emulator: EmulatorServer
) -> None:
    old = work.core.list_namespaced_service(namespace).metadata.resource_version
    work.core.create_namespaced_service(namespace, service("bump", {}))
    admin(emulator.url, f"/emulator/clusters{work.path.removeprefix('/k8s')}/compact", "POST")
    with pytest.raises(ApiException) as error:
        list(
            watch.Watch().stream(
                work.core.list_namespaced_service, namespace, resource_version=old, timeout_seconds=1
            )
        )
    assert error.value.status == 410
    fresh = work.core.list_namespaced_service(namespace).metadata.resource_version
    assert (
        list(
            watch.Watch().stream(
                work.core.list_namespaced_service, namespace, resource_version=fresh, timeout_seconds=1
            )
        )
        == []
    )


def test_label_selectors_support_equality_set_based_and_existence(work: Kube, namespace: str) -> None:
    for name, labels in (
        ("s1", {"env": "prod", "tier": "web"}),
        ("s2", {"env": "dev"}),
        ("s3", {"tier": "db"}),
    ):
        work.core.create_namespaced_service(namespace, service(name, labels))

    def names(selector: str) -> list[str]:
        items = work.core.list_namespaced_service(namespace, label_selector=selector).items
        return sorted(s.metadata.name for s in items)

    assert names("env=prod") == ["s1"]
    assert names("env==dev") == ["s2"]
    assert names("env!=prod") == ["s2", "s3"]
    assert names("env in (prod, dev)") == ["s1", "s2"]
    assert names("env notin (prod)") == ["s2", "s3"]
    assert names("tier") == ["s1", "s3"]
    assert names("!tier") == ["s2"]
    assert names("tier,env=prod") == ["s1"]
    with pytest.raises(ApiException) as error:
        names("env in prod")
    assert error.value.status == 400


def test_field_selectors_on_pods_by_phase_node_and_name(work: Kube, namespace: str) -> None:
    work.batch.create_namespaced_job(namespace, job("fields"))
    finished = wait_for(lambda: job_finished(work, namespace, "fields"))
    assert finished
    pods = work.core.list_namespaced_pod(namespace, field_selector="status.phase=Succeeded").items
    assert len(pods) == 1
    node = pods[0].spec.node_name
    name = pods[0].metadata.name
    assert len(work.core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items) == 1
    assert not work.core.list_namespaced_pod(namespace, field_selector="status.phase=Running").items
    by_name = work.core.list_pod_for_all_namespaces(field_selector=f"metadata.name={name}").items
    assert [p.metadata.namespace for p in by_name] == [namespace]
    events = work.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=Pod"
    ).items
    assert events and all(e.involved_object.uid == pods[0].metadata.uid for e in events)


def test_watch_with_label_selector_only_sees_matching_jobs_and_all_namespaces_list_works(
    work: Kube, namespace: str
) -> None:
    start = work.batch.list_namespaced_job(namespace).metadata.resource_version
    work.batch.create_namespaced_job(namespace, job("picked", [container()]))
    other = job("ignored")
    other.metadata.labels = {"app": "other"}
    work.batch.create_namespaced_job(namespace, other)
    stream = watch.Watch().stream(
        work.batch.list_namespaced_job,
        namespace,
        label_selector="app=falcon-test",
        resource_version=start,
        timeout_seconds=1,
    )
    assert {e["object"].metadata.name for e in stream} == {"picked"}
    everywhere = work.batch.list_job_for_all_namespaces(label_selector="app in (falcon-test, other)").items
    assert {j.metadata.name for j in everywhere if j.metadata.namespace == namespace} == {"picked", "ignored"}


def test_node_watch_lists_current_nodes_as_added_events(work: Kube) -> None:
    nodes = work.core.list_node()
    assert nodes.items and nodes.metadata.resource_version
    events = list(watch.Watch().stream(work.core.list_node, timeout_seconds=1))
    assert {e["type"] for e in events} == {"ADDED"}
    assert len(events) == len(nodes.items)
