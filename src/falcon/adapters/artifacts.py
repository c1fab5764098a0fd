"""The dispatcher's view in the Prefect UI: a table artifact under one key, so the Artifacts page
shows the latest (and the dispatcher run's page its own) one click away."""

from __future__ import annotations

from prefect.artifacts import create_table_artifact

from falcon.adapters.metrics import prefect_call
from falcon.domain.dispatcher_view import DispatcherView

VIEW_KEY = "falcon-queues"
NOTHING = [{"queue": "no queue has a waiting task, an acquiring task or a node pool"}]


class ViewArtifact:
    """Publishes a view's table when it differs from the last one this dispatcher run published;
    a dispatcher run publishes at its first view, so each run's page has one."""

    def __init__(self) -> None:
        self._last: list[dict[str, str]] | None = None

    def __call__(self, view: DispatcherView) -> None:
        table = view.table() or NOTHING
        if table != self._last:
            _publish(table)
            self._last = table


@prefect_call
def _publish(table: list[dict[str, str]]) -> None:
    create_table_artifact(
        table=table,
        key=VIEW_KEY,
        description="Falcon's queues: waiting tasks in pick order, the acquiring task, node pools by"
        " state, and each cluster's running tasks and reservation room.",
    )
