"""Orphan sweeps of Kubernetes objects: a Job whose task ended comes back when a create the
client gave up on reaches the API server after the release deleted it (found by the chaos run's
slow responses); the sweep deletes it, and never a live task's Job."""

from __future__ import annotations

from tests.unit.fakes import clusters_of, k8s_of, running

from falcon.domain.errors import TemporaryError
from falcon.domain.model import k8s_job_name_for
from falcon.domain.status import Status
from falcon.services import reconcile
from falcon.services.context import Services
from falcon.services.release import release


def test_a_job_whose_task_ended_is_deleted_and_a_live_tasks_job_is_kept(svc: Services) -> None:
    running(svc, "t-live")
    running(svc, "t-ended", "2x4")
    k8s = k8s_of(svc)
    late = k8s.job(k8s_job_name_for("t-ended"))
    late.script.complete = True
    assert reconcile.follow_running(svc, clusters_of(svc)).ended == ["t-ended"]
    assert release(svc, "t-ended").status is Status.SUCCEEDED
    k8s.create_job(late.namespace, late.manifest)  # the late create lands after the release
    assert reconcile.delete_orphan_jobs(svc, clusters_of(svc)) == [k8s_job_name_for("t-ended")]
    assert [j.name for j in k8s.jobs.values()] == [k8s_job_name_for("t-live")]


def test_a_job_of_a_task_unknown_here_is_deleted(svc: Services) -> None:
    running(svc, "t-gone")
    svc.store.rows.pop("t-gone")  # type: ignore[attr-defined]  # the database lost the row
    assert reconcile.delete_orphan_jobs(svc, clusters_of(svc)) == [k8s_job_name_for("t-gone")]
    assert k8s_of(svc).jobs == {}


def test_a_job_the_api_would_not_delete_is_swept_by_the_next_sweep_and_reported_once(
    svc: Services,
) -> None:
    running(svc, "t-gone")
    svc.store.rows.pop("t-gone")  # type: ignore[attr-defined]
    k8s = k8s_of(svc)
    k8s.delete_failures.append(TemporaryError("503 Service Unavailable"))
    assert reconcile.delete_orphan_jobs(svc, clusters_of(svc)) == []
    assert reconcile.delete_orphan_jobs(svc, clusters_of(svc)) == [k8s_job_name_for("t-gone")]
    assert k8s.jobs == {}


def test_a_job_listed_after_it_was_deleted_is_not_reported_again(svc: Services) -> None:
    """A watch's cache may list a Job for a moment after its deletion: its delete answers 404."""
    running(svc, "t-gone")
    svc.store.rows.pop("t-gone")  # type: ignore[attr-defined]
    k8s = k8s_of(svc)
    stale = list(k8s.jobs.values())
    assert reconcile.delete_orphan_jobs(svc, clusters_of(svc)) == [k8s_job_name_for("t-gone")]
    k8s.list_jobs = lambda namespace, selector: [j.state() for j in stale]  # type: ignore[method-assign]
    assert reconcile.delete_orphan_jobs(svc, clusters_of(svc)) == []
    assert k8s.count("delete_job") == 2
