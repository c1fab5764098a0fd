"""What the latency benchmarks share: the stack as `falcon local` runs it, rows inserted as upstream
inserts them, and a poller that notes the first moment each row shows a state.

The stack is started as `falcon demo` starts it (src/falcon/local.py): a throwaway Prefect server,
the emulator (in this process, on a thread), the two demo clusters registered, then the
`falcon local` subprocess serving Falcon's deployments. Database: SQLite under a temporary
FALCON_HOME in /tmp (the `falcon local` default), or a throwaway MariaDB
(benchmarks/mysql_server.py). The Prefect server keeps its own database: SQLite (the `falcon local`
default) or, with ``prefect_db="postgres"``, a throwaway PostgreSQL as production runs it
(tests/chaos/run.py's).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import sqlalchemy as sa
from mysql_server import mariadb

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.session import session_scope
from falcon.local import emulator, prefect_server, register_demo_clusters, served_stack
from falcon.settings import get_settings

POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Stack:
    home: Path
    url: str  # Falcon's database
    api_url: str  # the Prefect API
    emulator_url: str
    runner: subprocess.Popen[bytes]  # the `falcon local` child serving the deployments
    launched: float  # monotonic time the runner was started


@contextmanager
def local_stack(
    db: str,
    prefix: str,
    keep_home: bool,
    env: Mapping[str, str] | None = None,
    prefect_db: str = "sqlite",
) -> Iterator[Stack]:
    """The stack on a fresh FALCON_HOME (and a fresh MariaDB when ``db`` is "mariadb"); ``env``
    is added to the environment the runner inherits. Everything is stopped on exit."""
    home = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.environ["FALCON_HOME"] = str(home)
    os.environ.pop("FALCON_DATABASE_URL", None)
    os.environ.pop("PREFECT_API_URL", None)  # always a throwaway Prefect server of our own
    os.environ.update(env or {})
    with ExitStack() as stack:
        stack.callback(_remove_home, home, keep_home)
        if db == "mariadb":
            os.environ["FALCON_DATABASE_URL"] = stack.enter_context(mariadb())
        get_settings.cache_clear()
        url = get_settings().resolved_database_url
        upgrade(url)
        started = time.monotonic()
        api_url = stack.enter_context(prefect_api(home / "prefect", prefect_db))
        emulator_url = stack.enter_context(emulator(None, 0, home / "emulator"))
        register_demo_clusters()
        up = time.monotonic() - started
        print(f"FALCON_HOME={home}  db={db}  prefect db={prefect_db}  stack up in {up:.1f}s", flush=True)
        launched = time.monotonic()
        runner = stack.enter_context(served_stack(home, api_url, emulator_url))
        yield Stack(home, url, api_url, emulator_url, runner, launched)


@contextmanager
def prefect_api(home: Path, prefect_db: str) -> Iterator[str]:
    """A throwaway Prefect server keeping its database in SQLite under ``home`` (as `falcon local`
    does) or, for "postgres", on a throwaway PostgreSQL (as production does); its API URL."""
    with ExitStack() as stack:
        if prefect_db == "postgres":
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
            from tests.chaos.run import postgres  # the chaos run's throwaway PostgreSQL

            os.environ["PREFECT_API_DATABASE_CONNECTION_URL"] = stack.enter_context(postgres())
        try:
            api_url = stack.enter_context(prefect_server(home))
        finally:
            os.environ.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)  # the server's, not Falcon's
        yield api_url


def _remove_home(home: Path, keep: bool) -> None:
    if keep:
        print(f"kept {home}")
        return
    shutil.rmtree(home, ignore_errors=True)


def insert(url: str, task_id: str, actor: str, topology: str, run_seconds: float) -> float:
    """Insert one row as upstream does, its containers running ``run_seconds`` in the emulator;
    the monotonic time its commit returned."""
    spec = {
        "image": "us-docker.pkg.dev/demo/trainer:latest",
        "command": ["python", "-u", "train.py"],
        "env": {"EMULATOR_RUN_SECONDS": f"{run_seconds:g}"},
        "topology": topology,
    }
    with session_scope(url) as session:
        repo.insert_task(
            session,
            task_id=task_id,
            actor=actor,
            name=f"job-{task_id}",
            tpu_type="v6e",
            spec=spec,
            timeout_seconds=3600,
            now=utc_now(),
        )
    return time.monotonic()


@dataclass(frozen=True)
class Seen:
    at: float  # monotonic
    values: tuple[Any, ...]  # the rest of the row that was first seen


class Poller(threading.Thread):
    """Every POLL_SECONDS, run each watched query on a connection of its own and note the first
    moment each key (a row's first ``key_columns[name]`` columns, default one) appears in its result.

    Resolution: the poll period plus one round of queries."""

    def __init__(
        self, url: str, queries: Mapping[str, sa.Executable], key_columns: Mapping[str, int] | None = None
    ) -> None:
        super().__init__(daemon=True, name="latency-poller")
        self.url, self.queries = url, queries
        self.key_columns = {name: (key_columns or {}).get(name, 1) for name in queries}
        self.seen: dict[str, dict[Hashable, Seen]] = {name: {} for name in queries}
        self.polls = 0
        self.poll_seconds: list[float] = []
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        engine = sa.create_engine(self.url)  # its own pool: never shares a connection with the inserts
        while not self._stop_event.is_set():
            started = time.monotonic()
            results: dict[str, Sequence[sa.Row[Any]]] = {}
            try:
                with engine.connect() as conn:
                    for name, query in self.queries.items():
                        results[name] = conn.execute(query).all()
            except sa.exc.OperationalError:  # e.g. SQLite busy: just poll again
                pass
            now = time.monotonic()
            with self._lock:
                for name, rows in results.items():
                    first, width = self.seen[name], self.key_columns[name]
                    for row in rows:
                        key = row[0] if width == 1 else tuple(row[:width])
                        if key not in first:
                            first[key] = Seen(now, tuple(row[width:]))
            self.polls += 1
            self.poll_seconds.append(now - started)
            self._stop_event.wait(max(0.0, POLL_SECONDS - (time.monotonic() - started)))
        engine.dispose()

    def first_seen(self, name: str, key: Hashable) -> Seen | None:
        with self._lock:
            return self.seen[name].get(key)

    def snapshot(self, name: str) -> dict[Hashable, Seen]:
        with self._lock:
            return dict(self.seen[name])

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def wait_for(
    poller: Poller, name: str, key: Hashable, runner: subprocess.Popen[bytes], seconds: float
) -> Seen:
    """The first sighting of ``key`` by ``name``'s query, waiting up to ``seconds`` for it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = poller.first_seen(name, key)
        if seen is not None:
            return seen
        if runner.poll() is not None:
            raise RuntimeError(f"falcon local exited with {runner.returncode}; see its local.log")
        time.sleep(0.05)
    raise RuntimeError(f"{key} was not seen by {name!r} within {seconds:.0f}s; see local.log")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the stack is stopped by the context managers' exits."""

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def run_main(main: Callable[[], int]) -> None:
    """Run a benchmark's ``main`` with SIGTERM unwinding like Ctrl-C; exit with its code (130 if
    interrupted, the stack stopped by the context managers' exits)."""
    stop_on_sigterm()
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; stack stopped", file=sys.stderr)
        sys.exit(130)
