"""Tidal warm pools end to end: real Dispatcher ticks, the warm-pools, lifecycle and release flows
as real Prefect flow runs (threads of the test), the emulator over HTTP, SQLite.

A rule firing two seconds ahead creates a pool in the emulator at its fire and not before; a
task submitted afterwards takes it (its Message names the rule) and creates none of its own, while
the warm pool it took is replaced and the surplus trimmed; a rule with target 0 firing next
deletes the idle pool. The `falcon tidal pool` commands add, list and remove rules and refuse
an invalid cron naming its field. The logic's cases are unit tests
(tests/unit/test_service_warming.py); the store's are in test_store_contract.py, on MariaDB too.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.domain.lifecycle import PoolState
from falcon.domain.model import QueueKey, Task, node_pool_name_for
from falcon.domain.status import Status
from falcon.domain.warm_pools import WarmRule
from falcon.services.context import Services
from falcon.settings import Settings
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, Driver, db, emulator_counters, inject_fault, submit, with_env
from tests.integration.launcher import InProcessLauncher
from tests.integration.test_tidal_cli import falcon, register

Q = QueueKey(CLUSTER.id, "2x2")


def add_rule(services: Services, name: str, pools: int, in_seconds: int) -> Any:
    """A rule firing once, ``in_seconds`` from now (at a whole second); returns the fire instant."""
    now = utc_now()
    fire = (now + timedelta(seconds=in_seconds)).replace(microsecond=0)
    cron = f"CRON_TZ=UTC {fire.second} {fire.minute} {fire.hour} {fire.day} {fire.month} *"
    with db(services) as s:
        assert repo.add_warm_rule(s, WarmRule(name, Q, cron, pools, now))
    return fire


def warm_pools(services: Services) -> list[tuple[str, PoolState, Any]]:
    with db(services) as s:
        pools = repo.pools_in(s, list(PoolState))
        return [(p.name, p.state, s.get(repo.NodePoolRow, (p.cluster_id, p.name)).created_at) for p in pools]  # type: ignore[union-attr]


def states(services: Services) -> list[PoolState]:
    return sorted(state for _, state, _ in warm_pools(services))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_fire_warms_a_pool_a_task_takes_it_and_the_next_fire_deletes_it(
    services: Services, db_url: str, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = with_env(services, monkeypatch, FALCON_POOL_CREATION_PRIOR_SECONDS="1")
    driver = Driver(services, InProcessLauncher())
    fire = add_rule(services, "morning", 1, in_seconds=2)
    driver.run_until(lambda _: states(services) == [PoolState.IDLE], 20)
    ((pool, _, recorded_at),) = warm_pools(services)
    assert recorded_at >= fire  # created at the fire, not before
    assert emulator_counters(emulator)["nodePoolsCreated"] == 1

    # GKE answers the task's readiness check of the pool late, so its Message stays long enough to see.
    inject_fault(emulator, "GET", f"/nodePools/{pool}$", 503, "busy", times=5)
    seen: set[str] = set()

    def succeeded(tasks: dict[str, Task]) -> bool:
        seen.add(tasks["t1"].message or "")
        return tasks["t1"].status is Status.SUCCEEDED

    submit(db_url, "t1", "alice", "2x2")
    driver.run_until(succeeded, 30)
    assert f"Reusing warm node pool {pool} (tidal rule morning)..." in seen
    with db(services) as s:
        assert repo.get_task(s, "t1").node_pool_name == pool  # type: ignore[union-attr]
    assert node_pool_name_for("t1", "2x2") not in [name for name, _, _ in warm_pools(services)]
    # Not replaced while the task ran (pools are created at a fire); when the task ended, its
    # release kept the pool for the target.
    driver.run_until(lambda _: states(services) == [PoolState.IDLE], 20)
    assert emulator_counters(emulator)["nodePoolsCreated"] == 1

    add_rule(services, "evening", 0, in_seconds=1)
    driver.run_until(lambda _: states(services) == [PoolState.DELETED], 20)
    counters = emulator_counters(emulator)
    assert (counters["nodePoolsCreated"], counters["nodePoolsDeleted"]) == (1, 1)


def test_pool_commands_add_list_and_remove_and_refuse_a_bad_cron_naming_its_field(tmp_path: Path) -> None:
    """As a user types them: subprocesses from an empty folder, only FALCON_HOME set."""
    home = tmp_path / ".falcon"
    register(Settings(home=home).resolved_database_url)

    def pool(*args: str) -> tuple[int, str]:
        done = falcon(tmp_path, "tidal", "pool", *args, FALCON_HOME=str(home))
        return done.returncode, " ".join((done.stdout + done.stderr).split())  # Rich wraps long errors

    rule = ["--cluster", "edge-a", "--topology", "2X4", "--pools", "2", "--name", "morning"]
    code, output = pool("add", *rule, "--cron", "CRON_TZ=Asia/Shanghai 0 0 25 * * 1-5")
    assert code == 2 and "--cron: hour: 25 is above the maximum 23" in output
    code, output = pool(
        "add", *rule, "--cron", "CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5", "--tpu-type", "trillium"
    )
    assert (code, output) == (
        0,
        "added morning: 2 pool(s) of v6e 2x4 on edge-a, CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5",
    )
    assert pool("add", *rule, "--cron", "CRON_TZ=UTC 0 0 9 * * *")[0] == 1  # the name is taken
    code, output = pool("list")
    assert code == 0 and output.startswith("morning edge-a 2x4 pools=2") and "next=" in output
    assert pool("remove", "morning") == (0, "removed morning")
    assert pool("remove", "morning")[0] == 1
