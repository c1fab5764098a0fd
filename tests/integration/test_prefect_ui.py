"""The Prefect UI as the run history, against a real Prefect server: a task's runs carry its tags,
a queue's slot goes by a name a person recognises (and a slot an earlier Falcon named by the
cluster's id is renamed with its held lease), and the dispatcher's view is a table artifact
under one key, attached to the dispatcher's flow run."""

from __future__ import annotations

import time
from dataclasses import replace
from uuid import UUID, uuid4

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterTags,
    TaskRunFilter,
    TaskRunFilterFlowRunId,
)
from prefect.client.schemas.sorting import ArtifactSort
from prefect.context import FlowRunContext

from falcon.adapters import slots
from falcon.adapters.artifacts import VIEW_KEY, ViewArtifact
from falcon.adapters.db import repository as repo
from falcon.adapters.db.session import session_scope
from falcon.adapters.slots import PrefectSlots, SlotNames
from falcon.domain.lifecycle import Phase
from falcon.domain.model import QueueKey, queue_label, slot_label
from falcon.domain.pool_economics import DeleteEachPolicy
from falcon.services.context import Services
from falcon.services.dispatching import Dispatcher
from tests.integration.harness import CLUSTER, Driver, submit
from tests.integration.test_scheduling_flows import NoRuns

LABEL = queue_label(CLUSTER, "2x4")


def test_a_tasks_runs_are_found_by_its_tag_and_carry_actor_cluster_and_queue_their_steps_no_tags(
    services: Services, db_url: str
) -> None:
    task = f"t-{uuid4().hex[:8]}"  # the Prefect server outlives the test: a name of its own
    submit(db_url, task, "alice", "2x4")
    # Its pool is deleted, so it has a release run (a kept pool's task is finished by the round).
    Driver(replace(services, keep_policy=DeleteEachPolicy())).run_until_done([task])
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"task:{task}"]))
        )
        steps = client.read_task_runs(
            task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[r.id for r in runs]))
        )
    assert sorted(r.name for r in runs) == [f"acquire-{task}", f"release-{task}"]
    for run in runs:
        assert {f"task:{task}", "actor:alice", f"cluster:{CLUSTER.name}", f"queue:{LABEL}"} <= set(run.tags)
    # Its steps are under it, untagged: a task run's tags are concurrency limits in Prefect 3,
    # two more API calls per step (falcon.adapters.runs.tag_run).
    assert any(s.name.startswith("provision-node-pool") for s in steps)
    assert all(not s.tags for s in steps)


def test_a_queue_slot_is_named_by_cluster_topology_project_and_location(
    services: Services, db_url: str
) -> None:
    submit(db_url, "t-slot", "alice", "2x4")
    Driver(services).run_until_done(["t-slot"])
    with get_client(sync_client=True) as client:
        names = {limit.name for limit in client.read_global_concurrency_limits(limit=200, offset=0)}
    assert slot_label(CLUSTER, "2x4") in names
    assert QueueKey(CLUSTER.id, "2x4").slot_name not in names


def test_a_slot_named_by_an_earlier_falcon_is_renamed_with_its_held_lease(services: Services) -> None:
    key = QueueKey(CLUSTER.id, "2x4").slot_name
    slots.ensure_limit(key)  # as Falcon named slots before labels
    held = slots.try_acquire(key, 600)
    assert held is not None
    named = PrefectSlots(SlotNames(services.store.clusters))
    assert named.try_acquire(key, 60) is None  # renamed on first use: still held by the old lease
    with get_client(sync_client=True) as client:
        renamed = client.read_global_concurrency_limit_by_name(slot_label(CLUSTER, "2x4"))
        assert renamed.active_slots == 1
        assert key not in {limit.name for limit in client.read_global_concurrency_limits(limit=200, offset=0)}
    named.release(held)  # the lease taken under the old name frees the renamed slot
    assert named.try_acquire(key, 60) is not None


def test_the_dispatcher_publishes_its_view_as_a_table_artifact_of_its_run(
    services: Services, db_url: str
) -> None:
    submit(db_url, "v1", "alice", "2x4")
    submit(db_url, "v2", "bob", "2x4")
    viewing = services.settings.model_copy(update={"view_seconds": 10.0})
    dispatcher = Dispatcher(replace(services, launcher=NoRuns(), settings=viewing), publish=ViewArtifact())  # type: ignore[arg-type]

    @flow(name="dispatcher-view-test")
    def picks_then_housekeeping() -> UUID:
        # A busy Prefect may refuse the slot at one pick (fail-fast); the next pick asks again.
        for _ in range(50):
            dispatcher.pick_tick()
            if phase(db_url, "v1") is Phase.ACQUIRING:
                break
            time.sleep(0.1)
        dispatcher.housekeep()  # the turn that builds and publishes the view
        context = FlowRunContext.get()
        assert context is not None and context.flow_run is not None
        return context.flow_run.id

    run_id = picks_then_housekeeping()
    with get_client(sync_client=True) as client:
        (latest,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[VIEW_KEY])),
            sort=ArtifactSort.CREATED_DESC,
            limit=1,
        )
    assert latest.flow_run_id == run_id and latest.type == "table"
    (row,) = [r for r in _rows(latest.data) if r["queue"] == LABEL]
    assert (row["acquiring"], row["next"]) == ("v1", "1. v2 (bob)")
    assert row["reservation room"].startswith("res-a: ") and row["reservation room"].endswith(" nodes free")


def phase(db_url: str, task_id: str) -> Phase | None:
    with session_scope(db_url) as s:
        progress = repo.get_progress(s, task_id)
    return None if progress is None else progress.phase


def _rows(data: object) -> list[dict[str, str]]:
    import json

    rows = json.loads(data) if isinstance(data, str) else data
    assert isinstance(rows, list)
    return rows
