"""A throwaway MariaDB server for the benchmarks: a temp data dir, a unix socket, no TCP.

``with mariadb() as url:`` runs ``mariadb-install-db`` into a fresh temporary directory, starts
``mariadbd`` on a socket there (``--skip-networking``), waits until it accepts connections,
creates a fresh database and yields ``mysql+pymysql://root@localhost/<db>?unix_socket=...``.
On exit the server is shut down and the directory removed, also on an exception or Ctrl-C.

A fresh data dir authenticates ``root`` by ``unix_socket`` only (see
``shared/reference/mysql-in-tests.md``), which is why the URL goes over the socket; we run as
root, so mariadbd needs ``--user=root``.

Run alone to check it: ``.venv/bin/python benchmarks/mysql_server.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"


def _url(socket: Path, database: str) -> str:
    return f"mysql+pymysql://root@localhost/{database}?unix_socket={socket}"


@contextmanager
def mariadb(
    database: str | None = None,
    buffer_pool: str = "256M",
    start_timeout: float = 60.0,
    slow_log: Path | None = None,
) -> Iterator[str]:
    """A running MariaDB with one fresh, empty database; yields its SQLAlchemy URL. With
    ``slow_log``, every statement over 0.1 s of the server's own time (lock waits included) is
    logged there, to tell a slow server from a client that waited for a CPU."""
    base = Path(tempfile.mkdtemp(prefix="falcon-bench-mariadb-"))
    data, socket, log = base / "data", base / "mysqld.sock", base / "mysqld.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(
            [
                INSTALL_DB,
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
                "--no-defaults",
            ],
            check=True,
            capture_output=True,
        )
        proc = subprocess.Popen(
            [
                MARIADBD,
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={socket}",
                f"--pid-file={base / 'mysqld.pid'}",
                f"--log-error={log}",
                "--skip-networking",
                "--user=root",
                f"--innodb-buffer-pool-size={buffer_pool}",
                "--innodb-flush-log-at-trx-commit=2",  # a benchmark box, not a durable store
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci",
                *(
                    [f"--slow-query-log-file={slow_log}", "--slow-query-log=1", "--long-query-time=0.1"]
                    if slow_log
                    else []
                ),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_ready(proc, socket, log, start_timeout)
        name = database or f"falcon_{uuid.uuid4().hex[:10]}"
        admin = sa.create_engine(_url(socket, "mysql"))
        with admin.begin() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
        admin.dispose()
        yield _url(socket, name)
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen[bytes], socket: Path, log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    engine = sa.create_engine(_url(socket, "mysql"), poolclass=sa.pool.NullPool)
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"mariadbd exited with {proc.returncode}:\n{tail}")
            if socket.exists():
                try:
                    with engine.connect() as conn:
                        conn.execute(sa.text("SELECT 1"))
                    return
                except sa.exc.OperationalError:
                    pass
            time.sleep(0.1)
    finally:
        engine.dispose()
    raise RuntimeError(f"mariadbd did not accept connections within {seconds:.0f}s (log: {log})")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM is mariadbd's clean shutdown; SIGKILL the process group if it hangs."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    started = time.perf_counter()
    with mariadb() as url:
        ready = time.perf_counter() - started
        with sa.create_engine(url).connect() as conn:
            version = conn.execute(sa.text("SELECT VERSION()")).scalar_one()
        print(f"MariaDB {version} ready in {ready:.1f}s at {url}")
    print(f"stopped and removed after {time.perf_counter() - started:.1f}s")
