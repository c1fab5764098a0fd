"""The reads of `falcon cluster check` the emulator answers as Google documents them: Resource Manager's
``projects.testIamPermissions``, Cloud Storage's ``buckets.getIamPolicy`` (plain REST, as the API is
called) and Compute's ``machineTypes.get`` (the official client)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import compute_v1, container_v1

from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer

CONFIG = {
    "tpuZones": {"tpu7x-standard-4t": ["us-central1-c", "us-east5-a"]},
    "projects": {
        "open": {
            "buckets": {
                "logs-open": {"writers": ["serviceAccount:open.svc.id.goog[falcon-jobs/falcon-job]"]}
            },
            "clusters": {"edge": {"location": "us-east5", "zones": ["us-east5-b"]}},
        },
        "narrow": {
            "iamPermissions": ["container.clusters.get", "compute.reservations.get"],
            "buckets": {"logs-narrow": {}},
        },
        "none": {"iamPermissions": []},
    },
}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig.from_dict(CONFIG), tmp_path_factory.mktemp("check-apis")) as server:
        yield server


@pytest.fixture(scope="module")
def session() -> AuthorizedSession:
    return AuthorizedSession(AnonymousCredentials())  # type: ignore[no-untyped-call]


def ask_iam(emulator: EmulatorServer, session: AuthorizedSession, project: str, asked: list[str]) -> Any:
    url = f"{emulator.url}/v1/projects/{project}:testIamPermissions"
    return session.post(url, json={"permissions": asked}, timeout=10)  # type: ignore[no-untyped-call]


ASKED = ["container.clusters.get", "container.jobs.create", "storage.buckets.getIamPolicy"]


@pytest.mark.parametrize(
    ("project", "held"),
    [
        pytest.param("open", {"permissions": ASKED}, id="no grants configured: every permission asked"),
        pytest.param("narrow", {"permissions": ["container.clusters.get"]}, id="the configured subset"),
        pytest.param("none", {}, id="none held: proto3 JSON leaves the empty list out"),
    ],
)
def test_test_iam_permissions_answers_the_held_subset(
    emulator: EmulatorServer, session: AuthorizedSession, project: str, held: dict[str, Any]
) -> None:
    answer = ask_iam(emulator, session, project, ASKED)
    assert answer.status_code == 200 and answer.json() == held


@pytest.mark.parametrize(
    ("project", "asked", "status", "message"),
    [
        pytest.param("open", ["container.*"], 400, "Permission container.* is not valid.", id="wildcard"),
        pytest.param("elsewhere", ASKED, 403, "The caller does not have permission", id="unknown project"),
    ],
)
def test_test_iam_permissions_refusals(
    emulator: EmulatorServer,
    session: AuthorizedSession,
    project: str,
    asked: list[str],
    status: int,
    message: str,
) -> None:
    answer = ask_iam(emulator, session, project, asked)
    assert answer.status_code == status
    assert answer.json()["error"]["message"] == message


def test_the_gke_routes_are_not_taken_by_resource_manager(emulator: EmulatorServer) -> None:
    gke = container_v1.ClusterManagerClient(
        transport="rest", credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator.url}
    )
    assert gke.get_cluster(name="projects/open/locations/us-east5/clusters/edge").name == "edge"


def test_bucket_iam_policy_binds_the_writers(emulator: EmulatorServer, session: AuthorizedSession) -> None:
    policy = session.get(f"{emulator.url}/storage/v1/b/logs-open/iam", timeout=10).json()  # type: ignore[no-untyped-call]
    assert policy["kind"] == "storage#policy" and policy["resourceId"] == "projects/_/buckets/logs-open"
    assert policy["bindings"] == [
        {
            "role": "roles/storage.objectUser",
            "members": ["serviceAccount:open.svc.id.goog[falcon-jobs/falcon-job]"],
        }
    ]
    empty = session.get(f"{emulator.url}/storage/v1/b/logs-narrow/iam", timeout=10).json()  # type: ignore[no-untyped-call]
    assert empty["bindings"] == []


def test_an_unknown_bucket_is_not_found(emulator: EmulatorServer, session: AuthorizedSession) -> None:
    answer = session.get(f"{emulator.url}/storage/v1/b/nobody/iam", timeout=10)  # type: ignore[no-untyped-call]
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert (
        error["message"] == "The specified bucket does not exist."
        and error["errors"][0]["reason"] == "notFound"
    )


@pytest.mark.parametrize(
    ("zone", "machine", "offered"),
    [
        pytest.param("us-east5-b", "ct6e-standard-4t", True, id="v6e where documented"),
        pytest.param("us-east5-c", "ct6e-standard-4t", False, id="v6e where not"),
        pytest.param("us-east5-a", "tpu7x-standard-4t", True, id="tpuZones override adds a zone"),
        pytest.param("us-east5-b", "e2-standard-4", True, id="a general-purpose type anywhere"),
        pytest.param("us-east5-b", "ct9-made-up-4t", False, id="an uncatalogued TPU name"),
    ],
)
def test_machine_types_get(emulator: EmulatorServer, zone: str, machine: str, offered: bool) -> None:
    client = compute_v1.MachineTypesClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator.url}
    )
    if offered:
        found = client.get(project="open", zone=zone, machine_type=machine)
        assert found.name == machine and found.zone == zone
    else:
        with pytest.raises(
            gexc.NotFound, match=f"projects/open/zones/{zone}/machineTypes/{machine}' was not found"
        ):
            client.get(project="open", zone=zone, machine_type=machine)
