"""The FastAPI application: GKE, Compute, per-cluster Kubernetes APIs and admin routes on one port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from falcon_emulator import admin_api, compute_api, gke_api, iam_api, k8s_api, storage_api
from falcon_emulator.config import EmulatorConfig
from falcon_emulator.fault_injection import FaultInjection
from falcon_emulator.kubelet import stop_processes
from falcon_emulator.nodepools import add_standing_pools
from falcon_emulator.simulation import run_loop
from falcon_emulator.state import EmulatorState
from falcon_emulator.store import KubeStore
from falcon_emulator.util import JSON

_BASE_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _seed(state: EmulatorState) -> None:
    for cluster in state.clusters.values():
        add_standing_pools(state, cluster)
        for name in _BASE_NAMESPACES:
            namespace: JSON = {
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            cluster.store.add("namespaces", namespace)


def begin_shutdown(state: EmulatorState) -> None:
    """Answer the Kubernetes API as kube-apiserver does once its shutdown delay has passed (429,
    see ``k8s_api``) and end every open watch stream, so that the server stops without waiting for
    clients: a client's watch that reconnected at once would otherwise hold it open."""
    with state.lock:
        state.shutting_down = True
        stores: list[KubeStore] = [c.store for c in state.clusters.values()]
        for store in stores:
            store.close_all_watches()


def create_app(config: EmulatorConfig, data_dir: Path) -> FastAPI:
    state = EmulatorState(config, data_dir)
    _seed(state)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        app.state.loop = asyncio.get_running_loop()
        task = asyncio.create_task(run_loop(state, stop))
        try:
            yield
        finally:
            stop.set()
            begin_shutdown(state)
            await task
            stop_processes(state)

    app = FastAPI(
        title="Falcon GKE/Compute/Kubernetes emulator",
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.emulator = state
    app.add_middleware(FaultInjection, state=state)
    # iam_api before gke_api: GKE's /v1/{path} would take Resource Manager's /v1/projects/P:testIamPermissions
    for module in (admin_api, compute_api, iam_api, gke_api, k8s_api, storage_api):
        app.include_router(module.router)
    return app
