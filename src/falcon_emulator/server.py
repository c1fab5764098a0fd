"""Run the emulator: in a background thread for tests (EmulatorServer) or in the foreground (serve)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import uvicorn
from fastapi import FastAPI

from falcon_emulator.app import begin_shutdown, create_app
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.state import EmulatorState


class EmulatorServer:
    """Context manager: uvicorn on a background thread; ``url`` is ``http://host:port``."""

    def __init__(
        self, config: EmulatorConfig, data_dir: Path, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config, self.data_dir, self.host, self.port = config, data_dir, host, port
        self.app: FastAPI = create_app(config, data_dir)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def state(self) -> EmulatorState:
        state: EmulatorState = self.app.state.emulator
        return state

    def __enter__(self) -> EmulatorServer:
        sock = socket.socket(
            socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
        )  # asyncio sets TCP_NODELAY
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="falcon-emulator", daemon=True
        )
        self._thread.start()
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"emulator did not start on {self.url}")

    def stop(self) -> None:
        loop: asyncio.AbstractEventLoop | None = getattr(self.app.state, "loop", None)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(begin_shutdown, self.state)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server, self._thread = None, None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def serve(port: int, config_path: Path | None, data_dir: Path, host: str = "127.0.0.1") -> None:
    """Run in the foreground until Ctrl-C (``falcon emulator serve``)."""
    config = EmulatorConfig.load(config_path)
    data_dir.mkdir(parents=True, exist_ok=True)
    app = create_app(config, data_dir)
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=2)
