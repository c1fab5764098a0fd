"""apps/v1 Deployments and StatefulSets, and their /scale subresource (an autoscaling/v1 Scale).

No pods run for them: their status follows spec.replicas at each write, as if every replica became ready at
once, which is what a controller that scales them needs to observe. Validation and defaults follow
https://kubernetes.io/docs/concepts/workloads/controllers/deployment/ and .../statefulset/ (selector
required and matching the template's labels, restartPolicy Always, replicas >= 0).
"""

from __future__ import annotations

from typing import Any

from falcon_emulator.k8s_objects import default_pod_spec, invalid
from falcon_emulator.selectors import match_expressions
from falcon_emulator.store import ResourceType
from falcon_emulator.util import JSON

APPS = ("deployments", "statefulsets")
_SCALE = ResourceType("autoscaling", "v1", "scale", "Scale", True)


def admit(rt: ResourceType, obj: JSON) -> None:
    """Validate and default a Deployment or StatefulSet on create."""
    name = obj["metadata"]["name"]
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("selector"), dict):
        raise invalid(rt, name, "spec.selector: Required value")
    template = spec.get("template")
    if not isinstance(template, dict):
        raise invalid(rt, name, "spec.template: Required value")
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not selects(spec["selector"], labels):
        raise invalid(
            rt,
            name,
            f"spec.template.metadata.labels: Invalid value: {labels}: "
            "`selector` does not match template `labels`",
        )
    pod_spec = default_pod_spec(rt, name, template.get("spec"), "spec.template.spec")
    if pod_spec["restartPolicy"] != "Always":
        policy = pod_spec["restartPolicy"]
        message = (
            f'spec.template.spec.restartPolicy: Unsupported value: "{policy}": supported values: "Always"'
        )
        raise invalid(rt, name, message)
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    if rt.plural == "deployments":
        spec.setdefault(
            "strategy",
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
        )
        spec.setdefault("progressDeadlineSeconds", 600)
    else:
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    check_replicas(rt, name, spec["replicas"])
    obj["metadata"]["generation"] = 1
    follow(rt, obj)


def selects(selector: JSON, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) that is non-empty and matches the labels."""
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    return all(labels.get(k) == v for k, v in match_labels.items()) and match_expressions(expressions, labels)


def check_replicas(rt: ResourceType, name: str, replicas: Any) -> None:
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise invalid(
            rt, name, f"spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"
        )


def follow(rt: ResourceType, obj: JSON) -> None:
    """Status as the controllers write it once every replica is ready (Go omits a Deployment's zeros)."""
    replicas = obj["spec"]["replicas"]
    counts = dict.fromkeys(("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"), replicas)
    if rt.plural == "deployments":
        counts = {k: v for k, v in counts.items() if v}
    else:
        counts["currentReplicas"] = replicas
    obj["status"] = {"observedGeneration": obj["metadata"].get("generation", 1), **counts}


def scale_of(obj: JSON) -> JSON:
    """The autoscaling/v1 Scale the /scale subresource reads and writes."""
    meta = obj["metadata"]
    identity = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": identity,
        "spec": {"replicas": obj["spec"]["replicas"]},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": _selector_text(obj["spec"]["selector"]),
        },
    }


def _selector_text(selector: JSON) -> str:
    """A LabelSelector in the string form Scale.status.selector carries (as a label-selector query)."""
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, operator = expr["key"], expr.get("operator", "")
        if operator in ("In", "NotIn"):
            terms.append(f"{key} {operator.lower()} ({','.join(expr.get('values') or [])})")
        else:
            terms.append(f"!{key}" if operator == "DoesNotExist" else key)
    return ",".join(terms)


def rescale(obj: JSON, scale: Any) -> bool:
    """Apply a written Scale's spec.replicas to the workload; False when nothing changes."""
    replicas = ((scale if isinstance(scale, dict) else {}).get("spec") or {}).get("replicas")
    check_replicas(_SCALE, obj["metadata"]["name"], replicas)
    if replicas == obj["spec"]["replicas"]:
        return False
    obj["spec"]["replicas"] = replicas
    return True
