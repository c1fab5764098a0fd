"""Falcon's Jobs, pods and Warning events followed by a list and a watch (``ListWatch``), against
the emulator over HTTP through the official client, and ``KubernetesJobs.list_jobs``,
``pods_of_jobs`` and ``warning_events`` answering from it.

We test: the watch is in step after its list and follows a Job created, resumed and deleted; a
resourceVersion too old to resume from (410 Gone) is listed again; a watch nobody asks for stops;
a caller of a starting watch waits for its first list (and lists itself if that list failed, or
fails if it does not come within the call timeout); ``list_jobs`` answers from the watch (without
a probe while the API server speaks on the watch, with one sent beside the caller when it fell
silent), starts the pod and event watches beside it, and still fails when the cluster's API does
not answer, or hangs; ``pods_of_jobs`` answers from the pod watch (a failure of which is logged
once), and ``warning_events`` from the watch of Warning events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from kubernetes import client as k8s
from prometheus_client import REGISTRY

from falcon.adapters import k8s as k8s_adapter
from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.session import session_scope
from falcon.adapters.k8s import KubernetesJobs, _job_state
from falcon.adapters.list_watch import ListWatch
from falcon.bootstrap import Gateways
from falcon.domain.errors import TemporaryError
from falcon.domain.job_manifest import MANAGED_BY, TASK_LABEL
from falcon.domain.workloads import JobState
from falcon.settings import get_settings
from falcon_emulator.server import EmulatorServer
from tests.integration.harness import CLUSTER, inject_fault

NAMESPACE = "falcon-jobs"
SELECTOR = f"managed-by={MANAGED_BY}"
T = TypeVar("T")


@pytest.fixture
def api(emulator: EmulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[k8s.ApiClient]:
    """The emulated cluster edge-a's Kubernetes API, located through GKE as the dispatcher does."""
    url = f"sqlite:///{tmp_path / 'falcon.db'}"
    upgrade(url)
    with session_scope(url) as session:
        repo.add_cluster(session, CLUSTER, utc_now())
    monkeypatch.setenv("FALCON_DATABASE_URL", url)
    monkeypatch.setenv("FALCON_EMULATOR_URL", emulator.url)
    get_settings.cache_clear()
    client = Gateways(get_settings()).kubernetes_api(CLUSTER)
    k8s.CoreV1Api(client).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
    yield client
    get_settings.cache_clear()


def job_manifest(name: str) -> dict[str, Any]:
    """A suspended Job of Falcon's: it starts no pod, so it needs no node pool."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"managed-by": MANAGED_BY}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1"}]}
            },
        },
    }


def watch_of(api: k8s.ApiClient, idle_seconds: float = 10) -> ListWatch[JobState]:
    lister = k8s.BatchV1Api(api).list_namespaced_job
    return ListWatch(lister, "jobs", NAMESPACE, SELECTOR, _job_state, 5, 1, idle_seconds)


def eventually(read: Callable[[], T], holds: Callable[[T], bool], seconds: float = 10) -> T:
    deadline = time.monotonic() + seconds
    while True:
        value = read()
        if holds(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def calls_made(call: str) -> float:
    """Kubernetes API calls of this name answered so far, as falcon_api_calls counts them."""
    labels = {"api": "kubernetes", "call": call, "outcome": "ok"}
    return REGISTRY.get_sample_value("falcon_api_calls_total", labels) or 0.0


def lists_made() -> float:
    """Whole lists of Jobs asked of the API server so far, outside the watch's own."""
    return calls_made("list_jobs")


def answered_from_the_watch(jobs: KubernetesJobs) -> bool:
    before = lists_made()
    jobs.list_jobs(NAMESPACE, SELECTOR)
    return lists_made() == before


def by_name(jobs: list[JobState] | None) -> dict[str, JobState]:
    return {job.name: job for job in jobs or []}


def test_the_watch_follows_a_job_created_resumed_and_deleted(api: k8s.ApiClient) -> None:
    jobs = KubernetesJobs(api, 5)
    uid = jobs.create_job(NAMESPACE, job_manifest("job-before"))
    watch = watch_of(api)

    assert set(by_name(eventually(watch.objects, lambda j: j is not None))) == {"job-before"}

    jobs.create_job(NAMESPACE, job_manifest("job-after"))
    seen = eventually(lambda: by_name(watch.objects()), lambda j: "job-after" in j)
    assert seen["job-after"].suspended

    jobs.resume_job(NAMESPACE, "job-before", uid)
    seen = eventually(lambda: by_name(watch.objects()), lambda j: not j["job-before"].suspended)
    assert not seen["job-before"].suspended

    jobs.delete_job(NAMESPACE, "job-after")
    assert set(eventually(lambda: by_name(watch.objects()), lambda j: "job-after" not in j)) == {"job-before"}


