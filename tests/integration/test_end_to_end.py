"""The happy path end to end: real Prefect flow runs, the real adapters over HTTP against the
emulator, on SQLite and on MariaDB.

Row inserted → Pending/Waiting → Pending/Provisioning → Pending/Dispatching → Running →
Succeeded, with the node pool created (``falcon-`` prefix) and deleted, the Job labelled
``managed-by=falcon`` and the pod log at the design's GCS path. Lifecycle and release flows run
in threads of the test (``InProcessLauncher``) instead of a deployment runner.
"""

from __future__ import annotations

import pytest

from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.domain.status import Reason, Status
from falcon.services.context import Services, utc_now
from falcon.settings import Settings
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, Driver, emulator_counters, run_until_done, submit


def test_a_task_goes_from_pending_to_succeeded_through_every_phase(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    submit(db_url, "t-happy", "alice", "2x4")
    history = run_until_done(services, ["t-happy"])["t-happy"]

    # With its queue's slot free, a task is taken in (Waiting) and picked in the same tick.
    assert history == [
        ("Pending", "Provisioning"),
        ("Pending", "Dispatching"),
        ("Running", ""),
        ("Succeeded", ""),
    ]
    with services.db() as s:
        task = repo.get_task(s, "t-happy")
        assert task is not None
        assert (
            task.dispatched_at is not None
            and task.node_pool_name
            and task.node_pool_name.startswith("falcon-")
        )
        pool = repo.get_pool(s, CLUSTER.id, task.node_pool_name)
    assert pool is not None and pool.state == repo.PoolState.DELETED
    logs = list((emulator.data_dir / "gcs" / "bucket-a" / "logs" / "t-happy").glob("*.log"))
    assert len(logs) == 2  # 2x4 on ct6e-standard-4t is a 2-node slice: one pod, one log per node


def test_a_kept_pool_is_reused_by_the_next_task_of_the_same_queue(
    services: Services, db_url: str, emulator: EmulatorServer
) -> None:
    """t-stuck holds the queue slot (its image never pulls) while t-first finishes, so t-next
    is still waiting then: t-first's pool is kept and handed to t-next with no second create."""
    driver = Driver(services)
    submit(db_url, "t-first", "alice", "2x2", run_seconds=2.0)
    driver.run_until(lambda t: t["t-first"].status is Status.RUNNING)
    submit(db_url, "t-stuck", "carol", "2x2", image="trainer:missing", timeout=4)
    driver.run_until(lambda t: t["t-stuck"].reason is Reason.DISPATCHING)
    submit(db_url, "t-next", "bob", "2x2")
    driver.run_until_done(["t-first", "t-stuck", "t-next"])

    with services.db() as s:
        first, stuck, nxt = (repo.get_task(s, i) for i in ("t-first", "t-stuck", "t-next"))
    assert first is not None and stuck is not None and nxt is not None
    assert first.status is Status.SUCCEEDED and nxt.status is Status.SUCCEEDED
    assert stuck.status is Status.FAILED and stuck.reason is Reason.TIMEOUT
    assert ("Pending", "Waiting") in driver.history["t-next"]
    assert nxt.node_pool_name == first.node_pool_name  # handed over, not created again
    assert emulator_counters(emulator)["nodePoolsCreated"] == 2  # t-first's and t-stuck's


def test_a_bad_row_fails_alone_and_the_others_still_run(services: Services, db_url: str) -> None:
    with session_scope(db_url) as s:
        repo.insert_task(
            s,
            task_id="t-bad",
            actor="eve",
            name="bad",
            tpu_type="v6e",
            spec={"image": "x", "command": ["y"], "topology": "3x3"},
            timeout_seconds=60,
            now=utc_now(),
        )
        repo.insert_task(
            s,
            task_id="t-nocluster",
            actor="eve",
            name="v5p",
            tpu_type="v5p",
            spec={"image": "x", "command": ["y"], "topology": "2x2x1"},
            timeout_seconds=60,
            now=utc_now(),
        )
    submit(db_url, "t-good", "alice", "2x2")
    run_until_done(services, ["t-bad", "t-nocluster", "t-good"])
    with services.db() as s:
        bad, none, good = (repo.get_task(s, i) for i in ("t-bad", "t-nocluster", "t-good"))
    assert bad is not None and bad.status is Status.FAILED and bad.reason is Reason.INVALID_SPEC
    assert "3x3" in (bad.message or "")
    assert none is not None and none.status is Status.FAILED and none.reason is Reason.NO_ELIGIBLE_CLUSTER
    assert good is not None and good.status is Status.SUCCEEDED


def test_settings_default_to_the_embedded_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FALCON_DATABASE_URL", raising=False)
    assert Settings().resolved_database_url.startswith("sqlite:///")
