"""Per-task flows: ``task_lifecycle`` acquires (holds the queue slot), ``task_release`` finishes.

task_lifecycle: load the task once → provision node pool → wait until it is ready → submit Job →
wait for all pods Running → Running; the queue slot (a Prefect global concurrency limit lease)
is released as soon as the pods run or the task ends. It never waits for the Job to finish: the
dispatcher follows running Jobs.
task_release: delete the Job, keep or delete the node pool, write the terminal status.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from falcon.adapters.runs import tag_run
from falcon.bootstrap import services
from falcon.domain.lifecycle import RunStopped, RunSuperseded, TaskEnded
from falcon.services.lease import held_lease
from falcon.tasks import (
    load_task,
    mark_running,
    provision_node_pool,
    record_outcome,
    release_task,
    retried,
    submit_job,
    task_tags,
    wait_node_pool_ready,
    wait_pods_running,
)


@flow(name="task-lifecycle", flow_run_name="acquire-{task_id}")
def task_lifecycle(task_id: str, lease_id: str = "") -> str:
    logger = get_run_logger()
    svc = services()
    with held_lease(lease_id, svc.settings.slot_lease_seconds, svc.slots):
        tag_run(task_tags(task_id))
        try:
            started = svc.clock.now().isoformat()
            view = load_task(task_id, lease_id)
            choice = retried(provision_node_pool, svc.settings.node_pool_retry)(view)
            logger.info("event=pool_chosen task_id=%s pool=%s", task_id, choice.name)
            pool = wait_node_pool_ready(view, choice, started)
            job = retried(submit_job, svc.settings.job_retry)(view, pool)
            logger.info("event=job_submitted task_id=%s job=%s", task_id, job)
            running = wait_pods_running(view, job)
            mark_running(view, running)
            logger.info("event=running task_id=%s pods=%s", task_id, running)
            return "Running"
        except RunStopped:
            logger.info("event=run_stopped task_id=%s", task_id)
            return "Stopped"
        except RunSuperseded as superseded:
            logger.info("event=run_superseded task_id=%s detail=%s", task_id, superseded)
            return "Superseded"
        except TaskEnded as ended:
            logger.info("event=task_ended task_id=%s outcome=%s", task_id, ended)
            record_outcome(task_id, ended.outcome)
            return retried(release_task, svc.settings.release_retry)(task_id)


@flow(name="task-release", flow_run_name="release-{task_id}")
def task_release(task_id: str) -> str:
    tag_run(task_tags(task_id))
    try:
        status = retried(release_task, services().settings.release_retry)(task_id)
    except RunStopped:
        get_run_logger().info("event=run_stopped task_id=%s", task_id)
        return "Stopped"
    get_run_logger().info("event=released task_id=%s status=%s", task_id, status)
    return status
