"""Configuration loading and the built-in default."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

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
    assert a.clusters["edge-a"].zones == ["us-east5-a", "us-east5-b", "us-east5-c"]
    assert b.clusters["edge-b"].zones == ["us-central1-a", "us-central1-b", "us-central1-c"]
    assert config.gke_version == "1.34.1-gke.1829001" and config.tpu_zones == {}


def test_yaml_file_with_unknown_keys_loads_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "emu.yaml"
    path.write_text(
        "nodePoolProvisionSeconds: 1\nfutureKnob: 3\nprojects:\n  p:\n    clusters:\n"
        "      c: {location: us-east5, flexStart: {available: false}, extra: 1,\n"
        "          gkeVersion: 1.33.0-gke.1712000}\n"
        "    reservations:\n"
        "      r: {zone: us-east5-b, machineType: ct6e-standard-4t, count: 2, shareWith: [q]}\n"
        "tpuZones: {ct6e-standard-4t: [us-east5-c]}\n"
    )
    config = EmulatorConfig.load(path)
    assert config.node_pool_provision_seconds == 1 and config.pod_start_seconds == 0.5
    assert config.node_pool_operations_per_cluster == 5  # GKE: one operation per node pool
    assert config.projects["p"].clusters["c"].flex_start.available is False
    assert config.projects["p"].clusters["c"].gke_version == "1.33.0-gke.1712000"
    reservation = config.projects["p"].reservations["r"]
    assert (reservation.status, reservation.share_with) == ("READY", ["q"])
    assert config.tpu_zones == {"ct6e-standard-4t": ["us-east5-c"]}


def test_a_gke_version_the_rules_cannot_compare_is_refused_at_load() -> None:
    with pytest.raises(ValidationError, match="not a GKE version"):
        EmulatorConfig.from_dict(
            {"projects": {"p": {"clusters": {"c": {"location": "x", "gkeVersion": "1.33"}}}}}
        )
