"""In-memory Kubernetes object store for one emulated cluster: objects, resourceVersions, watch fan-out."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from falcon_emulator.selectors import Requirement, labels_match
from falcon_emulator.util import JSON, clone, rfc3339


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    definition: JSON | None = field(default=None, compare=False)  # the CRD version, for custom resources

    @property
    def key(self) -> str:
        """Its bucket in the store: the plural of a built-in, plural.group of a custom resource (whose group
        has a dot, so it never takes a built-in's place)."""
        return self.plural if self.definition is None else self.qualified

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How the apiserver names the resource in messages, e.g. jobs.batch."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: dict[tuple[str, str], ResourceType] = {
    (rt.group, rt.plural): rt
    for rt in (
        ResourceType("", "v1", "namespaces", "Namespace", False),
        ResourceType("", "v1", "nodes", "Node", False),
        ResourceType("", "v1", "pods", "Pod", True),
        ResourceType("", "v1", "events", "Event", True),
        ResourceType("", "v1", "services", "Service", True),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True),
        ResourceType("", "v1", "secrets", "Secret", True),
        ResourceType("batch", "v1", "jobs", "Job", True),
        ResourceType("apps", "v1", "deployments", "Deployment", True),
        ResourceType("apps", "v1", "statefulsets", "StatefulSet", True),
        ResourceType(
            "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
        ),
    )
}
BY_PLURAL: dict[str, ResourceType] = {rt.plural: rt for rt in RESOURCES.values()}


class KubeError(Exception):
    """An API error rendered as a Kubernetes Status object."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> JSON:
        body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        body.update(message=self.message, reason=self.reason, code=self.code)
        if self.details:
            body["details"] = self.details
        return body


def not_found(rt: ResourceType, name: str) -> KubeError:
    details = {"name": name, "group": rt.group, "kind": rt.plural}
    return KubeError(404, "NotFound", f'{rt.qualified} "{name}" not found', details)


class ResourceVersions:
    """The global resourceVersion counter shared by every emulated cluster."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self.current = 0

    def next(self) -> int:
        self.current = next(self._counter)
        return self.current


@dataclass
class WatchEvent:
    rv: int
    plural: str
    type: str
    obj: JSON


Key = tuple[str, str]


@dataclass(eq=False)
class Watcher:
    """One open watch: filters store events through its selectors into an asyncio queue."""

    plural: str
    namespace: str | None
    labels: list[Requirement]
    fields: Callable[[JSON], bool]
    queue: asyncio.Queue[tuple[str, JSON] | None] = field(default_factory=asyncio.Queue)
    visible: set[Key] = field(default_factory=set)

    def _matches(self, obj: JSON) -> bool:
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, meta.get("labels")) and self.fields(obj)

    def offer(self, event: WatchEvent) -> None:
        if event.plural != self.plural:
            return
        meta = event.obj.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if self.namespace is not None and key[0] != self.namespace:
            return
        was, now = key in self.visible, event.type != "DELETED" and self._matches(event.obj)
        if now:
            self.visible.add(key)
            self.queue.put_nowait(("MODIFIED" if was and event.type != "ADDED" else "ADDED", event.obj))
        elif was:
            self.visible.discard(key)
            self.queue.put_nowait(("DELETED", event.obj))
        elif event.type == "DELETED" and self._matches(event.obj):
            self.queue.put_nowait(("DELETED", event.obj))

    def close(self) -> None:
        self.queue.put_nowait(None)


