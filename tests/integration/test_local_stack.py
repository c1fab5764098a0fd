"""The README's commands as a new user types them: the installed `falcon` entry point, run as
subprocesses from an empty folder with no PREFECT_* or FALCON_* variables, with rows written by
another process with plain SQL (the upstream's way), and the stack stopped by a signal with
nothing of it left running.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from falcon.adapters.artifacts import VIEW_KEY
from falcon.local import free_port
from tests.integration.browser import chromium
from tests.integration.harness import clean_env, wait_http

FALCON = str(Path(sys.executable).with_name("falcon"))
SPEC = {
    "image": "busybox",
    "command": ["echo", "hi"],
    "env": {"EMULATOR_RUN_SECONDS": "1"},
    "topology": "2x2",
}


def falcon(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [FALCON, *args], cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"falcon {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def upstream_insert(db: Path, task_id: str, spec: str) -> None:
    """What the upstream component does: its own connection, one INSERT, status Pending."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO job (id, actor, name, tpu_type, spec, timeout_seconds, status, created_at,"
            " updated_at) VALUES (?, 'bob', ?, 'v6e', ?, 600, 'Pending', ?, ?)",
            (task_id, f"name-{task_id}", spec, _now(), _now()),
        )


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S.000000", time.gmtime())


def statuses(db: Path) -> dict[str, tuple[str, str | None]]:
    with sqlite3.connect(db) as conn:
        return {row[0]: (row[1], row[2]) for row in conn.execute("SELECT id, status, reason FROM job")}


