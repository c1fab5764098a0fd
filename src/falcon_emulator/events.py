"""core/v1 Events recorded by the emulated controllers, deduplicated like the real event recorder."""

from __future__ import annotations

from falcon_emulator.state import ClusterState
from falcon_emulator.util import JSON, parse_rfc3339, random_hex, rfc3339


def record_event(
    cluster: ClusterState,
    involved: JSON,
    reason: str,
    message: str,
    *,
    warning: bool = False,
    component: str = "kubelet",
) -> JSON:
    """Create an Event, or bump count/lastTimestamp of the same (object, reason, message) event."""
    meta = involved["metadata"]
    namespace = meta.get("namespace") or "default"
    dedupe = (meta.get("uid", ""), reason, message)
    existing_key = cluster.events.get(dedupe)
    existing = cluster.store.get("events", *existing_key) if existing_key else None
    now = rfc3339()
    if existing is not None:
        existing["count"] = int(existing.get("count", 1)) + 1
        existing["lastTimestamp"] = now
        cluster.store.touch("events", existing)
        return existing
    event = _new_event(involved, namespace, reason, message, warning, component, now)
    cluster.store.add("events", event)
    cluster.events[dedupe] = (namespace, event["metadata"]["name"])
    return event


def refresh_event(cluster: ClusterState, involved: JSON, reason: str, message: str) -> JSON | None:
    key = cluster.events.get((involved["metadata"].get("uid", ""), reason, message))
    return cluster.store.get("events", *key) if key else None


def _new_event(
    involved: JSON, namespace: str, reason: str, message: str, warning: bool, component: str, now: str
) -> JSON:
    meta = involved["metadata"]
    return {
        "metadata": {"name": f"{meta['name']}.{random_hex(16)}", "namespace": namespace},
        "involvedObject": {
            "kind": involved.get("kind", ""),
            "namespace": meta.get("namespace", ""),
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "apiVersion": involved.get("apiVersion", "v1"),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": "",
    }


def expire_events(cluster: ClusterState, ttl_seconds: float, wall_now: float) -> None:
    """Drop events not seen for ttl_seconds (the apiserver's --event-ttl, 1 h by default)."""
    for event in list(cluster.store.iter("events")):
        if wall_now - parse_rfc3339(str(event.get("lastTimestamp") or rfc3339(0))) > ttl_seconds:
            cluster.store.remove("events", event)
    live = {(e["metadata"]["namespace"], e["metadata"]["name"]) for e in cluster.store.iter("events")}
    cluster.events = {key: ref for key, ref in cluster.events.items() if ref in live}
