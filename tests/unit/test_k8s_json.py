"""Pods and Events are read as the API server's JSON (camelCase, RFC 3339 strings), not through
the client's models: the fields Falcon's rules need come out as the models gave them."""

from __future__ import annotations

from datetime import UTC, datetime

from falcon.adapters.k8s import _event, _job_state, _pod_state
from falcon.domain.job_manifest import TASK_LABEL


def test_a_pod_stuck_pulling_its_image_and_one_that_failed_say_so() -> None:
    pulling = {
        "metadata": {"name": "train-0-abc", "labels": {TASK_LABEL: "falcon-t1"}},
        "status": {
            "phase": "Pending",
            "startTime": "2026-12-02T03:00:01Z",
            "containerStatuses": [
                {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}},
                {"name": "side", "state": {"waiting": {"reason": "ContainerCreating"}}},
            ],
        },
    }
    pod = _pod_state(pulling)
    assert (pod.name, pod.phase, pod.job_name) == ("train-0-abc", "Pending", "falcon-t1")
    assert (pod.waiting_reason, pod.waiting_message) == ("ImagePullBackOff", "back-off")
    assert pod.started == datetime(2026, 12, 2, 3, 0, 1, tzinfo=UTC)
    failed = {
        "metadata": {"name": "train-1-def"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}},
                {"state": {"terminated": {"exitCode": 0}}},
                {"state": {"terminated": {"exitCode": 2}}},
            ],
        },
    }
    assert _pod_state(failed).terminated == [("OOMKilled", 137), ("Error", 2)]
    assert _pod_state(failed).started is None and _pod_state(failed).job_name is None


def test_an_unschedulable_pod_carries_the_schedulers_message_and_a_bare_pod_is_pending() -> None:
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"},
            ]
        },
    }
    assert _pod_state(pod).unschedulable == "0/3 nodes are available"
    assert _pod_state({"metadata": {"name": "q"}}).phase == "Pending"


def test_an_event_is_dated_by_its_first_timestamp_or_else_its_event_time() -> None:
    core = {
        "involvedObject": {"kind": "Pod", "name": "p", "uid": "u1"},
        "reason": "FailedMount",
        "message": "MountVolume.SetUp failed",
        "firstTimestamp": "2026-12-02T03:00:00Z",
        "eventTime": None,
    }
    event = _event(core)
    assert (event.kind, event.name, event.uid, event.reason) == ("Pod", "p", "u1", "FailedMount")
    assert event.first_seen == datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
    micro = {"involvedObject": {}, "firstTimestamp": None, "eventTime": "2026-12-02T03:00:00.250000Z"}
    assert _event(micro).first_seen == datetime(2026, 12, 2, 3, 0, 0, 250000, tzinfo=UTC)
    assert _event({}).first_seen is None and _event({}).kind == ""


def _job_with(*conditions: tuple[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": "falcon-t1", "annotations": {"falcon.dev/task-id": "t1"}},
        "spec": {"parallelism": 2},
        "status": {
            "succeeded": 2,
            "conditions": [
                {"type": kind, "status": status, "reason": "R", "message": "m"} for kind, status in conditions
            ],
        },
    }


def test_a_job_is_done_from_its_interim_condition_a_sync_before_the_terminal_one() -> None:
    interim = _job_state(_job_with(("SuccessCriteriaMet", "True")))
    assert interim.complete and interim.finished and interim.failed_condition is None
    assert _job_state(_job_with(("SuccessCriteriaMet", "True"), ("Complete", "True"))).complete
    failing = _job_state(_job_with(("FailureTarget", "True")))
    assert not failing.complete and failing.failed_condition == "R: m"
    running = _job_state(_job_with(("SuccessCriteriaMet", "False"), ("Suspended", "False")))
    assert not running.complete and not running.finished
    assert (running.task_id, running.parallelism, running.succeeded) == ("t1", 2, 2)
