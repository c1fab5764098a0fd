"""The chaos replay at benchmark size: 1,000+ tasks over three clusters with API faults, aborts,
SIGKILLs of Falcon's process and a Prefect server restart (tests/chaos/run.py does the run and
the checks; tests/integration/test_chaos.py runs it at the suite's size).

Prints, per seed: tasks, final statuses, faults injected by kind, kills, restarts, time to drain
and to a clean fleet, and whether every invariant held (and which did not).

Run: .venv/bin/python benchmarks/bench_chaos.py [--tasks 1000 --seeds 1 --db mysql|sqlite --keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # tests/ and mysql_server.py

from mysql_server import mariadb  # noqa: E402
from tests.chaos.run import ChaosPlan, run_chaos  # noqa: E402

from falcon.adapters.db.migrate import upgrade  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--arrival-seconds", type=float, default=None, help="default: tasks / 4")
    parser.add_argument("--kills", type=int, default=8, help="SIGKILLs from outside (crashes come on top)")
    parser.add_argument("--db", choices=("mysql", "sqlite"), default="mysql")
    parser.add_argument("--keep", type=Path, default=None, help="keep each seed's logs in KEEP/seed-N")
    args = parser.parse_args()
    held = True
    for seed in args.seeds:
        plan = ChaosPlan(
            tasks=args.tasks,
            seed=seed,
            arrival_seconds=args.arrival_seconds or args.tasks / 4,
            outside_kills=args.kills,
            drain_seconds=1800,
        )
        with ExitStack() as stack:
            workdir = _workdir(stack, args.keep, seed)
            url = (
                stack.enter_context(mariadb()) if args.db == "mysql" else f"sqlite:///{workdir / 'falcon.db'}"
            )
            upgrade(url)
            report = run_chaos(plan, url, workdir)
        print("\n".join(report.lines()), flush=True)
        held = held and not any(report.violations.values())
    return 0 if held else 1


def _workdir(stack: ExitStack, keep: Path | None, seed: int) -> Path:
    """A seed's folder: kept under ``keep`` (to read Falcon's log of a run that broke), else temporary."""
    if keep is None:
        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="falcon-chaos-")))
    workdir = keep / f"seed-{seed}"
    workdir.mkdir(parents=True, exist_ok=False)
    return workdir


if __name__ == "__main__":
    sys.exit(main())
