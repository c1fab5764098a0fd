"""Synthetic container stdout and the container environment it is derived from."""

from __future__ import annotations

import re

from falcon_emulator.state import ClusterState
from falcon_emulator.util import JSON, rfc3339

_VAR_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_FIELD_RE = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion: known variables are replaced, $$ escapes, unknown ones stay."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_RE.sub(substitute, text)


def field_ref(pod: JSON, path: str) -> str:
    meta, status = pod["metadata"], pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": pod["spec"].get("nodeName"),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _FIELD_RE.fullmatch(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    return ""


def container_env(pod: JSON, container: JSON) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        name = var["name"]
        if "value" in var:
            env[name] = expand(str(var.get("value") or ""), env)
        elif ref := (var.get("valueFrom") or {}).get("fieldRef"):
            env[name] = field_ref(pod, str(ref.get("fieldPath", "")))
        else:
            env[name] = ""
    return env


def start_text(container: JSON, env: dict[str, str]) -> str:
    command = [expand(str(c), env) for c in container.get("command") or []]
    args = [expand(str(a), env) for a in container.get("args") or []]
    lines = [
        f"[emulator] {rfc3339()} container {container['name']} started: image={container['image']} "
        f"command={command} args={args}"
    ]
    if env.get("EMULATOR_STDOUT"):
        lines.append(env["EMULATOR_STDOUT"])
    return "\n".join(lines) + "\n"


def exit_text(container: JSON, code: int, reason: str) -> str:
    return f"[emulator] {rfc3339()} container {container['name']} exited with code {code} ({reason})\n"


def append_log(cluster: ClusterState, pod: JSON, container: JSON, text: str) -> None:
    """Grow the container's stdout, which GET .../pods/NAME/log returns. Files the container writes (its log
    in a bucket, say) are its own business: no container runs here, so none is written."""
    meta = pod["metadata"]
    logs = cluster.logs.setdefault((meta["namespace"], meta["name"]), {})
    logs[container["name"]] = logs.get(container["name"], "") + text
