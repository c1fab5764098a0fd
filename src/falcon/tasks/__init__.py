"""Prefect tasks: one service step each.

Each wait has one owner. Steps that make single calls (provision, submit, release) are retried
by Prefect on TemporaryError (429, 5xx, resets, timeouts, GKE busy), with exponential backoff
and jitter configured per kind of call (``retried`` with a ``RetryPolicy`` of the settings),
and never for anything else. Steps that poll (pool ready, pods running) own their waits in a
loop on the clock port until their deadline, so Prefect does not retry them on top.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from falcon.bootstrap import services
from falcon.domain.errors import TemporaryError
from falcon.domain.lifecycle import Outcome, Phase, TaskView
from falcon.domain.model import QueueKey, run_tags
from falcon.services import acquisition, release, warming
from falcon.services.acquisition import PoolChoice
from falcon.services.context import load_attempt
from falcon.settings import RetryPolicy

P = ParamSpec("P")
R = TypeVar("R")
JITTER = 0.5  # Prefect's clamped-Poisson jitter: each delay varies by up to half of it


def retry_on_temporary(_task: Any, _run: Any, state: Any) -> bool:
    """Retry a failed task run only for TemporaryError, never for the rest."""
    try:
        state.result()
    except TemporaryError:
        return True
    except Exception:
        return False
    return False


def retried(step: Task[P, R], policy: RetryPolicy) -> Task[P, R]:
    """``step`` retried on TemporaryError as ``policy`` says. Prefect reads retry options from the
    task object, so the flows apply the settings per call instead of at import."""
    return step.with_options(
        retries=policy.tries - 1,
        retry_delay_seconds=policy.delays(),
        retry_jitter_factor=JITTER,
        retry_condition_fn=retry_on_temporary,
    )


_ONCE: dict[str, Any] = {"cache_policy": NO_CACHE}


@task(name="load-task", **_ONCE)
def load_task(task_id: str, lease_id: str) -> TaskView:
    return load_attempt(services(), task_id, lease_id)


@task(name="provision-node-pool", **_ONCE)
def provision_node_pool(view: TaskView) -> PoolChoice:
    return acquisition.provision(services(), view, final_attempt=_final_attempt())


def _final_attempt() -> bool:
    """True on the last run Prefect will make of the current task (retries exhausted after it)."""
    context = TaskRunContext.get()
    return context is not None and context.task_run.run_count > context.task.retries


@task(name="wait-node-pool-ready", **_ONCE)
def wait_node_pool_ready(view: TaskView, choice: PoolChoice, started_iso: str) -> str:
    return acquisition.wait_pool_ready(services(), view, choice, datetime.fromisoformat(started_iso))


@task(name="submit-job", **_ONCE)
def submit_job(view: TaskView, pool: str) -> str:
    return acquisition.dispatch(services(), view, pool)


@task(name="wait-pods-running", **_ONCE)
def wait_pods_running(view: TaskView, job_name: str) -> int:
    return acquisition.wait_pods_running(services(), view, job_name)


@task(name="mark-running", **_ONCE)
def mark_running(view: TaskView, running: int) -> None:
    acquisition.mark_running(services(), view, running)


@task(name="record-outcome", **_ONCE)
def record_outcome(task_id: str, outcome: Outcome) -> bool:
    return release.record_outcome(
        services(), task_id, outcome, [Phase.ACQUIRING, Phase.RUNNING], released_inline=True
    )


@task(name="release-task", **_ONCE)
def release_task(task_id: str) -> str:
    return release.release(services(), task_id).status.value


@task(name="plan-warm-pools", **_ONCE)
def plan_warm_pools(cluster_id: str, topology: str) -> list[str]:
    return warming.plan_warm_pools(services(), QueueKey(cluster_id, topology))


@task(name="create-warm-pools", **_ONCE)
def create_warm_pools(cluster_id: str, topology: str, names: list[str]) -> list[str]:
    return warming.create_warm_pools(services(), QueueKey(cluster_id, topology), names)


def task_tags(task_id: str) -> list[str]:
    """The tags of a task's runs, from its row, cluster and queue as far as they are known."""
    task, cluster, progress = services().store.task_view_rows(task_id)
    topology = progress.queue.topology if progress and progress.queue else None
    return run_tags(task_id, task.actor if task else None, cluster, topology)


def queue_tags(cluster_id: str, topology: str) -> list[str]:
    """The tags of a queue's warm-pool runs: ``cluster:`` and ``queue:`` as a task's runs have."""
    cluster = next((c for c in services().store.clusters() if c.id == cluster_id), None)
    return [tag for tag in run_tags("", None, cluster, topology) if not tag.startswith("task:")]
