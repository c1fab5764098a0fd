"""What a flow run costs the dispatcher's process beyond its steps: CPU and wall time per run.

Falcon runs each task's lifecycle and release as a Prefect flow run in the dispatcher's own
threads (ThreadLauncher). A flow run left to Prefect's defaults builds a client of its own: an
httpx client with a TLS context (the CA bundle loaded, even for an http:// API) and a new
connection to the server. ThreadLauncher's threads each keep one client for all their runs.

Two arms, alternated over --rounds on one throwaway Prefect server (Prefect's test harness, on
SQLite as `falcon local` keeps it, as bench_pool_economics.py runs it): **launcher** (runs
through ThreadLauncher, one thread) and **per-run clients** (the same flow called in one plain
thread, as a run is called without ThreadLauncher: Prefect opens a client per run). The flow
does nothing, so what is measured is the run's own overhead: this process's CPU time (every
thread's, Prefect's background workers included) and the wall time, divided by the runs. The
server's own CPU is not counted.

Run:  .venv/bin/python benchmarks/bench_run_overhead.py [--runs 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime

from prefect import flow
from prefect.testing.utilities import prefect_test_harness

from falcon.adapters.runs import ThreadLauncher


@flow(name="falcon-bench-empty-run")
def empty_run(task_id: str, lease_id: str) -> None:
    """A lifecycle run's signature, no steps."""


class NoOwners:
    """The launcher's heartbeats go nowhere: one launcher, no second dispatcher to tell."""

    def beat(self, owner: str, now: datetime) -> None:
        pass

    def last_beat(self, owner: str) -> datetime | None:
        return None


def through_launcher(runs: int) -> None:
    launcher = ThreadLauncher((empty_run,) * 3, 1, NoOwners())
    ids = [launcher.start_acquire(f"t{n}", "", 1) for n in range(runs)]
    while any(launcher.is_alive(run) for run in ids):
        time.sleep(0.01)
    launcher.stop(5)


def per_run_clients(runs: int) -> None:
    thread = threading.Thread(target=lambda: [empty_run(f"t{n}", "") for n in range(runs)])
    thread.start()
    thread.join()


ARMS: dict[str, Callable[[int], None]] = {"launcher": through_launcher, "per-run clients": per_run_clients}


def measure(arm: Callable[[int], None], runs: int) -> tuple[float, float]:
    """(CPU ms, wall ms) of this process per run."""
    cpu, wall = time.process_time(), time.perf_counter()
    arm(runs)
    return (time.process_time() - cpu) * 1000 / runs, (time.perf_counter() - wall) * 1000 / runs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=40, help="flow runs per arm and round (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the arms alternated (%(default)s)")
    args = parser.parse_args()
    with prefect_test_harness(server_startup_timeout=120):
        for arm in ARMS.values():
            arm(5)  # warm up: imports, the first connection, the flow registered
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in ARMS}
        for _ in range(args.rounds):
            for name, arm in ARMS.items():
                results[name].append(measure(arm, args.runs))
    print(f"{args.runs} empty flow runs per arm and round, {args.rounds} rounds; this process only")
    print(f"{'arm':<18}{'CPU ms/run, median':>20}{'rounds':>26}{'wall ms/run, median':>22}")
    for name, rows in results.items():
        cpus, walls = [c for c, _ in rows], [w for _, w in rows]
        each = " / ".join(f"{c:.1f}" for c in cpus)
        print(f"{name:<18}{statistics.median(cpus):>20.1f}{each:>26}{statistics.median(walls):>22.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
