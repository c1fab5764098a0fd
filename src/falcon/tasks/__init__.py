"""Prefect tasks: one service step each, retried only when the error says retrying can help."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run
from prefect.tasks import exponential_backoff

from falcon.adapters.db.repository import Phase
from falcon.bootstrap import gateways
from falcon.domain.errors import TemporaryError
from falcon.services import acquisition, release
from falcon.services.context import Outcome, Services, TaskView, load_task
from falcon.settings import get_settings


def retry_on_temporary(_task: Any, _run: Any, state: Any) -> bool:
    """Retry a failed task run only for TemporaryError (429, 5xx, GKE busy), never for the rest."""
    try:
        state.result()
    except TemporaryError:
        return True
    except Exception:
        return False
    return False


def services() -> Services:
    return Services(get_settings(), gateways())


_RETRIES: dict[str, Any] = {
    "retries": 5,
    "retry_delay_seconds": exponential_backoff(2),
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": retry_on_temporary,
    "cache_policy": NO_CACHE,
}


@task(name="provision-node-pool", **_RETRIES)
def provision_node_pool(task_id: str) -> str:
    svc = services()
    return acquisition.provision(svc, acquisition_view(svc, task_id), final_attempt=_final_attempt())


def _final_attempt() -> bool:
    """True on the last run Prefect will make of the current task (retries exhausted after it)."""
    return int(task_run.run_count) > int(_RETRIES["retries"])


@task(name="wait-node-pool-ready", **_RETRIES)
def wait_node_pool_ready(task_id: str, pool: str, started_iso: str) -> None:
    svc = services()
    acquisition.wait_pool_ready(
        svc, acquisition_view(svc, task_id), pool, datetime.fromisoformat(started_iso)
    )


@task(name="submit-job", **_RETRIES)
def submit_job(task_id: str, pool: str) -> str:
    svc = services()
    return acquisition.dispatch(svc, acquisition_view(svc, task_id), pool)


@task(name="wait-pods-running", **_RETRIES)
def wait_pods_running(task_id: str, job_name: str) -> int:
    svc = services()
    return acquisition.wait_pods_running(svc, acquisition_view(svc, task_id), job_name)


@task(name="mark-running", **_RETRIES)
def mark_running(task_id: str, running: int) -> None:
    svc = services()
    acquisition.mark_running(svc, acquisition_view(svc, task_id), running)


@task(name="record-outcome", **_RETRIES)
def record_outcome(task_id: str, outcome: Outcome) -> bool:
    return release.record_outcome(
        services(), task_id, outcome, [Phase.ACQUIRING, Phase.RUNNING], released_inline=True
    )


@task(name="release-task", **_RETRIES)
def release_task(task_id: str) -> str:
    return release.release(services(), task_id).status.value


def acquisition_view(svc: Services, task_id: str) -> TaskView:
    return load_task(svc, task_id)
