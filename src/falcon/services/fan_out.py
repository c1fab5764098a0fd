"""How a loop runs independent pieces of work: one after another or at once, answered in order."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from functools import partial
from typing import Protocol, TypeVar

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


class FanOut(Protocol):
    """How a loop runs independent pieces of work (a cluster's Jobs, its GKE calls, a queue's
    pick): one after another (``map``, the default) or at once (the dispatcher's threads),
    answered in order. Each piece waits mostly on the database and an API server, so running
    them at once overlaps waits."""

    def __call__(self, work: Callable[[_Item], _Result], items: Iterable[_Item], /) -> Iterator[_Result]: ...


def fan_out_on(threads: Executor) -> FanOut:
    """``FanOut`` on ``threads``, each piece in a copy of the caller's context (its logs reach the
    same flow run)."""

    def fan_out(work: Callable[[_Item], _Result], items: Iterable[_Item], /) -> Iterator[_Result]:
        runs = [partial(contextvars.copy_context().run, work, item) for item in items]
        return threads.map(lambda run: run(), runs)

    return fan_out
