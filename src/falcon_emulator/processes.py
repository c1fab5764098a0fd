"""Containers that really run: the kubelet of a cluster configured ``runsCommands: true``.

Such a cluster stands in for a central cluster whose pods run Prefect flow runs. The image is not
pulled or inspected; its stand-in is the emulator's own Python environment. A container runs its
``command`` followed by its ``args`` ($(VAR) expanded as the kubelet does; an empty ``command``
means the image's entrypoint, which here runs ``args`` as given) as a local process in a session of
its own, with:

- the environment a minimal image would give (``PATH`` with the emulator's interpreter first,
  ``HOME`` and the working directory an empty folder of the pod's own, ``LANG``), then the
  container's resolved ``env`` over it (``value``, ``fieldRef`` and ``secretKeyRef``);
- its stdout and stderr, interleaved, as the container's log (``GET .../pods/NAME/log``);
- its exit status as the container's: 0 Completed, a signal 128+N, anything else Error.

Deleting the pod sends SIGTERM to the process group and SIGKILL after the pod's grace period; the
emulator's shutdown kills whatever still runs. Not modelled: resource limits, the image's own
entrypoint and files, volumes, probes, restarts (``restartPolicy`` other than Never).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from falcon_emulator.logs import expand
from falcon_emulator.util import JSON

_LOG_CHUNK = 65536


@dataclass
class Process:
    """One container's process and the log text its pump has read but the kubelet not yet taken."""

    popen: subprocess.Popen[bytes]
    pending: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pump: threading.Thread | None = None

    def take_output(self) -> str:
        with self.lock:
            text, self.pending = "".join(self.pending), []
        return text

    def exit_code(self) -> int | None:
        """None while it runs (or its output is still being read); then the container's exit code."""
        code = self.popen.poll()
        if code is None or (self.pump is not None and self.pump.is_alive()):
            return None
        return 128 - code if code < 0 else code


def image_environment(home: Path) -> dict[str, str]:
    """What a minimal Python image sets, with the emulator's interpreter standing in for the image's."""
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8"}


def argv(container: JSON, env: dict[str, str]) -> list[str]:
    """command + args, each $(VAR) expanded; an empty command is the entrypoint, which runs args."""
    parts = [*(container.get("command") or []), *(container.get("args") or [])]
    return [expand(str(part), env) for part in parts]


def start(command: list[str], env: dict[str, str], workdir: Path) -> Process:
    """Run ``command`` in its own session; FileNotFoundError/PermissionError when it cannot start."""
    workdir.mkdir(parents=True, exist_ok=True)
    popen = subprocess.Popen(
        command,
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    process = Process(popen)
    process.pump = threading.Thread(target=_pump, args=(process,), daemon=True, name="container-log")
    process.pump.start()
    return process


def _pump(process: Process) -> None:
    stream = process.popen.stdout
    assert stream is not None
    while chunk := os.read(stream.fileno(), _LOG_CHUNK):
        with process.lock:
            process.pending.append(chunk.decode("utf-8", "replace"))


def terminate(process: Process, grace_seconds: float) -> None:
    """SIGTERM to the process group, SIGKILL once the grace period is over (kubelet's KillContainer)."""
    _signal(process, signal.SIGTERM)
    if grace_seconds <= 0:
        _signal(process, signal.SIGKILL)
        return
    timer = threading.Timer(grace_seconds, _signal, args=(process, signal.SIGKILL))
    timer.daemon = True
    timer.start()


def kill(process: Process) -> None:
    _signal(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.popen.wait(timeout=10)


def _signal(process: Process, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.popen.pid, signum)
