"""TidalSchedulers and their targets on one cluster, through the official Kubernetes client.

Custom objects stay plain dicts (the client does not model them); the watch is the client's
``Watch`` with a server-side timeout, so the follower regains control at least that often, and a
410 Gone (a resourceVersion too old to watch from) becomes ``ResourceVersionGone``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from falcon.adapters.errors import kubernetes_errors
from falcon.domain.errors import ConflictError, NotFoundError
from falcon.domain.tidal import GROUP, PLURAL, VERSION, ResourceVersionGone, TargetRef, WatchEvent


class TidalKubernetes:
    def __init__(self, api_client: k8s.ApiClient, timeout: float, watch_seconds: int) -> None:
        self._objects = k8s.CustomObjectsApi(api_client)
        self._apps = k8s.AppsV1Api(api_client)
        self._extensions = k8s.ApiextensionsV1Api(api_client)
        self._timeout = timeout
        self._watch_seconds = watch_seconds

    # -- the controller's port (TidalObjects)

    def list(self) -> tuple[list[Mapping[str, Any]], str]:
        with kubernetes_errors("list TidalSchedulers"):
            found: dict[str, Any] = self._objects.list_cluster_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, PLURAL, _request_timeout=self._timeout
            )
        return list(found.get("items") or []), str(found.get("metadata", {}).get("resourceVersion") or "")

    def watch(self, resource_version: str, stop: threading.Event) -> Iterator[WatchEvent]:
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        events = stream.stream(  # type: ignore[no-untyped-call]
            self._objects.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            resource_version=resource_version,
            timeout_seconds=self._watch_seconds,
            allow_watch_bookmarks=True,
            # the read may wait the whole watch, never forever on a dead connection
            _request_timeout=(self._timeout, self._watch_seconds + self._timeout),
        )
        try:
            with kubernetes_errors("watch TidalSchedulers"):
                for event in _gone_is_relist(events, resource_version):
                    yield str(event["type"]), event["raw_object"]
                    if stop.is_set():
                        return
        finally:
            stream.stop()  # type: ignore[no-untyped-call]

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        with kubernetes_errors(f"patch status of TidalScheduler {namespace}/{name}"):
            self._objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": dict(status)},
                _request_timeout=self._timeout,
            )

    def target_exists(self, target: TargetRef) -> bool:
        read = (
            self._apps.read_namespaced_deployment
            if target.kind == "Deployment"
            else self._apps.read_namespaced_stateful_set
        )
        try:
            with kubernetes_errors(f"get {target}"):
                read(target.name, target.namespace, _request_timeout=self._timeout)
        except NotFoundError:
            return False
        return True

    def replicas(self, target: TargetRef) -> int:
        read = (
            self._apps.read_namespaced_deployment_scale
            if target.kind == "Deployment"
            else self._apps.read_namespaced_stateful_set_scale
        )
        with kubernetes_errors(f"get /scale of {target}"):
            scale = read(target.name, target.namespace, _request_timeout=self._timeout)
        return int(scale.spec.replicas or 0) if scale.spec else 0

    def scale(self, target: TargetRef, replicas: int) -> None:
        patch = (
            self._apps.patch_namespaced_deployment_scale
            if target.kind == "Deployment"
            else self._apps.patch_namespaced_stateful_set_scale
        )
        with kubernetes_errors(f"patch /scale of {target}"):
            patch(
                target.name,
                target.namespace,
                {"spec": {"replicas": replicas}},
                _request_timeout=self._timeout,
            )

    # -- the CLI's

    def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        with kubernetes_errors(f"get TidalScheduler {namespace}/{name}"):
            found: dict[str, Any] = self._objects.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=self._timeout
            )
        return found

    def apply(self, manifest: Mapping[str, Any]) -> str:
        """Create the object, or replace the spec, labels and annotations of the one there;
        returns "created" or "configured". The API server's refusals raise with its message."""
        metadata = manifest["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        try:
            with kubernetes_errors(f"create TidalScheduler {namespace}/{name}"):
                self._objects.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, dict(manifest), _request_timeout=self._timeout
                )
            return "created"
        except ConflictError:
            pass
        current = self.get(namespace, name)
        body = {
            **manifest,
            "metadata": {**metadata, "resourceVersion": current["metadata"]["resourceVersion"]},
        }
        with kubernetes_errors(f"update TidalScheduler {namespace}/{name}"):
            self._objects.replace_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, body, _request_timeout=self._timeout
            )
        return "configured"

    def install_definition(self, manifest: Mapping[str, Any]) -> str:
        """Create the TidalScheduler CRD, or replace the one there (kubectl apply's job; here for
        clusters without kubectl at hand, such as the emulator's); "created" or "configured"."""
        name = manifest["metadata"]["name"]
        try:
            with kubernetes_errors(f"create CustomResourceDefinition {name}"):
                self._extensions.create_custom_resource_definition(
                    dict(manifest),  # type: ignore[arg-type]
                    _request_timeout=self._timeout,
                )
            return "created"
        except ConflictError:
            pass
        with kubernetes_errors(f"get CustomResourceDefinition {name}"):
            current = self._extensions.read_custom_resource_definition(name, _request_timeout=self._timeout)
        version = current.metadata.resource_version if current.metadata else None
        body = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": version}}
        with kubernetes_errors(f"update CustomResourceDefinition {name}"):
            self._extensions.replace_custom_resource_definition(
                name,
                body,  # type: ignore[arg-type]
                _request_timeout=self._timeout,
            )
        return "configured"


def _gone_is_relist(events: Iterator[dict[str, Any]], resource_version: str) -> Iterator[dict[str, Any]]:
    try:
        yield from events
    except ApiException as exc:
        if exc.status == 410:
            raise ResourceVersionGone(f"resourceVersion {resource_version} is too old to watch from") from exc
        raise
