"""Configuration loading and the built-in default."""

from __future__ import annotations

from pathlib import Path

from falcon_emulator.config import EmulatorConfig


def test_built_in_default_has_two_clusters_in_two_projects_and_a_v6e_reservation() -> None:
    config = EmulatorConfig.load(None)
    assert config.node_pool_provision_seconds == 3
    a, b = config.projects["tpu-project-a"], config.projects["tpu-project-b"]
    assert a.clusters["edge-a"].location == "us-east5" and b.clusters["edge-b"].location == "us-central1"
    assert a.clusters["edge-a"].flex_start.available and a.clusters["edge-a"].flex_start.delay_seconds == 2
    reservation = a.reservations["res-v6e"]
    assert (reservation.zone, reservation.machine_type, reservation.count) == (
        "us-east5-b",
        "ct6e-standard-4t",
        8,
    )
    assert b.reservations == {}


def test_yaml_file_with_unknown_keys_loads_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "emu.yaml"
    path.write_text(
        "nodePoolProvisionSeconds: 1\nfutureKnob: 3\nprojects:\n  p:\n    clusters:\n"
        "      c: {location: us-east5, flexStart: {available: false}, extra: 1}\n"
    )
    config = EmulatorConfig.load(path)
    assert config.node_pool_provision_seconds == 1 and config.pod_start_seconds == 0.5
    assert config.reject_concurrent_operations
    assert config.projects["p"].clusters["c"].flex_start.available is False