class KubeStore:
    """Objects of one cluster keyed by plural and (namespace, name)."""

    def __init__(self, versions: ResourceVersions, history_size: int) -> None:
        self.versions = versions
        self.types: dict[str, ResourceType] = dict(BY_PLURAL)  # by key
        self.served: dict[tuple[str, str, str], ResourceType] = {
            (rt.group, rt.version, rt.plural): rt for rt in RESOURCES.values()
        }
        self.objects: dict[str, dict[Key, JSON]] = {key: {} for key in self.types}
        self.history: deque[WatchEvent] = deque()
        self.history_size = history_size
        self.compacted_rv = 0
        self.watchers: set[Watcher] = set()

    # -- custom resources --------------------------------------------------------------------
    def resource(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.served.get((group, version, plural))

    def serve(self, versions: list[ResourceType]) -> None:
        """Serve (or re-serve, after a CRD update) a custom resource's versions; its objects stay."""
        key = versions[0].key
        self.unserve(key)
        for rt in versions:
            self.served[(rt.group, rt.version, rt.plural)] = rt
        self.types[key] = next((rt for rt in versions if (rt.definition or {}).get("storage")), versions[0])
        self.objects.setdefault(key, {})

    def unserve(self, key: str) -> None:
        self.served = {k: rt for k, rt in self.served.items() if rt.key != key}

    def forget(self, key: str) -> None:
        """A deleted CRD: its objects go (DELETED to their watchers), its watches end, it is not served."""
        for obj in list(self.iter(key)):
            self.remove(key, obj)
        for watcher in [w for w in self.watchers if w.plural == key]:
            watcher.close()
        self.unserve(key)
        del self.objects[key], self.types[key]

    # -- reads -------------------------------------------------------------------------------
    def get(self, plural: str, namespace: str, name: str) -> JSON | None:
        return self.objects[plural].get((namespace, name))

    def require(self, plural: str, namespace: str, name: str) -> JSON:
        obj = self.get(plural, namespace, name)
        if obj is None:
            raise not_found(self.types[plural], name)
        return obj

    def iter(self, plural: str, namespace: str | None = None) -> Iterator[JSON]:
        for (ns, _), obj in list(self.objects[plural].items()):
            if namespace is None or ns == namespace:
                yield obj

    # -- writes ------------------------------------------------------------------------------
    def add(self, plural: str, obj: JSON) -> JSON:
        rt = self.types[plural]
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        if key in self.objects[plural]:
            details = {"name": key[1], "group": rt.group, "kind": rt.plural}
            raise KubeError(409, "AlreadyExists", f'{rt.qualified} "{key[1]}" already exists', details)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", rfc3339())
        self.objects[plural][key] = obj
        self._publish(plural, "ADDED", obj)
        return obj

    def touch(self, plural: str, obj: JSON) -> None:
        """Record an in-place change: new resourceVersion and a MODIFIED event."""
        self._publish(plural, "MODIFIED", obj)

    def modify(self, plural: str, obj: JSON, change: Callable[[JSON], Any]) -> bool:
        """Apply change(obj) in place; publish MODIFIED only when something actually changed."""
        before = clone(obj)
        change(obj)
        if obj == before:
            return False
        self.touch(plural, obj)
        return True

    def remove(self, plural: str, obj: JSON) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", "") if self.types[plural].namespaced else "", meta["name"])
        if self.objects[plural].pop(key, None) is not None:
            self._publish(plural, "DELETED", obj)

    def _publish(self, plural: str, kind: str, obj: JSON) -> None:
        obj["metadata"]["resourceVersion"] = str(self.versions.next())
        event = WatchEvent(self.versions.current, plural, kind, clone(obj))
        self.history.append(event)
        while len(self.history) > self.history_size:
            self.compacted_rv = self.history.popleft().rv
        for watcher in list(self.watchers):
            watcher.offer(event)

    # -- watch -------------------------------------------------------------------------------
    def open_watch(self, watcher: Watcher, since: int | None) -> None:
        """Register a watcher and queue its initial events; since=None means 'current state first'."""
        if since is None:
            for obj in sorted(self.iter(watcher.plural, watcher.namespace), key=_rv):
                watcher.offer(WatchEvent(_rv(obj), watcher.plural, "ADDED", clone(obj)))
        else:
            if since < self.compacted_rv:
                raise KubeError(410, "Expired", f"too old resource version: {since} ({self.compacted_rv})")
            for event in self.history:
                if event.rv > since:
                    watcher.offer(event)
        self.watchers.add(watcher)

    def close_watch(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)

    def compact(self) -> None:
        """Forget the whole watch history (admin/test hook): every older resourceVersion now gets 410."""
        self.history.clear()
        self.compacted_rv = self.versions.current

    def close_all_watches(self) -> None:
        for watcher in list(self.watchers):
            watcher.close()


def _rv(obj: JSON) -> int:
    return int(obj["metadata"].get("resourceVersion", "0"))