def wait_for(db: Path, wanted: dict[str, str], proc: subprocess.Popen[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the stack exited with {proc.returncode}"
        seen = statuses(db)
        if all(seen.get(task, ("",))[0] == status for task, status in wanted.items()):
            return
        time.sleep(1)
    raise AssertionError(f"not reached in {seconds}s: {statuses(db)}")


def stack_processes(home: Path) -> list[psutil.Process]:
    """Every process that belongs to the stack of this FALCON_HOME (all inherit it)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("FALCON_HOME") == str(home):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@contextmanager
def started(cwd: Path, *args: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A long-running `falcon` command in a session of its own, as a terminal would run it."""
    log = (cwd / "stack.out").open("w")
    proc = subprocess.Popen(
        [FALCON, *args],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:  # a failed test: SIGTERM, which stops the servers it started in
            os.killpg(proc.pid, signal.SIGTERM)  # sessions of their own (SIGKILL would orphan them)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def stop_and_check_nothing_left(proc: subprocess.Popen[str], home: Path, sig: signal.Signals) -> float:
    """Send ``sig`` to the command's process group (what Ctrl-C or a service manager does); it
    must exit within seconds, and no process of its stack may outlive it."""
    assert stack_processes(home), "the stack should be running before it is stopped"
    started_at = time.monotonic()
    os.killpg(proc.pid, sig)
    proc.wait(timeout=30)
    took = time.monotonic() - started_at
    _, alive = psutil.wait_procs(stack_processes(home), timeout=5)  # reaped children may lag a moment
    left = [(p.pid, " ".join(p.cmdline())[:120]) for p in alive if p.is_running()]
    assert left == [], left
    return took


def test_falcon_local_with_the_emulator_runs_tasks_from_the_cli_and_from_plain_sql(tmp_path: Path) -> None:
    home = (tmp_path / ".falcon").resolve()
    falcon(tmp_path, "db", "upgrade")
    falcon(
        tmp_path,
        *("cluster", "add", "edge-a", "--project", "tpu-project-a", "--location", "us-east5"),
        *("--tpu-type", "v6e", "--gcs-bucket", "falcon-demo-logs-a", "--reservation", "res-v6e"),
        *("--zone", "us-east5-b"),
    )
    cli_task = falcon(
        tmp_path,
        *("task", "submit", "--actor", "alice", "--name", "t1", "--tpu-type", "v6e", "--topology", "2x2"),
        *("--image", "busybox", "--env", "EMULATOR_RUN_SECONDS=2", "--", "echo", "hi"),
    ).strip()
    db = home / "falcon.db"
    with started(tmp_path, "local", "--emulator", "--emulator-port", "0", env=clean_env()) as proc:
        upstream_insert(db, "sql-1", json.dumps(SPEC))
        upstream_insert(db, "sql-broken", '{"image": "busybox", "command": [')
        wait_for(db, {cli_task: "Succeeded", "sql-1": "Succeeded", "sql-broken": "Failed"}, proc, 240)
        assert statuses(db)["sql-broken"] == ("Failed", "InvalidSpec")
        took = stop_and_check_nothing_left(proc, home, signal.SIGINT)
    log = (home / "local.log").read_text().splitlines()  # every move is a line of the log
    moves = [line.split(" - ", 1)[-1] for line in log if "event=task_moved task_id=sql-" in line]
    for task_id, source, target in [
        ("sql-1", "waiting", "acquiring"),
        ("sql-1", "dispatched", "running"),
        ("sql-1", "releasing", "done"),
        ("sql-broken", "new", "done"),
    ]:
        assert any(f"task_id={task_id} " in m and f" from={source} to={target} " in m for m in moves), moves
    assert proc.returncode == 0
    assert took < 20, f"Ctrl-C took {took:.1f}s"


@contextmanager
def serving(command: list[str], health: str, env: dict[str, str], cwd: Path) -> Iterator[None]:
    """A server the user started on their own, killed at the end of the test."""
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_http(health, 120)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def prefect_server(tmp_path: Path) -> Iterator[str]:
    """A Prefect server the user already runs (PREFECT_API_URL points at it)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    command = [sys.executable, "-m", "prefect", "server", "start", "--port", str(port)]
    env = clean_env(PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    with serving(command, f"{url}/health", env, tmp_path):
        yield url


@pytest.fixture
def emulator_served(tmp_path: Path) -> Iterator[str]:
    """`falcon emulator serve`, started separately as the README shows."""
    port = free_port()
    command = [FALCON, "emulator", "serve", "--port", str(port), "--data-dir", str(tmp_path / "emu")]
    with serving(command, f"http://127.0.0.1:{port}/healthz", clean_env(), tmp_path):
        yield f"http://127.0.0.1:{port}"


def test_falcon_local_uses_a_given_prefect_server_and_a_separate_emulator(
    tmp_path: Path, prefect_server: str, emulator_served: str
) -> None:
    home = (tmp_path / "state").resolve()
    env = clean_env(PREFECT_API_URL=prefect_server, FALCON_EMULATOR_URL=emulator_served, FALCON_HOME="state")
    falcon(tmp_path, "db", "upgrade", env=env)
    falcon(
        tmp_path,
        *("cluster", "add", "edge-b", "--project", "tpu-project-b", "--location", "us-central1"),
        *("--tpu-type", "v6e", "--gcs-bucket", "falcon-demo-logs-b", "--zone", "us-central1-b"),
        env=env,
    )
    db = home / "falcon.db"
    with started(tmp_path, "local", env=env) as proc:
        upstream_insert(db, "sql-1", json.dumps(SPEC))
        wait_for(db, {"sql-1": "Succeeded"}, proc, 240)
        gap = pickup_after_killing(dispatcher_process(prefect_server, home), db, "sql-2", proc)
        print(f"SIGKILL of the dispatcher's run to the next pickup: {gap:.1f}s")
        assert gap < 30, f"the next pickup came {gap:.1f}s after the dispatcher's run was killed"
        for member in stack_processes(home):  # the machine is lost: its dispatcher run stays Running
            member.kill()
        proc.wait(10)
    with started(tmp_path, "local", env=env) as proc:
        upstream_insert(db, "sql-3", json.dumps(SPEC))
        wait_for(db, {"sql-2": "Succeeded", "sql-3": "Succeeded"}, proc, 240)
        stop_and_check_nothing_left(proc, home, signal.SIGTERM)
    assert httpx.get(f"{prefect_server}/health", timeout=5).status_code == 200  # not ours to stop
    assert httpx.get(f"{emulator_served}/healthz", timeout=5).status_code == 200


def dispatcher_process(api_url: str, home: Path) -> psutil.Process:
    """The process of the dispatcher's running flow run (the runner starts each run in its own)."""
    query = {
        "deployments": {"name": {"any_": ["dispatcher"]}},
        "flow_runs": {"state": {"type": {"any_": ["RUNNING"]}}},
    }
    runs = httpx.post(f"{api_url}/flow_runs/filter", json=query, timeout=10).json()
    ids = {run["id"] for run in runs}
    found = [p for p in stack_processes(home) if p.environ().get("PREFECT__FLOW_RUN_ID") in ids]
    assert len(found) == 1, (ids, found)
    return found[0]


def pickup_after_killing(
    victim: psutil.Process, db: Path, task_id: str, stack: subprocess.Popen[str]
) -> float:
    """SIGKILL ``victim``, write a row at once, and time until a dispatcher takes it in (its
    Reason is set: Waiting, or already further)."""
    victim.kill()
    killed = time.monotonic()
    upstream_insert(db, task_id, json.dumps(SPEC))
    while statuses(db)[task_id] == ("Pending", None):
        assert stack.poll() is None, "the stack died with its dispatcher"
        assert time.monotonic() - killed < 240, "never picked up after the dispatcher was killed"
        time.sleep(0.2)
    return time.monotonic() - killed


ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS_DIR") or Path(__file__).parents[2] / "test-artifacts")


def look_at_the_prefect_ui(ui: str) -> None:
    """What an operator does after the demo: find one task's runs by its tag on the Runs page,
    then a version of the dispatcher's queue table (one showing a queue of edge-a) under its key
    on the Artifacts page; a screenshot of each is kept."""
    with chromium() as page:
        # its release run too, unless the round that saw its Job end kept the pool and finished it
        page.open(f"{ui}/runs?tag=task:demo-001", "acquire-demo-001", "actor:")
        assert "acquire-demo-002" not in page.text()  # only that task's runs
        page.screenshot(ARTIFACTS / "prefect-ui-runs-of-demo-001.png")
        shown = next(a for a in _view_artifacts(ui) if "edge-a:" in json.dumps(a["data"]))
        # the key's page lists it (its heading shows before its list loads, so wait for the id)
        page.open(f"{ui}/artifacts/key/{VIEW_KEY}", VIEW_KEY, shown["id"][:8])
        page.open(f"{ui}/artifacts/artifact/{shown['id']}", "edge-a:", "reservation room", "acquiring")
        page.screenshot(ARTIFACTS / "prefect-ui-queue-artifact.png")


def _view_artifacts(ui: str) -> list[dict[str, Any]]:
    """The dispatcher's views, newest first, as Prefect's API lists them."""
    body = {"artifacts": {"key": {"any_": [VIEW_KEY]}}, "sort": "CREATED_DESC", "limit": 200}
    found = httpx.post(f"{ui}/api/artifacts/filter", json=body, timeout=10)
    found.raise_for_status()
    return list(found.json())


def test_the_demo_runs_sample_tasks_to_succeeded_and_sigterm_stops_all_of_it(tmp_path: Path) -> None:
    home = (tmp_path / "home").resolve()
    env = clean_env(FALCON_HOME=str(home))
    with started(tmp_path, "demo", "--tasks", "3", "--keep-running", env=env) as proc:
        out = tmp_path / "stack.out"
        deadline = time.monotonic() + 400
        while "stack stays up" not in out.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, out.read_text()[-3000:]
            time.sleep(1)
        text = out.read_text()
        final = text.split("all tasks finished")[0].strip().split("\n\n")[-1]
        assert final.count("Succeeded") == 3, final
        assert "node pools created" in text and "remaining none" in text  # all pools deleted
        look_at_the_prefect_ui(text.split("Prefect UI: ")[1].split()[0])
        stop_and_check_nothing_left(proc, home / "demo", signal.SIGTERM)
    assert proc.returncode == 0
