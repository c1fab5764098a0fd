"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol: open a page, wait
until its rendered text shows what a person would look for, keep a screenshot.

A single-page app such as Prefect's UI renders after its API calls return, which a one-shot
``--dump-dom`` does not wait for; polling the rendered text over a real clock does."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium") or "chromium"


class Page:
    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        request_id = next(self._ids)
        self._socket.send(json.dumps({"id": request_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=30))
            if message.get("id") == request_id:
                assert "error" not in message, message
                return dict(message.get("result", {}))

    def text(self) -> str:
        found = self.call("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)
        return str(found["result"].get("value", ""))

    def open(self, url: str, *wanted: str, seconds: float = 45) -> str:
        """Go to ``url`` and wait until its text holds every one of ``wanted``; returns the text."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + seconds
        while not all(w in (text := self.text()) for w in wanted):
            assert time.monotonic() < deadline, f"{url} never showed {wanted}; it showed:\n{text[:3000]}"
            time.sleep(0.5)
        return text

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path


@contextmanager
def chromium(width: int = 1600, height: int = 1000) -> Iterator[Page]:
    """A headless Chromium with one blank page, closed at the end of the block."""
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",  # the suite may run as root, which Chromium's sandbox refuses
                "--disable-gpu",
                "--hide-scrollbars",
                f"--window-size={width},{height}",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its renderer and helper processes share this group
        )
        try:
            with connect(_page_socket(Path(profile), proc), max_size=64 * 1024 * 1024) as socket:
                page = Page(socket)
                page.call("Page.enable")
                yield page
        finally:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill Chromium and every helper it started, and wait until none is left: a helper still
    writing into the profile would make removing it fail ("Directory not empty")."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _page_socket(profile: Path, proc: subprocess.Popen[bytes]) -> str:
    """The DevTools URL of the browser's first page, once it has written its port."""
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        assert proc.poll() is None, f"chromium exited with {proc.returncode}"
        assert time.monotonic() < deadline, "chromium did not open its DevTools port"
        time.sleep(0.1)
    port = int(port_file.read_text().split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
        pages = json.load(answer)
    return str(next(p for p in pages if p["type"] == "page")["webSocketDebuggerUrl"])
