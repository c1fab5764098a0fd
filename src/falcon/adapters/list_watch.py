"""Falcon's Jobs (or pods, or the namespace's Warning events) on one cluster kept by a list and
then a watch, as an informer keeps its cache.

A reconcile round follows every running Job, and reads the pods of those not all ready and, when
they could decide, the Warning events. Listing them each round costs the API server and the
dispatcher's process a parse of every object (at a thousand Jobs, most of a round's time; an event
list reads every event the namespace kept in the last hour), and the round waits for each answer; a
watch sends only what changed. The cache is answered only while it is in step: after its list and
while its watch stands. A caller of a watch that is starting waits for its first list (a list of
its own beside it would cost the API server and this process the same list twice: at scale, the
slowest rounds after a dispatcher's start), and fails as a list would when that list does not come
within the call timeout. Whenever the cache is not in step otherwise (relisting after a 410 Gone,
the cluster's API in trouble, the first list failed), ``objects`` answers None and the caller lists
them itself, so that a cluster that does not answer is still seen not to answer. The watch also
tells when the API server last spoke on it (its list, a watch request answered, an event or a
bookmark). A caller may ask for ``objects`` heard within a moment; when the API server has been
silent longer (objects that do not change), the watch asks it for one object *beside* the caller,
which is answered from the cache meanwhile and told at a later call if that probe failed or went
unanswered: a round never waits on a probe, nor on a cluster that hangs. A watch that failed says
why once, to the next caller (``untold_failure``), which logs it.

Each watch request lasts ``watch_seconds`` (the API server ends it; the client's read timeout
is a little longer, never forever on a dead connection), then resumes from the last
resourceVersion seen, bookmarks included. A cache nobody asked for over ``idle_seconds`` stops:
a process that lists Jobs once (a test, a CLI) leaves no thread behind for long.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from falcon.adapters.errors import kubernetes_errors
from falcon.domain.errors import FalconError, TemporaryError
from falcon.domain.tidal import ResourceVersionGone

RETRY_SECONDS = 2.0  # after a failed list or watch, before listing again; doubled while it fails
RETRY_CAP_SECONDS = 30.0


_Object = TypeVar("_Object")


class ListWatch(Generic[_Object]):
    """The objects of one (namespace, label and field selector), by their name in the API, in
    step with the API server or not answered. ``lister`` is the client's namespaced list call
    (``BatchV1Api.list_namespaced_job``, ``CoreV1Api.list_namespaced_pod``), ``kind`` names them
    in errors and call metrics."""

    def __init__(
        self,
        lister: Callable[..., Any],
        kind: str,
        namespace: str,
        label_selector: str,
        parse: Callable[[dict[str, Any]], _Object],
        timeout: float,
        watch_seconds: int,
        idle_seconds: float,
        field_selector: str = "",
    ) -> None:
        self._lister, self._kind, self._namespace = lister, kind, namespace
        self._selectors = {"label_selector": label_selector} | (
            {"field_selector": field_selector} if field_selector else {}
        )
        self._parse, self._timeout, self._watch_seconds = parse, timeout, watch_seconds
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._listed = threading.Condition(self._lock)  # notified once the first list answered or failed
        self._objects: dict[str, _Object] = {}
        self._in_step = False
        self._first_list_over = False
        self._heard = -math.inf  # monotonic time the API server last answered or sent on the watch
        self._untold: str | None = None
        self._asked = time.monotonic()
        self._probing = False
        self._probe_failure: FalconError | None = None  # since the API server last spoke
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"{kind}-watch-{namespace}")
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def objects(self, heard_within: float = math.inf) -> list[_Object] | None:
        """Every object as the watch last saw it; None while the cache is not in step. A watch
        starting is waited for, until its first list is over (TemporaryError past the call timeout).

        The API server silent for over ``heard_within`` seconds: a probe is sent beside (one at a
        time) and the cache answered meanwhile; TemporaryError once a probe failed, or when the
        silence outlasts ``heard_within`` plus the call timeout (a probe that hangs)."""
        with self._lock:
            if not self._listed.wait_for(lambda: self._first_list_over, timeout=self._timeout):
                raise TemporaryError(f"{self._what}: no answer from the API server in {self._timeout:g} s")
            self._asked = now = time.monotonic()
            silent = now - self._heard
            if not self._in_step or silent <= heard_within:
                return list(self._objects.values()) if self._in_step else None
            if not self._probing:
                self._probing = True
                probe = threading.Thread(target=self._probe, daemon=True, name=f"{self._kind}-probe")
                probe.start()
            if self._probe_failure is not None:  # a new error each call: a raise grows its traceback
                raise type(self._probe_failure)(str(self._probe_failure))
            if silent > heard_within + self._timeout:
                raise TemporaryError(f"{self._what}: no answer from the API server in {silent:.0f} s")
            return list(self._objects.values())

    def keep(self) -> None:
        """Count as asked now, without asking: a caller that will want the cache again keeps it."""
        with self._lock:
            self._asked = time.monotonic()

    def untold_failure(self) -> str | None:
        """Why the watch last failed, once per failure: the caller logs it (this thread never does,
        as it may outlive the run that started it); None when nothing new failed."""
        with self._lock:
            failure, self._untold = self._untold, None
            return failure

    def _run(self) -> None:
        pause = RETRY_SECONDS
        while time.monotonic() - self._asked < self._idle_seconds:
            try:
                version = self._list()
                pause = RETRY_SECONDS
                while time.monotonic() - self._asked < self._idle_seconds:
                    version = self._watch(version)
            except ResourceVersionGone:
                self._step(False)
            except Exception as exc:  # the cluster's trouble: listed again after a pause
                with self._lock:
                    self._in_step, self._untold = False, f"{exc!r}"
                    self._first_list_over = True
                    self._listed.notify_all()
                time.sleep(pause)
                pause = min(pause * 2, RETRY_CAP_SECONDS)
        self._step(False)

    @property
    def _what(self) -> str:
        return f"list {self._kind} in {self._namespace}"

    def _step(self, in_step: bool, objects: dict[str, _Object] | None = None) -> None:
        with self._lock:
            self._in_step = in_step
            if objects is not None:
                self._objects = objects
                self._heard, self._probe_failure = time.monotonic(), None
                self._first_list_over = True
                self._listed.notify_all()

    def _hear(self) -> None:
        with self._lock:
            self._heard, self._probe_failure = time.monotonic(), None

    def _probe(self) -> None:
        """Ask the API server for one object: a fraction of a list's bytes, to know that it answers."""
        failure = None
        try:
            with kubernetes_errors(self._what, f"probe_{self._kind}"):
                response: Any = self._lister(
                    self._namespace,
                    **self._selectors,
                    limit=1,
                    _request_timeout=self._timeout,
                    _preload_content=False,
                )
                response.read()  # the whole answer: the API server answered
            self._hear()
        except FalconError as exc:
            failure = exc
        finally:
            with self._lock:
                self._probing = False
                self._probe_failure = failure or self._probe_failure

    def _list(self) -> str:
        with kubernetes_errors(self._what, f"list_{self._kind}_to_watch"):
            response: Any = self._lister(
                self._namespace,
                **self._selectors,
                _request_timeout=self._timeout,
                _preload_content=False,
            )
            listed = json.loads(response.data)
        self._step(True, {_name(item): self._parse(item) for item in listed.get("items") or []})
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        """One watch request from ``version``; the last resourceVersion it saw."""
        for kind, obj in self._events(version):
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            one = self._parse(obj)
            with self._lock:
                if kind == "DELETED":
                    self._objects.pop(_name(obj), None)
                else:
                    self._objects[_name(obj)] = one
        return version

    def _events(self, version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        try:
            response: Any = self._lister(
                self._namespace,
                **self._selectors,
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_seconds,
                _request_timeout=(self._timeout, self._watch_seconds + self._timeout),
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise ResourceVersionGone(version) from exc
            raise
        self._hear()  # the request was answered
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                self._hear()  # an event, a bookmark or a keep-alive
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise ResourceVersionGone(version)
                    raise RuntimeError(f"watch {self._kind} in {self._namespace}: {obj.get('message')}")
                yield kind, obj
        finally:
            response.close()
            response.release_conn()


def _name(obj: dict[str, Any]) -> str:
    """An object's name in the API (an Event's is its own, not its involved object's)."""
    return str((obj.get("metadata") or {}).get("name") or "")
