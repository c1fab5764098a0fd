"""What every service step needs: the database, the adapters, the settings and a clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.bootstrap import Gateways
from falcon.domain.errors import PermanentError
from falcon.domain.model import Cluster, Task, TaskSpec
from falcon.domain.status import Reason, Status
from falcon.domain.topology import SliceShape, resolve_shape
from falcon.settings import Settings

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Outcome:
    """How a task ends; written to the row once Job and node pool are dealt with."""

    status: Status
    reason: Reason | None = None
    message: str = ""


class TaskEnded(Exception):
    """Acquisition stops here: the task failed, timed out or was aborted."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(f"{outcome.status} {outcome.reason or ''} {outcome.message}".strip())
        self.outcome = outcome


@dataclass(frozen=True)
class Services:
    settings: Settings
    gateways: Gateways
    clock: Clock = utc_now

    @contextmanager
    def db(self) -> Iterator[Session]:
        with session_scope(self.settings.resolved_database_url) as session:
            yield session


@dataclass(frozen=True)
class TaskView:
    """A task with everything resolved that its steps need."""

    task: Task
    spec: TaskSpec
    shape: SliceShape
    cluster: Cluster


def load_task(services: Services, task_id: str) -> TaskView:
    with services.db() as session:
        task = repo.get_task(session, task_id)
        if task is None or task.cluster_id is None:
            raise PermanentError(f"task {task_id} is not queued on any cluster")
        cluster = repo.get_cluster(session, task.cluster_id)
    if cluster is None:
        raise PermanentError(f"cluster {task.cluster_id} of task {task_id} is not registered")
    spec = TaskSpec.parse(task.spec)
    return TaskView(task, spec, resolve_shape(task.tpu_type, spec.topology), cluster)
