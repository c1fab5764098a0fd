"""What the benchmarks that time database reads share: a throwaway database of either kind, and
the median and p90 of repeated reads."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mysql_server import mariadb

from falcon.adapters.db.session import read_scope, session_scope


@contextmanager
def database(kind: str) -> Iterator[str]:
    """The URL of a throwaway MariaDB (``kind`` "mariadb") or SQLite file, gone on exit."""
    if kind == "mariadb":
        with mariadb() as url:
            yield url
    else:
        with tempfile.TemporaryDirectory() as d:
            yield f"sqlite:///{Path(d) / 'bench.db'}"


def timed(read: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median and p90 of ``repeat`` reads, in ms."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        read()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), statistics.quantiles(times, n=10)[-1]


def timed_in_transactions(url: str, read: Callable[[Any], object], repeat: int) -> tuple[float, float]:
    """Median and p90 of ``repeat`` reads, each given a session of its own transaction, in ms."""

    def in_a_transaction() -> None:
        with session_scope(url) as session:
            read(session)

    return timed(in_a_transaction, repeat)


def timed_in_reads(url: str, read: Callable[[Any], object], repeat: int) -> tuple[float, float]:
    """Median and p90 of ``repeat`` reads, each given a session outside a transaction
    (``read_scope``: as Falcon makes a read of one statement), in ms."""

    def outside_a_transaction() -> None:
        with read_scope(url) as session:
            read(session)

    return timed(outside_a_transaction, repeat)