def test_a_resource_version_too_old_is_listed_again(api: k8s.ApiClient, emulator: EmulatorServer) -> None:
    watch = watch_of(api)
    eventually(watch.objects, lambda j: j is not None)
    listed = calls_made("list_jobs_to_watch")

    inject_fault(emulator, "GET", r"/jobs$", 410, "too old resource version", times=1)
    assert eventually(lambda: calls_made("list_jobs_to_watch"), lambda n: n > listed) == listed + 1
    KubernetesJobs(api, 5).create_job(NAMESPACE, job_manifest("job-later"))

    assert set(eventually(lambda: by_name(watch.objects()), lambda j: "job-later" in j)) == {"job-later"}
    assert watch.untold_failure() is None  # a 410 is no failure: the watch lists again


def test_a_watch_nobody_asks_for_stops(api: k8s.ApiClient) -> None:
    watch = watch_of(api, idle_seconds=1)
    assert eventually(lambda: watch.alive, lambda alive: not alive, seconds=10) is False


def test_list_jobs_answers_from_the_watch_and_still_fails_when_the_cluster_does_not_answer(
    api: k8s.ApiClient, emulator: EmulatorServer
) -> None:
    jobs = KubernetesJobs(api, 5, watch_seconds=1)
    jobs.create_job(NAMESPACE, job_manifest("job-a"))
    whole_lists = lists_made()
    assert [j.name for j in jobs.list_jobs(NAMESPACE, SELECTOR)] == ["job-a"]  # the watch's first list
    assert lists_made() == whole_lists and calls_made("list_jobs_to_watch") > 0

    jobs.create_job(NAMESPACE, job_manifest("job-b"))
    whole_lists, probes = lists_made(), calls_made("probe_jobs")
    listed = eventually(lambda: by_name(jobs.list_jobs(NAMESPACE, SELECTOR)), lambda j: len(j) == 2)
    assert set(listed) == {"job-a", "job-b"}
    assert lists_made() == whole_lists
    assert calls_made("probe_jobs") == probes  # a watch request a second: the API server spoke

    inject_fault(emulator, "GET", r"/jobs$", 503, "the API server is overloaded")
    assert eventually(lambda: fails(lambda: jobs.list_jobs(NAMESPACE, SELECTOR)), bool, seconds=5)


