"""`falcon task why ID` as a user types it: a subprocess from an empty folder, no FALCON_/PREFECT_
variables beyond the database (and Compute's address where the test asks Compute), on SQLite and
MariaDB, over rows written as upstream and the dispatcher write them.

We test: a waiting task hears its place, who is ahead, what the queue's acquiring task waits for
and since when, what Falcon knows of the reservation (its pools found by the name GKE's affinity
gives them, also when the cluster registered it as projects/OWN/reservations/NAME), and an ETA
from the queue's acquisitions (the one domain/eta computes from them); the acquiring task hears
its own wait; a Running task since when and how long it took; an unknown id exits 1 naming it;
`--compute` shows the reservation's free nodes, and says so when Compute cannot be reached. And
the two timestamps the ETA needs: the pick and Running are recorded once, and a restarted attempt
keeps the pick time.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.domain.eta import Estimate, estimate_to_running
from falcon.domain.lifecycle import NodePool, PoolState
from falcon.domain.model import ProvisioningMode, QueueKey, queue_label
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, clean_env

FALCON = str(Path(sys.executable).with_name("falcon"))
QUEUE = QueueKey(CLUSTER.id, "2x4")
LABEL = queue_label(CLUSTER, "2x4")
ACQUISITIONS = (300.0, 360.0, 420.0, 480.0)  # the queue's history, pick to Running, in seconds
WAITING = (("a1", "alice", 5.0), ("b1", "bob", 4.9), ("a2", "alice", 4.8), ("c1", "carol", 4.7))


def falcon(folder: Path, db_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FALCON, *args],
        cwd=folder,
        env=clean_env(FALCON_DATABASE_URL=db_url, FALCON_HOME=str(folder / ".falcon"), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def submit(url: str, task_id: str, actor: str, at: datetime) -> None:
    """Upstream's INSERT, then intake's queueing, as each writes the row."""
    with session_scope(url) as s:
        spec = {"image": "img:1", "command": ["true"], "topology": "2x4"}
        repo.insert_task(
            s, task_id=task_id, actor=actor, name=f"{actor}-job", tpu_type="v6e", spec=spec,
            timeout_seconds=None, now=at,
        )  # fmt: skip
    with session_scope(url) as s:
        assert repo.queue_task(s, task_id, QUEUE, at)


def pick(url: str, task_id: str, actor: str, at: datetime) -> None:
    with session_scope(url) as s:
        assert repo.start_acquiring(s, task_id, QUEUE, actor, f"lease-{task_id}", "Got the slot", at) == 1


def run(url: str, task_id: str, at: datetime) -> None:
    with session_scope(url) as s:
        assert repo.mark_dispatched(s, task_id, f"job-{task_id}", "uid", "submitted", at)
        assert repo.mark_running(s, task_id, "Pods running (2/2 active)", at)


@pytest.fixture
def queue(db_url: str) -> datetime:
    """A queue with four acquisitions behind it, one task acquiring a flex-start pool for 6 min,
    and four waiting; returns when it was written ("now")."""
    now = utc_now()
    with session_scope(db_url) as s:
        repo.add_cluster(s, CLUSTER, now - timedelta(hours=4))
    for i, seconds in enumerate(ACQUISITIONS):
        picked = now - timedelta(hours=3) + timedelta(minutes=20 * i)
        submit(db_url, f"h{i}", "hist", picked)
        pick(db_url, f"h{i}", "hist", picked)
        run(db_url, f"h{i}", picked + timedelta(seconds=seconds))
    submit(db_url, "demo-004", "dave", now - timedelta(minutes=8))
    pick(db_url, "demo-004", "dave", now - timedelta(minutes=6.5))
    pool = NodePool(CLUSTER.id, "falcon-demo-004", "2x4", "ct6e-standard-4t", ProvisioningMode.FLEX_START,
                    None, PoolState.CREATING, "demo-004")  # fmt: skip
    with session_scope(db_url) as s:
        repo.write_ahead_pool(s, pool, now - timedelta(minutes=6, seconds=10))
        repo.note_pending(s, "demo-004", "Creating node pool (flex-start)...", now - timedelta(minutes=6))
    for task_id, actor, minutes_ago in WAITING:
        submit(db_url, task_id, actor, now - timedelta(minutes=minutes_ago))
    return now


def test_a_waiting_task_is_told_its_place_the_queues_wait_the_reservation_and_an_eta(
    tmp_path: Path, db_url: str, queue: datetime
) -> None:
    done = falcon(tmp_path, db_url, "task", "why", "c1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"c1 (carol: carol-job) is Pending/Waiting in queue {LABEL}."
    assert f"Waiting: 4th in queue {LABEL}; ahead: alice (2), bob (1)." in lines
    (slot,) = [line for line in lines if line.startswith("The queue's acquiring task")]
    assert slot.startswith(
        "The queue's acquiring task demo-004 (dave) has waited 6 min for its flex-start node pool "
        "falcon-demo-004"
    )
    assert "Reservation res-a: Falcon's pools hold 0 node(s) on it (0 pool(s))" in done.stdout

    eta = re.fullmatch(
        r"ETA to Running: (\d+) min \((\d+)–(\d+) min, 80 %\) from 4 acquisitions observed in this queue\.",
        lines[-1],
    )
    assert eta, lines[-1]
    expected = estimate_to_running(ACQUISITIONS, 4, (utc_now() - queue).total_seconds() + 6.5 * 60)
    assert isinstance(expected, Estimate)
    point, low, high = (int(g) for g in eta.groups())
    assert abs(point - expected.seconds / 60) <= 1
    assert abs(low - expected.low / 60) <= 1 and abs(high - expected.high / 60) <= 1


def test_the_acquiring_and_the_running_task_are_told_their_own_wait(
    tmp_path: Path, db_url: str, queue: datetime
) -> None:
    acquiring = falcon(tmp_path, db_url, "task", "why", "demo-004")
    assert acquiring.returncode == 0, acquiring.stderr
    lines = acquiring.stdout.splitlines()
    assert lines[0] == f"demo-004 (dave: dave-job) is Pending/Provisioning in queue {LABEL}."
    assert lines[1] == 'Message: "Creating node pool (flex-start)..."'
    assert lines[2].startswith(
        f"Acquiring (holds the slot of queue {LABEL}): it has waited 6 min for its flex-start node pool"
    )
    assert lines[-1].startswith("ETA to Running: ")

    running = falcon(tmp_path, db_url, "task", "why", "h3")
    assert running.returncode == 0, running.stderr
    assert running.stdout.splitlines()[0] == f"h3 (hist: hist-job) is Running in queue {LABEL}."
    assert re.fullmatch(
        # the date is shown too when the task started on an earlier day (a run just after midnight)
        r"Running since (\d{4}-\d\d-\d\d )?\d\d:\d\d UTC \(\d+ h \d+ min\); it took 8 min from its pick\.",
        running.stdout.splitlines()[-1],
    )


def test_the_reservation_named_in_full_counts_the_pools_recorded_by_their_affinity(
    tmp_path: Path, db_url: str
) -> None:
    """A cluster registered with its own reservation as projects/OWN/reservations/NAME: GKE's
    affinity, and so Falcon's pool records, say NAME alone."""
    now = utc_now()
    full = replace(CLUSTER, default_reservation=f"projects/{CLUSTER.project}/reservations/res-a")
    with session_scope(db_url) as s:
        repo.add_cluster(s, full, now)
    held = NodePool(CLUSTER.id, "falcon-held", "2x4", "ct6e-standard-4t", ProvisioningMode.RESERVATION,
                    "res-a", PoolState.CREATING, "h0")  # fmt: skip
    with session_scope(db_url) as s:
        repo.write_ahead_pool(s, held, now)
    submit(db_url, "w1", "wendy", now)
    done = falcon(tmp_path, db_url, "task", "why", "w1")
    assert done.returncode == 0, done.stderr
    assert "Falcon's pools hold 2 node(s) on it (1 pool(s))" in done.stdout


