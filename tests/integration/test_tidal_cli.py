"""`falcon tidal ...` as a user runs it: subprocesses from an empty folder, no FALCON_/PREFECT_ variables
beyond the home and the emulator's address.

We test: `next` prints the coming fires with the zone's offset and refuses a bad rule naming its
field (exit 2); `apply` creates an object on a registered cluster and prints the API server's CEL
refusal of a bad one (exit 1); `list` and `status` show what the controller wrote.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.session import session_scope
from falcon.bootstrap import Gateways
from falcon.settings import Settings
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, clean_env
from tests.integration.test_tidal_controller import (
    EVERY_2_SECONDS,
    ROOT,
    controller_running,
    install_tidal,
    status_of,
    tidal_object,
    wait_for,
)

FALCON = str(Path(sys.executable).with_name("falcon"))


def falcon(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FALCON, *args], cwd=folder, env=clean_env(**env), capture_output=True, text=True, timeout=60
    )


def test_next_prints_the_coming_fires_and_refuses_a_bad_rule_naming_its_field(tmp_path: Path) -> None:
    weekdays = "CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5"
    done = falcon(tmp_path, "tidal", "next", weekdays, "--after", "2026-03-06T02:00:00+00:00", "--count", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [  # Friday 10:00 in Shanghai: next Monday to Wednesday
        "2026-03-09T09:00:00+08:00",
        "2026-03-10T09:00:00+08:00",
        "2026-03-11T09:00:00+08:00",
    ]

    refused = falcon(tmp_path, "tidal", "next", "CRON_TZ=UTC 0 0 25 * * *")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "falcon tidal next: hour: 25 is above the maximum 23 (in 'CRON_TZ=UTC 0 0 25 * * *')"
    )


def test_apply_list_and_status_on_a_registered_cluster(tmp_path: Path, emulator: EmulatorServer) -> None:
    home = tmp_path / ".falcon"
    env = {"FALCON_HOME": str(home), "FALCON_EMULATOR_URL": emulator.url}
    settings = Settings(home=home, emulator_url=emulator.url, tidal_watch_seconds=2)
    register(settings.resolved_database_url)
    install_tidal(settings, crd=False)
    good = tidal_object("tide", [{"name": "tick", "cron": EVERY_2_SECONDS, "replicas": 3}])
    bad = tidal_object("no-zone", [{"name": "tick", "cron": "0 0 9 * * *", "replicas": 3}])
    crd = yaml.safe_load((ROOT / "infra/tidal-scheduler/crd.yaml").read_text())
    (tmp_path / "tides.yaml").write_text(yaml.safe_dump_all([good, bad, crd]))  # the CRD goes first

    applied = falcon(tmp_path, "tidal", "apply", "-f", "tides.yaml", "--cluster", "edge-a", **env)

    assert applied.returncode == 1  # one of the three was refused
    assert applied.stdout.splitlines() == [
        "customresourcedefinition tidalschedulers.scheduling.tidal.io created",
        "tidalscheduler production/tide created",
    ]
    assert applied.stderr.startswith("falcon tidal apply: production/no-zone refused: ")
    assert "cron must start with CRON_TZ=<IANA zone>" in applied.stderr

    api = Gateways(settings).tidal(CLUSTER)
    with controller_running(settings):  # the controller writes status; the CLI shows it
        wait_for(lambda: status_of(api, "tide").get("desiredReplicas"))
    listing = falcon(tmp_path, "tidal", "list", "--cluster", "edge-a", **env)
    status = falcon(tmp_path, "tidal", "status", "tide", "--namespace", "production", **env)

    header, row = listing.stdout.splitlines()
    assert header.split() == [
        "CLUSTER",
        "NAMESPACE",
        "NAME",
        "DESIRED",
        "ACTIVE",
        "RULE",
        "NEXT",
        "TRIGGER",
        "READY",
    ]
    assert row.split()[:5] == ["edge-a", "production", "tide", "3", "tick"] and row.split()[-1] == "True"
    lines = status.stdout.splitlines()
    assert lines[:2] == [
        "TidalScheduler production/tide on cluster edge-a",
        "target: Deployment production/web",
    ]
    assert "  desiredReplicas: 3" in lines and "  activeRule: tick" in lines
    assert f"  tick: 3 replicas at {EVERY_2_SECONDS!r}" in lines
    (fires,) = [line for line in lines if line.startswith("    next: ")]
    assert len(fires.split(", ")) == 3


def register(url: str) -> None:
    """The registry as `falcon cluster add edge-a ...` leaves it (done in-process: one start less)."""
    upgrade(url)
    with session_scope(url) as session:
        repo.add_cluster(session, CLUSTER, utc_now())