def test_a_watch_the_api_server_fell_silent_on_is_probed_beside_the_caller(
    api: k8s.ApiClient, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch request lasting 30 s on Jobs that do not change: nothing is heard on it, so a call
    sends a probe (one Job asked for) beside it and answers from the cache; once a probe failed,
    a call fails."""
    monkeypatch.setattr("falcon.adapters.k8s.HEARD_WITHIN_SECONDS", 0.2)
    jobs = KubernetesJobs(api, 5, watch_seconds=30)
    jobs.create_job(NAMESPACE, job_manifest("job-a"))
    assert eventually(lambda: answered_from_the_watch(jobs), bool)
    time.sleep(0.3)

    probes = calls_made("probe_jobs")
    assert [j.name for j in jobs.list_jobs(NAMESPACE, SELECTOR)] == ["job-a"]
    assert eventually(lambda: calls_made("probe_jobs"), lambda made: made == probes + 1) == probes + 1

    inject_fault(emulator, "GET", r"/jobs$", 503, "the API server is overloaded")
    time.sleep(0.3)
    assert eventually(lambda: fails(lambda: jobs.list_jobs(NAMESPACE, SELECTOR)), bool, seconds=5)


def test_a_cluster_that_hangs_holds_no_caller_and_is_told_after_the_timeout(
    api: k8s.ApiClient, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe the API server does not answer: calls go on answering from the cache, each at
    once, until the probe times out (1 s); then they fail."""
    monkeypatch.setattr("falcon.adapters.k8s.HEARD_WITHIN_SECONDS", 0.2)
    jobs = KubernetesJobs(api, 1, watch_seconds=30)
    jobs.create_job(NAMESPACE, job_manifest("job-a"))
    assert eventually(lambda: answered_from_the_watch(jobs), bool)
    rule = {"method": "GET", "pathRegex": r"/jobs$", "delaySeconds": 5, "times": None, "forSeconds": 10}
    httpx.post(f"{emulator.url}/emulator/faults", json={"rules": [rule]}).raise_for_status()
    time.sleep(0.3)

    calls: list[float] = []

    def fails_timed() -> bool:
        began = time.monotonic()
        try:
            return fails(lambda: jobs.list_jobs(NAMESPACE, SELECTOR))
        finally:
            calls.append(time.monotonic() - began)

    assert not fails_timed()  # answered from the cache; the probe hangs beside
    assert eventually(fails_timed, bool, seconds=5)  # told once the probe timed out
    assert max(calls) < 0.5


def test_pods_of_jobs_answers_from_the_pod_watch_once_it_is_in_step(api: k8s.ApiClient) -> None:
    """Pods created (and deleted) beside the round: the first call waits for the watch's list,
    and every call answers from the watch, which follows a pod added and one deleted."""
    jobs, core = KubernetesJobs(api, 5, watch_seconds=1), k8s.CoreV1Api(api)
    core.create_namespaced_pod(NAMESPACE, pod_manifest("job-a-0", "job-a"))
    lists = calls_made("list_pods")
    assert [p.name for p in jobs.pods_of_jobs(NAMESPACE, ["job-a"])] == ["job-a-0"]
    core.create_namespaced_pod(NAMESPACE, pod_manifest("job-b-0", "job-b"))
    core.create_namespaced_pod(NAMESPACE, pod_manifest("job-c-0", "job-c"))
    seen = eventually(
        lambda: pod_names(jobs, ["job-a", "job-b"]), lambda names: names == {"job-a-0", "job-b-0"}
    )
    assert seen == {"job-a-0", "job-b-0"}

    core.delete_namespaced_pod("job-a-0", NAMESPACE)
    assert eventually(lambda: pod_names(jobs, ["job-a", "job-b"]), lambda names: names == {"job-b-0"}) == {
        "job-b-0"
    }
    assert calls_made("list_pods") == lists


def test_a_pod_watch_that_fails_is_logged_once_and_its_callers_list_meanwhile(
    api: k8s.ApiClient, emulator: EmulatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    jobs, core = KubernetesJobs(api, 5, watch_seconds=1), k8s.CoreV1Api(api)
    core.create_namespaced_pod(NAMESPACE, pod_manifest("job-a-0", "job-a"))
    jobs.pods_of_jobs(NAMESPACE, ["job-a"])
    assert eventually(lambda: pods_answered_from_the_watch(jobs), bool)

    inject_fault(emulator, "GET", r"/pods$", 503, "the API server is overloaded", times=1)
    with caplog.at_level(logging.WARNING, logger="falcon.adapters.k8s"):
        told = eventually(lambda: poll_pods(jobs) and "event=pod_watch_failed" in caplog.text, bool)
        assert told and pod_names(jobs, ["job-a"]) == {"job-a-0"}
        assert eventually(lambda: pods_answered_from_the_watch(jobs), bool)  # in step again
    assert caplog.text.count("event=pod_watch_failed") == 1


def poll_pods(jobs: KubernetesJobs) -> bool:
    """A round's call for the pods of job-a (answered or listed: True)."""
    jobs.pods_of_jobs(NAMESPACE, ["job-a"])
    return True


def test_warning_events_answers_from_the_event_watch_once_it_is_in_step(api: k8s.ApiClient) -> None:
    """Warning events recorded beside the round: every call answers from the watch, which follows
    an event added and one deleted, keeps two events of one pod apart (an event is known by its
    own name) and leaves Normal events out."""
    jobs, core = KubernetesJobs(api, 5, watch_seconds=1), k8s.CoreV1Api(api)
    core.create_namespaced_event(NAMESPACE, event_manifest("e1", "job-a-0", "FailedMount"))
    lists = calls_made("list_events")
    assert warnings(jobs) == {("job-a-0", "FailedMount")}
    core.create_namespaced_event(NAMESPACE, event_manifest("e2", "job-a-0", "Failed"))
    core.create_namespaced_event(NAMESPACE, event_manifest("e3", "job-b-0", "Pulled", kind="Normal"))
    expected = {("job-a-0", "FailedMount"), ("job-a-0", "Failed")}
    assert eventually(lambda: warnings(jobs), lambda seen: seen == expected) == expected
    core.delete_namespaced_event("e1", NAMESPACE)
    assert eventually(lambda: warnings(jobs), lambda seen: seen == {("job-a-0", "Failed")}) == {
        ("job-a-0", "Failed")
    }
    assert calls_made("list_events") == lists


def test_a_starting_watch_whose_first_list_failed_leaves_its_caller_to_list(
    api: k8s.ApiClient, emulator: EmulatorServer
) -> None:
    jobs, core = KubernetesJobs(api, 5, watch_seconds=1), k8s.CoreV1Api(api)
    core.create_namespaced_pod(NAMESPACE, pod_manifest("job-a-0", "job-a"))
    inject_fault(emulator, "GET", r"/pods$", 503, "the API server is overloaded", times=1)
    lists = calls_made("list_pods")
    assert pod_names(jobs, ["job-a"]) == {"job-a-0"}  # the watch's list failed: the caller's own
    assert calls_made("list_pods") == lists + 1


def test_a_starting_watch_whose_first_list_hangs_fails_its_caller_after_the_timeout(
    api: k8s.ApiClient, emulator: EmulatorServer
) -> None:
    """The wait and the watch's own list end at the same timeout (1 s): whichever comes first, the
    caller fails, with the wait's error or with its own list's, after one or two timeouts."""
    jobs = KubernetesJobs(api, 1, watch_seconds=1)
    rule = {"method": "GET", "pathRegex": r"/pods$", "delaySeconds": 5, "times": None, "forSeconds": 4}
    httpx.post(f"{emulator.url}/emulator/faults", json={"rules": [rule]}).raise_for_status()
    began = time.monotonic()
    with pytest.raises(TemporaryError, match=r"no answer from the API server in 1 s|timed out"):
        jobs.pods_of_jobs(NAMESPACE, ["job-a"])
    assert 0.9 < time.monotonic() - began < 2.8


def test_listing_the_jobs_starts_the_pod_and_event_watches(api: k8s.ApiClient) -> None:
    """A dispatcher's first read of a cluster's pods or events waits for no list of them: the
    round's first Job list started their watches."""
    jobs, watch_lists = (
        KubernetesJobs(api, 5, watch_seconds=1),
        ("list_pods_to_watch", "list_events_to_watch"),
    )
    before = {call: calls_made(call) for call in watch_lists}
    jobs.list_jobs(NAMESPACE, SELECTOR)
    listed = {call: before[call] + 1 for call in watch_lists}
    assert eventually(lambda: {call: calls_made(call) for call in watch_lists}, listed.__eq__) == listed
    assert pods_answered_from_the_watch(jobs) and events_answered_from_the_watch(jobs)
    assert {call: calls_made(call) for call in watch_lists} == listed  # no second list of either


def test_the_pod_and_event_watches_live_while_the_jobs_are_listed(
    api: k8s.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round reads pods and events only now and then, but lists the Jobs every second: past
    the idle time, both watches still answer, as long as the Jobs were listed meanwhile."""
    monkeypatch.setattr(k8s_adapter, "WATCH_IDLE_SECONDS", 1.0)
    jobs = KubernetesJobs(api, 5, watch_seconds=1)
    jobs.list_jobs(NAMESPACE, SELECTOR)
    jobs.pods_of_jobs(NAMESPACE, ["job-a"])
    jobs.warning_events(NAMESPACE)
    assert eventually(
        lambda: pods_answered_from_the_watch(jobs) and events_answered_from_the_watch(jobs), bool
    )
    deadline = time.monotonic() + 3  # three idle times with no pod or event read
    while time.monotonic() < deadline:
        jobs.list_jobs(NAMESPACE, SELECTOR)
        time.sleep(0.1)
    assert pods_answered_from_the_watch(jobs) and events_answered_from_the_watch(jobs)


def event_manifest(name: str, pod: str, reason: str, kind: str = "Warning") -> k8s.CoreV1Event:
    return k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name=name),
        involved_object=k8s.V1ObjectReference(kind="Pod", name=pod, namespace=NAMESPACE),
        reason=reason,
        message=f"{reason} on {pod}",
        type=kind,
    )


def warnings(jobs: KubernetesJobs) -> set[tuple[str, str]]:
    return {(event.name, event.reason) for event in jobs.warning_events(NAMESPACE)}


def events_answered_from_the_watch(jobs: KubernetesJobs) -> bool:
    before = calls_made("list_events")
    jobs.warning_events(NAMESPACE)
    return calls_made("list_events") == before


def pod_manifest(name: str, job_name: str) -> k8s.V1Pod:
    """A pod of Falcon's Job ``job_name``, labelled as Falcon's Jobs label their pods (no node: it
    stays Pending)."""
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels={"managed-by": MANAGED_BY, TASK_LABEL: job_name}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="main", image="trainer:1")]),
    )


def pods_answered_from_the_watch(jobs: KubernetesJobs) -> bool:
    before = calls_made("list_pods")
    jobs.pods_of_jobs(NAMESPACE, ["job-a"])
    return calls_made("list_pods") == before


def pod_names(jobs: KubernetesJobs, job_names: list[str]) -> set[str]:
    return {pod.name for pod in jobs.pods_of_jobs(NAMESPACE, job_names)}


def fails(call: Callable[[], object]) -> bool:
    try:
        call()
    except TemporaryError:
        return True
    return False
