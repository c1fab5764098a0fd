"""A shared emulator (small delays) and the official clients pointed at it over plain HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from emu_helpers import LOCATION, PROJECT, TEST_CONFIG, Kube, create_pool, tpu_pool
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1, container_v1
from kubernetes import client as k8s

from falcon_emulator.config import EmulatorConfig
from falcon_emulator.server import EmulatorServer


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("emulator-data")


@pytest.fixture(scope="session")
def emulator(data_dir: Path) -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig.from_dict(TEST_CONFIG), data_dir) as server:
        yield server


@pytest.fixture(scope="session")
def gke(emulator: EmulatorServer) -> container_v1.ClusterManagerClient:
    return container_v1.ClusterManagerClient(
        transport="rest", credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator.url}
    )


@pytest.fixture(scope="session")
def reservations(emulator: EmulatorServer) -> compute_v1.ReservationsClient:
    return compute_v1.ReservationsClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator.url}
    )


@pytest.fixture(scope="session")
def policies(emulator: EmulatorServer) -> compute_v1.ResourcePoliciesClient:
    return compute_v1.ResourcePoliciesClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator.url}
    )


@pytest.fixture(scope="session")
def kube_for(emulator: EmulatorServer) -> Callable[..., Kube]:
    def make(cluster: str, location: str = LOCATION) -> Kube:
        path = f"/k8s/{PROJECT}/{location}/{cluster}"
        api = k8s.ApiClient(k8s.Configuration(host=emulator.url + path))
        return Kube(api, k8s.CoreV1Api(api), k8s.BatchV1Api(api), path)

    return make


@pytest.fixture(scope="session")
def work(gke: container_v1.ClusterManagerClient, kube_for: Callable[[str], Kube]) -> Kube:
    """Cluster 'work': a 2-node v6e 2x4 slice, two 1-chip v6e nodes and one CPU node."""
    create_pool(gke, "work", tpu_pool("v6e-2x4", nodes=2, topology="2x4"))
    create_pool(gke, "work", tpu_pool("v6e-1t", machine_type="ct6e-standard-1t", nodes=2))
    create_pool(gke, "work", tpu_pool("cpu", machine_type="e2-standard-4", nodes=1))
    return kube_for("work")


@pytest.fixture
def namespace(work: Kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    work.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    work.core.delete_namespace(name)