def test_an_unknown_task_exits_1_naming_it(tmp_path: Path, db_url: str) -> None:
    done = falcon(tmp_path, db_url, "task", "why", "no-such-task")
    assert done.returncode == 1
    assert done.stderr.strip() == "no task no-such-task"
    assert done.stdout == ""


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_compute_is_asked_for_the_reservations_room_and_its_silence_is_said(
    tmp_path: Path, db_url: str, queue: datetime, emulator: EmulatorServer
) -> None:
    asked = falcon(tmp_path, db_url, "task", "why", "c1", "--compute", FALCON_EMULATOR_URL=emulator.url)
    assert asked.returncode == 0, asked.stderr
    assert (
        "Reservation res-a: 8 of 8 nodes free (room for a 2-node pool of this queue); "
        "Falcon's pools hold 0 node(s) on it (0 pool(s))."
    ) in asked.stdout.splitlines()

    closed = emulator.url.rsplit(":", 1)[0] + ":9"  # the discard port: nothing listens
    silent = falcon(tmp_path, db_url, "task", "why", "c1", "--compute", FALCON_EMULATOR_URL=closed)
    assert silent.returncode == 0, silent.stderr
    (line,) = [line for line in silent.stdout.splitlines() if line.startswith("Reservation res-a")]
    assert line.startswith("Reservation res-a: Compute did not answer (")
    assert silent.stdout.splitlines()[-1].startswith("ETA to Running: ")


def test_the_pick_and_running_are_recorded_once_and_a_restart_keeps_the_pick(
    db_url: str, queue: datetime
) -> None:
    with session_scope(db_url) as s:
        picked, running = repo.acquisition_times(s, "demo-004")
        assert running is None
        assert picked is not None and abs((queue - timedelta(minutes=6.5) - picked).total_seconds()) < 0.001
        assert repo.set_acquire_run(s, "demo-004", "run-2", queue, lease_id="lease-2", attempt=2)
    run(db_url, "demo-004", queue + timedelta(minutes=1))
    with session_scope(db_url) as s:
        assert repo.acquisition_times(s, "demo-004") == (picked, queue + timedelta(minutes=1))
        assert not repo.mark_running(s, "demo-004", "again", queue + timedelta(minutes=5))
        assert repo.acquisition_times(s, "demo-004") == (picked, queue + timedelta(minutes=1))
        history = repo.acquisition_history(s, QUEUE, 3)
    assert [(b - a).total_seconds() for a, b in history] == [420.0, 480.0, 7.5 * 60]
