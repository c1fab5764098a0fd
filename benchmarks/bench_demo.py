"""Time `falcon demo` from start to all tasks done, and the peak memory of the whole stack.

The stack is the demo process (emulator thread), the Prefect server, `falcon local` (the
runner) and one process per running flow run; RSS is summed over that process tree every 0.5 s.

    .venv/bin/python benchmarks/bench_demo.py [--tasks 6]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def tree_rss(root: psutil.Process) -> tuple[int, int]:
    procs = [root]
    try:
        procs += root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total, len(procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "FALCON_"))}
        env["FALCON_HOME"] = home
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "falcon.cli", "demo", "--tasks", str(args.tasks)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        root = psutil.Process(proc.pid)
        peak_rss, peak_procs = 0, 0
        while proc.poll() is None:
            rss, count = tree_rss(root)
            peak_rss, peak_procs = max(peak_rss, rss), max(peak_procs, count)
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        output = proc.stdout.read() if proc.stdout else ""
    finished = next((line for line in output.splitlines() if line.startswith("all tasks finished")), "")
    print(f"tasks: {args.tasks}   exit code: {proc.returncode}")
    print(f"demo wall time (start to exit): {elapsed:.1f} s   [{finished}]")
    print(f"peak RSS of the stack: {peak_rss / 2**20:.0f} MiB over at most {peak_procs} processes")


if __name__ == "__main__":
    main()
