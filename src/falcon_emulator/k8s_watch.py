"""Watch streams: NDJSON events, resume from resourceVersion, 410 Expired, timeouts, bookmarks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.datastructures import QueryParams
from starlette.responses import StreamingResponse

from falcon_emulator.errors import kube_error
from falcon_emulator.selectors import SelectorError, parse_field_selector, parse_label_selector
from falcon_emulator.state import ClusterState, EmulatorState
from falcon_emulator.store import KubeError, KubeStore, ResourceType, Watcher
from falcon_emulator.util import JSON


def _since(params: QueryParams) -> int | None:
    value = params.get("resourceVersion")
    if value in (None, "", "0"):
        return None
    if not value.isdigit():
        raise kube_error(400, f"invalid resource version: {value!r}")
    return int(value)


def open_watch(
    state: EmulatorState, cluster: ClusterState, rt: ResourceType, namespace: str | None, params: QueryParams
) -> StreamingResponse:
    """Register the watcher now (under the state lock) and stream its events afterwards."""
    try:
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"))
    except SelectorError as exc:
        raise kube_error(400, str(exc)) from exc
    watcher = Watcher(rt.key, namespace, labels, fields)
    timeout = float(params.get("timeoutSeconds") or state.config.watch_max_seconds)
    bookmarks = params.get("allowWatchBookmarks") in ("true", "1", "True")
    try:
        cluster.store.open_watch(watcher, _since(params))
    except KubeError as error:
        if error.code != 410:
            raise
        return StreamingResponse(_single(error.status()), media_type="application/json")
    stream = _stream(
        state, cluster.store, watcher, rt, min(timeout, state.config.watch_max_seconds), bookmarks
    )
    return StreamingResponse(stream, media_type="application/json")


async def _single(status: JSON) -> AsyncIterator[bytes]:
    yield _line("ERROR", status)


def _line(kind: str, obj: JSON) -> bytes:
    return (json.dumps({"type": kind, "object": obj}) + "\n").encode()


async def _stream(
    state: EmulatorState,
    store: KubeStore,
    watcher: Watcher,
    rt: ResourceType,
    timeout: float,
    bookmarks: bool,
) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    interval = state.config.watch_bookmark_seconds
    try:
        while (remaining := deadline - loop.time()) > 0:
            try:
                item = await asyncio.wait_for(watcher.queue.get(), timeout=min(remaining, interval))
            except TimeoutError:
                if bookmarks and remaining > interval:
                    meta = {"resourceVersion": str(state.versions.current)}
                    yield _line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})
                continue
            if item is None:
                return
            yield _line(*item)
    finally:
        with state.lock:
            store.close_watch(watcher)
