"""Synthetic container stdout: the container environment and the GCS FUSE log file it would write."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from falcon_emulator.state import ClusterState, EmulatorState
from falcon_emulator.util import JSON, rfc3339

GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
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


def gcs_log_path(data_dir: Path, pod: JSON, container: JSON, log_file: str) -> Path | None:
    """Where a FALCON_LOG_FILE under a gcsfuse CSI mount lands: <data_dir>/gcs/<bucket>/<object>."""
    target = PurePosixPath(log_file)
    volumes = {v.get("name"): v for v in pod["spec"].get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        mount_path = PurePosixPath(mount["mountPath"])
        csi = (volumes.get(mount.get("name")) or {}).get("csi") or {}
        if csi.get("driver") != GCSFUSE_DRIVER or not target.is_relative_to(mount_path):
            continue
        attributes = csi.get("volumeAttributes") or {}
        bucket = attributes.get("bucketName")
        if not bucket:
            continue
        parts = [*_only_dir(attributes), mount.get("subPath") or "", str(target.relative_to(mount_path))]
        return _inside(data_dir / "gcs" / bucket, "/".join(p for p in parts if p))
    return None


def _only_dir(attributes: JSON) -> list[str]:
    for option in str(attributes.get("mountOptions") or "").split(","):
        key, _, value = option.strip().partition("=")
        if key.replace("_", "-") == "only-dir" and value:
            return [value.strip("/")]
    return []


def _inside(root: Path, relative: str) -> Path | None:
    path = (root / relative).resolve()
    return path if path.is_relative_to(root.resolve()) and path != root.resolve() else None


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


def append_log(state: EmulatorState, cluster: ClusterState, pod: JSON, container: JSON, text: str) -> None:
    """Grow the container's stdout in memory (for /log) and in its GCS log file, if it has one."""
    meta = pod["metadata"]
    logs = cluster.logs.setdefault((meta["namespace"], meta["name"]), {})
    logs[container["name"]] = logs.get(container["name"], "") + text
    runtime = cluster.pods.get(meta["uid"])
    env = runtime.envs.get(container["name"], {}) if runtime else {}
    log_file = env.get("FALCON_LOG_FILE")
    if not log_file:
        return
    path = gcs_log_path(state.data_dir, pod, container, log_file)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(text)
