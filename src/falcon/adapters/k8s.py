"""Kubernetes Jobs, Pods and Events on one edge cluster, through the official client.

The only module that talks to a cluster's Kubernetes API. Results come back as small frozen
dataclasses so the services never see client models.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any, TypeVar

from kubernetes import client as k8s

from falcon.adapters.errors import kubernetes_errors
from falcon.adapters.list_watch import ListWatch
from falcon.domain.errors import ConflictError
from falcon.domain.job_manifest import MANAGED_BY, TASK_ID_ANNOTATION, TASK_LABEL
from falcon.domain.workloads import ClusterEvent, FalconService, JobState, PodState

logger = logging.getLogger(__name__)
_Object = TypeVar("_Object", JobState, PodState, ClusterEvent)

WARNING = "type=Warning"  # the field selector of the events start_failure reads
POD_SELECTOR = f"managed-by={MANAGED_BY}"  # Falcon's pods

# A reconcile round names at most this many Jobs in its pod selector; it lists every Falcon pod
# past that (a ramp, when most Jobs start at once).
PODS_BY_NAME = 50

# A watch nobody asked for over this long stops (a round asks every second).
WATCH_IDLE_SECONDS = 30.0

# A watch the API server spoke on within this long answers list_jobs without a probe: at scale,
# where Jobs change every second, a round makes no call to know that a cluster answers.
HEARD_WITHIN_SECONDS = 2.0


class KubernetesJobs:
    def __init__(self, api_client: k8s.ApiClient, timeout: float, watch_seconds: int = 0) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._batch = k8s.BatchV1Api(api_client)
        self._timeout = timeout
        self._watch_seconds = watch_seconds  # 0: every list_jobs, pods_of_jobs and warning_events lists
        self._job_watches: dict[tuple[str, str], ListWatch[JobState]] = {}
        self._pod_watches: dict[tuple[str, str], ListWatch[PodState]] = {}
        self._event_watches: dict[tuple[str, str], ListWatch[ClusterEvent]] = {}
        self._watches_lock = threading.Lock()

    def ensure_namespace(self, namespace: str) -> None:
        body = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))
        try:
            with kubernetes_errors(f"create namespace {namespace}", "create_namespace"):
                self._core.create_namespace(body, _request_timeout=self._timeout)
        except ConflictError:
            pass

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> str:
        """Create the Job and return its uid; ConflictError if a Job of that name exists."""
        with kubernetes_errors(f"create Job {manifest['metadata']['name']}", "create_job"):
            # The manifest stays a plain dict (rendered by the pure core); the client serialises it.
            created = self._batch.create_namespaced_job(
                namespace,
                manifest,  # type: ignore[arg-type]
                _request_timeout=self._timeout,
            )
        return str(created.metadata.uid if created.metadata else "")

    def resume_job(self, namespace: str, name: str, uid: str) -> None:
        """Let the Job with this uid start its pods. The uid in the patch guards the write: if the
        name now belongs to another Job (one created late, after this one was deleted), the API
        server refuses it (422, uid is immutable), so a late copy is never resumed by mistake."""
        body = {"metadata": {"uid": uid}, "spec": {"suspend": False}}
        with kubernetes_errors(f"resume Job {name}", "resume_job"):
            self._batch.patch_namespaced_job(name, namespace, body, _request_timeout=self._timeout)

    def get_job(self, namespace: str, name: str) -> JobState:
        with kubernetes_errors(f"get Job {name}", "get_job"):
            response = self._batch.read_namespaced_job(
                name, namespace, _request_timeout=self._timeout, _preload_content=False
            )
            return _job_state(_json(response))

    def list_jobs(self, namespace: str, label_selector: str) -> list[JobState]:
        """Jobs are read as the API server's JSON, not the client's models: those cost about a
        millisecond per Job, which the dispatcher would pay for every running Job at every round.

        With ``watch_seconds``, a watch keeps them (``ListWatch``) and a call answers from it while
        it is in step. The round must still learn, as from a whole list, whether the cluster's
        API answers: from the watch when the API server spoke on it within
        ``HEARD_WITHIN_SECONDS``, else from a probe the watch sends beside the call (a failed
        probe is raised at a later call)."""
        watch = self._job_watch(namespace, label_selector)
        if watch is not None:
            self._watch_beside_jobs(namespace)
            watched = watch.objects(heard_within=HEARD_WITHIN_SECONDS)
            if watched is not None:
                return watched
            _log_failure(watch, "job_watch_failed", namespace)
        with kubernetes_errors(f"list Jobs in {namespace}", "list_jobs"):
            response = self._batch.list_namespaced_job(
                namespace,
                label_selector=label_selector,
                _request_timeout=self._timeout,
                _preload_content=False,
            )
            listed = _items(response)
        return [_job_state(item) for item in listed]

    def _watch_beside_jobs(self, namespace: str) -> None:
        """Start, or keep, the namespace's pod and event watches while its Jobs are followed. A
        round lists the Jobs every second but reads pods and events only while a Job has a pod not
        started: between such spells those watches stopped for want of use, and the next spell
        listed them whole (60-330 ms for a pod list at scale); and a dispatcher's first read of a
        cluster's pods waited for that list, seconds or tens of seconds after its start, in a round
        of its own. Started with the Jobs' watch, they have listed by the time they are read."""
        for watch in (self._pod_watch(namespace), self._warning_watch(namespace)):
            if watch is not None:
                watch.keep()

    def _job_watch(self, namespace: str, label_selector: str) -> ListWatch[JobState] | None:
        """The watch of these Jobs, started on first use and again once it stopped for want of use."""
        return self._watch(
            self._job_watches, self._batch.list_namespaced_job, "jobs", namespace, label_selector, _job_state
        )

    def _pod_watch(self, namespace: str) -> ListWatch[PodState] | None:
        """The watch of Falcon's pods in the namespace, as ``_job_watch``."""
        return self._watch(
            self._pod_watches, self._core.list_namespaced_pod, "pods", namespace, POD_SELECTOR, _pod_state
        )

    def _warning_watch(self, namespace: str) -> ListWatch[ClusterEvent] | None:
        """The watch of the namespace's Warning events, as ``_job_watch``."""
        return self._watch(
            self._event_watches, self._core.list_namespaced_event, "events", namespace, "", _event, WARNING
        )

    def _watch(
        self,
        watches: dict[tuple[str, str], ListWatch[_Object]],
        lister: Callable[..., Any],
        kind: str,
        namespace: str,
        label_selector: str,
        parse: Callable[[dict[str, Any]], _Object],
        field_selector: str = "",
    ) -> ListWatch[_Object] | None:
        if not self._watch_seconds:
            return None
        with self._watches_lock:
            key = (namespace, label_selector)
            watch = watches.get(key)
            if watch is None or not watch.alive:
                watch = watches[key] = ListWatch(
                    lister,
                    kind,
                    namespace,
                    label_selector,
                    parse,
                    self._timeout,
                    self._watch_seconds,
                    idle_seconds=WATCH_IDLE_SECONDS,
                    field_selector=field_selector,
                )
            return watch

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete the Job and its pods (Background: the batch/v1 default would orphan them)."""
        with kubernetes_errors(f"delete Job {name}", "delete_job"):
            self._batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _request_timeout=self._timeout
            )

    def ensure_service(self, namespace: str, manifest: dict[str, Any]) -> None:
        """Create the Service; one that exists already (an earlier attempt made it) is done."""
        try:
            with kubernetes_errors(f"create Service {manifest['metadata']['name']}", "create_service"):
                self._core.create_namespaced_service(
                    namespace,
                    manifest,  # type: ignore[arg-type]
                    _request_timeout=self._timeout,
                )
        except ConflictError:
            pass

    def delete_service(self, namespace: str, name: str) -> None:
        with kubernetes_errors(f"delete Service {name}", "delete_service"):
            self._core.delete_namespaced_service(name, namespace, _request_timeout=self._timeout)

    def falcon_services(self, namespace: str) -> list[FalconService]:
        with kubernetes_errors(f"list Services in {namespace}", "list_services"):
            found = self._core.list_namespaced_service(
                namespace, label_selector=f"managed-by={MANAGED_BY}", _request_timeout=self._timeout
            )
        return [_service(s) for s in found.items]

    def warning_events(self, namespace: str) -> list[ClusterEvent]:
        """Every Warning Event of the namespace. With ``watch_seconds``, from a watch of them
        while it is in step: the API server keeps an hour of events and a list reads them all,
        which made it the slowest call of a round at scale; otherwise in one call."""
        watch = self._warning_watch(namespace)
        watched = watch.objects() if watch is not None else None
        if watched is not None:
            return watched
        if watch is not None:
            _log_failure(watch, "event_watch_failed", namespace)
        with kubernetes_errors(f"list Warning events in {namespace}", "list_events"):
            response = self._core.list_namespaced_event(
                namespace,
                field_selector=WARNING,
                _request_timeout=self._timeout,
                _preload_content=False,
            )
            return [_event(e) for e in _items(response)]

    def pods_of_jobs(self, namespace: str, job_names: Collection[str]) -> list[PodState]:
        """The pods of these Jobs. A reconcile round reads them for its Jobs whose pods are not all
        ready. With ``watch_seconds``, from a watch of Falcon's pods while it is in step (a round
        then waits on no pod list); otherwise in one call (as JSON, like list_jobs) naming the
        Jobs (a set-based selector) rather than listing every Falcon pod; past PODS_BY_NAME Jobs,
        naming them would make a long URL for little gain, and every Falcon pod is listed."""
        names = set(job_names)
        if not names:
            return []
        watch = self._pod_watch(namespace)
        watched = watch.objects() if watch is not None else None
        if watched is not None:
            return [p for p in watched if p.job_name in names]
        if watch is not None:
            _log_failure(watch, "pod_watch_failed", namespace)
        selector = POD_SELECTOR
        if len(names) <= PODS_BY_NAME:
            selector += f",{TASK_LABEL} in ({','.join(sorted(names))})"
        pods = self._pods(namespace, selector, f"list pods in {namespace}", "list_pods")
        return [p for p in pods if p.job_name in names]

    def job_pods(self, namespace: str, job_name: str) -> list[PodState]:
        selector = f"batch.kubernetes.io/job-name={job_name}"
        return self._pods(namespace, selector, f"list pods of Job {job_name}", "list_job_pods")

    def _pods(self, namespace: str, label_selector: str, what: str, operation: str) -> list[PodState]:
        with kubernetes_errors(what, operation):
            response = self._core.list_namespaced_pod(
                namespace,
                label_selector=label_selector,
                _request_timeout=self._timeout,
                _preload_content=False,
            )
            return [_pod_state(p) for p in _items(response)]


def _log_failure(watch: ListWatch[Any], event: str, namespace: str) -> None:
    """Why a watch failed, once per failure: its callers list as before meanwhile."""
    failure = watch.untold_failure()
    if failure:
        logger.warning("event=%s namespace=%s error=%s listing=every_round", event, namespace, failure)


def _items(response: Any) -> list[dict[str, Any]]:
    """The items of a list response read with ``_preload_content=False``."""
    items: list[dict[str, Any]] = _json(response).get("items") or []
    return items


def _json(response: Any) -> dict[str, Any]:
    """The body of a response read with ``_preload_content=False`` (a urllib3 response)."""
    body: dict[str, Any] = json.loads(response.data)
    return body


def _job_state(job: dict[str, Any]) -> JobState:
    """What Falcon needs of a Job, from the API server's JSON.

    The outcome is read from the interim conditions too: since Kubernetes 1.31 the Job controller
    sets ``SuccessCriteriaMet`` / ``FailureTarget`` as soon as the outcome is decided and
    ``Complete`` / ``Failed`` only once every pod has terminated, a sync or more later. Falcon's
    Jobs set no success policy, so success means every pod succeeded: their nodes are free then."""
    metadata, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    failed = conditions.get("Failed") or conditions.get("FailureTarget")
    return JobState(
        name=metadata.get("name", ""),
        uid=metadata.get("uid") or "",
        parallelism=spec.get("parallelism") or 1,
        active=status.get("active") or 0,
        ready=status.get("ready") or 0,
        succeeded=status.get("succeeded") or 0,
        failed=status.get("failed") or 0,
        complete="Complete" in conditions or "SuccessCriteriaMet" in conditions,
        failed_condition=f"{failed.get('reason')}: {failed.get('message')}" if failed else None,
        task_id=(metadata.get("annotations") or {}).get("falcon.dev/task-id"),
        suspended=bool(spec.get("suspend")),
    )


def _pod_state(pod: dict[str, Any]) -> PodState:
    """What Falcon needs of a Pod, from the API server's JSON."""
    metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
    waiting, waiting_message = None, ""
    terminated: list[tuple[str, int]] = []
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        held = state.get("waiting") or {}
        if held.get("reason") not in (None, "ContainerCreating"):
            waiting, waiting_message = held["reason"], held.get("message") or ""
        ended = state.get("terminated") or {}
        if ended and ended.get("exitCode", 0) != 0:
            terminated.append((ended.get("reason") or "Error", ended["exitCode"]))
    unschedulable = next(
        (
            c.get("message")
            for c in status.get("conditions") or []
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        None,
    )
    return PodState(
        metadata.get("name", ""),
        status.get("phase") or "Pending",
        waiting,
        terminated,
        unschedulable,
        waiting_message,
        _timestamp(status.get("startTime")),
        (metadata.get("labels") or {}).get(TASK_LABEL),
    )


def _service(service: Any) -> FalconService:
    return FalconService(service.metadata.name, (service.metadata.annotations or {}).get(TASK_ID_ANNOTATION))


def _event(event: dict[str, Any]) -> ClusterEvent:
    involved = event.get("involvedObject") or {}
    return ClusterEvent(
        kind=involved.get("kind") or "",
        name=involved.get("name") or "",
        uid=involved.get("uid") or "",
        reason=event.get("reason") or "",
        message=event.get("message") or "",
        first_seen=_timestamp(
            event.get("firstTimestamp") or event.get("eventTime") or event.get("lastTimestamp")
        ),
    )


def _timestamp(text: str | None) -> datetime | None:
    """An RFC 3339 Time or MicroTime of the API server (``...Z``), as an aware datetime."""
    return datetime.fromisoformat(text) if text else None
